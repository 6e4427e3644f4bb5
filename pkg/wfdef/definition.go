// Package wfdef parses and validates OJS workflow definitions (the tree
// form and the dependency-graph form) into a tree of Def nodes with their
// paths, names those paths, derives each step's job id (JobID) and owns
// the limits a definition must keep. It stores nothing.
package wfdef

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/jsoncase"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Node kinds.
const (
	KindJob   = "job"
	KindChain = "chain"
	KindGroup = "group"
	KindBatch = "batch"
	// KindGraph is a dependency graph: steps that wait for the steps
	// they name in depends_on (ojs-http-binding.md section 14.1).
	KindGraph = "graph"
)

// Limits, stated in the README and the manifest.
const (
	// MaxDepth is the deepest nesting of composites accepted (the root is
	// level 1): a chain of groups of chains of batches of groups.
	MaxDepth = 5
	// MaxJobs bounds the jobs (leaves) of one workflow.
	MaxJobs = 10_000
	// MaxChildren bounds the steps or jobs of one composite.
	MaxChildren = 10_000
	// MaxGraphSteps bounds the steps of a dependency graph: its progress
	// and structure live on one item (see docs/data-model.md).
	MaxGraphSteps = 2_000
	// MaxGraphEdges bounds the dependencies of a graph, all steps together.
	MaxGraphEdges = 20_000
	// MaxDependsOn bounds the dependencies of one step.
	MaxDependsOn = 100
	// MaxStepIDLength bounds a step id (bytes).
	MaxStepIDLength = 128
	// MaxNameLength bounds a composite's name (bytes): names are stored
	// in the node items (at most 400 KB each).
	MaxNameLength = 1024
	// MaxTimeout bounds a workflow's or a node's timeout_ms: 30 days.
	MaxTimeout = 30 * 24 * time.Hour
	// MaxCompensations bounds the steps of one workflow that carry a
	// compensate job (they run one after another when it fails).
	MaxCompensations = 1_000
)

// Callbacks are the callback names of a batch, in firing order.
var Callbacks = []string{"on_complete", "on_success", "on_failure"}

// Def is a parsed workflow node.
type Def struct {
	Kind string
	Name string
	Path string
	// Index is the position among the parent's children (-1: callback).
	Index int
	// StepID is the client's id of a step (the dependency-graph form).
	StepID  string
	JobType string
	Request json.RawMessage // leaf: the job request
	// Deps are the sibling indexes a graph step waits for.
	Deps     []int
	Children []*Def
	// Callbacks maps on_complete/on_success/on_failure to leaf defs.
	Callbacks map[string]*Def
	// TimeoutMS bounds a composite's run: when it passes, what has not
	// started is cancelled and the node fails (workflow_timeout).
	TimeoutMS int64
	// Compensate is a job step's compensation (a job request): it runs,
	// in reverse order of completion, when the workflow fails.
	Compensate json.RawMessage
	// Handlers maps on_failure and on_cancel (root only) to a job or a
	// chain of jobs run once the workflow fails or is cancelled.
	Handlers map[string]*Def
}

// Handler names, and the paths special subtrees live under: a handler's
// nodes under /~<name>, a failed workflow's compensation under
// /~compensate. No step of a workflow's own tree has a "~" segment.
const (
	HandlerOnFailure = "on_failure"
	HandlerOnCancel  = "on_cancel"
	// CompensatePath is the path of a failed workflow's compensation:
	// its steps are CompensatePath/s<k>.
	CompensatePath = "/~compensate"
)

// Handlers lists the workflow handlers.
var Handlers = []string{HandlerOnFailure, HandlerOnCancel}

// Problem is one validation failure with its JSON path.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Parsed is a validated workflow creation request.
type Parsed struct {
	Root *Def
	// Tenant is the tenant every job of the workflow belongs to
	// (AssignTenant; "" for none).
	Tenant string
	// ID is the client-chosen workflow id, if any.
	ID string
	// Jobs is the number of leaf jobs, callbacks excluded.
	Jobs int
	// Form is "steps" when the request used the dependency-graph form.
	Form string
	// Kept holds, once each, the queue and result_ttl of its jobs
	// (callbacks, handlers and compensations too): what its retention
	// derives from (workflow.Engine.retention).
	Kept map[Kept]bool
}

// Kept is a job's queue and result_ttl (TTL, when Set).
type Kept struct {
	Queue string
	TTL   int64
	Set   bool
}

