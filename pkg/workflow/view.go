package workflow

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

// View is a workflow as the API shows it (ojs-workflows.md section 11,
// ojs-http-binding.md section 14.2).
type View map[string]any

// MaxViewResultBytes bounds what the step results and errors of one view
// cost in the API's Lambda response (measured as encoded there: a Lambda
// response is at most 6 MB, and the rest of a 10,000-job view takes up
// to about 2.5 MB). Results beyond it are left out of the view (each step
// says so); GET /ojs/v1/jobs/{job_id} returns each one.
const MaxViewResultBytes = 3 << 20

// Get returns the workflow's state with every step and job.
func (e *Engine) Get(ctx context.Context, wfID string) (*View, error) {
	if err := validWorkflowID(wfID); err != nil {
		return nil, err
	}
	nodes, err := e.st.WorkflowItems(ctx, wfID)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if len(nodes) == 0 || nodes[0].Path != wfstore.RootPath || (nodes[0].Creating && len(nodes[0].CDef) == 0) {
		// Not there, or still being written by the request creating it.
		return nil, ojserr.NotFoundf("workflow", wfID)
	}
	if root := nodes[0]; root.Creating || len(root.CDef) > 0 {
		// Accepted with 202 and still being written: progress only (the
		// full view, thousands of jobs read, waits until it is written).
		phase := "jobs"
		if root.Creating {
			phase = "nodes"
		}
		return creatingView(root, phase, len(nodes)-1, root.CreateItems), nil
	}
	var ids []string
	for _, n := range nodes {
		if n.Kind == KindJob {
			ids = append(ids, JobID(wfID, n.Path))
		}
		if n.Path == compensatePath {
			for k := range n.Plan {
				ids = append(ids, JobID(wfID, childPath(compensatePath, segment(KindChain, k))))
			}
		}
	}
	jobs, err := e.st.BatchGetJobs(ctx, ids)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return render(newTreeOf(nodes), jobs), nil
}

// viewer renders one workflow.
type viewer struct {
	t    *tree
	jobs map[string]*job.Job
	// stopped is set when the workflow is cancelled or failed: what never
	// started never will.
	stopped bool
	budget  int
	cut     bool
	// counts of leaf jobs (callbacks not included)
	completed, failed int
	failedIDs         []string
	errs              []map[string]any
	blockedMemo       map[string]bool
	// sets caches each composite's ok and fail sets as maps.
	sets map[string][2]map[int]bool
}

