package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// clocked is a harness whose service and engine share a settable clock.
type clocked struct {
	*harness
	clk *testenv.Clock
}

func newClocked(t *testing.T) *clocked { return newClockedOn(t, nil) }

// newClockedOn is newClocked with every DynamoDB request of its store
// (the engine's, the job service's, the test's) made through the client
// wrap returns given testenv's (nil: testenv's).
func newClockedOn(t *testing.T, wrap func(*dynamodb.Client) store.DynamoAPI) *clocked {
	st, _ := testenv.Table(t)
	if wrap != nil {
		st = store.New(wrap(testenv.DynamoDB()), st.Table())
	}
	clk := testenv.NewClock(time.Now().UTC())
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	eng := workflow.New(st, workflow.Config{Admit: qsvc, Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc, Workflows: eng})
	return &clocked{harness: &harness{t: t, st: st, svc: svc, eng: eng, ran: map[string]int{}}, clk: clk}
}

// fetch fetches the available jobs of q, by type.
func (h *clocked) fetch(q string) map[string]*job.Job {
	h.t.Helper()
	jobs, err := h.svc.Fetch(context.Background(), lifecycle.FetchRequest{Queues: []string{q}, Count: 100})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]*job.Job{}
	for _, j := range jobs {
		out[j.Type] = j
	}
	return out
}

func (h *clocked) ack(j *job.Job, result string) {
	h.t.Helper()
	if _, err := h.svc.Ack(context.Background(), j.ID, []byte(result), 0); err != nil {
		h.t.Fatal(err)
	}
}

func (h *clocked) fail(j *job.Job) {
	h.t.Helper()
	if _, err := h.svc.Nack(context.Background(), j.ID, lifecycle.ErrorInput{Type: "boom", Message: "it broke", Retryable: new(bool)}, 0); err != nil {
		h.t.Fatal(err)
	}
}

func keys(m map[string]*job.Job) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return strings.Join(sortStrings(out), ",")
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// A workflow's timeout fails it once its deadline passes, without any
// request: what has not started is cancelled, what runs finishes and
// changes nothing, and the next step never starts.
func TestWorkflowTimeout(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","timeout_ms":60000,"steps":[{"type":"t.a","args":[],"options":{"queue":"tq"}},
		{"type":"t.b","args":[],"options":{"queue":"tq"}},{"type":"t.c","args":[],"options":{"queue":"tq"}}]}`)
	h.ack(h.fetch("tq")["t.a"], `1`)
	b := h.fetch("tq")["t.b"]
	h.clk.Add(59 * time.Second)
	if n, _ := h.eng.Repair(ctx, 10); n != 0 {
		t.Fatal("checked before its deadline")
	}
	h.clk.Add(2 * time.Second)
	var wg sync.WaitGroup
	for k := 0; k < 3; k++ { // concurrent sweepers
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.eng.Repair(ctx, 10); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	v := h.view(id)
	e, _ := v["error"].(map[string]any)
	if v["state"] != "failed" || e == nil || e["code"] != workflow.ErrorCodeTimeout {
		t.Fatalf("after the deadline: %s", jsonStr(v))
	}
	// The active step finishes; nothing follows it.
	done, err := h.svc.Ack(ctx, b.ID, []byte(`2`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Verify(ctx, []workflow.Finished{{Job: done}}); err != nil {
		t.Fatal(err)
	}
	if rest := h.fetch("tq"); len(rest) != 0 {
		t.Fatalf("a step started after the timeout: %s", keys(rest))
	}
	if h.view(id)["state"] != "failed" {
		t.Fatal("a late completion changed the workflow")
	}
}

// A nested group's timeout fails the group: its waiting job is cancelled,
// the chain fails, its next step never runs.
func TestNestedTimeout(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","steps":[{"type":"n.first","args":[],"options":{"queue":"nq"}},
		{"type":"group","timeout_ms":5000,"jobs":[{"type":"n.a","args":[],"options":{"queue":"nq"}},{"type":"n.b","args":[],"options":{"queue":"nq2"}}]},
		{"type":"n.last","args":[],"options":{"queue":"nq"}}]}`)
	h.ack(h.fetch("nq")["n.first"], `1`)
	h.clk.Add(3 * time.Second) // the group's deadline runs from when it started
	h.ack(h.fetch("nq")["n.a"], `2`)
	if n, _ := h.eng.Timeouts(ctx, 10); n != 0 {
		t.Fatal("timed out early")
	}
	h.clk.Add(3 * time.Second)
	var wg sync.WaitGroup
	counts := make(chan int, 3)
	for k := 0; k < 3; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := h.eng.Timeouts(ctx, 10)
			if err != nil {
				t.Error(err)
			}
			counts <- n
		}()
	}
	wg.Wait()
	close(counts)
	total := 0
	for n := range counts {
		total += n
	}
	if total != 1 {
		t.Fatalf("the group timed out %d times", total)
	}
	v := h.view(id)
	g := v["steps"].([]any)[1].(map[string]any)
	if v["state"] != "failed" || g["state"] != "failed" || g["jobs"].([]any)[1].(map[string]any)["state"] != "cancelled" ||
		v["steps"].([]any)[2].(map[string]any)["state"] != "cancelled" {
		t.Fatalf("after the group's timeout: %s", jsonStr(v))
	}
	if rest := h.fetch("nq2"); len(rest) != 0 {
		t.Fatalf("the cancelled job was fetched: %s", keys(rest))
	}
}

