package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

func steps(v map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, s := range v["steps"].([]any) {
		m := s.(map[string]any)
		out[m["id"].(string)] = m
	}
	return out
}

// A diamond: a, then b and c at once, then d with both results keyed by
// step id; the view is section 14.2's flat list.
func TestGraphDiamond(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(`{"name":"diamond","options":{"queue":"gd"},"steps":[
		{"id":"a","type":"g.a","args":[],"depends_on":[]},
		{"id":"b","type":"g.b","args":[],"depends_on":["a"]},
		{"id":"c","type":"g.c","args":[],"depends_on":["a"]},
		{"id":"d","type":"g.d","args":[],"depends_on":["b","c"]}]}`)
	v := h.view(id)
	s := steps(v)
	if v["type"] != "graph" || s["a"]["state"] != "available" || s["d"]["state"] != "pending" || s["d"]["job_id"] != nil ||
		jsonStr(s["d"]["depends_on"]) != `["b","c"]` {
		t.Fatalf("created: %s", jsonStr(v))
	}
	var mu sync.Mutex
	got := map[string]string{}
	h.drain("gd", func(j *job.Job) (any, error) {
		mu.Lock()
		got[j.Type] = string(j.ParentResults)
		mu.Unlock()
		return map[string]string{"by": j.Type}, nil
	}, h.terminal(id))
	if got["g.a"] != `{}` || got["g.b"] != `{"a":{"by":"g.a"}}` || got["g.d"] != `{"b":{"by":"g.b"},"c":{"by":"g.c"}}` {
		t.Fatalf("parent_results: %v", got)
	}
	v = h.view(id)
	s = steps(v)
	if v["state"] != "completed" || s["d"]["state"] != "completed" || jsonStr(s["d"]["result"]) != `{"by":"g.d"}` || h.ran["g.d"] != 1 {
		t.Fatalf("finished: %s ran %v", jsonStr(v), h.ran)
	}
}

// Fan-in whose dependencies complete at the same moment on different
// requests: the dependent starts exactly once, in many workflows at once.
func TestGraphFanInStartsOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	const n = 12
	var ids []string
	for k := 0; k < n; k++ {
		ids = append(ids, h.create(`{"steps":[
			{"id":"x","type":"f.root","args":[],"depends_on":[],"options":{"queue":"gf"}},
			{"id":"y","type":"f.root","args":[],"depends_on":[],"options":{"queue":"gf"}},
			{"id":"z","type":"f.root","args":[],"depends_on":[],"options":{"queue":"gf"}},
			{"id":"join","type":"f.join","args":[],"depends_on":["x","y","z"],"options":{"queue":"gf"}}]}`))
	}
	jobs, err := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"gf"}, Count: 100})
	if err != nil || len(jobs) != 3*n {
		t.Fatalf("fetched %d, %v", len(jobs), err)
	}
	// Every root of every workflow is acknowledged at once, each ACK raced
	// by the stream's verification.
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			done, err := h.svc.Ack(ctx, j.ID, []byte(`"`+j.WorkflowNode+`"`), 0)
			if err != nil {
				t.Error(err)
				return
			}
			if err := h.eng.Verify(ctx, []workflow.Finished{{Job: done}}); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			cur, err := h.svc.Info(ctx, j.ID)
			if err == nil && cur.State.Terminal() {
				_ = h.eng.JobFinished(ctx, cur)
			}
		}()
	}
	wg.Wait()
	joins, err := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"gf"}, Count: 100})
	if err != nil || len(joins) != n {
		t.Fatalf("joins fetched: %d, %v", len(joins), err)
	}
	seen := map[string]bool{}
	for _, j := range joins {
		if j.Type != "f.join" || seen[j.WorkflowID] {
			t.Fatalf("join %+v twice or wrong", j)
		}
		seen[j.WorkflowID] = true
		var pr map[string]string
		if err := json.Unmarshal(j.ParentResults, &pr); err != nil || len(pr) != 3 || pr["x"] != "/g0" || pr["z"] != "/g2" {
			t.Fatalf("join parent_results: %s", j.ParentResults)
		}
		if _, err := h.svc.Ack(ctx, j.ID, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if s := h.view(id)["state"]; s != "completed" {
			t.Fatalf("workflow %s: %v", id, s)
		}
	}
}

