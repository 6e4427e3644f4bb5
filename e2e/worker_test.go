package e2e

import (
	"net/http"
	"testing"
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

// The manifest claims level 1 and the capabilities served here.
func TestManifestIsTruthful(t *testing.T) {
	t.Parallel()
	m := do(t, http.MethodGet, "/ojs/manifest", nil).Body
	caps := m["capabilities"].(map[string]any)
	if num(m["conformance_level"]) != 4 || caps["events"] != true || caps["pause_resume"] != true || caps["queue_stats"] != true ||
		caps["cron_jobs"] != true || caps["unique_jobs"] != true || caps["rate_limiting"] != true || m["uniqueness_strength"] != "strong" {
		t.Fatalf("manifest: %v", m)
	}
	for path, want := range map[string]int{"/ojs/v1/events?limit=1": 200, "/ojs/v1/queues": 200, "/ojs/v1/admin/workers": 200, "/ojs/v1/cron": 200} {
		if r := do(t, http.MethodGet, path, nil); r.Status != want {
			t.Errorf("GET %s: %d, want %d", path, r.Status, want)
		}
	}
}
