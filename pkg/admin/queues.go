package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/retry"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Counts are a queue's jobs by state. Available, active, scheduled,
// retryable and discarded are exact (read from the indexes) unless Capped;
// completed and cancelled count the jobs that reached that state in the
// last hour (from the event log: finished jobs are not indexed per queue).
type Counts struct {
	Available int `json:"available"`
	Active    int `json:"active"`
	Scheduled int `json:"scheduled"`
	Retryable int `json:"retryable"`
	Completed int `json:"completed"`
	Discarded int `json:"discarded"`
	Cancelled int `json:"cancelled"`
}

func (c *Counts) add(o Counts) {
	c.Available += o.Available
	c.Active += o.Active
	c.Scheduled += o.Scheduled
	c.Retryable += o.Retryable
	c.Completed += o.Completed
	c.Discarded += o.Discarded
	c.Cancelled += o.Cancelled
}

// Throughput is jobs per minute over the last five minutes.
type Throughput struct {
	ProcessedPerMinute float64 `json:"processed_per_minute"`
	FailedPerMinute    float64 `json:"failed_per_minute"`
}

// Queue is a queue as the Admin API lists it (ojs-admin-api.md 6.1, 6.2).
type Queue struct {
	Name       string     `json:"name"`
	State      string     `json:"state"`
	Paused     bool       `json:"paused"`
	PausedAt   string     `json:"paused_at,omitempty"`
	Counts     Counts     `json:"counts"`
	Throughput Throughput `json:"throughput"`
	// CountsCapped is set when a count stopped at MaxCountPerPartition.
	CountsCapped bool   `json:"counts_capped,omitempty"`
	Mode         string `json:"mode"`
	CreatedAt    string `json:"created_at,omitempty"`
	// Bound is the queue's backpressure depth bound (nil: unbounded).
	Bound *queue.Bound `json:"backpressure,omitempty"`
	// Configuration and OldestAvailableAt are in the detail only.
	Configuration     *QueueConfig `json:"configuration,omitempty"`
	OldestAvailableAt *string      `json:"oldest_available_at,omitempty"`
}

// QueueConfig is a queue's configuration as far as this backend has one:
// the FETCH rate limit. Concurrency of push-mode queues is the SQS event
// source's maximum concurrency, set in pkg/topology (deploy time).
type QueueConfig struct {
	RateLimit *RateLimit `json:"rate_limit"`
	Mode      string     `json:"delivery"`
	// Backpressure is the queue's depth bound (null: unbounded).
	Backpressure *queue.Bound `json:"backpressure"`
	// TenantFairness is how an unscoped FETCH shares the queue among its
	// tenants (null: in the queue's order), Tenants who they are.
	TenantFairness *string  `json:"tenant_fairness"`
	Tenants        []string `json:"tenants,omitempty"`
}

// RateLimit is ojs-admin-api.md's rate limit: limit jobs per period.
type RateLimit struct {
	Limit  float64 `json:"limit"`
	Period string  `json:"period"`
	// PerSecond is the same rate in jobs per second, as FETCH applies it.
	PerSecond float64 `json:"per_second"`
}

// activity is what the event log says about the recent past, per queue.
type activity struct {
	completedHour, cancelledHour map[string]int
	completed5m, failed5m        map[string]int
	capped                       bool
}

// recent reads the last hour's completions, failures and cancellations
// (at most MaxStatsEvents events): for one queue from the "done" index and
// the queue's own event pages, for every queue from the event log.
func (s *Service) recent(ctx context.Context, queue string) (*activity, error) {
	now := s.now()
	a := &activity{completedHour: map[string]int{}, cancelledHour: map[string]int{}, completed5m: map[string]int{}, failed5m: map[string]int{}}
	f := events.Filter{Types: []string{events.JobCompleted, events.JobFailed, events.JobCancelled}, Since: now.Add(-time.Hour), Limit: events.MaxLimit}
	five := now.Add(-5 * time.Minute)
	var err error
	if queue != "" {
		f.Queues = []string{queue}
		f.Types = []string{events.JobFailed, events.JobCancelled}
		if a.completedHour[queue], err = s.st.CountCompleted(ctx, queue, f.Since); err == nil {
			a.completed5m[queue], err = s.st.CountCompleted(ctx, queue, five)
		}
		if err != nil {
			return nil, ojserr.Backend(err)
		}
	}
	a.capped, err = s.readEvents(ctx, f, func(e *events.Event) {
		q := e.Queue()
		switch e.Type {
		case events.JobCompleted:
			a.completedHour[q]++
			if !e.At().Before(five) {
				a.completed5m[q]++
			}
		case events.JobCancelled:
			a.cancelledHour[q]++
		case events.JobFailed:
			if !e.At().Before(five) {
				a.failed5m[q]++
			}
		}
	})
	return a, err
}

