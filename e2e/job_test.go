package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestPushModeRunsTheHandler(t *testing.T) {
	t.Parallel()
	j := push(t, map[string]any{"type": "demo.greet", "args": []any{"e2e"}, "options": map[string]any{"queue": pushQueue}})
	done := waitFor(t, j["id"].(string), "completed", "discarded")
	res, _ := done["result"].(map[string]any)
	if done["state"] != "completed" || res["greeting"] != "Hello, e2e!" || num(done["attempt"]) != 1 || done["completed_at"] == nil {
		t.Fatalf("push-mode job: %v", done)
	}
}

func TestPushModeRetriesAfterBackoff(t *testing.T) {
	t.Parallel()
	j := push(t, map[string]any{"type": "test.fail_once", "args": []any{}, "options": map[string]any{"queue": pushQueue,
		"retry": map[string]any{"max_attempts": 3, "initial_interval": "PT1S", "jitter": false}}})
	start := time.Now()
	done := waitFor(t, j["id"].(string), "completed", "discarded")
	errs, _ := done["errors"].([]any)
	if done["state"] != "completed" || num(done["attempt"]) != 2 || len(errs) != 1 {
		t.Fatalf("fail_once: %v", done)
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("the retry ran after %v, before its 1 s backoff", el)
	}
	if done["error"] != nil {
		t.Fatalf("a completed job keeps no current error: %v", done["error"])
	}
}

func TestPushModeExhaustedRetriesEndInDeadLetter(t *testing.T) {
	t.Parallel()
	j := push(t, map[string]any{"type": "test.fail_always", "args": []any{}, "options": map[string]any{"queue": pushQueue,
		"retry": map[string]any{"max_attempts": 2, "initial_interval": "PT1S", "jitter": false}}})
	id := j["id"].(string)
	done := waitFor(t, id, "discarded", "completed")
	errs, _ := done["errors"].([]any)
	if done["state"] != "discarded" || num(done["attempt"]) != 2 || len(errs) != 2 || done["discarded_at"] == nil {
		t.Fatalf("fail_always: %v", done)
	}
	if e, _ := done["error"].(map[string]any); e["type"] != "test.always_fails" {
		t.Fatalf("error: %v", done["error"])
	}
	assertInDeadLetter(t, pushQueue, id)
}

func TestPushModeUnknownTypeIsDiscardedWithoutRetry(t *testing.T) {
	t.Parallel()
	j := push(t, map[string]any{"type": "no.such_handler", "args": []any{}, "options": map[string]any{"queue": pushQueue}})
	done := waitFor(t, j["id"].(string), "discarded", "completed")
	e, _ := done["error"].(map[string]any)
	if num(done["attempt"]) != 1 || e["type"] != "handler_not_found" || !strings.Contains(e["message"].(string), "no.such_handler") {
		t.Fatalf("unknown type: %v", done)
	}
}

func TestPushModeScheduledJobWaitsForItsTime(t *testing.T) {
	t.Parallel()
	j := push(t, map[string]any{"type": "test.echo", "args": []any{"later"}, "options": map[string]any{"queue": pushQueue, "scheduled_at": "+PT2S"}})
	if j["state"] != "scheduled" {
		t.Fatalf("state %v", j["state"])
	}
	// The server's clock decides: the run must not start before
	// scheduled_at (a client-side stopwatch would count the push's own
	// latency under load).
	done := waitFor(t, j["id"].(string), "completed")
	if s, _ := done["started_at"].(string); s < j["scheduled_at"].(string) {
		t.Fatalf("started %v before scheduled %v", s, j["scheduled_at"])
	}
}

func TestPullModeFetchAck(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	j := push(t, map[string]any{"type": "report.generate", "args": []any{1, "two"}, "meta": map[string]any{"trace_id": "t1"}, "options": map[string]any{"queue": q}})
	if j["state"] != "available" || num(j["attempt"]) != 0 {
		t.Fatalf("pushed: %v", j)
	}
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-e2e", "count": 5})
	jobs, _ := r.Body["jobs"].([]any)
	if r.Status != 200 || len(jobs) != 1 {
		t.Fatalf("fetch: %d %s", r.Status, r.Raw)
	}
	f := jobs[0].(map[string]any)
	if f["id"] != j["id"] || f["state"] != "active" || num(f["attempt"]) != 1 {
		t.Fatalf("fetched: %v", f)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}}); len(r.Body["jobs"].([]any)) != 0 {
		t.Fatalf("an active job was fetched again: %s", r.Raw)
	}
	r = do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": j["id"], "result": map[string]any{"rows": 2}})
	if r.Status != 200 || r.Body["state"] != "completed" || r.Body["acknowledged"] != true {
		t.Fatalf("ack: %d %s", r.Status, r.Raw)
	}
	info := do(t, http.MethodGet, "/ojs/v1/jobs/"+j["id"].(string), nil).job(t)
	res, _ := info["result"].(map[string]any)
	if info["state"] != "completed" || num(res["rows"]) != 2 || info["meta"].(map[string]any)["trace_id"] != "t1" {
		t.Fatalf("info: %v", info)
	}
}

