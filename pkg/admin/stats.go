package admin

import (
	"cmp"
	"context"
	"net/url"
	"slices"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// Stats is GET /admin/stats (ojs-admin-api.md 10.1). Jobs counts waiting
// and discarded jobs exactly (indexes) and completed and cancelled jobs of
// the last hour (event log).
type Stats struct {
	Queues        int        `json:"queues"`
	Workers       int        `json:"workers"`
	Jobs          Counts     `json:"jobs"`
	Throughput    Throughput `json:"throughput"`
	UptimeSeconds int64      `json:"uptime_seconds"`
	// FinishedWindow is the window completed and cancelled are counted in.
	FinishedWindow string `json:"finished_window"`
	// Capped is set when a count or the event read stopped at its bound.
	Capped     bool   `json:"capped,omitempty"`
	ComputedAt string `json:"computed_at"`
}

// Stats computes the aggregate statistics: one count per queue and index
// partition, one bounded read of the last hour's events, one worker list.
func (s *Service) Stats(ctx context.Context) (*Stats, error) {
	qs, err := s.queueNames(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.recent(ctx, "")
	if err != nil {
		return nil, err
	}
	st := &Stats{Queues: len(qs), FinishedWindow: "PT1H", Capped: a.capped, ComputedAt: job.Timestamp(s.now()),
		UptimeSeconds: int64(s.now().Sub(s.cfg.Started).Seconds())}
	for _, qi := range qs {
		c, capped, err := s.counts(ctx, qi.Name, a)
		if err != nil {
			return nil, err
		}
		st.Capped = st.Capped || capped
		st.Jobs.add(c)
	}
	st.Throughput = Throughput{ProcessedPerMinute: perMinute(total(a.completed5m)), FailedPerMinute: perMinute(total(a.failed5m))}
	ws, err := s.Workers(ctx, 1, MaxWorkers)
	if err != nil {
		return nil, err
	}
	st.Workers = ws.Summary.Total - ws.Summary.Stale
	return st, nil
}

// Periods of the historical statistics.
var periods = map[string]time.Duration{"1m": time.Minute, "5m": 5 * time.Minute, "1h": time.Hour, "1d": 24 * time.Hour}

// MaxBuckets bounds the points of one history.
const MaxBuckets = 1440

// Bucket is one point of the history.
type Bucket struct {
	Timestamp    string `json:"timestamp"`
	Processed    int    `json:"processed"`
	Failed       int    `json:"failed"`
	Enqueued     int    `json:"enqueued"`
	LatencyP50MS *int64 `json:"latency_p50_ms"`
	LatencyP99MS *int64 `json:"latency_p99_ms"`
	durations    []int64
}

// History is GET /admin/stats/history (ojs-admin-api.md 10.2).
type History struct {
	Period string   `json:"period"`
	Since  string   `json:"since"`
	Until  string   `json:"until"`
	Queue  string   `json:"queue,omitempty"`
	Data   []Bucket `json:"data"`
	// Truncated is set when the window held more than MaxStatsEvents
	// events: buckets after the last event read are undercounted.
	Truncated bool `json:"truncated"`
}

// HistoryQuery is the parsed query of a history request.
type HistoryQuery struct {
	Period       time.Duration
	PeriodName   string
	Since, Until time.Time
	Queue        string
}

// ParseHistoryQuery reads period (1m, 5m, 1h, 1d; default 5m), since
// (default an hour ago), until (default now) and queue.
func (s *Service) ParseHistoryQuery(v url.Values) (HistoryQuery, error) {
	q := HistoryQuery{PeriodName: "5m", Queue: v.Get("queue")}
	if err := onlyParams(v, []string{"period", "since", "until", "queue"}); err != nil {
		return q, err
	}
	if p := v.Get("period"); p != "" {
		q.PeriodName = p
	}
	d, ok := periods[q.PeriodName]
	if !ok {
		return q, ojserr.Invalid("period", "'period' must be 1m, 5m, 1h or 1d.")
	}
	q.Period = d
	if q.Queue != "" {
		if err := job.ValidateQueue(q.Queue); err != nil {
			return q, err
		}
	}
	if err := parseTimes(v, &q.Since, &q.Until); err != nil {
		return q, err
	}
	now := s.now()
	q.Since, q.Until = cmp.Or(q.Since, now.Add(-time.Hour)), cmp.Or(q.Until, now)
	if !q.Since.Before(q.Until) {
		return q, ojserr.Invalid("since", "'since' must be before 'until'.")
	}
	if q.Until.Sub(q.Since)/q.Period > MaxBuckets {
		return q, ojserr.Invalid("period", "At most %d points per history; use a longer period or a shorter range.", MaxBuckets)
	}
	return q, nil
}

// History counts completions (processed, with latency percentiles from
// their durations), failed attempts and enqueues per period from the
// event log, reading at most MaxStatsEvents events. Events are kept for
// OJS_EVENT_TTL (7 days by default), so older buckets are empty.
func (s *Service) History(ctx context.Context, q HistoryQuery) (*History, error) {
	start := q.Since.Truncate(q.Period)
	n := int(q.Until.Sub(start)/q.Period) + 1
	if q.Until.Equal(start.Add(time.Duration(n-1) * q.Period)) {
		n--
	}
	h := &History{Period: q.PeriodName, Since: job.Timestamp(q.Since), Until: job.Timestamp(q.Until), Queue: q.Queue, Data: make([]Bucket, n)}
	for i := range h.Data {
		h.Data[i].Timestamp = job.Timestamp(start.Add(time.Duration(i) * q.Period))
	}
	f := events.Filter{Types: []string{events.JobCompleted, events.JobFailed, events.JobEnqueued}, Since: q.Since, Until: q.Until, Limit: events.MaxLimit}
	if q.Queue != "" {
		f.Queues = []string{q.Queue}
	}
	var err error
	h.Truncated, err = s.readEvents(ctx, f, func(e *events.Event) {
		k := int(e.At().Sub(start) / q.Period)
		if k < 0 || k >= len(h.Data) {
			return
		}
		b := &h.Data[k]
		switch e.Type {
		case events.JobCompleted:
			b.Processed++
			if d, ok := e.Data["duration_ms"].(float64); ok {
				b.durations = append(b.durations, int64(d))
			}
		case events.JobFailed:
			b.Failed++
		case events.JobEnqueued:
			b.Enqueued++
		}
	})
	if err != nil {
		return nil, err
	}
	for i := range h.Data {
		b := &h.Data[i]
		if len(b.durations) > 0 {
			slices.Sort(b.durations)
			p50, p99 := pct(b.durations, 50), pct(b.durations, 99)
			b.LatencyP50MS, b.LatencyP99MS = &p50, &p99
		}
	}
	return h, nil
}

func pct(sorted []int64, p int) int64 {
	i := (len(sorted)*p+99)/100 - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
