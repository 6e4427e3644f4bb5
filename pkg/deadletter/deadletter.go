// Package deadletter is the dead letter queue (ojs-dead-letter.md): the
// discarded jobs of every queue, listed, retried, deleted and purged, and
// pruned by the retention policy, over pkg/store's table kernel.
package deadletter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Jobs is what the dead letter operations need of the job service
// (implemented by *lifecycle.Service): its clock and how long it lets a
// push-mode job wait unclaimed.
type Jobs interface {
	// Now is the service clock's time (UTC).
	Now() time.Time
	// RedeliverAfter is the redelivery delay of unclaimed push-mode jobs.
	RedeliverAfter() time.Duration
}

// Queues is what a retry needs of the queue service (implemented by
// *queue.Service): how a queue's jobs are delivered, and its registry.
type Queues interface {
	// IsPush reports whether queue is a push-mode queue.
	IsPush(queue string) bool
	// EnsureQueue registers a queue name (once per process).
	EnsureQueue(ctx context.Context, queue string) error
}

var _ Queues = (*queue.Service)(nil)

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
	// Retention is the retention policy. Zero fields mean the defaults
	// (180 days, 10,000 jobs, pruned every 5 minutes).
	Retention Retention
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
}

// Service runs the dead letter operations.
type Service struct {
	st        *store.Store
	tb        table
	qs        *queue.Store
	jobs      Jobs
	queues    Queues
	log       *slog.Logger
	retention Retention
	// pruneAfter (Unix ms) is when this process may next try to claim a
	// pruning run: the claim is a write, not to be spent on every sweep.
	pruneAfter atomic.Int64
}

// New returns the dead letter service on st's table, with the clock of
// jobs and the push-mode queues and registry of queues.
func New(st *store.Store, jobs Jobs, queues Queues, c Config) *Service {
	s := &Service{st: st, tb: newTable(st), qs: queue.NewStore(st.DB(), st.Table()), jobs: jobs, queues: queues, log: c.Logger, retention: c.Retention.withDefaults()}
	s.log = cmp.Or(s.log, slog.Default())
	return s
}

func (s *Service) now() time.Time { return s.jobs.Now() }

// RetryOverride changes a dead-letter job on retry (ojs-dead-letter.md
// 6.3): another queue and/or replacement meta.
type RetryOverride struct {
	Queue string          `json:"queue,omitempty"`
	Meta  json.RawMessage `json:"meta,omitempty"`
}

