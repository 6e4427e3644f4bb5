package httpapi_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

const testToken = "t0ken-Zq8xR2pLm4"

// Every route, known or not, with any method, asks for the token before
// anything else: no routing answer (404, 405), no validation and no
// storage call for a caller without it.
func TestAuthComesFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(testToken, slog.LevelInfo)
	requests := []struct {
		method, target, body string
		hdr                  []string
	}{
		{"GET", "/ojs/manifest", "", nil},
		{"GET", "/ojs/v1/health", "", nil},
		{"POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, nil},
		{"POST", "/ojs/v1/jobs/batch", `{"jobs":[]}`, nil},
		{"GET", "/ojs/v1/jobs/" + validID, "", nil},
		{"DELETE", "/ojs/v1/jobs/" + validID, "", nil},
		{"POST", "/ojs/v1/workers/fetch", `{"queues":["a"]}`, nil},
		{"POST", "/ojs/v1/workers/ack", `{"job_id":"` + validID + `"}`, nil},
		{"POST", "/ojs/v1/workers/nack", `{}`, nil},
		{"POST", "/ojs/v1/workers/heartbeat", `{}`, nil},
		{"GET", "/ojs/v1/admin/workers", "", nil},
		{"GET", "/ojs/v1/events?limit=0", "", nil},
		{"GET", "/ojs/v1/dead-letter", "", nil},
		{"POST", "/ojs/v1/queues/default/pause", "", nil},
		{"POST", "/ojs/v1/workflows", `{`, nil},
		{"GET", "/ojs/v1/no-such-route", "", nil},
		{"GET", "/ojs/v1/admin/stats", "", nil},
		{"GET", "/ojs/v1/admin/jobs?state=available", "", nil},
		{"POST", "/ojs/v1/admin/jobs/bulk/retry", `{"confirm":true}`, nil},
		{"DELETE", "/ojs/v1/admin/dead-letter/" + validID, "", nil},
		{"GET", "/metrics", "", nil},
		{"GET", "/ready", "", nil},
		{"GET", "/health", "", nil},
		{"GET", "/", "", nil},
		{"PUT", "/ojs/v1/jobs", `{}`, nil},
		{"POST", "/ojs/v1/jobs", `{}`, []string{"Content-Type", "text/plain"}},
		{"GET", "/ojs/v1/health", "", []string{"OJS-Version", "9.0"}},
		{"POST", "/ojs/v1/jobs", strings.Repeat("x", 5<<20), nil},
	}
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Bearer " + testToken + " ", "bearer " + testToken,
		"Basic " + testToken, "Bearer " + testToken[:len(testToken)-1], "Bearer " + testToken + "x", testToken} {
		for _, rq := range requests {
			hdr := append([]string{}, rq.hdr...)
			if auth != "" {
				hdr = append(hdr, "Authorization", auth)
			}
			var body []byte
			if rq.body != "" {
				body = []byte(rq.body)
			}
			rec := h.serve(rq.method, rq.target, body, hdr...)
			what := rq.method + " " + rq.target + " with Authorization " + auth
			calls := h.checkOutcome(t, what, rec)
			var env errorEnvelope
			_ = json.Unmarshal(rec.Body.Bytes(), &env)
			if rec.Code != http.StatusUnauthorized || env.Error == nil || env.Error.Code != "x_unauthenticated" || env.Error.Type != "unauthenticated" || len(calls) > 0 {
				t.Fatalf("%s: %d %s (storage calls %v)", what, rec.Code, rec.Body.Bytes(), calls)
			}
			if rec.Header().Get("WWW-Authenticate") != `Bearer realm="ojs"` || rec.Header().Get("Allow") != "" {
				t.Fatalf("%s: headers %v", what, rec.Header())
			}
		}
	}
	// With the token, the same requests get their usual answers.
	for _, rq := range requests {
		hdr := append([]string{"Authorization", "Bearer " + testToken}, rq.hdr...)
		var body []byte
		if rq.body != "" {
			body = []byte(rq.body)
		}
		rec := h.serve(rq.method, rq.target, body, hdr...)
		h.checkOutcome(t, rq.method+" "+rq.target, rec, http.StatusOK, http.StatusServiceUnavailable)
		if rec.Code == http.StatusUnauthorized {
			t.Fatalf("%s %s with the token: 401", rq.method, rq.target)
		}
	}
}

// Without a configured token no route asks for one.
func TestNoTokenConfiguredMeansNoAuth(t *testing.T) {
	t.Parallel()
	h := newHarness("", slog.LevelInfo)
	rec := h.serve("GET", "/ojs/manifest", nil, "Authorization", "Bearer anything")
	if rec.Code != http.StatusOK {
		t.Fatalf("manifest: %d %s", rec.Code, rec.Body.Bytes())
	}
}

// The access log and the error log carry the request id, method, route,
// status and duration (and job ids, types, queues), never a body: no
// args, meta, result, error message or token. Served at debug level, over
// storage that fails, so the error paths log too.
func TestLogsHoldNoArgsResultsOrTokens(t *testing.T) {
	t.Parallel()
	const secret = "S3CRET-payload-7f3a"
	h := newHarness(secret+"-token", slog.LevelDebug)
	auth := []string{"Authorization", "Bearer " + secret + "-token", "X-Request-Id", "trace-1"}
	for _, rq := range []struct{ method, target, body string }{
		{"POST", "/ojs/v1/jobs", `{"type":"a.b","args":["` + secret + `"],"meta":{"k":"` + secret + `"},"options":{"tags":["` + secret + `"]}}`},
		{"POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":["` + secret + `"]}]}`},
		{"POST", "/ojs/v1/workers/ack", `{"job_id":"` + validID + `","result":{"k":"` + secret + `"}}`},
		{"POST", "/ojs/v1/workers/nack", `{"job_id":"` + validID + `","error":{"message":"` + secret + `","backtrace":["` + secret + `"],"details":{"k":"` + secret + `"}}}`},
		{"POST", "/ojs/v1/workflows", `{"type":"chain","name":"n","steps":[{"type":"a.b","args":["` + secret + `"]}]}`},
		{"POST", "/ojs/v1/jobs", `{"type":"` + secret + `","args":[]}`},
		{"POST", "/ojs/v1/dead-letter/" + validID + "/retry", `{"override":{"meta":{"k":"` + secret + `"}}}`},
	} {
		rec := h.serve(rq.method, rq.target, []byte(rq.body), auth...)
		if rec.Code == http.StatusUnauthorized {
			t.Fatalf("%s %s: 401", rq.method, rq.target)
		}
		h.db.reset()
	}
	// Without the token: the wrong token sent is not logged either.
	h.serve("GET", "/ojs/v1/health", nil, "Authorization", "Bearer "+secret+"-guess")
	logs := h.log.take()
	if strings.Contains(logs, secret) {
		t.Fatalf("the logs hold the secret:\n%s", logs)
	}
	for _, want := range []string{`"msg":"http request"`, `"request_id":"trace-1"`, `"route":"POST /ojs/v1/jobs"`, `"status":500`, `"status":401`, `"msg":"request failed"`} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the logs lack %s:\n%s", want, logs)
		}
	}
}
