package soak

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Leaf behaviours, planned before the run.
const (
	behaveOK    = "ok"    // succeeds at its first attempt
	behaveFlaky = "flaky" // its first attempt fails (retryable), the second succeeds
	behaveFail  = "fail"  // every attempt fails (retryable) until max_attempts
)

// Pull-mode queues served by the in-test worker pool; push-mode jobs go to
// the worker function's queue.
var pullQueues = []string{"soak-a", "soak-b"}

const pushQueue = "lambda"

// Planned attempts per behaviour and the retry policies that bound them.
const (
	okMaxAttempts   = 8 // room for faults to cost attempts without exhausting them
	failMaxAttempts = 2
)

// node is a planned workflow node.
type node struct {
	kind      string // job, chain, group, batch, graph
	path      string
	children  []*node
	callbacks map[string]*node
	// deps are a graph step's dependencies (indexes of its siblings).
	deps []int
	// compensate marks a step that carries a compensate job (saga).
	compensate bool
	// sleepMS makes a push-mode leaf sleep (timed workflows).
	sleepMS int
	// timeoutMS is the workflow's timeout (timed workflows).
	timeoutMS int
	// leaves
	behave   string
	pull     bool
	callback bool
	tag      string
}

// wfPlan is one planned workflow.
type wfPlan struct {
	id    string
	index int
	kind  string // chain, group, batch, nested, graph, saga, timed
	mode  string // push, pull, mixed
	root  *node
}

func childPath(parent, seg string) string {
	if parent == "/" {
		return "/" + seg
	}
	return parent + "/" + seg
}

type planner struct {
	r    *rand.Rand
	mode string
	wf   int
}

func (p *planner) leaf(path string, callback bool) *node {
	n := &node{kind: "job", path: path, callback: callback, behave: behaveOK, tag: fmt.Sprintf("wf%d%s", p.wf, path)}
	if !callback {
		switch x := p.r.Float64(); {
		case x < 0.06:
			n.behave = behaveFail
		case x < 0.18:
			n.behave = behaveFlaky
		}
	}
	switch p.mode {
	case "pull":
		n.pull = true
	case "mixed":
		n.pull = p.r.IntN(2) == 0
	}
	return n
}

// composite builds a chain, group or batch at path whose children are
// leaves, or (while depth < maxDepth) sometimes composites; force makes
// the first child a composite (to guarantee the nesting depth).
func (p *planner) composite(kind, path string, depth, maxDepth int, force bool) *node {
	n := &node{kind: kind, path: path}
	seg := "j"
	if kind == "chain" {
		seg = "s"
	}
	count := 2 + p.r.IntN(3)
	for i := 0; i < count; i++ {
		cp := childPath(path, seg+strconv.Itoa(i))
		if depth < maxDepth && ((force && i == 0) || p.r.Float64() < 0.35) {
			kinds := []string{"chain", "group", "batch"}
			n.children = append(n.children, p.composite(kinds[p.r.IntN(3)], cp, depth+1, maxDepth, force && i == 0))
		} else {
			n.children = append(n.children, p.leaf(cp, false))
		}
	}
	if kind == "batch" {
		n.callbacks = map[string]*node{}
		for _, cb := range []string{"on_complete", "on_success", "on_failure"} {
			if p.r.Float64() < 0.6 {
				n.callbacks[cb] = p.leaf(childPath(path, cb), true)
			}
		}
		if len(n.callbacks) == 0 {
			n.callbacks["on_complete"] = p.leaf(childPath(path, "on_complete"), true)
		}
	}
	return n
}

// graph builds a dependency graph of 4 to 9 steps: two roots, a step
// that waits for both (so it is neither a chain nor a group), and steps
// that each wait for one or two earlier ones.
func (p *planner) graph() *node {
	n := &node{kind: "graph", path: "/"}
	count := 4 + p.r.IntN(6)
	for i := 0; i < count; i++ {
		c := p.leaf(childPath("/", "g"+strconv.Itoa(i)), false)
		switch {
		case i == 2:
			c.deps = []int{0, 1}
		case i > 2:
			a := p.r.IntN(i)
			c.deps = []int{a}
			if b := p.r.IntN(i); b != a && p.r.Float64() < 0.5 {
				c.deps = append(c.deps, b)
			}
		}
		n.children = append(n.children, c)
	}
	return n
}

// saga builds a chain of 3 or 4 steps that each carry a compensate job;
// the last one fails more often than not, so the completed steps are
// undone.
func (p *planner) saga() *node {
	n := &node{kind: "chain", path: "/"}
	count := 3 + p.r.IntN(2)
	for i := 0; i < count; i++ {
		c := p.leaf(childPath("/", "s"+strconv.Itoa(i)), false)
		c.compensate = true
		if i == count-1 && p.r.Float64() < 0.6 {
			c.behave = behaveFail
		}
		n.children = append(n.children, c)
	}
	return n
}

// timed builds a group whose timeout races its jobs: push-mode jobs sleep
// 100 to 1,500 ms, the timeout is 300 to 3,000 ms, so it ends either way.
func (p *planner) timed() *node {
	n := &node{kind: "group", path: "/", timeoutMS: 300 + p.r.IntN(2700)}
	count := 2 + p.r.IntN(4)
	for i := 0; i < count; i++ {
		c := p.leaf(childPath("/", "j"+strconv.Itoa(i)), false)
		c.behave = behaveOK
		if !c.pull {
			c.sleepMS = 100 + p.r.IntN(1400)
		}
		n.children = append(n.children, c)
	}
	return n
}

