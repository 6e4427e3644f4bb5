package metrics

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/engine"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// Namespace is the CloudWatch namespace of every OJS metric.
const Namespace = "OJS"

// Dimension names. Environment is the deployment (topology environment
// name, OJS_ENV); Queue the OJS queue name.
const (
	DimensionEnvironment = "Environment"
	DimensionQueue       = "Queue"
)

// Metric names (see the package documentation for their meaning).
const (
	JobsEnqueued  = "JobsEnqueued"
	JobsStarted   = "JobsStarted"
	JobsCompleted = "JobsCompleted"
	JobsFailed    = "JobsFailed"
	JobsDiscarded = "JobsDiscarded"
	JobWaitTime   = "JobWaitTime"
	JobDuration   = "JobDuration"
	JobLatency    = "JobLatency"
)

// Counts lists the count metrics in the order they are written.
var Counts = []string{JobsEnqueued, JobsStarted, JobsCompleted, JobsFailed, JobsDiscarded}

// Latencies lists the millisecond metrics in the order they are written.
var Latencies = []string{JobWaitTime, JobDuration, JobLatency}

// MaxValues is the most values one EMF document may carry for a metric;
// longer latency lists are split over several documents.
const MaxValues = 100

// DefaultEnvironment is the Environment dimension when none is configured.
const DefaultEnvironment = "default"

// QueueStats is what one batch did on one queue.
type QueueStats struct {
	// Counts by metric name (JobsEnqueued, ...).
	Counts map[string]int
	// Latencies by metric name (JobWaitTime, ...), in milliseconds, in the
	// order the changes came.
	Latencies map[string][]float64
}

// Batch aggregates job changes per queue. The zero value is empty and
// ready to use; a Batch is not safe for concurrent use.
type Batch struct {
	queues map[string]*QueueStats
}

func (b *Batch) queue(name string) *QueueStats {
	if b.queues == nil {
		b.queues = map[string]*QueueStats{}
	}
	q, ok := b.queues[name]
	if !ok {
		q = &QueueStats{Counts: map[string]int{}, Latencies: map[string][]float64{}}
		b.queues[name] = q
	}
	return q
}

// Add records one stream change. Changes that are not job state changes
// (workflow nodes, queues, cron, events, a heartbeat that only renews a
// lease, deletions) are ignored.
func (b *Batch) Add(c engine.Change) {
	if c.New == nil || c.New.Job == nil {
		return
	}
	cur := c.New.Job
	var from job.State
	if c.Old != nil && c.Old.Job != nil {
		from = c.Old.Job.State
	}
	if from == cur.State {
		return
	}
	q := b.queue(cur.Queue)
	if from == "" {
		q.Counts[JobsEnqueued]++
	}
	switch cur.State {
	case job.Active:
		q.Counts[JobsStarted]++
		q.latency(JobWaitTime, cur.EnqueuedAt, cur.StartedAt)
	case job.Completed:
		q.Counts[JobsCompleted]++
		q.latency(JobDuration, cur.StartedAt, cur.CompletedAt)
		q.latency(JobLatency, cur.EnqueuedAt, cur.CompletedAt)
	case job.Discarded:
		q.Counts[JobsDiscarded]++
	}
	if from == job.Active {
		switch cur.State {
		case job.Retryable, job.Discarded, job.Available:
			q.Counts[JobsFailed]++
		}
	}
}

func (q *QueueStats) latency(name string, from, to *time.Time) {
	if from == nil || to == nil || to.Before(*from) {
		return
	}
	q.Latencies[name] = append(q.Latencies[name], float64(to.Sub(*from).Milliseconds()))
}

// Queues returns the queues the batch touched, sorted.
func (b *Batch) Queues() []string {
	return slices.Sorted(maps.Keys(b.queues))
}

// Stats returns what the batch recorded for queue (nil if nothing).
func (b *Batch) Stats(queue string) *QueueStats { return b.queues[queue] }

// Documents renders the batch as EMF documents (one JSON object each): one
// per queue, plus one more per further MaxValues latency values. env is
// the Environment dimension and at the metrics' timestamp.
func (b *Batch) Documents(env string, at time.Time) [][]byte {
	env = cmp.Or(env, DefaultEnvironment)
	var out [][]byte
	for _, name := range b.Queues() {
		q := b.queues[name]
		for part := 0; ; part++ {
			doc := map[string]any{
				DimensionEnvironment: env,
				DimensionQueue:       name,
				"level":              "INFO",
				"msg":                "job metrics",
			}
			var defs []map[string]string
			if part == 0 {
				for _, m := range Counts {
					if n := q.Counts[m]; n > 0 {
						doc[m] = n
						defs = append(defs, map[string]string{"Name": m, "Unit": "Count"})
					}
				}
			}
			more := false
			for _, m := range Latencies {
				vs := q.Latencies[m]
				lo, hi := part*MaxValues, (part+1)*MaxValues
				if lo >= len(vs) {
					continue
				}
				more = more || hi < len(vs)
				doc[m] = vs[lo:min(hi, len(vs))]
				defs = append(defs, map[string]string{"Name": m, "Unit": "Milliseconds"})
			}
			if len(defs) > 0 {
				doc["_aws"] = map[string]any{
					"Timestamp": at.UnixMilli(),
					"CloudWatchMetrics": []any{map[string]any{
						"Namespace":  Namespace,
						"Dimensions": [][]string{{DimensionEnvironment, DimensionQueue}, {DimensionEnvironment}},
						"Metrics":    defs,
					}},
				}
				line, _ := json.Marshal(doc) // only strings, numbers and slices of them
				out = append(out, line)
			}
			if !more {
				break
			}
		}
	}
	return out
}

// Emitter writes EMF lines. Its zero value is not usable: W is required.
type Emitter struct {
	// W receives one line per document (the function's stdout, which
	// Lambda sends to its CloudWatch log group).
	W io.Writer
	// Environment is the Environment dimension. Default DefaultEnvironment.
	Environment string
	// Now is the clock for the metrics' timestamp. Default time.Now.
	Now func() time.Time

	mu sync.Mutex
}

// Emit aggregates changes and writes their documents, each line with one
// Write call. It returns the first write error.
func (e *Emitter) Emit(changes []engine.Change) error {
	var b Batch
	for _, c := range changes {
		b.Add(c)
	}
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	docs := b.Documents(e.Environment, now())
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range docs {
		if _, err := e.W.Write(append(d, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// Processor processes a batch of stream changes and returns the index of
// the first change to retry (or -1) and the error; *engine.Engine is one.
type Processor interface {
	Process(ctx context.Context, changes []engine.Change) (int, error)
}

var _ Processor = (*engine.Engine)(nil)

// Wrap returns a Processor that runs p and then emits the metrics of the
// changes p finished: all of them on success, those before the first
// failed one otherwise (the mapping delivers that one and the rest again).
// A write error is ignored: metrics never fail a batch.
func Wrap(p Processor, e *Emitter) Processor {
	return &observed{p: p, e: e}
}

type observed struct {
	p Processor
	e *Emitter
}

func (o *observed) Process(ctx context.Context, changes []engine.Change) (int, error) {
	idx, err := o.p.Process(ctx, changes)
	done := changes
	if err != nil {
		done = nil
		if idx > 0 && idx <= len(changes) {
			done = changes[:idx]
		}
	}
	_ = o.e.Emit(done)
	return idx, err
}
