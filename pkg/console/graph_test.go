package console

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
)

func view(t *testing.T, s string) *wfview.View {
	t.Helper()
	var v wfview.View
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

var nodeAttrs = regexp.MustCompile(`data-step-id="([^"]*)" data-state="([^"]*)"`)

// states reads every node's data-step-id and data-state from the SVG.
func states(svg string) map[string]string {
	out := map[string]string{}
	for _, m := range nodeAttrs.FindAllStringSubmatch(svg, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func nodeByID(g *Graph, id string) Node {
	for _, n := range g.Nodes {
		if n.ID == id {
			return n
		}
	}
	return Node{}
}

func TestLayoutTreeForm(t *testing.T) {
	t.Parallel()
	// The shape GET /ojs/v1/workflows/{id} answers today: a chain whose
	// step 1 is a group and step 2 a batch with a callback.
	v := view(t, `{"id":"wf-1","type":"chain","name":"etl","state":"running","steps":[
		{"index":0,"type":"data.extract","state":"completed","job_id":"j-0"},
		{"index":1,"type":"group","state":"running","jobs":[
			{"index":0,"type":"transform.csv","state":"active","job_id":"j-10","attempt":2,"progress":0.25},
			{"index":1,"type":"transform.json","state":"pending","job_id":"j-11"}]},
		{"index":2,"type":"batch","state":"waiting","jobs":[{"index":0,"type":"load","state":"waiting","job_id":null}],
		 "callbacks":{"on_success":{"index":-1,"type":"notify","state":"waiting","job_id":null}}}]}`)
	g := Layout(v)
	svg := string(g.SVG(func(id string) string { return "/jobs/" + id }))
	want := map[string]string{"wf-1": "running", "/s0": "completed", "/s1": "running", "/s1/j0": "active", "/s1/j1": "pending",
		"/s2": "waiting", "/s2/j0": "waiting", "/s2/on_success": "waiting"}
	// The running step draws its reported progress, a quarter of the bar;
	// no other step draws one.
	if bars := regexp.MustCompile(`class="nprog" data-progress="([^"]*)"[^>]*width="([^"]*)"`).FindAllStringSubmatch(svg, -1); len(bars) != 1 ||
		bars[0][1] != "0.25" || bars[0][2] != fmt.Sprintf("%.1f", (leafW-16)/4) {
		t.Errorf("progress bars %v, want one of 0.25", bars)
	}
	got := states(svg)
	for id, st := range want {
		if got[id] != st {
			t.Errorf("node %s: state %q, want %q (all: %v)", id, got[id], st, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("nodes %v, want %v", got, want)
	}
	// Chain order left to right, the group's jobs stacked, the callback
	// after the batch's jobs.
	s0, j10, j11, load, cb := nodeByID(g, "/s0"), nodeByID(g, "/s1/j0"), nodeByID(g, "/s1/j1"), nodeByID(g, "/s2/j0"), nodeByID(g, "/s2/on_success")
	if !(s0.X+s0.W < j10.X && j10.X == j11.X && j10.Y+j10.H <= j11.Y && j11.X+j11.W < load.X && load.X+load.W < cb.X) {
		t.Errorf("layout order: s0 %+v j10 %+v j11 %+v load %+v cb %+v", s0, j10, j11, load, cb)
	}
	// Leaves with a job link to it; waiting ones have none yet.
	if !strings.Contains(svg, `<a href="/jobs/j-10">`) || strings.Contains(svg, `href="/jobs/"`) {
		t.Errorf("job links: %s", svg)
	}
	if !strings.Contains(svg, "attempt 2") {
		t.Error("attempt not shown")
	}
	for _, n := range g.Nodes {
		if n.X < 0 || n.Y < 0 || n.X+n.W > g.W || n.Y+n.H > g.H {
			t.Errorf("node %s outside the canvas %vx%v: %+v", n.ID, g.W, g.H, n)
		}
	}
}

func TestLayoutDependencyForm(t *testing.T) {
	t.Parallel()
	// The dependency-graph form: flat steps with ids and depends_on.
	v := view(t, `{"id":"wf-2","type":"graph","state":"running","steps":[
		{"id":"fetch","type":"http.get","state":"completed","job_id":"a"},
		{"id":"parse","type":"parse","state":"active","job_id":"b","depends_on":["fetch"]},
		{"id":"thumbs","type":"image.thumbs","state":"pending","job_id":"c","depends_on":["fetch"]},
		{"id":"index","type":"search.index","state":"waiting","depends_on":["parse","thumbs"]},
		{"id":"audit","type":"audit.log","state":"waiting","depends_on":[]}]}`)
	g := Layout(v)
	got := states(string(g.SVG(nil)))
	for id, st := range map[string]string{"fetch": "completed", "parse": "active", "thumbs": "pending", "index": "waiting", "audit": "waiting"} {
		if got[id] != st {
			t.Errorf("node %s: %q, want %q", id, got[id], st)
		}
	}
	// Longest-path layers: fetch and audit in column 0, parse and thumbs
	// in column 1, index in column 2.
	f, p, th, ix, au := nodeByID(g, "fetch"), nodeByID(g, "parse"), nodeByID(g, "thumbs"), nodeByID(g, "index"), nodeByID(g, "audit")
	if f.X != au.X || p.X != th.X || !(f.X < p.X && p.X < ix.X) {
		t.Errorf("layers: fetch %v audit %v parse %v thumbs %v index %v", f.X, au.X, p.X, th.X, ix.X)
	}
	// One edge per dependency, each from the end of the dependency to the
	// start of the dependent.
	for _, d := range [][2]Node{{f, p}, {f, th}, {p, ix}, {th, ix}} {
		found := false
		for _, e := range g.Edges {
			if e.X1 == d[0].X+d[0].W && e.Y1 == d[0].Y+d[0].H/2 && e.X2 == d[1].X && e.Y2 == d[1].Y+d[1].H/2 {
				found = true
			}
		}
		if !found {
			t.Errorf("no edge %s -> %s", d[0].ID, d[1].ID)
		}
	}
}

func TestLayoutCycleAndUnknownDependency(t *testing.T) {
	t.Parallel()
	v := view(t, `{"id":"wf-3","type":"graph","state":"running","steps":[
		{"id":"a","type":"x","state":"waiting","depends_on":["b"]},
		{"id":"b","type":"y","state":"waiting","depends_on":["a","nope"]}]}`)
	g := Layout(v) // must terminate
	if len(states(string(g.SVG(nil)))) != 3 {
		t.Fatalf("nodes: %v", g.Nodes)
	}
}

func TestLayoutLargeGroupIsBounded(t *testing.T) {
	t.Parallel()
	var jobs []string
	for i := range 10000 {
		st := "completed"
		if i%3 == 0 {
			st = "active"
		}
		jobs = append(jobs, fmt.Sprintf(`{"index":%d,"type":"t","state":%q,"job_id":"j%d"}`, i, st, i))
	}
	v := view(t, `{"id":"wf-4","type":"batch","state":"running","jobs":[`+strings.Join(jobs, ",")+`],"callbacks":{"on_complete":{"type":"cb","state":"waiting"}}}`)
	g := Layout(v)
	if n := len(g.Nodes); n > MaxGroupShown+3 {
		t.Fatalf("%d nodes drawn", n)
	}
	more := nodeByID(g, "/more")
	if more.Label != fmt.Sprintf("+ %d more", 10000-MaxGroupShown+1) || !strings.Contains(more.Sub, "active") || more.State != "active" {
		t.Errorf("summary node: %+v", more)
	}
}

func TestSVGEscapes(t *testing.T) {
	t.Parallel()
	v := view(t, `{"id":"wf\"><script>","type":"chain","state":"running","steps":[{"index":0,"type":"<img src=x onerror=alert(1)>","state":"pending\"><b>","job_id":"\"><x"}]}`)
	svg := string(Layout(v).SVG(func(id string) string { return "/jobs/" + id }))
	for _, bad := range []string{"<script>", "<img", `"><b>`, `"><x`} {
		if strings.Contains(svg, bad) {
			t.Fatalf("unescaped %q in %s", bad, svg)
		}
	}
}

// A workflow still being created asynchronously has no steps in its view
// yet: the page draws its root alone, without failing.
func TestLayoutOfAWorkflowBeingCreated(t *testing.T) {
	for _, kind := range []string{"group", "batch", "chain"} {
		g := Layout(&wfview.View{ViewNode: wfview.ViewNode{ID: "019", Type: kind, Name: "big", State: "pending"},
			Creating: &wfview.ViewCreating{Phase: "nodes", NodesWritten: 10, NodesTotal: 5000}})
		if g == nil || g.W <= 0 || g.H <= 0 {
			t.Fatalf("%s: %+v", kind, g)
		}
		if svg := string(g.SVG(func(id string) string { return "/j/" + id })); !strings.Contains(svg, "<svg") {
			t.Fatalf("%s: %s", kind, svg)
		}
	}
}
