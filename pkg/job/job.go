package job

import (
	"encoding/json"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/retry"
)

// SpecVersion is the OJS core specification version this product speaks.
const SpecVersion = "1.0"

// Defaults and limits. They are stated in the README and the manifest.
const (
	// DefaultQueue is the queue used when a PUSH names none.
	DefaultQueue = "default"
	// DefaultTimeout is a job's execution timeout when it sets none.
	DefaultTimeout = 30 * time.Minute
	// DefaultVisibilityTimeout is how long a pull-mode claim lasts without a
	// heartbeat when neither the job nor the FETCH sets one
	// (ojs-worker-protocol.md 5.2: 1800 seconds).
	DefaultVisibilityTimeout = 1800 * time.Second
	// MaxEnvelopeBytes bounds one job's JSON envelope: 1 MiB
	// (ojs-json-format.md 8.1). The store keeps args and meta compressed
	// and refuses a job whose item would still pass store.MaxJobItemBytes.
	MaxEnvelopeBytes = 1 << 20
	// MaxMetaBytes bounds meta (ojs-payload-limits.md section 4.3).
	MaxMetaBytes = 64 << 10
	// MaxResultBytes bounds a result as sent (ojs-results.md 7.2); the
	// store also bounds it packed (store.MaxPackedResultBytes).
	MaxResultBytes = 1 << 20
	// DefaultResultTTL is how long a finished job and its result are kept,
	// in seconds, when neither the job nor OJS_RESULT_TTL sets it (7 days).
	DefaultResultTTL = 604800
	// MaxResultTTL is the longest positive result_ttl (10 years); -1
	// (PermanentResultTTL) keeps a result for ever.
	MaxResultTTL = 10 * 365 * 86400
	// PermanentResultTTL is the result_ttl of a result never pruned.
	PermanentResultTTL = -1
	// MaxErrorHistory is how many errors a job keeps (at least 10 per spec).
	MaxErrorHistory = 20
	// MaxTypeLength and MaxQueueLength bound names (bytes).
	MaxTypeLength  = 255
	MaxQueueLength = 128
	// MinPriority and MaxPriority bound priority (the range every OJS
	// implementation must support; the conformance suite rejects beyond).
	MinPriority = -100
	MaxPriority = 100
	// MaxTimeout bounds a job's execution timeout and visibility timeout.
	MaxTimeout = 12 * time.Hour
	// MaxRatePerSecond bounds options.rate_limit.max_per_second.
	MaxRatePerSecond = 10000
)

