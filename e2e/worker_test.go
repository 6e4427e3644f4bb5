package e2e

import (
	"net/http"
	"testing"
	"time"
)

// Heartbeats over HTTP: both request shapes, the operator's quiet
// directive, and the worker listing.
func TestWorkerHeartbeatDirectives(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	wid := "w-" + q
	j := push(t, map[string]any{"type": "w.job", "args": []any{}, "options": map[string]any{"queue": q}})
	do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": wid})
	// Protocol shape: active_jobs is a count, active_job_ids the list.
	r := do(t, http.MethodPost, "/ojs/v1/workers/heartbeat", map[string]any{"worker_id": wid, "state": "running", "active_jobs": 1,
		"active_job_ids": []string{j["id"].(string)}, "hostname": "h1", "queues": []string{q}})
	if r.Status != 200 || r.Body["state"] != "running" || len(r.Body["jobs_extended"].([]any)) != 1 {
		t.Fatalf("beat: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/admin/workers/"+wid+"/quiet", nil); r.Status != 200 {
		t.Fatalf("quiet: %d %s", r.Status, r.Raw)
	}
	// Binding shape: active_jobs is the list.
	r = do(t, http.MethodPost, "/ojs/v1/workers/heartbeat", map[string]any{"worker_id": wid, "active_jobs": []string{j["id"].(string)}})
	if r.Body["state"] != "quiet" {
		t.Fatalf("after quiet: %s", r.Raw)
	}
	found := false
	for _, x := range do(t, http.MethodGet, "/ojs/v1/admin/workers", nil).Body["items"].([]any) {
		w := x.(map[string]any)
		found = found || (w["id"] == wid && w["directive"] == "quiet" && w["hostname"] == "h1")
	}
	if !found {
		t.Error("worker not listed with its directive")
	}
	for _, bad := range []map[string]any{{"worker_id": wid, "active_jobs": "x"}, {"worker_id": wid, "state": "asleep"}, {"active_jobs": 1}} {
		if r := do(t, http.MethodPost, "/ojs/v1/workers/heartbeat", bad); r.Status != 400 {
			t.Errorf("%v: %d %s", bad, r.Status, r.Raw)
		}
	}
	if r := do(t, http.MethodPost, "/ojs/v1/admin/workers/"+wid+"/nap", nil); r.Status != 404 {
		t.Errorf("unknown directive route: %d", r.Status)
	}
}

// A pull worker's graceful shutdown (ojs-graceful-shutdown.md 5): it
// reports quiet and is assigned nothing more, FAILs its unfinished job with
// ShutdownError (retried even though marked non-retryable), sends its final
// heartbeat with terminate; the worker events tell the story.
func TestWorkerGracefulShutdown(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	wid := "w-shutdown-" + q
	ids := []string{}
	for range 2 {
		ids = append(ids, push(t, map[string]any{"type": "w.job", "args": []any{}, "options": map[string]any{"queue": q,
			"retry": map[string]any{"max_attempts": 3, "initial_interval": "PT0.1S", "jitter": false}}})["id"].(string))
	}
	beat := func(state string, active []string) response {
		r := do(t, http.MethodPost, "/ojs/v1/workers/heartbeat", map[string]any{"worker_id": wid, "state": state, "active_jobs": len(active),
			"active_job_ids": active, "queues": []string{q}, "concurrency": 4, "hostname": "h1", "pid": 42})
		if r.Status != 200 {
			t.Fatalf("beat %s: %d %s", state, r.Status, r.Raw)
		}
		return r
	}
	beat("running", []string{})
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": wid})
	jobs, _ := r.Body["jobs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("fetch while running: %s", r.Raw)
	}
	held := jobs[0].(map[string]any)["id"].(string)
	// Phase 1, quiet: no new jobs for this worker (another worker still gets them).
	if r := beat("quiet", []string{held}); r.Body["state"] != "quiet" {
		t.Fatalf("quiet beat answered %s", r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": wid}); len(r.Body["jobs"].([]any)) != 0 {
		t.Fatalf("a quiet worker was assigned a job: %s", r.Raw)
	}
	// Phase 3, stop: the unfinished job is failed with ShutdownError and retried.
	r = do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": held,
		"error": map[string]any{"type": "ShutdownError", "message": "grace period expired", "retryable": false}})
	if r.Status != 200 || r.Body["state"] != "retryable" {
		t.Fatalf("nack with ShutdownError: %d %s", r.Status, r.Raw)
	}
	if r := beat("terminate", []string{}); r.Body["state"] != "terminate" {
		t.Fatalf("final beat answered %s", r.Raw)
	}
	// Another worker picks both jobs up: nothing was lost.
	got := map[string]bool{}
	deadline := time.Now().Add(settle)
	for len(got) < 2 && time.Now().Before(deadline) {
		r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-next-" + q, "count": 2})
		for _, j := range r.Body["jobs"].([]any) {
			got[j.(map[string]any)["id"].(string)] = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !got[ids[0]] || !got[ids[1]] {
		t.Fatalf("the next worker got %v, want both of %v", got, ids)
	}
	evs := waitEvents(t, "types=worker.*&since="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)+"&limit=1000", 1)
	var mine []map[string]any
	for deadline := time.Now().Add(settle); ; {
		mine = mine[:0]
		for _, e := range evs {
			if e["subject"] == wid {
				mine = append(mine, e)
			}
		}
		if len(mine) >= 6 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
		evs = waitEvents(t, "types=worker.*&since="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)+"&limit=1000", 1)
	}
	if got := eventTypes(mine); got != "worker.started,worker.heartbeat,worker.heartbeat,worker.quiet,worker.heartbeat,worker.stopped" {
		t.Fatalf("worker events: %s", got)
	}
	if d := mine[0]["data"].(map[string]any); num(d["concurrency"]) != 4 || d["worker_id"] != wid {
		t.Errorf("worker.started: %v", d)
	}
	if d := mine[3]["data"].(map[string]any); num(d["active_jobs"]) != 1 {
		t.Errorf("worker.quiet: %v", d)
	}
	if d := mine[5]["data"].(map[string]any); d["reason"] != "shutdown" || d["uptime_ms"] == nil {
		t.Errorf("worker.stopped: %v", d)
	}
}

// The manifest claims level 1 and the capabilities served here.
func TestManifestIsTruthful(t *testing.T) {
	t.Parallel()
	m := do(t, http.MethodGet, "/ojs/manifest", nil).Body
	caps := m["capabilities"].(map[string]any)
	if num(m["conformance_level"]) != 4 || caps["events"] != true || caps["pause_resume"] != true || caps["queue_stats"] != true ||
		caps["cron_jobs"] != true || caps["unique_jobs"] != true || caps["rate_limiting"] != true || m["uniqueness_strength"] != "strong" ||
		caps["dead_letter_retention"] != true || caps["graceful_shutdown"] != true || caps["fetch_wait"] != true ||
		num(m["limits"].(map[string]any)["max_fetch_wait_ms"]) != 20000 {
		t.Fatalf("manifest: %v", m)
	}
	for path, want := range map[string]int{"/ojs/v1/events?limit=1": 200, "/ojs/v1/queues": 200, "/ojs/v1/admin/workers": 200, "/ojs/v1/cron": 200,
		"/ojs/v1/events?types=dead_letter.pruned,worker.stopped&limit=1": 200} {
		if r := do(t, http.MethodGet, path, nil); r.Status != want {
			t.Errorf("GET %s: %d, want %d", path, r.Status, want)
		}
	}
}
