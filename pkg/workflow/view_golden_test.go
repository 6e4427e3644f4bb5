package workflow_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// updateViews rewrites the golden views of TestViewGolden:
// go test ./pkg/workflow/ -run TestViewGolden -update-views
var updateViews = flag.Bool("update-views", false, "rewrite pkg/workflow/testdata/views/*.json")

// timestampRE matches the view's timestamps (job.Timestamp's form), which
// the golden files do not pin.
var timestampRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`)

// normalizeView decodes a view's JSON and replaces its timestamps.
func normalizeView(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	var walk func(x any) any
	walk = func(x any) any {
		switch y := x.(type) {
		case map[string]any:
			for k, val := range y {
				y[k] = walk(val)
			}
		case []any:
			for i, val := range y {
				y[i] = walk(val)
			}
		case string:
			if timestampRE.MatchString(y) {
				return "<timestamp>"
			}
		}
		return x
	}
	return walk(out)
}

// golden compares the view (as its JSON decodes, so that key order does
// not count) with testdata/views/name.json.
func golden(t *testing.T, name string, v *wfview.View) {
	t.Helper()
	got := normalizeView(t, v)
	path := filepath.Join("testdata", "views", name+".json")
	if *updateViews {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v (run with -update-views to write it)", name, err)
	}
	var want any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("%s: the view changed:\ngot  %s\nwant %s", name, g, b)
	}
}

// ptrText prints *p, or null.
func ptrText(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// viewOf reads workflow id's view.
func (h *clocked) viewOf(id string) *wfview.View {
	h.t.Helper()
	v, err := h.eng.Get(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

// failRetryable fails j with a retryable error.
func (h *clocked) failRetryable(j string, q string) {
	h.t.Helper()
	jobs := h.fetch(q)
	if jobs[j] == nil {
		h.t.Fatalf("no %s job in %s: %s", j, q, keys(jobs))
	}
	yes := true
	if _, err := h.svc.Nack(context.Background(), jobs[j].ID, lifecycle.ErrorInput{Type: "flaky", Message: "try again", Retryable: &yes}, 0); err != nil {
		h.t.Fatal(err)
	}
}

// The view of every shape of workflow, at several points of its run, is
// the JSON its golden file holds (timestamps aside): the tree form's
// chains, groups, batches with callbacks and nesting, the
// dependency-graph form (graph, chain, group, batch), failures with
// their errors, compensation, handlers, cancellation, timeouts, retries
// and a workflow still being created.
func TestViewGolden(t *testing.T) {
	t.Parallel()
	const q = "vq"
	job := func(typ string) string { return `{"type":"` + typ + `","args":[],"options":{"queue":"` + q + `"}}` }
	shapes := []struct {
		name string
		run  func(t *testing.T, h *clocked)
	}{
		{"chain", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000001"
			h.create(`{"id":"` + id + `","type":"chain","name":"order","steps":[` + job("c.a") + `,` + job("c.b") + `,` + job("c.c") + `]}`)
			golden(t, "chain_created", h.viewOf(id))
			h.ack(h.fetch(q)["c.a"], `{"a":1}`)
			b := h.fetch(q)["c.b"]
			golden(t, "chain_running", h.viewOf(id))
			h.ack(b, `"b"`)
			h.ack(h.fetch(q)["c.c"], `[1,2,3]`)
			golden(t, "chain_completed", h.viewOf(id))
		}},
		{"chain_failed", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000002"
			h.create(`{"id":"` + id + `","type":"chain","steps":[` + job("f.a") + `,` + job("f.b") + `,` + job("f.c") + `]}`)
			h.ack(h.fetch(q)["f.a"], `1`)
			h.fail(h.fetch(q)["f.b"])
			golden(t, "chain_failed", h.viewOf(id))
		}},
		{"group", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000003"
			h.create(`{"id":"` + id + `","type":"group","name":"fan","jobs":[` + job("g.a") + `,` + job("g.b") + `,` + job("g.c") + `]}`)
			golden(t, "group_created", h.viewOf(id))
			jobs := h.fetch(q)
			h.ack(jobs["g.a"], `{"ok":true}`)
			h.fail(jobs["g.b"])
			// A running step shows its progress; the workflow's is (1
			// completed + 0.4 running) / 3 jobs.
			if _, err := h.svc.ReportProgress(context.Background(), jobs["g.c"].ID, lifecycle.ProgressInput{Progress: new(0.4)}); err != nil {
				t.Fatal(err)
			}
			v := h.viewOf(id)
			golden(t, "group_running_with_a_failure", v)
			pr := v.ProgressOf()
			var got []string
			for _, st := range pr.Steps {
				got = append(got, fmt.Sprintf("%s:%s:%v", st.Type, st.State, ptrText(st.Progress)))
			}
			if pr.Progress != 0.8 || strings.Join(got, " ") != "g.a:completed:1 g.b:failed:null g.c:active:0.4" {
				t.Errorf("progress %v, steps %v", pr.Progress, got)
			}
			h.ack(jobs["g.c"], `null`)
			golden(t, "group_failed", h.viewOf(id))
		}},
		{"batch", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000004"
			h.create(`{"id":"` + id + `","type":"batch","name":"import","jobs":[` + job("b.a") + `,` + job("b.b") + `],
				"callbacks":{"on_complete":` + job("b.complete") + `,"on_success":` + job("b.success") + `,"on_failure":` + job("b.failure") + `}}`)
			golden(t, "batch_created", h.viewOf(id))
			jobs := h.fetch(q)
			h.ack(jobs["b.a"], `"a"`)
			h.fail(jobs["b.b"])
			golden(t, "batch_callbacks_fired", h.viewOf(id))
			cbs := h.fetch(q)
			h.ack(cbs["b.complete"], `"reported"`)
			h.fail(cbs["b.failure"])
			golden(t, "batch_done", h.viewOf(id))
		}},
		{"nested", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000005"
			h.create(`{"id":"` + id + `","type":"chain","name":"etl","steps":[` + job("n.extract") + `,
				{"type":"group","name":"transform","timeout_ms":60000,"jobs":[` + job("n.csv") + `,{"type":"chain","steps":[` + job("n.x1") + `,` + job("n.x2") + `]}]},
				{"type":"batch","jobs":[` + job("n.load") + `],"callbacks":{"on_success":` + job("n.notify") + `}}]}`)
			golden(t, "nested_created", h.viewOf(id))
			h.ack(h.fetch(q)["n.extract"], `{"rows":3}`)
			jobs := h.fetch(q)
			h.ack(jobs["n.x1"], `"x1"`)
			golden(t, "nested_running", h.viewOf(id))
			h.ack(jobs["n.csv"], `"csv"`)
			h.ack(h.fetch(q)["n.x2"], `"x2"`)
			h.ack(h.fetch(q)["n.load"], `"loaded"`)
			golden(t, "nested_callback_running", h.viewOf(id))
			h.ack(h.fetch(q)["n.notify"], `"sent"`)
			golden(t, "nested_completed", h.viewOf(id))
		}},
		{"nested_timeout", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000006"
			h.create(`{"id":"` + id + `","type":"chain","steps":[` + job("t.a") + `,{"type":"group","timeout_ms":1000,"jobs":[` + job("t.b") + `,` + job("t.c") + `]},` + job("t.d") + `]}`)
			h.ack(h.fetch(q)["t.a"], `1`)
			jobs := h.fetch(q)
			h.ack(jobs["t.b"], `2`)
			h.clk.Add(2 * time.Second)
			if _, err := h.eng.Repair(context.Background(), 10); err != nil {
				t.Fatal(err)
			}
			golden(t, "nested_group_timed_out", h.viewOf(id))
		}},
		{"graph", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000007"
			h.create(`{"id":"` + id + `","name":"diamond","options":{"queue":"` + q + `"},"steps":[
				{"id":"a","type":"g.a","args":[],"depends_on":[]},
				{"id":"b","type":"g.b","args":[],"depends_on":["a"]},
				{"id":"c","type":"g.c","args":[],"depends_on":["a"]},
				{"id":"d","type":"g.d","args":[],"depends_on":["b","c"]},
				{"id":"e","type":"g.e","args":[],"depends_on":[]}]}`)
			golden(t, "graph_created", h.viewOf(id))
			first := h.fetch(q)
			h.ack(first["g.a"], `{"a":true}`)
			next := h.fetch(q)
			h.ack(next["g.b"], `"b"`)
			golden(t, "graph_running", h.viewOf(id))
			h.fail(next["g.c"])
			golden(t, "graph_failed_running", h.viewOf(id))
			h.ack(first["g.e"], `"e"`)
			golden(t, "graph_failed", h.viewOf(id))
		}},
		{"graph_retryable", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000008"
			h.create(`{"id":"` + id + `","options":{"queue":"` + q + `"},"steps":[
				{"id":"a","type":"r.a","args":[],"depends_on":[]},
				{"id":"b","type":"r.b","args":[],"depends_on":["a"]},
				{"id":"c","type":"r.c","args":[],"depends_on":["a","b"]}]}`)
			h.failRetryable("r.a", q)
			golden(t, "steps_chain_retryable", h.viewOf(id))
		}},
		{"steps_group", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000009"
			h.create(`{"id":"` + id + `","name":"par","options":{"queue":"` + q + `"},"steps":[
				{"id":"a","type":"p.a","args":[]},{"id":"b","type":"p.b","args":[],"depends_on":[]}]}`)
			h.ack(h.fetch(q)["p.a"], `"a"`)
			golden(t, "steps_group", h.viewOf(id))
		}},
		{"steps_batch", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-00000000000a"
			h.create(`{"id":"` + id + `","options":{"queue":"` + q + `"},"steps":[
				{"id":"a","type":"s.a","args":[],"depends_on":[]},
				{"id":"b","type":"s.b","args":[],"depends_on":[]},
				{"id":"done","type":"s.done","args":[],"depends_on":["a","b"],"options":{"callback_type":"on_complete"}},
				{"id":"on-failure","type":"s.fail","args":[],"depends_on":["a","b"]}]}`)
			golden(t, "steps_batch_created", h.viewOf(id))
			jobs := h.fetch(q)
			h.ack(jobs["s.a"], `"a"`)
			h.fail(jobs["s.b"])
			golden(t, "steps_batch_callbacks_fired", h.viewOf(id))
			cbs := h.fetch(q)
			h.ack(cbs["s.done"], `"d"`)
			h.ack(cbs["s.fail"], `"f"`)
			golden(t, "steps_batch_done", h.viewOf(id))
		}},
		{"compensation", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-00000000000b"
			h.create(`{"id":"` + id + `","type":"chain","name":"order","steps":[
				{"type":"o.reserve","args":[],"options":{"queue":"` + q + `"},"compensate":{"type":"o.unreserve","args":["r"],"options":{"queue":"` + q + `"}}},
				{"type":"o.charge","args":[],"options":{"queue":"` + q + `"},"compensate":{"type":"o.refund","args":["c"],"options":{"queue":"` + q + `"}}},
				{"type":"o.ship","args":[],"options":{"queue":"` + q + `"},"compensate":{"type":"o.unship","args":[],"options":{"queue":"` + q + `"}}}],
				"on_failure":` + job("o.alert") + `}`)
			golden(t, "compensable_created", h.viewOf(id))
			h.ack(h.fetch(q)["o.reserve"], `{"reservation":"R1"}`)
			h.ack(h.fetch(q)["o.charge"], `{"charge":"C1"}`)
			h.fail(h.fetch(q)["o.ship"])
			golden(t, "compensation_running", h.viewOf(id))
			h.fail(h.fetch(q)["o.refund"])
			h.ack(h.fetch(q)["o.unreserve"], `"ok"`)
			golden(t, "compensation_failed_handler_running", h.viewOf(id))
			h.ack(h.fetch(q)["o.alert"], `"paged"`)
			golden(t, "compensation_failed_handler_completed", h.viewOf(id))
		}},
		{"compensable_completed", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-00000000000c"
			h.create(`{"id":"` + id + `","type":"chain","steps":[
				{"type":"k.pay","args":[],"options":{"queue":"` + q + `"},"compensate":{"type":"k.unpay","args":[],"options":{"queue":"` + q + `"}}},` + job("k.next") + `]}`)
			h.ack(h.fetch(q)["k.pay"], `"paid"`)
			h.ack(h.fetch(q)["k.next"], `"next"`)
			golden(t, "compensable_completed", h.viewOf(id))
		}},
		{"compensation_waiting", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-00000000000d"
			h.create(`{"id":"` + id + `","type":"chain","timeout_ms":1000,"steps":[
				{"type":"w.pay","args":[],"options":{"queue":"` + q + `"},"compensate":{"type":"w.unpay","args":[],"options":{"queue":"` + q + `"}}},` + job("w.next") + `]}`)
			h.fetch(q)
			h.clk.Add(2 * time.Second)
			if _, err := h.eng.Repair(context.Background(), 10); err != nil {
				t.Fatal(err)
			}
			golden(t, "compensation_waiting", h.viewOf(id))
		}},
		{"handlers", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-00000000000e"
			h.create(`{"id":"` + id + `","type":"chain","steps":[` + job("h.a") + `],
				"on_failure":{"type":"chain","steps":[` + job("h.page") + `,` + job("h.log") + `]},"on_cancel":` + job("h.cancelled") + `}`)
			golden(t, "handlers_waiting", h.viewOf(id))
			h.fail(h.fetch(q)["h.a"])
			golden(t, "handler_chain_running", h.viewOf(id))
			h.ack(h.fetch(q)["h.page"], `"paged"`)
			h.ack(h.fetch(q)["h.log"], `"logged"`)
			golden(t, "handler_chain_completed", h.viewOf(id))
			v, err := h.eng.Retry(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "handlers_retry_answer", v)
			h.ack(h.fetch(q)["h.a"], `"a"`)
			golden(t, "handlers_retried_completed", h.viewOf(id))
		}},
		{"cancelled", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-00000000000f"
			h.create(`{"id":"` + id + `","type":"chain","steps":[` + job("x.a") + `,{"type":"group","jobs":[` + job("x.b") + `,` + job("x.c") + `]},` + job("x.d") + `],
				"on_cancel":{"type":"chain","steps":[` + job("x.clean1") + `,` + job("x.clean2") + `]}}`)
			h.ack(h.fetch(q)["x.a"], `"a"`)
			jobs := h.fetch(q)
			h.ack(jobs["x.b"], `"b"`)
			v, err := h.eng.Cancel(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "cancel_answer", v)
			golden(t, "cancelled", h.viewOf(id))
			h.ack(h.fetch(q)["x.clean1"], `1`)
			h.ack(h.fetch(q)["x.clean2"], `2`)
			golden(t, "cancelled_handler_completed", h.viewOf(id))
		}},
		{"cancelled_group", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000010"
			h.create(`{"id":"` + id + `","type":"group","jobs":[` + job("y.a") + `,` + job("y.b") + `],"on_cancel":` + job("y.clean") + `}`)
			h.ack(h.fetch(q)["y.a"], `"a"`)
			if _, err := h.eng.Cancel(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			golden(t, "cancelled_group", h.viewOf(id))
		}},
		{"timed_out", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000011"
			h.create(`{"id":"` + id + `","type":"chain","timeout_ms":60000,"steps":[` + job("o.a") + `,` + job("o.b") + `,` + job("o.c") + `]}`)
			golden(t, "timeout_running", h.viewOf(id))
			h.ack(h.fetch(q)["o.a"], `1`)
			h.fetch(q)
			h.clk.Add(61 * time.Second)
			if _, err := h.eng.Repair(context.Background(), 10); err != nil {
				t.Fatal(err)
			}
			golden(t, "timed_out", h.viewOf(id))
		}},
		{"retried", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000012"
			h.create(`{"id":"` + id + `","type":"group","timeout_ms":1000,"jobs":[` + job("r.a") + `,{"type":"r.b","args":[],"options":{"queue":"vq2"}}]}`)
			h.ack(h.fetch(q)["r.a"], `1`)
			h.clk.Add(2 * time.Second)
			if _, err := h.eng.Repair(context.Background(), 10); err != nil {
				t.Fatal(err)
			}
			golden(t, "retried_timed_out", h.viewOf(id))
			v, err := h.eng.Retry(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "retried_answer", v)
			h.ack(h.fetch("vq2")["r.b"], `2`)
			golden(t, "retried_completed", h.viewOf(id))
		}},
		{"chain_retried_from_failed_step", func(t *testing.T, h *clocked) {
			id := "01900000-0000-7000-8000-000000000013"
			h.create(`{"id":"` + id + `","type":"chain","steps":[` + job("q.a") + `,{"type":"group","jobs":[` + job("q.b1") + `,` + job("q.b2") + `]},` + job("q.c") + `]}`)
			h.ack(h.fetch(q)["q.a"], `"a"`)
			g := h.fetch(q)
			h.ack(g["q.b1"], `"b1"`)
			h.fail(g["q.b2"])
			if _, err := h.eng.Retry(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			golden(t, "chain_retried_running", h.viewOf(id))
			h.ack(h.fetch(q)["q.b2"], `"b2"`)
			h.ack(h.fetch(q)["q.c"], `"c"`)
			golden(t, "chain_retried_completed", h.viewOf(id))
		}},
	}
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			s.run(t, newClocked(t))
		})
	}
	t.Run("creating", func(t *testing.T) {
		t.Parallel()
		st, _ := testenv.Table(t)
		qsvc := queue.NewService(st, queue.Config{})
		eng := workflow.New(st, workflow.Config{Admit: qsvc, AsyncItems: 5, CreationSlice: time.Minute})
		ctx := context.Background()
		id := "01900000-0000-7000-8000-000000000014"
		v, err := eng.Create(ctx, []byte(asyncBody(id, "vcq", 12)))
		if err != nil || !wfview.Creating(v) {
			t.Fatalf("not created asynchronously: %v", err)
		}
		golden(t, "creating_accepted", v)
		golden(t, "creating_nodes", must(eng.Get(ctx, id)))
		if err := eng.Resume(ctx, id); err != nil {
			t.Fatal(err)
		}
		v = must(eng.Get(ctx, id))
		if wfview.Creating(v) {
			t.Fatal("still creating after Resume")
		}
		golden(t, "creating_done", v)
		// The jobs phase: the nodes written, the first jobs being written.
		root := &wfstore.Root{JobCount: 3, Composite: wfstore.Composite{Item: wfstore.Item{WorkflowID: id, Path: wfstore.RootPath, Kind: wfdef.KindGroup,
			State: wfstate.Running, Times: wfstore.Times{CreatedAt: "2025-01-02T03:04:05.000Z"}}}}
		golden(t, "creating_jobs_phase", wfview.CreatingView(root, "jobs", 4, 9))
		root.Name = "named"
		golden(t, "creating_nodes_phase_named", wfview.CreatingView(root, "nodes", 0, 4))
	})
}
