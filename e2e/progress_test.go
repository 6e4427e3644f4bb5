package e2e

import (
	"net/http"
	"testing"
)

// TestProgressOverHTTP: the progress extension over the local stack. GET
// answers null before any report; PUT (the extension's shape) clamps and
// is read back; POST /workers/progress (the Go SDK's shape, a percentage)
// is kept; a lower fraction does not move it back; each report is a
// job.progress event; the completed job (ACKed on /jobs/{id}/ack) shows 1.
func TestProgressOverHTTP(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	id := push(t, map[string]any{"type": "p.t", "args": []any{}, "options": map[string]any{"queue": q}})["id"].(string)
	path := "/ojs/v1/jobs/" + id + "/progress"
	if r := do(t, http.MethodGet, path, nil); r.Status != http.StatusOK || r.Body["progress"] != nil || r.Body["data"] != nil || r.Body["state"] != "available" {
		t.Fatalf("progress before any report: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-p"}); r.Status != http.StatusOK {
		t.Fatalf("fetch: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPut, path, map[string]any{"progress": 0.4, "message": "rows", "data": map[string]any{"rows": 4}}); r.Status != http.StatusOK || r.Body["progress"] != 0.4 {
		t.Fatalf("PUT progress: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/progress", map[string]any{"job_id": id, "percentage": 70, "message": "sdk"}); r.Status != http.StatusOK {
		t.Fatalf("POST workers/progress: %d %s", r.Status, r.Raw)
	}
	do(t, http.MethodPut, path, map[string]any{"progress": 0.1, "message": "lower"})
	if r := do(t, http.MethodGet, path, nil); r.Body["progress"] != 0.7 || r.Body["message"] != "lower" || r.Body["updated_at"] == nil {
		t.Fatalf("progress after a lower report: %s", r.Raw)
	}
	if r := do(t, http.MethodPut, path, map[string]any{"data": []any{1}}); r.Status != http.StatusBadRequest {
		t.Fatalf("data that is not an object: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/jobs/"+id+"/ack", map[string]any{"job_id": "019539a4-b68c-7def-8000-1a2b3c4d5e6f"}); r.Status != http.StatusBadRequest {
		t.Fatalf("ack with a job_id other than the path's: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/jobs/"+id+"/ack", map[string]any{"worker_id": "w-p"}); r.Status != http.StatusOK {
		t.Fatalf("ack: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodGet, path, nil); r.Body["progress"] != 1.0 || r.Body["state"] != "completed" {
		t.Fatalf("completed job's progress: %s", r.Raw)
	}
	evs := waitEvents(t, "job_id="+id, 6) // enqueued, started, 3 progress, completed
	if got := eventTypes(evs); got != "job.enqueued,job.started,job.progress,job.progress,job.progress,job.completed" {
		t.Fatalf("events in order: %s", got)
	}
}
