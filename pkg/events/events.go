// Package events is the OJS event vocabulary (ojs-events.md): the
// envelope, the types, deterministic ids (a retried stream record derives
// the same events), the job events a change implies, the events API's
// filters and the event log in the job table (Store).
package events

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"
)

// SpecVersion is the envelope's specversion.
const SpecVersion = "1.0"

// Event types emitted by this implementation.
const (
	JobEnqueued  = "job.enqueued"
	JobScheduled = "job.scheduled"
	JobStarted   = "job.started"
	JobCompleted = "job.completed"
	JobFailed    = "job.failed"
	JobRetrying  = "job.retrying"
	JobDiscarded = "job.discarded"
	JobCancelled = "job.cancelled"
	JobHeartbeat = "job.heartbeat"
	JobExpired   = "job.expired"
	// JobProgress reports a worker's progress report (ojs-progress.md 11).
	JobProgress = "job.progress"
	// JobCheckpointed reports a checkpoint saved (ojs-durable-execution.md
	// DUR-R003).
	JobCheckpointed = "job.checkpointed"

	QueuePaused  = "queue.paused"
	QueueResumed = "queue.resumed"
	// BackpressureRejected reports enqueues a bounded queue refused
	// (ojs-backpressure.md 10.1), at most one a second per API process.
	BackpressureRejected = "backpressure.rejected"

	// RateLimitExceeded reports a rate limit key holding a job it could
	// not start, RateLimitReleased the key starting jobs again
	// (ojs-rate-limiting.md 11.1): one of each per episode of a key.
	RateLimitExceeded = "rate_limit.exceeded"
	RateLimitReleased = "rate_limit.released"
	// RateLimitDynamicAdjusted reports a handler holding its key until a
	// time (rate_limit_until in a FAIL's error, ojs-rate-limiting.md 9.1).
	RateLimitDynamicAdjusted = "rate_limit.dynamic_adjusted"
	// RateLimitDropped reports a job discarded because its key allowed no
	// start and its on_limit was "drop" (besides its job.discarded).
	RateLimitDropped = "rate_limit.dropped"

	CronTriggered = "cron.triggered"
	CronSkipped   = "cron.skipped"

	DeadLetterAdded   = "dead_letter.added"
	DeadLetterRetried = "dead_letter.retried"
	DeadLetterDeleted = "dead_letter.deleted"
	DeadLetterPruned  = "dead_letter.pruned"

	WorkerStarted   = "worker.started"
	WorkerHeartbeat = "worker.heartbeat"
	WorkerQuiet     = "worker.quiet"
	WorkerStopped   = "worker.stopped"

	WorkflowCreated       = "workflow.created"
	WorkflowStarted       = "workflow.started"
	WorkflowStepCompleted = "workflow.step_completed"
	WorkflowStepFailed    = "workflow.step_failed"
	WorkflowJobCompleted  = "workflow.job_completed"
	WorkflowJobFailed     = "workflow.job_failed"
	WorkflowCallbackFired = "workflow.callback_fired"
	WorkflowCompleted     = "workflow.completed"
	WorkflowFailed        = "workflow.failed"
	WorkflowCancelled     = "workflow.cancelled"

	// Workflow control beyond OJS 1.0 (docs/workflows.md).
	WorkflowTimedOut        = "workflow.timed_out"
	WorkflowCompensating    = "workflow.compensating"
	WorkflowCompensated     = "workflow.compensated"
	WorkflowRetried         = "workflow.retried"
	WorkflowHandlerStarted  = "workflow.handler_started"
	WorkflowHandlerFinished = "workflow.handler_finished"
)

// Types lists every type above (the values the events API accepts).
var Types = []string{
	JobEnqueued, JobScheduled, JobStarted, JobCompleted, JobFailed, JobRetrying, JobDiscarded, JobCancelled,
	JobHeartbeat, JobExpired, JobProgress, JobCheckpointed, QueuePaused, QueueResumed, BackpressureRejected, RateLimitExceeded, RateLimitReleased,
	RateLimitDynamicAdjusted, RateLimitDropped, CronTriggered, CronSkipped, DeadLetterAdded, DeadLetterRetried, DeadLetterDeleted, DeadLetterPruned,
	WorkerStarted, WorkerHeartbeat, WorkerQuiet, WorkerStopped,
	WorkflowCreated, WorkflowStarted, WorkflowStepCompleted, WorkflowStepFailed, WorkflowJobCompleted,
	WorkflowJobFailed, WorkflowCallbackFired, WorkflowCompleted, WorkflowFailed, WorkflowCancelled,
	WorkflowTimedOut, WorkflowCompensating, WorkflowCompensated, WorkflowRetried, WorkflowHandlerStarted, WorkflowHandlerFinished,
}

