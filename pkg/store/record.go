package store

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/retry"
)

// Attribute names. The data model is documented in docs/data-model.md.
const (
	attrPK       = "pk"
	attrSK       = "sk"
	attrState    = "state"
	attrAttempt  = "attempt"
	attrReadyPK  = "ready_pk"
	attrReadySK  = "ready_sk"
	attrDuePK    = "due_pk"
	attrDueAt    = "due_at"
	attrDonePK   = "done_pk"
	attrDoneSK   = "done_sk"
	attrLease    = "lease_until"
	attrWorker   = "worker_id"
	attrDispatch = "dispatch"
	attrPush     = "push"
	attrExpires  = "expires_ms"
	attrVersion  = "version"
	// attrFetchBytes holds FetchBytes of the job as last written.
	attrFetchBytes = "fb"
	// attrTTL is the table's TTL attribute (topology.JobTable): a
	// finished job's item is deleted after it; attrRetain is how long
	// after finishing that is, in seconds (retainFor), after attrWFTTL for
	// a workflow's job (its workflow's expiry, which it keeps).
	attrTTL    = "ttl"
	attrRetain = "retain_s"
	attrWFTTL  = "wf_ttl"
	// attrWriteToken is the token of the job's last transition
	// (Transition.token).
	attrWriteToken = "wt"
	// attrRenewAt is when a heartbeat next moves an active job's lease,
	// attrRenewMS a tenth of the claim's lease length (Extend).
	attrRenewAt = "renew_at"
	attrRenewMS = "renew_ms"
	// attrProgress and attrProgressInfo hold the attempt's progress report.
	attrProgress     = "prog"
	attrProgressInfo = "prog_info"
	attrCheckpoint   = "ckpt"
	attrCkptSeq      = "ckpt_seq"
	// attrRateKey is a keyed job's rate limit key (KeyLimit), attrTenant
	// a job's tenant.
	attrRateKey  = "rl_key"
	attrTenant   = "tenant"
	attrTenantPK = "tn_pk"
	jobSK        = "JOB"
)

// Key prefixes.
const (
	jobPrefix   = "JOB#"
	availPrefix = "avail#"
	deadPrefix  = "dead#"
	duePrefix   = "due#"
)

// DispatchInline marks a job a worker promoted to available in order to
// claim it at once: the stream relay must not send it to SQS again.
const DispatchInline = "inline"

// record is a job item as stored. JSON-valued attributes are kept as JSON
// text so that numbers, key order and unknown fields survive exactly. Its
// parts are embedded by value (attributevalue cannot decode into embedded
// pointers) and stored flat (TestRecordAttributeNames lists the names).
type record struct {
	PK      string `dynamodbav:"pk"`
	SK      string `dynamodbav:"sk"`
	Version int64  `dynamodbav:"version"`
	envelope
	progress
	claim
	indexEntries
	workflowLink
}

// envelope is the job as enqueued: what it runs and its options.
type envelope struct {
	ID           string `dynamodbav:"id"`
	Type         string `dynamodbav:"type"`
	Queue        string `dynamodbav:"queue"`
	Priority     int    `dynamodbav:"priority"`
	MaxAttempts  int    `dynamodbav:"max_attempts"`
	Args         Packed `dynamodbav:"args"`
	Meta         Packed `dynamodbav:"meta"`
	Retry        string `dynamodbav:"retry,omitempty"`
	TimeoutMS    int64  `dynamodbav:"timeout_ms"`
	VisibilityMS int64  `dynamodbav:"visibility_ms,omitempty"`
	Tags         string `dynamodbav:"tags,omitempty"`
	Schema       string `dynamodbav:"schema,omitempty"`
	Extra        string `dynamodbav:"extra,omitempty"`
	ScheduledAt  string `dynamodbav:"scheduled_at,omitempty"`
	ExpiresAt    string `dynamodbav:"expires_at,omitempty"`
	ResultTTL    *int64 `dynamodbav:"result_ttl,omitempty"`
	ExpiresMS    int64  `dynamodbav:"expires_ms,omitempty"`
	CreatedAt    string `dynamodbav:"created_at,omitempty"`
	// RateKey and RateLimit are options.rate_limit with a key: the key,
	// whose presence makes the plain claim fail (Claim), and the policy.
	RateKey   string `dynamodbav:"rl_key,omitempty"`
	RateLimit string `dynamodbav:"rl,omitempty"`
	// Tenant is the job's tenant; TenantPK its partition in the tenant
	// index (tenantKey), which lists it while it is available (ready_sk).
	Tenant   string `dynamodbav:"tenant,omitempty"`
	TenantPK string `dynamodbav:"tn_pk,omitempty"`
	// Needs is job.EncodeNeeds: what a worker must offer (a FETCH that
	// states capabilities reads it, docs/ml-resources.md).
	Needs string `dynamodbav:"rq,omitempty"`
}

