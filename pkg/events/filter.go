package events

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"hash/fnv"
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
	// Tenant restricts to the events of one tenant's jobs (read from the
	// tenant's pages when no subject is named).
	Tenant string
	// After is the cursor: only events with a greater id, and (with
	// LateAfter) those stored late below it.
	After string
	// LateAfter and ReadAt come from a tailing cursor (see Cursor): events
	// with ids in (LateAfter, After] are returned too if their page was
	// stored at or after ReadAt less StoreMargin, after the read that
	// issued the cursor, since that read could not have returned them.
	LateAfter string
	ReadAt    time.Time
	Seen      []uint64
	// Tail makes the page's cursor a tailing cursor when its last event is
	// within Settle of now (the HTTP API sets it; internal readers paging
	// a fixed window take plain cursors, which never repeat an event).
	Tail bool
	// Since and Until bound the event time (Until exclusive). Zero: unset.
	Since, Until time.Time
	Limit        int
	// MaxBytes, when set, also ends a page before the event that would
	// take its events' JSON past it (the HTTP API sets it, so that a page
	// of events carrying large results fits Lambda's 6 MB response); the
	// page then has more, and its cursor goes on from there.
	MaxBytes int
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
	if err := CheckPatterns("types", f.Types); err != nil {
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
	f.Tail = true
	if after := cmp.Or(q.Get("after"), q.Get("cursor")); after != "" && !f.SetCursor(after) {
		return f, ojserr.Invalid("after", "'%s' is not an event id (evt_<uuidv7>) or a cursor; pass the cursor of a previous page.", after)
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
			out = appendItems(out, v)
		}
	}
	return out
}

// appendItems appends the non-empty items of the comma-separated list v.
func appendItems(out []string, v string) []string {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
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
	after := f.After
	if f.LateAfter != "" {
		after = f.LateAfter
	}
	if after != "" && after > lb {
		lb = after
	}
	return lb
}

// Settle is how long after an event's time it can still be stored late
// and be found by a reader tailing the log with the cursors of its pages
// (a stream batch retried, a shard behind another): a page whose last
// event is younger than this gets a tailing cursor. StoreMargin covers the
// clocks of the functions that write and read and a write's own time.
const (
	Settle      = 10 * time.Second
	StoreMargin = 2 * time.Second
)

// CursorState is what a cursor holds: the last event returned (After)
// and, for a tailing cursor, the bound above which late events are
// looked for (LateAfter), the time of the read that issued it, and the
// pages that read saw among those stored within StoreMargin before it
// (Seen, hashes from PageHash; empty when there were more than MaxSeen):
// a page it saw has no late event for the next read.
type CursorState struct {
	After, LateAfter string
	ReadAt           time.Time
	Seen             []uint64
}

// MaxSeen bounds the pages a cursor names; past it a cursor names none,
// and the next read may return the events of those pages again (at least
// once: a consumer deduplicates by id).
const MaxSeen = 48

// String is the cursor: the event id alone, or for a tailing cursor the
// id, the late bound's event id, the read time in Unix milliseconds and
// the seen pages, joined by "~". Either is accepted as after.
func (c CursorState) String() string {
	if c.LateAfter == "" || c.LateAfter >= c.After {
		return c.After
	}
	s := c.After + "~" + c.LateAfter + "~" + strconv.FormatInt(c.ReadAt.UnixMilli(), 10)
	if len(c.Seen) > 0 && len(c.Seen) <= MaxSeen {
		b := make([]byte, 0, 6*len(c.Seen))
		for _, h := range c.Seen {
			b = append(b, byte(h>>40), byte(h>>32), byte(h>>24), byte(h>>16), byte(h>>8), byte(h))
		}
		s += "~" + base64.RawURLEncoding.EncodeToString(b)
	}
	return s
}

// ParseCursor reads a cursor (String's form).
func ParseCursor(s string) (CursorState, bool) {
	parts := strings.Split(s, "~")
	var c CursorState
	if _, ok := ParseID(parts[0]); !ok {
		return c, false
	}
	c.After = parts[0]
	switch len(parts) {
	case 1:
		return c, true
	case 3, 4:
		ms, err := strconv.ParseInt(parts[2], 10, 64)
		if _, ok := ParseID(parts[1]); !ok || err != nil || ms <= 0 || parts[1] >= c.After {
			return c, false
		}
		c.LateAfter, c.ReadAt = parts[1], time.UnixMilli(ms).UTC()
		if len(parts) == 4 {
			b, err := base64.RawURLEncoding.DecodeString(parts[3])
			if err != nil || len(b) == 0 || len(b)%6 != 0 || len(b)/6 > MaxSeen {
				return c, false
			}
			for i := 0; i < len(b); i += 6 {
				c.Seen = append(c.Seen, uint64(b[i])<<40|uint64(b[i+1])<<32|uint64(b[i+2])<<24|uint64(b[i+3])<<16|uint64(b[i+4])<<8|uint64(b[i+5]))
			}
		}
		return c, true
	}
	return c, false
}

