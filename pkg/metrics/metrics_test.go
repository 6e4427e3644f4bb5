package metrics

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/engine"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) *time.Time {
	t := t0.Add(time.Duration(ms) * time.Millisecond)
	return &t
}

// jobIn returns a job item on queue in state s with the given timestamps
// (milliseconds after t0; negative means unset).
func jobIn(queue string, s job.State, enqueued, started, completed int) *store.Item {
	j := &job.Job{ID: "j", Type: "t", Queue: queue, State: s}
	if enqueued >= 0 {
		j.EnqueuedAt = at(enqueued)
	}
	if started >= 0 {
		j.StartedAt = at(started)
	}
	if completed >= 0 {
		j.CompletedAt = at(completed)
	}
	return &store.Item{Job: j}
}

func change(old, cur *store.Item) engine.Change { return engine.Change{Old: old, New: cur} }

func TestBatchAdd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		change     engine.Change
		counts     map[string]int
		latencies  map[string][]float64
		noActivity bool
	}{
		{name: "insert available", change: change(nil, jobIn("q", job.Available, 0, -1, -1)),
			counts: map[string]int{JobsEnqueued: 1}},
		{name: "insert scheduled", change: change(nil, jobIn("q", job.Scheduled, -1, -1, -1)),
			counts: map[string]int{JobsEnqueued: 1}},
		{name: "scheduled becomes available is not a new job", change: change(jobIn("q", job.Scheduled, -1, -1, -1), jobIn("q", job.Available, 0, -1, -1)),
			counts: map[string]int{}},
		{name: "claim", change: change(jobIn("q", job.Available, 0, -1, -1), jobIn("q", job.Active, 0, 250, -1)),
			counts: map[string]int{JobsStarted: 1}, latencies: map[string][]float64{JobWaitTime: {250}}},
		{name: "complete", change: change(jobIn("q", job.Active, 0, 250, -1), jobIn("q", job.Completed, 0, 250, 1250)),
			counts: map[string]int{JobsCompleted: 1}, latencies: map[string][]float64{JobDuration: {1000}, JobLatency: {1250}}},
		{name: "attempt fails, retried", change: change(jobIn("q", job.Active, 0, 5, -1), jobIn("q", job.Retryable, 0, 5, 9)),
			counts: map[string]int{JobsFailed: 1}},
		{name: "attempt fails, discarded", change: change(jobIn("q", job.Active, 0, 5, -1), jobIn("q", job.Discarded, 0, 5, 9)),
			counts: map[string]int{JobsFailed: 1, JobsDiscarded: 1}},
		{name: "lease lost", change: change(jobIn("q", job.Active, 0, 5, -1), jobIn("q", job.Available, 10, -1, -1)),
			counts: map[string]int{JobsFailed: 1}},
		{name: "expired while waiting", change: change(jobIn("q", job.Available, 0, -1, -1), jobIn("q", job.Discarded, 0, -1, -1)),
			counts: map[string]int{JobsDiscarded: 1}},
		{name: "cancelled", change: change(jobIn("q", job.Available, 0, -1, -1), jobIn("q", job.Cancelled, 0, -1, -1)),
			counts: map[string]int{}},
		{name: "heartbeat", change: change(jobIn("q", job.Active, 0, 5, -1), jobIn("q", job.Active, 0, 5, -1)), noActivity: true},
		{name: "deleted", change: change(jobIn("q", job.Discarded, 0, 5, 9), nil), noActivity: true},
		{name: "workflow node", change: engine.Change{NewNode: &wfstore.Composite{}}, noActivity: true},
		{name: "clock went backwards: no latency", change: change(jobIn("q", job.Available, 500, -1, -1), jobIn("q", job.Active, 500, 100, -1)),
			counts: map[string]int{JobsStarted: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b Batch
			b.Add(tc.change)
			if tc.noActivity {
				if qs := b.Queues(); len(qs) != 0 {
					t.Fatalf("queues %v, want none", qs)
				}
				return
			}
			st := b.Stats("q")
			if st == nil {
				t.Fatal("no stats for queue q")
			}
			if !reflect.DeepEqual(st.Counts, tc.counts) {
				t.Errorf("counts %v, want %v", st.Counts, tc.counts)
			}
			want := tc.latencies
			if want == nil {
				want = map[string][]float64{}
			}
			if !reflect.DeepEqual(st.Latencies, want) {
				t.Errorf("latencies %v, want %v", st.Latencies, want)
			}
		})
	}
}