// progress is where the job is in its lifecycle: its state and attempt,
// when it reached each stage, and its result and errors.
type progress struct {
	State         string   `dynamodbav:"state"`
	Attempt       int      `dynamodbav:"attempt"`
	EnqueuedAt    string   `dynamodbav:"enqueued_at,omitempty"`
	StartedAt     string   `dynamodbav:"started_at,omitempty"`
	CompletedAt   string   `dynamodbav:"completed_at,omitempty"`
	CancelledAt   string   `dynamodbav:"cancelled_at,omitempty"`
	DiscardedAt   string   `dynamodbav:"discarded_at,omitempty"`
	NextAttemptAt string   `dynamodbav:"next_attempt_at,omitempty"`
	Result        Packed   `dynamodbav:"result,omitempty"`
	ResultBytes   int      `dynamodbav:"result_bytes,omitempty"`
	Error         string   `dynamodbav:"error,omitempty"`
	Errors        []string `dynamodbav:"errors,omitempty"`
}

// claim is how the job is delivered and held: push or pull dispatch, the
// worker holding it and until when, and a cancel or retry it awaits.
type claim struct {
	Push            bool   `dynamodbav:"push,omitempty"`
	WorkerID        string `dynamodbav:"worker_id,omitempty"`
	LeaseUntil      int64  `dynamodbav:"lease_until,omitempty"`
	DeadlineMS      int64  `dynamodbav:"deadline_ms,omitempty"`
	RetryDelayMS    int64  `dynamodbav:"retry_delay_ms,omitempty"`
	CancelRequested bool   `dynamodbav:"cancel_requested,omitempty"`
	Dispatch        string `dynamodbav:"dispatch,omitempty"`
	// Progress is the attempt's reported fraction (ReportProgress keeps it
	// from going down), ProgressInfo the whole report as JSON.
	Progress     *float64 `dynamodbav:"prog,omitempty"`
	ProgressInfo string   `dynamodbav:"prog_info,omitempty"`
	// Checkpoint is the last saved checkpoint, kept across attempts, its
	// sequence (saves since it was last cleared) and time.
	Checkpoint Packed `dynamodbav:"ckpt,omitempty"`
	CkptSeq    int    `dynamodbav:"ckpt_seq,omitempty"`
	CkptAt     string `dynamodbav:"ckpt_at,omitempty"`
}

// indexEntries are the job's keys in the ready and due indexes, its expiry
// and uniqueness key, and what the indexes and the pruner read.
type indexEntries struct {
	ReadyPK string `dynamodbav:"ready_pk,omitempty"`
	ReadySK string `dynamodbav:"ready_sk,omitempty"`
	DuePK   string `dynamodbav:"due_pk,omitempty"`
	DueAt   int64  `dynamodbav:"due_at,omitempty"`
	TTL     int64  `dynamodbav:"ttl,omitempty"`
	// Retain is attrRetain (nil: the environment's default).
	Retain *int64 `dynamodbav:"retain_s,omitempty"`
	// PrunedAt marks a discarded job the dead letter pruner is removing.
	PrunedAt int64 `dynamodbav:"pruned_at,omitempty"`
	// FetchBytes is FetchBytes of the job as last written.
	FetchBytes int `dynamodbav:"fb,omitempty"`
	// UniqueKey is the uniqueness key the job was enqueued under.
	UniqueKey string `dynamodbav:"uk,omitempty"`
}