// ErrorInfo is one recorded failure: the last one is the job's "error", all
// are kept (bounded) in "errors".
type ErrorInfo struct {
	Type      string          `json:"type"`
	Code      string          `json:"code,omitempty"`
	Message   string          `json:"message"`
	Retryable *bool           `json:"retryable,omitempty"`
	Backtrace []string        `json:"backtrace,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	Timestamp string          `json:"timestamp,omitempty"`
	// OccurredAt repeats Timestamp under the name the conformance suite reads.
	OccurredAt string `json:"occurred_at,omitempty"`
}

// Job is one job: the client's envelope plus the system-managed attributes.
type Job struct {
	ID          string
	Type        string
	Queue       string
	Args        json.RawMessage
	Meta        json.RawMessage
	Priority    int
	State       State
	Attempt     int
	Retry       retry.Policy
	Timeout     time.Duration
	Visibility  time.Duration
	Tags        []string
	Schema      string
	ScheduledAt *time.Time
	ExpiresAt   *time.Time
	// ScheduledAtText and ExpiresAtText keep the timestamps as the client
	// wrote them, so they are echoed byte for byte.
	ScheduledAtText string
	ExpiresAtText   string
	// RetryDelay is the backoff chosen after the last failure.
	RetryDelay time.Duration

	CreatedAt     *time.Time
	EnqueuedAt    *time.Time
	StartedAt     *time.Time
	CompletedAt   *time.Time
	CancelledAt   *time.Time
	DiscardedAt   *time.Time
	NextAttemptAt *time.Time

	Result json.RawMessage
	// ResultTTL is the envelope's result_ttl in seconds (0: the result is
	// not kept, -1: kept for ever); nil: the environment's default.
	ResultTTL *int64
	// WorkflowExpiry is the ttl (Unix seconds) every item of the job's
	// workflow shares, its own included; 0: kept for ever.
	WorkflowExpiry int64
	// ResultExpiresAt (nil: never) and ResultSizeBytes describe a stored
	// result; it was stored at CompletedAt (ojs-results.md 6.2).
	ResultExpiresAt *time.Time
	ResultSizeBytes int
	Error           *ErrorInfo
	Errors          []ErrorInfo

	// Extra holds unknown top-level envelope attributes, preserved as sent.
	Extra map[string]json.RawMessage

	// WorkflowID and WorkflowNode place a job in a workflow (empty for
	// standalone jobs); ParentResults holds the upstream results it
	// receives (ojs-workflows.md section 7).
	WorkflowID    string
	WorkflowNode  string
	ParentResults json.RawMessage
	// The rest of the workflow link is not on the wire. WorkflowShard names
	// the counter shard the job's step is counted in (a sharded group or
	// batch); WorkflowNext lists, by index, the graph steps that depend on
	// it; WorkflowStepID is the step id its events report; WorkflowLast
	// marks a chain's last step; WorkflowAhead holds the definitions of the
	// chain steps that follow it (as many as fit the item's write unit).
	// Each spares the request that finishes the job a read.
	WorkflowShard  string
	WorkflowNext   []int
	WorkflowStepID string
	WorkflowLast   bool
	WorkflowAhead  json.RawMessage

	// Push is true when Queue is a push-mode queue delivered to Lambda.
	Push bool
	// WorkerID and LeaseUntil describe the current claim of an active job.
	WorkerID   string
	LeaseUntil *time.Time
	// Deadline is when the current attempt's execution timeout ends.
	Deadline *time.Time
	// CancelRequested is set when an active job was cancelled.
	CancelRequested bool
	// Progress is what the worker last reported of the current attempt
	// (nil: nothing yet; cleared when an attempt starts).
	Progress *Progress
	// LastCheckpoint is the checkpoint of the last progress report that
	// carried one, kept across attempts so a retry resumes from it
	// (ojs-progress.md 6.4).
	LastCheckpoint json.RawMessage
	// CheckpointSeq counts the checkpoints saved since the last was
	// cleared, CheckpointAt is when the last was (ojs-durable-execution.md).
	CheckpointSeq int
	CheckpointAt  string

	// Unique is the job's unique policy at enqueue (not stored).
	Unique *Unique
	// RateLimit is options.rate_limit.max_per_second at enqueue: it sets
	// the queue's fetch rate (not stored on the job).
	RateLimit float64
	// Tenant is the job's tenant: meta.tenant_id, or the request's
	// X-OJS-Tenant header put there (AssignTenant); "" for none (stored).
	Tenant string
	// KeyLimit is options.rate_limit with a key (stored: the job is
	// started only as its key allows; pkg/ratelimit).
	KeyLimit *KeyLimit
	// Deduplicated marks the existing job returned for a PUSH whose unique
	// policy said "ignore" (answered 200, not 201).
	Deduplicated bool
	// UniqueKey is the uniqueness key the job was enqueued under (stored).
	UniqueKey string `json:"-"`
}

// Progress is a worker's report of how far an attempt has come
// (ojs-progress.md 5): a fraction in [0, 1], a message, structured data.
type Progress struct {
	Value     *float64        `json:"progress,omitempty"`
	Message   string          `json:"message,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	UpdatedAt string          `json:"updated_at"`
	// TokensUsed is the attempt's AI agent tokens, as last reported
	// (ext_agent_tokens_used; docs/ai-agents.md).
	TokensUsed *int64 `json:"tokens_used,omitempty"`
}

// ProgressShown is the progress a job shows: a completed job whose attempt
// reported progress shows 1 (ojs-progress.md 8.1); nil when none was
// reported.
func (j *Job) ProgressShown() *Progress {
	if j.Progress == nil || j.State != Completed {
		return j.Progress
	}
	p, one := *j.Progress, 1.0
	p.Value = &one
	return &p
}

// Timestamp formats t the way every OJS timestamp is written: UTC,
// millisecond precision, Z suffix.
func Timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func ts(t *time.Time) *string {
	if t == nil {
		return nil
	}
	return new(Timestamp(*t))
}

func text(s string, t *time.Time) *string {
	if s != "" {
		return &s
	}
	return ts(t)
}

