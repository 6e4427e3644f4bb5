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
