package e2e

import (
	"net/http"
	"testing"
	"time"
)

func queueObj(t *testing.T, r response) map[string]any {
	t.Helper()
	q, ok := r.Body["queue"].(map[string]any)
	if r.Status != 200 || !ok {
		t.Fatalf("queue response %d: %s", r.Status, r.Raw)
	}
	return q
}

// Pull mode: a paused queue accepts jobs but is not fetched; resumed, its
// jobs are fetched; stats count by state; pause and resume are events.
func TestQueuePauseResumeAndStats(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	for range 3 {
		push(t, map[string]any{"type": "q.job", "args": []any{}, "options": map[string]any{"queue": q}})
	}
	stats := func() map[string]any { return queueObj(t, do(t, http.MethodGet, "/ojs/v1/queues/"+q+"/stats", nil)) }
	if s := stats(); num(s["available"]) != 3 || num(s["active"]) != 0 || num(s["completed"]) != 0 || s["name"] != q {
		t.Fatalf("stats: %v", s)
	}
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}})
	id := r.Body["jobs"].([]any)[0].(map[string]any)["id"]
	if s := stats(); num(s["available"]) != 2 || num(s["active"]) != 1 {
		t.Fatalf("stats after fetch: %v", s)
	}
	do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": id})
	deadline := time.Now().Add(settle)
	for s := stats(); num(s["completed"]) != 1 || num(s["active"]) != 0; s = stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats after ack: %v", s)
		}
		time.Sleep(200 * time.Millisecond)
	}

	p := queueObj(t, do(t, http.MethodPost, "/ojs/v1/queues/"+q+"/pause", map[string]any{}))
	if p["paused"] != true || p["status"] != "paused" || p["name"] != q {
		t.Fatalf("pause: %v", p)
	}
	if j := push(t, map[string]any{"type": "q.job", "args": []any{}, "options": map[string]any{"queue": q}}); j["state"] != "available" {
		t.Fatalf("enqueue on a paused queue: %v", j)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 10}); len(r.Body["jobs"].([]any)) != 0 {
		t.Fatalf("fetched from a paused queue: %s", r.Raw)
	}
	found := false
	for _, x := range do(t, http.MethodGet, "/ojs/v1/queues", nil).Body["queues"].([]any) {
		if x.(map[string]any)["name"] == q {
			found = x.(map[string]any)["status"] == "paused"
		}
	}
	if !found {
		t.Error("queue list does not show the queue paused")
	}
	if s := stats(); s["paused"] != true || num(s["available"]) != 3 {
		t.Errorf("stats while paused: %v", s)
	}
	rs := queueObj(t, do(t, http.MethodPost, "/ojs/v1/queues/"+q+"/resume", map[string]any{}))
	if rs["paused"] != false || rs["status"] != "active" {
		t.Fatalf("resume: %v", rs)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 10}); len(r.Body["jobs"].([]any)) != 3 {
		t.Fatalf("after resume: %s", r.Raw)
	}
	if got := eventTypes(waitEvents(t, "types=queue.*&queues="+q, 2)); got != "queue.paused,queue.resumed" {
		t.Errorf("queue events %s", got)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/queues/Bad%20Queue/pause", nil); r.Status != 400 {
		t.Errorf("bad queue name: %d %s", r.Status, r.Raw)
	}
}

// Push mode: jobs of a paused push-mode queue do not run, and run once it
// is resumed.
func TestQueuePauseInPushMode(t *testing.T) {
	// Not parallel: it pauses the shared push-mode queue.
	queueObj(t, do(t, http.MethodPost, "/ojs/v1/queues/"+pushQueue+"/pause", nil))
	resumed := false
	defer func() {
		if !resumed {
			do(t, http.MethodPost, "/ojs/v1/queues/"+pushQueue+"/resume", nil)
		}
	}()
	time.Sleep(1200 * time.Millisecond) // other instances' pause caches expire
	j := push(t, map[string]any{"type": "test.echo", "args": []any{"paused"}, "options": map[string]any{"queue": pushQueue}})
	id := j["id"].(string)
	time.Sleep(3 * time.Second)
	if cur := do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil).job(t); cur["state"] != "available" {
		t.Fatalf("a job of a paused push-mode queue ran: %v", cur)
	}
	queueObj(t, do(t, http.MethodPost, "/ojs/v1/queues/"+pushQueue+"/resume", nil))
	resumed = true
	waitFor(t, id, "completed")
}
