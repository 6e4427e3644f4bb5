package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// fetchTypes fetches up to 10 jobs of q (worker "ctl") and returns them
// by type.
func fetchTypes(t *testing.T, q string) map[string]map[string]any {
	t.Helper()
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 10, "worker_id": "ctl"})
	out := map[string]map[string]any{}
	jobs, _ := r.Body["jobs"].([]any)
	for _, x := range jobs {
		j := x.(map[string]any)
		out[j["type"].(string)] = j
	}
	return out
}

// waitJobOf waits until a job of type typ is fetchable on q and returns
// it (the others fetched meanwhile are returned too, by type).
func waitJobOf(t *testing.T, q, typ string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) {
		if j := fetchTypes(t, q)[typ]; j != nil {
			return j
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no %s job on %s", typ, q)
	return nil
}

func ackJob(t *testing.T, j map[string]any, result any) {
	t.Helper()
	if r := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": j["id"], "worker_id": "ctl", "result": result}); r.Status != 200 {
		t.Fatalf("ack: %d %s", r.Status, r.Raw)
	}
}

func failJob(t *testing.T, j map[string]any) {
	t.Helper()
	if r := do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": j["id"], "worker_id": "ctl",
		"error": map[string]any{"code": "handler_error", "message": "no", "retryable": false}}); r.Status != 200 {
		t.Fatalf("nack: %d %s", r.Status, r.Raw)
	}
}

// A workflow's timeout fires without a request (the sweeper), in push
// mode (a step the worker function runs longer than the timeout) and in
// pull mode (a step nobody fetches): the workflow fails with
// workflow_timeout, its waiting jobs are cancelled, and the events API
// shows workflow.timed_out.
func TestWorkflowTimeoutFires(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"push", "pull"} {
		mode := mode
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			// A queue of each mode's own: the push workflow's first step
			// may finish after its deadline but before the sweeper sees
			// it, and then its next job is written, and cancelled when the
			// timeout fires; the pull check below is about its own
			// workflow, whose first job nobody fetches.
			q := uniqueQueue(t) + "-" + mode
			first := fmt.Sprintf(`{"type":"test.sleep","args":[4000],"options":{"queue":"%s"}}`, pushQueue)
			if mode == "pull" {
				first = fmt.Sprintf(`{"type":"tmo.never.fetched","args":[],"options":{"queue":"%s"}}`, q)
			}
			wf := createWorkflow(t, `{"type":"chain","timeout_ms":1500,"steps":[`+first+`,{"type":"tmo.next","args":[],"options":{"queue":"`+q+`"}}]}`)
			id := wf["id"].(string)
			done := waitWorkflow(t, id, "failed")
			e, _ := done["error"].(map[string]any)
			if e == nil || e["code"] != "workflow_timeout" {
				t.Fatalf("timed out: %v", done)
			}
			evs := waitEvents(t, "workflow_id="+id+"&types=workflow.timed_out", 1)
			if d := evs[0]["data"].(map[string]any); num(d["timeout_ms"]) != 1500 {
				t.Fatalf("event: %v", d)
			}
			if mode == "pull" {
				if j := fetchTypes(t, q); j["tmo.never.fetched"] != nil || j["tmo.next"] != nil {
					t.Fatalf("a job of a timed-out workflow was fetched: %v", j)
				}
			}
		})
	}
}

