package store

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// Transition is one complete, valid change of a job item, applied only if
// the job is still in one of the From states (and Extra holds). Build it
// with the constructors below; Store.Apply runs it as one conditional
// UpdateItem.
type Transition struct {
	ID   string
	From []job.State
	// To is the resulting state; equal to From[0] for updates that keep the
	// state (heartbeat, redelivery bookkeeping).
	To     job.State
	update expression.UpdateBuilder
	extra  *expression.ConditionBuilder
	// due and dueAt are the due entry the transition lists the job in,
	// if any (the store's dueWatch learns of it).
	due   string
	dueAt time.Time
	// token is written with the transition (attribute wt): see newTransition.
	token string
}

func newTransition(id string, to job.State, from ...job.State) Transition {
	// Every write carries a token of its own, so that Apply knows a write
	// whose answer was lost, retried by the SDK and finding its condition
	// failed, as its own (a claim is not taken for another worker's, nor
	// an ACK answered 409 although it completed the job).
	tok := strconv.FormatUint(rand.Uint64(), 36)
	u := expression.Set(expression.Name(attrState), expression.Value(string(to))).
		Add(expression.Name(attrVersion), expression.Value(1)).
		Set(expression.Name(attrWriteToken), expression.Value(tok))
	return Transition{ID: id, From: from, To: to, update: u, token: tok}
}

func (t *Transition) set(name string, v any) {
	t.update = t.update.Set(expression.Name(name), expression.Value(v))
}

// DueAt is the time of the due entry the transition lists (zero when it
// lists none): for a push-mode job made available, its redelivery check.
func (t Transition) DueAt() time.Time { return t.dueAt }

// listDue lists the job in its queue's due shard at at.
func (t *Transition) listDue(queue string, at time.Time) {
	t.due, t.dueAt = dueKey(queue, t.ID), at
	t.set(attrDuePK, t.due)
	t.set(attrDueAt, ms(at))
}

func (t *Transition) remove(names ...string) {
	for _, n := range names {
		t.update = t.update.Remove(expression.Name(n))
	}
}

// endAttempt removes what a claim wrote for its attempt: the lease, its
// length and renewal (Extend), the worker, a cancel request.
func (t *Transition) endAttempt() {
	t.remove(attrLease, "lease_ms", attrRenewAt, attrRenewMS, attrWorker, "cancel_requested")
}

// absentOr is c, or attribute name absent.
func absentOr(name string, c expression.ConditionBuilder) expression.ConditionBuilder {
	return expression.Or(expression.AttributeNotExists(expression.Name(name)), c)
}

func (t *Transition) and(c expression.ConditionBuilder) {
	if t.extra == nil {
		t.extra = &c
		return
	}
	combined := t.extra.And(c)
	t.extra = &combined
}

// validate checks every From -> To against the job state machine.
func (t Transition) validate() error {
	if len(t.From) == 0 {
		return fmt.Errorf("transition of job %s has no source state", t.ID)
	}
	for _, f := range t.From {
		if f != t.To && !job.CanTransition(f, t.To) {
			return fmt.Errorf("invalid transition %s -> %s for job %s", f, t.To, t.ID)
		}
	}
	return nil
}

func (t Transition) condition() expression.ConditionBuilder {
	ops := make([]expression.OperandBuilder, 0, len(t.From))
	for _, s := range t.From[1:] {
		ops = append(ops, expression.Value(string(s)))
	}
	c := expression.Name(attrState).In(expression.Value(string(t.From[0])), ops...)
	if t.extra != nil {
		c = c.And(*t.extra)
	}
	return c
}

// becomeAvailable sets the attributes of an available job: a pull-mode job
// is listed in the ready index (FETCH's order); a push-mode job, whose place
// in line SQS holds, only gets a redelivery check in the due index.
func (t *Transition) becomeAvailable(queue, tenant string, priority int, push bool, now time.Time, redeliverAfter time.Duration, inline bool) {
	t.set("enqueued_at", job.Timestamp(now))
	if push {
		t.remove(attrReadyPK, attrReadySK)
		t.listDue(queue, now.Add(redeliverAfter))
	} else {
		t.set(attrReadyPK, readyKey(queue, t.ID))
		t.set(attrReadySK, readySortKey(priority, now, t.ID))
		t.remove(attrDuePK, attrDueAt)
		if tenant != "" {
			// Also listed among its tenant's (the tenant index). A job
			// read from an index (no tenant) keeps the partition it has.
			t.set(attrTenantPK, tenantKey(tenant, queue, t.ID))
		}
	}
	if inline {
		t.set(attrDispatch, DispatchInline)
	} else {
		t.remove(attrDispatch)
	}
	t.endAttempt()
	t.remove("next_attempt_at")
}