// A failed step: everything that depends on it, directly or not, never
// runs; the independent branch runs on; the graph fails once nothing runs.
func TestGraphFailureCancelsDependentsOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(`{"options":{"queue":"gx"},"steps":[
		{"id":"a","type":"x.a","args":[],"depends_on":[]},
		{"id":"b","type":"x.b","args":[],"depends_on":["a"]},
		{"id":"c","type":"x.c","args":[],"depends_on":["b"]},
		{"id":"e","type":"x.e","args":[],"depends_on":["c","side"]},
		{"id":"side","type":"x.side","args":[],"depends_on":[]},
		{"id":"side2","type":"x.side2","args":[],"depends_on":["side"]}]}`)
	h.drain("gx", func(j *job.Job) (any, error) {
		if j.Type == "x.b" {
			return nil, fmt.Errorf("b broke")
		}
		return j.Type, nil
	}, h.terminal(id))
	v := h.view(id)
	s := steps(v)
	if v["state"] != "failed" || h.ran["x.c"] != 0 || h.ran["x.e"] != 0 || h.ran["x.side2"] != 1 ||
		s["b"]["state"] != "failed" || s["c"]["state"] != "cancelled" || s["e"]["state"] != "cancelled" || s["side2"]["state"] != "completed" {
		t.Fatalf("view %s ran %v", jsonStr(v), h.ran)
	}
}

// Big jobs: a group whose first jobs pass DynamoDB's 4 MB transaction
// limit together is written in transactions that each fit, and a step
// whose item has no room for parent_results gets the pointer to the
// workflow instead (its item stays under 400 KB with its largest result
// and error history).
func TestBigJobsFitDynamoDBLimits(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	big := testenv.RandomText(150<<10, 1) // stored compressed to about three quarters
	var jobs []string
	for i := 0; i < 30; i++ {
		jobs = append(jobs, fmt.Sprintf(`{"type":"big.job","args":["%s",%d],"options":{"queue":"bigq"}}`, big, i))
	}
	v, err := h.eng.Create(ctx, []byte(`{"type":"group","jobs":[`+strings.Join(jobs, ",")+`]}`))
	if err != nil {
		t.Fatalf("a 4.5 MB group: %v", err)
	}
	// FETCH answers at most 6 MB: several fetches take them all.
	n := 0
	for tries := 0; tries < 20 && n < 30; tries++ {
		got, err := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"bigq"}, Count: 30})
		if err != nil {
			t.Fatal(err)
		}
		n += len(got)
	}
	if n != 30 || v.State != "running" {
		t.Fatalf("fetched %d of the group's 30 jobs", n)
	}
	huge := testenv.RandomText(270<<10, 2)
	id := h.create(`{"type":"chain","steps":[{"type":"c.one","args":[],"options":{"queue":"bigc"}},
		{"type":"c.two","args":["` + huge + `"],"options":{"queue":"bigc"}}]}`)
	one, _ := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"bigc"}})
	if _, err := h.svc.Ack(ctx, one[0].ID, []byte(`"`+strings.Repeat("r", 60<<10)+`"`), 0); err != nil {
		t.Fatal(err)
	}
	two, _ := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"bigc"}})
	if len(two) != 1 || !strings.Contains(string(two[0].ParentResults), `"truncated":true`) || !strings.Contains(string(two[0].ParentResults), id) {
		t.Fatalf("step two: %d jobs, parent_results %.200s", len(two), two[0].ParentResults)
	}
}
