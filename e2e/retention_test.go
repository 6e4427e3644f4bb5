package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestResultRetentionOverHTTP: a PUSH with result_ttl echoes it and a bad
// one is a 400 naming it; a result of 1 MiB as sent is ACKed and read back
// whole with result_stored_at, result_expires_at (result_ttl after it) and
// result_size_bytes (ojs-results.md 6.2); the manifest names the maximum.
func TestResultRetentionOverHTTP(t *testing.T) {
	if r := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "r.t", "args": []any{}, "result_ttl": -2}); r.Status != http.StatusBadRequest ||
		!strings.Contains(string(r.Raw), "result_ttl") {
		t.Fatalf("result_ttl -2: %d %.300s", r.Status, r.Raw)
	}
	q := uniqueQueue(t)
	j := push(t, map[string]any{"type": "r.t", "args": []any{}, "queue": q, "result_ttl": 3600})
	if j["result_ttl"] != 3600.0 {
		t.Fatalf("result_ttl not echoed: %v", j["result_ttl"])
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w"}); r.Status != http.StatusOK {
		t.Fatalf("fetch: %d %.200s", r.Status, r.Raw)
	}
	result := strings.Repeat("0123456789abcdef", (1<<20-2)/16)
	if a := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": j["id"], "result": result}); a.Status != http.StatusOK {
		t.Fatalf("ack of 1 MiB: %d %.200s", a.Status, a.Raw)
	}
	got := do(t, http.MethodGet, "/ojs/v1/jobs/"+j["id"].(string), nil).job(t)
	stored, _ := time.Parse(time.RFC3339, got["result_stored_at"].(string))
	expires, _ := time.Parse(time.RFC3339, got["result_expires_at"].(string))
	if got["result"] != result || got["result_size_bytes"] != float64(len(result)+2) || got["result_stored_at"] != got["completed_at"] || expires.Sub(stored) != time.Hour {
		t.Fatalf("completed job: size %v stored %v expires %v", got["result_size_bytes"], got["result_stored_at"], got["result_expires_at"])
	}
	m := do(t, http.MethodGet, "/ojs/manifest", nil)
	if limits, _ := m.Body["limits"].(map[string]any); limits["max_result_ttl"] != 315360000.0 || limits["max_result_bytes"] != float64(1<<20) {
		t.Fatalf("manifest limits: %v", m.Body["limits"])
	}
}