// ClaimOpts describes a claim of an available job.
type ClaimOpts struct {
	Queue    string
	WorkerID string
	Now      time.Time
	// LeaseUntil ends the claim unless extended by a heartbeat.
	LeaseUntil time.Time
	// Deadline is when the job's execution timeout ends the attempt;
	// heartbeats never extend the lease past it.
	Deadline time.Time
	// Redelivery is the time of the job's redelivery check (a push-mode
	// job's due entry) as the claimer read it; zero when not known. A
	// claim whose lease ends at or before it keeps that entry, on
	// condition that it still falls there (rewritten in place: 3 write
	// units, not 4); the sweeper then finds a dead worker's attempt then.
	Redelivery time.Time
	// Key is the job's rate limit key (job.KeyLimit) when the claim takes
	// one of the key's slots in the same transaction (Store.ApplyWith).
	// A claim without it finds a keyed job's condition failed.
	Key string
	// Tenant, when set, claims only a job of that tenant (a
	// tenant-scoped FETCH).
	Tenant string
}

// Claim moves an available job to active for one worker: attempt+1,
// started_at, a lease, and an entry in the due index at the lease's end
// (or, see ClaimOpts.Redelivery, the redelivery check kept where it is).
// A job whose expires_at has passed is not claimed.
func Claim(id string, o ClaimOpts) Transition {
	t := newTransition(id, job.Active, job.Available)
	t.update = t.update.Add(expression.Name(attrAttempt), expression.Value(1))
	t.set("started_at", job.Timestamp(o.Now))
	lease := o.LeaseUntil
	if !o.Deadline.IsZero() && o.Deadline.Before(lease) {
		lease = o.Deadline
	}
	t.set(attrLease, ms(lease))
	t.set("lease_ms", o.LeaseUntil.Sub(o.Now).Milliseconds())
	gap := o.LeaseUntil.Sub(o.Now) / RenewFraction
	t.set(attrRenewMS, gap.Milliseconds())
	t.set(attrRenewAt, ms(o.Now.Add(gap)))
	t.set("deadline_ms", ms(o.Deadline))
	if !o.Redelivery.IsZero() && !o.Redelivery.Before(lease) {
		t.and(expression.Name(attrDueAt).GreaterThanEqual(expression.Value(ms(lease))))
	} else {
		t.listDue(o.Queue, lease)
	}
	if o.WorkerID != "" {
		t.set(attrWorker, o.WorkerID)
	} else {
		t.remove(attrWorker)
	}
	t.remove(attrReadyPK, attrReadySK, attrDispatch, "next_attempt_at", "cancel_requested", attrProgress, attrProgressInfo)
	t.and(absentOr(attrExpires, expression.Name(attrExpires).GreaterThan(expression.Value(ms(o.Now)))))
	if o.Key == "" {
		t.and(expression.AttributeNotExists(expression.Name(attrRateKey)))
	} else {
		t.and(expression.Name(attrRateKey).Equal(expression.Value(o.Key)))
	}
	if o.Tenant != "" {
		t.and(expression.Name(attrTenant).Equal(expression.Value(o.Tenant)))
	}
	return t
}

// HeldBy makes the transition conditional on the job's reservation not
// being held by another worker (ojs-worker-protocol.md 5.6): held by
// workerID, or fetched without a worker id.
func (t Transition) HeldBy(workerID string) Transition {
	t.and(absentOr(attrWorker, expression.Name(attrWorker).Equal(expression.Value(workerID))))
	return t
}