// workflowLink places the job in a workflow (empty for a standalone job).
type workflowLink struct {
	WorkflowID     string `dynamodbav:"wf_id,omitempty"`
	WorkflowNode   string `dynamodbav:"wf_node,omitempty"`
	ParentResults  Packed `dynamodbav:"parent_results,omitempty"`
	WorkflowShard  string `dynamodbav:"wf_shard,omitempty"`
	WorkflowNext   []int  `dynamodbav:"wf_next,omitempty,numberset"`
	WorkflowStepID string `dynamodbav:"wf_sid,omitempty"`
	WorkflowLast   bool   `dynamodbav:"wf_last,omitempty"`
	WorkflowAhead  string `dynamodbav:"wf_ahead,omitempty"`
	WorkflowTTL    int64  `dynamodbav:"wf_ttl,omitempty"`
}

func JobKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK: &types.AttributeValueMemberS{Value: jobPrefix + id},
		attrSK: &types.AttributeValueMemberS{Value: jobSK},
	}
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// optMS is v as a time, nil when v is 0 (not set).
func optMS(v int64) *time.Time {
	if v <= 0 {
		return nil
	}
	t := fromMS(v)
	return &t
}

// readySortKey orders available jobs by priority (highest first), then by
// the time they became available, then by id.
func readySortKey(priority int, at time.Time, id string) string {
	return fmt.Sprintf("%010d#%013d#%s", int64(math.MaxInt32)-int64(priority), ms(at), id)
}

func DeadSortKey(at time.Time, id string) string { return fmt.Sprintf("%013d#%s", ms(at), id) }

func optTime(s string) *time.Time {
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil
	}
	t = t.UTC()
	return &t
}

func textOr(text string, t *time.Time) string {
	if text != "" {
		return text
	}
	return tstr(t)
}

func tstr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return job.Timestamp(*t)
}

// defaultRetry is the default retry policy's stored form.
var defaultRetry = func() string {
	b, _ := json.Marshal(retry.Default())
	return string(b)
}()

func toRecord(j *job.Job) (record, error) {
	pol, err := json.Marshal(j.Retry)
	if err != nil {
		return record{}, err
	}
	if string(pol) == defaultRetry {
		// An item without a policy reads as the default (toJob): 190 bytes saved.
		pol = nil
	}
	r := record{PK: jobPrefix + j.ID, SK: jobSK, Version: 1,
		envelope: envelope{ID: j.ID, Type: j.Type, Queue: j.Queue, Priority: j.Priority, MaxAttempts: j.Retry.MaxAttempts,
			Args: Packed(j.Args), Meta: Packed(j.Meta), Retry: string(pol), TimeoutMS: j.Timeout.Milliseconds(),
			VisibilityMS: j.Visibility.Milliseconds(), Schema: j.Schema, ScheduledAt: textOr(j.ScheduledAtText, j.ScheduledAt),
			ExpiresAt: textOr(j.ExpiresAtText, j.ExpiresAt), CreatedAt: tstr(j.CreatedAt), ResultTTL: j.ResultTTL, Needs: job.EncodeNeeds(j)},
		progress:     progress{State: string(j.State), Attempt: j.Attempt, EnqueuedAt: tstr(j.EnqueuedAt), CancelledAt: tstr(j.CancelledAt)},
		claim:        claim{Push: j.Push},
		indexEntries: indexEntries{UniqueKey: j.UniqueKey, Retain: retainFor(j)},
		workflowLink: workflowLink{WorkflowID: j.WorkflowID, WorkflowNode: j.WorkflowNode, ParentResults: Packed(j.ParentResults),
			WorkflowShard: j.WorkflowShard, WorkflowNext: j.WorkflowNext, WorkflowStepID: j.WorkflowStepID,
			WorkflowLast: j.WorkflowLast, WorkflowAhead: string(j.WorkflowAhead), WorkflowTTL: j.WorkflowExpiry},
	}
	r.TTL = j.WorkflowExpiry
	if j.Unique != nil {
		r.UniqueKey = j.Unique.Key
	}
	if j.ExpiresAt != nil {
		r.ExpiresMS = ms(*j.ExpiresAt)
	}
	if len(j.Tags) > 0 {
		b, _ := json.Marshal(j.Tags)
		r.Tags = string(b)
	}
	if len(j.Extra) > 0 {
		b, _ := json.Marshal(j.Extra)
		r.Extra = string(b)
	}
	if j.KeyLimit != nil {
		r.RateKey, r.RateLimit = j.KeyLimit.Key, job.MarshalKeyLimit(j.KeyLimit)
	}
	if j.Tenant != "" {
		r.Tenant, r.TenantPK = j.Tenant, tenantKey(j.Tenant, j.Queue, j.ID)
	}
	return r, nil
}

