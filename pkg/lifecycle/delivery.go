package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// ItemStore is the extra read a push-mode claim needs.
type ItemStore interface {
	GetItem(ctx context.Context, id string) (store.Item, error)
}

var _ ItemStore = (*store.Store)(nil)

// clockSkew is how early a delayed SQS message may arrive and still be
// held by the worker until its time instead of being re-sent.
const clockSkew = time.Second

// Delivered is the outcome of ClaimDelivered.
type Delivered struct {
	// Job is the claimed job, nil when there is nothing to run.
	Job *job.Job
	// RetryIn is set when the job is not due yet but will be within the
	// SQS delay limit: the caller re-sends the message with this delay.
	RetryIn time.Duration
}

// ClaimDelivered handles an SQS delivery of message m's job for a push-mode
// worker: it claims the job if it is ready (promoting a due scheduled or
// retryable job, or requeueing an expired lease, first) with a lease of
// leaseFor; a job running elsewhere, finished or unknown yields nothing. A
// message carrying what the claim needs (m.Claim) is claimed without a
// read first, a job that moved on being handled from the refused write.
func (s *Service) ClaimDelivered(ctx context.Context, items ItemStore, m dispatch.Message, workerID string, leaseFor time.Duration) (Delivered, error) {
	id := m.ID
	var it store.Item
	var err error
	if h := m.Claim; h != nil && h.TimeoutMS > 0 && m.Queue != "" {
		if p, err := s.queues.Paused(ctx, m.Queue); err != nil || p {
			return Delivered{}, err // paused: as below, the message is dropped
		}
		hinted := &job.Job{ID: id, Queue: m.Queue, State: job.Available, Timeout: time.Duration(h.TimeoutMS) * time.Millisecond}
		var check time.Time
		if h.CheckMS > 0 {
			check = time.UnixMilli(h.CheckMS)
		}
		claimed, cur, cerr := s.claim(ctx, hinted, workerID, leaseFor, check)
		if he, ok := errors.AsType[*HeldError](cerr); ok {
			return heldDelivery(he), nil
		}
		if cerr != nil || cur == nil {
			return Delivered{Job: claimed}, cerr
		}
		it = *cur
	} else if it, err = items.GetItem(ctx, id); err != nil {
		return Delivered{}, ignoreConflict(err) // gone: nothing to run
	}
	j, now := it.Job, s.Now()
	var redelivery time.Time // the redelivery check read, when the claim may keep it
	if p, err := s.queues.Paused(ctx, j.Queue); err != nil {
		return Delivered{}, err
	} else if p {
		// A paused queue's job stays where it is; the message is dropped
		// and the sweeper re-sends the job once the queue is resumed.
		return Delivered{}, nil
	}
	switch j.State {
	case job.Scheduled, job.Retryable:
		if wait := it.DueAt.Sub(now); wait > clockSkew {
			if wait <= 15*time.Minute {
				return Delivered{RetryIn: wait}, nil
			}
			return Delivered{}, nil // the sweeper delivers it nearer the time
		} else if wait > 0 {
			// SQS delays are whole seconds, so a delayed message can arrive
			// a moment early: wait it out rather than start the attempt
			// before its time (a retry never runs before its backoff).
			if !ctxsleep.Sleep(ctx, wait) {
				return Delivered{}, ctx.Err()
			}
			now = now.Add(wait)
		}
		if j.ExpiresAt != nil && !j.ExpiresAt.After(now) {
			return Delivered{}, s.expire(ctx, j, now)
		}
		t := store.Promote(j, now, s.redel, true)
		if j, err = s.st.Apply(ctx, t); err != nil {
			return Delivered{}, ignoreConflict(err)
		}
		redelivery = t.DueAt() // the check the promotion listed
	case job.Active:
		if j.LeaseUntil == nil || j.LeaseUntil.After(now) {
			return Delivered{}, nil // running elsewhere
		}
		f := s.decide(j, ErrorInput{Type: "timeout", Code: "timeout", Message: "The previous attempt ended without a result (worker crash or timeout)."}, now)
		t := store.ExpireLease(j, f, now, s.redel, true)
		if j, err = s.st.Apply(ctx, t); err != nil {
			return Delivered{}, ignoreConflict(err)
		}
		redelivery = t.DueAt()
		if j.State != job.Available {
			s.finished(ctx, j)
			return Delivered{}, nil
		}
	case job.Available:
		redelivery = it.DueAt
	default:
		return Delivered{}, nil
	}
	claimed, err := s.Claim(ctx, j, workerID, leaseFor, redelivery)
	if he, ok := errors.AsType[*HeldError](err); ok {
		return heldDelivery(he), nil
	}
	return Delivered{Job: claimed}, err
}

// heldDelivery is the outcome of a delivery whose job's rate limit key
// allows no start now: the message comes back when the key's rate window
// or throttle allows one (at least a second: SQS delays are whole
// seconds), or after HeldRedelivery when its concurrency is full.
func heldDelivery(he *HeldError) Delivered {
	if he.Limit == ratelimit.Concurrency {
		return Delivered{RetryIn: HeldRedelivery}
	}
	return Delivered{RetryIn: min(max(he.Wait, time.Second), 15*time.Minute)}
}

// HeldRedelivery is how long a push-mode job held by its key's full
// concurrency waits before its delivery is tried again.
const HeldRedelivery = 5 * time.Second

func ignoreConflict(err error) error {
	if _, ok := errors.AsType[*store.ConflictError](err); ok || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
