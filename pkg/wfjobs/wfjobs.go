// Package wfjobs builds the jobs a workflow's steps start: a job step's
// job from its stored request, with its deterministic id and its
// parent_results (the results of the steps before it, read from their jobs
// or carried by the finished job), admitted the way every job is. It reads
// and never writes: the engine (pkg/workflow) writes what it builds, in the
// same conditional write or transaction as the step's record.
package wfjobs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

// Admitter prepares jobs for writing the way every job is prepared
// (implemented by *queue.Service): push mode from the queue, the
// queue registered, its rate limit recorded. Workflow jobs are admitted
// by the same code as PUSH, batch and cron jobs.
type Admitter interface {
	Admit(ctx context.Context, jobs []*job.Job) error
}

// Maker builds the jobs of a workflow's steps.
type Maker struct {
	st    *wfstore.Store
	jobs  *store.Store
	admit Admitter
	push  map[string]bool
	redel time.Duration
	now   func() time.Time
}

// NewMaker returns a maker reading the workflow items st and the jobs;
// admit admits what it builds (nil: only the push flag from pushQueues is
// set); redel and now are passed to job creation and stamp the jobs.
func NewMaker(st *wfstore.Store, jobs *store.Store, admit Admitter, pushQueues []string, redel time.Duration, now func() time.Time) *Maker {
	m := &Maker{st: st, jobs: jobs, admit: admit, push: map[string]bool{}, redel: redel, now: now}
	for _, q := range pushQueues {
		m.push[q] = true
	}
	return m
}

// EmptyResults is what the first steps of a workflow receive as
// parent_results: an empty array (an empty object for a graph, whose
// steps receive their dependencies' results keyed by step id).
func EmptyResults(kind string) json.RawMessage {
	if kind == wfdef.KindGraph {
		return json.RawMessage("{}")
	}
	return json.RawMessage("[]")
}

// Admit admits jobs (built by NewJob, which set their push flag from the
// push-mode queue list) through the configured admitter, if any.
func (m *Maker) Admit(ctx context.Context, jobs []*job.Job) error {
	if len(jobs) == 0 || m.admit == nil {
		return nil
	}
	if err := m.admit.Admit(ctx, jobs); err != nil {
		return ojserr.As(err)
	}
	return nil
}

// Launch returns the jobs that start when the node at path starts with
// parentResults: a job step's job; a chain's first step; every job of a
// group or batch; a graph's steps without dependencies. Nested composites
// start the same way. It also returns the composites that start with a
// timeout (their deadline starts now). Nothing is written.
func (m *Maker) Launch(ctx context.Context, t *wfstore.Tree, path string, parentResults json.RawMessage) ([]*job.Job, []*wfstore.Composite, error) {
	if st := t.Step(path); st != nil {
		j, err := m.NewJob(st, parentResults)
		if err != nil {
			return nil, nil, err
		}
		return []*job.Job{j}, nil, nil
	}
	n := t.Composite(path)
	if n == nil {
		return nil, nil, fmt.Errorf("workflow %s: node %s missing", t.WorkflowID, path)
	}
	var out []*job.Job
	var timed []*wfstore.Composite
	if n.TimeoutMS > 0 {
		timed = append(timed, n)
	}
	for _, c := range t.Kids[path] {
		if n.Kind == wfdef.KindChain && c.Index > 0 {
			break
		}
		pr := parentResults
		if n.Kind == wfdef.KindGraph {
			if len(c.Deps) > 0 {
				continue
			}
			pr = json.RawMessage("{}")
		}
		js, ts, err := m.Launch(ctx, t, c.Path, pr)
		if err != nil {
			return nil, nil, err
		}
		if n.Kind == wfdef.KindChain && c.Kind == wfdef.KindJob && len(js) == 1 {
			m.CarryAhead(js[0], t.Steps(t.Kids[path][1:]))
		}
		out = append(out, js...)
		timed = append(timed, ts...)
	}
	return out, timed, nil
}

// Deadlines are the writes that start the deadlines of the composites a
// step starts.
func (m *Maker) Deadlines(timed []*wfstore.Composite) []wfstore.Change {
	var ws []wfstore.Change
	for _, n := range timed {
		ws = append(ws, wfstore.StartDeadline(n.Path, m.now().Add(time.Duration(n.TimeoutMS)*time.Millisecond)))
	}
	return ws
}

