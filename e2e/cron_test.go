package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func cronObj(t *testing.T, r response) map[string]any {
	t.Helper()
	c, ok := r.Body["cron"].(map[string]any)
	if !ok || r.Body["cron_job"] == nil && r.Body["deleted"] == nil {
		t.Fatalf("no cron in response %d: %s", r.Status, r.Raw)
	}
	return c
}

// fetchOne fetches one job from q in pull mode (nil if there is none).
func fetchOne(t *testing.T, q string) map[string]any {
	t.Helper()
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "cron-e2e"})
	if r.Status != http.StatusOK {
		t.Fatalf("fetch: %d %s", r.Status, r.Raw)
	}
	jobs, _ := r.Body["jobs"].([]any)
	if len(jobs) == 0 {
		return nil
	}
	return jobs[0].(map[string]any)
}

// A schedule registered over HTTP fires from the local runtime's sweeper
// function, in both request shapes, with the cron name in the job's meta
// and cron.triggered events; deleting it stops it.
func TestCronFiresThroughTheSweeper(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t) + "-cron"
	name := "e2e-every-2s-" + q
	r := do(t, http.MethodPost, "/ojs/v1/cron", map[string]any{"name": name, "expression": "*/2 * * * * *", "overlap_policy": "allow",
		"job_template": map[string]any{"type": "report.generate", "args": []any{"daily"}, "options": map[string]any{"queue": q}}})
	if r.Status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.Status, r.Raw)
	}
	c := cronObj(t, r)
	if c["name"] != name || c["expression"] != "*/2 * * * * *" || c["enabled"] != true || c["timezone"] != "UTC" ||
		c["overlap_policy"] != "allow" || c["next_run_at"] == nil || c["created_at"] == nil {
		t.Fatalf("registered: %v", c)
	}
	var got map[string]any
	deadline := time.Now().Add(settle)
	for got == nil && time.Now().Before(deadline) {
		if got = fetchOne(t, q); got == nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if got == nil {
		t.Fatal("the schedule did not enqueue a job within the settle time")
	}
	meta, _ := got["meta"].(map[string]any)
	if got["type"] != "report.generate" || meta["cron_name"] != name || meta["cron_triggered_at"] == nil {
		t.Fatalf("fired job: %v", got)
	}
	evs := waitEvents(t, "types=cron.triggered&queues="+q, 1)
	d, _ := evs[0]["data"].(map[string]any)
	if d["cron_name"] != name || d["job_type"] != "report.generate" || d["cron_expression"] != "*/2 * * * * *" || d["scheduled_time"] == nil || d["job_id"] == nil {
		t.Fatalf("cron.triggered: %v", evs[0])
	}
	checkEnvelope(t, evs[0], name)

	list := do(t, http.MethodGet, "/ojs/v1/cron", nil)
	crons, _ := list.Body["crons"].([]any)
	found := false
	for _, c := range crons {
		if c.(map[string]any)["name"] == name {
			found = true
		}
	}
	if list.Status != http.StatusOK || !found {
		t.Fatalf("list: %d, %s missing", list.Status, name)
	}
	if r := do(t, http.MethodDelete, "/ojs/v1/cron/"+name, nil); r.Status != http.StatusOK || cronObj(t, r)["name"] != name || r.Body["deleted"] != true {
		t.Fatalf("delete: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/cron/"+name, nil); r.Status != http.StatusNotFound || r.errCode() != "not_found" {
		t.Fatalf("get deleted: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodDelete, "/ojs/v1/cron/"+name, nil); r.Status != http.StatusNotFound {
		t.Fatalf("delete twice: %d %s", r.Status, r.Raw)
	}
	// Drain what fired before the delete; nothing more comes.
	time.Sleep(2500 * time.Millisecond)
	for fetchOne(t, q) != nil {
	}
	time.Sleep(4 * time.Second)
	if j := fetchOne(t, q); j != nil {
		t.Fatalf("a deleted schedule fired: %v", j)
	}
}

// overlap_policy skip: while the first run is active, occurrences are
// skipped with cron.skipped events.
func TestCronSkipsWhileThePreviousRunIsActive(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t) + "-skip"
	name := "e2e-skip-" + q
	if r := do(t, http.MethodPost, "/ojs/v1/cron", map[string]any{"name": name, "cron": "* * * * * *", "type": "test.slow",
		"args": []any{}, "options": map[string]any{"queue": q, "visibility_timeout_ms": 600000}}); r.Status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.Status, r.Raw)
	}
	defer do(t, http.MethodDelete, "/ojs/v1/cron/"+name, nil)
	var first map[string]any
	for deadline := time.Now().Add(settle); first == nil && time.Now().Before(deadline); {
		if first = fetchOne(t, q); first == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if first == nil {
		t.Fatal("no first run")
	}
	evs := waitEvents(t, "types=cron.skipped&limit=1000", 1)
	skipped := 0
	for _, e := range evs {
		if e["subject"] == name {
			skipped++
			if d := e["data"].(map[string]any); d["reason"] != "overlap_skip" || d["active_job_id"] != first["id"] {
				t.Fatalf("cron.skipped: %v", e)
			}
		}
	}
	// A second skip: the sweeper's passes run about once a second but
	// pause a few seconds at each minute's turn, so wait for it rather
	// than for a fixed time.
	var c map[string]any
	for deadline := time.Now().Add(settle); ; time.Sleep(200 * time.Millisecond) {
		c = cronObj(t, do(t, http.MethodGet, "/ojs/v1/cron/"+name, nil))
		if num(c["skip_count"]) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if j := fetchOne(t, q); j != nil {
		t.Fatalf("an occurrence ran while the previous run was active: %v", j)
	}
	if num(c["run_count"]) != 1 || num(c["skip_count"]) < 2 {
		t.Fatalf("counters: run_count=%v skip_count=%v", c["run_count"], c["skip_count"])
	}
	// Finishing the run lets the next occurrence through.
	if r := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": first["id"], "result": nil}); r.Status != http.StatusOK {
		t.Fatalf("ack: %d %s", r.Status, r.Raw)
	}
	var next map[string]any
	for deadline := time.Now().Add(settle); next == nil && time.Now().Before(deadline); {
		if next = fetchOne(t, q); next == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if next == nil {
		t.Fatal("no run after the previous one finished")
	}
}

func TestCronRejectsBadSchedules(t *testing.T) {
	t.Parallel()
	for i, expr := range []string{"not a valid cron", "0 0 0 0 0 0 0", "99 25 32 13 8", "*/0 * * * *", ""} {
		r := do(t, http.MethodPost, "/ojs/v1/cron", map[string]any{"name": fmt.Sprintf("bad-%d", i), "expression": expr,
			"job_template": map[string]any{"type": "a.b", "args": []any{}}})
		if r.Status != http.StatusBadRequest || r.errCode() != "invalid_request" {
			t.Errorf("%q: %d %s", expr, r.Status, r.Raw)
		}
	}
	r := do(t, http.MethodPost, "/ojs/v1/cron", map[string]any{"name": "tz-bad", "cron": "@daily", "timezone": "EST", "type": "a.b"})
	if r.Status != http.StatusBadRequest {
		t.Errorf("timezone EST: %d %s", r.Status, r.Raw)
	}
	r = do(t, http.MethodPost, "/ojs/v1/cron", map[string]any{"name": "tz-tokyo-ok", "cron": "30 2 * * *", "timezone": "Asia/Tokyo", "type": "a.b"})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("Asia/Tokyo: %d %s", r.Status, r.Raw)
	}
	if next, _ := cronObj(t, r)["next_run_at"].(string); len(next) < 20 || next[11:16] != "17:30" {
		t.Errorf("02:30 Tokyo is 17:30 UTC; next_run_at = %q", next)
	}
	do(t, http.MethodDelete, "/ojs/v1/cron/tz-tokyo-ok", nil)
}
