package console

import (
	"cmp"
	"fmt"
	"html"
	"maps"
	"slices"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
)

// The workflow graph is drawn from the view GET /ojs/v1/workflows/{id}
// answers (wfview.View; both forms draw):
//
//   - the nested tree form: a composite step has "type" chain, group or
//     batch and its children in "steps" (chain) or "jobs" (group, batch),
//     a batch its callbacks in "callbacks" (name -> job);
//   - the dependency form: a composite whose children carry "depends_on"
//     (an array of sibling step ids) is laid out as a layered DAG
//     (longest-path layering: a step's column is one more than its deepest
//     dependency's).
//
// Composites are drawn as boxes around their children; groups wider than
// MaxGroupShown are cut, the rest summarised in one node.

// MaxGroupShown is the most children of one composite that are drawn.
const MaxGroupShown = 40

const (
	leafW, leafH = 176.0, 48.0
	pad          = 12.0
	labelH       = 22.0
	gapX         = 40.0
	gapY         = 12.0
	fork         = 22.0
)

// Node is one drawn step.
type Node struct {
	ID, Label, Sub, State, Kind, JobID string
	X, Y, W, H                         float64
	Composite                          bool
	// Progress is a running job's reported progress, 0 to 1 (nil: none).
	Progress *float64
}

// Edge is a drawn dependency: from the end of one step to the start of
// the next.
type Edge struct {
	X1, Y1, X2, Y2 float64
}

// Graph is a laid-out workflow.
type Graph struct {
	W, H  float64
	Nodes []Node
	Edges []Edge
}

// block is a laid-out subtree, relative to its own origin.
type block struct {
	w, h       float64
	nodes      []Node
	edges      []Edge
	inX, inY   float64
	outX, outY float64
}

func (b *block) place(dx, dy float64) *block {
	c := &block{w: b.w, h: b.h, inX: b.inX + dx, inY: b.inY + dy, outX: b.outX + dx, outY: b.outY + dy}
	for _, n := range b.nodes {
		n.X += dx
		n.Y += dy
		c.nodes = append(c.nodes, n)
	}
	for _, e := range b.edges {
		c.edges = append(c.edges, Edge{e.X1 + dx, e.Y1 + dy, e.X2 + dx, e.Y2 + dy})
	}
	return c
}

func (b *block) add(c *block) {
	b.nodes = append(b.nodes, c.nodes...)
	b.edges = append(b.edges, c.edges...)
}

// children are a composite's children and the field holding them
// ("steps" or "jobs"; "" for a job step).
func children(m *wfview.ViewNode) ([]wfview.ViewNode, string) {
	switch {
	case m.Steps != nil:
		return m.Steps, "steps"
	case m.Jobs != nil:
		return m.Jobs, "jobs"
	}
	return nil, ""
}

func isComposite(m *wfview.ViewNode) bool {
	if _, k := children(m); k != "" {
		return true
	}
	return m.Callbacks != nil
}

// stepID is a step's id: its own "id", else its path.
func stepID(m *wfview.ViewNode, path string) string { return cmp.Or(m.ID, path) }

// Layout lays out a workflow view (the "workflow" object of GET
// /ojs/v1/workflows/{id}).
func Layout(view *wfview.View) *Graph {
	b := layout(&view.ViewNode, "/", 0)
	g := &Graph{W: b.w + 2*pad, H: b.h + 2*pad}
	p := b.place(pad, pad)
	g.Nodes, g.Edges = p.nodes, p.edges
	return g
}

