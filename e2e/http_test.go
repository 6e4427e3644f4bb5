package e2e

import (
	"net/http"
	"strings"
	"testing"
)

func TestHealthManifestAndHeaders(t *testing.T) {
	t.Parallel()
	r := do(t, http.MethodGet, "/ojs/v1/health", nil)
	if r.Status != 200 || r.Body["status"] != "ok" {
		t.Fatalf("health: %d %s", r.Status, r.Raw)
	}
	if r.Header.Get("Content-Type") != "application/openjobspec+json" || r.Header.Get("OJS-Version") != "1.0" || !strings.HasPrefix(r.Header.Get("X-Request-Id"), "req_") {
		t.Fatalf("headers: %v", r.Header)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/health", nil, "X-Request-Id", "my-trace-1"); r.Header.Get("X-Request-Id") != "my-trace-1" {
		t.Fatal("client request id not echoed")
	}
	m := do(t, http.MethodGet, "/ojs/manifest", nil)
	if m.Status != 200 || m.Body["specversion"] != "1.0" || m.Body["backend"] != "dynamodb" {
		t.Fatalf("manifest: %s", m.Raw)
	}
}

// TestBadInput sends malformed and hostile requests and checks the status,
// the OJS error code, and that nothing was written.
func TestBadInput(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	const fixedID = "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"
	cases := []struct {
		name, method, path, body, ctype string
		status                          int
		code                            string
	}{
		{"malformed json", "POST", "/ojs/v1/jobs", `{"type":`, "", 400, "invalid_payload"},
		{"empty body", "POST", "/ojs/v1/jobs", ``, "", 400, "invalid_payload"},
		{"array body", "POST", "/ojs/v1/jobs", `[1,2]`, "", 400, "invalid_request"},
		{"wrong content type", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, "text/plain", 400, "invalid_request"},
		{"missing type", "POST", "/ojs/v1/jobs", `{"args":[],"options":{"queue":"` + q + `"}}`, "", 400, "invalid_request"},
		{"args not array", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":"x","options":{"queue":"` + q + `"}}`, "", 400, "invalid_request"},
		{"bad queue", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"Bad Queue"}}`, "", 400, "invalid_request"},
		{"bad retry", "POST", "/ojs/v1/jobs", `{"id":"` + fixedID + `","type":"a.b","args":[],"options":{"retry":{"max_attempts":-1}}}`, "", 422, "validation_error"},
		{"huge args", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":["` + strings.Repeat("x", 300<<10) + `"]}`, "", 413, "payload_too_large"},
		{"huge body", "POST", "/ojs/v1/jobs/batch", `{"jobs":["` + strings.Repeat("x", 5<<20) + `"]}`, "", 413, "payload_too_large"},
		{"unknown job", "GET", "/ojs/v1/jobs/" + fixedID, "", "", 404, "not_found"},
		{"bad job id", "GET", "/ojs/v1/jobs/not-a-uuid", "", "", 400, "invalid_request"},
		{"unknown route", "GET", "/ojs/v1/nothing-here", "", "", 404, "not_found"},
		{"wrong method", "PUT", "/ojs/v1/jobs", `{}`, "", 405, "method_not_allowed"},
		{"fetch without queues", "POST", "/ojs/v1/workers/fetch", `{}`, "", 400, "invalid_request"},
		{"fetch bad count", "POST", "/ojs/v1/workers/fetch", `{"queues":["a"],"count":"many"}`, "", 400, "invalid_request"},
		{"ack unknown", "POST", "/ojs/v1/workers/ack", `{"job_id":"` + fixedID + `"}`, "", 404, "not_found"},
		{"nack without error", "POST", "/ojs/v1/workers/nack", `{"job_id":"` + fixedID + `"}`, "", 400, "invalid_request"},
		{"heartbeat without worker", "POST", "/ojs/v1/workers/heartbeat", `{"active_jobs":[]}`, "", 400, "invalid_request"},
		{"unsupported version", "GET", "/ojs/v1/health", "", "", 422, "unsupported"},
	}
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var body any
			if c.body != "" || c.method == "POST" {
				body = c.body
			}
			hdr := []string{}
			if c.ctype != "" {
				hdr = append(hdr, "Content-Type", c.ctype)
			}
			if c.name == "unsupported version" {
				hdr = append(hdr, "OJS-Version", "2.0")
			}
			r := do(t, c.method, c.path, body, hdr...)
			if r.Status != c.status || r.errCode() != c.code {
				t.Fatalf("got %d %q, want %d %q: %.300s", r.Status, r.errCode(), c.status, c.code, r.Raw)
			}
			e, _ := r.Body["error"].(map[string]any)
			if e["message"] == "" || e["request_id"] == "" || e["retryable"] != false {
				t.Fatalf("error shape: %s", r.Raw)
			}
		})
	}
	t.Cleanup(func() {
		// Nothing above may have written a job.
		if r := do(t, http.MethodGet, "/ojs/v1/jobs/"+fixedID, nil); r.Status != 404 {
			t.Errorf("a rejected request left job %s behind", fixedID)
		}
		if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}}); len(r.Body["jobs"].([]any)) != 0 {
			t.Errorf("a rejected request enqueued a job in %s", q)
		}
	})
}
