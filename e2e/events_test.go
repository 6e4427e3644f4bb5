package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

var eventID = regexp.MustCompile(`^evt_[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// waitEvents polls GET /ojs/v1/events?query until it returns at least n
// events (or, with exact, exactly n once settled) and returns them.
func waitEvents(t *testing.T, query string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(settle)
	var last []map[string]any
	for time.Now().Before(deadline) {
		r := do(t, http.MethodGet, "/ojs/v1/events?"+query, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("events: %d %s", r.Status, r.Raw)
		}
		raw, _ := r.Body["events"].([]any)
		last = last[:0]
		for _, e := range raw {
			last = append(last, e.(map[string]any))
		}
		if len(last) >= n {
			return last
		}
		time.Sleep(150 * time.Millisecond)
	}
	t.Fatalf("events?%s: %d events within %v, want %d: %v", query, len(last), settle, n, last)
	return nil
}

func eventTypes(evs []map[string]any) string {
	var ts []string
	for _, e := range evs {
		ts = append(ts, e["type"].(string))
	}
	return strings.Join(ts, ",")
}

func checkEnvelope(t *testing.T, e map[string]any, subject string) {
	t.Helper()
	id, _ := e["id"].(string)
	src, _ := e["source"].(string)
	tm, _ := e["time"].(string)
	if e["specversion"] != "1.0" || !eventID.MatchString(id) || !strings.HasPrefix(src, "ojs://") || e["subject"] != subject {
		t.Errorf("envelope: %v", e)
	}
	if _, err := time.Parse(time.RFC3339Nano, tm); err != nil || !strings.HasSuffix(tm, "Z") {
		t.Errorf("time %q", tm)
	}
	if _, ok := e["data"].(map[string]any); !ok {
		t.Errorf("no data: %v", e)
	}
}

// A pull-mode job's events, in lifecycle order, exactly once each (the
// local runtime delivers every stream record twice), with the data fields
// ojs-events.md requires; and the filters the conformance suite uses.
func TestEventsOfAJobLifecycle(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	j := push(t, map[string]any{"type": "test.echo", "args": []any{1}, "options": map[string]any{"queue": q}})
	id := j["id"].(string)
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-ev"})
	if len(r.Body["jobs"].([]any)) != 1 {
		t.Fatalf("fetch: %s", r.Raw)
	}
	time.Sleep(20 * time.Millisecond)
	if r := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": id, "result": map[string]any{"n": 1}}); r.Status != 200 {
		t.Fatalf("ack: %s", r.Raw)
	}
	evs := waitEvents(t, "job_id="+id, 3)
	time.Sleep(500 * time.Millisecond) // duplicates, if any, would have landed
	evs = waitEvents(t, "job_id="+id, 3)
	if got := eventTypes(evs); got != "job.enqueued,job.started,job.completed" {
		t.Fatalf("events %s", got)
	}
	for _, e := range evs {
		checkEnvelope(t, e, id)
		d := e["data"].(map[string]any)
		if d["job_type"] != "test.echo" || d["queue"] != q {
			t.Errorf("data %v", d)
		}
	}
	if d := evs[1]["data"].(map[string]any); d["worker_id"] != "w-ev" || num(d["attempt"]) != 1 {
		t.Errorf("started: %v", d)
	}
	d := evs[2]["data"].(map[string]any)
	if _, ok := d["duration_ms"].(float64); !ok || num(d["attempt"]) != 1 || num(d["result"].(map[string]any)["n"]) != 1 {
		t.Errorf("completed: %v", d)
	}
	// Conformance-style queries: by type and queue.
	if evs := waitEvents(t, "types=job.enqueued&queues="+q+"&limit=10", 1); len(evs) != 1 || evs[0]["subject"] != id {
		t.Errorf("by type and queue: %v", evs)
	}
	if evs := waitEvents(t, "types=job.completed,job.started&queues="+q, 2); eventTypes(evs) != "job.started,job.completed" {
		t.Errorf("two types: %s", eventTypes(evs))
	}
	// Cursor: after the first event, the other two; limit 1 pages.
	r = do(t, http.MethodGet, "/ojs/v1/events?job_id="+id+"&limit=1", nil)
	if r.Body["has_more"] != true || r.Body["cursor"] != evs[0]["id"] && r.Body["cursor"] == "" {
		t.Errorf("page 1: %s", r.Raw)
	}
	cur := r.Body["cursor"].(string)
	r = do(t, http.MethodGet, "/ojs/v1/events?job_id="+id+"&after="+url.QueryEscape(cur), nil)
	if got := r.Body["events"].([]any); len(got) != 2 || r.Body["has_more"] != false {
		t.Errorf("after cursor: %s", r.Raw)
	}
	// Bad queries are 400 invalid_request.
	for _, bad := range []string{"limit=0", "types=job.bogus", "after=nope", "since=yesterday", "colour=red"} {
		if r := do(t, http.MethodGet, "/ojs/v1/events?"+bad, nil); r.Status != 400 || r.errCode() != "invalid_request" {
			t.Errorf("%s: %d %s", bad, r.Status, r.Raw)
		}
	}
}

// Failed attempts: job.failed and job.retrying, then job.failed and
// job.discarded; a cancelled job: job.cancelled.
func TestEventsOfFailuresAndCancel(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	j := push(t, map[string]any{"type": "x.fail", "args": []any{}, "options": map[string]any{"queue": q,
		"retry": map[string]any{"max_attempts": 2, "initial_interval": "PT0.1S", "jitter": false}}})
	id := j["id"].(string)
	for attempt := 1; attempt <= 2; attempt++ {
		deadline := time.Now().Add(settle)
		for {
			r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w"})
			if len(r.Body["jobs"].([]any)) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("attempt %d never fetched", attempt)
			}
			time.Sleep(100 * time.Millisecond)
		}
		r := do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id, "error": map[string]any{"code": "boom", "message": "failed " + fmt.Sprint(attempt)}})
		if r.Status != 200 {
			t.Fatalf("nack: %s", r.Raw)
		}
	}
	evs := waitEvents(t, "job_id="+id, 9)
	want := "job.enqueued,job.started,job.failed,job.retrying,job.enqueued,job.started,job.failed,job.discarded,dead_letter.added"
	if got := eventTypes(evs); got != want {
		t.Fatalf("events\n%s\nwant\n%s", got, want)
	}
	retrying := evs[3]["data"].(map[string]any)
	if num(retrying["max_attempts"]) != 2 || retrying["next_retry_at"] == nil || retrying["error"].(map[string]any)["code"] != "boom" {
		t.Errorf("retrying: %v", retrying)
	}
	disc := evs[7]["data"].(map[string]any)
	if num(disc["total_attempts"]) != 2 || disc["last_error"].(map[string]any)["message"] != "failed 2" {
		t.Errorf("discarded: %v", disc)
	}

	c := push(t, map[string]any{"type": "x.cancel", "args": []any{}, "options": map[string]any{"queue": q}})
	if r := do(t, http.MethodDelete, "/ojs/v1/jobs/"+c["id"].(string), nil); r.Status != 200 {
		t.Fatalf("cancel: %s", r.Raw)
	}
	if got := eventTypes(waitEvents(t, "job_id="+c["id"].(string), 2)); got != "job.enqueued,job.cancelled" {
		t.Errorf("cancel events %s", got)
	}
}

// Workflow events (ojs-workflows.md Appendix B): a chain's steps, a batch's
// callback fired once, and a failed group naming its failed job.
func TestEventsOfWorkflows(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	opts := fmt.Sprintf(`"options":{"queue":"%s"}`, q)
	chain := createWorkflow(t, `{"type":"chain","name":"two-steps","steps":[{"type":"a.one","args":[],`+opts+`},{"type":"a.two","args":[],`+opts+`}]}`)
	cid := chain["id"].(string)
	work(t, q, cid, func(map[string]any) (any, string) { return "ok", "" })
	evs := waitEvents(t, "workflow_id="+cid, 5)
	if got := eventTypes(evs); got != "workflow.created,workflow.started,workflow.step_completed,workflow.step_completed,workflow.completed" {
		t.Fatalf("chain events %s", got)
	}
	for _, e := range evs {
		checkEnvelope(t, e, cid)
		d := e["data"].(map[string]any)
		if d["workflow_id"] != cid || d["workflow_name"] != "two-steps" || d["workflow_type"] != "chain" {
			t.Errorf("data %v", d)
		}
	}
	s0, s1 := evs[2]["data"].(map[string]any), evs[3]["data"].(map[string]any)
	if num(s0["step_index"]) != 0 || s0["step_type"] != "a.one" || num(s0["remaining_steps"]) != 1 || s0["job_id"] == nil ||
		num(s1["step_index"]) != 1 || num(s1["remaining_steps"]) != 0 {
		t.Errorf("steps: %v / %v", s0, s1)
	}
	if d := evs[4]["data"].(map[string]any); num(d["total_steps"]) != 2 || d["duration_ms"] == nil {
		t.Errorf("completed: %v", d)
	}

	batch := createWorkflow(t, `{"type":"batch","name":"b","jobs":[{"type":"b.job","args":[],`+opts+`},{"type":"b.job","args":[],`+opts+`}],
		"callbacks":{"on_complete":{"type":"b.done","args":[],`+opts+`},"on_failure":{"type":"b.fail","args":[],`+opts+`}}}`)
	bid := batch["id"].(string)
	n := 0
	work(t, q, bid, func(j map[string]any) (any, string) {
		if j["type"] == "b.job" {
			n++
			if n == 1 {
				return nil, "first job fails"
			}
		}
		return "ok", ""
	})
	evs = waitEvents(t, "workflow_id="+bid, 7)
	got := eventTypes(evs)
	if strings.Count(got, "workflow.callback_fired") != 2 || strings.Count(got, "workflow.job_failed") != 1 ||
		strings.Count(got, "workflow.job_completed") != 1 || !strings.HasSuffix(got, "workflow.completed") {
		t.Fatalf("batch events %s", got)
	}

	group := createWorkflow(t, `{"type":"group","name":"g","jobs":[{"type":"g.bad","args":[],`+opts+`}]}`)
	gid := group["id"].(string)
	work(t, q, gid, func(map[string]any) (any, string) { return nil, "broken" })
	evs = waitEvents(t, "workflow_id="+gid+"&types=workflow.failed", 1)
	d := evs[0]["data"].(map[string]any)
	if d["failed_step_type"] != "g.bad" || d["failed_step_id"] == "" || d["error"].(map[string]any)["message"] != "broken" {
		t.Errorf("failed: %v", d)
	}
}