func layout(m *wfview.ViewNode, path string, depth int) *block {
	if !isComposite(m) || depth > 12 {
		return leaf(m, path)
	}
	kids, field := children(m)
	seg := "s"
	if field == "jobs" {
		seg = "j"
	}
	// Children's blocks and ids.
	type kid struct {
		m    *wfview.ViewNode
		id   string
		path string
	}
	var ks []kid
	dag := false
	for i := range kids {
		c := &kids[i]
		idx := i
		if c.Index != nil {
			idx = *c.Index
		}
		p := wfdef.ChildPath(path, fmt.Sprintf("%s%d", seg, idx))
		ks = append(ks, kid{m: c, id: stepID(c, p), path: p})
		if c.DependsOn != nil {
			dag = true
		}
	}
	var more []kid
	if len(ks) > MaxGroupShown {
		ks, more = ks[:MaxGroupShown-1], ks[MaxGroupShown-1:]
	}
	blocks := make([]*block, len(ks))
	for i, k := range ks {
		blocks[i] = layout(k.m, k.path, depth+1)
	}
	if len(more) > 0 {
		counts := map[string]int{}
		for _, k := range more {
			counts[k.m.State]++
		}
		blocks = append(blocks, summary(path, counts, len(more)))
		ks = append(ks, kid{id: wfdef.ChildPath(path, "more")})
	}
	kind := m.Type
	out := &block{}
	top := labelH
	var body *block
	switch {
	case dag:
		ids := make([]string, len(ks))
		deps := make([][]string, len(ks))
		for i, k := range ks {
			ids[i] = k.id
			if k.m != nil {
				deps[i] = k.m.DependsOn
			}
		}
		body = layered(blocks, ids, deps)
	case kind == "chain" || field == "steps":
		body = row(blocks)
	default:
		body = column(blocks)
	}
	inner := body.place(pad, top)
	out.add(inner)
	w, h := inner.w+2*pad, inner.h+top+pad
	outX, outY := inner.outX, inner.outY
	// A batch's callbacks follow its jobs: one column, joined at a point.
	if cbs := m.Callbacks; len(cbs) > 0 {
		names := slices.Sorted(maps.Keys(cbs))
		var cbBlocks []*block
		for _, n := range names {
			cm := cbs[n]
			b := layout(&cm, wfdef.ChildPath(path, n), depth+1)
			for i := range b.nodes {
				if b.nodes[i].Sub == "" {
					b.nodes[i].Sub = n
				} else {
					b.nodes[i].Sub = n + " · " + b.nodes[i].Sub
				}
			}
			cbBlocks = append(cbBlocks, b)
		}
		col := column(cbBlocks)
		x := w - pad + gapX
		y := max(top+(inner.h-col.h)/2, top)
		placed := col.place(x, y)
		out.add(placed)
		out.edges = append(out.edges, Edge{outX, outY, placed.inX, placed.inY})
		w, h = x+col.w+pad, max(h, y+col.h+pad)
		outX, outY = placed.outX, placed.outY
	}
	out.w, out.h = w, h
	out.inX, out.inY = 0, inner.inY
	out.edges = append(out.edges, Edge{0, inner.inY, inner.inX, inner.inY}, Edge{outX, outY, w, outY})
	out.outX, out.outY = w, outY
	label := kind
	if m.Name != "" {
		label = kind + " · " + m.Name
	}
	box := Node{ID: stepID(m, path), Label: label, State: m.State, Kind: kind, X: 0, Y: 0, W: w, H: h, Composite: true}
	out.nodes = append([]Node{box}, out.nodes...)
	return out
}

func leaf(m *wfview.ViewNode, path string) *block {
	n := Node{ID: stepID(m, path), Label: m.Type, State: m.State, Kind: "job", W: leafW, H: leafH}
	if j := m.ViewJob; j != nil {
		if j.JobID != nil {
			n.JobID = *j.JobID
		}
		if j.Attempt != nil && *j.Attempt != 0 {
			n.Sub = fmt.Sprintf("attempt %d", *j.Attempt)
		}
		n.Progress = j.Progress
	}
	n.State = cmp.Or(n.State, "waiting")
	return &block{w: leafW, h: leafH, nodes: []Node{n}, inX: 0, inY: leafH / 2, outX: leafW, outY: leafH / 2}
}

