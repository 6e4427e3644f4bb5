package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// TestBadInputOnAnActiveJob sends malformed worker calls about a job a
// worker holds: the rejected ones change nothing, and a FAIL with an
// oversized backtrace is stored bounded instead of failing with a 500.
func TestBadInputOnAnActiveJob(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	push(t, map[string]any{"type": "bad.active", "args": []any{}, "options": map[string]any{"queue": q, "retry": map[string]any{"max_attempts": 3}}})
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-bad"})
	jobs, _ := r.Body["jobs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("fetch: %s", r.Raw)
	}
	id := jobs[0].(map[string]any)["id"].(string)
	big := strings.Repeat("x", 70<<10)
	huge := strings.Repeat("x", 1<<20)
	for _, c := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"ack result over 1 MiB", "/ojs/v1/workers/ack", `{"job_id":"` + id + `","result":"` + huge + `"}`, 413, "payload_too_large"},
		{"nack error is a string", "/ojs/v1/workers/nack", `{"job_id":"` + id + `","error":"boom"}`, 400, "invalid_request"},
		{"nack message over 64 KiB", "/ojs/v1/workers/nack", `{"job_id":"` + id + `","error":{"message":"` + big + `"}}`, 413, "payload_too_large"},
		{"ack job id in another case", "/ojs/v1/workers/ack", `{"JOB_ID":"` + id + `"}`, 400, "invalid_request"},
		{"heartbeat with a bad job id", "/ojs/v1/workers/heartbeat", `{"worker_id":"w-bad","active_jobs":["` + id + `","x"]}`, 400, "invalid_request"},
	} {
		if r := do(t, http.MethodPost, c.path, c.body); r.Status != c.status || r.errCode() != c.code {
			t.Errorf("%s: got %d %q, want %d %q: %.300s", c.name, r.Status, r.errCode(), c.status, c.code, r.Raw)
		}
	}
	j := do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil).job(t)
	if j["state"] != "active" || num(j["attempt"]) != 1 || j["result"] != nil || j["error"] != nil {
		t.Fatalf("a rejected call changed the job: %v", j)
	}
	// 50 lines of 60 KiB (3 MB) would make the item larger than 400 KB.
	line := strings.Repeat("b", 60<<10)
	bt := make([]string, 60)
	for i := range bt {
		bt[i] = line
	}
	r = do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id,
		"error": map[string]any{"type": strings.Repeat("T", 5000), "message": "boom", "backtrace": bt}})
	if r.Status != http.StatusOK {
		t.Fatalf("nack with a 3.6 MB backtrace: %d %.300s", r.Status, r.Raw)
	}
	j = do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil).job(t)
	e, _ := j["error"].(map[string]any)
	lines, _ := e["backtrace"].([]any)
	// Stored bounded (job.MaxErrorBytes): frames cut to 1 KiB, and as many
	// as fit, the last saying how many more there were.
	raw, _ := json.Marshal(e)
	if j["state"] != "retryable" || len(lines) < 2 || len(lines[0].(string)) > 1024 || len(e["type"].(string)) > 1024 || len(raw) > 16<<10 ||
		!strings.HasSuffix(lines[len(lines)-1].(string), "more frames truncated") {
		t.Fatalf("job after the nack: state %v, %d backtrace lines of %d bytes, error of %d bytes", j["state"], len(lines), len(lines[0].(string)), len(raw))
	}
}

// TestLogsHoldNoSecrets runs jobs whose args, meta, results and errors
// carry a secret, with a bearer token on every request, through the API,
// the worker (push mode) and the stream (events, workflow), then reads
// every function's log: the secret may appear nowhere.
func TestLogsHoldNoSecrets(t *testing.T) {
	if logDir == "" {
		t.Skip("the function logs of a remote deployment are not readable here")
	}
	t.Parallel()
	secret := "s3cr3t-" + uuid.NewString()
	auth := []string{"Authorization", "Bearer tok-" + secret}
	q := uniqueQueue(t)
	send := func(method, path string, body any) response {
		t.Helper()
		// The suite's own token (OJS_AUTH_TOKEN) wins where one is set.
		hdr := auth
		if authToken != "" {
			hdr = nil
		}
		return do(t, method, path, body, hdr...)
	}
	// Pull mode: completed with a secret result, failed with a secret error.
	for _, outcome := range []string{"ack", "nack"} {
		r := send(http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "secret.job", "args": []any{secret, map[string]any{"password": secret}},
			"meta": map[string]any{"token": secret}, "options": map[string]any{"queue": q, "tags": []string{secret}, "retry": map[string]any{"max_attempts": 1}}})
		if r.Status != http.StatusCreated {
			t.Fatalf("push: %d %s", r.Status, r.Raw)
		}
		f := send(http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-secret"})
		id := f.Body["jobs"].([]any)[0].(map[string]any)["id"].(string)
		if outcome == "ack" {
			send(http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": id, "result": map[string]any{"token": secret}})
		} else {
			send(http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id, "error": map[string]any{"code": "handler_error",
				"message": "failed with " + secret, "backtrace": []string{secret}, "details": map[string]any{"secret": secret}}})
		}
		waitFor(t, id, "completed", "discarded")
	}
	// Push mode: test.echo returns its args as the result.
	r := send(http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "test.echo", "args": []any{secret}, "options": map[string]any{"queue": pushQueue}})
	if r.Status != http.StatusCreated {
		t.Fatalf("push-mode push: %d %s", r.Status, r.Raw)
	}
	echo := r.job(t)["id"].(string)
	// A workflow whose job carries the secret.
	w := send(http.MethodPost, "/ojs/v1/workflows", map[string]any{"type": "chain", "name": "secret-flow",
		"steps": []any{map[string]any{"type": "test.echo", "args": []any{secret}, "options": map[string]any{"queue": pushQueue}}}})
	if w.Status != http.StatusCreated {
		t.Fatalf("workflow: %d %s", w.Status, w.Raw)
	}
	wf := w.Body["workflow"].(map[string]any)["id"].(string)
	// Rejected requests echo nothing into the logs either.
	send(http.MethodPost, "/ojs/v1/jobs", `{"type":"Not A Type `+secret+`","args":[]}`)
	send(http.MethodGet, "/ojs/v1/jobs/"+secret, nil)
	waitFor(t, echo, "completed")
	waitState(t, "/ojs/v1/workflows/"+wf, "workflow", "completed")
	// The job.completed events went through the stream function.
	waitEvents(t, "job_id="+echo+"&types=job.completed", 1)

	logs := map[string]string{}
	for _, fn := range topology.FunctionNames {
		b, err := os.ReadFile(filepath.Join(logDir, fn+".log"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		logs[fn] = string(b)
		if i := strings.Index(logs[fn], secret); i >= 0 {
			t.Errorf("%s.log holds the secret: ...%s...", fn, b[max(0, i-300):min(len(b), i+100)])
		}
	}
	// The logs did record these jobs (by id), so the check above looked
	// at the right lines.
	if !strings.Contains(logs[topology.FunctionAPI], echo) || !strings.Contains(logs[topology.FunctionWorker], echo) {
		t.Fatalf("the api and worker logs do not mention job %s", echo)
	}
}