// keep records j's queue and result_ttl in p.kept.
func (p *parser) keep(j *job.Job) {
	k := Kept{Queue: j.Queue}
	if j.ResultTTL != nil {
		k.TTL, k.Set = *j.ResultTTL, true
	}
	p.kept[k] = true
}

type rawNode struct {
	Type      *string                    `json:"type"`
	ID        *string                    `json:"id"`
	Name      *string                    `json:"name"`
	Steps     []json.RawMessage          `json:"steps"`
	Jobs      []json.RawMessage          `json:"jobs"`
	Callbacks map[string]json.RawMessage `json:"callbacks"`
	Options   json.RawMessage            `json:"options"`
	TimeoutMS json.RawMessage            `json:"timeout_ms"`
	OnFailure json.RawMessage            `json:"on_failure"`
	OnCancel  json.RawMessage            `json:"on_cancel"`
}

// Parse validates a workflow creation request, in the tree form or the
// dependency-graph form (ojs-http-binding.md 14.1). Every problem is listed
// with its JSON path in one 400 invalid_workflow error.
func Parse(raw []byte, now time.Time) (*Parsed, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || !json.Valid(t) {
		return nil, ojserr.New(ojserr.InvalidPayload, "The request body is empty or not valid JSON.").With("field", "body")
	}
	var rn rawNode
	if t[0] != '{' || jsoncase.Unmarshal(t, &rn) != nil {
		return nil, invalid([]Problem{{"$", "a workflow must be a JSON object: a chain, group or batch with 'type', or 'steps' with ids and depends_on"}})
	}
	out := &Parsed{}
	if rn.ID != nil {
		if job.ValidateID(*rn.ID) != nil {
			return nil, invalid([]Problem{{"$.id", "must be a lowercase hyphenated UUIDv7"}})
		}
		out.ID = *rn.ID
	}
	p := &parser{now: now, kept: map[Kept]bool{}}
	out.Kept = p.kept
	if rn.Type == nil || *rn.Type == KindGraph {
		out.Form = "steps"
		out.Root = p.steps(rn)
	} else if !isComposite(rn) {
		p.add("$.type", fmt.Sprintf("must be chain, group or batch (or leave type out and send steps with ids and depends_on); got %q", *rn.Type))
	} else {
		out.Root = p.node(t, "$", "/", 0, 1)
	}
	if out.Root != nil {
		if out.Form == "steps" {
			out.Root.TimeoutMS = p.timeout(rn.TimeoutMS, "$.timeout_ms")
		}
		p.handlers(out.Root, rn)
	}
	if p.jobs > MaxJobs {
		p.add("$", fmt.Sprintf("the workflow has %d jobs; the maximum is %d", p.jobs, MaxJobs))
	}
	if p.compensations > MaxCompensations {
		p.add("$", fmt.Sprintf("%d steps carry a compensate job; the maximum is %d", p.compensations, MaxCompensations))
	}
	if len(p.problems) > 0 {
		return nil, invalid(p.problems)
	}
	out.Jobs = p.jobs
	return out, nil
}

func invalid(ps []Problem) error {
	msg := "Workflow validation failed: " + ps[0].Path + " " + ps[0].Message
	if len(ps) > 1 {
		msg += fmt.Sprintf(" (and %d more problems)", len(ps)-1)
	}
	return ojserr.Newf(ojserr.InvalidWorkflow, "%s", msg).With("validation_errors", ps)
}

type parser struct {
	now           time.Time
	problems      []Problem
	jobs          int
	compensations int
	kept          map[Kept]bool
}

// timeout parses a timeout_ms value (absent: 0).
func (p *parser) timeout(raw json.RawMessage, jp string) int64 {
	if len(raw) == 0 || isNull(raw) {
		return 0
	}
	var ms int64
	if err := json.Unmarshal(raw, &ms); err != nil || ms <= 0 || ms > MaxTimeout.Milliseconds() {
		p.add(jp, fmt.Sprintf("must be a whole number of milliseconds from 1 to %d (30 days)", MaxTimeout.Milliseconds()))
		return 0
	}
	return ms
}

