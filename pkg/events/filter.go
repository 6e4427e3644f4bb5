package events

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// Limits of one events query.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	// MaxValues bounds the values of one filter dimension.
	MaxValues = 20
	// DefaultWindow is how far back a query without after or since reads.
	DefaultWindow = 24 * time.Hour
	// MaxWindow is how far back a query by time reads at most: longer than
	// events are kept (OJS_EVENT_TTL: 7 days, 30 in prod), so an older
	// since or cursor only bounds the work (a since of 1970 would cost a
	// query per day and shard since then).
	MaxWindow = 31 * 24 * time.Hour
)

// Filter selects events (ojs-events.md section 6.1 and 6.4). Empty
// dimensions match everything; dimensions combine with AND.
type Filter struct {
	// Types are event types; "job.*" matches every type with that prefix.
	Types    []string
	Queues   []string
	JobTypes []string
	// Subject restricts to one job or workflow: Category is "job" or
	// "workflow" and ID its id.
	SubjectCategory, SubjectID string
	// After is the cursor: only events with a greater id.
	After string
	// Since and Until bound the event time (Until exclusive). Zero: unset.
	Since, Until time.Time
	Limit        int
}

// ParseQuery reads a filter from the query string of GET /ojs/v1/events:
// types, queues, job_types (comma separated), job_id or workflow_id,
// after (an event id), since and until (RFC 3339) and limit (1..1000).
func ParseQuery(q url.Values) (Filter, error) {
	f := Filter{Limit: DefaultLimit}
	for k := range q {
		switch k {
		case "types", "type", "queues", "queue", "job_types", "job_type", "job_id", "workflow_id", "after", "cursor", "since", "until", "limit":
		default:
			return f, ojserr.Invalid(k, "Unknown query parameter '%s'.", k).
				With("allowed", []string{"types", "queues", "job_types", "job_id", "workflow_id", "after", "since", "until", "limit"})
		}
	}
	f.Types = list(q, "types", "type")
	if err := checkPatterns("types", f.Types); err != nil {
		return f, err
	}
	f.Queues = list(q, "queues", "queue")
	f.JobTypes = list(q, "job_types", "job_type")
	for name, l := range map[string][]string{"types": f.Types, "queues": f.Queues, "job_types": f.JobTypes} {
		if len(l) > MaxValues {
			return f, ojserr.Invalid(name, "At most %d values per filter.", MaxValues)
		}
	}
	if id := q.Get("job_id"); id != "" {
		f.SubjectCategory, f.SubjectID = "job", id
	}
	if id := q.Get("workflow_id"); id != "" {
		if f.SubjectID != "" {
			return f, ojserr.Invalid("workflow_id", "Give job_id or workflow_id, not both.")
		}
		f.SubjectCategory, f.SubjectID = "workflow", id
	}
	if len(f.SubjectID) > 256 {
		return f, ojserr.Invalid(f.SubjectCategory+"_id", "The id is longer than 256 characters.")
	}
	after := q.Get("after")
	if after == "" {
		after = q.Get("cursor")
	}
	if after != "" {
		if _, ok := ParseID(after); !ok {
			return f, ojserr.Invalid("after", "'%s' is not an event id (evt_<uuidv7>); pass the cursor of a previous page.", after)
		}
		f.After = after
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, ojserr.Invalid(p.name, "'%s' is not an RFC 3339 timestamp.", v)
			}
			*p.dst = t.UTC()
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, ojserr.Invalid("until", "until must be after since.")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return f, ojserr.Invalid("limit", "limit must be an integer from 1 to %d.", MaxLimit)
		}
		f.Limit = n
	}
	return f, nil
}

