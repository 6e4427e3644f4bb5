package events

import (
	"cmp"
	"encoding/json"
	"strconv"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// RateLimitedError is the error type of a job its rate limit key dropped
// (store.Unstarted).
const RateLimitedError = "rate_limited"

// FromJob returns the job events implied by one change of a job item:
// old is the job before (nil when the item was created), cur after, version
// the item version after the change and at the change's time (the stream
// record's approximate creation time, used only where the job has no
// timestamp of its own for the event). The result is a pure function of its
// arguments, in lifecycle order.
func FromJob(source string, old, cur *job.Job, version int64, at time.Time) []Event {
	if cur == nil {
		return nil
	}
	var from job.State
	if old != nil {
		from = old.State
	}
	b := jobEvents{source: source, j: cur, version: version, at: at}
	if from == cur.State {
		b.unchanged(old, at)
		return b.out
	}
	waiting := map[string]any{"priority": cur.Priority}
	if cur.ScheduledAt != nil {
		waiting["scheduled_at"] = job.Timestamp(*cur.ScheduledAt)
	}
	switch cur.State {
	case job.Scheduled:
		b.add(JobScheduled, or(cur.CreatedAt, at), waiting)
	case job.Available:
		if from == job.Active {
			// The lease expired or the worker asked for a requeue: the
			// attempt failed and the job is back in its queue.
			b.failed(from, true)
		}
		b.add(JobEnqueued, or(cur.EnqueuedAt, at), waiting)
	case job.Active:
		b.add(JobStarted, or(cur.StartedAt, at), map[string]any{"worker_id": cmp.Or(cur.WorkerID, "unknown"), "attempt": cur.Attempt})
	case job.Completed:
		d := map[string]any{"attempt": cur.Attempt, "duration_ms": duration(cur.StartedAt, cur.CompletedAt), "result": nil}
		if len(cur.Result) > 0 {
			d["result"] = json.RawMessage(cur.Result)
		}
		b.add(JobCompleted, or(cur.CompletedAt, at), d)
	case job.Retryable:
		e := b.failed(from, true)
		d := map[string]any{"attempt": cur.Attempt, "max_attempts": cur.Retry.MaxAttempts, "error": e}
		if cur.NextAttemptAt != nil {
			d["next_retry_at"] = job.Timestamp(*cur.NextAttemptAt)
		}
		b.add(JobRetrying, b.failedAt(), d)
	case job.Discarded:
		if cur.Error != nil && cur.Error.Type == "expired" && from != job.Active {
			d := map[string]any{"expired_at": job.Timestamp(or(cur.DiscardedAt, at))}
			if cur.CreatedAt != nil {
				d["created_at"] = job.Timestamp(*cur.CreatedAt)
				if cur.ExpiresAt != nil {
					d["ttl_ms"] = cur.ExpiresAt.Sub(*cur.CreatedAt).Milliseconds()
				}
			}
			b.add(JobExpired, or(cur.DiscardedAt, at), d)
			break
		}
		e := map[string]any{"code": "discarded", "message": "the job was discarded"}
		if from == job.Active {
			e = b.failed(from, false)
		} else if cur.Error != nil {
			e = errorData(cur.Error, false)
		}
		b.add(JobDiscarded, or(cur.DiscardedAt, at), map[string]any{"total_attempts": cur.Attempt,
			"last_error": map[string]any{"code": e["code"], "message": e["message"]}})
		if cur.Error != nil && cur.Error.Type == RateLimitedError && cur.KeyLimit != nil && from != job.Active {
			b.add(RateLimitDropped, or(cur.DiscardedAt, at), map[string]any{"key": cur.KeyLimit.Key})
		}
	case job.Cancelled:
		d := map[string]any{"cancelled_by": "api", "previous_state": string(from)}
		if old == nil {
			// Written cancelled: a workflow's first job that a cancel took
			// before the creation wrote it (workflow.takeUnwritten). It had
			// no state before.
			delete(d, "previous_state")
			d["reason"] = "its workflow was cancelled before the job was created"
		}
		b.add(JobCancelled, or(cur.CancelledAt, at), d)
	}
	// The dead letter queue is the set of discarded jobs
	// (ojs-dead-letter.md 4.1): entering it and being retried out of it
	// are dead_letter events besides the job events above.
	switch {
	case cur.State == job.Discarded:
		d := map[string]any{"attempt": cur.Attempt, "discarded_at": job.Timestamp(or(cur.DiscardedAt, at))}
		if cur.Error != nil {
			d["error"] = errorData(cur.Error, false)
		}
		b.add(DeadLetterAdded, or(cur.DiscardedAt, at), d)
	case from == job.Discarded:
		b.add(DeadLetterRetried, or(cur.EnqueuedAt, at), map[string]any{"state": string(cur.State), "retried_by": "api"})
	}
	return b.out
}

// unchanged adds the events of a change that keeps the job's state: a
// heartbeat that renewed the lease, a progress report, a checkpoint saved.
func (b *jobEvents) unchanged(old *job.Job, at time.Time) {
	cur := b.j
	// A heartbeat renews the lease of an active job in the same attempt.
	if cur.State == job.Active && old.Attempt == cur.Attempt && cur.LeaseUntil != nil &&
		(old.LeaseUntil == nil || !old.LeaseUntil.Equal(*cur.LeaseUntil)) {
		t := at
		if cur.StartedAt != nil && !t.After(*cur.StartedAt) {
			t = cur.StartedAt.Add(time.Millisecond)
		}
		b.add(JobHeartbeat, t, map[string]any{"worker_id": cur.WorkerID, "attempt": cur.Attempt,
			"visible_until": job.Timestamp(*cur.LeaseUntil)})
	}
	if p := cur.Progress; cur.State == job.Active && p != nil && (old.Progress == nil || old.Progress.UpdatedAt != p.UpdatedAt) {
		b.add(JobProgress, timeOr(p.UpdatedAt, at), map[string]any{"attempt": cur.Attempt, "progress": p.Value, "message": p.Message, "data": p.Data})
	}
	if cur.LastCheckpoint != nil && cur.CheckpointSeq != old.CheckpointSeq {
		b.add(JobCheckpointed, timeOr(cur.CheckpointAt, at), map[string]any{"attempt": cur.Attempt, "sequence": cur.CheckpointSeq})
	}
}

// timeOr is the timestamp text as a time, or at when it is not one.
func timeOr(text string, at time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, text); err == nil {
		return t
	}
	return at
}