// handlers parses the root's on_failure and on_cancel: a job, or a chain
// of jobs.
func (p *parser) handlers(root *Def, rn rawNode) {
	for _, h := range []struct {
		name string
		raw  json.RawMessage
	}{{HandlerOnFailure, rn.OnFailure}, {HandlerOnCancel, rn.OnCancel}} {
		if len(h.raw) == 0 || isNull(h.raw) {
			continue
		}
		jp := "$." + h.name
		var hn rawNode
		if jsoncase.Unmarshal(h.raw, &hn) != nil {
			p.add(jp, "must be a job or a chain of jobs")
			continue
		}
		before := p.jobs
		var d *Def
		if hn.Type != nil && *hn.Type == KindChain {
			d = &Def{Kind: KindChain, Path: HandlerPath(h.name), Index: -1}
			if len(hn.Steps) == 0 {
				p.add(jp+".steps", "steps array must contain at least one element")
			}
			for i, st := range hn.Steps {
				var sn rawNode
				if jsoncase.Unmarshal(st, &sn) == nil && isWorkflow(sn) {
					p.add(fmt.Sprintf("%s.steps[%d]", jp, i), "a handler's chain holds jobs only")
					continue
				}
				if c := p.leaf(st, fmt.Sprintf("%s.steps[%d]", jp, i), ChildPath(d.Path, Segment(KindChain, i)), i); c != nil {
					d.Children = append(d.Children, c)
				}
			}
		} else if isComposite(hn) {
			p.add(jp, "must be a job or a chain of jobs")
			continue
		} else {
			d = p.leaf(h.raw, jp, HandlerPath(h.name), -1)
		}
		p.jobs = before // handlers are not counted in job_count
		if d == nil {
			continue
		}
		if root.Handlers == nil {
			root.Handlers = map[string]*Def{}
		}
		root.Handlers[h.name] = d
	}
}

// fits reports, as a problem at jp's args, a job whose item would pass
// store.MaxJobItemBytes (a request well under it is not encoded to see).
func (p *parser) fits(j *job.Job, raw json.RawMessage, jp string) bool {
	if len(raw)+16<<10 <= store.MaxJobItemBytes {
		return true
	}
	n, err := store.CheckJobItem(j, 0)
	if err == nil {
		return true
	}
	if n > 0 {
		p.add(jp+".args", fmt.Sprintf("the job takes %d bytes as stored (args and meta compressed); a job is stored in at most %d: pass a reference to the data (an S3 object, say) instead", n, store.MaxJobItemBytes))
	} else {
		p.add(jp, "the job cannot be encoded: "+err.Error())
	}
	return false
}

// name is a composite's name ("" when absent).
func (p *parser) name(rn rawNode, jp string) string {
	if rn.Name != nil && len(*rn.Name) > MaxNameLength {
		p.add(jp+".name", fmt.Sprintf("at most %d bytes", MaxNameLength))
	}
	if rn.Name == nil {
		return ""
	}
	return *rn.Name
}

func (p *parser) add(path, msg string) {
	if len(p.problems) < 100 {
		p.problems = append(p.problems, Problem{path, msg})
	}
}

// isWorkflow reports a composite or a dependency graph.
func isWorkflow(rn rawNode) bool { return isComposite(rn) || (rn.Type != nil && *rn.Type == KindGraph) }

// isComposite reports a chain, group or batch: these type names are
// reserved for workflows, so such a node is a nested workflow, never a job.
func isComposite(rn rawNode) bool {
	return rn.Type != nil && slices.Contains([]string{KindChain, KindGroup, KindBatch}, *rn.Type)
}

