package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// A FETCH that states the worker's capabilities takes only the jobs whose
// needs they meet, however many others are ahead of them, and those whose
// preferred rules hold first within a priority; a FETCH that states none
// takes any job; a job whose needs no worker meets stays available.
func TestFetchByCapabilities(t *testing.T) {
	t.Parallel()
	s, _, _ := newServices(t)
	ctx := context.Background()
	push := func(body string) *job.Job {
		t.Helper()
		j, err := s.Push(ctx, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	caps := func(c, labels string) *job.Capabilities {
		t.Helper()
		w, err := job.ParseCapabilities(json.RawMessage(c), json.RawMessage(labels))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	// Forty jobs that need eight H100s come first, then one that needs one
	// A100, one pinned to zone b, and a plain one.
	for i := range 40 {
		push(fmt.Sprintf(`{"type":"ml.train","args":[%d],"queue":"gpu","ext_ml_accelerator":"gpu","ext_ml_gpu_type":"nvidia-h100","ext_ml_gpu_count":8}`, i))
	}
	a100 := push(`{"type":"ml.infer","args":[],"queue":"gpu","meta":{"resources":{"gpu":{"count":1,"type":"nvidia-a100","memory_gb":40}}}}`)
	zoned := push(`{"type":"ml.infer","args":[],"queue":"gpu","ext_ml_node_affinity":{"required":[{"key":"zone","operator":"In","values":["b"]}]}}`)
	plain := push(`{"type":"t.job","args":[],"queue":"gpu"}`)

	fetch := func(w *job.Capabilities, count int) []*job.Job {
		t.Helper()
		got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"gpu"}, Count: count, WorkerID: "w", Worker: w})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	ids := func(js []*job.Job) map[string]bool {
		m := map[string]bool{}
		for _, j := range js {
			m[j.ID] = true
		}
		return m
	}
	// A CPU worker in zone a: only the plain job.
	if got := fetch(caps(`{"cpu":{"cores":16},"memory_gb":64}`, `["zone:a"]`), 5); len(got) != 1 || got[0].ID != plain.ID {
		t.Fatalf("a CPU worker got %d jobs: %v", len(got), ids(got))
	}
	// A worker with four A100s in zone b: the A100 job and the zoned one.
	got := fetch(caps(`{"gpu":{"count":4,"type":"nvidia-a100","memory_gb":80}}`, `{"zone":"b"}`), 5)
	if m := ids(got); len(got) != 2 || !m[a100.ID] || !m[zoned.ID] {
		t.Fatalf("an A100 worker got %d jobs: %v", len(got), m)
	}
	// Nothing left that fits it; the H100 jobs wait.
	if again := fetch(caps(`{"gpu":{"count":4,"type":"nvidia-a100","memory_gb":80}}`, `{"zone":"b"}`), 5); len(again) != 0 {
		t.Fatalf("the A100 worker got %d more", len(again))
	}
	// An H100 worker in zone c gets the jobs that prefer zone c first,
	// among the candidates a FETCH reads (twice the count and eight).
	for i := range 4 {
		push(fmt.Sprintf(`{"type":"ml.train","args":["any%d"],"queue":"gpu2","ext_ml_gpu_count":8}`, i))
	}
	for i := range 2 {
		push(fmt.Sprintf(`{"type":"ml.train","args":["c%d"],"queue":"gpu2","ext_ml_gpu_count":8,"ext_ml_node_affinity":{"preferred":[{"key":"zone","operator":"In","values":["c"],"weight":50}]}}`, i))
	}
	h100 := caps(`{"gpu":{"count":8,"type":"nvidia-h100","memory_gb":80}}`, `["zone:c"]`)
	first, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"gpu2"}, Count: 2, WorkerID: "w", Worker: h100})
	if err != nil || len(first) != 2 {
		t.Fatalf("the H100 worker got %d: %v", len(first), err)
	}
	for _, j := range first {
		if string(j.Args) != `["c0"]` && string(j.Args) != `["c1"]` {
			t.Fatalf("the H100 worker's first jobs: %s (not the ones it prefers)", j.Args)
		}
	}
	// A FETCH that states no capabilities takes any job.
	if any := fetch(nil, 100); len(any) != 40 {
		t.Fatalf("a FETCH without capabilities got %d of the 40 H100 jobs", len(any))
	}
}

// A read by id moves a job whose time has come, as the sweeper would: a
// scheduled job past its time is available when read (and stored so), one
// not yet due stays scheduled.
func TestInfoPromotesADueJob(t *testing.T) {
	t.Parallel()
	s, _, clk := newServices(t)
	ctx := context.Background()
	soon, err := s.Push(ctx, []byte(`{"type":"t.job","args":[],"queue":"info-due","options":{"scheduled_at":"+PT1M"}}`))
	if err != nil {
		t.Fatal(err)
	}
	later, _ := s.Push(ctx, []byte(`{"type":"t.job","args":[],"queue":"info-due","options":{"scheduled_at":"+PT1H"}}`))
	if j, err := s.Info(ctx, soon.ID); err != nil || j.State != job.Scheduled {
		t.Fatalf("before its time: %v %v", j.State, err)
	}
	clk.Add(2 * time.Minute)
	if j, err := s.Info(ctx, soon.ID); err != nil || j.State != job.Available {
		t.Fatalf("after its time: %v %v", j.State, err)
	}
	if j, err := s.Info(ctx, later.ID); err != nil || j.State != job.Scheduled {
		t.Fatalf("the later job: %v %v", j.State, err)
	}
	// Stored available: a FETCH takes it without a sweep.
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"info-due"}, Count: 5, WorkerID: "w"})
	if err != nil || len(got) != 1 || got[0].ID != soon.ID {
		t.Fatalf("fetch after the read: %d %v", len(got), err)
	}
}