// counted reports whether a composite counted child i as ok and as failed
// (sets kept as maps: views of long chains ask for every step).
func (v *viewer) counted(n *wfstore.Node, i int) (ok, fail bool) {
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

// render builds the view from the nodes and the jobs that exist.
func render(t *tree, jobs map[string]*job.Job) *View {
	root := t.root
	v := &viewer{t: t, jobs: jobs, budget: MaxViewResultBytes,
		stopped: root.State == wfstate.Cancelled || root.State == wfstate.Failed}
	var out View
	if root.Form == "steps" {
		out = v.flat()
	} else {
		out = View(v.entry(root, true))
		delete(out, "index")
		delete(out, "id")
	}
	out["id"] = t.wfID
	out["type"] = root.Kind
	out["name"] = root.Name
	if root.Name == "" {
		out["name"] = root.Kind
	}
	out["state"] = string(root.State)
	meta := map[string]any{"created_at": root.CreatedAt, "job_count": root.JobCount, "completed_count": v.completed, "failed_count": v.failed}
	for k, val := range map[string]string{"started_at": root.StartedAt, "completed_at": root.CompletedAt, "cancelled_at": root.CancelledAt} {
		if val != "" {
			meta[k] = val
			out[k] = val
		}
	}
	out["created_at"] = root.CreatedAt
	out["metadata"] = meta
	if root.Kind == KindChain && root.FailedIndex != nil {
		out["failed_step_index"] = *root.FailedIndex
	}
	if len(v.failedIDs) > 0 {
		sort.Strings(v.failedIDs)
		out["failed_job_ids"] = v.failedIDs
		out["errors"] = v.errs
	}
	if root.TimeoutMS > 0 {
		out["timeout_ms"] = root.TimeoutMS
		out["deadline"] = job.Timestamp(time.UnixMilli(root.Deadline))
	}
	if root.Error != "" {
		out["error"] = json.RawMessage(root.Error)
	}
	if root.Run > 0 {
		out["retries"] = root.Run
	}
	if comp := v.compensation(); comp != nil {
		out["compensation"] = comp
	}
	if hs := v.handlers(); len(hs) > 0 {
		out["handlers"] = hs
	}
	if v.cut {
		out["results_truncated"] = true
		out["results_hint"] = "Some step results are left out to keep the answer under Lambda's 6 MB; read each with GET /ojs/v1/jobs/{job_id}."
	}
	// Direct-children counters (the conformance suite's shapes).
	done := 0
	for _, c := range t.kids[wfstore.RootPath] {
		if v.state(c) == string(wfstate.Completed) {
			done++
		}
	}
	if root.Kind == KindChain {
		out["steps_total"], out["steps_completed"] = root.Total, done
	} else {
		out["jobs_total"], out["jobs_completed"] = root.Total, done
		if root.Kind == KindGraph || root.Form == "steps" {
			out["steps_total"], out["steps_completed"] = root.Total, done
		}
	}
	if root.State == wfstate.Cancelled {
		cancelled, completed := 0, 0
		for _, n := range t.byPath {
			if n.Kind != KindJob {
				continue
			}
			switch v.state(n) {
			case string(wfstate.Cancelled):
				cancelled++
			case string(wfstate.Completed):
				completed++
			}
		}
		out["steps_cancelled"], out["steps_already_completed"] = cancelled, completed
	}
	return &out
}

// started reports whether the node at path has started (its jobs exist or
// existed): the root always; a chain's step once the one before it
// completed; every child of a started group or batch; a graph step once
// its dependencies completed; a callback once fired.
func (v *viewer) started(n *wfstore.Node) bool {
	if n.Path == wfstore.RootPath {
		return true
	}
	parent := v.t.byPath[parentOf(n.Path)]
	if parent == nil {
		return false
	}
	if name, ok := callbackName(n.Path); ok {
		return wfstore.HasString(parent.Fired, name)
	}
	if !v.started(parent) {
		return false
	}
	switch parent.Kind {
	case KindChain:
		if n.Index == 0 {
			return true
		}
		ok, _ := v.counted(parent, n.Index-1)
		return ok
	case KindGraph:
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
func (v *viewer) blocked(n *wfstore.Node) bool {
	if b, ok := v.blockedMemo[n.Path]; ok {
		return b
	}
	parent := v.t.byPath[parentOf(n.Path)]
	if parent == nil || parent.Kind != KindGraph {
		return false
	}
	if v.blockedMemo == nil {
		v.blockedMemo = map[string]bool{}
	}
	v.blockedMemo[n.Path] = false
	kids := v.t.kids[parent.Path]
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
func (v *viewer) state(n *wfstore.Node) string {
	if n.Kind != KindJob {
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
	if j := v.jobs[JobID(v.t.wfID, n.Path)]; j != nil {
		return jobState(j.State)
	}
	parent := v.t.byPath[parentOf(n.Path)]
	if v.stopped || v.blocked(n) || (parent != nil && parent.State.Terminal()) {
		return string(wfstate.Cancelled)
	}
	return string(wfstate.Waiting)
}

// jobState maps a job state to a workflow step state.
func jobState(s job.State) string {
	switch s {
	case job.Active:
		return "active"
	case job.Completed:
		return string(wfstate.Completed)
	case job.Discarded:
		return string(wfstate.Failed)
	case job.Cancelled:
		return string(wfstate.Cancelled)
	}
	return "pending"
}

// leaf fills a job step's entry.
func (v *viewer) leaf(n *wfstore.Node, m map[string]any) {
	m["type"] = n.JobType
	id := JobID(v.t.wfID, n.Path)
	m["job_id"] = nil
	m["state"] = v.state(n)
	counted := !isCallback(n.Path) && !strings.HasPrefix(n.Path, "/~")
	j := v.jobs[id]
	if j == nil {
		return
	}
	m["job_id"] = id
	m["attempt"] = j.Attempt
	if j.StartedAt != nil {
		m["started_at"] = job.Timestamp(*j.StartedAt)
	}
	if j.CompletedAt != nil {
		m["completed_at"] = job.Timestamp(*j.CompletedAt)
	}
	switch j.State {
	case job.Completed:
		if counted {
			v.completed++
		}
		if len(j.Result) > 0 {
			if v.fits(j.Result) {
				m["result"] = j.Result
			} else {
				m["result_truncated"] = true
			}
		}
	case job.Discarded, job.Cancelled:
		if counted {
			v.failed++
		}
		v.failedIDs = append(v.failedIDs, id)
		if b, _ := json.Marshal(j.Error); j.Error != nil && v.fits(b) {
			m["error"] = j.Error
			code := j.Error.Code
			if code == "" {
				code = j.Error.Type
			}
			v.errs = append(v.errs, map[string]any{"job_id": id, "node": n.Path, "code": code, "type": j.Error.Type, "message": j.Error.Message, "attempt": j.Attempt})
		}
	}
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
func (v *viewer) compensation() map[string]any {
	root := v.t.root
	if root.Compensable == 0 {
		return nil
	}
	out := map[string]any{"state": "not_started", "steps_total": root.Compensable}
	if root.Compensation != "" {
		out["state"] = root.Compensation
	}
	comp := v.t.special[compensatePath]
	if comp == nil {
		return out
	}
	steps := []map[string]any{}
	for k, undo := range comp.Plan {
		path := childPath(compensatePath, segment(KindChain, k))
		m := map[string]any{"index": k, "undoes": undo, "job_id": nil, "state": string(wfstate.Waiting)}
		if n := v.t.byPath[undo]; n != nil {
			m["undoes"] = stepKey(n)
		}
		if j := v.jobs[JobID(v.t.wfID, path)]; j != nil {
			m["job_id"], m["state"], m["type"] = j.ID, jobState(j.State), j.Type
			if len(j.Result) > 0 && v.fits(j.Result) {
				m["result"] = j.Result
			}
			if j.State != job.Completed && j.Error != nil {
				m["error"] = j.Error
			}
		}
		steps = append(steps, m)
	}
	out["steps"] = steps
	if comp.FailedStep != "" {
		out["failed_step"] = comp.FailedStep
	}
	return out
}

// handlers renders the workflow's handlers with their state (waiting
// until the workflow fails or is cancelled).
func (v *viewer) handlers() map[string]any {
	out := map[string]any{}
	for _, name := range Handlers {
		h := v.t.special[handlerPath(name)]
		if h == nil {
			continue
		}
		var m map[string]any
		if h.Kind == KindJob {
			m = map[string]any{}
			v.leaf(h, m)
			if j := v.jobs[JobID(v.t.wfID, h.Path)]; j == nil {
				m["state"] = string(h.State)
			}
		} else {
			m = v.entry(h, false)
			m["state"] = string(h.State)
		}
		delete(m, "index")
		m["id"] = name
		out[name] = m
	}
	return out
}

// entry renders a node of the tree form.
func (v *viewer) entry(n *wfstore.Node, root bool) map[string]any {
	m := map[string]any{"index": n.Index, "id": stepKey(n)}
	if n.Kind == KindJob {
		v.leaf(n, m)
		return m
	}
	m["type"] = n.Kind
	if n.Name != "" {
		m["name"] = n.Name
	}
	m["state"] = v.state(n)
	if n.TimeoutMS > 0 && !root {
		m["timeout_ms"] = n.TimeoutMS
	}
	if n.Error != "" && !root {
		m["error"] = json.RawMessage(n.Error)
	}
	list := []map[string]any{}
	for _, c := range v.t.kids[n.Path] {
		list = append(list, v.entry(c, false))
	}
	if n.Kind == KindChain {
		m["steps"] = list
	} else {
		m["jobs"] = list
	}
	if cbs := v.t.cbs[n.Path]; len(cbs) > 0 {
		out := map[string]any{}
		for name, c := range cbs {
			e := v.entry(c, false)
			delete(e, "index")
			out[name] = e
		}
		m["callbacks"] = out
	}
	if !root {
		for k, val := range map[string]string{"started_at": n.StartedAt, "completed_at": n.CompletedAt} {
			if val != "" {
				m[k] = val
			}
		}
	}
	return m
}

// flat renders a workflow created in the dependency-graph form as
// ojs-http-binding.md section 14.2 shows it: every step with its id,
// depends_on, state, job id and result, in the order of the request's
// steps as run (a batch's jobs, then its callbacks).
func (v *viewer) flat() View {
	root := v.t.root
	kids := v.t.kids[wfstore.RootPath]
	steps := []map[string]any{}
	ids := make([]string, len(kids))
	for i, c := range kids {
		ids[i] = stepKey(c)
	}
	for i, c := range kids {
		m := map[string]any{"id": stepKey(c), "index": c.Index}
		v.leaf(c, m)
		m["state"] = v.flatState(c, m["state"].(string))
		deps := []string{}
		switch root.Kind {
		case KindChain:
			if i > 0 {
				deps = append(deps, ids[i-1])
			}
		case KindGraph:
			for _, d := range c.Deps {
				if d < len(ids) {
					deps = append(deps, ids[d])
				}
			}
		}
		m["depends_on"] = deps
		steps = append(steps, m)
	}
	for _, name := range Callbacks {
		c := v.t.cbs[wfstore.RootPath][name]
		if c == nil {
			continue
		}
		m := map[string]any{"id": stepKey(c), "callback": name}
		v.leaf(c, m)
		m["state"] = v.flatState(c, m["state"].(string))
		m["depends_on"] = append([]string{}, ids...)
		steps = append(steps, m)
	}
	return View{"steps": steps}
}

// flatState is a step's state as section 14.2 shows it: the job's own
// state once it exists (completed, active, available, scheduled,
// retryable; failed for a discarded job), pending before.
func (v *viewer) flatState(n *wfstore.Node, treeState string) string {
	j := v.jobs[JobID(v.t.wfID, n.Path)]
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

// MarshalJSON keeps json.RawMessage results inline.
func (v View) MarshalJSON() ([]byte, error) { return json.Marshal(map[string]any(v)) }

// trimPath is a node's path without the leading slash.
func trimPath(p string) string { return strings.TrimPrefix(p, "/") }
