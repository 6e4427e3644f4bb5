package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
)

// call is one request to srv with an OJS JSON body.
func call(srv http.Handler, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", httpapi.ContentType)
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	return w
}

// A deployment that names its federation region says so in its health
// answer and refuses, with a 422 and before writing anything, the jobs,
// batches, workflows and cron templates geo-pinned to another region; it
// takes the ones pinned to it and every other job.
func TestFederationRegion(t *testing.T) {
	t.Parallel()
	srv := liveServerWith(t, httpapi.Config{Region: "eu-west-1"})
	var health struct{ Status, Region string }
	if w := call(srv, "GET", "/ojs/v1/health", ""); w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &health) != nil || health.Region != "eu-west-1" || health.Status != "ok" {
		t.Fatalf("health: %d %s", w.Code, w.Body)
	}
	pin := func(region string) string {
		return `"meta":{"ojs.federation.federation_id":"01912e4a-9d5e-7f01-ac34-cdef12345678","ojs.federation.region_affinity":"geo-pin","ojs.federation.region":"` + region + `"}`
	}
	for _, c := range []struct {
		path, body string
		code       int
	}{
		{"/ojs/v1/jobs", `{"type":"user.export","args":[],"queue":"gdpr",` + pin("us-east-1") + `}`, 422},
		{"/ojs/v1/jobs", `{"type":"user.export","args":[],"queue":"gdpr",` + pin("eu-west-1") + `}`, 201},
		{"/ojs/v1/jobs", `{"type":"user.export","args":[],"queue":"gdpr","meta":{"ojs.federation.region_affinity":"affinity","ojs.federation.region":"us-east-1"}}`, 201},
		{"/ojs/v1/jobs/batch", `{"jobs":[{"id":"019b0000-0000-7000-8000-0000000000a1","type":"a.b","args":[]},{"type":"a.b","args":[],` + pin("us-east-1") + `}]}`, 422},
		{"/ojs/v1/workflows", `{"id":"019b0000-0000-7000-8000-0000000000a2","type":"chain","steps":[{"type":"a.b","args":[]},{"type":"a.c","args":[],` + pin("us-east-1") + `}]}`, 422},
		{"/ojs/v1/cron", `{"name":"pinned","expression":"0 * * * *","job_template":{"type":"a.b","args":[],` + pin("us-east-1") + `}}`, 422},
		{"/ojs/v1/cron", `{"name":"pinned-here","expression":"0 * * * *","job_template":{"type":"a.b","args":[],` + pin("eu-west-1") + `}}`, 201},
	} {
		w := call(srv, "POST", c.path, c.body)
		if w.Code != c.code {
			t.Errorf("%s %s: %d %s, want %d", c.path, c.body, w.Code, w.Body, c.code)
		}
		if c.code == 422 && !strings.Contains(w.Body.String(), `"pinned_region":"us-east-1"`) {
			t.Errorf("%s: the refusal does not name the region: %s", c.path, w.Body)
		}
	}
	// Nothing of the refused batch or workflow was written.
	for _, path := range []string{"/ojs/v1/jobs/019b0000-0000-7000-8000-0000000000a1", "/ojs/v1/workflows/019b0000-0000-7000-8000-0000000000a2"} {
		if w := call(srv, "GET", path, ""); w.Code != 404 {
			t.Errorf("%s after the refusal: %d %s", path, w.Code, w.Body)
		}
	}
}

// Over HTTP, a FETCH's capabilities choose among the queue's jobs: a CPU
// worker does not get the job that needs a GPU; a GPU worker does.
func TestFetchCapabilitiesLive(t *testing.T) {
	t.Parallel()
	srv := liveServer(t)
	for _, body := range []string{
		`{"type":"ml.train","args":[],"queue":"mixed","ext_ml_accelerator":"gpu","ext_ml_gpu_count":2}`,
		`{"type":"t.job","args":[],"queue":"mixed"}`,
	} {
		if w := call(srv, "POST", "/ojs/v1/jobs", body); w.Code != 201 {
			t.Fatalf("push: %d %s", w.Code, w.Body)
		}
	}
	var got struct {
		Jobs []struct{ Type string } `json:"jobs"`
	}
	fetch := func(caps string) []string {
		t.Helper()
		w := call(srv, "POST", "/ojs/v1/workers/fetch", `{"queues":["mixed"],"count":5,"worker_id":"w",`+caps+`}`)
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &got) != nil {
			t.Fatalf("fetch: %d %s", w.Code, w.Body)
		}
		var types []string
		for _, j := range got.Jobs {
			types = append(types, j.Type)
		}
		return types
	}
	if types := fetch(`"capabilities":{"cpu":{"cores":4}}`); len(types) != 1 || types[0] != "t.job" {
		t.Fatalf("a CPU worker got %v", types)
	}
	if types := fetch(`"capabilities":{"gpu":{"count":2}}`); len(types) != 1 || types[0] != "ml.train" {
		t.Fatalf("a GPU worker got %v", types)
	}
	if w := call(srv, "POST", "/ojs/v1/jobs", `{"type":"ml.train","args":[],"ext_ml_gpu_count":-2}`); w.Code != 400 || !strings.Contains(w.Body.String(), "ext_ml_gpu_count") {
		t.Fatalf("a negative GPU count: %d %s", w.Code, w.Body)
	}
}