// readEvents calls fn on each event f selects, page by page, until the
// log has no more or MaxStatsEvents were read (capped).
func (s *Service) readEvents(ctx context.Context, f events.Filter, fn func(*events.Event)) (capped bool, err error) {
	now := s.now()
	for read := 0; ; {
		p, err := s.queryEvents(ctx, f, now)
		if err != nil {
			return false, ojserr.Backend(err)
		}
		for i := range p.Events {
			fn(&p.Events[i])
		}
		if read += len(p.Events); !p.HasMore || read >= MaxStatsEvents {
			return p.HasMore, nil
		}
		f.After = p.Cursor
	}
}

func total(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// counts reads a queue's counts of waiting and discarded jobs from the
// indexes, and of jobs finished in the last hour from a.
func (s *Service) counts(ctx context.Context, name string, a *activity) (Counts, bool, error) {
	c := Counts{Completed: a.completedHour[name], Cancelled: a.cancelledHour[name]}
	capped := false
	for _, l := range []store.Listing{store.ListAvailable, store.ListDead, store.ListWaiting} {
		m, cp, err := s.st.CountStates(ctx, l, name, MaxCountPerPartition)
		if err != nil {
			return c, false, ojserr.Backend(err)
		}
		capped = capped || cp
		switch l {
		case store.ListAvailable:
			c.Available += m[job.Available]
		case store.ListDead:
			c.Discarded += m[job.Discarded]
		default:
			// The due index holds the available push-mode jobs (their
			// redelivery check); the ready index counted the others.
			c.Available += m[job.Available]
			c.Active += m[job.Active]
			c.Scheduled += m[job.Scheduled]
			c.Retryable += m[job.Retryable]
		}
	}
	return c, capped, nil
}

func (s *Service) queueView(ctx context.Context, qi queue.QueueInfo, a *activity, push func(string) bool) (Queue, error) {
	c, capped, err := s.counts(ctx, qi.Name, a)
	if err != nil {
		return Queue{}, err
	}
	q := Queue{Name: qi.Name, State: "active", Paused: qi.Paused, PausedAt: qi.PausedAt, Counts: c, CountsCapped: capped,
		Throughput: Throughput{ProcessedPerMinute: perMinute(a.completed5m[qi.Name]), FailedPerMinute: perMinute(a.failed5m[qi.Name])},
		Mode:       "pull", CreatedAt: qi.CreatedAt, Bound: qi.Bound()}
	if qi.Paused {
		q.State = "paused"
	}
	if push != nil && push(qi.Name) {
		q.Mode = "push"
	}
	return q, nil
}

func perMinute(n int) float64 { return math.Round(float64(n)/5*100) / 100 }

// QueueList is a page of queues.
type QueueList struct {
	Items      []Queue    `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// Pagination describes a page: page numbers for the queue and worker
// lists (small, read whole), a cursor for job listings.
type Pagination struct {
	Total      *int   `json:"total,omitempty"`
	Page       int    `json:"page"`
	PerPage    int    `json:"per_page"`
	HasMore    bool   `json:"has_more"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// pageOf is page (1-based) of all, perPage items a page, and its
// pagination.
func pageOf[T any](all []T, page, perPage int) ([]T, Pagination) {
	total := len(all)
	from := min((page-1)*perPage, total)
	to := min(from+perPage, total)
	return all[from:to], Pagination{Total: &total, Page: page, PerPage: perPage, HasMore: to < total}
}

// Queues lists the registered queues by name with counts (page is
// 1-based). push tells push-mode queues (may be nil).
func (s *Service) Queues(ctx context.Context, page, perPage int, push func(string) bool) (*QueueList, error) {
	qs, err := s.queueNames(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.recent(ctx, "")
	if err != nil {
		return nil, err
	}
	shown, pg := pageOf(qs, page, perPage)
	out := &QueueList{Items: []Queue{}, Pagination: pg}
	for _, qi := range shown {
		q, err := s.queueView(ctx, qi, a, push)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, q)
	}
	return out, nil
}

// Queue returns one queue with its configuration and oldest available
// job. An unregistered queue is 404.
func (s *Service) Queue(ctx context.Context, name string, push func(string) bool) (*Queue, error) {
	if err := job.ValidateQueue(name); err != nil {
		return nil, err
	}
	qi, err := s.queueInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	if qi == nil {
		return nil, ojserr.NotFoundf("queue", name)
	}
	a, err := s.recent(ctx, name)
	if err != nil {
		return nil, err
	}
	q, err := s.queueView(ctx, *qi, a, push)
	if err != nil {
		return nil, err
	}
	q.Configuration = &QueueConfig{Mode: q.Mode, Backpressure: qi.Bound(), Tenants: qi.Tenants}
	if qi.TenantFairness != "" {
		q.Configuration.TenantFairness = &qi.TenantFairness
	}
	if qi.RateLimit > 0 {
		q.Configuration.RateLimit = &RateLimit{Limit: qi.RateLimit, Period: "PT1S", PerSecond: qi.RateLimit}
	}
	p, err := s.st.ListQueue(ctx, store.ListAvailable, name, nil, 1, "")
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if len(p.Items) > 0 && p.Items[0].Job.EnqueuedAt != nil {
		t := job.Timestamp(*p.Items[0].Job.EnqueuedAt)
		q.OldestAvailableAt = &t
	}
	return &q, nil
}

// PauseResult is the answer to a pause or resume (ojs-admin-api.md 6.3).
type PauseResult struct {
	Name     string  `json:"name"`
	Paused   bool    `json:"paused"`
	PausedAt *string `json:"paused_at"`
	State    string  `json:"state"`
}

// SetPaused pauses or resumes a queue (the data plane's operation,
// queue.Service.SetPaused).
func (s *Service) SetPaused(ctx context.Context, name string, paused bool) (*PauseResult, error) {
	st, err := s.ctl.SetPaused(ctx, name, paused)
	if err != nil {
		return nil, err
	}
	r := &PauseResult{Name: st.Name, Paused: st.Paused, State: st.Status}
	if st.PausedAt != "" {
		r.PausedAt = &st.PausedAt
	}
	return r, nil
}

// SetConfig applies a queue configuration (PUT /admin/queues/{name}/config).
// {"rate_limit": {"limit": n, "period": "PT1M"}} sets the FETCH rate;
// {"backpressure": {"max_depth": n, "strategy": "reject",
// "warning_threshold": 0.8}} bounds the queue (ojs-backpressure.md 6.2);
// null removes either. The other settings of ojs-admin-api.md 6.6 are
// refused by name (concurrency of push-mode queues is deployed with the
// stack, retention is table-wide).
func (s *Service) SetConfig(ctx context.Context, name string, raw []byte) (*Queue, error) {
	if err := job.ValidateQueue(name); err != nil {
		return nil, err
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil || body == nil {
		return nil, ojserr.New(ojserr.InvalidPayload, "The request body must be a JSON object.").With("field", "body")
	}
	supported := []string{"rate_limit", "backpressure", "tenant_fairness"}
	for k := range body {
		if !slices.Contains(supported, k) {
			return nil, ojserr.Newf(ojserr.ValidationError, "'%s' cannot be configured at run time on this backend; only 'rate_limit', 'backpressure' and 'tenant_fairness' can (push-mode concurrency is set in pkg/topology and deployed with the stack; retention is table-wide).", k).
				With("field", k).With("supported", supported)
		}
	}
	if len(body) == 0 {
		return nil, ojserr.Invalid("rate_limit", "Send {\"rate_limit\": {\"limit\": n, \"period\": \"PT1S\"}}, {\"backpressure\": {\"max_depth\": n}} or either as null.")
	}
	if tf, ok := body["tenant_fairness"]; ok {
		var strategy string
		if string(tf) != "null" {
			if json.Unmarshal(tf, &strategy) != nil || (strategy != queue.StrategyRoundRobin && strategy != queue.StrategyWeighted) {
				return nil, ojserr.Invalid("tenant_fairness", "'tenant_fairness' must be \"round-robin\", \"weighted\" (by each tenant's fairness_weight) or null.")
			}
		}
		if err := s.qs.SetTenantFairness(ctx, name, strategy, s.now()); err != nil {
			return nil, ojserr.Backend(err)
		}
	}
	if bp, ok := body["backpressure"]; ok {
		b, err := parseBound(bp)
		if err != nil {
			return nil, err
		}
		if err := s.qs.SetQueueBound(ctx, name, b, s.now()); err != nil {
			return nil, ojserr.Backend(err)
		}
		s.cfg.Logger.InfoContext(ctx, "queue bounded", "queue", name, "bound", b)
	}
	if rl, ok := body["rate_limit"]; ok {
		perSecond, err := parseRate(rl)
		if err != nil {
			return nil, err
		}
		if err := s.qs.SetQueueRate(ctx, name, perSecond, s.now()); err != nil {
			return nil, ojserr.Backend(err)
		}
		s.cfg.Logger.InfoContext(ctx, "queue configured", "queue", name, "rate_limit_per_second", perSecond)
	}
	return s.Queue(ctx, name, nil)
}

// parseRate reads a rate limit setting in jobs per second (0 for null:
// none).
func parseRate(raw json.RawMessage) (float64, error) {
	if string(raw) == "null" {
		return 0, nil
	}
	var r struct {
		Limit  float64 `json:"limit"`
		Period string  `json:"period"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Limit <= 0 {
		return 0, ojserr.Invalid("rate_limit.limit", "'rate_limit.limit' must be a positive number.")
	}
	period := time.Second
	if r.Period != "" {
		d, err := retry.ParseDuration(r.Period)
		if err != nil || d <= 0 {
			return 0, ojserr.Invalid("rate_limit.period", "'rate_limit.period' must be an ISO 8601 duration such as PT1M.")
		}
		period = d
	}
	return r.Limit / period.Seconds(), nil
}

// parseBound reads a backpressure setting (nil for null: unbounded).
func parseBound(raw json.RawMessage) (*queue.Bound, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	var b struct {
		MaxDepth     *int     `json:"max_depth"`
		MaxSizeBytes int64    `json:"max_size_bytes"`
		Strategy     string   `json:"strategy"`
		Warning      *float64 `json:"warning_threshold"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, ojserr.Invalid("backpressure", "'backpressure' must be an object such as {\"max_depth\": 50000, \"strategy\": \"reject\"}, or null.")
	}
	switch {
	case b.MaxDepth == nil || *b.MaxDepth < 0:
		return nil, ojserr.Invalid("backpressure.max_depth", "'backpressure.max_depth' must be a number of jobs (0: unbounded).")
	case b.MaxSizeBytes != 0:
		return nil, ojserr.Newf(ojserr.ValidationError, "'backpressure.max_size_bytes' is not supported on this backend; bound the queue by max_depth.").With("field", "backpressure.max_size_bytes")
	case b.Strategy != "" && b.Strategy != queue.StrategyReject:
		return nil, ojserr.Newf(ojserr.ValidationError, "Strategy '%s' is not supported on this backend; only 'reject' (a held request would hold a Lambda and API Gateway answers within 29 s; drop_oldest loses jobs).", b.Strategy).
			With("field", "backpressure.strategy").With("supported", []string{queue.StrategyReject})
	case b.Warning != nil && (*b.Warning <= 0 || *b.Warning > 1):
		return nil, ojserr.Invalid("backpressure.warning_threshold", "'backpressure.warning_threshold' must be a fraction above 0 and at most 1.")
	}
	if *b.MaxDepth == 0 {
		return nil, nil
	}
	w := queue.DefaultWarning
	if b.Warning != nil {
		w = *b.Warning
	}
	return &queue.Bound{MaxDepth: *b.MaxDepth, Strategy: queue.StrategyReject, Warning: w}, nil
}

// PurgeResult reports a queue purge (ojs-admin-api.md 6.5).
type PurgeResult struct {
	PurgedCount int           `json:"purged_count"`
	States      []string      `json:"states"`
	Matched     int           `json:"matched"`
	Failed      []BulkFailure `json:"failed"`
	HasMore     bool          `json:"has_more"`
}

// Purge deletes a queue's jobs in the given states, at most MaxBulk per
// call (has_more says call again): waiting jobs (available, scheduled,
// retryable) and discarded jobs from the indexes, completed and cancelled
// ones from the event window (the last event TTL). Jobs of workflows are
// never purged (the workflow still counts on them); active jobs cannot be
// purged (cancel them).
func (s *Service) Purge(ctx context.Context, name string, raw []byte) (*PurgeResult, error) {
	if err := job.ValidateQueue(name); err != nil {
		return nil, err
	}
	var body struct {
		States    []string `json:"states"`
		OlderThan string   `json:"older_than"`
		Confirm   bool     `json:"confirm"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, ojserr.New(ojserr.InvalidPayload, "The request body must be {\"states\": [...], \"older_than\": ..., \"confirm\": true}.").With("field", "body")
	}
	if !body.Confirm {
		return nil, needConfirm()
	}
	if len(body.States) == 0 {
		return nil, ojserr.Invalid("states", "'states' is required: the states of the jobs to purge.")
	}
	until, err := parseTime("older_than", body.OlderThan)
	if err != nil {
		return nil, err
	}
	states := make([]job.State, len(body.States))
	for i, st := range body.States {
		switch states[i] = job.State(st); states[i] {
		case job.Available, job.Scheduled, job.Retryable, job.Discarded, job.Completed, job.Cancelled:
		case job.Active:
			return nil, ojserr.Invalid("states", "Active jobs cannot be purged; cancel them (POST /ojs/v1/admin/jobs/bulk/cancel).")
		default:
			return nil, ojserr.Invalid("states", "Unknown or unpurgeable state '%s'.", st)
		}
	}
	keep := func(j *job.Job) bool { return j.WorkflowID == "" && (until.IsZero() || finishedBefore(j, until)) }
	b, err := s.act(ctx, JobQuery{Queue: name, Until: until}, states, keep, func(j *job.Job) error { return s.deleteJob(ctx, j) })
	if err != nil {
		return nil, err
	}
	res := &PurgeResult{PurgedCount: b.Succeeded, States: body.States, Matched: b.Matched, Failed: b.Errors, HasMore: b.HasMore}
	s.cfg.Logger.InfoContext(ctx, "queue purged", "queue", name, "states", strings.Join(body.States, ","), "purged", res.PurgedCount)
	return res, nil
}

// finishedBefore reports whether j's terminal (or creation, for waiting
// jobs) timestamp is before t.
func finishedBefore(j *job.Job, t time.Time) bool {
	for _, ts := range []*time.Time{j.CompletedAt, j.CancelledAt, j.DiscardedAt, j.CreatedAt} {
		if ts != nil {
			return ts.Before(t)
		}
	}
	return false
}

func (s *Service) deleteJob(ctx context.Context, j *job.Job) error {
	switch j.State {
	case job.Discarded:
		return s.dead.Delete(ctx, j.ID)
	case job.Completed, job.Cancelled:
		return storeErr(s.st.DeleteFinished(ctx, j.ID, j.State), j.ID)
	case job.Available, job.Scheduled, job.Retryable, job.Pending:
		return storeErr(s.st.DeleteWaiting(ctx, j.ID, j.State), j.ID)
	}
	return ojserr.StateConflict(ojserr.Conflict, "Job '%s' is %s and cannot be deleted; only finished or waiting jobs can.", j.ID, j.State).With("current_state", string(j.State))
}

func storeErr(err error, id string) error {
	if err == nil {
		return nil
	}
	if ce, ok := errors.AsType[*store.ConflictError](err); ok {
		if ce.Current.WorkflowID != "" {
			return ojserr.StateConflict(ojserr.Conflict, "Job '%s' belongs to workflow '%s' and cannot be deleted.", id, ce.Current.WorkflowID).With("workflow_id", ce.Current.WorkflowID)
		}
		return ojserr.StateConflict(ojserr.Conflict, "Job '%s' changed state (now %s) and was left alone.", id, ce.Current.State).With("current_state", string(ce.Current.State))
	}
	if errors.Is(err, store.ErrNotFound) {
		return ojserr.NotFoundf("job", id)
	}
	return ojserr.Backend(fmt.Errorf("job %s: %w", id, err))
}

func needConfirm() error {
	return ojserr.Invalid("confirm", "This operation acts on every matching job and cannot be undone; send \"confirm\": true.")
}