func TestPullModeNackUntilDiscarded(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	j := push(t, map[string]any{"type": "test.flaky", "args": []any{}, "options": map[string]any{"queue": q,
		"retry": map[string]any{"max_attempts": 2, "initial_interval": "PT1S", "jitter": false}}})
	id := j["id"].(string)
	states := []string{}
	for attempt := 1; attempt <= 2; attempt++ {
		var got map[string]any
		deadline := time.Now().Add(settle)
		for got == nil && time.Now().Before(deadline) {
			r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}})
			if jobs, _ := r.Body["jobs"].([]any); len(jobs) == 1 {
				got = jobs[0].(map[string]any)
			} else {
				time.Sleep(200 * time.Millisecond)
			}
		}
		if got == nil || num(got["attempt"]) != attempt {
			t.Fatalf("attempt %d: fetched %v", attempt, got)
		}
		r := do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id, "error": map[string]any{"code": "handler_error", "message": "upstream down"}})
		if r.Status != 200 {
			t.Fatalf("nack: %d %s", r.Status, r.Raw)
		}
		states = append(states, r.Body["state"].(string))
	}
	if strings.Join(states, ",") != "retryable,discarded" {
		t.Fatalf("states after nacks: %v", states)
	}
	assertInDeadLetter(t, q, id)
}

func assertInDeadLetter(t *testing.T, queue, id string) {
	t.Helper()
	r := do(t, http.MethodGet, "/ojs/v1/dead-letter?queue="+queue+"&limit=100", nil)
	if r.Status != 200 {
		t.Fatalf("dead letter: %d %s", r.Status, r.Raw)
	}
	for _, x := range r.Body["jobs"].([]any) {
		if x.(map[string]any)["id"] == id {
			return
		}
	}
	t.Fatalf("job %s not in the dead letter list of %s: %s", id, queue, r.Raw)
}

func TestCancelAndInvalidTransitions(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	j := push(t, map[string]any{"type": "a.b", "args": []any{}, "options": map[string]any{"queue": q}})
	id := j["id"].(string)
	if r := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": id}); r.Status != 409 || r.errCode() != "conflict" {
		t.Fatalf("ack of an available job: %d %s", r.Status, r.Raw)
	}
	r := do(t, http.MethodDelete, "/ojs/v1/jobs/"+id, nil)
	if r.Status != 200 || r.job(t)["state"] != "cancelled" || r.job(t)["previous_state"] != "available" {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodDelete, "/ojs/v1/jobs/"+id, nil); r.Status != 409 {
		t.Fatalf("cancel of a cancelled job: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}}); len(r.Body["jobs"].([]any)) != 0 {
		t.Fatalf("a cancelled job was fetched: %s", r.Raw)
	}
	p := push(t, map[string]any{"type": "a.b", "args": []any{}, "options": map[string]any{"queue": q, "pending": true}})
	if p["state"] != "pending" {
		t.Fatalf("pending: %v", p)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/jobs/"+p["id"].(string)+"/activate", map[string]any{}); r.Status != 200 || r.job(t)["state"] != "available" {
		t.Fatalf("activate: %d %s", r.Status, r.Raw)
	}
}

func TestBatchPush(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	r := do(t, http.MethodPost, "/ojs/v1/jobs/batch", map[string]any{"jobs": []any{
		map[string]any{"type": "a.b", "args": []any{1}, "options": map[string]any{"queue": q}},
		map[string]any{"type": "a.b", "args": []any{2}, "options": map[string]any{"queue": q, "priority": 10}},
	}})
	if r.Status != 201 || num(r.Body["count"]) != 2 {
		t.Fatalf("batch: %d %s", r.Status, r.Raw)
	}
	f := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 2})
	jobs := f.Body["jobs"].([]any)
	if len(jobs) != 2 || num(jobs[0].(map[string]any)["priority"]) != 10 {
		t.Fatalf("priority order: %s", f.Raw)
	}
	bad := do(t, http.MethodPost, "/ojs/v1/jobs/batch", map[string]any{"jobs": []any{
		map[string]any{"type": "a.b", "args": []any{3}, "options": map[string]any{"queue": q + "-bad"}},
		map[string]any{"args": []any{4}},
	}})
	if bad.Status != 400 {
		t.Fatalf("invalid batch: %d %s", bad.Status, bad.Raw)
	}
	if f := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q + "-bad"}}); len(f.Body["jobs"].([]any)) != 0 {
		t.Fatalf("a rejected batch enqueued a job: %s", f.Raw)
	}
}