// leaseHeld makes a transition conditional on the job's lease not having
// ended at now: an ACK, FAIL or heartbeat after the lease's end is refused
// whether or not the job was requeued yet (ojs-worker-protocol.md 5.5).
func (t *Transition) leaseHeld(now time.Time) {
	t.and(absentOr(attrLease, expression.Name(attrLease).GreaterThan(expression.Value(ms(now)))))
}

// Complete records success of an active job whose lease has not ended.
// attempt > 0 additionally requires the job to still be in that attempt
// (a late completion of an earlier attempt changes nothing).
func Complete(id string, result json.RawMessage, attempt int, now time.Time) Transition {
	t := newTransition(id, job.Completed, job.Active)
	t.set("completed_at", job.Timestamp(now))
	// Listed among its queue's completions (index "done", keys only), for
	// queue stats: in the partition of the due entry the job leaves (its
	// queue's due shard, by job id: doneKeys), or the queue name for a job
	// without one.
	t.update = t.update.Set(expression.Name(attrDonePK), expression.IfNotExists(expression.Name(attrDuePK), expression.Name("queue")))
	t.set(attrDoneSK, DeadSortKey(now, id))
	if len(result) > 0 {
		t.set("result", Packed(result))
		t.set("result_bytes", len(result))
		// Lists count the result in the job's FetchBytes (fb).
		t.update = t.update.Set(expression.Name(attrFetchBytes), expression.Plus(
			expression.IfNotExists(expression.Name(attrFetchBytes), expression.Value(0)), expression.Value(awslimit.JSONStringLen(result))))
	} else {
		t.remove("result", "result_bytes")
	}
	t.endAttempt()
	t.remove("error", "deadline_ms", attrDuePK, attrDueAt, attrReadyPK, attrReadySK)
	if attempt > 0 {
		t.and(expression.Name(attrAttempt).Equal(expression.Value(attempt)))
	}
	t.leaseHeld(now)
	return t
}

// KeepFor sets the TTL of the job the transition finishes (completed or
// cancelled) to now plus its retention (attrRetain), or plus def seconds
// (the environment's result_ttl) for a job that sets none, in the same
// write: DynamoDB deletes the item after it (ojs-results.md 7.1). A
// workflow's job keeps its workflow's expiry (attrWFTTL, retention 0).
func (t Transition) KeepFor(def int64, now time.Time) Transition {
	if def == job.PermanentResultTTL {
		def = permanentSpan
	}
	t.update = t.update.Set(expression.Name(attrTTL), expression.Plus(
		expression.IfNotExists(expression.Name(attrWFTTL), expression.Value(now.Unix())),
		expression.IfNotExists(expression.Name(attrRetain), expression.Value(def))))
	return t
}

// Failure is a failed attempt and what the retry policy decided.
type Failure struct {
	Error job.ErrorInfo
	// Retry is true when the job will run again at NextAttempt.
	Retry       bool
	NextAttempt time.Time
}

// errorsWith returns the error history with e appended, bounded in count
// and bytes (job.BoundHistory), and e as stored (the job's current error).
func errorsWith(j *job.Job, e job.ErrorInfo) ([]string, string) {
	e.OccurredAt = cmp.Or(e.OccurredAt, e.Timestamp)
	out := job.BoundHistory(j.Errors, e)
	return out, out[len(out)-1]
}

// setErrors appends e to the error history of j (as read by key: its
// history is needed) and records the job's new FETCH answer size.
func (t *Transition) setErrors(j *job.Job, e job.ErrorInfo) {
	list, last := errorsWith(j, e)
	t.set("errors", list)
	t.set("error", last)
	after := *j
	after.Errors = decodeErrors(list)
	if n := len(after.Errors); n > 0 {
		after.Error = &after.Errors[n-1]
	}
	t.set(attrFetchBytes, FetchBytes(&after))
}

func (t *Transition) recordFailure(j *job.Job, f Failure, now time.Time) {
	t.setErrors(j, f.Error)
	t.endAttempt()
	t.remove("deadline_ms", attrDispatch)
	if t.To == job.Retryable {
		t.set("retry_delay_ms", f.NextAttempt.Sub(now).Milliseconds())
		t.set("next_attempt_at", job.Timestamp(f.NextAttempt))
		t.listDue(j.Queue, f.NextAttempt)
		t.remove(attrReadyPK, attrReadySK)
	} else if t.To == job.Discarded {
		t.discard(j, now)
		t.set("completed_at", job.Timestamp(now))
	}
}

