package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type harness struct {
	t   *testing.T
	st  *store.Store
	svc *lifecycle.Service
	eng *workflow.Engine
	mu  sync.Mutex
	ran map[string]int // job type -> runs
}

// newHarness wires the engine as the product does: a request that
// finishes a workflow job advances the workflow inline.
func newHarness(t *testing.T) *harness {
	return newHarnessInline(t, true)
}

// newStreamOnlyHarness has no inline advancement: every request dies
// after its job write, and only the stream's verification advances.
func newStreamOnlyHarness(t *testing.T) *harness {
	return newHarnessInline(t, false)
}

// newHarnessInline is newHarness (inline) or newStreamOnlyHarness.
func newHarnessInline(t *testing.T, inline bool) *harness {
	st, _ := testenv.Table(t)
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	c := lifecycle.Config{Queues: qsvc}
	if inline {
		c.Workflows = eng
	}
	svc := lifecycle.New(st, c)
	return &harness{t: t, st: st, svc: svc, eng: eng, ran: map[string]int{}}
}

// create posts a workflow.
func (h *harness) create(body string) string {
	h.t.Helper()
	v, err := h.eng.Create(context.Background(), []byte(body))
	if err != nil {
		h.t.Fatalf("create: %v", err)
	}
	return v.ID
}

// handler decides a job's outcome: a result, or an error to fail it.
type handler func(j *job.Job) (any, error)

