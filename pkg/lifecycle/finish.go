package lifecycle

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// ErrorInput is a failure reported by a worker (FAIL) or a push-mode
// handler.
type ErrorInput struct {
	// Type is the error type matched against non_retryable_errors.
	Type string
	// Code is an OJS error code or a handler response code (RETRY,
	// DISCARD, DEAD_LETTER, FAIL) that overrides the retry policy.
	Code      string
	Message   string
	Retryable *bool
	Backtrace []string
	Details   json.RawMessage
	// Requeue returns the job to available at once instead of applying the
	// retry policy (the attempt still counts).
	Requeue bool
	// RateLimitUntil is the error's rate_limit_until (ojs-rate-limiting.md
	// 9.1): a keyed job's key starts no job before it. Also read from
	// details.rate_limit_until (a push-mode handler's error).
	RateLimitUntil string
}

// holdUntil is the time the error asks its job's rate limit key to hold
// its jobs until (zero: none, or not a timestamp).
func (in ErrorInput) holdUntil() time.Time {
	s := in.RateLimitUntil
	if s == "" && len(in.Details) > 0 {
		var d struct {
			Until string `json:"rate_limit_until"`
		}
		if json.Unmarshal(in.Details, &d) == nil {
			s = d.Until
		}
	}
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// errorType is the type matched against non_retryable_errors: the explicit
// type, else details.error_class, else the code.
func (in ErrorInput) errorType() string {
	var d struct {
		ErrorClass string `json:"error_class"`
	}
	if in.Type == "" && len(in.Details) > 0 && json.Unmarshal(in.Details, &d) != nil {
		d.ErrorClass = ""
	}
	return cmp.Or(in.Type, d.ErrorClass, in.Code, "handler_error")
}

// Handler response codes (ojs-retry.md section 7).
const (
	CodeRetry      = "RETRY"
	CodeDiscard    = "DISCARD"
	CodeDeadLetter = "DEAD_LETTER"
	CodeFail       = "FAIL"
)

// Error types of attempts interrupted by a worker's graceful shutdown
// (ojs-graceful-shutdown.md 5.3 and 7.2).
const (
	ErrShutdown        = "ShutdownError"
	ErrShutdownTimeout = "ShutdownTimeout"
)

// decide applies the retry policy to a failed attempt of j.
func (s *Service) decide(j *job.Job, in ErrorInput, now time.Time) store.Failure {
	typ := in.errorType()
	msg := cmp.Or(in.Message, "The handler failed without a message.")
	info := job.ErrorInfo{Type: truncate(typ, 1024), Code: truncate(in.Code, 1024), Message: truncate(msg, 4096), Retryable: in.Retryable,
		Details: in.Details, Attempt: j.Attempt, Timestamp: job.Timestamp(now)}
	// At most 50 lines of 1 KiB: an unbounded backtrace made the job item
	// larger than DynamoDB's 400 KB and the FAIL a 500.
	for _, l := range in.Backtrace[:min(len(in.Backtrace), 50)] {
		info.Backtrace = append(info.Backtrace, truncate(l, 1024))
	}
	// An attempt interrupted by a worker's shutdown did not fail on its
	// own (ojs-graceful-shutdown.md 5.3): it is retried even if the worker
	// marked the error non-retryable; the policy still decides.
	interrupted := typ == ErrShutdown || typ == ErrShutdownTimeout
	retry := j.Retry.CanRetry(j.Attempt) && !slices.Contains([]string{CodeDiscard, CodeDeadLetter, CodeFail}, strings.ToUpper(in.Code)) &&
		(in.Retryable == nil || *in.Retryable || interrupted) && !j.Retry.IsNonRetryable(typ)
	f := store.Failure{Error: info, Retry: retry}
	if retry {
		f.NextAttempt = now.Add(j.Retry.Delay(j.Attempt, s.rnd))
	}
	return f
}

// Ack completes an active job. attempt > 0 pins the attempt being
// acknowledged (push-mode worker); pull-mode ACKs pass 0.
func (s *Service) Ack(ctx context.Context, id string, result json.RawMessage, attempt int) (*job.Job, error) {
	return s.AckOwned(ctx, id, "", attempt, result)
}

// AckOwned is ACK by the worker that holds the job's reservation
// (ojs-worker-protocol.md 5.6): with workerID set, the completion is
// conditional on the job being active under that worker id (a condition
// of the same write, not a read first), so a worker whose job was fetched
// again by another is refused (409). attempt, when not 0, pins the ACK to
// that attempt (the FETCH answer's "attempt").
func (s *Service) AckOwned(ctx context.Context, id, workerID string, attempt int, result json.RawMessage) (*job.Job, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	if len(result) > job.MaxResultBytes {
		return nil, ojserr.Newf(ojserr.PayloadTooLarge, "The result is %d bytes; the maximum is %d bytes.", len(result), job.MaxResultBytes).With("field", "result")
	}
	if n := store.PackedBytes(result); n > store.MaxPackedResultBytes {
		return nil, ojserr.Newf(ojserr.PayloadTooLarge, "The result compresses to %d bytes; the most stored is %d bytes.", n, store.MaxPackedResultBytes).With("field", "result")
	}
	now := s.Now()
	t := store.Complete(id, result, attempt, now).KeepFor(s.resultTTL, now)
	if workerID != "" {
		t = t.HeldBy(workerID)
	}
	j, err := s.st.Apply(ctx, t)
	if ce, ok := errors.AsType[*store.ConflictError](err); ok {
		switch cur := ce.Current; {
		case workerID != "" && cur.State == job.Active && cur.WorkerID != workerID && cur.WorkerID != "":
			return nil, notHolder("acknowledge", id, workerID)
		case cur.State == job.Active && (attempt == 0 || cur.Attempt == attempt):
			return nil, leaseEnded("acknowledge", cur)
		case attempt != 0 && cur.Attempt != attempt:
			return nil, attemptOver("acknowledge", cur, attempt)
		}
		return nil, notActive("acknowledge", id, ce.Current.State)
	}
	if err != nil {
		return nil, store.APIError(err, id, "acknowledge")
	}
	s.log.InfoContext(ctx, "job completed", "job_id", id, "attempt", j.Attempt)
	s.finished(ctx, j)
	return j, nil
}

// Nack records a failed attempt and applies the retry policy: the job
// becomes retryable (with next_attempt_at) or discarded.
func (s *Service) Nack(ctx context.Context, id string, in ErrorInput, attempt int) (*job.Job, error) {
	return s.NackOwned(ctx, id, "", attempt, in)
}

// NackOwned is FAIL by the worker that holds the reservation (checked on
// the read, and a condition of the write), pinned to attempt when it is
// not 0 (see AckOwned).
func (s *Service) NackOwned(ctx context.Context, id, workerID string, attempt int, in ErrorInput) (*job.Job, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	for tries := 0; tries < 3; tries++ {
		cur, err := s.st.Get(ctx, id)
		if err != nil {
			return nil, store.APIError(err, id, "fail")
		}
		if attempt > 0 && cur.Attempt != attempt {
			return nil, attemptOver("fail", cur, attempt)
		}
		if cur.State != job.Active {
			return nil, notActive("fail", id, cur.State)
		}
		if workerID != "" && cur.WorkerID != workerID && cur.WorkerID != "" {
			return nil, notHolder("fail", id, workerID)
		}
		now := s.Now()
		if cur.LeaseUntil != nil && !cur.LeaseUntil.After(now) {
			return nil, leaseEnded("fail", cur)
		}
		f := s.decide(cur, in, now)
		t := store.Fail(cur, f, now)
		if in.Requeue {
			t = store.Requeue(cur, f.Error, now, s.redel)
		}
		if workerID != "" {
			t = t.HeldBy(workerID)
		}
		j, err := s.st.Apply(ctx, t)
		if _, ok := errors.AsType[*store.ConflictError](err); ok {
			continue // a heartbeat or lease change raced us; read again
		}
		if err != nil {
			return nil, store.APIError(err, id, "fail")
		}
		s.log.InfoContext(ctx, "job failed", "job_id", id, "attempt", j.Attempt, "state", string(j.State), "error_type", f.Error.Type)
		s.keyed.hold(ctx, cur, in, now)
		s.finished(ctx, j)
		return j, nil
	}
	return nil, ojserr.Backend(fmt.Errorf("fail job %s: too much contention", id))
}

// notActive is the answer to an ACK or FAIL of a job that is not active.
func notActive(op, id string, st job.State) error {
	return ojserr.StateConflict(ojserr.Conflict, "Cannot %s job not in 'active' state. Current state: '%s'.", op, st).
		With("job_id", id).With("current_state", string(st)).With("expected_state", "active")
}

// attemptOver is the answer to an ACK or FAIL pinned to an attempt that is
// no longer the job's.
func attemptOver(op string, j *job.Job, attempt int) error {
	return ojserr.StateConflict(ojserr.Conflict, "Cannot %s job %s: attempt %d is over; the job is in attempt %d (state '%s').", op, j.ID, attempt, j.Attempt, j.State).
		With("job_id", j.ID).With("current_state", string(j.State)).With("attempt", j.Attempt).With("requested_attempt", attempt)
}

func notHolder(op, id, workerID string) error {
	return ojserr.StateConflict(ojserr.Conflict, "Cannot %s job %s: worker '%s' does not hold its reservation (its lease expired and the job was fetched again).", op, id, workerID).
		With("job_id", id).With("current_state", string(job.Active)).With("worker_id", workerID)
}