// node parses one node of the tree form at JSON path jp and tree path tp.
func (p *parser) node(raw json.RawMessage, jp, tp string, index, depth int) *Def {
	var rn rawNode
	if err := jsoncase.Unmarshal(raw, &rn); err != nil {
		p.add(jp, "must be a job or a workflow object")
		return nil
	}
	if !isComposite(rn) {
		if rn.Type != nil && *rn.Type == KindGraph {
			p.add(jp+".type", "a dependency graph (steps with depends_on) can only be a whole workflow")
			return nil
		}
		return p.leaf(raw, jp, tp, index)
	}
	d := &Def{Kind: *rn.Type, Path: tp, Index: index, TimeoutMS: p.timeout(rn.TimeoutMS, jp+".timeout_ms")}
	if tp != "/" && (rn.OnFailure != nil || rn.OnCancel != nil) {
		p.add(jp, "on_failure and on_cancel belong to the workflow, not to a nested "+*rn.Type)
	}
	d.Name = p.name(rn, jp)
	if depth > MaxDepth {
		p.add(jp, fmt.Sprintf("nesting is %d levels deep; the maximum is %d", depth, MaxDepth))
		return d
	}
	field, items := "jobs", rn.Jobs
	if d.Kind == KindChain {
		field, items = "steps", rn.Steps
		if rn.Jobs != nil {
			p.add(jp+".jobs", "a chain lists its steps in 'steps'")
		}
	} else if rn.Steps != nil {
		p.add(jp+".steps", "a "+d.Kind+" lists its jobs in 'jobs'")
	}
	if len(items) == 0 {
		p.add(jp+"."+field, field+" array must contain at least one element")
	}
	if len(items) > MaxChildren {
		p.add(jp+"."+field, fmt.Sprintf("at most %d elements", MaxChildren))
		return d
	}
	for i, it := range items {
		c := p.node(it, fmt.Sprintf("%s.%s[%d]", jp, field, i), ChildPath(tp, Segment(d.Kind, i)), i, depth+1)
		if c != nil {
			d.Children = append(d.Children, c)
		}
	}
	if d.Kind == KindBatch {
		if len(rn.Callbacks) == 0 {
			p.add(jp+".callbacks", "a batch needs at least one of on_complete, on_success, on_failure (use a group for no callbacks)")
		}
		d.Callbacks = map[string]*Def{}
		for name, cb := range rn.Callbacks {
			if !isCallbackName(name) {
				p.add(jp+".callbacks."+name, "unknown callback; use on_complete, on_success or on_failure")
				continue
			}
			var cn rawNode
			if jsoncase.Unmarshal(cb, &cn) == nil && isComposite(cn) {
				p.add(jp+".callbacks."+name, "a callback is a job, not a workflow")
				continue
			}
			if c := p.leaf(cb, jp+".callbacks."+name, ChildPath(tp, name), -1); c != nil {
				p.jobs-- // callbacks are not counted in job_count
				d.Callbacks[name] = c
			}
		}
	} else if rn.Callbacks != nil {
		p.add(jp+".callbacks", "only a batch has callbacks")
	}
	return d
}

func isCallbackName(name string) bool { return slices.Contains(Callbacks, name) }

func (p *parser) leaf(raw json.RawMessage, jp, tp string, index int) *Def {
	p.jobs++
	var probe map[string]json.RawMessage
	var compensate json.RawMessage
	if err := json.Unmarshal(raw, &probe); err == nil {
		if _, ok := probe["id"]; ok {
			p.add(jp+".id", "jobs in a workflow get their ids from the workflow; remove 'id'")
			return nil
		}
		if c, ok := probe["compensate"]; ok {
			// The step's own job is the request without it.
			delete(probe, "compensate")
			raw, _ = json.Marshal(probe)
			if !isNull(c) {
				compensate = p.compensate(c, jp+".compensate")
				if compensate == nil {
					return nil
				}
			}
		}
	}
	e := p.parseJob(raw, jp)
	if e == nil {
		return nil
	}
	if e.Pending {
		p.add(jp+".options.pending", "jobs in a workflow cannot be pending")
		return nil
	}
	if !p.fits(e.Job, raw, jp) {
		return nil
	}
	if e.Job.Unique != nil {
		p.add(jp+".options.unique", "jobs in a workflow cannot carry a unique policy (the workflow already runs each job once)")
		return nil
	}
	p.keep(e.Job)
	return &Def{Kind: KindJob, Path: tp, Index: index, JobType: e.Job.Type, Request: raw, Compensate: compensate}
}

// parseJob is job.ParseEnqueue of the job at jp; nil, its problem added,
// when invalid.
func (p *parser) parseJob(raw json.RawMessage, jp string) *job.Enqueue {
	e, err := job.ParseEnqueue(raw, p.now)
	if err != nil {
		oe := ojserr.As(err)
		if field, _ := oe.Details["field"].(string); field != "" && field != "body" {
			jp += "." + field
		}
		p.add(jp, oe.Message)
	}
	return e
}