// A job an AI agent delegates (ext_agent_parent_id naming a stored job)
// takes its parent's depth plus one and at most its parent's maximum,
// whatever it says; one past the chain's maximum is refused with 422
// AGENT_MAX_DELEGATION_DEPTH and not written, in a batch too.
func TestAgentDelegationChain(t *testing.T) {
	t.Parallel()
	s, _, _ := newServices(t)
	ctx := context.Background()
	root, err := s.Push(ctx, []byte(`{"type":"ai.agent.plan","args":[],"ext_agent_delegation_depth":0,"ext_agent_max_delegation_depth":1}`))
	if err != nil {
		t.Fatal(err)
	}
	child, err := s.Push(ctx, []byte(`{"type":"ai.agent.do","args":[],"ext_agent_parent_id":"`+root.ID+`","ext_agent_delegation_depth":0,"ext_agent_max_delegation_depth":7}`))
	if err != nil {
		t.Fatal(err)
	}
	if d, m := string(child.Extra["ext_agent_delegation_depth"]), string(child.Extra["ext_agent_max_delegation_depth"]); d != "1" || m != "1" {
		t.Fatalf("the child: depth %s max %s", d, m)
	}
	_, err = s.PushBatch(ctx, [][]byte{[]byte(`{"type":"a.b","args":[]}`), []byte(`{"type":"ai.agent.do","args":[],"ext_agent_parent_id":"` + child.ID + `"}`)})
	if oe := ojserr.As(err); err == nil || oe.Status() != 422 || oe.Code != ojserr.AgentMaxDelegationDepth || oe.Details["index"] != 1 {
		t.Fatalf("a grandchild past the chain's maximum: %v", err)
	}
	// An unknown parent leaves the job's own values.
	orphan, err := s.Push(ctx, []byte(`{"type":"ai.agent.do","args":[],"ext_agent_parent_id":"019b0000-0000-7000-8000-00000000dead","ext_agent_delegation_depth":4}`))
	if err != nil || string(orphan.Extra["ext_agent_delegation_depth"]) != "4" {
		t.Fatalf("an unknown parent: %v", err)
	}
}

// An agent task's progress reports carry the tokens its attempt used: the
// envelope shows them, and a report past the job's token budget fails the
// attempt with AGENT_TOKEN_BUDGET_EXCEEDED under the retry policy; the
// next attempt starts at 0.
func TestAgentTokenBudget(t *testing.T) {
	t.Parallel()
	s, _, clk := newServices(t)
	ctx := context.Background()
	pushed, err := s.Push(ctx, []byte(`{"type":"ai.agent.chat","args":[],"queue":"agents","ext_agent_token_budget":100,"retry":{"max_attempts":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	tokens := func(j *job.Job) string {
		b, _ := json.Marshal(j)
		var m map[string]json.RawMessage
		_ = json.Unmarshal(b, &m)
		return string(m["ext_agent_tokens_used"])
	}
	if got := tokens(pushed); got != "0" {
		t.Fatalf("tokens at enqueue: %s", got)
	}
	fetch := func() {
		t.Helper()
		if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"agents"}, WorkerID: "w"}); err != nil || len(got) != 1 {
			t.Fatalf("fetch: %d %v", len(got), err)
		}
	}
	fetch()
	used := func(n int64) *int64 { return &n }
	j, err := s.ReportProgress(ctx, pushed.ID, lifecycle.ProgressInput{TokensUsed: used(60)})
	if err != nil || j.State != job.Active || tokens(j) != "60" {
		t.Fatalf("60 of 100 tokens: %v %s %v", j.State, tokens(j), err)
	}
	if _, err := s.ReportProgress(ctx, pushed.ID, lifecycle.ProgressInput{TokensUsed: used(-1)}); ojserr.As(err).Status() != 400 {
		t.Fatalf("negative tokens: %v", err)
	}
	j, err = s.ReportProgress(ctx, pushed.ID, lifecycle.ProgressInput{TokensUsed: used(150)})
	if err != nil || j.State != job.Retryable || j.Error == nil || j.Error.Type != lifecycle.AgentTokenBudgetExceeded {
		t.Fatalf("150 of 100 tokens: %v %+v %v", j.State, j.Error, err)
	}
	clk.Add(time.Hour)
	fetch()
	if j, _ := s.Info(ctx, pushed.ID); j.Attempt != 2 || tokens(j) != "0" {
		t.Fatalf("the next attempt: attempt %d tokens %s", j.Attempt, tokens(j))
	}
}
