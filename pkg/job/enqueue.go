package job

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/internal/jsoncase"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/retry"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

var (
	// typePattern is what the conformance suite (L0-ENV-003, L0-ENV-005)
	// and the official SDKs use: dot-separated lowercase segments of
	// letters, digits, '_' and '-', each starting with a letter.
	typePattern  = regexp.MustCompile(`^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$`)
	queuePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9\-\.]*$`)
)

// known lists the attributes the envelope defines; anything else a client
// sends at the top level is preserved in Extra. System-managed attributes
// are listed so that client values for them are ignored (ojs-core 5.3).
var known = map[string]bool{
	"specversion": true, "id": true, "type": true, "queue": true, "args": true, "meta": true,
	"priority": true, "timeout": true, "scheduled_at": true, "expires_at": true, "retry": true,
	"unique": true, "schema": true, "options": true, "tags": true,
	"state": true, "attempt": true, "max_attempts": true, "created_at": true, "enqueued_at": true,
	"started_at": true, "completed_at": true, "cancelled_at": true, "discarded_at": true,
	"next_attempt_at": true, "error": true, "errors": true, "result": true, "timeout_ms": true,
	"visibility_timeout_ms": true, "workflow_id": true, "workflow_node": true, "parent_results": true,
	"retry_delay_ms": true, "visibility_timeout": true, "result_ttl": true,
	"result_stored_at": true, "result_expires_at": true, "result_size_bytes": true,
	"checkpoint": true, "last_checkpoint": true,
}

// request is the PUSH body: the OJS envelope attributes at the top level
// (ojs-core.md) and/or the HTTP binding's "options" object.
type request struct {
	SpecVersion *string         `json:"specversion"`
	ID          *string         `json:"id"`
	Type        *string         `json:"type"`
	Queue       *string         `json:"queue"`
	Args        json.RawMessage `json:"args"`
	Meta        json.RawMessage `json:"meta"`
	Priority    json.RawMessage `json:"priority"`
	Timeout     json.RawMessage `json:"timeout"`
	ScheduledAt *string         `json:"scheduled_at"`
	ExpiresAt   *string         `json:"expires_at"`
	Retry       json.RawMessage `json:"retry"`
	Unique      json.RawMessage `json:"unique"`
	Schema      *string         `json:"schema"`
	Tags        json.RawMessage `json:"tags"`
	// VisibilityTimeout is the envelope's own lease length in seconds
	// (ojs-json-format.md 3.1).
	VisibilityTimeout json.RawMessage `json:"visibility_timeout"`
	ResultTTL         json.RawMessage `json:"result_ttl"`
	Options           *options        `json:"options"`
}

type options struct {
	Queue               *string         `json:"queue"`
	Priority            json.RawMessage `json:"priority"`
	TimeoutMS           json.RawMessage `json:"timeout_ms"`
	DelayUntil          *string         `json:"delay_until"`
	ScheduledAt         *string         `json:"scheduled_at"`
	ExpiresAt           *string         `json:"expires_at"`
	Retry               json.RawMessage `json:"retry"`
	RetryPolicy         json.RawMessage `json:"retry_policy"`
	Unique              json.RawMessage `json:"unique"`
	Tags                json.RawMessage `json:"tags"`
	Metadata            json.RawMessage `json:"metadata"`
	VisibilityTimeoutMS json.RawMessage `json:"visibility_timeout_ms"`
	VisibilityTimeout   json.RawMessage `json:"visibility_timeout"`
	Pending             *bool           `json:"pending"`
	RateLimit           json.RawMessage `json:"rate_limit"`
}

// Enqueue is a validated PUSH: the job to create and whether it starts
// pending.
type Enqueue struct {
	Job     *Job
	Pending bool
}

// ParseEnqueue validates one PUSH body and builds the job it creates, with
// its id (generated as UUIDv7 when absent), defaults and initial state
// (pending, scheduled or available) decided at now. Errors are *ojserr.Error
// naming the offending field. The reserved queue WebhookQueue is refused:
// only the server enqueues there (ParseInternal).
func ParseEnqueue(raw []byte, now time.Time) (*Enqueue, error) {
	return parseEnqueue(raw, now, false)
}

// ParseInternal is ParseEnqueue for a job the server itself enqueues,
// which may use a reserved queue.
func ParseInternal(raw []byte, now time.Time) (*Enqueue, error) {
	return parseEnqueue(raw, now, true)
}

// WebhookQueue is the reserved push-mode queue of webhook deliveries
// (pkg/webhook): a client cannot enqueue there, or it could have the
// server sign a body of its choosing for a subscriber.
const WebhookQueue = topology.WebhookQueueName

func parseEnqueue(raw []byte, now time.Time, internal bool) (*Enqueue, error) {
	req, extra, err := decodeEnqueue(raw)
	if err != nil {
		return nil, err
	}
	opts := cmp.Or(req.Options, &options{})
	j := &Job{Extra: extra}
	if err := parseWhat(j, req, opts); err != nil {
		return nil, err
	}
	if err := parseWhere(j, req, opts, internal); err != nil {
		return nil, err
	}
	if err := parseLimits(j, req, opts); err != nil {
		return nil, err
	}
	if err := parsePolicies(j, req, opts); err != nil {
		return nil, err
	}
	if j.ScheduledAt, j.ScheduledAtText, err = parseTime("scheduled_at", cmp.Or(opts.DelayUntil, opts.ScheduledAt, req.ScheduledAt), now); err != nil {
		return nil, err
	}
	if j.ExpiresAt, j.ExpiresAtText, err = parseTime("expires_at", cmp.Or(opts.ExpiresAt, req.ExpiresAt), now); err != nil {
		return nil, err
	}
	if _, err := NeedsOf(j); err != nil {
		return nil, err
	}
	if err := checkAgent(j); err != nil {
		return nil, err
	}
	created := now.UTC()
	j.CreatedAt = &created
	pending := opts.Pending != nil && *opts.Pending
	switch {
	case pending:
		j.State = Pending
	case j.ScheduledAt != nil && j.ScheduledAt.After(now):
		j.State = Scheduled
	default:
		j.State = Available
		j.EnqueuedAt = &created
	}
	return &Enqueue{Job: j, Pending: pending}, nil
}

// decodeEnqueue checks a PUSH body's size and encoding and decodes it
// strictly; extra holds the members the envelope does not define (kept
// as they are).
func decodeEnqueue(raw []byte) (*request, map[string]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	switch {
	case len(raw) > MaxEnvelopeBytes:
		return nil, nil, ojserr.Newf(ojserr.PayloadTooLarge, "Job envelope is %d bytes; the maximum is %d bytes.", len(raw), MaxEnvelopeBytes).
			With("actual_bytes", len(raw)).With("max_bytes", MaxEnvelopeBytes).With("field", "envelope")
	case !utf8.Valid(raw):
		return nil, nil, ojserr.Invalid("body", "The request body must be UTF-8 encoded JSON.")
	case len(trimmed) == 0:
		return nil, nil, payloadError("The request body is empty; send the job as a JSON object.")
	case !json.Valid(trimmed):
		return nil, nil, payloadError("The request body is not valid JSON.")
	case trimmed[0] != '{':
		return nil, nil, ojserr.Invalid("body", "The job must be a JSON object.")
	}
	var req request
	if err := strictDecode(trimmed, &req); err != nil {
		return nil, nil, err
	}
	var extra map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &extra); err != nil {
		return nil, nil, ojserr.Invalid("body", "The job must be a JSON object.")
	}
	for k := range known {
		delete(extra, k)
	}
	if req.SpecVersion != nil && *req.SpecVersion != SpecVersion {
		return nil, nil, ojserr.Invalid("specversion", "Unsupported specversion %q; this server speaks %q.", *req.SpecVersion, SpecVersion)
	}
	return &req, extra, nil
}

// parseWhat reads what the job is: its type, args and meta.
func parseWhat(j *Job, req *request, opts *options) error {
	if req.Type == nil {
		return missing("type")
	}
	j.Type = *req.Type
	if err := ValidateType(j.Type); err != nil {
		return err
	}
	if req.Args == nil {
		return missing("args")
	}
	if !isJSONKind(req.Args, '[') {
		return ojserr.Invalid("args", "The 'args' field must be a JSON array.").With("expected", "array").With("received", kindOf(req.Args))
	}
	j.Args = compact(req.Args)
	j.Meta = json.RawMessage("{}")
	if req.Meta != nil && !isNull(req.Meta) {
		if !isJSONKind(req.Meta, '{') {
			return ojserr.Invalid("meta", "The 'meta' field must be a JSON object.").With("expected", "object").With("received", kindOf(req.Meta))
		}
		if len(req.Meta) > MaxMetaBytes {
			return ojserr.Newf(ojserr.PayloadTooLarge, "The 'meta' field is %d bytes; the maximum is %d bytes.", len(req.Meta), MaxMetaBytes).
				With("field", "meta").With("actual_bytes", len(req.Meta)).With("max_bytes", MaxMetaBytes)
		}
		j.Meta = compact(req.Meta)
	}
	if md := opts.Metadata; md != nil && !isNull(md) {
		merged, err := mergeObjects(j.Meta, md)
		if err != nil {
			return ojserr.Invalid("options.metadata", "The 'options.metadata' field must be a JSON object.")
		}
		j.Meta = merged
	}
	j.Tenant = tenantOf(j.Meta)
	return nil
}

// parseWhere reads where the job goes and what it is called: its queue
// (the reserved WebhookQueue only when internal) and its id (a new UUIDv7
// when absent).
func parseWhere(j *Job, req *request, opts *options, internal bool) error {
	j.Queue = DefaultQueue
	if q := cmp.Or(opts.Queue, req.Queue); q != nil {
		j.Queue = *q
		if err := ValidateQueue(j.Queue); err != nil {
			return err
		}
		if j.Queue == WebhookQueue && !internal {
			return ojserr.Invalid("queue", "Queue '%s' is reserved for webhook deliveries, which the server enqueues.", WebhookQueue)
		}
	}
	if req.ID != nil {
		if err := ValidateID(*req.ID); err != nil {
			return ojserr.Invalid("id", "The 'id' field must be a lowercase hyphenated UUIDv7.")
		}
		j.ID = *req.ID
		return nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return ojserr.Backend(fmt.Errorf("generate id: %w", err))
	}
	j.ID = id.String()
	return nil
}

// parseLimits reads the priority, the attempt timeout and the
// visibility timeout, each in its current and legacy spellings.
func parseLimits(j *Job, req *request, opts *options) error {
	var err error
	if j.Priority, err = intField("priority", namedPriority(first(opts.Priority, req.Priority)), 0, MinPriority, MaxPriority); err != nil {
		return err
	}
	// intField answers 0 for an absent field: options.timeout_ms is at
	// least 1, the envelope's timeout (seconds) 0 for the default.
	ms, err := intField("options.timeout_ms", opts.TimeoutMS, 0, 1, MaxTimeout.Milliseconds())
	if err != nil {
		return err
	}
	secs := 0
	if ms == 0 {
		if secs, err = intField("timeout", req.Timeout, 0, 0, int64(MaxTimeout/time.Second)); err != nil {
			return err
		}
	}
	j.Timeout = cmp.Or(time.Duration(ms)*time.Millisecond, time.Duration(secs)*time.Second, DefaultTimeout)
	if ms, err = intField("options.visibility_timeout_ms", opts.VisibilityTimeoutMS, 0, 1, MaxTimeout.Milliseconds()); err != nil || ms > 0 {
		j.Visibility = time.Duration(ms) * time.Millisecond
		return err
	}
	raw := first(opts.VisibilityTimeout, req.VisibilityTimeout)
	if raw == nil || isNull(raw) {
		return nil
	}
	var iso string
	if json.Unmarshal(raw, &iso) == nil {
		d, err := retry.ParseDuration(iso)
		if err != nil || d <= 0 || d > MaxTimeout {
			return ojserr.Invalid("options.visibility_timeout", "The 'options.visibility_timeout' field must be a positive ISO 8601 duration or a number of seconds.")
		}
		j.Visibility = d
		return nil
	}
	s, err := intField("options.visibility_timeout", raw, 0, 1, int64(MaxTimeout/time.Second))
	if err != nil {
		return err
	}
	j.Visibility = time.Duration(s) * time.Second
	return nil
}

// parsePolicies reads the retry and unique policies, the queue rate, the
// tags, the result's retention and the schema.
func parsePolicies(j *Job, req *request, opts *options) error {
	var err error
	if j.Retry, err = parseRetry(first(opts.Retry, opts.RetryPolicy, req.Retry)); err != nil {
		return err
	}
	if u := first(opts.Unique, req.Unique); u != nil && !isNull(u) {
		if j.Unique, err = parseUnique(u, j); err != nil {
			return err
		}
	}
	if rl := opts.RateLimit; rl != nil && !isNull(rl) {
		if err := parseRateLimit(j, rl); err != nil {
			return err
		}
	}
	if tags := first(opts.Tags, req.Tags); tags != nil && !isNull(tags) {
		if err := json.Unmarshal(tags, &j.Tags); err != nil || len(j.Tags) > 50 {
			return ojserr.Invalid("tags", "The 'tags' field must be an array of at most 50 strings.")
		}
	}
	if raw := req.ResultTTL; raw != nil && !isNull(raw) {
		s, err := intField("result_ttl", raw, 0, PermanentResultTTL, MaxResultTTL)
		if err != nil {
			return ojserr.Invalid("result_ttl", "The 'result_ttl' field must be -1 (kept for ever), 0 (not stored) or a number of seconds up to %d.", MaxResultTTL)
		}
		j.ResultTTL = new(int64(s))
	}
	if req.Schema != nil {
		j.Schema = *req.Schema
	}
	return nil
}

// ValidateType checks a job type against the OJS pattern and length.
func ValidateType(t string) error {
	if t == "" || len(t) > MaxTypeLength || !typePattern.MatchString(t) {
		return ojserr.Invalid("type", "The 'type' field must be a dot-separated name like 'email.send' (lowercase segments that start with a letter and hold letters, digits, '_' and '-'; at most %d bytes).", MaxTypeLength)
	}
	return nil
}

// ValidateQueue checks a queue name against the OJS pattern and length.
func ValidateQueue(q string) error {
	if q == "" || len(q) > MaxQueueLength || !queuePattern.MatchString(q) {
		return ojserr.Invalid("queue", "The queue name must match [a-z0-9][a-z0-9.-]* and be at most %d characters.", MaxQueueLength)
	}
	return nil
}

// ValidateID checks that id is a canonical lowercase UUIDv7.
func ValidateID(id string) error {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 || u.String() != id || u.Version() != 7 {
		return errors.New("not a lowercase hyphenated UUIDv7")
	}
	return nil
}

// CheckID is ValidateID as an API error: a 400 invalid_request naming
// the "id" parameter (the id shown cut to 64 bytes).
func CheckID(id string) error {
	if ValidateID(id) == nil {
		return nil
	}
	shown := id
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	return ojserr.Invalid("id", "Job ids are lowercase hyphenated UUIDv7 strings; '%s' is not one.", shown)
}

func parseRetry(raw json.RawMessage) (retry.Policy, error) {
	if raw != nil && !isNull(raw) && !isJSONKind(raw, '{') {
		return retry.Policy{}, ojserr.Invalid("retry", "The 'retry' field must be a JSON object.")
	}
	p, err := retry.Parse(raw)
	if err != nil {
		if fe, ok := errors.AsType[*retry.FieldError](err); ok {
			e := ojserr.Newf(ojserr.ValidationError, "Invalid retry policy: %s.", err.Error()).With("field", "retry."+fe.Field)
			e.Type = "validation_error"
			return p, e
		}
		return p, ojserr.Invalid("retry", "Invalid retry policy.")
	}
	return p, nil
}

func strictDecode(b []byte, v any) error {
	if err := jsoncase.Unmarshal(b, v); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			field := te.Field
			field = cmp.Or(field, "body")
			return ojserr.Invalid(field, "The '%s' field has the wrong type: expected %s.", field, te.Type.String()).With("received", te.Value)
		}
		return payloadError("The request body is not valid JSON.")
	}
	return nil
}

func payloadError(msg string) *ojserr.Error {
	return ojserr.New(ojserr.InvalidPayload, msg).With("field", "body")
}

func missing(field string) error {
	return ojserr.Invalid(field, "The '%s' field is required.", field).With("validation", "required")
}

// parseTime accepts an RFC 3339 timestamp with a time zone, kept verbatim
// as text, or a duration relative to now written "+PT5S"; nil when s is.
func parseTime(field string, s *string, now time.Time) (*time.Time, string, error) {
	if s == nil {
		return nil, "", nil
	}
	if rel, ok := strings.CutPrefix(*s, "+"); ok {
		if d, err := retry.ParseDuration(rel); err == nil {
			t := now.Add(d).UTC()
			return &t, t.Format(time.RFC3339Nano), nil
		}
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return nil, "", ojserr.Invalid(field, "The '%s' field must be an RFC 3339 timestamp with a time zone, like 2026-03-15T09:30:00Z, or a relative duration like +PT30S.", field)
	}
	return new(t.UTC()), *s, nil
}

func mergeObjects(base, over json.RawMessage) (json.RawMessage, error) {
	var a, b map[string]json.RawMessage
	if err := json.Unmarshal(base, &a); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(over, &b); err != nil || b == nil {
		return nil, errors.New("not an object")
	}
	if a == nil {
		a = map[string]json.RawMessage{}
	}
	for k, v := range b {
		if _, set := a[k]; !set {
			a[k] = v
		}
	}
	return json.Marshal(a)
}

// NamedPriorities are the named levels of ojs-conformance.md L4-PRI-003
// (higher numbers are fetched first).
var NamedPriorities = map[string]int{"high": 3, "normal": 2, "low": 1}

// namedPriority turns "HIGH", "normal", "Low" into their numbers; other
// values pass through to the integer check.
func namedPriority(raw json.RawMessage) json.RawMessage {
	var name string
	if raw == nil || json.Unmarshal(raw, &name) != nil {
		return raw
	}
	if v, ok := NamedPriorities[strings.ToLower(name)]; ok {
		return json.RawMessage(strconv.Itoa(v))
	}
	return raw
}

func intField(field string, raw json.RawMessage, def, lo, hi int64) (int, error) {
	if raw == nil || isNull(raw) {
		return int(def), nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, ojserr.Invalid(field, "The '%s' field must be an integer between %d and %d.", field, lo, hi)
	}
	return int(f), nil
}

func first(vals ...json.RawMessage) json.RawMessage {
	for _, v := range vals {
		if v != nil {
			return v
		}
	}
	return nil
}

func isNull(b json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

func isJSONKind(b json.RawMessage, open byte) bool {
	t := bytes.TrimSpace(b)
	return len(t) > 0 && t[0] == open
}

func kindOf(b json.RawMessage) string {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return "nothing"
	}
	kinds := map[byte]string{'{': "object", '[': "array", '"': "string", 't': "boolean", 'f': "boolean", 'n': "null"}
	return cmp.Or(kinds[t[0]], "number")
}

func compact(b json.RawMessage) json.RawMessage {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return b
	}
	return out.Bytes()
}