// permanentSpan is the retention, in seconds, of an item kept for ever: its
// TTL is a thousand years away.
const permanentSpan = 1000 * 365 * 86400

// retainFor is attrRetain for j: its result_ttl, permanentSpan for -1
// and for a permanent workflow's job, 0 for another workflow's job (kept
// until its workflow's expiry), nil for the environment's default.
func retainFor(j *job.Job) *int64 {
	if j.WorkflowExpiry > 0 {
		return aws.Int64(0)
	}
	if j.WorkflowID != "" || (j.ResultTTL != nil && *j.ResultTTL == job.PermanentResultTTL) {
		return aws.Int64(permanentSpan)
	}
	return j.ResultTTL
}

func (r record) toJob() (*job.Job, error) {
	j := &job.Job{
		ID: r.ID, Type: r.Type, Queue: r.Queue, State: job.State(r.State), Priority: r.Priority, Attempt: r.Attempt,
		Args: json.RawMessage(r.Args), Meta: json.RawMessage(r.Meta),
		Timeout: time.Duration(r.TimeoutMS) * time.Millisecond, Visibility: time.Duration(r.VisibilityMS) * time.Millisecond,
		Schema: r.Schema, ScheduledAt: optTime(r.ScheduledAt), ExpiresAt: optTime(r.ExpiresAt),
		ScheduledAtText: r.ScheduledAt, ExpiresAtText: r.ExpiresAt, RetryDelay: time.Duration(r.RetryDelayMS) * time.Millisecond,
		CreatedAt: optTime(r.CreatedAt), EnqueuedAt: optTime(r.EnqueuedAt), StartedAt: optTime(r.StartedAt),
		CompletedAt: optTime(r.CompletedAt), CancelledAt: optTime(r.CancelledAt), DiscardedAt: optTime(r.DiscardedAt),
		NextAttemptAt: optTime(r.NextAttemptAt), Push: r.Push, WorkerID: r.WorkerID, CancelRequested: r.CancelRequested,
		WorkflowID: r.WorkflowID, WorkflowNode: r.WorkflowNode, WorkflowShard: r.WorkflowShard, WorkflowNext: r.WorkflowNext,
		WorkflowStepID: r.WorkflowStepID, WorkflowLast: r.WorkflowLast, UniqueKey: r.UniqueKey, ResultTTL: r.ResultTTL,
		WorkflowExpiry: r.WorkflowTTL, Tenant: r.Tenant,
	}
	if r.ParentResults != "" {
		j.ParentResults = json.RawMessage(r.ParentResults)
	}
	if r.RateLimit != "" {
		kl, err := job.UnmarshalKeyLimit(r.RateLimit)
		if err != nil {
			return nil, fmt.Errorf("job %s: rate limit: %w", r.ID, err)
		}
		j.KeyLimit = kl
	}
	if r.WorkflowAhead != "" {
		j.WorkflowAhead = json.RawMessage(r.WorkflowAhead)
	}
	j.LeaseUntil, j.Deadline = optMS(r.LeaseUntil), optMS(r.DeadlineMS)
	if len(r.Checkpoint) > 0 {
		j.LastCheckpoint, j.CheckpointSeq, j.CheckpointAt = json.RawMessage(r.Checkpoint), r.CkptSeq, r.CkptAt
	}
	if r.ProgressInfo != "" {
		j.Progress = &job.Progress{}
		_ = json.Unmarshal([]byte(r.ProgressInfo), j.Progress)
		j.Progress.Value = r.Progress
	}
	if r.Retry == "" || json.Unmarshal([]byte(r.Retry), &j.Retry) != nil {
		j.Retry = retry.Default()
	}
	if r.Result != "" && (r.Retain == nil || *r.Retain != 0 || r.WorkflowTTL > 0) { // result_ttl 0: not kept
		j.Result = json.RawMessage(r.Result)
		j.ResultSizeBytes = r.ResultBytes
		if span := r.TTL - j.CompletedAt.Unix(); r.TTL > 0 && span < permanentSpan { // set with completed_at
			t := j.CompletedAt.Add(time.Duration(span) * time.Second)
			j.ResultExpiresAt = &t
		}
	}
	if r.Tags != "" {
		_ = json.Unmarshal([]byte(r.Tags), &j.Tags)
	}
	if r.Extra != "" {
		_ = json.Unmarshal([]byte(r.Extra), &j.Extra)
	}
	if e := decodeErrors([]string{r.Error}); len(e) > 0 {
		j.Error = &e[0]
	}
	j.Errors = decodeErrors(r.Errors)
	return j, nil
}