// FromDeletedJob derives the event of a job item's removal: a discarded job
// deleted through the dead letter API is dead_letter.deleted. Jobs removed
// by the retention pruner (pruned) are counted in one dead_letter.pruned
// event per pruning run instead, and other removals are not events.
// version is the removed item's version.
func FromDeletedJob(source string, old *job.Job, pruned bool, version int64, at time.Time) []Event {
	if old == nil || old.State != job.Discarded || pruned {
		return nil
	}
	// The removal time is the stream record's (coarse on DynamoDB Local):
	// never before the job entered the dead letter queue.
	if old.DiscardedAt != nil && !at.After(*old.DiscardedAt) {
		at = old.DiscardedAt.Add(time.Millisecond)
	}
	b := jobEvents{source: source, j: old, version: version + 1, at: at}
	b.add(DeadLetterDeleted, at, map[string]any{"deleted_by": "api"})
	return b.out
}

type jobEvents struct {
	source  string
	j       *job.Job
	version int64
	at      time.Time
	out     []Event
}

// add appends an event with the fields every job event carries.
func (b *jobEvents) add(typ string, at time.Time, data map[string]any) {
	data["job_id"] = b.j.ID
	data["job_type"] = b.j.Type
	data["queue"] = b.j.Queue
	if b.j.WorkflowID != "" {
		data["workflow_id"] = b.j.WorkflowID
	}
	if b.j.Tenant != "" {
		data["tenant_id"] = b.j.Tenant
	}
	seq := b.version*4 + int64(len(b.out))
	b.out = append(b.out, New(b.source, typ, b.j.ID, at, seq, data, strconv.FormatInt(b.version, 10), strconv.Itoa(len(b.out))))
}

// failed adds job.failed for the attempt that just ended and returns its
// error data.
func (b *jobEvents) failed(from job.State, retryable bool) map[string]any {
	e := errorData(b.j.Error, retryable)
	d := map[string]any{"attempt": b.j.Attempt, "error": e}
	if b.j.StartedAt != nil {
		d["duration_ms"] = duration(b.j.StartedAt, ptr(b.failedAt()))
	}
	b.add(JobFailed, b.failedAt(), d)
	return e
}

// failedAt is when the last attempt failed.
func (b *jobEvents) failedAt() time.Time {
	if b.j.Error != nil {
		if t, err := time.Parse(time.RFC3339Nano, b.j.Error.Timestamp); err == nil {
			return t
		}
	}
	return or(b.j.CompletedAt, b.at)
}

func errorData(e *job.ErrorInfo, retryable bool) map[string]any {
	if e == nil {
		return map[string]any{"code": "handler_error", "message": "the attempt failed", "retryable": retryable}
	}
	return map[string]any{"code": cmp.Or(e.Code, e.Type, "handler_error"), "message": e.Message, "retryable": retryable}
}

func or(t *time.Time, def time.Time) time.Time {
	if t != nil {
		return *t
	}
	return def
}

func ptr(t time.Time) *time.Time { return &t }

func duration(from, to *time.Time) int64 {
	if from == nil || to == nil || to.Before(*from) {
		return 0
	}
	return to.Sub(*from).Milliseconds()
}