// discard lists the job in the dead letter index. Callers that end an
// attempt also set completed_at; expiry and cancellation do not.
func (t *Transition) discard(j *job.Job, now time.Time) {
	t.set("discarded_at", job.Timestamp(now))
	t.set(attrReadyPK, deadPrefix+j.Queue)
	t.set(attrReadySK, DeadSortKey(now, j.ID))
	t.remove(attrTenantPK) // out of the tenant index (whose sort key this is too)
	t.remove(attrDuePK, attrDueAt, "next_attempt_at")
}

// Fail records a failed attempt of active job j (as read) and moves it to
// retryable or discarded. It applies only while j is still in the same
// attempt and its lease has not ended.
func Fail(j *job.Job, f Failure, now time.Time) Transition {
	to := job.Discarded
	if f.Retry {
		to = job.Retryable
	}
	t := newTransition(j.ID, to, job.Active)
	t.recordFailure(j, f, now)
	t.and(expression.Name(attrAttempt).Equal(expression.Value(j.Attempt)))
	t.leaseHeld(now)
	return t
}

// ExpireLease handles an active job whose lease ended without ACK or FAIL:
// back to available if attempts remain (ojs-core 6.3), discarded otherwise.
// inline marks the job for immediate claim by the caller.
func ExpireLease(j *job.Job, f Failure, now time.Time, redeliverAfter time.Duration, inline bool) Transition {
	to := job.Discarded
	if f.Retry {
		to = job.Available
	}
	t := newTransition(j.ID, to, job.Active)
	t.setErrors(j, f.Error)
	if to == job.Available {
		t.becomeAvailable(j.Queue, j.Tenant, j.Priority, j.Push, now, redeliverAfter, inline)
		t.remove("deadline_ms")
	} else {
		t.remove(attrLease, "deadline_ms", attrWorker, "cancel_requested", attrDispatch)
		t.discard(j, now)
		t.set("completed_at", job.Timestamp(now))
	}
	t.and(expression.Name(attrAttempt).Equal(expression.Value(j.Attempt)))
	t.and(expression.Name(attrLease).LessThanEqual(expression.Value(ms(now))))
	return t
}

// Promote makes a scheduled or retryable job available once its time has
// come. inline marks it for immediate claim by the caller (push-mode
// worker), so that the stream relay does not deliver it again.
func Promote(j *job.Job, now time.Time, redeliverAfter time.Duration, inline bool) Transition {
	t := newTransition(j.ID, job.Available, j.State)
	t.becomeAvailable(j.Queue, j.Tenant, j.Priority, j.Push, now, redeliverAfter, inline)
	t.and(expression.Name(attrDueAt).LessThanEqual(expression.Value(ms(now))))
	return t
}

// Expire discards a job that was not started before its expires_at.
func Expire(j *job.Job, now time.Time) Transition {
	t := Unstarted(j, "expired", "The job expired before it started (expires_at "+job.Timestamp(*j.ExpiresAt)+").", now)
	t.and(expression.Name(attrExpires).LessThanEqual(expression.Value(ms(now))))
	return t
}

// Unstarted discards job j, still in its state as read and not started,
// for why (the error's type; a rate limit key's on_limit "drop":
// "rate_limited").
func Unstarted(j *job.Job, why, msg string, now time.Time) Transition {
	t := newTransition(j.ID, job.Discarded, j.State)
	t.setErrors(j, job.ErrorInfo{Type: why, Code: "DISCARD", Message: msg, Attempt: j.Attempt, Timestamp: job.Timestamp(now)})
	t.remove(attrLease, attrWorker, attrDispatch)
	t.discard(j, now)
	t.and(expression.Name(attrAttempt).Equal(expression.Value(j.Attempt)))
	return t
}