// When a workflow fails, the compensations of its completed steps run one
// after another, newest completion first, each with the result of the
// step it undoes, each once; a failing compensation does not stop the
// others; then the on_failure handler runs once with the failure.
func TestCompensationAndFailureHandler(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","name":"order","steps":[
		{"type":"o.reserve","args":[],"options":{"queue":"cq"},"compensate":{"type":"o.unreserve","args":["r"],"options":{"queue":"cq"}}},
		{"type":"o.charge","args":[],"options":{"queue":"cq"},"compensate":{"type":"o.refund","args":["c"],"options":{"queue":"cq"}}},
		{"type":"o.ship","args":[],"options":{"queue":"cq"},"compensate":{"type":"o.unship","args":[],"options":{"queue":"cq"}}}],
		"on_failure":{"type":"o.alert","args":[],"options":{"queue":"cq"}}}`)
	h.ack(h.fetch("cq")["o.reserve"], `{"reservation":"R1"}`)
	h.clk.Add(time.Millisecond)
	h.ack(h.fetch("cq")["o.charge"], `{"charge":"C1"}`)
	h.clk.Add(time.Millisecond)
	h.fail(h.fetch("cq")["o.ship"])
	v := h.view(id)
	if v["state"] != "failed" || v["compensation"].(map[string]any)["state"] != "running" {
		t.Fatalf("after the failure: %s", jsonStr(v))
	}
	refund := h.fetch("cq")
	if keys(refund) != "o.refund" {
		t.Fatalf("first compensation: %s", keys(refund))
	}
	var pr map[string]any
	_ = json.Unmarshal(refund["o.refund"].ParentResults, &pr)
	if pr["compensates"] != "s1" || jsonStr(pr["result"]) != `{"charge":"C1"}` {
		t.Fatalf("refund parent_results: %s", refund["o.refund"].ParentResults)
	}
	// The refund fails: the unreserve still runs.
	h.fail(refund["o.refund"])
	unreserve := h.fetch("cq")
	if keys(unreserve) != "o.unreserve" {
		t.Fatalf("second compensation: %s", keys(unreserve))
	}
	h.ack(unreserve["o.unreserve"], `"ok"`)
	alert := h.fetch("cq")
	if keys(alert) != "o.alert" {
		t.Fatalf("handler: %s", keys(alert))
	}
	var in map[string]any
	_ = json.Unmarshal(alert["o.alert"].ParentResults, &in)
	if in["state"] != "failed" || in["compensation"] != "failed" || jsonStr(in["results"]) != `{"s0":{"reservation":"R1"},"s1":{"charge":"C1"}}` ||
		in["error"].(map[string]any)["message"] != "it broke" {
		t.Fatalf("handler input: %s", alert["o.alert"].ParentResults)
	}
	h.ack(alert["o.alert"], `"paged"`)
	// Duplicated stream records of everything change nothing.
	all, _ := h.st.BatchGetJobs(ctx, []string{wfdef.JobID(id, "/s2")})
	for k := 0; k < 2; k++ {
		if err := h.eng.Verify(ctx, []workflow.Finished{{Job: all[wfdef.JobID(id, "/s2")]}}); err != nil {
			t.Fatal(err)
		}
	}
	if more := h.fetch("cq"); len(more) != 0 {
		t.Fatalf("ran again: %s", keys(more))
	}
	v = h.view(id)
	comp := v["compensation"].(map[string]any)
	steps := comp["steps"].([]any)
	if comp["state"] != "failed" || len(steps) != 2 || steps[0].(map[string]any)["undoes"] != "s1" || steps[1].(map[string]any)["state"] != "completed" ||
		v["handlers"].(map[string]any)["on_failure"].(map[string]any)["state"] != "completed" {
		t.Fatalf("view: %s", jsonStr(v))
	}
	if _, err := h.eng.Retry(ctx, id); ojserr.As(err).Code != ojserr.Conflict {
		t.Fatalf("retry of a compensated workflow: %v", err)
	}
}

// The on_cancel handler (a chain) runs once when the workflow is
// cancelled.
func TestCancelHandler(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"group","jobs":[{"type":"x.a","args":[],"options":{"queue":"xq"}}],
		"on_cancel":{"type":"chain","steps":[{"type":"x.clean1","args":[],"options":{"queue":"xq"}},{"type":"x.clean2","args":[],"options":{"queue":"xq"}}]}}`)
	if _, err := h.eng.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	first := h.fetch("xq")
	if keys(first) != "x.clean1" {
		t.Fatalf("on_cancel: %s", keys(first))
	}
	h.ack(first["x.clean1"], `1`)
	h.ack(h.fetch("xq")["x.clean2"], `2`)
	v := h.view(id)
	hd := v["handlers"].(map[string]any)["on_cancel"].(map[string]any)
	if v["state"] != "cancelled" || hd["state"] != "completed" {
		t.Fatalf("view: %s", jsonStr(v))
	}
}

