package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// A request whose credential is bound to a tenant (a JWT claim) is that
// tenant's without the header; a header naming another tenant and the
// operator's routes are refused; another tenant's job is not found.
func TestACredentialBoundToATenant(t *testing.T) {
	t.Parallel()
	srv := liveServer(t)
	send := func(bound, header, method, path, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		if header != "" {
			r.Header.Set(job.TenantHeader, header)
		}
		if bound != "" {
			r = r.WithContext(job.WithCredentialTenant(r.Context(), bound))
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	jobOf := func(w *httptest.ResponseRecorder) (id, tenant string) {
		var b struct {
			Job struct {
				ID   string `json:"id"`
				Meta struct {
					Tenant string `json:"tenant_id"`
				} `json:"meta"`
			} `json:"job"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &b)
		return b.Job.ID, b.Job.Meta.Tenant
	}
	push := `{"type":"t.bound","args":[]}`
	w := send("acme", "", http.MethodPost, "/ojs/v1/jobs", push)
	if id, tn := jobOf(w); w.Code != http.StatusCreated || tn != "acme" || id == "" {
		t.Fatalf("a bound PUSH without the header: %d tenant %q %s", w.Code, tn, w.Body)
	}
	if w := send("acme", "acme", http.MethodPost, "/ojs/v1/jobs", push); w.Code != http.StatusCreated {
		t.Fatalf("the header naming the bound tenant: %d %s", w.Code, w.Body)
	}
	if w := send("acme", "beta", http.MethodPost, "/ojs/v1/jobs", push); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "bound to tenant 'acme'") {
		t.Fatalf("the header naming another tenant: %d %s", w.Code, w.Body)
	}
	for _, path := range []string{"/ojs/v1/admin/tenants", "/metrics", "/ojs/admin/", "/ojs/v1/queues", "/ojs/v1/cron", "/ojs/v1/webhooks/subscriptions"} {
		if w := send("acme", "", http.MethodGet, path, ""); w.Code != http.StatusForbidden {
			t.Errorf("%s with a bound credential: %d", path, w.Code)
		}
	}
	for _, path := range []string{"/ojs/v1/queues/default/stats", "/ojs/v1/dead-letter?queue=default"} {
		if w := send("acme", "", http.MethodGet, path, ""); w.Code != http.StatusOK {
			t.Errorf("%s, scoped to the bound tenant: %d %s", path, w.Code, w.Body)
		}
	}
	other, _ := jobOf(send("beta", "", http.MethodPost, "/ojs/v1/jobs", push))
	if w := send("acme", "", http.MethodGet, "/ojs/v1/jobs/"+other, ""); w.Code != http.StatusNotFound {
		t.Fatalf("another tenant's job: %d", w.Code)
	}
	if w := send("", "", http.MethodGet, "/ojs/v1/jobs/"+other, ""); w.Code != http.StatusOK {
		t.Fatalf("an unbound request reads any job: %d", w.Code)
	}
}