// Event is one OJS event: the envelope of ojs-events.md section 2.
type Event struct {
	SpecVersion     string         `json:"specversion"`
	ID              string         `json:"id"`
	Type            string         `json:"type"`
	Source          string         `json:"source"`
	Time            string         `json:"time"`
	Subject         string         `json:"subject,omitempty"`
	DataContentType string         `json:"datacontenttype,omitempty"`
	Data            map[string]any `json:"data"`
}

// Category is the part of the type before the dot ("job", "workflow", ...).
func (e *Event) Category() string {
	c, _, _ := strings.Cut(e.Type, ".")
	return c
}

// SubjectCategory is the kind of thing the subject names: "job" for job
// events and for the dead letter events of one job (so a job's history,
// queried by job_id, shows it entering and leaving the dead letter queue),
// otherwise the category.
func (e *Event) SubjectCategory() string {
	c := e.Category()
	if c == "dead_letter" && e.Data["job_id"] != nil {
		return "job"
	}
	return c
}

// Queue is the queue the event concerns ("" if none).
func (e *Event) Queue() string { return str(e.Data["queue"]) }

// Tenant is the tenant of the job the event concerns ("" if none).
func (e *Event) Tenant() string { return str(e.Data["tenant_id"]) }

// JobType is the job type the event concerns ("" if none).
func (e *Event) JobType() string { return str(e.Data["job_type"]) }

// At parses the event time.
func (e *Event) At() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, e.Time)
	return t
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// New builds an event at time at. Its id is deterministic in (at, seq,
// key...): the same change always yields the same id. seq orders events of
// one subject that share a millisecond (pass the item version times a small
// factor plus the event's position).
func New(source, typ, subject string, at time.Time, seq int64, data map[string]any, key ...string) Event {
	at = at.UTC()
	return Event{
		SpecVersion: SpecVersion, ID: ID(at, seq, append([]string{typ, subject}, key...)...), Type: typ, Source: source,
		Time: at.Format("2006-01-02T15:04:05.000Z"), Subject: subject, DataContentType: "application/json", Data: data,
	}
}

// ID returns "evt_" and a UUIDv7 (RFC 9562) whose 48-bit timestamp is at's
// Unix milliseconds, whose rand_a holds seq (mod 4096) and whose rand_b is
// a hash of key. IDs therefore sort by time as strings, then by seq, and
// are unique as long as the keys differ.
func ID(at time.Time, seq int64, key ...string) string {
	h := sha256.New()
	for _, k := range key {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	u := atMilli(at)
	binary.BigEndian.PutUint16(u[6:8], 0x7000|uint16(seq&0x0fff))
	copy(u[8:], h.Sum(nil)[:8])
	u[8] = u[8]&0x3f | 0x80
	return "evt_" + u.String()
}

// atMilli is a UUID holding only t's Unix milliseconds (its first 48 bits).
func atMilli(t time.Time) (u uuid.UUID) {
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(u[:6], ms[2:])
	return u
}

// LowerBound is the smallest possible id of an event at or after t: ids
// compared as strings, every event at or after t sorts after it.
func LowerBound(t time.Time) string {
	return "evt_" + atMilli(t).String()
}

// ParseID checks an event id's form and returns its time.
func ParseID(id string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(id, "evt_")
	if !ok || len(rest) != 36 || rest[8] != '-' || rest[13] != '-' || rest[18] != '-' || rest[23] != '-' {
		return time.Time{}, false
	}
	raw, err := hex.DecodeString(strings.ReplaceAll(rest, "-", ""))
	if err != nil || len(raw) != 16 || strings.ToLower(rest) != rest {
		return time.Time{}, false
	}
	var msec uint64
	for _, b := range raw[:6] {
		msec = msec<<8 | uint64(b)
	}
	return time.UnixMilli(int64(msec)).UTC(), true
}

// Marshal is the event as JSON (the stored and published form).
func (e *Event) Marshal() ([]byte, error) { return json.Marshal(e) }

// MarshalWithin is the event as JSON, or, when that is more than max
// bytes, the event with its data replaced by a note (its size, where to
// read it whole, and the ids that name what it is about): what a
// transport with a size limit (EventBridge, a webhook delivery) sends.
func (e *Event) MarshalWithin(max int, transport string) ([]byte, error) {
	body, err := e.Marshal()
	if err != nil || len(body) <= max {
		return body, err
	}
	small := *e
	small.Data = map[string]any{"truncated": true, "bytes": len(body),
		"hint": "the event is larger than " + transport + " accepts; read it from GET /ojs/v1/events"}
	for _, k := range []string{"job_id", "job_type", "queue", "workflow_id", "tenant_id"} {
		if v, ok := e.Data[k]; ok {
			small.Data[k] = v
		}
	}
	return small.Marshal()
}