// Retry re-runs a failed workflow from its failed step: the failed job
// runs again (same id, attempts from 0), completed steps keep their
// results and do not run again, the steps after it run in turn; a
// running workflow cannot be retried, and concurrent retries re-open it
// once.
func TestRetryFromTheFailedStep(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","steps":[{"type":"r.a","args":[],"options":{"queue":"rq"}},
		{"type":"group","jobs":[{"type":"r.b1","args":[],"options":{"queue":"rq"}},{"type":"r.b2","args":[],"options":{"queue":"rq"}}]},
		{"type":"r.c","args":[],"options":{"queue":"rq"}}]}`)
	if _, err := h.eng.Retry(ctx, id); ojserr.As(err).Code != ojserr.Conflict {
		t.Fatalf("retry of a running workflow: %v", err)
	}
	h.ack(h.fetch("rq")["r.a"], `"a"`)
	g := h.fetch("rq")
	h.ack(g["r.b1"], `"b1"`)
	h.fail(g["r.b2"])
	if v := h.view(id); v["state"] != "failed" {
		t.Fatalf("failed: %s", jsonStr(v))
	}
	var wg sync.WaitGroup
	ok := make(chan bool, 3)
	for k := 0; k < 3; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.eng.Retry(ctx, id)
			ok <- err == nil
		}()
	}
	wg.Wait()
	close(ok)
	reopened := 0
	for x := range ok {
		if x {
			reopened++
		}
	}
	if reopened != 1 {
		t.Fatalf("concurrent retries re-opened it %d times", reopened)
	}
	again := h.fetch("rq")
	if keys(again) != "r.b2" || again["r.b2"].Attempt != 1 || again["r.b2"].ID != g["r.b2"].ID {
		t.Fatalf("after the retry: %s %+v", keys(again), again["r.b2"])
	}
	h.ack(again["r.b2"], `"b2"`)
	c := h.fetch("rq")
	if keys(c) != "r.c" || string(c["r.c"].ParentResults) != `["a",["b1","b2"]]` {
		t.Fatalf("next step: %s %s", keys(c), c["r.c"].ParentResults)
	}
	h.ack(c["r.c"], `"c"`)
	v := h.view(id)
	if v["state"] != "completed" || v["retries"].(float64) != 1 {
		t.Fatalf("after the retry: %s", jsonStr(v))
	}
}

// A retry that died after re-opening the root (before it forgot what
// failed) leaves the failure counted on a running root. The stream's
// record of that failure, reaching the engine then, must not fail the
// workflow again; the repair finishes the retry and the failed step runs.
func TestRetryRacingTheFailureRecord(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","steps":[{"type":"x.a","args":[],"options":{"queue":"xq"}},{"type":"x.b","args":[],"options":{"queue":"xq"}}]}`)
	h.ack(h.fetch("xq")["x.a"], `"a"`)
	b := h.fetch("xq")["x.b"]
	h.fail(b)
	if v := h.view(id); v["state"] != "failed" {
		t.Fatalf("failed: %s", jsonStr(v))
	}
	now := h.clk.Now()
	if _, err := wfstore.New(h.st).Change(ctx, id, wfstore.RetryWorkflow(wfstate.Failed, now, now.Add(workflow.CheckAfter), time.Time{})); err != nil {
		t.Fatal(err)
	}
	jobs, err := h.st.BatchGetJobs(ctx, []string{b.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Verify(ctx, []workflow.Finished{{Job: jobs[b.ID]}}); err != nil {
		t.Fatal(err)
	}
	if v := h.view(id); v["state"] != "running" {
		t.Fatalf("the stale failure record failed the re-opened workflow again: %s", jsonStr(v))
	}
	h.clk.Add(workflow.CheckAfter + time.Second)
	if _, err := h.eng.Repair(ctx, 10); err != nil {
		t.Fatal(err)
	}
	again := h.fetch("xq")
	if keys(again) != "x.b" || again["x.b"].ID != b.ID {
		t.Fatalf("after the repair: %s", keys(again))
	}
	h.ack(again["x.b"], `"b"`)
	if v := h.view(id); v["state"] != "completed" {
		t.Fatalf("after the retry: %s", jsonStr(v))
	}
}

// A retry that forgot a step's failure but has not re-queued its job yet
// (or the stream's record of that failure arriving late, from another
// shard than the root's): the record finds the step uncounted and its
// job still discarded, and must not fail the re-opened workflow again.
func TestRetryForgettingAFailureRacingItsLateRecord(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","steps":[{"type":"z.a","args":[],"options":{"queue":"zq"}}]}`)
	a := h.fetch("zq")["z.a"]
	h.fail(a)
	now := h.clk.Now()
	if _, err := wfstore.New(h.st).Change(ctx, id, wfstore.RetryWorkflow(wfstate.Failed, now, now.Add(workflow.CheckAfter), time.Time{})); err != nil {
		t.Fatal(err)
	}
	if _, err := wfstore.New(h.st).Change(ctx, id, wfstore.Reopen(wfstore.RootPath, wfstore.Reopening{Fail: []int{0}})); err != nil {
		t.Fatal(err)
	}
	jobs, err := h.st.BatchGetJobs(ctx, []string{a.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Verify(ctx, []workflow.Finished{{Job: jobs[a.ID]}}); err != nil {
		t.Fatal(err)
	}
	if v := h.view(id); v["state"] != "running" {
		t.Fatalf("the late failure record failed the re-opened workflow again: %s", jsonStr(v))
	}
	h.clk.Add(workflow.CheckAfter + time.Second)
	if _, err := h.eng.Repair(ctx, 10); err != nil {
		t.Fatal(err)
	}
	again := h.fetch("zq")
	if keys(again) != "z.a" || again["z.a"].ID != a.ID {
		t.Fatalf("after the repair: %s", keys(again))
	}
	h.ack(again["z.a"], `"a"`)
	if v := h.view(id); v["state"] != "completed" {
		t.Fatalf("after the retry: %s", jsonStr(v))
	}
}

// The writes that finish a cancel (the sweeper's or the stream's, from a
// root they read as cancelled) apply only while the root is cancelled: a
// retry re-opening it in between keeps its re-queued jobs and its check.
func TestFinishingACancelLeavesARetriedWorkflowAlone(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"group","jobs":[{"type":"k.a","args":[],"options":{"queue":"kq"}}]}`)
	if _, err := h.eng.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	ja := wfdef.JobID(id, "/j0")
	// What a cancel finisher that read the root before the retry writes.
	errs, err := h.st.ApplyAllIf(ctx, []store.Transition{store.Cancel(ja, h.clk.Now(), job.Available)}, wfstore.RootIn(id, wfstate.Cancelled))
	if !errors.Is(err, store.ErrGuardFailed) || !errors.Is(errs[0], store.ErrNotTried) {
		t.Fatalf("guarded cancel of a re-queued job: %v %v, want the guard to fail", errs, err)
	}
	var nc *wfstore.ErrNodeConflict
	if _, err := wfstore.New(h.st).ChangeRoot(ctx, id, wfstore.CancelDone()); !errors.As(err, &nc) || nc.State() != wfstate.Running {
		t.Fatalf("the end of the cancel on the re-opened workflow: %v, want a conflict with its running root", err)
	}
	h.clk.Add(workflow.CheckAfter + time.Second)
	if due, err := wfstore.NewChecks(wfstore.New(h.st)).DueWorkflows(ctx, h.clk.Now(), 10); err != nil || due[id].IsZero() {
		t.Fatalf("the retried workflow's check: %v %v, want it kept", due, err)
	}
	h.ack(h.fetch("kq")["k.a"], `"a"`)
	if v := h.view(id); v["state"] != "completed" {
		t.Fatalf("after the retry: %s", jsonStr(v))
	}
	// While the guard holds, the cancel applies.
	id2 := h.create(`{"type":"group","jobs":[{"type":"k.b","args":[],"options":{"queue":"kq2"}}]}`)
	if _, err := wfstore.New(h.st).Change(ctx, id2, wfstore.CancelNode(wfstore.RootPath, h.clk.Now(), wfstate.Running)); err != nil {
		t.Fatal(err)
	}
	errs, err = h.st.ApplyAllIf(ctx, []store.Transition{store.Cancel(wfdef.JobID(id2, "/j0"), h.clk.Now(), job.Available)}, wfstore.RootIn(id2, wfstate.Cancelled))
	if err != nil || errs[0] != nil {
		t.Fatalf("guarded cancel of a cancelled workflow's job: %v %v", errs, err)
	}
}

// A workflow that timed out can be retried: the jobs the timeout
// cancelled run again.
// A step still running when a timeout fails the workflow is undone too
// if it completes late: the compensation waits (GET shows "waiting", the
// on_failure handler waits with it) until the running steps finished,
// then undoes every completed step, the late one first. The late step's
// own record starts it; without that record the sweeper's check does,
// once the recheck interval passed.
func TestCompensationWaitsForStepsATimeoutCutOff(t *testing.T) {
	t.Parallel()
	def := `{"type":"chain","timeout_ms":60000,"steps":[
		{"type":"w.reserve","args":[],"options":{"queue":"%[1]s"},"compensate":{"type":"w.unreserve","args":[],"options":{"queue":"%[1]s"}}},
		{"type":"w.charge","args":[],"options":{"queue":"%[1]s"},"compensate":{"type":"w.refund","args":[],"options":{"queue":"%[1]s"}}},
		{"type":"w.ship","args":[],"options":{"queue":"%[1]s"}}],
		"on_failure":{"type":"w.alert","args":[],"options":{"queue":"%[1]s"}}}`
	for _, bySweeper := range []bool{false, true} {
		t.Run(fmt.Sprint("by_sweeper=", bySweeper), func(t *testing.T) {
			t.Parallel()
			h := newClocked(t)
			ctx := context.Background()
			q := fmt.Sprint("wq", bySweeper)
			id := h.create(fmt.Sprintf(def, q))
			h.ack(h.fetch(q)["w.reserve"], `{"reservation":"R1"}`)
			h.clk.Add(time.Millisecond)
			charge := h.fetch(q)["w.charge"]
			h.clk.Add(61 * time.Second)
			if _, err := h.eng.Repair(ctx, 10); err != nil {
				t.Fatal(err)
			}
			v := h.view(id)
			if v["state"] != "failed" || v["compensation"].(map[string]any)["state"] != wfstore.CompensationWaiting {
				t.Fatalf("after the timeout: %s", jsonStr(v))
			}
			if more := h.fetch(q); len(more) != 0 {
				t.Fatalf("ran while the charge was still running: %s", keys(more))
			}
			// Another sweep before the charge finished changes nothing.
			h.clk.Add(20 * time.Second)
			if _, err := h.eng.Repair(ctx, 10); err != nil {
				t.Fatal(err)
			}
			if more := h.fetch(q); len(more) != 0 {
				t.Fatalf("ran while the charge was still running: %s", keys(more))
			}
			// The charge completes late.
			if bySweeper {
				// Its record is lost: a service without the engine.
				bare := lifecycle.New(h.st, lifecycle.Config{Now: h.clk.Now})
				if _, err := bare.Ack(ctx, charge.ID, []byte(`{"charge":"C1"}`), 0); err != nil {
					t.Fatal(err)
				}
				if more := h.fetch(q); len(more) != 0 {
					t.Fatalf("ran before the sweeper's check: %s", keys(more))
				}
				h.clk.Add(16 * time.Second)
				if n, err := h.eng.Repair(ctx, 10); err != nil || n != 1 {
					t.Fatalf("sweep: %d checked, %v", n, err)
				}
			} else {
				h.ack(charge, `{"charge":"C1"}`)
			}
			refund := h.fetch(q)
			if keys(refund) != "w.refund" {
				t.Fatalf("first compensation: %s (%s)", keys(refund), jsonStr(h.view(id)))
			}
			var pr map[string]any
			_ = json.Unmarshal(refund["w.refund"].ParentResults, &pr)
			if pr["compensates"] != "s1" || jsonStr(pr["result"]) != `{"charge":"C1"}` {
				t.Fatalf("refund parent_results: %s", refund["w.refund"].ParentResults)
			}
			if _, err := h.eng.Retry(ctx, id); ojserr.As(err).Code != ojserr.Conflict {
				t.Fatalf("retry once the compensation started: %v", err)
			}
			h.ack(refund["w.refund"], `"refunded"`)
			unreserve := h.fetch(q)
			if keys(unreserve) != "w.unreserve" {
				t.Fatalf("second compensation: %s", keys(unreserve))
			}
			h.ack(unreserve["w.unreserve"], `"released"`)
			alert := h.fetch(q)
			if keys(alert) != "w.alert" {
				t.Fatalf("handler: %s", keys(alert))
			}
			h.ack(alert["w.alert"], `"paged"`)
			v = h.view(id)
			comp := v["compensation"].(map[string]any)
			if comp["state"] != wfstore.CompensationCompleted || len(comp["steps"].([]any)) != 2 {
				t.Fatalf("view: %s", jsonStr(v))
			}
			// Its check is gone: later sweeps do not look at it again.
			h.clk.Add(time.Hour)
			if n, err := h.eng.Repair(ctx, 10); err != nil || n != 0 {
				t.Fatalf("sweep after the end: %d checked, %v", n, err)
			}
		})
	}
}

// A workflow whose compensation waits for a running step can still be
// retried (its compensation has not started): the retry clears the wait.
func TestRetryWhileCompensationWaits(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","timeout_ms":1000,"steps":[
		{"type":"x.pay","args":[],"options":{"queue":"xq"},"compensate":{"type":"x.unpay","args":[],"options":{"queue":"xq"}}},
		{"type":"x.next","args":[],"options":{"queue":"xq"}}]}`)
	pay := h.fetch("xq")["x.pay"]
	h.clk.Add(2 * time.Second)
	if _, err := h.eng.Repair(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if v := h.view(id); v["compensation"].(map[string]any)["state"] != wfstore.CompensationWaiting {
		t.Fatalf("after the timeout: %s", jsonStr(v))
	}
	if _, err := h.eng.Retry(ctx, id); err != nil {
		t.Fatalf("retry while waiting: %v", err)
	}
	h.ack(pay, `"paid"`)
	next := h.fetch("xq")
	if keys(next) != "x.next" {
		t.Fatalf("after the retry the chain goes on: %s (%s)", keys(next), jsonStr(h.view(id)))
	}
	h.ack(next["x.next"], `"done"`)
	if v := h.view(id); v["state"] != "completed" || v["compensation"].(map[string]any)["state"] != "not_started" {
		t.Fatalf("after the retry: %s", jsonStr(v))
	}
}

func TestRetryAfterTimeout(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"group","timeout_ms":1000,"jobs":[{"type":"y.a","args":[],"options":{"queue":"yq"}},{"type":"y.b","args":[],"options":{"queue":"yq2"}}]}`)
	h.ack(h.fetch("yq")["y.a"], `1`)
	h.clk.Add(2 * time.Second)
	if _, err := h.eng.Repair(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if v := h.view(id); v["state"] != "failed" {
		t.Fatalf("timed out: %s", jsonStr(v))
	}
	if _, err := h.eng.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	b := h.fetch("yq2")
	if keys(b) != "y.b" {
		t.Fatalf("the cancelled job after the retry: %s", keys(b))
	}
	h.ack(b["y.b"], `2`)
	if v := h.view(id); v["state"] != "completed" {
		t.Fatalf("after the retry: %s", jsonStr(v))
	}
	_ = wfstore.RootPath
	_ = fmt.Sprint
}

// A composite a timeout cancelled before it started has no clock to
// restart: after a retry it gets its deadline when the chain reaches it,
// not at the retry (it would time out while the steps before it run).
func TestRetryStartsNoClockOfACompositeThatNeverStarted(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","timeout_ms":10000,"steps":[{"type":"n.a","args":[],"options":{"queue":"nq"}},
		{"type":"group","timeout_ms":1000,"jobs":[{"type":"n.b","args":[],"options":{"queue":"nq"}}]}]}`)
	h.clk.Add(11 * time.Second)
	if _, err := h.eng.Repair(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if v := h.view(id); v["state"] != "failed" {
		t.Fatalf("timed out: %s", jsonStr(v))
	}
	if _, err := h.eng.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	a := h.fetch("nq")["n.a"]
	h.clk.Add(5 * time.Second) // the first step runs longer than the group's timeout
	if _, err := h.eng.Timeouts(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Repair(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if v := h.view(id); v["state"] != "running" {
		t.Fatalf("the group that had not started timed out: %s", jsonStr(v))
	}
	h.ack(a, `"a"`)
	h.ack(h.fetch("nq")["n.b"], `"b"`)
	if v := h.view(id); v["state"] != "completed" {
		t.Fatalf("after the retry: %s", jsonStr(v))
	}
}

// A nested node listed for its timeout after it finished (a deadline
// written again by a repeated advance) leaves the list when the sweep
// reads it, instead of being read first on every sweep and crowding the
// real timeouts out of the page.
func TestAFinishedNodesStaleTimeoutEntryIsRemoved(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","steps":[{"type":"group","timeout_ms":60000,"jobs":[{"type":"s.a","args":[],"options":{"queue":"sq"}}]},
		{"type":"s.b","args":[],"options":{"queue":"sq"}}]}`)
	h.ack(h.fetch("sq")["s.a"], `1`)
	// The group finished; a repeated advance lists its deadline again.
	if _, err := wfstore.New(h.st).Change(ctx, id, wfstore.StartDeadline("/s0", h.clk.Now().Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	h.clk.Add(2 * time.Second)
	if due, err := wfstore.NewChecks(wfstore.New(h.st)).DueTimeouts(ctx, h.clk.Now(), 10); err != nil || len(due) != 1 {
		t.Fatalf("listed before the sweep: %v %v", due, err)
	}
	if n, err := h.eng.Timeouts(ctx, 10); err != nil || n != 0 {
		t.Fatalf("sweep: %d timed out, %v", n, err)
	}
	if due, err := wfstore.NewChecks(wfstore.New(h.st)).DueTimeouts(ctx, h.clk.Now(), 10); err != nil || len(due) != 0 {
		t.Fatalf("still listed after the sweep: %v %v", due, err)
	}
	h.ack(h.fetch("sq")["s.b"], `2`)
	if v := h.view(id); v["state"] != "completed" {
		t.Fatalf("workflow: %s", jsonStr(v))
	}
}

// A workflow retried after its on_failure handler ran, and failing again,
// runs the handler again (its job of the first run used to keep the id
// the second launch needs: the handler showed running forever and never
// ran).
func TestFailureHandlerRunsAgainAfterARetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, handler string
		steps         []string // the handler's jobs, in order
	}{
		{"one job", `{"type":"f.alert","args":[],"options":{"queue":"fq"}}`, []string{"f.alert"}},
		// A chain's steps need no reset: its launch starts it from its first.
		{"a chain", `{"type":"chain","steps":[{"type":"f.page","args":[],"options":{"queue":"fq"}},{"type":"f.log","args":[],"options":{"queue":"fq"}}]}`,
			[]string{"f.page", "f.log"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newClocked(t)
			ctx := context.Background()
			id := h.create(`{"type":"chain","steps":[{"type":"f.a","args":[],"options":{"queue":"fq"}}],"on_failure":` + tc.handler + `}`)
			for run := 1; run <= 2; run++ {
				h.fail(h.fetch("fq")["f.a"])
				for _, step := range tc.steps {
					got := h.fetch("fq")
					if keys(got) != step {
						t.Fatalf("run %d: handler step %s: got %s", run, step, keys(got))
					}
					h.ack(got[step], fmt.Sprintf(`"%s %d"`, step, run))
				}
				v := h.view(id)
				if v["state"] != "failed" || v["handlers"].(map[string]any)["on_failure"].(map[string]any)["state"] != "completed" {
					t.Fatalf("run %d: %s", run, jsonStr(v))
				}
				if run == 1 {
					if _, err := h.eng.Retry(ctx, id); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// A retry waits for the failure handler of the run before to finish (409
// while it runs): re-armed under it, the handler's job (the same id in
// every run) was still in place at the next failure, and the handler did
// not run again.
func TestARetryWaitsForARunningFailureHandler(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"chain","steps":[{"type":"r.a","args":[],"options":{"queue":"rq"}}],
		"on_failure":{"type":"r.alert","args":[],"options":{"queue":"rq"}}}`)
	alert := h.failStep("rq", "r.a", "r.alert")
	_, err := h.eng.Retry(ctx, id)
	if e := ojserr.As(err); e.Code != ojserr.Conflict || e.Details["handler"] != "on_failure" {
		t.Fatalf("retry while the handler runs: %v", err)
	}
	h.ack(alert, `"paged"`)
	if _, err := h.eng.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	h.failStep("rq", "r.a", "r.alert") // the handler runs for the second failure
}

