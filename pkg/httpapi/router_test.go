package httpapi_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Routing on net/http ServeMux patterns keeps the OJS answers: 404 and
// 405 (with Allow) in the OJS error shape, HEAD is not GET, an unclean
// path is not redirected.
func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	h := newHarness("", slog.LevelInfo)
	for _, c := range []struct {
		method, target string
		status         int
		allow          string
	}{
		{"PATCH", "/ojs/v1/admin/queues/q1", 405, "GET"},
		{"GET", "/ojs/v1/admin/jobs/bulk/retry", 405, "POST"},
		{"DELETE", "/ojs/v1/admin/dead-letter", 0, ""},
		{"PUT", "/ojs/v1/admin/dead-letter/stats", 405, "GET, DELETE"}, // DELETE: stats is also a valid {id}
		{"HEAD", "/ojs/v1/health", 405, "GET"},
		{"POST", "/metrics", 405, "GET"},
		{"GET", "//ojs//v1//health", 404, ""},
		{"GET", "/ojs/v1/jobs/", 404, ""},
		{"GET", "/ojs/v1/admin/nothing", 404, ""},
		{"POST", "/ojs/v1/admin/jobs/bulk/explode", 404, ""},
		{"GET", "/ojs/v1/admin/../health", 404, ""},
	} {
		rec := h.serve(c.method, c.target, nil)
		if c.status == 0 {
			h.db.reset()
			h.log.take()
			continue
		}
		h.checkOutcome(t, c.method+" "+c.target, rec)
		if rec.Code != c.status || rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want %d %q: %s", c.method, c.target, rec.Code, rec.Header().Get("Allow"), c.status, c.allow, rec.Body)
		}
	}
}

// The admin bulk operations refuse a request without confirm before any
// storage call (ojs-admin-api.md 4 and 8).
func TestAdminBulkNeedsConfirm(t *testing.T) {
	t.Parallel()
	h := newHarness("", slog.LevelInfo)
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/ojs/v1/admin/jobs/bulk/retry", `{"filter":{"state":"discarded"},"confirm":false}`},
		{"POST", "/ojs/v1/admin/jobs/bulk/cancel", `{"filter":{}}`},
		{"POST", "/ojs/v1/admin/jobs/bulk/delete", `{}`},
		{"DELETE", "/ojs/v1/admin/queues/q1/jobs", `{"states":["completed"]}`},
		{"DELETE", "/ojs/v1/admin/dead-letter", `{"older_than":"2026-01-01T00:00:00Z"}`},
	} {
		rec := h.serve(c.method, c.target, []byte(c.body))
		h.checkOutcome(t, c.method+" "+c.target, rec)
		var env errorEnvelope
		_ = json.Unmarshal(rec.Body.Bytes(), &env)
		if rec.Code != 400 || env.Error == nil || !strings.Contains(env.Error.Message, "confirm") {
			t.Errorf("%s %s: %d %s", c.method, c.target, rec.Code, rec.Body)
		}
	}
}

// An admin job route given an id that is not a job id answers 400 naming
// the id, as /ojs/v1/jobs/{id} does, not a backend error.
func TestAdminJobRoutesRefuseBadIDs(t *testing.T) {
	t.Parallel()
	h := newHarness("", slog.LevelInfo)
	for _, c := range []struct{ method, target string }{
		{"GET", "/ojs/v1/admin/jobs/not-a-uuid"},
		{"POST", "/ojs/v1/admin/jobs/not-a-uuid/retry"},
		{"POST", "/ojs/v1/admin/jobs/not-a-uuid/cancel"},
		{"GET", "/ojs/v1/admin/jobs/0190a0b0-0000-4000-8000-000000000000"}, // a UUIDv4
	} {
		rec := h.serve(c.method, c.target, nil)
		h.checkOutcome(t, c.method+" "+c.target, rec)
		var env errorEnvelope
		_ = json.Unmarshal(rec.Body.Bytes(), &env)
		if rec.Code != 400 || env.Error == nil || env.Error.Code != "invalid_request" {
			t.Errorf("%s %s: %d %s", c.method, c.target, rec.Code, rec.Body)
		}
	}
}

// /metrics answers the Prometheus text format as exactly text/plain;
// /ready and /health report the backend.
func TestObservabilityEndpoints(t *testing.T) {
	t.Parallel()
	h := newHarness("", slog.LevelInfo)
	db := &refusingDB{}
	st := store.New(db, "t")
	qsvc := queue.NewService(st, queue.Config{})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	srv := httpapi.New(httpapi.Services{Producer: svc, Worker: svc, Queues: qsvc, Progress: svc}, st, nil, httpapi.Config{Logger: slog.New(slog.DiscardHandler)})
	for range 2 {
		srv.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/ojs/manifest", nil))
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/plain" || !strings.Contains(body, `ojs_http_requests_total{route="GET /ojs/manifest",code="200"} 2`) ||
		!strings.Contains(body, "# TYPE ojs_http_request_duration_seconds histogram") || rec.Header().Get("X-Request-Id") == "" {
		t.Errorf("metrics: %d %v\n%s", rec.Code, rec.Header(), body)
	}
	for _, p := range []string{"/ready", "/health"} {
		rec := h.serve("GET", p, nil)
		h.checkOutcome(t, p, rec, 503)
		if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"unhealthy"`) {
			t.Errorf("%s with the table unreachable: %d %s", p, rec.Code, rec.Body)
		}
	}
}

// The console asks for the token with a login page and a cookie, and
// refuses cross-site form posts.
func TestConsoleAuth(t *testing.T) {
	t.Parallel()
	h := newHarness(testToken, slog.LevelInfo)
	rec := h.serve("GET", "/ojs/admin/workers", nil)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ojs/admin/login?next=%2Fojs%2Fadmin%2Fworkers" {
		t.Fatalf("unauthenticated page: %d %v", rec.Code, rec.Header())
	}
	if calls, _ := h.db.reset(); len(calls) > 0 {
		t.Fatalf("storage read before authentication: %v", calls)
	}
	if rec := h.serve("GET", "/ojs/admin/login", nil); rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") ||
		!strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("login page: %d %v", rec.Code, rec.Header())
	}
	form := "application/x-www-form-urlencoded"
	if rec := h.serve("POST", "/ojs/admin/login", []byte("token=wrong&next=/ojs/admin/"), "Content-Type", form); rec.Code != 401 || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("wrong token: %d %v", rec.Code, rec.Result().Cookies())
	}
	rec = h.serve("POST", "/ojs/admin/login", []byte("token="+testToken+"&next=//evil.example/"), "Content-Type", form)
	ck := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ojs/admin/" || len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d %v %v", rec.Code, rec.Header(), ck)
	}
	cookie := ck[0].Name + "=" + ck[0].Value
	// Authenticated by the cookie: the page is served (here, an error page:
	// the test's storage refuses every call).
	if rec := h.serve("GET", "/ojs/admin/workers", nil, "Cookie", cookie); rec.Code != 500 || !strings.Contains(rec.Body.String(), "The backend failed") ||
		strings.Contains(rec.Body.String(), "refusingDB") {
		t.Fatalf("with the cookie: %d %s", rec.Code, rec.Body)
	}
	h.db.reset()
	h.log.take()
	if rec := h.serve("POST", "/ojs/admin/queues/q1/pause", nil, "Cookie", cookie, "Sec-Fetch-Site", "cross-site"); rec.Code != 403 {
		t.Fatalf("cross-site post: %d", rec.Code)
	}
	if calls, _ := h.db.reset(); len(calls) > 0 {
		t.Fatalf("a cross-site post reached storage: %v", calls)
	}
}