// ParseRetryRequest reads the body of POST /dead-letter/{id}/retry: empty,
// {} or {"override":{"queue":..., "meta":{...}}}.
func ParseRetryRequest(raw []byte) (RetryOverride, error) {
	var o RetryOverride
	if len(raw) == 0 {
		return o, nil
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil {
		return o, ojserr.New(ojserr.InvalidPayload, "The request body is not a JSON object.")
	}
	for k := range body {
		if k != "override" {
			return o, ojserr.Invalid(k, "Unknown field '%s'; the body may hold only 'override'.", k)
		}
	}
	ov, ok := body["override"]
	if !ok || string(ov) == "null" {
		return o, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(ov, &fields); err != nil {
		return o, ojserr.Invalid("override", "'override' must be an object.")
	}
	for k := range fields {
		if k != "queue" && k != "meta" {
			return o, ojserr.Invalid("override."+k, "Only 'queue' and 'meta' can be overridden on retry.")
		}
	}
	if q, ok := fields["queue"]; ok {
		if err := json.Unmarshal(q, &o.Queue); err != nil {
			return o, ojserr.Invalid("override.queue", "'override.queue' must be a string.")
		}
		if err := job.ValidateQueue(o.Queue); err != nil {
			return o, err
		}
	}
	if m, ok := fields["meta"]; ok {
		var obj map[string]json.RawMessage
		if json.Unmarshal(m, &obj) != nil || obj == nil {
			return o, ojserr.Invalid("override.meta", "'override.meta' must be an object.")
		}
		if len(m) > job.MaxMetaBytes {
			return o, ojserr.Newf(ojserr.PayloadTooLarge, "'override.meta' is %d bytes; the maximum is %d.", len(m), job.MaxMetaBytes)
		}
		o.Meta = m
	}
	return o, nil
}

// Get returns a job of the dead letter queue (a discarded job). It fails
// with not_found when the job does not exist or is not discarded (then
// naming its current_state).
func (s *Service) Get(ctx context.Context, id string) (*job.Job, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	j, err := s.st.Get(ctx, id)
	if err != nil {
		return nil, deadError(err, id)
	}
	if j.State != job.Discarded {
		return nil, notDead(id, j.State)
	}
	return j, nil
}

// Retry returns a discarded job to available with its attempts reset
// (ojs-dead-letter.md 6.1). Jobs of a workflow (which counted their
// failure) and jobs whose uniqueness key a live job holds are refused (409).
func (s *Service) Retry(ctx context.Context, id string, o RetryOverride) (*job.Job, error) {
	j, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.WorkflowID != "" {
		return nil, ojserr.StateConflict(ojserr.Conflict, "Job '%s' belongs to workflow '%s', which has already counted its failure; it cannot be retried from the dead letter queue.", id, j.WorkflowID).
			With("job_id", id).With("workflow_id", j.WorkflowID)
	}
	queue := j.Queue
	if o.Queue != "" {
		queue = o.Queue
		if err := s.queues.EnsureQueue(ctx, queue); err != nil {
			return nil, ojserr.Backend(err)
		}
	}
	now := s.now()
	t := store.Revive(j, now, s.jobs.RedeliverAfter(), o.Queue, o.Meta, s.queues.IsPush(queue))
	var out *job.Job
	if j.UniqueKey != "" {
		// It takes its uniqueness key back in the same write, unless a job
		// enqueued since holds it: two live jobs of one key is what the
		// policy forbids.
		out, err = s.st.ReviveUnique(ctx, t, j.UniqueKey, now, "")
		if errors.Is(err, store.ErrLockHeld) {
			out, err = s.reviveOverFinishedHolder(ctx, t, j, now)
		}
	} else {
		out, err = s.st.Apply(ctx, t)
	}
	if err != nil {
		return nil, deadError(err, id)
	}
	s.log.InfoContext(ctx, "dead letter job retried", "job_id", id, "queue", queue)
	return out, nil
}

// reviveOverFinishedHolder retries dead job j (transition t) whose
// uniqueness key another job holds: allowed once that holder has finished
// (completed, cancelled or discarded: no longer a live job of the key),
// by taking the key from it; refused (409) while it is live.
func (s *Service) reviveOverFinishedHolder(ctx context.Context, t store.Transition, j *job.Job, now time.Time) (*job.Job, error) {
	lock, err := s.st.UniqueHolder(ctx, j.UniqueKey)
	if errors.Is(err, store.ErrNotFound) {
		return s.st.ReviveUnique(ctx, t, j.UniqueKey, now, "")
	}
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	holder, err := s.st.Get(ctx, lock.JobID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, ojserr.Backend(err)
	case !holder.State.Terminal():
		return nil, ojserr.StateConflict(ojserr.Conflict, "Job '%s' cannot be retried while job '%s', enqueued since it was discarded, holds its uniqueness key (state '%s').",
			j.ID, lock.JobID, holder.State).With("job_id", j.ID).With("existing_job_id", lock.JobID)
	}
	out, err := s.st.ReviveUnique(ctx, t, j.UniqueKey, now, lock.JobID)
	if errors.Is(err, store.ErrLockHeld) {
		return nil, ojserr.StateConflict(ojserr.Conflict, "Job '%s' cannot be retried: its uniqueness key changed hands meanwhile; try again.", j.ID).With("job_id", j.ID)
	}
	return out, err
}

// Delete deletes a discarded job for good (the stream reports
// dead_letter.deleted). It fails with not_found when the job does not
// exist or is not discarded.
func (s *Service) Delete(ctx context.Context, id string) error {
	if err := job.CheckID(id); err != nil {
		return err
	}
	if err := s.tb.delete(ctx, id); err != nil {
		return deadError(err, id)
	}
	s.log.InfoContext(ctx, "dead letter job deleted", "job_id", id)
	return nil
}

// Count counts a queue's dead letter jobs (a count query of its dead
// letter index partition, every page).
func (s *Service) Count(ctx context.Context, queue string) (int, error) {
	return s.tb.count(ctx, queue)
}

// List lists discarded jobs of the given queue (all registered queues
// when empty), newest first within a queue: up to limit, and fewer when
// their envelopes together pass store.ListBytes (more is then true).
func (s *Service) List(ctx context.Context, queue string, limit int) (jobs []*job.Job, more bool, err error) {
	queues, err := s.queuesOf(ctx, queue)
	if err != nil {
		return nil, false, err
	}
	out := []*job.Job{}
	bytes := 0
	for _, q := range queues {
		want := limit - len(out)
		page, err := s.tb.page(ctx, q, time.Time{}, time.Time{}, false, want, "")
		if err != nil {
			return nil, false, ojserr.Backend(err)
		}
		for _, j := range page.Jobs {
			// Large jobs: the answer stays under Lambda's response limit.
			if bytes += store.FetchBytes(j); len(out) > 0 && bytes > store.ListBytes {
				return out, true, nil
			}
			out = append(out, j)
		}
		if len(out) >= limit {
			return out, true, nil
		}
		if page.Cursor != "" && len(page.Jobs) < want {
			return out, true, nil // the page was cut for its size
		}
	}
	return out, false, nil
}

// queuesOf is []string{queue}, or every registered queue when queue is "".
func (s *Service) queuesOf(ctx context.Context, queue string) ([]string, error) {
	if queue != "" {
		return []string{queue}, nil
	}
	qs, err := s.qs.Queues(ctx)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return qs, nil
}

func deadError(err error, id string) error {
	if ce, ok := errors.AsType[*store.ConflictError](err); ok {
		return notDead(id, ce.Current.State)
	}
	return store.APIError(err, id, "retry")
}

// notDead is a 404: the job exists but is not in the dead letter queue.
func notDead(id string, st job.State) error {
	e := ojserr.NotFoundf("dead letter job", id).With("current_state", string(st))
	e.Hint = "Only discarded jobs are in the dead letter queue; GET /ojs/v1/jobs/" + id + " shows this job."
	return e
}