// failStep fails the job of type step on queue q and returns the handler
// job (of type handler) the failure launched.
func (h *clocked) failStep(q, step, handler string) *job.Job {
	h.t.Helper()
	h.fail(h.fetch(q)[step])
	got := h.fetch(q)
	if keys(got) != handler {
		h.t.Fatalf("after %s failed: %s, want the handler %s", step, keys(got), handler)
	}
	return got[handler]
}

// staleHandlers answers every read of a handler node (a GetItem of its
// item) as if it were waiting: the read served before the handler's
// launch, as for a handler launched just after a retry's check.
type staleHandlers struct{ *dynamodb.Client }

func (s staleHandlers) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := s.Client.GetItem(ctx, in, o...)
	if err == nil && strings.HasPrefix(keyS(in.Key, "pk"), "WF#") && strings.HasPrefix(keyS(in.Key, "sk"), "N#/~") && len(out.Item) > 0 {
		c := *out
		c.Item = maps.Clone(out.Item)
		c.Item["state"] = &types.AttributeValueMemberS{Value: string(wfstate.Waiting)}
		return &c, nil
	}
	return out, err
}

// A handler found running by the retry's re-opening (launched after its
// check) is cancelled and removed, so that it runs for a later failure.
func TestARetryRacingAHandlerLaunchStopsIt(t *testing.T) {
	t.Parallel()
	h := newClockedOn(t, func(db *dynamodb.Client) store.DynamoAPI { return staleHandlers{db} })
	eng, svc := h.eng, h.svc
	ctx := context.Background()
	id := h.create(`{"type":"chain","steps":[{"type":"s.a","args":[],"options":{"queue":"sq"}}],
		"on_failure":{"type":"s.alert","args":[],"options":{"queue":"sq"}}}`)
	alert := h.failStep("sq", "s.a", "s.alert")
	if _, err := eng.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Cancelled and removed: its late ACK finds no job.
	if _, err := svc.Ack(ctx, alert.ID, []byte(`"late"`), 0); ojserr.As(err).Code != ojserr.NotFound {
		t.Fatalf("the stopped handler's ACK: %v", err)
	}
	h.failStep("sq", "s.a", "s.alert") // the handler runs for the second failure
}

