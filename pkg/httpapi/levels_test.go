package httpapi_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
)

// Every route has a level, AllRoutes (what infra derives API Gateway's
// scopes and IAM policies from) is the table a fully configured server
// serves, and the levels below admin are exactly these.
func TestEveryRouteHasALevel(t *testing.T) {
	t.Parallel()
	all := httpapi.AllRoutes()
	var keys []string
	below := map[httpapi.Level][]string{}
	for _, rt := range all {
		k := rt.Method + " " + rt.Pattern
		keys = append(keys, k)
		if rt.Level != httpapi.LevelAny && !slices.Contains(httpapi.Levels, rt.Level) {
			t.Errorf("%s: level %q", k, rt.Level)
		}
		if rt.Level != httpapi.LevelAdmin {
			below[rt.Level] = append(below[rt.Level], k)
		}
	}
	if served := liveServer(t).Routes(); !slices.Equal(keys, served) {
		t.Fatalf("AllRoutes:\n%v\nserved:\n%v", keys, served)
	}
	want := map[httpapi.Level][]string{
		httpapi.LevelAny: {"GET /health", "GET /ojs/manifest", "GET /ojs/v1/health", "GET /ready"},
		httpapi.LevelProducer: {"DELETE /ojs/v1/jobs/{id}", "DELETE /ojs/v1/jobs/{id}/checkpoint", "DELETE /ojs/v1/workflows/{id}", "GET /ojs/v1/jobs/{id}", "GET /ojs/v1/jobs/{id}/checkpoint", "GET /ojs/v1/jobs/{id}/progress", "GET /ojs/v1/rate-limits", "GET /ojs/v1/rate-limits/{key}", "GET /ojs/v1/workflows/{id}", "GET /ojs/v1/workflows/{id}/progress",
			"POST /ojs/v1/jobs", "POST /ojs/v1/jobs/batch", "POST /ojs/v1/jobs/{id}/activate", "POST /ojs/v1/workflows"},
		httpapi.LevelWorker: {"GET /ojs/v1/workers/{id}/health", "POST /ojs/v1/jobs/{id}/ack", "POST /ojs/v1/jobs/{id}/checkpoint", "POST /ojs/v1/jobs/{id}/nack", "POST /ojs/v1/workers/ack", "POST /ojs/v1/workers/beat",
			"POST /ojs/v1/workers/fetch", "POST /ojs/v1/workers/heartbeat", "POST /ojs/v1/workers/nack", "POST /ojs/v1/workers/progress",
			"PUT /ojs/v1/jobs/{id}/checkpoint", "PUT /ojs/v1/jobs/{id}/progress"},
	}
	for lv, w := range want {
		if !slices.Equal(below[lv], w) {
			t.Errorf("%s routes: %v, want %v", lv, below[lv], w)
		}
	}
}

// With tokens per level, every route answers a token whose level does not
// allow it 403 permission_denied before any storage call, and lets the
// others through; an unknown token is a 401. The admin token and
// AuthToken may call everything.
func TestLevelsEnforced(t *testing.T) {
	t.Parallel()
	h := newHarness("full-access", slog.LevelInfo, "producer:p-tok", "worker:w-tok", "admin:a-tok", "producer:p-tok2")
	tokens := map[string]httpapi.Level{"p-tok": httpapi.LevelProducer, "p-tok2": httpapi.LevelProducer, "w-tok": httpapi.LevelWorker, "a-tok": httpapi.LevelAdmin}
	for _, rt := range h.srv.RouteTable() {
		target := strings.NewReplacer("{id}", validID, "{name}", "q1", "{file}", "console.css", "{$}", "").Replace(rt.Pattern)
		if strings.HasPrefix(target, httpapi.ConsolePrefix) || target+"/" == httpapi.ConsolePrefix {
			continue // the console checks AuthToken itself (its own tests)
		}
		for tok, lv := range tokens {
			what := rt.Method + " " + target + " as " + string(lv)
			rec := h.serve(rt.Method, target, []byte(`{}`), "Authorization", "Bearer "+tok)
			if lv.Allows(rt.Level) {
				h.db.reset()
				h.log.take()
				if rec.Code == http.StatusForbidden || rec.Code == http.StatusUnauthorized {
					t.Errorf("%s: %d %s", what, rec.Code, rec.Body)
				}
				continue
			}
			h.checkOutcome(t, what, rec)
			var env errorEnvelope
			_ = json.Unmarshal(rec.Body.Bytes(), &env)
			if rec.Code != http.StatusForbidden || env.Error.Code != "x_permission_denied" || env.Error.Details["required_level"] != string(rt.Level) {
				t.Errorf("%s: %d %s", what, rec.Code, rec.Body)
			}
		}
	}
	for _, rq := range [][2]string{{"DELETE", "/ojs/v1/dead-letter"}, {"DELETE", "/ojs/v1/admin/dead-letter"}} {
		if rec := h.serve(rq[0], rq[1], nil, "Authorization", "Bearer full-access"); rec.Code == http.StatusForbidden {
			t.Errorf("%s with AuthToken: %d", rq, rec.Code)
		}
		if rec := h.serve(rq[0], rq[1], nil, "Authorization", "Bearer p-tok3"); rec.Code != http.StatusUnauthorized {
			t.Errorf("%s with an unknown token: %d", rq, rec.Code)
		}
	}
	h.db.reset()
	h.log.take()
	if _, err := httpapi.ParseTokens("root:x"); err == nil {
		t.Error("ParseTokens accepts an unknown level")
	}
}
