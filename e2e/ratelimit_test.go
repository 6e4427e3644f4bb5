package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The rate-limiting extension end to end on the local stack: a key with
// concurrency 1 hands out one job at a time over HTTP; the ACK frees the
// slot (the stream function's release); the key's state, the enqueue's
// X-RateLimit-* headers and the rate_limit.exceeded and .released events
// say so.
func TestRateLimitKeyEndToEnd(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	key := "e2e-" + strings.ReplaceAll(q, "_", "-")
	since := time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano)
	rl := map[string]any{"key": key, "concurrency": 1}
	var ids []string
	for i := range 2 {
		r := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "rl.e2e", "args": []any{i}, "options": map[string]any{"queue": q, "rate_limit": rl}})
		if r.Status != http.StatusCreated || r.Header.Get("X-RateLimit-Limit") != "1" {
			t.Fatalf("enqueue: %d %v %s", r.Status, r.Header, r.Raw)
		}
		ids = append(ids, r.job(t)["id"].(string))
	}
	fetch := func() []any {
		r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 5, "worker_id": "rl-e2e"})
		if r.Status != http.StatusOK {
			t.Fatalf("fetch: %d %s", r.Status, r.Raw)
		}
		return r.Body["jobs"].([]any)
	}
	first := fetch()
	if len(first) != 1 {
		t.Fatalf("concurrency 1: FETCH got %d jobs", len(first))
	}
	if again := fetch(); len(again) != 0 {
		t.Fatalf("the key is full, yet FETCH got %d", len(again))
	}
	info := do(t, http.MethodGet, "/ojs/v1/rate-limits/"+key, nil)
	c, _ := info.Body["concurrency"].(map[string]any)
	if info.Status != http.StatusOK || info.Body["key"] != key || c == nil || num(c["active"]) != 1 || num(c["limit"]) != 1 {
		t.Fatalf("inspect: %d %s", info.Status, info.Raw)
	}
	id := first[0].(map[string]any)["id"].(string)
	if r := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": id}); r.Status != http.StatusOK {
		t.Fatalf("ack: %d %s", r.Status, r.Raw)
	}
	// The stream function frees the slot; the next FETCH takes the other.
	deadline := time.Now().Add(settle)
	var next []any
	for next = fetch(); len(next) == 0 && time.Now().Before(deadline); next = fetch() {
		time.Sleep(200 * time.Millisecond)
	}
	other := ids[0]
	if other == id {
		other = ids[1]
	}
	if len(next) != 1 || next[0].(map[string]any)["id"] != other {
		t.Fatalf("after the ACK: %v, want %s", next, other)
	}
	if evs := keyEvents(t, "rate_limit.exceeded,rate_limit.released", since, key, hasKeyEvents); !hasKeyEvents(evs, key) {
		t.Fatalf("no rate_limit.exceeded and .released of %s: %v", key, evs)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/rate-limits/no-such-key", nil); r.Status != http.StatusNotFound {
		t.Fatalf("unknown key: %d", r.Status)
	}
}

// hasKeyEvents reports whether evs hold both rate limit events of key,
// exceeded before released.
func hasKeyEvents(evs []map[string]any, key string) bool {
	seen := ""
	for _, e := range evs {
		if d, _ := e["data"].(map[string]any); d != nil && d["key"] == key {
			seen += e["type"].(string) + " "
		}
	}
	return strings.Contains(seen, "rate_limit.exceeded rate_limit.released")
}