// summary stands for the children of a large composite that are not drawn.
func summary(path string, counts map[string]int, n int) *block {
	state := "completed"
	for _, s := range []string{"completed", "pending", "waiting", "cancelled", "failed", "active"} {
		if counts[s] > 0 {
			state = s
		}
	}
	var parts []string
	for _, s := range []string{"active", "pending", "waiting", "completed", "failed", "cancelled"} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	node := Node{ID: wfdef.ChildPath(path, "more"), Label: fmt.Sprintf("+ %d more", n), Sub: strings.Join(parts, ", "), State: state, Kind: "more", W: leafW, H: leafH}
	return &block{w: leafW, h: leafH, nodes: []Node{node}, inX: 0, inY: leafH / 2, outX: leafW, outY: leafH / 2}
}

// row places blocks left to right, each step's end joined to the next
// one's start.
func row(bs []*block) *block {
	out := &block{}
	maxH := 0.0
	for _, b := range bs {
		maxH = max(maxH, b.h)
	}
	x := 0.0
	var prev *block
	for _, b := range bs {
		p := b.place(x, (maxH-b.h)/2)
		out.add(p)
		if prev != nil {
			out.edges = append(out.edges, Edge{prev.outX, prev.outY, p.inX, p.inY})
		} else {
			out.inX, out.inY = p.inX, p.inY
		}
		prev = p
		x += b.w + gapX
	}
	out.w, out.h = max(x-gapX, 0), maxH
	if prev != nil {
		out.outX, out.outY = prev.outX, prev.outY
	}
	return out
}

// column stacks blocks (run in parallel) between a fork and a join.
func column(bs []*block) *block {
	out := &block{}
	maxW := 0.0
	for _, b := range bs {
		maxW = max(maxW, b.w)
	}
	y := 0.0
	var placed []*block
	for _, b := range bs {
		p := b.place(fork, y)
		placed = append(placed, p)
		out.add(p)
		y += b.h + gapY
	}
	y = max(y-gapY, 0)
	out.w, out.h = maxW+2*fork, y
	out.inX, out.inY = 0, y/2
	out.outX, out.outY = out.w, y/2
	for _, p := range placed {
		out.edges = append(out.edges, Edge{0, y / 2, p.inX, p.inY}, Edge{p.outX, p.outY, out.w, y / 2})
	}
	return out
}

// layered lays blocks out as a DAG: deps[i] are the ids blocks[i]
// depends on; a block's column is its longest dependency path.
func layered(bs []*block, ids []string, deps [][]string) *block {
	idx := map[string]int{}
	for i, id := range ids {
		idx[id] = i
	}
	layer := make([]int, len(bs))
	state := make([]int, len(bs)) // 0 new, 1 visiting, 2 done
	var visit func(i int) int
	visit = func(i int) int {
		switch state[i] {
		case 1: // a cycle: cut it here
			return 0
		case 2:
			return layer[i]
		}
		state[i] = 1
		l := 0
		for _, d := range deps[i] {
			if j, ok := idx[d]; ok {
				l = max(l, visit(j)+1)
			}
		}
		state[i], layer[i] = 2, l
		return l
	}
	maxL := 0
	for i := range bs {
		maxL = max(maxL, visit(i))
	}
	cols := make([][]int, maxL+1)
	for i := range bs {
		cols[layer[i]] = append(cols[layer[i]], i)
	}
	colW := make([]float64, len(cols))
	colH := make([]float64, len(cols))
	for c, is := range cols {
		for k, i := range is {
			colW[c] = max(colW[c], bs[i].w)
			colH[c] += bs[i].h
			if k > 0 {
				colH[c] += gapY * 2
			}
		}
	}
	maxH := 0.0
	for _, h := range colH {
		maxH = max(maxH, h)
	}
	out := &block{}
	placed := make([]*block, len(bs))
	x := fork
	for c, is := range cols {
		y := (maxH - colH[c]) / 2
		for _, i := range is {
			placed[i] = bs[i].place(x+(colW[c]-bs[i].w)/2, y)
			out.add(placed[i])
			y += bs[i].h + gapY*2
		}
		x += colW[c]
		if c < len(cols)-1 {
			x += gapX * 1.5
		}
	}
	out.w, out.h = x+fork, maxH
	out.inX, out.inY = 0, maxH/2
	out.outX, out.outY = out.w, maxH/2
	hasDependent := map[int]bool{}
	for i := range bs {
		rooted := false
		for _, d := range deps[i] {
			if j, ok := idx[d]; ok && j != i {
				out.edges = append(out.edges, Edge{placed[j].outX, placed[j].outY, placed[i].inX, placed[i].inY})
				hasDependent[j] = true
				rooted = true
			}
		}
		if !rooted {
			out.edges = append(out.edges, Edge{0, maxH / 2, placed[i].inX, placed[i].inY})
		}
	}
	for i := range bs {
		if !hasDependent[i] {
			out.edges = append(out.edges, Edge{placed[i].outX, placed[i].outY, out.w, maxH / 2})
		}
	}
	return out
}

