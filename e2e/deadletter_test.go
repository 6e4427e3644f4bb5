package e2e

import (
	"net/http"
	"testing"
	"time"
)

// discardPull pushes a job with one attempt to queue q, fetches and fails
// it, and returns its id once discarded.
func discardPull(t *testing.T, q string) string {
	t.Helper()
	j := push(t, map[string]any{"type": "dlq.job", "args": []any{1}, "options": map[string]any{"queue": q, "retry": map[string]any{"max_attempts": 1}}})
	id := j["id"].(string)
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w"})
	if jobs, _ := r.Body["jobs"].([]any); len(jobs) != 1 {
		t.Fatalf("fetch: %s", r.Raw)
	}
	r = do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id, "error": map[string]any{"code": "boom", "message": "no"}})
	if r.Status != 200 || r.Body["state"] != "discarded" {
		t.Fatalf("nack: %d %s", r.Status, r.Raw)
	}
	return id
}

// Pull mode: inspect, retry (attempts reset, history kept), run to
// completion; delete; the errors for ids not in the dead letter queue.
func TestDeadLetterRetryAndDelete(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	id := discardPull(t, q)
	assertInDeadLetter(t, q, id)
	if r := do(t, http.MethodGet, "/ojs/v1/dead-letter/"+id, nil); r.Status != 200 || r.job(t)["state"] != "discarded" {
		t.Fatalf("inspect: %d %s", r.Status, r.Raw)
	}
	r := do(t, http.MethodPost, "/ojs/v1/dead-letter/"+id+"/retry", map[string]any{})
	if r.Status != 200 {
		t.Fatalf("retry: %d %s", r.Status, r.Raw)
	}
	j := r.job(t)
	errs, _ := j["errors"].([]any)
	if j["state"] != "available" || num(j["attempt"]) != 0 || len(errs) != 1 || j["id"] != id || j["completed_at"] != nil || j["discarded_at"] != nil {
		t.Fatalf("retried: %v", j)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/dead-letter/"+id, nil); r.Status != 404 || r.errCode() != "not_found" {
		t.Fatalf("retried job still in the dead letter queue: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/dead-letter/"+id+"/retry", nil); r.Status != 404 {
		t.Fatalf("second retry: %d %s", r.Status, r.Raw)
	}
	r = do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w"})
	jobs, _ := r.Body["jobs"].([]any)
	if len(jobs) != 1 || num(jobs[0].(map[string]any)["attempt"]) != 1 {
		t.Fatalf("fetch after retry: %s", r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": id, "result": "ok"}); r.Status != 200 {
		t.Fatalf("ack: %s", r.Raw)
	}
	if got := eventTypes(waitEvents(t, "job_id="+id, 9)); got != "job.enqueued,job.started,job.failed,job.discarded,dead_letter.added,"+
		"job.enqueued,dead_letter.retried,job.started,job.completed" {
		t.Errorf("events %s", got)
	}

	// Retry into another queue with new meta.
	id2 := discardPull(t, q)
	q2 := q + "-again"
	r = do(t, http.MethodPost, "/ojs/v1/dead-letter/"+id2+"/retry", map[string]any{"override": map[string]any{"queue": q2, "meta": map[string]any{"retry_source": "manual"}}})
	if j := r.job(t); r.Status != 200 || j["queue"] != q2 || j["meta"].(map[string]any)["retry_source"] != "manual" {
		t.Fatalf("override: %d %s", r.Status, r.Raw)
	}
	r = do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q2}})
	if jobs, _ := r.Body["jobs"].([]any); len(jobs) != 1 || jobs[0].(map[string]any)["id"] != id2 {
		t.Fatalf("fetch from the new queue: %s", r.Raw)
	}

	// Delete.
	id3 := discardPull(t, q)
	r = do(t, http.MethodDelete, "/ojs/v1/dead-letter/"+id3, nil)
	if r.Status != 200 || r.Body["deleted"] != true || r.Body["job_id"] != id3 {
		t.Fatalf("delete: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/jobs/"+id3, nil); r.Status != 404 {
		t.Fatalf("deleted job still readable: %d", r.Status)
	}
	if r := do(t, http.MethodDelete, "/ojs/v1/dead-letter/"+id3, nil); r.Status != 404 {
		t.Fatalf("second delete: %d", r.Status)
	}
	evs := waitEvents(t, "types=dead_letter.*&job_id="+id3, 2)
	if got := eventTypes(evs); got != "dead_letter.added,dead_letter.deleted" {
		t.Errorf("dead letter events of a deleted job: %s", got)
	}
	if d := evs[1]["data"].(map[string]any); d["job_id"] != id3 || d["queue"] != q || evs[1]["subject"] != id3 {
		t.Errorf("dead_letter.deleted: %v", evs[1])
	}

	// A job that is not discarded is not in the dead letter queue, and is
	// left alone.
	live := push(t, map[string]any{"type": "dlq.live", "args": []any{}, "options": map[string]any{"queue": q}})["id"].(string)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/ojs/v1/dead-letter/" + live}, {http.MethodDelete, "/ojs/v1/dead-letter/" + live},
		{http.MethodPost, "/ojs/v1/dead-letter/" + live + "/retry"},
	} {
		if r := do(t, c.method, c.path, nil); r.Status != 404 || r.errCode() != "not_found" {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.Status, r.Raw)
		}
	}
	if r := do(t, http.MethodGet, "/ojs/v1/jobs/"+live, nil); r.Status != 200 || r.job(t)["state"] != "available" {
		t.Fatalf("live job: %d %s", r.Status, r.Raw)
	}
	for body, code := range map[string]string{`{"override":{"priority":5}}`: "invalid_request", `{"nope":1}`: "invalid_request",
		`{"override":{"queue":"Bad Queue!"}}`: "invalid_request", `[1`: "invalid_payload"} {
		if r := do(t, http.MethodPost, "/ojs/v1/dead-letter/"+id2+"/retry", body); r.Status != 400 || r.errCode() != code {
			t.Errorf("retry body %s: %d %s", body, r.Status, r.Raw)
		}
	}
	if r := do(t, http.MethodPost, "/ojs/v1/dead-letter/not-an-id/retry", nil); r.Status != 400 {
		t.Errorf("bad id: %d %s", r.Status, r.Raw)
	}
}