// decodeErrors decodes stored errors, leaving out any that do not decode.
func decodeErrors(list []string) []job.ErrorInfo {
	var out []job.ErrorInfo
	for _, s := range list {
		var e job.ErrorInfo
		if json.Unmarshal([]byte(s), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// Item is a stored job with the bookkeeping the engine needs besides the
// OJS view: its version, due time and dispatch marker.
type Item struct {
	Job      *job.Job
	Version  int64
	DueAt    time.Time
	ReadySK  string
	Dispatch string
	// Partial is set on an item read from an index, without the job's
	// payloads (topology.JobIndexAttributes).
	Partial bool
	// FetchBytes is FetchBytes of the job as last written; 0 for a job
	// written before it was recorded.
	FetchBytes int
	// Pruned is set on a discarded job the retention pruner is removing.
	Pruned bool
}

// DecodeItem turns a DynamoDB item (from a read or a stream image) into an
// Item. It returns ok=false for items that are not jobs.
func DecodeItem(av map[string]types.AttributeValue) (Item, bool, error) {
	if sk, ok := av[attrSK].(*types.AttributeValueMemberS); !ok || sk.Value != jobSK {
		return Item{}, false, nil
	}
	var r record
	if err := attributevalue.UnmarshalMap(av, &r); err != nil {
		return Item{}, false, fmt.Errorf("decode job item: %w", err)
	}
	j, err := r.toJob()
	if err != nil {
		return Item{}, false, err
	}
	it := Item{Job: j, Version: r.Version, Dispatch: r.Dispatch, ReadySK: r.ReadySK, Pruned: r.PrunedAt > 0, FetchBytes: r.FetchBytes}
	if r.DueAt > 0 {
		it.DueAt = fromMS(r.DueAt)
	}
	return it, true, nil
}

// DecodeIf decodes an item (a read or a stream image) into a T when its
// sort key satisfies match; ok is false for other items.
func DecodeIf[T any](av map[string]types.AttributeValue, match func(sk string) bool, what string) (*T, bool, error) {
	sk, ok := av[attrSK].(*types.AttributeValueMemberS)
	if !ok || !match(sk.Value) {
		return nil, false, nil
	}
	var v T
	if err := attributevalue.UnmarshalMap(av, &v); err != nil {
		return nil, false, fmt.Errorf("decode %s: %w", what, err)
	}
	return &v, true, nil
}

// Prefixed matches sort keys that start with p (see DecodeIf).
func Prefixed(p string) func(string) bool {
	return func(sk string) bool { return strings.HasPrefix(sk, p) }
}

// Equals matches the sort key v (see DecodeIf).
func Equals(v string) func(string) bool { return func(sk string) bool { return sk == v } }

func decodeJob(av map[string]types.AttributeValue) (*job.Job, error) {
	it, ok, err := DecodeItem(av)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("item is not a job")
	}
	return it.Job, nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