// Compensation (saga) in pull and push mode: the failed workflow's
// completed steps are undone newest first, each compensation receiving
// the result of its step; then on_failure runs; GET shows it all.
func TestWorkflowCompensation(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"pull", "push"} {
		mode := mode
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			q := uniqueQueue(t) + "-" + mode
			cq := q
			if mode == "push" {
				cq = pushQueue
			}
			step := func(typ, comp string) string {
				if mode == "push" {
					return fmt.Sprintf(`{"type":"test.echo","args":["%s"],"options":{"queue":"%s"},"compensate":{"type":"test.echo","args":["%s"],"options":{"queue":"%s"}}}`, typ, cq, comp, cq)
				}
				return fmt.Sprintf(`{"type":"%s","args":[],"options":{"queue":"%s"},"compensate":{"type":"%s","args":[],"options":{"queue":"%s"}}}`, typ, q, comp, q)
			}
			last := fmt.Sprintf(`{"type":"saga.ship","args":[],"options":{"queue":"%s"}}`, q)
			if mode == "push" {
				last = fmt.Sprintf(`{"type":"test.fail_always","args":[],"options":{"queue":"%s","retry":{"max_attempts":1}}}`, cq)
			}
			wf := createWorkflow(t, `{"type":"chain","name":"saga","steps":[`+step("saga.reserve", "saga.unreserve")+`,`+step("saga.charge", "saga.refund")+`,`+last+`],
				"on_failure":{"type":"saga.alert","args":[],"options":{"queue":"`+q+`"}}}`)
			id := wf["id"].(string)
			if mode == "pull" {
				ackJob(t, waitJobOf(t, q, "saga.reserve"), map[string]any{"r": 1})
				ackJob(t, waitJobOf(t, q, "saga.charge"), map[string]any{"c": 2})
				failJob(t, waitJobOf(t, q, "saga.ship"))
				refund := waitJobOf(t, q, "saga.refund")
				if !strings.Contains(pr(refund), `"compensates":"s1"`) || !strings.Contains(pr(refund), `"result":{"c":2}`) {
					t.Fatalf("refund parent_results: %s", pr(refund))
				}
				ackJob(t, refund, "refunded")
				ackJob(t, waitJobOf(t, q, "saga.unreserve"), "released")
			}
			alert := waitJobOf(t, q, "saga.alert")
			if !strings.Contains(pr(alert), `"compensation":"completed"`) {
				t.Fatalf("on_failure input: %s", pr(alert))
			}
			ackJob(t, alert, "paged")
			w := waitWorkflow(t, id, "failed")
			deadline := time.Now().Add(settle)
			for time.Now().Before(deadline) {
				w = do(t, http.MethodGet, "/ojs/v1/workflows/"+id, nil).Body["workflow"].(map[string]any)
				if h, _ := w["handlers"].(map[string]any); h != nil && h["on_failure"].(map[string]any)["state"] == "completed" {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			comp := w["compensation"].(map[string]any)
			steps := comp["steps"].([]any)
			if comp["state"] != "completed" || len(steps) != 2 || steps[0].(map[string]any)["undoes"] != "s1" || steps[1].(map[string]any)["undoes"] != "s0" ||
				steps[1].(map[string]any)["state"] != "completed" {
				t.Fatalf("compensation: %v", comp)
			}
			evs := waitEvents(t, "workflow_id="+id+"&types=workflow.compensating,workflow.compensated,workflow.handler_started,workflow.handler_finished", 4)
			if got := eventTypes(evs); got != "workflow.compensating,workflow.compensated,workflow.handler_started,workflow.handler_finished" {
				t.Fatalf("events: %s", got)
			}
		})
	}
}

// Retry from the failed step, pull mode, and the events: the failed job
// runs again, completed steps do not; a running workflow is refused.
func TestWorkflowRetry(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	wf := createWorkflow(t, fmt.Sprintf(`{"type":"chain","steps":[{"type":"rt.a","args":[],"options":{"queue":"%s"}},{"type":"rt.b","args":[],"options":{"queue":"%s"}},{"type":"rt.c","args":[],"options":{"queue":"%s"}}]}`, q, q, q))
	id := wf["id"].(string)
	if r := do(t, http.MethodPost, "/ojs/v1/workflows/"+id+"/retry", nil); r.Status != 409 || r.errCode() != "conflict" {
		t.Fatalf("retry of a running workflow: %d %s", r.Status, r.Raw)
	}
	ackJob(t, waitJobOf(t, q, "rt.a"), "a")
	failJob(t, waitJobOf(t, q, "rt.b"))
	waitWorkflow(t, id, "failed")
	r := do(t, http.MethodPost, "/ojs/v1/workflows/"+id+"/retry", nil)
	if r.Status != 200 || r.Body["workflow"].(map[string]any)["state"] != "running" {
		t.Fatalf("retry: %d %s", r.Status, r.Raw)
	}
	b := waitJobOf(t, q, "rt.b")
	if num(b["attempt"]) != 1 {
		t.Fatalf("the retried step: %v", b)
	}
	ackJob(t, b, "b")
	c := waitJobOf(t, q, "rt.c")
	if pr(c) != `["a","b"]` {
		t.Fatalf("the step after: %s", pr(c))
	}
	ackJob(t, c, "c")
	done := waitWorkflow(t, id, "completed")
	if num(done["retries"]) != 1 {
		t.Fatalf("retries: %v", done)
	}
	waitEvents(t, "workflow_id="+id+"&types=workflow.retried", 1)
	if r := do(t, http.MethodPost, "/ojs/v1/workflows/"+id+"/retry", nil); r.Status != 409 {
		t.Fatalf("retry of a completed workflow: %d", r.Status)
	}
}