// NewJob builds the job of a leaf node with its deterministic id.
func (m *Maker) NewJob(n *wfstore.Step, parentResults json.RawMessage) (*job.Job, error) {
	en, err := job.ParseEnqueue([]byte(n.Def), m.now().UTC())
	if err != nil {
		return nil, fmt.Errorf("workflow %s node %s: stored job no longer valid: %w", n.WorkflowID, n.Path, err)
	}
	j := en.Job
	j.ID, j.WorkflowID, j.WorkflowNode, j.WorkflowShard, j.WorkflowNext = wfdef.JobID(n.WorkflowID, n.Path), n.WorkflowID, n.Path, n.PShard, n.Next
	j.WorkflowStepID, j.WorkflowLast, j.WorkflowExpiry = cmp.Or(n.StepID, j.ID), n.Last, n.TTL
	j.Push = m.push[j.Queue]
	j.ParentResults = capResults(n.WorkflowID, parentResults, resultsRoom(j, m.redel))
	return j, nil
}

// maxParentResults bounds parent_results inline in a job.
const maxParentResults = 128 << 10

// resultsRoom is how much parent_results a job's item has room for: at
// most maxParentResults, and never so much that the item, once it holds
// its largest result and error history too, passes DynamoDB's 400 KB.
func resultsRoom(j *job.Job, redeliverAfter time.Duration) int {
	size, err := store.JobItemBytes(j, redeliverAfter)
	if err != nil {
		return 0
	}
	room := awslimit.DynamoItemBytes - size - store.MaxPackedResultBytes - job.MaxErrorHistoryBytes - 2*job.MaxErrorBytes - 4<<10
	return max(0, min(maxParentResults, room))
}

// capResults replaces parent_results larger than room by a pointer to the
// workflow, which holds every result.
func capResults(wfID string, r json.RawMessage, room int) json.RawMessage {
	if len(r) <= room {
		return r
	}
	b, _ := json.Marshal(map[string]any{"truncated": true, "bytes": len(r), "workflow_id": wfID,
		"hint": "parent_results do not fit in the job; read them from GET /ojs/v1/workflows/" + wfID})
	return b
}

// truncatedResults reports whether r is the pointer capResults wrote.
func truncatedResults(r json.RawMessage) bool {
	return len(r) > 0 && r[0] == '{' && strings.Contains(string(r[:min(len(r), 40)]), `"bytes"`)
}

// ChainResults is parent_results of chain step k+1: the results of steps
// 0..k as an array. From a job step it is the job's own parent_results
// plus its result, without a read; otherwise the steps' results are read.
func (m *Maker) ChainResults(ctx context.Context, wf string, finished *job.Job, chain string, k int) (json.RawMessage, error) {
	if finished != nil {
		r := ResultValue(finished)
		if k == 0 {
			return json.Marshal([]json.RawMessage{r})
		}
		var prev []json.RawMessage
		if len(finished.ParentResults) > 0 && !truncatedResults(finished.ParentResults) && json.Unmarshal(finished.ParentResults, &prev) == nil && len(prev) == k {
			return json.Marshal(append(prev, r))
		}
	}
	nodes, err := m.st.Subtree(ctx, wf, chain)
	if err != nil {
		return nil, err
	}
	t := wfstore.NewTree(nodes)
	return m.Results(ctx, t, t.Kids[chain][:k+1])
}

// GraphShape is a graph composite's structure: its steps' ids and each
// step's dependency indexes.
type GraphShape struct {
	IDs  []string `json:"ids"`
	Deps [][]int  `json:"deps"`
}

// GraphOf decodes a graph composite's structure.
func GraphOf(n *wfstore.Composite) GraphShape {
	var g GraphShape
	_ = json.Unmarshal([]byte(n.Graph), &g)
	g.Deps = append(g.Deps, make([][]int, max(0, n.Total-len(g.Deps)))...)
	g.IDs = append(g.IDs, make([]string, max(0, n.Total-len(g.IDs)))...)
	return g
}