// An operator's override replaces a key's limits until removed, the
// listing names the key, and a handler's rate_limit_until holds the
// key's jobs until then (rate_limit.dynamic_adjusted), over HTTP with
// the real functions.
func TestRateLimitOverrideListAndHold(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	key := "e2e-ov-" + strings.ReplaceAll(q, "_", "-")
	since := time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano)
	push := func(i int) string {
		r := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "rl.ov", "args": []any{i},
			"options": map[string]any{"queue": q, "rate_limit": map[string]any{"key": key, "concurrency": 5}, "retry": map[string]any{"max_attempts": 1}}})
		if r.Status != http.StatusCreated {
			t.Fatalf("enqueue: %d %s", r.Status, r.Raw)
		}
		return r.job(t)["id"].(string)
	}
	fetch := func() []any {
		r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 5, "worker_id": "rl-ov"})
		if r.Status != http.StatusOK {
			t.Fatalf("fetch: %d %s", r.Status, r.Raw)
		}
		return r.Body["jobs"].([]any)
	}
	push(0)
	// Stopped by an override of concurrency 0; its state says so.
	ov := do(t, http.MethodPut, "/ojs/v1/rate-limits/"+key, map[string]any{"concurrency": 0, "expires_at": "+PT1H"})
	if c, _ := ov.Body["concurrency"].(map[string]any); ov.Status != http.StatusOK || c == nil || num(c["limit"]) != 0 || ov.Body["override"] == nil {
		t.Fatalf("override: %d %s", ov.Status, ov.Raw)
	}
	if got := fetch(); len(got) != 0 {
		t.Fatalf("an override of concurrency 0 let FETCH take %d jobs", len(got))
	}
	if r := do(t, http.MethodPut, "/ojs/v1/rate-limits/"+key, map[string]any{"expires_at": "+PT1H"}); r.Status != http.StatusBadRequest {
		t.Fatalf("an override without limits: %d %s", r.Status, r.Raw)
	}
	found := false
	for page := 1; !found; page++ {
		r := do(t, http.MethodGet, "/ojs/v1/rate-limits?per_page=100&page="+strconv.Itoa(page), nil)
		items, _ := r.Body["items"].([]any)
		if r.Status != http.StatusOK || len(items) == 0 {
			t.Fatalf("listing page %d without %s: %d %s", page, key, r.Status, r.Raw)
		}
		for _, it := range items {
			found = found || it.(map[string]any)["key"] == key
		}
	}
	if page := do(t, http.MethodGet, "/ojs/admin/rate-limits", nil); page.Status != http.StatusOK || !strings.Contains(string(page.Raw), `rate-limits/`+key+`/clear`) {
		t.Fatalf("console rate limits page: %d %.400s", page.Status, page.Raw)
	}
	// Removed: the jobs' own limits apply again.
	if r := do(t, http.MethodDelete, "/ojs/v1/rate-limits/"+key, nil); r.Status != http.StatusOK || r.Body["override"] != nil {
		t.Fatalf("remove the override: %d %s", r.Status, r.Raw)
	}
	got := fetch() // a process takes a full key as full for 250 ms
	for deadline := time.Now().Add(settle); len(got) == 0 && time.Now().Before(deadline); got = fetch() {
		time.Sleep(100 * time.Millisecond)
	}
	if len(got) != 1 {
		t.Fatalf("after the override: FETCH got %d jobs", len(got))
	}
	// The handler reports the downstream API's limit: the key holds.
	until := time.Now().Add(4 * time.Second).UTC()
	id := got[0].(map[string]any)["id"].(string)
	if r := do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id,
		"error": map[string]any{"type": "RateLimitExceeded", "message": "429 from the API", "rate_limit_until": until.Format(time.RFC3339Nano)}}); r.Status != http.StatusOK {
		t.Fatalf("fail: %d %s", r.Status, r.Raw)
	}
	push(1)
	if got := fetch(); len(got) != 0 && time.Now().Before(until) {
		t.Fatalf("a key held until %v let FETCH take a job", until)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/rate-limits/"+key, nil); r.Body["dynamic"] == nil && time.Now().Before(until) {
		t.Fatalf("the key's state without its hold: %s", r.Raw)
	}
	time.Sleep(time.Until(until))
	deadline := time.Now().Add(settle)
	for got = fetch(); len(got) == 0 && time.Now().Before(deadline); got = fetch() {
		time.Sleep(200 * time.Millisecond)
	}
	if len(got) != 1 {
		t.Fatal("the key still held its jobs after rate_limit_until")
	}
	if evs := keyEvents(t, "rate_limit.dynamic_adjusted", since, key, hasEvent); !hasEvent(evs, key) {
		t.Fatalf("no rate_limit.dynamic_adjusted of %s: %v", key, evs)
	}
	if r := do(t, http.MethodDelete, "/ojs/v1/rate-limits/no-such-key", nil); r.Status != http.StatusNotFound {
		t.Fatalf("remove the override of an unknown key: %d", r.Status)
	}
}

// keyEvents reads the events of types since, again until ok says they
// hold what key's test waits for or the settle time passes.
func keyEvents(t *testing.T, types, since, key string, ok func([]map[string]any, string) bool) []map[string]any {
	t.Helper()
	evs := waitEvents(t, "types="+types+"&since="+since, 0)
	for deadline := time.Now().Add(settle); !ok(evs, key) && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		evs = waitEvents(t, "types="+types+"&since="+since+"&limit=1000", 0)
	}
	return evs
}

// hasEvent reports whether evs hold an event of key.
func hasEvent(evs []map[string]any, key string) bool {
	for _, e := range evs {
		if d, _ := e["data"].(map[string]any); d != nil && d["key"] == key {
			return true
		}
	}
	return false
}
