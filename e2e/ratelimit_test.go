package e2e

import (
	"net/http"
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
	evs := waitEvents(t, "types=rate_limit.exceeded,rate_limit.released&since="+since, 0)
	deadline = time.Now().Add(settle)
	for !hasKeyEvents(evs, key) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		evs = waitEvents(t, "types=rate_limit.exceeded,rate_limit.released&since="+since+"&limit=1000", 0)
	}
	if !hasKeyEvents(evs, key) {
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