// drain plays the workers and the stream: it fetches every available job,
// runs it, acks or fails it (which advances the workflow inline, unless
// the harness is stream-only), then lets the stream's verification and a
// duplicate of the inline path race on the same finished job, as a
// request and the stream function (with duplicated records) do.
func (h *harness) drain(queue string, run handler, until func() bool) {
	h.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(120 * time.Second)
	for !until() {
		if time.Now().After(deadline) {
			h.t.Fatal("workflow did not finish in 120s")
		}
		jobs, err := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{queue}, Count: 100})
		if err != nil {
			h.t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, j := range jobs {
			h.mu.Lock()
			h.ran[j.Type]++
			h.mu.Unlock()
			res, herr := run(j)
			var done *job.Job
			if herr == nil {
				b, _ := json.Marshal(res)
				done, err = h.svc.Ack(ctx, j.ID, b, 0)
			} else {
				done, err = h.svc.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "test.failure", Message: herr.Error(), Retryable: new(bool)}, 0)
			}
			if err != nil {
				h.t.Fatal(err)
			}
			wg.Add(3)
			go func() {
				defer wg.Done()
				if err := h.eng.Verify(ctx, []workflow.Finished{{Job: done}}); err != nil {
					h.t.Errorf("verify: %v", err)
				}
			}()
			go func() {
				defer wg.Done()
				if err := h.eng.Verify(ctx, []workflow.Finished{{Job: done}}); err != nil {
					h.t.Errorf("verify (duplicate record): %v", err)
				}
			}()
			go func() {
				defer wg.Done()
				if err := h.eng.JobFinished(ctx, done); err != nil {
					h.t.Errorf("job finished: %v", err)
				}
			}()
		}
		wg.Wait()
		if len(jobs) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (h *harness) view(id string) map[string]any {
	h.t.Helper()
	v, err := h.eng.Get(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func (h *harness) terminal(id string) func() bool {
	return func() bool {
		s := h.view(id)["state"]
		return s == "completed" || s == "failed" || s == "cancelled"
	}
}

func echoResult(j *job.Job) (any, error) {
	return map[string]any{"type": j.Type, "parents": json.RawMessage(orEmpty(j.ParentResults))}, nil
}

func orEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func jsonStr(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestChainPassesEveryEarlierResult(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(`{"type":"chain","name":"order-processing","steps":[
		{"type":"order.validate","args":[{"order_id":"ord_123"}],"options":{"queue":"wf"}},
		{"type":"payment.charge","args":[],"options":{"queue":"wf"}},
		{"type":"inventory.reserve","args":[],"options":{"queue":"wf"}}]}`)
	var seen []string
	h.drain("wf", func(j *job.Job) (any, error) {
		seen = append(seen, j.Type+":"+string(j.ParentResults))
		return map[string]string{"done": j.Type}, nil
	}, h.terminal(id))
	want := []string{
		`order.validate:[]`,
		`payment.charge:[{"done":"order.validate"}]`,
		`inventory.reserve:[{"done":"order.validate"},{"done":"payment.charge"}]`,
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps ran as\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	v := h.view(id)
	meta := v["metadata"].(map[string]any)
	if v["state"] != "completed" || meta["job_count"].(float64) != 3 || meta["completed_count"].(float64) != 3 || meta["completed_at"] == nil {
		t.Fatalf("view: %s", jsonStr(v))
	}
}

func TestChainStepFailureFailsTheChainAndStopsIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(`{"type":"chain","steps":[
		{"type":"a.one","args":[],"options":{"queue":"wf"}},
		{"type":"a.two","args":[],"options":{"queue":"wf"}},
		{"type":"a.three","args":[],"options":{"queue":"wf"}}]}`)
	h.drain("wf", func(j *job.Job) (any, error) {
		if j.Type == "a.two" {
			return nil, fmt.Errorf("card declined")
		}
		return 1, nil
	}, h.terminal(id))
	v := h.view(id)
	steps := v["steps"].([]any)
	if v["state"] != "failed" || v["failed_step_index"].(float64) != 1 || h.ran["a.three"] != 0 ||
		steps[2].(map[string]any)["state"] != "cancelled" || len(v["failed_job_ids"].([]any)) != 1 {
		t.Fatalf("view: %s", jsonStr(v))
	}
	e := v["errors"].([]any)[0].(map[string]any)
	if e["message"] != "card declined" || e["attempt"].(float64) != 1 || e["job_id"] == nil {
		t.Fatalf("errors: %v", e)
	}
}

func TestGroupFailsOnlyAfterEveryJobFinished(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(`{"type":"group","name":"multi-format-export","jobs":[
		{"type":"export.csv","args":[],"options":{"queue":"wf"}},
		{"type":"export.pdf","args":[],"options":{"queue":"wf"}},
		{"type":"export.xlsx","args":[],"options":{"queue":"wf"}}]}`)
	h.drain("wf", func(j *job.Job) (any, error) {
		if j.Type == "export.pdf" {
			return nil, fmt.Errorf("renderer crashed")
		}
		return map[string]string{"path": "/x." + j.Type}, nil
	}, h.terminal(id))
	v := h.view(id)
	meta := v["metadata"].(map[string]any)
	if v["state"] != "failed" || meta["completed_count"].(float64) != 2 || meta["failed_count"].(float64) != 1 ||
		h.ran["export.csv"] != 1 || h.ran["export.xlsx"] != 1 {
		t.Fatalf("view: %s ran %v", jsonStr(v), h.ran)
	}
}

func TestBatchCallbacksFireExactlyOnceWithAllResults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, fail string
		want       map[string]int
		state      string
	}{
		{"all succeed", "", map[string]int{"cb.complete": 1, "cb.success": 1, "cb.failure": 0}, "completed"},
		{"one fails", "user2", map[string]int{"cb.complete": 1, "cb.success": 0, "cb.failure": 1}, "completed"},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			id := h.create(`{"type":"batch","name":"bulk-email","jobs":[
				{"type":"email.send","args":["user1"],"options":{"queue":"wf"}},
				{"type":"email.send","args":["user2"],"options":{"queue":"wf"}},
				{"type":"email.send","args":["user3"],"options":{"queue":"wf"}}],
				"callbacks":{"on_complete":{"type":"cb.complete","args":[],"options":{"queue":"wf"}},
				"on_success":{"type":"cb.success","args":[],"options":{"queue":"wf"}},
				"on_failure":{"type":"cb.failure","args":[],"options":{"queue":"wf"}}}}`)
			var mu sync.Mutex
			parents := map[string]string{}
			h.drain("wf", func(j *job.Job) (any, error) {
				var who string
				_ = json.Unmarshal(j.Args, &[]any{&who})
				if strings.HasPrefix(j.Type, "cb.") {
					mu.Lock()
					parents[j.Type] = string(j.ParentResults)
					mu.Unlock()
					return "ok", nil
				}
				if who == tc.fail {
					return nil, fmt.Errorf("bounced")
				}
				return map[string]string{"sent": who}, nil
			}, h.terminal(id))
			for cb, n := range tc.want {
				if h.ran[cb] != n {
					t.Errorf("%s ran %d times, want %d", cb, h.ran[cb], n)
				}
			}
			v := h.view(id)
			if v["state"] != tc.state {
				t.Fatalf("state: %s", jsonStr(v))
			}
			var pr []any
			if err := json.Unmarshal([]byte(parents["cb.complete"]), &pr); err != nil || len(pr) != 3 {
				t.Fatalf("on_complete parent_results must hold all 3 jobs: %s", parents["cb.complete"])
			}
			if tc.fail != "" && !strings.Contains(parents["cb.failure"], `"state":"failed"`) {
				t.Fatalf("failed job missing from on_failure parent_results: %s", parents["cb.failure"])
			}
		})
	}
}