// emf is the part of an EMF document the tests read.
type emf struct {
	AWS struct {
		Timestamp         int64
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	} `json:"_aws"`
}

// parseEMF decodes one line, checks it against the EMF specification's
// rules (metadata present, every declared metric and dimension a top-level
// member of the right kind, at most 100 values per metric, at most 30
// dimensions per set) and returns the metadata and the whole object.
func parseEMF(t *testing.T, line []byte) (emf, map[string]any) {
	t.Helper()
	var meta emf
	var all map[string]any
	if err := json.Unmarshal(line, &meta); err != nil {
		t.Fatalf("not JSON: %v: %s", err, line)
	}
	if err := json.Unmarshal(line, &all); err != nil {
		t.Fatal(err)
	}
	if meta.AWS.Timestamp == 0 || len(meta.AWS.CloudWatchMetrics) != 1 {
		t.Fatalf("bad _aws metadata: %s", line)
	}
	d := meta.AWS.CloudWatchMetrics[0]
	if d.Namespace != Namespace {
		t.Errorf("namespace %q", d.Namespace)
	}
	for _, set := range d.Dimensions {
		if len(set) > 30 {
			t.Errorf("dimension set of %d", len(set))
		}
		for _, dim := range set {
			if s, ok := all[dim].(string); !ok || s == "" {
				t.Errorf("dimension %s is not a non-empty top-level string: %v", dim, all[dim])
			}
		}
	}
	for _, m := range d.Metrics {
		switch v := all[m.Name].(type) {
		case float64:
		case []any:
			if len(v) == 0 || len(v) > MaxValues {
				t.Errorf("metric %s has %d values", m.Name, len(v))
			}
		default:
			t.Errorf("metric %s is %T, want a number or a list of numbers", m.Name, all[m.Name])
		}
		if m.Unit != "Count" && m.Unit != "Milliseconds" {
			t.Errorf("metric %s unit %q", m.Name, m.Unit)
		}
	}
	return meta, all
}

func TestEmitWritesOneEMFLinePerQueue(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	e := &Emitter{W: &out, Environment: "prod", Now: func() time.Time { return t0 }}
	changes := []engine.Change{
		change(nil, jobIn("email", job.Available, 0, -1, -1)),
		change(nil, jobIn("email", job.Available, 0, -1, -1)),
		change(jobIn("email", job.Active, 0, 10, -1), jobIn("email", job.Completed, 0, 10, 30)),
		change(jobIn("lambda", job.Available, 0, -1, -1), jobIn("lambda", job.Active, 0, 7, -1)),
		{NewNode: &wfstore.Composite{}},
	}
	if err := e.Emit(changes); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one per queue:\n%s", len(lines), out.String())
	}
	meta, email := parseEMF(t, []byte(lines[0]))
	if meta.AWS.Timestamp != t0.UnixMilli() {
		t.Errorf("timestamp %d", meta.AWS.Timestamp)
	}
	wantDims := [][]string{{DimensionEnvironment, DimensionQueue}, {DimensionEnvironment}}
	if got := meta.AWS.CloudWatchMetrics[0].Dimensions; !reflect.DeepEqual(got, wantDims) {
		t.Errorf("dimensions %v, want %v", got, wantDims)
	}
	var names []string
	for _, m := range meta.AWS.CloudWatchMetrics[0].Metrics {
		names = append(names, m.Name)
	}
	if want := []string{JobsEnqueued, JobsCompleted, JobDuration, JobLatency}; !reflect.DeepEqual(names, want) {
		t.Errorf("email metrics %v, want %v", names, want)
	}
	if email["Queue"] != "email" || email["Environment"] != "prod" || email[JobsEnqueued] != 2.0 || email[JobsCompleted] != 1.0 {
		t.Errorf("email document %v", email)
	}
	if !reflect.DeepEqual(email[JobLatency], []any{30.0}) || !reflect.DeepEqual(email[JobDuration], []any{20.0}) {
		t.Errorf("email latencies %v %v", email[JobLatency], email[JobDuration])
	}
	_, lambda := parseEMF(t, []byte(lines[1]))
	if lambda["Queue"] != "lambda" || lambda[JobsStarted] != 1.0 || !reflect.DeepEqual(lambda[JobWaitTime], []any{7.0}) {
		t.Errorf("lambda document %v", lambda)
	}
	if _, ok := lambda[JobsCompleted]; ok {
		t.Error("a metric with nothing to report is written")
	}
}

