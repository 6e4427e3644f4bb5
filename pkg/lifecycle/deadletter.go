package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

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

// DeadJob returns a job of the dead letter queue (a discarded job).
func (s *Service) DeadJob(ctx context.Context, id string) (*job.Job, error) {
	if err := validID(id); err != nil {
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

// RetryDead returns a discarded job to available with its attempts reset
// (ojs-dead-letter.md 6.1), in pull and push mode alike: a push-mode job
// is relayed to SQS by the stream like any job that becomes available.
// Jobs of a workflow cannot be retried this way: the workflow has already
// counted their failure.
func (s *Service) RetryDead(ctx context.Context, id string, o RetryOverride) (*job.Job, error) {
	j, err := s.DeadJob(ctx, id)
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
		if err := s.ensureQueue(ctx, queue); err != nil {
			return nil, ojserr.Backend(err)
		}
	}
	now := s.Now()
	t := store.Revive(j, now, s.redel, o.Queue, o.Meta, s.push[queue])
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

// DeleteDead deletes a discarded job for good.
func (s *Service) DeleteDead(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if err := s.st.DeleteDead(ctx, id); err != nil {
		return deadError(err, id)
	}
	s.log.InfoContext(ctx, "dead letter job deleted", "job_id", id)
	return nil
}

func deadError(err error, id string) error {
	var ce *store.ConflictError
	if errors.As(err, &ce) {
		return notDead(id, ce.Current.State)
	}
	return apiError(err, id, "retry")
}

// notDead is a 404: the job exists but is not in the dead letter queue.
func notDead(id string, st job.State) error {
	e := ojserr.NotFoundf("dead letter job", id).With("current_state", string(st))
	e.Hint = "Only discarded jobs are in the dead letter queue; GET /ojs/v1/jobs/" + id + " shows this job."
	return e
}

// DeadLetter lists discarded jobs of the given queues (all registered
// queues when none), newest first within a queue: up to limit, and fewer
// when their envelopes together pass store.ListBytes (more is then true).
func (s *Service) DeadLetter(ctx context.Context, queue string, limit int) (jobs []*job.Job, more bool, err error) {
	queues := []string{queue}
	if queue == "" {
		var err error
		if queues, err = s.qs.Queues(ctx); err != nil {
			return nil, false, ojserr.Backend(err)
		}
	}
	out := []*job.Job{}
	bytes := 0
	for _, q := range queues {
		want := limit - len(out)
		page, err := s.st.Dead(ctx, q, want, "")
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
