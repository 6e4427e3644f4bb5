package e2e

import (
	"context"
	"net/http"
	"testing"

	"github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// TestPermissionLevels runs a second local stack told to enforce the
// permission levels (OJS_AUTH_TOKENS, a token per level, as the JWT scopes
// of a deployed stage do): a producer or a worker cannot purge the dead
// letter queue (403 permission_denied, nothing purged), an admin can;
// a producer pushes and reads its job but cannot fetch, a worker fetches
// but cannot push. A deployment's levels are its authorizer's (the
// template tests, infra/construct/permissions_test.go).
func TestPermissionLevels(t *testing.T) {
	if rt == nil {
		t.Skip("starts its own local stack; against a deployment the authorizer enforces the levels")
	}
	cfg := rtConfig
	cfg.Env.Prefix += "-levels"
	cfg.Env.Queues = nil // pull mode only: no SQS queues shared with the suite's stack
	cfg.Table += "-levels"
	cfg.LogDir = t.TempDir()
	cfg.Concurrency = 1
	cfg.ExtraEnv = append(cfg.ExtraEnv, topology.EnvAuthTokens+"=producer:p-tok,worker:w-tok,admin:a-tok")
	scoped, err := localrt.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer scoped.Stop()
	// Not parallel, so no other test is sending: the suite's client can
	// point at the scoped stack, as admin unless a request says otherwise.
	defer func(u, tok string) { baseURL, authToken = u, tok }(baseURL, authToken)
	baseURL, authToken = scoped.URL(), "a-tok"
	as := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

	q := uniqueQueue(t)
	id := discardPull(t, q)
	for _, tok := range []string{"p-tok", "w-tok"} {
		for _, purge := range []string{"/ojs/v1/dead-letter?confirm=true&queue=" + q, "/ojs/v1/admin/dead-letter?confirm=true&queue=" + q} {
			if r := do(t, http.MethodDelete, purge, nil, as(tok)...); r.Status != http.StatusForbidden || r.errCode() != "permission_denied" {
				t.Fatalf("DELETE %s as %s: %d %s", purge, tok, r.Status, r.Raw)
			}
		}
		if r := do(t, http.MethodGet, "/ojs/v1/dead-letter?queue="+q, nil, as(tok)...); r.Status != http.StatusForbidden {
			t.Fatalf("dead letter list as %s: %d %s", tok, r.Status, r.Raw)
		}
	}
	if r := do(t, http.MethodDelete, "/ojs/v1/dead-letter?confirm=true&queue="+q, nil, "Authorization", "Bearer nobody"); r.Status != http.StatusUnauthorized {
		t.Fatalf("purge with an unknown token: %d %s", r.Status, r.Raw)
	}
	assertInDeadLetter(t, q, id) // the refused purges removed nothing

	r := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "levels.job", "args": []any{}, "options": map[string]any{"queue": q}}, as("p-tok")...)
	if r.Status != http.StatusCreated {
		t.Fatalf("push as producer: %d %s", r.Status, r.Raw)
	}
	job := r.job(t)["id"].(string)
	if r := do(t, http.MethodGet, "/ojs/v1/jobs/"+job, nil, as("p-tok")...); r.Status != http.StatusOK {
		t.Fatalf("info as producer: %d %s", r.Status, r.Raw)
	}
	fetch := map[string]any{"queues": []string{q}, "worker_id": "w"}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", fetch, as("p-tok")...); r.Status != http.StatusForbidden {
		t.Fatalf("fetch as producer: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "levels.job", "args": []any{}}, as("w-tok")...); r.Status != http.StatusForbidden {
		t.Fatalf("push as worker: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", fetch, as("w-tok")...); r.Status != http.StatusOK || len(r.Body["jobs"].([]any)) != 1 {
		t.Fatalf("fetch as worker: %d %s", r.Status, r.Raw)
	}

	r = do(t, http.MethodDelete, "/ojs/v1/dead-letter?confirm=true&queue="+q, nil)
	if r.Status != http.StatusOK || num(r.Body["deleted"]) != 1 {
		t.Fatalf("purge as admin: %d %s", r.Status, r.Raw)
	}
}