func TestNestedETLChainWithGroup(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(`{"type":"chain","name":"etl-pipeline","steps":[
		{"type":"data.extract","args":[],"options":{"queue":"wf"}},
		{"type":"group","name":"parallel-transforms","jobs":[
			{"type":"transform.csv","args":[],"options":{"queue":"wf"}},
			{"type":"transform.parquet","args":[],"options":{"queue":"wf"}},
			{"type":"transform.json","args":[],"options":{"queue":"wf"}}]},
		{"type":"data.load","args":[],"options":{"queue":"wf"}}]}`)
	var mu sync.Mutex
	got := map[string]string{}
	h.drain("wf", func(j *job.Job) (any, error) {
		mu.Lock()
		got[j.Type] = string(j.ParentResults)
		mu.Unlock()
		return j.Type, nil
	}, h.terminal(id))
	if got["transform.csv"] != `["data.extract"]` {
		t.Fatalf("group jobs get the chain's results: %s", got["transform.csv"])
	}
	if got["data.load"] != `["data.extract",["transform.csv","transform.parquet","transform.json"]]` {
		t.Fatalf("load parent_results: %s", got["data.load"])
	}
	v := h.view(id)
	step1 := v["steps"].([]any)[1].(map[string]any)
	if v["state"] != "completed" || step1["type"] != "group" || step1["state"] != "completed" || len(step1["jobs"].([]any)) != 3 ||
		v["metadata"].(map[string]any)["job_count"].(float64) != 5 {
		t.Fatalf("view: %s", jsonStr(v))
	}
}

func TestThreeLevelNestingPropagatesFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// chain -> group -> chain -> jobs, and a batch inside the group.
	id := h.create(`{"type":"chain","steps":[
		{"type":"group","jobs":[
			{"type":"chain","steps":[{"type":"l3.a","args":[],"options":{"queue":"wf"}},{"type":"l3.b","args":[],"options":{"queue":"wf"}}]},
			{"type":"batch","jobs":[{"type":"l3.c","args":[],"options":{"queue":"wf"}}],
			 "callbacks":{"on_failure":{"type":"l3.alert","args":[],"options":{"queue":"wf"}}}}]},
		{"type":"never.runs","args":[],"options":{"queue":"wf"}}]}`)
	h.drain("wf", func(j *job.Job) (any, error) {
		if j.Type == "l3.b" {
			return nil, fmt.Errorf("deep failure")
		}
		return j.Type, nil
	}, h.terminal(id))
	v := h.view(id)
	if v["state"] != "failed" || h.ran["never.runs"] != 0 || h.ran["l3.alert"] != 0 || h.ran["l3.c"] != 1 {
		t.Fatalf("view: %s ran %v", jsonStr(v), h.ran)
	}
	inner := v["steps"].([]any)[0].(map[string]any)["jobs"].([]any)[0].(map[string]any)
	if inner["state"] != "failed" || inner["steps"].([]any)[1].(map[string]any)["state"] != "failed" {
		t.Fatalf("inner chain: %s", jsonStr(inner))
	}
}