// wireJob is the JSON shape of a job in API responses and SQS messages.
type wireJob struct {
	SpecVersion         string          `json:"specversion"`
	ID                  string          `json:"id"`
	Type                string          `json:"type"`
	Queue               string          `json:"queue"`
	Args                json.RawMessage `json:"args"`
	Meta                json.RawMessage `json:"meta"`
	Priority            int             `json:"priority"`
	State               State           `json:"state"`
	Attempt             int             `json:"attempt"`
	MaxAttempts         int             `json:"max_attempts"`
	Timeout             int64           `json:"timeout"`
	TimeoutMS           int64           `json:"timeout_ms"`
	VisibilityTimeoutMS int64           `json:"visibility_timeout_ms,omitempty"`
	VisibilityTimeout   int64           `json:"visibility_timeout,omitempty"`
	Retry               retry.Policy    `json:"retry"`
	Tags                []string        `json:"tags"`
	Schema              string          `json:"schema,omitempty"`
	ScheduledAt         *string         `json:"scheduled_at,omitempty"`
	ExpiresAt           *string         `json:"expires_at,omitempty"`
	CreatedAt           *string         `json:"created_at,omitempty"`
	EnqueuedAt          *string         `json:"enqueued_at,omitempty"`
	StartedAt           *string         `json:"started_at,omitempty"`
	CompletedAt         *string         `json:"completed_at,omitempty"`
	CancelledAt         *string         `json:"cancelled_at,omitempty"`
	DiscardedAt         *string         `json:"discarded_at,omitempty"`
	NextAttemptAt       *string         `json:"next_attempt_at,omitempty"`
	RetryDelayMS        *int64          `json:"retry_delay_ms,omitempty"`
	Result              json.RawMessage `json:"result,omitempty"`
	ResultTTL           *int64          `json:"result_ttl,omitempty"`
	ResultStoredAt      *string         `json:"result_stored_at,omitempty"`
	ResultExpiresAt     *string         `json:"result_expires_at,omitempty"`
	ResultSizeBytes     int             `json:"result_size_bytes,omitempty"`
	Error               *ErrorInfo      `json:"error,omitempty"`
	Errors              []ErrorInfo     `json:"errors,omitempty"`
	WorkflowID          string          `json:"workflow_id,omitempty"`
	WorkflowNode        string          `json:"workflow_node,omitempty"`
	ParentResults       json.RawMessage `json:"parent_results,omitempty"`
	LastCheckpoint      json.RawMessage `json:"last_checkpoint,omitempty"`
	// Checkpoint is the durable execution extension's view of the same
	// checkpoint (ojs-durable-execution.md 6.1).
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
}

// Checkpoint is a job's checkpoint as its envelope carries it.
type Checkpoint struct {
	State    json.RawMessage `json:"state"`
	Sequence int             `json:"sequence"`
}

// MarshalJSON renders the full OJS envelope with the system-managed
// attributes; unknown attributes the client sent are merged back at the top
// level (they never override defined ones).
func (j *Job) MarshalJSON() ([]byte, error) {
	w := wireJob{
		SpecVersion: SpecVersion, ID: j.ID, Type: j.Type, Queue: j.Queue, Args: j.Args, Meta: j.Meta,
		Priority: j.Priority, State: j.State, Attempt: j.Attempt, MaxAttempts: j.Retry.MaxAttempts,
		Timeout: int64((j.Timeout + time.Second - 1) / time.Second), TimeoutMS: j.Timeout.Milliseconds(),
		VisibilityTimeoutMS: j.Visibility.Milliseconds(), VisibilityTimeout: int64((j.Visibility + time.Second - 1) / time.Second),
		Retry: j.Retry, Tags: j.Tags, Schema: j.Schema,
		ScheduledAt: text(j.ScheduledAtText, j.ScheduledAt), ExpiresAt: text(j.ExpiresAtText, j.ExpiresAt), CreatedAt: ts(j.CreatedAt),
		EnqueuedAt: ts(j.EnqueuedAt), StartedAt: ts(j.StartedAt), CompletedAt: ts(j.CompletedAt),
		CancelledAt: ts(j.CancelledAt), DiscardedAt: ts(j.DiscardedAt), NextAttemptAt: ts(j.NextAttemptAt),
		Result: j.Result, ResultTTL: j.ResultTTL, ResultExpiresAt: ts(j.ResultExpiresAt), ResultSizeBytes: j.ResultSizeBytes,
		Error: j.Error, Errors: j.Errors, WorkflowID: j.WorkflowID, WorkflowNode: j.WorkflowNode, ParentResults: j.ParentResults,
		LastCheckpoint: j.LastCheckpoint,
	}
	if j.RetryDelay > 0 {
		w.RetryDelayMS = new(j.RetryDelay.Milliseconds())
	}
	if j.LastCheckpoint != nil {
		w.Checkpoint = &Checkpoint{State: j.LastCheckpoint, Sequence: j.CheckpointSeq}
	}
	if j.ResultSizeBytes > 0 {
		w.ResultStoredAt = w.CompletedAt
	}
	if w.Args == nil {
		w.Args = json.RawMessage("[]")
	}
	if w.Meta == nil {
		w.Meta = json.RawMessage("{}")
	}
	if w.Tags == nil {
		w.Tags = []string{}
	}
	b, err := json.Marshal(w)
	if err != nil || len(j.Extra) == 0 {
		return b, err
	}
	var merged map[string]json.RawMessage
	if err := json.Unmarshal(b, &merged); err != nil {
		return nil, err
	}
	for k, v := range j.Extra {
		if _, defined := merged[k]; !defined {
			merged[k] = v
		}
	}
	if used, _, ok := j.AgentTokens(); ok {
		merged[AgentTokensUsed], _ = json.Marshal(used)
	}
	return json.Marshal(merged)
}
