package ratelimit

import (
	"cmp"
	"strconv"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// Events derives, from a change of a key's item in the table's stream,
// rate_limit.exceeded when a claim marked the key held (MarkHeld) and
// rate_limit.released when a start cleared the mark (Take). Each event's
// id is the key's and the episode's, so a stream batch retried derives
// the same ids. An event's time is the mark's, or the start's (at, the
// stream record's, when the item does not say).
func Events(src string, old, cur *State, at time.Time) []events.Event {
	if cur == nil {
		return nil
	}
	was := old != nil && old.Held != ""
	var typ, key string
	var data map[string]any
	switch {
	case cur.Held != "" && !was:
		typ, key, at = events.RateLimitExceeded, "x"+strconv.FormatInt(cur.Episode, 10), cmp.Or(cur.HeldAt, at)
		data = map[string]any{"key": cur.Key, "strategy": string(cur.Held), "limit": cur.limitOf(cur.Held), "current": cur.HeldN}
	case cur.Until.After(timeOrZero(old)):
		// A handler's rate_limit_until held the key (PauseUntil).
		typ, key, at = events.RateLimitDynamicAdjusted, "d"+strconv.FormatInt(cur.Until.UnixMilli(), 10), cmp.Or(cur.Updated, at)
		data = map[string]any{"key": cur.Key, "until": job.Timestamp(cur.Until), "reason": cur.UntilReason}
	case cur.Held == "" && was:
		typ, key, at = events.RateLimitReleased, "r"+strconv.FormatInt(cur.Episode, 10), cmp.Or(cur.Updated, at)
		data = map[string]any{"key": cur.Key, "strategy": string(old.Held), "job_id": cur.LastJob}
	default:
		return nil
	}
	return []events.Event{events.New(src, typ, cur.Key, at, cur.Episode, data, key)}
}

// timeOrZero is old's hold (zero without one).
func timeOrZero(old *State) time.Time {
	if old == nil {
		return time.Time{}
	}
	return old.Until
}

// limitOf is the limit of the named kind that applied when the key was
// marked held.
func (st *State) limitOf(l Limit) int {
	p := st.Limits(st.HeldAt)
	switch {
	case l == Concurrency && p.Concurrency != nil:
		return *p.Concurrency
	case l == Rate && p.Rate != nil:
		return p.Rate.Limit
	case l == Throttle && p.Throttle != nil:
		return p.Throttle.Limit
	}
	return 0
}
