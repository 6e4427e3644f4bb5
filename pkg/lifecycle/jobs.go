package lifecycle

import (
	"context"
	"errors"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Info returns a job. A job whose time has come is moved first, so a read
// sees it as it is now rather than as of the last sweep: an active job
// whose lease has ended is requeued (or discarded per its retry policy),
// a scheduled or retryable job whose time has come (and that has not
// expired) becomes available.
func (s *Service) Info(ctx context.Context, id string) (*job.Job, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	it, err := s.st.GetItem(ctx, id)
	if err != nil {
		return nil, store.APIError(err, id, "read")
	}
	j, now := it.Job, s.Now()
	var t store.Transition
	switch {
	case leaseOver(j, now):
		// The job is requeued at its lease's end (ojs-worker-protocol.md
		// 5.5), not at the next sweep.
		t = s.leaseExpiry(j, now, false)
	case (j.State == job.Scheduled || j.State == job.Retryable) && !it.DueAt.IsZero() && !it.DueAt.After(now) &&
		(j.ExpiresAt == nil || j.ExpiresAt.After(now)):
		t = store.Promote(j, now, s.redel, false)
	}
	if t.To != "" {
		// The read makes the move the sweeper would, with the same
		// conditional write.
		moved, err := s.st.Apply(ctx, t)
		var ce *store.ConflictError
		switch {
		case err == nil:
			s.log.InfoContext(ctx, "due job resolved", "job_id", j.ID, "from", string(j.State), "to", string(moved.State))
			s.finished(ctx, moved)
			return moved, nil
		case errors.As(err, &ce) && ce.Current != nil:
			return ce.Current, nil // moved by someone else first
		default:
			return nil, store.APIError(err, id, "read")
		}
	}
	return j, nil
}

// Cancel cancels a job that has not finished and returns it with the state
// it left. Cancelling a finished job is a conflict.
func (s *Service) Cancel(ctx context.Context, id string) (*job.Job, job.State, error) {
	if err := job.CheckID(id); err != nil {
		return nil, "", err
	}
	before, err := s.st.Get(ctx, id)
	if err != nil {
		return nil, "", store.APIError(err, id, "cancel")
	}
	if before.State.Terminal() {
		return nil, "", ojserr.StateConflict(ojserr.InvalidRequest, "Cannot cancel job in terminal state '%s'.", before.State).
			With("job_id", id).With("current_state", string(before.State))
	}
	cancel := func() (*job.Job, error) {
		return s.st.Apply(ctx, store.Cancel(id, s.Now(), before.State).KeepFor(s.resultTTL, s.Now()))
	}
	j, err := cancel()
	// It moved meanwhile: retry once against its new state.
	if ce, ok := errors.AsType[*store.ConflictError](err); ok && !ce.Current.State.Terminal() {
		before = ce.Current
		j, err = cancel()
	}
	if err != nil {
		return nil, "", store.APIError(err, id, "cancel")
	}
	s.log.InfoContext(ctx, "job cancelled", "job_id", id, "previous_state", string(before.State))
	s.finished(ctx, j)
	return j, before.State, nil
}

// Activate moves a pending job to available.
func (s *Service) Activate(ctx context.Context, id string) (*job.Job, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	cur, err := s.st.Get(ctx, id)
	if err != nil {
		return nil, store.APIError(err, id, "activate")
	}
	if cur.State != job.Pending {
		return nil, ojserr.StateConflict(ojserr.InvalidRequest, "Cannot activate job in state '%s'. Only jobs in 'pending' state can be activated.", cur.State).
			With("job_id", id).With("current_state", string(cur.State))
	}
	j, err := s.st.Apply(ctx, store.Activate(cur, s.Now(), s.redel))
	return j, store.APIError(err, id, "activate")
}