// compensate validates a step's compensate job; nil when invalid.
func (p *parser) compensate(raw json.RawMessage, jp string) json.RawMessage {
	var cn rawNode
	if jsoncase.Unmarshal(raw, &cn) != nil || isWorkflow(cn) {
		p.add(jp, "must be a job (type, args, options)")
		return nil
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(raw, &probe) == nil {
		for _, k := range []string{"id", "compensate"} {
			if _, ok := probe[k]; ok {
				p.add(jp+"."+k, "a compensate job has no "+k)
				return nil
			}
		}
	}
	e := p.parseJob(raw, jp)
	if e == nil {
		return nil
	}
	if e.Pending || e.Job.Unique != nil || e.Job.ScheduledAt != nil {
		p.add(jp, "a compensate job cannot be pending, scheduled or unique")
		return nil
	}
	if !p.fits(e.Job, raw, jp) {
		return nil
	}
	p.keep(e.Job)
	p.compensations++
	return raw
}

// graphStep is one step of the dependency-graph form as parsed.
type graphStep struct {
	id       string
	deps     []string
	request  json.RawMessage
	callback string
	jp       string
}

// rawStep is one step of the dependency-graph form.
type rawStep struct {
	ID        *string         `json:"id"`
	DependsOn json.RawMessage `json:"depends_on"`
	Options   json.RawMessage `json:"options"`
}

// steps parses the dependency-graph form and recognises the chains, groups
// and batches the official SDKs send in it (a batch's callbacks marked by
// options.callback_type or by their ids); anything else runs as a graph.
func (p *parser) steps(rn rawNode) *Def {
	name := p.name(rn, "$")
	if rn.Jobs != nil || rn.Callbacks != nil {
		p.add("$.type", "is required: chain, group or batch (or send steps with ids and depends_on)")
		return nil
	}
	if len(rn.Steps) == 0 {
		p.add("$.steps", "steps array must contain at least one element")
		return nil
	}
	if len(rn.Steps) > MaxChildren {
		p.add("$.steps", fmt.Sprintf("at most %d elements", MaxChildren))
		return nil
	}
	var defaults map[string]json.RawMessage
	if len(rn.Options) > 0 && !isNull(rn.Options) && json.Unmarshal(rn.Options, &defaults) != nil {
		p.add("$.options", "must be an object")
	}
	all := make([]*graphStep, 0, len(rn.Steps))
	index := map[string]int{}
	for i, raw := range rn.Steps {
		all = append(all, p.graphStep(i, raw, defaults, index))
	}
	edges := p.checkDeps(all, index)
	if len(p.problems) > 0 {
		return nil
	}
	depsOf := func(i int) []int {
		out := make([]int, 0, len(all[i].deps))
		for _, d := range all[i].deps {
			out = append(out, index[d])
		}
		return out
	}
	if cyc := findCycle(len(all), depsOf); cyc != nil {
		ids := make([]string, len(cyc))
		for i, c := range cyc {
			ids[i] = all[c].id
		}
		p.add("$.steps", "the dependencies form a cycle: "+strings.Join(ids, " -> "))
		return nil
	}
	if root, ok := p.stepsAsBatch(name, all); ok {
		return root
	}
	for _, s := range all {
		if s.callback != "" {
			p.add(s.jp+".options.callback_type", "callback steps need other steps without dependencies, and must depend on every one of them")
			return nil
		}
	}
	kind := KindGraph
	order := make([]int, len(all))
	for i := range order {
		order[i] = i
	}
	if edges == 0 {
		kind = KindGroup
	} else if chain := chainOrder(all, index); chain != nil {
		kind, order = KindChain, chain
	}
	if kind == KindGraph {
		if len(all) > MaxGraphSteps {
			p.add("$.steps", fmt.Sprintf("a dependency graph has at most %d steps; got %d (chains, groups and batches take %d)", MaxGraphSteps, len(all), MaxChildren))
		}
		if edges > MaxGraphEdges {
			p.add("$.steps", fmt.Sprintf("a dependency graph has at most %d dependencies; got %d", MaxGraphEdges, edges))
		}
	}
	root := &Def{Kind: kind, Name: name, Path: "/"}
	for pos, i := range order {
		s := all[i]
		c := p.stepLeaf(s, ChildPath("/", Segment(kind, pos)), pos)
		if c == nil {
			continue
		}
		if kind == KindGraph {
			c.Deps = depsOf(i)
			slices.Sort(c.Deps)
		}
		root.Children = append(root.Children, c)
	}
	return root
}

// graphStep reads step i of the depends_on form (nil when it is not an
// object): its id (recorded in index), its dependencies, and its job's
// request, the step without id and depends_on and with the workflow's
// options as defaults for its own.
func (p *parser) graphStep(i int, raw json.RawMessage, defaults map[string]json.RawMessage, index map[string]int) *graphStep {
	jp := fmt.Sprintf("$.steps[%d]", i)
	var rs rawStep
	var fields map[string]json.RawMessage
	if jsoncase.Unmarshal(raw, &rs) != nil || json.Unmarshal(raw, &fields) != nil {
		p.add(jp, "must be a step object with id, type, args and depends_on")
		return nil
	}
	s := &graphStep{jp: jp}
	switch {
	case rs.ID == nil:
		p.add(jp+".id", "is required: a unique step id")
	case *rs.ID == "":
		p.add(jp+".id", "must not be empty")
	case len(*rs.ID) > MaxStepIDLength:
		p.add(jp+".id", fmt.Sprintf("at most %d bytes", MaxStepIDLength))
	default:
		s.id = *rs.ID
		if prev, dup := index[s.id]; dup {
			p.add(jp+".id", fmt.Sprintf("duplicate step id %q (also $.steps[%d])", s.id, prev))
		} else {
			index[s.id] = i
		}
	}
	if len(rs.DependsOn) > 0 && !isNull(rs.DependsOn) && json.Unmarshal(rs.DependsOn, &s.deps) != nil {
		p.add(jp+".depends_on", "must be an array of step ids")
	}
	if len(s.deps) > MaxDependsOn {
		p.add(jp+".depends_on", fmt.Sprintf("at most %d dependencies per step", MaxDependsOn))
	}
	delete(fields, "id")
	delete(fields, "depends_on")
	opts := map[string]json.RawMessage{}
	maps.Copy(opts, defaults)
	if o, ok := fields["options"]; ok && !isNull(o) {
		var own map[string]json.RawMessage
		if json.Unmarshal(o, &own) != nil {
			p.add(jp+".options", "must be an object")
		}
		maps.Copy(opts, own)
	}
	if cb, ok := opts["callback_type"]; ok {
		var name string
		if json.Unmarshal(cb, &name) != nil || !isCallbackName(name) {
			p.add(jp+".options.callback_type", "must be on_complete, on_success or on_failure")
		}
		s.callback = name
		delete(opts, "callback_type")
	}
	if len(opts) > 0 {
		fields["options"], _ = json.Marshal(opts)
	} else {
		delete(fields, "options")
	}
	s.request, _ = json.Marshal(fields)
	return s
}

// checkDeps reports dependencies on oneself, twice or on unknown steps,
// and counts the edges.
func (p *parser) checkDeps(all []*graphStep, index map[string]int) int {
	edges := 0
	for _, s := range all {
		if s == nil {
			continue
		}
		seen := map[string]bool{}
		for k, d := range s.deps {
			switch {
			case d == s.id:
				p.add(fmt.Sprintf("%s.depends_on[%d]", s.jp, k), fmt.Sprintf("step %q depends on itself", d))
			case seen[d]:
				p.add(fmt.Sprintf("%s.depends_on[%d]", s.jp, k), fmt.Sprintf("%q is listed twice", d))
			default:
				if _, ok := index[d]; !ok {
					p.add(fmt.Sprintf("%s.depends_on[%d]", s.jp, k), fmt.Sprintf("unknown step %q", d))
				}
			}
			seen[d] = true
			edges++
		}
	}
	return edges
}

// stepLeaf is the job step of s at path.
func (p *parser) stepLeaf(s *graphStep, path string, i int) *Def {
	if d := p.leaf(s.request, s.jp, path, i); d != nil {
		d.StepID = s.id
		return d
	}
	return nil
}

// stepsAsBatch reads steps shaped as a batch (callback steps that depend
// on every other step, and other steps without dependencies) as one.
func (p *parser) stepsAsBatch(name string, all []*graphStep) (*Def, bool) {
	var jobs, cbs []*graphStep
	for _, s := range all {
		if s.callback != "" || (isSDKCallbackID(s.id) && len(s.deps) > 0) {
			cbs = append(cbs, s)
		} else {
			jobs = append(jobs, s)
		}
	}
	if len(cbs) == 0 || len(jobs) == 0 || !batchShaped(jobs, cbs) {
		return nil, false
	}
	root := &Def{Kind: KindBatch, Name: name, Path: "/", Callbacks: map[string]*Def{}}
	for i, s := range jobs {
		if c := p.stepLeaf(s, ChildPath("/", Segment(KindBatch, i)), i); c != nil {
			root.Children = append(root.Children, c)
		}
	}
	for _, s := range cbs {
		cb := cmp.Or(s.callback, strings.ReplaceAll(s.id, "-", "_"))
		if root.Callbacks[cb] != nil {
			p.add(s.jp, fmt.Sprintf("a second %s callback", cb))
			continue
		}
		if c := p.stepLeaf(s, ChildPath("/", cb), -1); c != nil {
			p.jobs--
			root.Callbacks[cb] = c
		}
	}
	return root, true
}

// isSDKCallbackID reports the callback step ids of SDKs that mark batch
// callbacks by id alone: a callback name, or the name with a hyphen.
func isSDKCallbackID(id string) bool { return isCallbackName(strings.ReplaceAll(id, "-", "_")) }

// batchShaped reports whether jobs have no dependencies and every
// callback depends on exactly the jobs.
func batchShaped(jobs, cbs []*graphStep) bool {
	ids := map[string]bool{}
	for _, s := range jobs {
		if len(s.deps) > 0 {
			return false
		}
		ids[s.id] = true
	}
	for _, c := range cbs {
		if len(c.deps) != len(ids) {
			return false
		}
		for _, d := range c.deps {
			if !ids[d] {
				return false
			}
		}
	}
	return true
}

// chainOrder returns the steps in chain order when they form one line
// (one step without dependencies, every other step depending on exactly
// the one before it), or nil.
func chainOrder(all []*graphStep, index map[string]int) []int {
	next := map[int]int{}
	start := -1
	for i, s := range all {
		switch len(s.deps) {
		case 0:
			if start >= 0 {
				return nil
			}
			start = i
		case 1:
			d := index[s.deps[0]]
			if _, taken := next[d]; taken {
				return nil
			}
			next[d] = i
		default:
			return nil
		}
	}
	if start < 0 {
		return nil
	}
	order := []int{start}
	for n, ok := next[start]; ok; n, ok = next[n] {
		order = append(order, n)
	}
	if len(order) != len(all) {
		return nil
	}
	return order
}

// findCycle returns the indexes on one dependency cycle, or nil.
func findCycle(n int, deps func(int) []int) []int {
	const white, grey, black = 0, 1, 2
	color := make([]int, n)
	stack := []int{}
	var cycle []int
	var visit func(i int) bool
	visit = func(i int) bool {
		color[i] = grey
		stack = append(stack, i)
		for _, d := range deps(i) {
			if color[d] == grey { // on the stack
				cycle = append(slices.Clone(stack[slices.Index(stack, d):]), d)
				return true
			}
			if color[d] == white && visit(d) {
				return true
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
		return false
	}
	for i := range n {
		if color[i] == white && visit(i) {
			// Report it in dependency order: a -> b means a waits for b.
			return cycle
		}
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// AssignTenant makes every job of the workflow (steps, callbacks,
// handlers, compensations) the tenant t's: its meta.tenant_id is set, and
// a job that names another tenant is refused (ojs-multi-tenancy.md 15.2:
// no cross-tenant workflows). t "" changes nothing.
func (p *Parsed) AssignTenant(t string) error {
	if t == "" {
		return nil
	}
	p.Tenant = t
	return p.eachRequest(func(r *json.RawMessage) error {
		out, err := job.TenantRequest(*r, t)
		*r = out
		return err
	})
}

// CheckPins refuses a workflow with a job geo-pinned to a region other
// than region, this deployment's (job.CheckPin; "" refuses nothing).
func (p *Parsed) CheckPins(region string) error {
	if region == "" {
		return nil
	}
	return p.eachRequest(func(r *json.RawMessage) error { return job.CheckPinRequest(*r, region) })
}

// eachRequest calls f with each job request of the workflow (steps,
// callbacks, handlers, compensations) until one fails; the error names
// the job's path.
func (p *Parsed) eachRequest(f func(r *json.RawMessage) error) error {
	var err error
	Walk(p.Root, func(d *Def) {
		for _, r := range []*json.RawMessage{&d.Request, &d.Compensate} {
			if err == nil && len(*r) > 0 {
				if err = f(r); err != nil {
					err = ojserr.As(err).With("path", d.Path)
				}
			}
		}
	})
	return err
}