func TestWideGroupCountsExactlyUnderDuplicates(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var jobs []string
	for i := 0; i < 250; i++ {
		jobs = append(jobs, fmt.Sprintf(`{"type":"wide.job","args":[%d],"options":{"queue":"wide"}}`, i))
	}
	id := h.create(`{"type":"batch","jobs":[` + strings.Join(jobs, ",") + `],"callbacks":{"on_success":{"type":"wide.done","args":[],"options":{"queue":"wide"}}}}`)
	h.drain("wide", func(j *job.Job) (any, error) { return nil, nil }, h.terminal(id))
	v := h.view(id)
	if v["state"] != "completed" || h.ran["wide.job"] != 250 || h.ran["wide.done"] != 1 || v["metadata"].(map[string]any)["completed_count"].(float64) != 250 {
		t.Fatalf("state %v ran %v meta %v", v["state"], h.ran, v["metadata"])
	}
	root, _ := wfstore.New(h.st).GetRoot(context.Background(), id)
	shards, ok, fail := root.RolledCounts()
	if ok != 250 || fail != 0 || shards != 3 || root.Shards != 3 || len(root.OK) != 0 {
		t.Fatalf("counters: %+v", root)
	}
}

func TestCancelStopsPendingWorkAndIgnoresLateCompletions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	id := h.create(`{"type":"group","jobs":[
		{"type":"c.one","args":[],"options":{"queue":"cq"}},
		{"type":"c.two","args":[],"options":{"queue":"cq"}}]}`)
	active, err := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"cq"}, Count: 1})
	if err != nil || len(active) != 1 {
		t.Fatalf("fetch: %v %v", active, err)
	}
	v, err := h.eng.Cancel(ctx, id)
	if err != nil || v.State != "cancelled" {
		t.Fatalf("cancel: %v %v", v, err)
	}
	if _, err := h.eng.Cancel(ctx, id); ojserr.As(err).Status() != 409 {
		t.Fatalf("second cancel: %v", err)
	}
	if rest, _ := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"cq"}, Count: 10}); len(rest) != 0 {
		t.Fatalf("a pending job of a cancelled workflow was fetched: %v", rest)
	}
	done, err := h.svc.Ack(ctx, active[0].ID, []byte(`"late"`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.eng.JobFinished(ctx, done); err != nil {
		t.Fatal(err)
	}
	after := h.view(id)
	if after["state"] != "cancelled" {
		t.Fatalf("a late completion changed the workflow: %s", jsonStr(after))
	}
	if _, err := h.eng.Get(ctx, "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"); ojserr.As(err).Code != ojserr.NotFound {
		t.Fatalf("unknown workflow: %v", err)
	}
}

func TestValidationListsEveryProblemWithItsPath(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, err := h.eng.Create(context.Background(), []byte(`{"type":"chain","steps":[
		{"type":"ok.job","args":[]},
		{"type":"group","jobs":[]},
		{"type":"batch","jobs":[{"type":"x.y","args":[]}]},
		{"args":[]},
		{"type":"chain","steps":[{"type":"group","jobs":[{"type":"chain","steps":[{"type":"group","jobs":[{"type":"chain","steps":[{"type":"a.b","args":[]}]}]}]}]}]},
		{"type":"u.q","args":[],"options":{"unique":{}}}]}`))
	e := ojserr.As(err)
	if e.Code != ojserr.InvalidWorkflow || e.Status() != 400 {
		t.Fatalf("want invalid_workflow, got %v", err)
	}
	b, _ := json.Marshal(e.Details["validation_errors"])
	for _, want := range []string{`"$.steps[1].jobs"`, `"$.steps[2].callbacks"`, `"$.steps[3].type"`, `"$.steps[4].steps[0].jobs[0].steps[0].jobs[0]"`, `"$.steps[5].options.unique"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("missing problem at %s in %s", want, b)
		}
	}
}