// A batch retried for a failed member decides its callbacks again when
// its members finish: on_failure, which fired (and failed) in the first
// run, does not run again at the retry with the first run's input, and
// on_success fires once the member succeeds.
func TestRetriedBatchFiresTheCallbacksOfItsNewOutcome(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	ctx := context.Background()
	id := h.create(`{"type":"batch","jobs":[{"type":"b.a","args":[],"options":{"queue":"bq"}},{"type":"b.b","args":[],"options":{"queue":"bq"}}],
		"callbacks":{"on_success":{"type":"b.ok","args":[],"options":{"queue":"bq"}},"on_failure":{"type":"b.bad","args":[],"options":{"queue":"bq"}}}}`)
	run := h.fetch("bq")
	h.fail(run["b.a"])
	h.ack(run["b.b"], `"b"`)
	bad := h.fetch("bq")
	if keys(bad) != "b.bad" {
		t.Fatalf("first run's callbacks: %s", keys(bad))
	}
	h.fail(bad["b.bad"]) // the alert fails too: the batch fails
	if v := h.view(id); v["state"] != "failed" {
		t.Fatalf("after the first run: %s", jsonStr(v))
	}
	if _, err := h.eng.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	again := h.fetch("bq")
	if keys(again) != "b.a" {
		t.Fatalf("after the retry: %s, want only the failed member", keys(again))
	}
	h.ack(again["b.a"], `"a"`)
	ok := h.fetch("bq")
	if keys(ok) != "b.ok" || string(ok["b.ok"].ParentResults) != `["a","b"]` {
		t.Fatalf("callbacks of the retried run: %s %s", keys(ok), ok["b.ok"].ParentResults)
	}
	h.ack(ok["b.ok"], `"done"`)
	if v := h.view(id); v["state"] != "completed" {
		t.Fatalf("after the retried run: %s", jsonStr(v))
	}
	if more := h.fetch("bq"); len(more) != 0 {
		t.Fatalf("ran again: %s", keys(more))
	}
}
