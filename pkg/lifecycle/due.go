package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// ResolveDue applies the time-driven moves to up to limit due jobs of a
// queue: due scheduled and retryable jobs become available (or are
// discarded if expired), active jobs whose lease ended are requeued or
// discarded. It returns the available push-mode jobs whose redelivery
// check is due, how many jobs it looked at that were due (moved, or moved
// by someone else first), and whether the next page may hold more due
// jobs.
func (s *Service) ResolveDue(ctx context.Context, queue string, limit int, inline bool) (redeliver []store.Item, due int, more bool, err error) {
	now := s.Now()
	items, err := s.st.Due(ctx, queue, now, limit)
	if err != nil {
		return nil, 0, false, err
	}
	redeliver, stay, err := s.resolve(ctx, items, now, inline)
	return redeliver, len(items) - stay - len(redeliver), len(items) >= limit && stay < len(items), err
}

// resolve applies the time-driven moves to due items read at now and
// returns the available push-mode ones (see ResolveDue) and how many
// stay where they are (an active job whose lease was extended).
func (s *Service) resolve(ctx context.Context, items []store.Item, now time.Time, inline bool) (redeliver []store.Item, stay int, err error) {
	for _, it := range items {
		j := it.Job
		var t store.Transition
		switch j.State {
		case job.Scheduled, job.Retryable:
			if j.ExpiresAt != nil && !j.ExpiresAt.After(now) {
				if err := s.expire(ctx, j, now); err != nil {
					return redeliver, stay, err
				}
				continue
			}
			t = store.Promote(j, now, s.redel, inline)
		case job.Active:
			if !leaseOver(j, now) {
				stay++
				continue
			}
			// The requeue appends to the error history, which the index
			// does not project: read the job by key.
			full, err := s.st.Get(ctx, j.ID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return redeliver, stay, err
			}
			if !leaseOver(full, now) {
				stay++
				continue // a heartbeat extended it or it finished meanwhile
			}
			j = full
			t = s.leaseExpiry(j, now, inline)
		case job.Available:
			redeliver = append(redeliver, it)
			continue
		default:
			stay++
			continue
		}
		moved, err := s.st.Apply(ctx, t)
		if err != nil {
			if ignoreConflict(err) == nil {
				continue // someone else moved it first
			}
			return redeliver, stay, err
		}
		s.log.InfoContext(ctx, "due job resolved", "job_id", j.ID, "from", string(j.State), "to", string(t.To))
		s.finished(ctx, moved)
	}
	return redeliver, stay, nil
}

// leaseOver reports whether an active job's lease has ended.
func leaseOver(j *job.Job, now time.Time) bool {
	return j.State == job.Active && j.LeaseUntil != nil && !j.LeaseUntil.After(now)
}

// leaseExpiry is the move of an active job whose lease ended: requeued or
// discarded per its retry policy, the attempt recorded as a visibility
// timeout (or as the execution timeout, when the lease ran to it).
func (s *Service) leaseExpiry(j *job.Job, now time.Time, inline bool) store.Transition {
	in := ErrorInput{Type: "visibility_timeout", Code: "timeout", Message: "The job's lease expired before the worker acknowledged or failed it; its worker is presumed dead."}
	if j.Deadline != nil && !j.LeaseUntil.Before(*j.Deadline) {
		in = ErrorInput{Type: "timeout", Code: "timeout", Message: "The job exceeded its execution timeout of " + j.Timeout.String() + "."}
	}
	return store.ExpireLease(j, s.decide(j, in, now), now, s.redel, inline)
}