// Push mode: a retried dead-letter job is delivered to the worker
// function again.
func TestDeadLetterRetryInPushMode(t *testing.T) {
	t.Parallel()
	j := push(t, map[string]any{"type": "test.fail_always", "args": []any{}, "options": map[string]any{"queue": pushQueue,
		"retry": map[string]any{"max_attempts": 1}}})
	id := j["id"].(string)
	waitFor(t, id, "discarded")
	if r := do(t, http.MethodPost, "/ojs/v1/dead-letter/"+id+"/retry", nil); r.Status != 200 {
		t.Fatalf("retry: %d %s", r.Status, r.Raw)
	}
	// The handler runs (and fails) again: a second error, attempt 1 again.
	deadline := time.Now().Add(settle)
	for {
		cur := do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil).job(t)
		if errs, _ := cur["errors"].([]any); cur["state"] == "discarded" && len(errs) == 2 {
			if num(cur["attempt"]) != 1 {
				t.Fatalf("attempt %v after retry", cur["attempt"])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("retried push-mode job did not run again: %v", cur)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Bulk dead-letter operations: stats, retry by filter, purge; both need
// confirm.
func TestDeadLetterBulkRetryPurgeAndStats(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t) + "-bulkdlq"
	for i := 0; i < 3; i++ {
		discardPull(t, q)
	}
	st := do(t, http.MethodGet, "/ojs/v1/dead-letter/stats", nil)
	byQueue, _ := st.Body["by_queue"].(map[string]any)
	if st.Status != 200 || num(byQueue[q]) != 3 || num(st.Body["total"]) < 3 || st.Body["oldest_at"] == nil {
		t.Fatalf("stats: %d %s", st.Status, st.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/dead-letter/retry", map[string]any{"filter": map[string]any{"queue": q}}); r.Status != 400 || r.errCode() != "invalid_request" {
		t.Fatalf("retry without confirm: %d %s", r.Status, r.Raw)
	}
	r := do(t, http.MethodPost, "/ojs/v1/dead-letter/retry", map[string]any{"filter": map[string]any{"queue": q, "type": "dlq.job"}, "confirm": true})
	if r.Status != 200 || num(r.Body["retried"]) != 3 || r.Body["has_more"] != false {
		t.Fatalf("bulk retry: %d %s", r.Status, r.Raw)
	}
	for i := 0; i < 3; i++ {
		if fetchOne(t, q) == nil {
			t.Fatalf("retried job %d not fetchable", i)
		}
	}
	for i := 0; i < 2; i++ {
		discardPull(t, q)
	}
	if r := do(t, http.MethodDelete, "/ojs/v1/dead-letter?queue="+q, nil); r.Status != 400 {
		t.Fatalf("purge without confirm: %d %s", r.Status, r.Raw)
	}
	r = do(t, http.MethodDelete, "/ojs/v1/dead-letter?queue="+q+"&confirm=true", nil)
	if r.Status != 200 || num(r.Body["deleted"]) != 2 {
		t.Fatalf("purge: %d %s", r.Status, r.Raw)
	}
	if l := do(t, http.MethodGet, "/ojs/v1/dead-letter?queue="+q, nil); len(l.Body["jobs"].([]any)) != 0 {
		t.Fatalf("dead letter after purge: %s", l.Raw)
	}
}