// SVG renders the graph; jobURL links a job id to its page.
func (g *Graph) SVG(jobURL func(id string) string) SafeHTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="wf-graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="workflow graph">`, g.W, g.H, g.W, g.H)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead"/></marker></defs>`)
	for _, n := range g.Nodes {
		if n.Composite {
			fmt.Fprintf(&b, `<g class="node composite state-%s" data-step-id="%s" data-state="%s" data-kind="%s">`, cls(n.State), esc(n.ID), esc(n.State), esc(n.Kind))
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="10"/>`, n.X, n.Y, n.W, n.H)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="clabel">%s · %s</text></g>`, n.X+10, n.Y+15, esc(n.Label), esc(n.State))
		}
	}
	// Arrowheads only where an edge reaches a step's box (not at the
	// ports of the boxes around composites, where edges join).
	entries := map[[2]int]bool{}
	for _, n := range g.Nodes {
		if !n.Composite {
			entries[[2]int{int(n.X * 10), int((n.Y + n.H/2) * 10)}] = true
		}
	}
	for _, e := range g.Edges {
		if e.X1 == e.X2 && e.Y1 == e.Y2 {
			continue
		}
		mx := (e.X1 + e.X2) / 2
		arrow := ""
		if entries[[2]int{int(e.X2 * 10), int(e.Y2 * 10)}] {
			arrow = ` marker-end="url(#arrow)"`
		}
		fmt.Fprintf(&b, `<path class="edge" d="M %.1f %.1f C %.1f %.1f, %.1f %.1f, %.1f %.1f"%s/>`, e.X1, e.Y1, mx, e.Y1, mx, e.Y2, e.X2, e.Y2, arrow)
	}
	for _, n := range g.Nodes {
		if n.Composite {
			continue
		}
		fmt.Fprintf(&b, `<g class="node leaf state-%s" data-step-id="%s" data-state="%s" data-kind="%s"`, cls(n.State), esc(n.ID), esc(n.State), esc(n.Kind))
		if n.JobID != "" {
			fmt.Fprintf(&b, ` data-job-id="%s"`, esc(n.JobID))
		}
		b.WriteString(`>`)
		if n.JobID != "" && jobURL != nil {
			fmt.Fprintf(&b, `<a href="%s">`, esc(jobURL(n.JobID)))
		}
		fmt.Fprintf(&b, `<title>%s: %s</title>`, esc(n.ID), esc(n.State))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="7"/>`, n.X, n.Y, n.W, n.H)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="nlabel">%s</text>`, n.X+10, n.Y+19, esc(clip(n.Label, 24)))
		sub := n.State
		if n.Sub != "" {
			sub += " · " + n.Sub
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="nsub">%s</text>`, n.X+10, n.Y+37, esc(clip(sub, 30)))
		if p := n.Progress; p != nil {
			fmt.Fprintf(&b, `<rect class="nprog" data-progress="%v" x="%.1f" y="%.1f" width="%.1f" height="3" rx="1.5"/>`,
				*p, n.X+8, n.Y+n.H-7, (n.W-16)*min(max(*p, 0), 1))
		}
		if n.JobID != "" && jobURL != nil {
			b.WriteString(`</a>`)
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return SafeHTML(b.String()) // every value above is escaped by esc
}

func esc(s string) string { return html.EscapeString(s) }

// cls keeps a state usable as a class name.
func cls(s string) string {
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || r == '_' || r == '-' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return b.String()
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