// Activate moves a pending job to available.
func Activate(j *job.Job, now time.Time, redeliverAfter time.Duration) Transition {
	t := newTransition(j.ID, job.Available, job.Pending)
	t.becomeAvailable(j.Queue, j.Tenant, j.Priority, j.Push, now, redeliverAfter, false)
	t.set("activated_at", job.Timestamp(now))
	return t
}

// Cancel moves a job in one of the from states to cancelled.
func Cancel(id string, now time.Time, from ...job.State) Transition {
	t := newTransition(id, job.Cancelled, from...)
	t.set("cancelled_at", job.Timestamp(now))
	t.remove(attrReadyPK, attrReadySK, attrDuePK, attrDueAt, attrLease, attrDispatch, "next_attempt_at")
	return t
}

// Extend renews the lease of an active job (heartbeat) whose lease has not
// ended at now: to leaseUntil, or when that is zero to now plus its claim's
// lease length (ojs-worker-protocol.md 5.4). workerID, when set, must match
// the claim's. The lease never passes the attempt's deadline: an explicit
// leaseUntil past it fails the condition; a claim's length is clamped by
// the caller (Clamp). Nor is a lease moved by less than 1/RenewFraction of
// its length, or when it ends at the deadline: the condition fails (one
// write unit instead of three), and the caller tells these refusals from
// the others by the job it returns.
func Extend(id, workerID string, leaseUntil, now time.Time) Transition {
	t := newTransition(id, job.Active, job.Active)
	if leaseUntil.IsZero() {
		next := expression.Plus(expression.Value(ms(now)),
			expression.IfNotExists(expression.Name("lease_ms"), expression.Value(job.DefaultVisibilityTimeout.Milliseconds())))
		t.update = t.update.Set(expression.Name(attrLease), next).Set(expression.Name(attrDueAt), next).
			Set(expression.Name(attrRenewAt), expression.Plus(expression.Value(ms(now)),
				expression.IfNotExists(expression.Name(attrRenewMS), expression.Value(0))))
		t.and(absentOr(attrRenewAt, expression.Name(attrRenewAt).LessThanEqual(expression.Value(ms(now)))))
		t.and(absentOr("deadline_ms", expression.Name(attrLease).LessThan(expression.Name("deadline_ms"))))
	} else {
		slack := leaseUntil.Sub(now) / RenewFraction
		t.set(attrLease, ms(leaseUntil))
		t.set(attrDueAt, ms(leaseUntil))
		t.set(attrRenewAt, ms(now.Add(slack)))
		t.and(absentOr("deadline_ms", expression.Name("deadline_ms").GreaterThanEqual(expression.Value(ms(leaseUntil)))))
		t.and(expression.Name(attrLease).LessThanEqual(expression.Value(ms(leaseUntil.Add(-slack)))))
	}
	if workerID != "" {
		t = t.HeldBy(workerID)
	}
	t.leaseHeld(now)
	return t
}

// ReportProgress records a worker's progress report on an active job
// (ojs-progress.md 6.1), and its checkpoint when it carries one (6.4:
// kept across attempts). With a fraction, the condition keeps it from going
// down: a lower one fails the write, and the caller writes the report
// without it (ReportProgress with p.Value nil).
func ReportProgress(id string, p job.Progress, checkpoint json.RawMessage) Transition {
	t := newTransition(id, job.Active, job.Active)
	if len(checkpoint) > 0 {
		t.saveCheckpoint(checkpoint, p.UpdatedAt)
	}
	if p.Value != nil {
		t.set(attrProgress, *p.Value)
		t.and(expression.Or(expression.AttributeNotExists(expression.Name(attrProgress)),
			expression.Name(attrProgress).LessThanEqual(expression.Value(*p.Value))))
	}
	p.Value = nil
	b, _ := json.Marshal(p)
	t.set(attrProgressInfo, string(b))
	return t
}

// SaveCheckpoint records state as job j's checkpoint while j is still in
// its state as read (ojs-durable-execution.md 4.1); ClearCheckpoint
// removes it (4.4).
func SaveCheckpoint(j *job.Job, state json.RawMessage, now time.Time) Transition {
	t := newTransition(j.ID, j.State, j.State)
	t.saveCheckpoint(state, job.Timestamp(now))
	return t
}