// SetCursor makes f go on from cursor (an event id or a page's cursor);
// false if it is neither.
func (f *Filter) SetCursor(cursor string) bool {
	c, ok := ParseCursor(cursor)
	if ok {
		f.After, f.LateAfter, f.ReadAt, f.Seen = c.After, c.LateAfter, c.ReadAt, c.Seen
	}
	return ok
}

// PageHash names a stored page of events for a cursor's Seen: its
// partition, sort key and write time (a page written again is another
// page), 48 bits of FNV-1a.
func PageHash(pk, sk string, storedAt time.Time) uint64 {
	h := fnv.New64a()
	h.Write([]byte(pk))
	h.Write([]byte{0})
	h.Write([]byte(sk))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(storedAt.UnixMilli(), 10)))
	return h.Sum64() & (1<<48 - 1)
}

// AtRisk reports whether a page stored at storedAt, read at now, could be
// stored after a read at now as far as the next read can tell (within
// StoreMargin of it): such a page read now goes in the cursor's Seen.
func AtRisk(storedAt, now time.Time) bool { return !storedAt.Before(now.Add(-StoreMargin)) }

// Fresh reports whether an event with id, of the page named page stored
// at storedAt, must be returned: above the cursor's After, or at or below
// it in a page stored late, which the read that issued the cursor did not
// see.
func (f Filter) Fresh(id string, storedAt time.Time, page uint64) bool {
	if id > f.After {
		return true
	}
	return f.LateAfter != "" && id > f.LateAfter && AtRisk(storedAt, f.ReadAt) && !slices.Contains(f.Seen, page)
}

// NextCursor is the cursor of a page of f read at now whose events (in id
// order) are evs, hasMore telling whether it was cut at the limit, and
// seen the pages read stored within StoreMargin before now (nil when
// there were more than MaxSeen). A tailing cursor keeps looking for events
// stored late below it for Settle after their time; a page cut among late
// events goes on from the last of them, as of the same read.
func (f Filter) NextCursor(evs []Event, hasMore bool, now time.Time, seen []uint64) string {
	last := ""
	if n := len(evs); n > 0 {
		last = evs[n-1].ID
	}
	if hasMore && last != "" && last <= f.After {
		return CursorState{After: f.After, LateAfter: last, ReadAt: f.ReadAt, Seen: f.Seen}.String()
	}
	c := CursorState{After: max(f.After, last)}
	if !f.Tail || c.After == "" {
		return c.After
	}
	c.LateAfter, c.ReadAt, c.Seen = max(f.LateAfter, LowerBound(now.Add(-Settle))), now, seen
	return c.String()
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
	return f.Tenant == "" || e.Tenant() == f.Tenant
}

// Page is one page of a query: the events in id order, the cursor to pass
// as after for the next page, and whether more events matched already.
type Page struct {
	Events  []Event `json:"events"`
	Cursor  string  `json:"cursor,omitempty"`
	HasMore bool    `json:"has_more"`
}

// CheckPatterns validates event type patterns: each an event type, a
// prefix ending in ".*" ("job.*"), or "*" for every type.
func CheckPatterns(field string, patterns []string) error {
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
// configured otherwise: the end of each job's and workflow's lifecycle
// (per-attempt and per-step events would cost four times as much,
// docs/benchmark.md).
var DefaultPublished = []string{
	JobCompleted, JobDiscarded, JobCancelled,
	WorkflowCreated, WorkflowCompleted, WorkflowFailed, WorkflowCancelled, WorkflowCallbackFired,
	WorkflowTimedOut, WorkflowCompensating, WorkflowCompensated, WorkflowRetried, WorkflowHandlerStarted, WorkflowHandlerFinished,
	DeadLetterAdded, QueuePaused, QueueResumed, BackpressureRejected, RateLimitExceeded, RateLimitReleased, RateLimitDynamicAdjusted,
}

// DefaultPacked are the published event types sent packed to EventBridge
// unless configured otherwise: the job events, a stream batch's in entries
// of up to 64 KB, each billed as one event (docs/events.md).
var DefaultPacked = []string{"job.*"}

// ParsePacked reads the OJS_PUBLISH_PACKED setting: types and patterns as
// for OJS_PUBLISH_EVENTS, "none" (nil: every event an entry of its own),
// or empty for DefaultPacked.
func ParsePacked(spec string) ([]string, error) {
	return parseTypes("OJS_PUBLISH_PACKED", spec, DefaultPacked, nil)
}

// ParsePublished reads the OJS_PUBLISH_EVENTS setting: a comma-separated
// list of types and patterns ("job.*", "*" for all), "none" for no
// events, or empty for DefaultPublished.
func ParsePublished(spec string) ([]string, error) {
	return parseTypes("OJS_PUBLISH_EVENTS", spec, DefaultPublished, []string{})
}

// parseTypes reads setting's list of types and patterns: def when spec is
// empty, none when it is "none".
func parseTypes(setting, spec string, def, none []string) ([]string, error) {
	switch strings.TrimSpace(spec) {
	case "":
		return def, nil
	case "none":
		return none, nil
	}
	out := appendItems(nil, spec)
	if err := CheckPatterns(setting, out); err != nil {
		return nil, fmt.Errorf("%s", ojserr.As(err).Message)
	}
	return out, nil
}