func list(q url.Values, names ...string) []string {
	var out []string
	for _, n := range names {
		for _, v := range q[n] {
			for _, s := range strings.Split(v, ",") {
				if s = strings.TrimSpace(s); s != "" {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// Start is the smallest event id the query can return. A query by time
// (no job or workflow) reads at most MaxWindow back, whatever its since or
// cursor: each day costs one query per index shard.
func (f Filter) Start(now time.Time) string {
	since := f.Since
	if f.SubjectID == "" {
		if since.IsZero() && f.After == "" {
			since = now.Add(-DefaultWindow)
		}
		if floor := now.Add(-MaxWindow); since.Before(floor) {
			since = floor
		}
	}
	lb := ""
	if !since.IsZero() {
		lb = LowerBound(since)
	}
	if f.After != "" && f.After > lb {
		lb = f.After
	}
	return lb
}

// Matches reports whether e passes the type, queue and job type filters
// (the subject and time bounds are applied by the query itself).
func (f Filter) Matches(e *Event) bool {
	if len(f.Types) > 0 && !MatchType(f.Types, e.Type) {
		return false
	}
	if len(f.Queues) > 0 && !slices.Contains(f.Queues, e.Queue()) {
		return false
	}
	if len(f.JobTypes) > 0 && !slices.Contains(f.JobTypes, e.JobType()) {
		return false
	}
	return true
}

// Page is one page of a query: the events in id order, the cursor to pass
// as after for the next page, and whether more events matched already.
type Page struct {
	Events  []Event `json:"events"`
	Cursor  string  `json:"cursor,omitempty"`
	HasMore bool    `json:"has_more"`
}

// checkPatterns validates event type patterns: each an event type, a
// prefix ending in ".*" ("job.*"), or "*" for every type.
func checkPatterns(field string, patterns []string) error {
	for _, t := range patterns {
		if p, ok := strings.CutSuffix(t, "*"); ok {
			if !strings.HasSuffix(p, ".") && p != "" {
				return ojserr.Invalid(field, "Type pattern '%s' must end in '.*' (e.g. 'job.*').", t)
			}
			continue
		}
		if !slices.Contains(Types, t) {
			return ojserr.Invalid(field, "Unknown event type '%s'.", t).With("allowed", Types)
		}
	}
	return nil
}

// MatchType reports whether typ matches one of patterns (event types,
// "job.*" prefixes, or "*").
func MatchType(patterns []string, typ string) bool {
	return slices.ContainsFunc(patterns, func(t string) bool {
		if p, ok := strings.CutSuffix(t, "*"); ok {
			return strings.HasPrefix(typ, p)
		}
		return t == typ
	})
}

// DefaultPublished are the event types published to EventBridge unless
// configured otherwise: what subscribers act on in practice, the end of
// each job and each workflow's lifecycle. The per-attempt and per-step
// events (job.enqueued, job.started, job.retrying, workflow.step_completed,
// ...) stay in the events API only: at $1 per million events they would
// cost four times what the terminal ones do (docs/benchmark.md).
var DefaultPublished = []string{
	JobCompleted, JobDiscarded, JobCancelled,
	WorkflowCreated, WorkflowCompleted, WorkflowFailed, WorkflowCancelled, WorkflowCallbackFired,
	WorkflowTimedOut, WorkflowCompensating, WorkflowCompensated, WorkflowRetried, WorkflowHandlerStarted, WorkflowHandlerFinished,
	DeadLetterAdded, QueuePaused, QueueResumed,
}

// ParsePublished reads the OJS_PUBLISH_EVENTS setting: a comma-separated
// list of types and patterns ("job.*", "*" for all), "none" for no
// events, or empty for DefaultPublished.
func ParsePublished(spec string) ([]string, error) {
	spec = strings.TrimSpace(spec)
	switch spec {
	case "":
		return DefaultPublished, nil
	case "none":
		return []string{}, nil
	}
	var out []string
	for _, s := range strings.Split(spec, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if err := checkPatterns("OJS_PUBLISH_EVENTS", out); err != nil {
		return nil, fmt.Errorf("%s", ojserr.As(err).Message)
	}
	return out, nil
}