func TestEmitSplitsLongLatencyLists(t *testing.T) {
	t.Parallel()
	var changes []engine.Change
	for i := 0; i < 2*MaxValues+5; i++ {
		changes = append(changes, change(jobIn("q", job.Active, 0, 1, -1), jobIn("q", job.Completed, 0, 1, i+1)))
	}
	var out bytes.Buffer
	if err := (&Emitter{W: &out}).Emit(changes); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	var docs []map[string]any
	for sc.Scan() {
		_, d := parseEMF(t, sc.Bytes())
		docs = append(docs, d)
	}
	if len(docs) != 3 {
		t.Fatalf("%d documents, want 3", len(docs))
	}
	if docs[0][JobsCompleted] != float64(2*MaxValues+5) {
		t.Errorf("count %v", docs[0][JobsCompleted])
	}
	total := 0
	for i, d := range docs {
		if i > 0 {
			if _, ok := d[JobsCompleted]; ok {
				t.Errorf("document %d repeats the count", i)
			}
		}
		if d["Environment"] != DefaultEnvironment {
			t.Errorf("environment %v", d["Environment"])
		}
		total += len(d[JobLatency].([]any))
	}
	if total != 2*MaxValues+5 {
		t.Errorf("%d latency values written, want %d", total, 2*MaxValues+5)
	}
}

func TestEmitWritesNothingForNoJobChanges(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := (&Emitter{W: &out}).Emit([]engine.Change{{NewNode: &wfstore.Composite{}}, change(jobIn("q", job.Active, 0, 1, -1), jobIn("q", job.Active, 0, 1, -1))}); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("wrote %q", out.String())
	}
}

type stubProcessor struct {
	idx int
	err error
}

func (s stubProcessor) Process(context.Context, []engine.Change) (int, error) { return s.idx, s.err }

// TestWrapCountsOnlyFinishedChanges: a failed batch is counted up to its
// first failed change; the mapping redelivers that change and the rest.
func TestWrapCountsOnlyFinishedChanges(t *testing.T) {
	t.Parallel()
	changes := []engine.Change{
		change(nil, jobIn("q", job.Available, 0, -1, -1)),
		change(nil, jobIn("q", job.Available, 0, -1, -1)),
		change(nil, jobIn("q", job.Available, 0, -1, -1)),
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		p    stubProcessor
		want float64
	}{
		{"success", stubProcessor{idx: -1}, 3},
		{"third failed", stubProcessor{idx: 2, err: boom}, 2},
		{"first failed", stubProcessor{idx: 0, err: boom}, 0},
		{"failed without index", stubProcessor{idx: -1, err: boom}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			idx, err := Wrap(tc.p, &Emitter{W: &out}).Process(context.Background(), changes)
			if idx != tc.p.idx || !errors.Is(err, tc.p.err) {
				t.Fatalf("Process = %d, %v; want the wrapped processor's %d, %v", idx, err, tc.p.idx, tc.p.err)
			}
			if tc.want == 0 {
				if out.Len() != 0 {
					t.Errorf("wrote %q", out.String())
				}
				return
			}
			_, d := parseEMF(t, bytes.TrimSpace(out.Bytes()))
			if d[JobsEnqueued] != tc.want {
				t.Errorf("JobsEnqueued %v, want %v", d[JobsEnqueued], tc.want)
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("closed") }

func TestWrapIgnoresWriteErrors(t *testing.T) {
	t.Parallel()
	idx, err := Wrap(stubProcessor{idx: -1}, &Emitter{W: failingWriter{}}).Process(context.Background(),
		[]engine.Change{change(nil, jobIn("q", job.Available, 0, -1, -1))})
	if idx != -1 || err != nil {
		t.Fatalf("Process = %d, %v", idx, err)
	}
}
