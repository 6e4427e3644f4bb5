package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// Unique jobs over HTTP, as the conformance suite drives them: reject is
// 409 duplicate, ignore is 200 with the existing job, replace cancels the
// old job.
func TestUniqueJobsOverHTTP(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t) + "-uniq"
	body := func(onConflict string, arg int) map[string]any {
		return map[string]any{"type": "uniq.test", "args": []any{arg}, "options": map[string]any{"queue": q,
			"unique": map[string]any{"keys": []string{"type", "args"}, "on_conflict": onConflict}}}
	}
	first := push(t, body("reject", 1))
	r := do(t, http.MethodPost, "/ojs/v1/jobs", body("reject", 1))
	if r.Status != http.StatusConflict || r.errCode() != "duplicate" {
		t.Fatalf("reject: %d %s", r.Status, r.Raw)
	}
	r = do(t, http.MethodPost, "/ojs/v1/jobs", body("ignore", 1))
	if r.Status != http.StatusOK || r.job(t)["id"] != first["id"] || r.Body["deduplicated"] != true {
		t.Fatalf("ignore: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/jobs", body("reject", 2)); r.Status != http.StatusCreated {
		t.Fatalf("other args: %d %s", r.Status, r.Raw)
	}
	r = do(t, http.MethodPost, "/ojs/v1/jobs", body("replace", 1))
	if r.Status != http.StatusCreated || r.job(t)["id"] == first["id"] {
		t.Fatalf("replace: %d %s", r.Status, r.Raw)
	}
	if old := do(t, http.MethodGet, fmt.Sprintf("/ojs/v1/jobs/%v", first["id"]), nil).job(t); old["state"] != "cancelled" {
		t.Fatalf("replaced job: %v", old["state"])
	}
	bad := map[string]any{"type": "uniq.test", "args": []any{}, "options": map[string]any{"unique": map[string]any{"keys": []string{"argz"}}}}
	if r := do(t, http.MethodPost, "/ojs/v1/jobs", bad); r.Status != http.StatusBadRequest || r.errCode() != "invalid_request" {
		t.Fatalf("bad policy: %d %s", r.Status, r.Raw)
	}
}

// RL-001: a queue limited to one job a second hands out one, then none,
// then one again after 1.5 s.
func TestRateLimitOverHTTP(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t) + "-rl"
	for i := 0; i < 3; i++ {
		push(t, map[string]any{"type": "rl.test", "args": []any{i}, "options": map[string]any{"queue": q, "rate_limit": map[string]any{"max_per_second": 1}}})
	}
	began := time.Now()
	if fetchOne(t, q) == nil {
		t.Fatal("first fetch returned nothing")
	}
	// The limiter runs on the server's clock: only a second fetch that
	// ends within the second of the first one's start must come back empty
	// (on a stalled machine it may legitimately get the next token).
	j := fetchOne(t, q)
	if within := time.Since(began) < time.Second; j != nil && within {
		t.Fatalf("second fetch within the second returned %v", j["id"])
	} else if j != nil {
		t.Logf("the second fetch ended %v after the first began: past the second, the next token is due", time.Since(began))
	}
	time.Sleep(1500 * time.Millisecond)
	if fetchOne(t, q) == nil {
		t.Fatal("no job after 1.5 s")
	}
	qs := do(t, http.MethodGet, "/ojs/v1/queues", nil)
	found := false
	for _, x := range qs.Body["queues"].([]any) {
		if m := x.(map[string]any); m["name"] == q && num(m["rate_limit_per_second"]) == 1 {
			found = true
		}
	}
	if !found {
		t.Fatalf("queue list does not show the rate limit: %s", qs.Raw)
	}
}

// A batch of 1,000 jobs is accepted (written in chunks); an atomic batch
// beyond one transaction is refused with 422 and writes nothing.
func TestLargeBatchOverHTTP(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t) + "-bulk"
	jobs := make([]map[string]any, 1000)
	for i := range jobs {
		jobs[i] = map[string]any{"type": "bulk.test", "args": []any{i}, "options": map[string]any{"queue": q, "priority": "LOW"}}
	}
	r := do(t, http.MethodPost, "/ojs/v1/jobs/batch", map[string]any{"jobs": jobs[:101], "atomicity": "atomic"})
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("atomic 101: %d %s", r.Status, r.Raw)
	}
	began := time.Now()
	r = do(t, http.MethodPost, "/ojs/v1/jobs/batch", map[string]any{"jobs": jobs})
	if got, _ := r.Body["jobs"].([]any); r.Status != http.StatusCreated || len(got) != 1000 || num(got[0].(map[string]any)["priority"]) != 1 {
		raw := r.Raw
		if len(raw) > 2000 {
			raw = raw[:2000]
		}
		t.Fatalf("1000 jobs: %d after %v (%d bytes): %s", r.Status, time.Since(began), len(r.Raw), raw)
	}
	st := queueObj(t, do(t, http.MethodGet, "/ojs/v1/queues/"+q+"/stats", nil))
	if num(st["available"]) != 1000 {
		t.Fatalf("stats: %v", st)
	}
}
