package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// uniqueAttempts bounds the compare-and-swap rounds of one unique PUSH
// (each round loses only to another writer of the same key).
const uniqueAttempts = 8

// pushUnique creates a job with a unique policy (ojs-unique-jobs.md), with
// its uniqueness lock in one transaction conditional on the lock being free
// or still naming the holder the decision read. A duplicate is a holder in
// one of the policy's states whose period has not ended.
func (s *Service) pushUnique(ctx context.Context, j *job.Job) (*job.Job, error) {
	u := j.Unique
	var until time.Time
	if u.Period > 0 {
		until = j.CreatedAt.Add(u.Period)
	}
	for range uniqueAttempts {
		now := s.Now()
		// take creates j as the key's holder in holder's place (at
		// version): done when it did, or when it failed for good (err).
		take := func(holder string, version int64) (done bool, err error) {
			err = s.st.CreateUnique(ctx, j, s.redel, until, now, holder, version)
			if errors.Is(err, store.ErrLockHeld) {
				return false, nil
			} else if err != nil {
				return true, createError(err)
			}
			return true, nil
		}
		if done, err := take("", 0); done {
			return j, err
		}
		lock, err := s.st.UniqueHolder(ctx, u.Key)
		if errors.Is(err, store.ErrNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		held, err := s.st.GetItem(ctx, lock.JobID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, ojserr.Backend(err)
		}
		holder := held.Job // nil: gone
		dup := holder != nil && u.States[holder.State] && (u.Period == 0 || holder.CreatedAt == nil || now.Before(holder.CreatedAt.Add(u.Period)))
		if !dup {
			if done, err := take(lock.JobID, held.Version); done {
				return j, err
			}
			continue
		}
		switch u.OnConflict {
		case job.UniqueIgnore:
			holder.Deduplicated = true
			return holder, nil
		case job.UniqueReplace, job.UniqueReplaceExceptSchedule:
			if holder.State == job.Active {
				return nil, duplicate(holder, u, "A job with the same uniqueness key is active and cannot be replaced while it runs.")
			}
			if holder.State.Terminal() {
				// A terminal holder counted by the policy's states: take
				// the key over, leaving the holder as it is.
				if done, err := take(lock.JobID, held.Version); done {
					return j, err
				}
				continue
			}
			if u.OnConflict == job.UniqueReplaceExceptSchedule && holder.State == job.Scheduled && holder.ScheduledAt != nil {
				j.ScheduledAt, j.ScheduledAtText, j.State, j.EnqueuedAt = holder.ScheduledAt, holder.ScheduledAtText, job.Scheduled, nil
			}
			cancelled, err := s.st.Apply(ctx, store.Cancel(holder.ID, now, holder.State).KeepFor(s.resultTTL, now))
			if err != nil {
				if _, ok := errors.AsType[*store.ConflictError](err); ok {
					continue // it moved: decide again
				}
				return nil, ojserr.Backend(err)
			}
			s.log.InfoContext(ctx, "job replaced by a unique duplicate", "job_id", holder.ID, "replaced_by", j.ID, "previous_state", string(holder.State))
			v, err := s.st.GetItem(ctx, cancelled.ID)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, ojserr.Backend(err)
			}
			if done, err := take(lock.JobID, v.Version); done {
				return j, err
			}
		default:
			return nil, duplicate(holder, u, "A job with the same uniqueness key already exists.")
		}
	}
	return nil, ojserr.New(ojserr.Conflict, "Too many concurrent enqueues of the same uniqueness key; retry.").With("uniqueness_key", u.Key)
}

func duplicate(holder *job.Job, u *job.Unique, msg string) error {
	return ojserr.New(ojserr.Duplicate, msg).With("existing_job_id", holder.ID).With("existing_job_state", string(holder.State)).
		With("uniqueness_key", u.Key).With("on_conflict", u.OnConflict)
}

// createError maps a failed create.
func createError(err error) error {
	if dup, ok := errors.AsType[*store.DuplicateError](err); ok {
		return ojserr.Newf(ojserr.Duplicate, "A job with id '%s' already exists.", dup.ID).With("existing_job_id", dup.ID)
	}
	return ojserr.Backend(err)
}