func ClearCheckpoint(j *job.Job) Transition {
	t := newTransition(j.ID, j.State, j.State)
	t.remove(attrCheckpoint, attrCkptSeq, "ckpt_at")
	return t
}

// saveCheckpoint stores a checkpoint, one more in its sequence.
func (t *Transition) saveCheckpoint(state json.RawMessage, at string) {
	t.set(attrCheckpoint, Packed(state))
	t.set("ckpt_at", at)
	t.update = t.update.Add(expression.Name(attrCkptSeq), expression.Value(1))
}

// RenewFraction: a heartbeat moves a lease only by at least 1/RenewFraction
// of its length (Extend).
const RenewFraction = 10

// Clamp sets an active job's lease to its deadline when a heartbeat
// extended it past it (only while the lease is later than the deadline).
func Clamp(id string, deadline time.Time) Transition {
	t := newTransition(id, job.Active, job.Active)
	t.set(attrLease, ms(deadline))
	t.set(attrDueAt, ms(deadline))
	t.and(expression.Name(attrLease).GreaterThan(expression.Value(ms(deadline))))
	return t
}

// Redelivered pushes back the redelivery check of an available push-mode
// job after the sweeper sent it to SQS again.
func Redelivered(id string, dueAt, next time.Time) Transition {
	t := newTransition(id, job.Available, job.Available)
	t.set(attrDueAt, ms(next))
	t.and(expression.Name(attrDueAt).Equal(expression.Value(ms(dueAt))))
	return t
}

// Requeue returns an active job to available at once (a FAIL with
// requeue), recording the error; the attempt stays counted.
func Requeue(j *job.Job, e job.ErrorInfo, now time.Time, redeliverAfter time.Duration) Transition {
	t := newTransition(j.ID, job.Available, job.Active)
	t.setErrors(j, e)
	t.becomeAvailable(j.Queue, j.Tenant, j.Priority, j.Push, now, redeliverAfter, false)
	t.remove("deadline_ms")
	t.and(expression.Name(attrAttempt).Equal(expression.Value(j.Attempt)))
	t.leaseHeld(now)
	return t
}

// Revive returns a discarded job to its queue (dead-letter retry,
// ojs-dead-letter.md 6.1): attempt reset to 0, the error history kept.
// queue and meta, when set, override the job's (validated by the caller);
// push says whether that queue is a push-mode queue.
func Revive(j *job.Job, now time.Time, redeliverAfter time.Duration, queue string, meta json.RawMessage, push bool) Transition {
	t := newTransition(j.ID, job.Available, job.Discarded)
	queue = cmp.Or(queue, j.Queue)
	t.set("queue", queue)
	t.set("push", push)
	if len(meta) > 0 {
		t.set("meta", Packed(meta))
	}
	t.set(attrAttempt, 0)
	t.becomeAvailable(queue, j.Tenant, j.Priority, push, now, redeliverAfter, false)
	t.remove("completed_at", "discarded_at", "started_at", "retry_delay_ms", "result", "result_bytes", attrTTL, "deadline_ms", "pruned_at")
	after := *j
	after.Queue, after.Attempt, after.Result = queue, 0, nil
	if len(meta) > 0 {
		after.Meta = meta
	}
	t.set(attrFetchBytes, FetchBytes(&after))
	return t
}

// Reopen returns a workflow job that failed (discarded) or was stopped
// (cancelled) to its queue when its workflow is retried: attempt reset to
// 0, a fresh enqueued_at, the error history kept, the id unchanged. The
// workflow advances it again when it finishes. Its ttl is its workflow's
// expiry (or, in a permanent workflow, far away): kept.
func Reopen(j *job.Job, now time.Time, redeliverAfter time.Duration) Transition {
	t := newTransition(j.ID, job.Available, job.Discarded, job.Cancelled)
	t.set(attrAttempt, 0)
	t.becomeAvailable(j.Queue, j.Tenant, j.Priority, j.Push, now, redeliverAfter, false)
	t.remove("completed_at", "discarded_at", "cancelled_at", "started_at", "retry_delay_ms", "result", "result_bytes", "deadline_ms", "pruned_at")
	t.and(expression.Name("wf_id").Equal(expression.Value(j.WorkflowID)))
	return t
}
