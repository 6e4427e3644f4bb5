// Package wfview renders a workflow as the API shows it (ojs-workflows.md
// section 11, ojs-http-binding.md section 14.2), from its stored items (a
// *wfstore.Tree) and its jobs. It reads nothing itself.
package wfview

import (
	"cmp"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

// View is a workflow as the API shows it: the root's own entry with the
// workflow's fields around it. Keys with a zero value that the API shows
// anyway (steps_completed: 0, job_id: null, depends_on: []) are pointers or
// non-nil slices; omitted ones are nil.
type View struct {
	ViewNode
	CancelledAt string `json:"cancelled_at,omitempty"`
	CreatedAt   string `json:"created_at"`
	// TenantID is the tenant of the workflow's jobs ("": none).
	TenantID string       `json:"tenant_id,omitempty"`
	Metadata ViewMetadata `json:"metadata"`
	ViewFailure
	// Deadline is when the workflow's timeout (ViewNode.TimeoutMS) ends it.
	Deadline string `json:"deadline,omitempty"`
	// Retries counts the retries of a failed or cancelled workflow.
	Retries      int                 `json:"retries,omitempty"`
	Compensation *ViewCompensation   `json:"compensation,omitempty"`
	Handlers     map[string]ViewNode `json:"handlers,omitempty"`
	// ResultsTruncated is set when step results were left out of the view
	// (MaxViewResultBytes); ResultsHint says where to read them.
	ResultsTruncated bool   `json:"results_truncated,omitempty"`
	ResultsHint      string `json:"results_hint,omitempty"`
	ViewCounts
	// Creating is set while the workflow is created asynchronously,
	// Cancelling when a cancel left jobs for the stream function.
	Creating   *ViewCreating   `json:"x_creating,omitempty"`
	Cancelling *ViewCancelling `json:"x_cancelling,omitempty"`
}

// ViewNode is one entry of a view: a job step (ViewJob set, with job_id
// null before its job exists), or a composite with its children in Steps
// (a chain) or Jobs (the others) and a batch's callbacks. The
// dependency-graph form lists job steps only, each with DependsOn.
type ViewNode struct {
	Index *int   `json:"index,omitempty"`
	ID    string `json:"id"`
	// Callback names the callback a step of the dependency-graph form is.
	Callback string `json:"callback,omitempty"`
	// Type is a job step's job type, or a composite's kind.
	Type  string `json:"type"`
	Name  string `json:"name,omitempty"`
	State string `json:"state"`
	*ViewJob
	StartedAt   string `json:"started_at,omitempty"`
	CompletedAt string `json:"completed_at,omitempty"`
	TimeoutMS   int64  `json:"timeout_ms,omitempty"`
	// Error is the failed job's error, or what failed a composite itself
	// (its timeout).
	Error     json.RawMessage     `json:"error,omitempty"`
	Steps     []ViewNode          `json:"steps,omitzero"`
	Jobs      []ViewNode          `json:"jobs,omitzero"`
	Callbacks map[string]ViewNode `json:"callbacks,omitempty"`
	DependsOn []string            `json:"depends_on,omitzero"`
}

// ViewJob is what a job step's entry shows of its job: JobID is nil (null)
// until the job exists; the rest is set once it does.
type ViewJob struct {
	JobID   *string `json:"job_id"`
	Attempt *int    `json:"attempt,omitempty"`
	// Progress is a running job's last reported progress, 0 to 1 (the
	// progress extension).
	Progress *float64        `json:"progress,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	// ResultTruncated is set when the result did not fit the view.
	ResultTruncated bool `json:"result_truncated,omitempty"`
}

// ViewMetadata is the view's metadata object.
type ViewMetadata struct {
	CreatedAt      string `json:"created_at"`
	JobCount       int    `json:"job_count"`
	CompletedCount int    `json:"completed_count"`
	FailedCount    int    `json:"failed_count"`
	// Progress is the share of the workflow's jobs done, 0 to 1: each
	// finished job (completed, failed or cancelled) counts 1, each running
	// job its reported progress (a workflow that stopped early stays
	// below 1: the share of its work that was done).
	Progress    float64 `json:"progress"`
	StartedAt   string  `json:"started_at,omitempty"`
	CompletedAt string  `json:"completed_at,omitempty"`
	CancelledAt string  `json:"cancelled_at,omitempty"`
}

// ViewFailure is what a view shows of the failed and cancelled jobs:
// FailedJobIDs and Errors are set together (Errors pointing to nil, null,
// when none of the jobs has an error that fits the view).
type ViewFailure struct {
	// FailedStepIndex is a failed chain's failed step.
	FailedStepIndex *int         `json:"failed_step_index,omitempty"`
	FailedJobIDs    []string     `json:"failed_job_ids,omitempty"`
	Errors          *[]ViewError `json:"errors,omitempty"`
}

// ViewError is one failed job's error in the view's errors list.
type ViewError struct {
	JobID   string `json:"job_id"`
	Node    string `json:"node"`
	Code    string `json:"code"`
	Type    string `json:"type"`
	Message string `json:"message"`
	Attempt int    `json:"attempt"`
}

// ViewCounts are the root's direct-children counters (the conformance
// suite's shapes): steps_* for a chain, jobs_* for the others, both for a
// graph and the dependency-graph form; steps_cancelled and
// steps_already_completed (leaf jobs) once cancelled.
type ViewCounts struct {
	StepsTotal            *int `json:"steps_total,omitempty"`
	StepsCompleted        *int `json:"steps_completed,omitempty"`
	JobsTotal             *int `json:"jobs_total,omitempty"`
	JobsCompleted         *int `json:"jobs_completed,omitempty"`
	StepsCancelled        *int `json:"steps_cancelled,omitempty"`
	StepsAlreadyCompleted *int `json:"steps_already_completed,omitempty"`
}

// ViewCompensation is a failed workflow's compensation: its state and,
// once it started, each step with the step it undoes.
type ViewCompensation struct {
	State      string                 `json:"state"`
	StepsTotal int                    `json:"steps_total"`
	Steps      []ViewCompensationStep `json:"steps,omitzero"`
	FailedStep string                 `json:"failed_step,omitempty"`
}

// ViewCompensationStep is one step of a compensation; Type, Result and
// Error are set once its job exists.
type ViewCompensationStep struct {
	Index  int             `json:"index"`
	Undoes string          `json:"undoes"`
	JobID  *string         `json:"job_id"`
	State  string          `json:"state"`
	Type   string          `json:"type,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
}

// ViewCreating is the progress of a workflow being created
// asynchronously (x_creating).
type ViewCreating struct {
	Phase        string `json:"phase"`
	NodesWritten int    `json:"nodes_written"`
	NodesTotal   int    `json:"nodes_total"`
}

// ViewCancelling is x_cancelling: the jobs a cancel left to the stream
// function.
type ViewCancelling struct {
	JobsLeft int `json:"jobs_left"`
}

// MaxViewResultBytes bounds what the step results and errors of one view
// cost in the API's Lambda response (6 MB at most); results beyond it are
// left out of the view, each step saying so.
const MaxViewResultBytes = 3 << 20

// viewer renders one workflow.
type viewer struct {
	t    *wfstore.Tree
	jobs map[string]*job.Job
	// stopped is set when the workflow is cancelled or failed: what never
	// started never will.
	stopped bool
	budget  int
	cut     bool
	// counts of leaf jobs (callbacks not included), and the progress the
	// running ones reported
	completed, failed int
	running           float64
	failedIDs         []string
	errs              []ViewError
	blockedMemo       map[string]bool
	// sets caches each composite's ok and fail sets as maps.
	sets map[string][2]map[int]bool
}

// counted reports whether a composite counted child i as ok and as failed
// (sets kept as maps: views of long chains ask for every step).
func (v *viewer) counted(n *wfstore.Composite, i int) (ok, fail bool) {
	if v.sets == nil {
		v.sets = map[string][2]map[int]bool{}
	}
	m, found := v.sets[n.Path]
	if !found {
		m = [2]map[int]bool{{}, {}}
		for _, x := range n.OK {
			m[0][x] = true
		}
		for _, x := range n.Fail {
			m[1][x] = true
		}
		v.sets[n.Path] = m
	}
	return m[0][i], m[1][i]
}

// Render builds the view from the nodes and the jobs that exist.
func Render(t *wfstore.Tree, jobs map[string]*job.Job) *View {
	root := t.Root
	// A cancel's placeholder is no job of its step's (the caller's map
	// stays as it is).
	jobs = maps.Clone(jobs)
	maps.DeleteFunc(jobs, func(_ string, j *job.Job) bool { return wfstore.IsPlaceholder(j) })
	v := &viewer{t: t, jobs: jobs, budget: MaxViewResultBytes,
		stopped: root.State == wfstate.Cancelled || root.State == wfstate.Failed}
	out := &View{}
	if root.Form == "steps" {
		out.Steps = v.flat()
	} else {
		out.ViewNode = v.entry(&root.Item, true)
		out.Index = nil
	}
	out.ID, out.Type, out.Name, out.State = t.WorkflowID, root.Kind, cmp.Or(root.Name, root.Kind), string(root.State)
	out.StartedAt, out.CompletedAt, out.CancelledAt = root.StartedAt, root.CompletedAt, root.CancelledAt
	out.CreatedAt, out.TenantID = root.CreatedAt, root.Tenant
	out.Metadata = ViewMetadata{CreatedAt: root.CreatedAt, JobCount: root.JobCount, CompletedCount: v.completed, FailedCount: v.failed,
		StartedAt: root.StartedAt, CompletedAt: root.CompletedAt, CancelledAt: root.CancelledAt}
	if root.JobCount > 0 {
		out.Metadata.Progress = min(1, math.Round(1000*(float64(v.completed+v.failed)+v.running)/float64(root.JobCount))/1000)
	}
	if root.Kind == wfdef.KindChain && root.FailedIndex != nil {
		out.FailedStepIndex = new(*root.FailedIndex)
	}
	if len(v.failedIDs) > 0 {
		sort.Strings(v.failedIDs)
		out.FailedJobIDs = v.failedIDs
		out.Errors = &v.errs
	}
	if root.TimeoutMS > 0 {
		out.TimeoutMS, out.Deadline = root.TimeoutMS, job.Timestamp(time.UnixMilli(root.Deadline))
	}
	if root.Error != "" {
		out.Error = json.RawMessage(root.Error)
	}
	out.Retries, out.Compensation = root.Run, v.compensation()
	if hs := v.handlers(); len(hs) > 0 {
		out.Handlers = hs
	}
	if v.cut {
		out.ResultsTruncated = true
		out.ResultsHint = "Some step results are left out to keep the answer under Lambda's 6 MB; read each with GET /ojs/v1/jobs/{job_id}."
	}
	// Direct-children counters (the conformance suite's shapes).
	done := 0
	for _, c := range t.Kids[wfstore.RootPath] {
		if v.state(c) == string(wfstate.Completed) {
			done++
		}
	}
	if root.Kind != wfdef.KindChain {
		out.JobsTotal, out.JobsCompleted = new(root.Total), new(done)
	}
	if root.Kind == wfdef.KindChain || root.Kind == wfdef.KindGraph || root.Form == "steps" {
		out.StepsTotal, out.StepsCompleted = new(root.Total), new(done)
	}
	if root.State == wfstate.Cancelled {
		leaves := map[string]int{} // by state
		for _, node := range t.ByPath {
			if n := node.Base(); n.Kind == wfdef.KindJob {
				leaves[v.state(n)]++
			}
		}
		out.StepsCancelled, out.StepsAlreadyCompleted = new(leaves[string(wfstate.Cancelled)]), new(leaves[string(wfstate.Completed)])
	}
	return out
}

// started reports whether the node at path has started (its jobs exist or
// existed): the root always; a chain's step once the one before it
// completed; every child of a started group or batch; a graph step once
// its dependencies completed; a callback once fired.
func (v *viewer) started(n *wfstore.Item) bool {
	if n.Path == wfstore.RootPath {
		return true
	}
	parent := v.t.Composite(wfdef.ParentPath(n.Path))
	if parent == nil {
		return false
	}
	if name, ok := wfdef.CallbackName(n.Path); ok {
		return wfstore.HasString(parent.Fired, name)
	}
	if !v.started(&parent.Item) {
		return false
	}
	switch parent.Kind {
	case wfdef.KindChain:
		if n.Index == 0 {
			return true
		}
		ok, _ := v.counted(parent, n.Index-1)
		return ok
	case wfdef.KindGraph:
		for _, d := range n.Deps {
			if ok, _ := v.counted(parent, d); !ok {
				return false
			}
		}
	}
	return true
}

// blocked reports whether a graph step can never run: a step it depends
// on, directly or not, failed. Memoized: a graph's paths are many.
func (v *viewer) blocked(n *wfstore.Item) bool {
	if b, ok := v.blockedMemo[n.Path]; ok {
		return b
	}
	parent := v.t.Composite(wfdef.ParentPath(n.Path))
	if parent == nil || parent.Kind != wfdef.KindGraph {
		return false
	}
	if v.blockedMemo == nil {
		v.blockedMemo = map[string]bool{}
	}
	v.blockedMemo[n.Path] = false
	kids := v.t.Kids[parent.Path]
	for _, d := range n.Deps {
		ok, fail := v.counted(parent, d)
		if fail || (d < len(kids) && !ok && v.blocked(kids[d])) {
			v.blockedMemo[n.Path] = true
			return true
		}
	}
	return false
}

// state is a node's state in the view: a composite's own once finished;
// a job step's from its job (waiting before it exists, cancelled when it
// never will).
func (v *viewer) state(n *wfstore.Item) string {
	if n.Kind != wfdef.KindJob {
		switch {
		case n.State.Terminal():
			return string(n.State)
		case v.stopped:
			return string(wfstate.Cancelled)
		case v.started(n):
			return string(wfstate.Running)
		}
		return string(wfstate.Waiting)
	}
	if j := v.jobs[wfdef.JobID(v.t.WorkflowID, n.Path)]; j != nil {
		return jobState(j.State)
	}
	parent := v.t.Item(wfdef.ParentPath(n.Path))
	if v.stopped || v.blocked(n) || (parent != nil && parent.State.Terminal()) {
		return string(wfstate.Cancelled)
	}
	return string(wfstate.Waiting)
}

// jobState maps a job state to a workflow step state.
func jobState(s job.State) string {
	states := map[job.State]string{job.Active: "active", job.Completed: string(wfstate.Completed),
		job.Discarded: string(wfstate.Failed), job.Cancelled: string(wfstate.Cancelled)}
	return cmp.Or(states[s], "pending")
}

// leaf fills a job step's entry.
func (v *viewer) leaf(n *wfstore.Item, m *ViewNode) {
	if st := v.t.Step(n.Path); st != nil {
		m.Type = st.JobType
	}
	id := wfdef.JobID(v.t.WorkflowID, n.Path)
	m.ViewJob = &ViewJob{}
	m.State = v.state(n)
	counted := !wfdef.IsCallback(n.Path) && !strings.HasPrefix(n.Path, "/~")
	j := v.jobs[id]
	if j == nil {
		return
	}
	m.JobID, m.Attempt = new(id), new(j.Attempt)
	m.StartedAt, m.CompletedAt = timestamp(j.StartedAt), timestamp(j.CompletedAt)
	switch j.State {
	case job.Active:
		if pr := j.ProgressShown(); pr != nil && pr.Value != nil {
			m.Progress = new(*pr.Value)
			if counted {
				v.running += *pr.Value
			}
		}
	case job.Completed:
		if counted {
			v.completed++
		}
		if len(j.Result) > 0 {
			if v.fits(j.Result) {
				m.Result = j.Result
			} else {
				m.ResultTruncated = true
			}
		}
	case job.Discarded, job.Cancelled:
		if counted {
			v.failed++
		}
		v.failedIDs = append(v.failedIDs, id)
		if b, _ := json.Marshal(j.Error); j.Error != nil && v.fits(b) {
			m.Error = b
			v.errs = append(v.errs, ViewError{JobID: id, Node: n.Path, Code: cmp.Or(j.Error.Code, j.Error.Type), Type: j.Error.Type,
				Message: j.Error.Message, Attempt: j.Attempt})
		}
	}
}

// timestamp is job.Timestamp of t, "" for nil.
func timestamp(t *time.Time) string {
	if t == nil {
		return ""
	}
	return job.Timestamp(*t)
}

// fits takes what b costs in the Lambda response (b is escaped once in
// the view's JSON and once more as the response body) from the budget,
// and reports whether it fitted; once one does not, none is added.
func (v *viewer) fits(b []byte) bool {
	if v.cut {
		return false
	}
	esc, err := json.Marshal(json.RawMessage(b))
	if err != nil {
		esc = b
	}
	cost := awslimit.JSONStringLen(esc)
	if cost > v.budget {
		v.cut = true
		return false
	}
	v.budget -= cost
	return true
}

// compensation renders a failed workflow's compensation: its state and,
// once it started, each step with the step it undoes.
func (v *viewer) compensation() *ViewCompensation {
	root := v.t.Root
	if root.Compensable == 0 {
		return nil
	}
	out := &ViewCompensation{State: cmp.Or(root.Compensation, "not_started"), StepsTotal: root.Compensable}
	comp := v.t.Composite(wfdef.CompensatePath)
	if comp == nil {
		return out
	}
	out.Steps = []ViewCompensationStep{}
	for k, undo := range comp.Plan {
		path := wfdef.ChildPath(wfdef.CompensatePath, wfdef.Segment(wfdef.KindChain, k))
		s := ViewCompensationStep{Index: k, Undoes: undo, State: string(wfstate.Waiting)}
		if n := v.t.Item(undo); n != nil {
			s.Undoes = n.StepKey()
		}
		if j := v.jobs[wfdef.JobID(v.t.WorkflowID, path)]; j != nil {
			s.JobID, s.State, s.Type = new(j.ID), jobState(j.State), j.Type
			if len(j.Result) > 0 && v.fits(j.Result) {
				s.Result = j.Result
			}
			if j.State != job.Completed && j.Error != nil {
				s.Error, _ = json.Marshal(j.Error)
			}
		}
		out.Steps = append(out.Steps, s)
	}
	out.FailedStep = comp.FailedStep
	return out
}

// handlers renders the workflow's handlers with their state (waiting
// until the workflow fails or is cancelled).
func (v *viewer) handlers() map[string]ViewNode {
	out := map[string]ViewNode{}
	for _, name := range wfdef.Handlers {
		h := v.t.Special[wfdef.HandlerPath(name)]
		if h == nil {
			continue
		}
		var m ViewNode
		if h.Kind == wfdef.KindJob {
			v.leaf(h, &m)
			if j := v.jobs[wfdef.JobID(v.t.WorkflowID, h.Path)]; j == nil {
				m.State = string(h.State)
			}
		} else {
			m = v.entry(h, false)
			m.State = string(h.State)
		}
		m.Index, m.ID = nil, name
		out[name] = m
	}
	return out
}

// entry renders a node of the tree form.
func (v *viewer) entry(n *wfstore.Item, root bool) ViewNode {
	m := ViewNode{Index: new(n.Index), ID: n.StepKey()}
	if n.Kind == wfdef.KindJob {
		v.leaf(n, &m)
		return m
	}
	m.Type, m.Name, m.State = n.Kind, n.Name, v.state(n)
	if c := v.t.Composite(n.Path); c != nil && !root {
		m.TimeoutMS = c.TimeoutMS
		if c.Error != "" {
			m.Error = json.RawMessage(c.Error)
		}
	}
	list := []ViewNode{}
	for _, c := range v.t.Kids[n.Path] {
		list = append(list, v.entry(c, false))
	}
	if n.Kind == wfdef.KindChain {
		m.Steps = list
	} else {
		m.Jobs = list
	}
	if cbs := v.t.Callbacks[n.Path]; len(cbs) > 0 {
		m.Callbacks = map[string]ViewNode{}
		for name, c := range cbs {
			e := v.entry(c, false)
			e.Index = nil
			m.Callbacks[name] = e
		}
	}
	if !root {
		m.StartedAt, m.CompletedAt = n.StartedAt, n.CompletedAt
	}
	return m
}

// flat renders a workflow created in the dependency-graph form as
// ojs-http-binding.md section 14.2 shows it: every step with its id,
// depends_on, state, job id and result, in the order of the request's
// steps as run (a batch's jobs, then its callbacks).
func (v *viewer) flat() []ViewNode {
	kids := v.t.Kids[wfstore.RootPath]
	steps := []ViewNode{}
	step := func(c *wfstore.Item, m ViewNode, deps []string) {
		v.leaf(c, &m)
		m.State, m.DependsOn = v.flatState(c, m.State), deps
		steps = append(steps, m)
	}
	ids := make([]string, len(kids))
	for i, c := range kids {
		ids[i] = c.StepKey()
	}
	for i, c := range kids {
		deps := []string{}
		switch v.t.Root.Kind {
		case wfdef.KindChain:
			if i > 0 {
				deps = append(deps, ids[i-1])
			}
		case wfdef.KindGraph:
			for _, d := range c.Deps {
				if d < len(ids) {
					deps = append(deps, ids[d])
				}
			}
		}
		step(c, ViewNode{ID: ids[i], Index: new(c.Index)}, deps)
	}
	for _, name := range wfdef.Callbacks {
		if c := v.t.Callbacks[wfstore.RootPath][name]; c != nil {
			step(c, ViewNode{ID: c.StepKey(), Callback: name}, append([]string{}, ids...))
		}
	}
	return steps
}

// flatState is a step's state as section 14.2 shows it: the job's own
// state once it exists (completed, active, available, scheduled,
// retryable; failed for a discarded job), pending before.
func (v *viewer) flatState(n *wfstore.Item, treeState string) string {
	j := v.jobs[wfdef.JobID(v.t.WorkflowID, n.Path)]
	switch {
	case j == nil && treeState == string(wfstate.Waiting):
		return "pending"
	case j == nil:
		return treeState
	case j.State == job.Discarded:
		return string(wfstate.Failed)
	}
	return string(j.State)
}

// Progress is GET /workflows/{id}/progress (ojs-progress.md 9.2): the
// workflow's aggregate progress (ViewMetadata.Progress) and each job step's,
// in the view's order.
type Progress struct {
	WorkflowID string         `json:"workflow_id"`
	Type       string         `json:"type"`
	State      string         `json:"state"`
	Progress   float64        `json:"progress"`
	Steps      []StepProgress `json:"steps"`
}

// StepProgress is one job step's progress: 1 once completed, what a
// running job reported, null otherwise.
type StepProgress struct {
	ID       string   `json:"id"`
	JobID    *string  `json:"job_id"`
	Type     string   `json:"type"`
	State    string   `json:"state"`
	Progress *float64 `json:"progress"`
}

// ProgressOf is v's progress.
func (v *View) ProgressOf() *Progress {
	p := &Progress{WorkflowID: v.ID, Type: v.Type, State: v.State, Progress: v.Metadata.Progress, Steps: []StepProgress{}}
	var walk func(n *ViewNode)
	walk = func(n *ViewNode) {
		if n.ViewJob != nil {
			s := StepProgress{ID: n.ID, JobID: n.JobID, Type: n.Type, State: n.State, Progress: n.ViewJob.Progress}
			if n.State == string(wfstate.Completed) {
				s.Progress = new(1.0)
			}
			p.Steps = append(p.Steps, s)
		}
		for i := range n.Steps {
			walk(&n.Steps[i])
		}
		for i := range n.Jobs {
			walk(&n.Jobs[i])
		}
		for _, k := range slices.Sorted(maps.Keys(n.Callbacks)) {
			c := n.Callbacks[k]
			walk(&c)
		}
	}
	walk(&v.ViewNode)
	return p
}