// plan draws n workflows from the seed: chains, groups and batches of
// leaves, and workflows nested three levels deep, in push, pull and mixed
// mode.
func plan(n int, seed uint64) []*wfPlan {
	r := rand.New(rand.NewPCG(seed, seed^0xabcdef))
	out := make([]*wfPlan, n)
	for i := range out {
		w := &wfPlan{index: i, id: uuid.Must(uuid.NewV7()).String()}
		switch x := r.Float64(); {
		case x < 0.4:
			w.mode = "push"
		case x < 0.8:
			w.mode = "pull"
		default:
			w.mode = "mixed"
		}
		p := &planner{r: r, mode: w.mode, wf: i}
		kinds := []string{"chain", "group", "batch"}
		switch x := r.Float64(); {
		case x < 0.45:
			w.kind = kinds[r.IntN(3)]
			w.root = p.composite(w.kind, "/", 1, 1, false)
		case x < 0.6:
			w.kind = "graph"
			w.root = p.graph()
		case x < 0.7:
			w.kind = "saga"
			w.root = p.saga()
		case x < 0.8:
			w.kind = "timed"
			w.root = p.timed()
		default:
			w.kind = "nested"
			w.root = p.composite(kinds[r.IntN(3)], "/", 1, 3, true)
		}
		out[i] = w
	}
	return out
}

// body renders the workflow request.
func (w *wfPlan) body() []byte {
	m := render(w.root)
	m["id"] = w.id
	m["name"] = fmt.Sprintf("soak-%d-%s-%s", w.index, w.kind, w.mode)
	b, _ := json.Marshal(m)
	return b
}

func render(n *node) map[string]any {
	if n.kind == "graph" {
		steps := make([]any, len(n.children))
		for i, c := range n.children {
			m := render(c)
			deps := []string{}
			for _, d := range c.deps {
				deps = append(deps, "s"+strconv.Itoa(d))
			}
			m["id"], m["depends_on"] = "s"+strconv.Itoa(i), deps
			steps[i] = m
		}
		return map[string]any{"steps": steps}
	}
	if n.kind == "job" {
		typ, q := "", pushQueue
		if n.pull {
			typ, q = "soak."+n.behave, pullQueues[len(n.tag)%len(pullQueues)]
		} else {
			typ = map[string]string{behaveOK: "test.echo", behaveFlaky: "test.fail_once", behaveFail: "test.fail_always"}[n.behave]
		}
		max := okMaxAttempts
		if n.behave == behaveFail {
			max = failMaxAttempts
		}
		args := []any{n.tag}
		if n.sleepMS > 0 {
			typ, args = "test.sleep", []any{n.sleepMS}
		}
		m := map[string]any{"type": typ, "args": args, "options": map[string]any{"queue": q,
			"retry": map[string]any{"max_attempts": max, "initial_interval_ms": 200, "backoff_coefficient": 1, "jitter": false}}}
		if n.compensate {
			ctyp := "test.echo"
			if n.pull {
				ctyp = "soak." + behaveOK
			}
			m["compensate"] = map[string]any{"type": ctyp, "args": []any{"undo " + n.tag}, "options": map[string]any{"queue": q,
				"retry": map[string]any{"max_attempts": okMaxAttempts, "initial_interval_ms": 200, "backoff_coefficient": 1, "jitter": false}}}
		}
		return m
	}
	kids := make([]any, len(n.children))
	for i, c := range n.children {
		kids[i] = render(c)
	}
	m := map[string]any{"type": n.kind}
	if n.timeoutMS > 0 {
		m["timeout_ms"] = n.timeoutMS
	}
	if n.kind == "chain" {
		m["steps"] = kids
	} else {
		m["jobs"] = kids
	}
	if n.kind == "batch" {
		cbs := map[string]any{}
		for name, c := range n.callbacks {
			cbs[name] = render(c)
		}
		m["callbacks"] = cbs
	}
	return m
}

// walk visits n and every descendant, callbacks included.
func walk(n *node, f func(*node)) {
	f(n)
	for _, c := range n.children {
		walk(c, f)
	}
	for _, name := range []string{"on_complete", "on_success", "on_failure"} {
		if c := n.callbacks[name]; c != nil {
			walk(c, f)
		}
	}
}

func (w *wfPlan) leaves() (all, counted int) {
	walk(w.root, func(n *node) {
		if n.kind == "job" {
			all++
			if !n.callback {
				counted++
			}
		}
	})
	return
}

func (w *wfPlan) depth() int {
	var d func(n *node) int
	d = func(n *node) int {
		best := 0
		for _, c := range n.children {
			best = max(best, d(c))
		}
		return best + 1
	}
	return d(w.root)
}

func (w *wfPlan) hasPull() bool {
	out := false
	walk(w.root, func(n *node) { out = out || (n.kind == "job" && n.pull) })
	return out
}

func isCallbackPath(path string) bool {
	return strings.HasPrefix(path[strings.LastIndex(path, "/")+1:], "on_")
}