// GraphJobs builds the jobs of ready graph steps; each receives the
// results of its dependencies keyed by step id (the finished step's from
// its job, the others' read in one request).
func (m *Maker) GraphJobs(ctx context.Context, wf string, finished *job.Job, parent string, shape GraphShape, ready []*wfstore.Step) ([]*job.Job, error) {
	self := -1 // the finished step, whose job is finished (none: read them all)
	if finished != nil {
		self = wfdef.ChildIndex(finished.WorkflowNode)
	}
	var ids []string
	seen := map[int]bool{}
	for _, n := range ready {
		for _, x := range shape.Deps[n.Index] {
			if x != self && !seen[x] {
				seen[x] = true
				ids = append(ids, wfdef.JobID(wf, wfdef.ChildPath(parent, wfdef.Segment(wfdef.KindGraph, x))))
			}
		}
	}
	done, err := m.jobs.BatchGetJobs(ctx, ids)
	if err != nil {
		return nil, err
	}
	if finished != nil {
		done[finished.ID] = finished
	}
	var jobs []*job.Job
	for _, n := range ready {
		pr := map[string]json.RawMessage{}
		for _, x := range shape.Deps[n.Index] {
			path := wfdef.ChildPath(parent, wfdef.Segment(wfdef.KindGraph, x))
			pr[cmp.Or(shape.IDs[x], strings.TrimPrefix(path, "/"))] = ResultValue(done[wfdef.JobID(wf, path)])
		}
		b, err := json.Marshal(pr)
		if err != nil {
			return nil, err
		}
		j, err := m.NewJob(n, b)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// ResultValue is a finished job's contribution to parent_results: its
// result (null without one), or its error when it failed.
func ResultValue(j *job.Job) json.RawMessage {
	if j == nil {
		return json.RawMessage("null")
	}
	if j.State != job.Completed && j.State.Terminal() {
		b, _ := json.Marshal(map[string]any{"state": "failed", "error": j.Error})
		return b
	}
	if len(j.Result) == 0 {
		return json.RawMessage("null")
	}
	return j.Result
}

// Results is the results of nodes (children of one composite, in order)
// as a JSON array: a job's result, or a composite's results (an array of
// its children's, or an object keyed by step id for a graph).
func (m *Maker) Results(ctx context.Context, t *wfstore.Tree, nodes []*wfstore.Item) (json.RawMessage, error) {
	var ids []string
	var walk func(n *wfstore.Item)
	walk = func(n *wfstore.Item) {
		if n.Kind == wfdef.KindJob {
			ids = append(ids, wfdef.JobID(t.WorkflowID, n.Path))
			return
		}
		for _, c := range t.Kids[n.Path] {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	jobs, err := m.jobs.BatchGetJobs(ctx, ids)
	if err != nil {
		return nil, err
	}
	var value func(n *wfstore.Item) json.RawMessage
	value = func(n *wfstore.Item) json.RawMessage {
		if n.Kind == wfdef.KindJob {
			return ResultValue(jobs[wfdef.JobID(t.WorkflowID, n.Path)])
		}
		if n.Kind == wfdef.KindGraph {
			m := map[string]json.RawMessage{}
			for _, c := range t.Kids[n.Path] {
				m[c.StepKey()] = value(c)
			}
			b, _ := json.Marshal(m)
			return b
		}
		list := []json.RawMessage{}
		for _, c := range t.Kids[n.Path] {
			list = append(list, value(c))
		}
		b, _ := json.Marshal(list)
		return b
	}
	out := make([]json.RawMessage, len(nodes))
	for i, n := range nodes {
		out[i] = value(n)
	}
	return json.Marshal(out)
}

// CompensationJob builds compensation step k, undoing the step of node
// n: its compensate job, with the undone step's id, job id and result as
// parent_results.
func (m *Maker) CompensationJob(ctx context.Context, wf string, k int, n *wfstore.Step, undone *job.Job) (*job.Job, error) {
	pr, _ := json.Marshal(map[string]any{"compensates": n.StepKey(), "job_id": wfdef.JobID(wf, n.Path), "result": ResultValue(undone)})
	synthetic := &wfstore.Step{Item: wfstore.Item{WorkflowID: wf, Path: wfdef.ChildPath(wfdef.CompensatePath, wfdef.Segment(wfdef.KindChain, k)), Kind: wfdef.KindJob, TTL: n.TTL},
		Def: n.Compensate}
	j, err := m.NewJob(synthetic, pr)
	if err != nil {
		return nil, err
	}
	if err := m.Admit(ctx, []*job.Job{j}); err != nil {
		return nil, err
	}
	return j, nil
}

// HandlerInput is a handler's parent_results: the workflow's state, what
// failed it, and the results of its completed steps keyed by step.
func (m *Maker) HandlerInput(ctx context.Context, t *wfstore.Tree, root *wfstore.Root) (json.RawMessage, error) {
	var ids []string
	steps := map[string]*wfstore.Item{} // by job id
	for _, node := range t.ByPath {
		if n := node.Base(); n.Kind == wfdef.KindJob && !strings.HasPrefix(n.Path, "/~") {
			ids = append(ids, wfdef.JobID(t.WorkflowID, n.Path))
			steps[ids[len(ids)-1]] = n
		}
	}
	jobs, err := m.jobs.BatchGetJobs(ctx, ids)
	if err != nil {
		return nil, err
	}
	results := map[string]json.RawMessage{}
	var failed *job.Job
	for id, j := range jobs {
		if j.State == job.Completed {
			results[steps[id].StepKey()] = ResultValue(j)
		} else if j.State == job.Discarded && (failed == nil || (j.CompletedAt != nil && failed.CompletedAt != nil && j.CompletedAt.Before(*failed.CompletedAt))) {
			failed = j
		}
	}
	in := map[string]any{"workflow_id": t.WorkflowID, "state": string(root.State), "results": results}
	switch {
	case root.Error != "":
		in["error"] = json.RawMessage(root.Error)
	case failed != nil && failed.Error != nil:
		in["error"] = failed.Error
		in["failed_job_id"] = failed.ID
	}
	if root.Compensation != "" {
		in["compensation"] = root.Compensation
	}
	return json.Marshal(in)
}

// Ahead is what a chain step's job carries of a step that follows it
// (job.Job.WorkflowAhead, a JSON array of them, in order): what starting
// that step needs of its node. A node's definition never changes once the
// workflow is created, so the copy stays true.
type Ahead struct {
	Def  json.RawMessage `json:"d"`
	SID  string          `json:"s,omitempty"`
	Last bool            `json:"l,omitempty"`
}

// aheadReserve is the room a job item keeps, within its write unit, for
// what its claim and completion add (timestamps, the worker, the lease, a
// small result): the steps ahead are carried only where they cost no unit.
const aheadReserve = 256

// itemUnit is DynamoDB's write unit: 1 KB of item.
const itemUnit = 1024

// aheadAttr is the job item attribute that holds them (store's record).
const aheadAttr = "wf_ahead"

// CarryAhead puts on j (the job of a chain step) the definitions of the
// job steps that follow it in its chain (rest, in order, up to the first
// step that is not a job), as many as keep the job item within the write
// units it takes without them, aheadReserve bytes kept free. The request
// that finishes j then starts the next step without reading its node
// (chainStepDone); a job without them reads it, as before. The item is
// sized once: the attribute adds its name and its JSON text.
func (m *Maker) CarryAhead(j *job.Job, rest []*wfstore.Step) {
	j.WorkflowAhead = nil
	bare, err := store.JobItemBytes(j, m.redel)
	if err != nil {
		return
	}
	room := (bare+aheadReserve+itemUnit-1)/itemUnit*itemUnit - aheadReserve - bare - len(aheadAttr)
	var steps []Ahead
	size := len("[]")
	for _, n := range rest {
		if n == nil || n.Def == "" {
			break
		}
		a := Ahead{Def: json.RawMessage(n.Def), SID: n.StepID, Last: n.Last}
		b, err := json.Marshal(a)
		if err != nil || size+len(b)+len(",") > room {
			break
		}
		size += len(b) + len(",")
		steps = append(steps, a)
	}
	if len(steps) > 0 {
		j.WorkflowAhead, _ = json.Marshal(steps)
	}
}

// AheadOf decodes what j carries of the steps after its own.
func AheadOf(j *job.Job) []Ahead {
	if j == nil || len(j.WorkflowAhead) == 0 {
		return nil
	}
	var steps []Ahead
	if json.Unmarshal(j.WorkflowAhead, &steps) != nil {
		return nil
	}
	return steps
}

// StepOfAhead is the node of chain step index of chain, as j, a job
// ahead of it, carries it.
func StepOfAhead(j *job.Job, chain string, index int, a Ahead) *wfstore.Step {
	return &wfstore.Step{Item: wfstore.Item{WorkflowID: j.WorkflowID, Path: wfdef.ChildPath(chain, wfdef.Segment(wfdef.KindChain, index)), Kind: wfdef.KindJob,
		Index: index, StepID: a.SID, Last: a.Last, TTL: j.WorkflowExpiry}, Def: store.Packed(a.Def)}
}