// Push mode: a timed-out group is retried; the job its timeout cancelled
// runs again in the worker function and the workflow completes. Then a
// cancelled workflow runs its on_cancel handler in the worker function.
func TestWorkflowRetryAndCancelHandlerInPushMode(t *testing.T) {
	t.Parallel()
	later := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	// The timeout leaves the echo 8 s after the retry (relay, SQS poll and
	// worker, on a loaded machine); the sleeper outlasts it.
	wf := createWorkflow(t, fmt.Sprintf(`{"type":"group","timeout_ms":8000,"jobs":[
		{"type":"test.sleep","args":[12000],"options":{"queue":"%s"}},
		{"type":"test.echo","args":["later"],"options":{"queue":"%s","delay_until":"%s"}}]}`, pushQueue, pushQueue, later))
	id := wf["id"].(string)
	sleeper := wf["jobs"].([]any)[0].(map[string]any)["job_id"].(string)
	failed := waitWorkflow(t, id, "failed")
	if e, _ := failed["error"].(map[string]any); e == nil || e["code"] != "workflow_timeout" {
		t.Fatalf("timed out: %v", failed)
	}
	// The sleeping job either started before the timeout and runs to its
	// end (the usual case: the retry re-runs only the cancelled echo), or
	// never started (a loaded machine) and was cancelled with the echo.
	first := waitFor(t, sleeper, "completed", "cancelled")
	if r := do(t, http.MethodPost, "/ojs/v1/workflows/"+id+"/retry", nil); r.Status != 200 {
		t.Fatalf("retry: %d %s", r.Status, r.Raw)
	}
	if first["state"] == "cancelled" {
		// Re-run, it sleeps 12 s again: past the timeout, which runs
		// again from the retry.
		again := waitWorkflow(t, id, "failed")
		if e, _ := again["error"].(map[string]any); e == nil || e["code"] != "workflow_timeout" || num(again["retries"]) != 1 {
			t.Fatalf("retried workflow whose sleeping job re-ran: %v", again)
		}
		t.Log("the sleeping job had not started before the timeout; the retried workflow timed out again, as it must")
	} else {
		done := waitWorkflow(t, id, "completed")
		jobs := done["jobs"].([]any)
		if jobs[1].(map[string]any)["state"] != "completed" || num(done["retries"]) != 1 {
			t.Fatalf("after the retry: %v", done)
		}
	}

	q := uniqueQueue(t)
	wf = createWorkflow(t, fmt.Sprintf(`{"type":"chain","steps":[{"type":"pc.a","args":[],"options":{"queue":"%s"}}],
		"on_cancel":{"type":"test.echo","args":["cleanup"],"options":{"queue":"%s"}}}`, q, pushQueue))
	id = wf["id"].(string)
	if r := do(t, http.MethodDelete, "/ojs/v1/workflows/"+id, nil); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	deadline := time.Now().Add(settle)
	for {
		w := do(t, http.MethodGet, "/ojs/v1/workflows/"+id, nil).Body["workflow"].(map[string]any)
		h := w["handlers"].(map[string]any)["on_cancel"].(map[string]any)
		if h["state"] == "completed" {
			if !strings.Contains(fmt.Sprint(h["result"]), "cleanup") {
				t.Fatalf("on_cancel: %v", h)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("on_cancel did not run: %v", w)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitEvents(t, "workflow_id="+id+"&types=workflow.handler_finished", 1)
}

// Pull mode: cancelling a workflow runs its on_cancel handler (a chain)
// once, on the handler's queue, with what the workflow had done; the
// step that had not started is cancelled.
func TestWorkflowCancelHandlerInPullMode(t *testing.T) {
	t.Parallel()
	q, hq := uniqueQueue(t), uniqueQueue(t)
	wf := createWorkflow(t, fmt.Sprintf(`{"type":"chain","steps":[{"type":"cx.a","args":[],"options":{"queue":"%s"}},{"type":"cx.b","args":[],"options":{"queue":"%s"}}],
		"on_cancel":{"type":"chain","steps":[{"type":"cx.undo","args":[],"options":{"queue":"%s"}},{"type":"cx.notify","args":[],"options":{"queue":"%s"}}]}}`, q, q, hq, hq))
	id := wf["id"].(string)
	ackJob(t, waitJobOf(t, q, "cx.a"), "a")
	if r := do(t, http.MethodDelete, "/ojs/v1/workflows/"+id, nil); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	undo := waitJobOf(t, hq, "cx.undo")
	ackJob(t, undo, "undone")
	notify := waitJobOf(t, hq, "cx.notify")
	if !strings.Contains(pr(notify), "undone") {
		t.Fatalf("the handler chain's second step: %s", pr(notify))
	}
	ackJob(t, notify, "sent")
	steps := do(t, http.MethodGet, "/ojs/v1/workflows/"+id, nil).Body["workflow"].(map[string]any)["steps"].([]any)
	if bj := do(t, http.MethodGet, "/ojs/v1/jobs/"+steps[1].(map[string]any)["job_id"].(string), nil); bj.Body["job"].(map[string]any)["state"] != "cancelled" {
		t.Fatalf("the step that had not started: %s", bj.Raw)
	}
	deadline := time.Now().Add(settle)
	for {
		w := do(t, http.MethodGet, "/ojs/v1/workflows/"+id, nil).Body["workflow"].(map[string]any)
		h := w["handlers"].(map[string]any)["on_cancel"].(map[string]any)
		if w["state"] != "cancelled" {
			t.Fatalf("state: %v", w)
		}
		if h["state"] == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("on_cancel did not finish: %v", w)
		}
		time.Sleep(100 * time.Millisecond)
	}
	evs := waitEvents(t, "workflow_id="+id+"&types=workflow.cancelled,workflow.handler_started,workflow.handler_finished", 3)
	if got := eventTypes(evs); got != "workflow.cancelled,workflow.handler_started,workflow.handler_finished" {
		t.Fatalf("events: %s", got)
	}
}
