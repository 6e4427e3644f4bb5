package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfjobs"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

// step is a finished child of a composite: a job step (Job set) or a
// nested composite that finished (Node set).
type step struct {
	wf, path string
	ok       bool
	job      *job.Job
	node     *wfstore.Composite
	// shard is the counter shard of its parent the step counts in.
	shard string
}

// index is the step's position among its parent's children (-1 for a
// callback).
func (s step) index() int { return wfdef.ChildIndex(s.path) }

func stepOfJob(j *job.Job) step {
	return step{wf: j.WorkflowID, path: j.WorkflowNode, ok: j.State == job.Completed, job: j, shard: j.WorkflowShard}
}

func stepOfNode(n *wfstore.Composite) step {
	return step{wf: n.WorkflowID, path: n.Path, ok: n.State == wfstate.Completed, node: n, shard: n.PShard}
}

// JobFinished advances the workflow of a job that reached a terminal
// state: it counts the step in its parent and applies what follows (the
// next step of a chain, the steps of a graph whose dependencies are met,
// a batch's callbacks, the parent finishing, and so on up the tree). The
// request that finished the job calls it before answering; the stream
// function's Verify calls it for a finish the request did not record. It
// is idempotent: every write is conditional or a set addition, and a
// repeated call finds each consequence done.
func (e *Engine) JobFinished(ctx context.Context, j *job.Job) error {
	if j == nil || j.WorkflowID == "" || !j.State.Terminal() {
		return nil
	}
	if j.State == job.Cancelled {
		// Cancelling a workflow cancels its jobs: nothing to advance.
		root, err := found(e.st.GetRoot(ctx, j.WorkflowID))
		if err != nil || root == nil || root.State == wfstate.Cancelled {
			return err
		}
	}
	return e.advance(ctx, stepOfJob(j))
}

// advance records s in its parent and walks up while composites finish.
// A count a retry's mark refused ends the walk: the retry counts the
// step once it has re-opened the workflow (reopen).
func (e *Engine) advance(ctx context.Context, s step) error {
	for s.path != wfstore.RootPath {
		next, err := e.stepDone(ctx, s)
		if wfstore.RefusedByReopening(err) {
			e.log.InfoContext(ctx, "workflow step left to the retry re-opening its workflow", "workflow_id", s.wf, "node", s.path)
			return nil
		}
		if err != nil || next == nil {
			return err
		}
		s = *next
	}
	return nil
}

// stepDone records s in its parent; it returns the parent as a finished
// step when this finished it (or found it finished), else nil.
func (e *Engine) stepDone(ctx context.Context, s step) (*step, error) {
	switch {
	case s.path == wfdef.CompensatePath:
		if s.node == nil {
			return nil, nil
		}
		return nil, (saga{e}).endCompensation(ctx, s.node)
	case strings.HasPrefix(s.path, wfdef.CompensatePath+"/"):
		return (saga{e}).compensationStepDone(ctx, s)
	case wfdef.ParentPath(s.path) == wfstore.RootPath && strings.HasPrefix(s.path, "/~"):
		return nil, (saga{e}).handlerDone(ctx, s)
	}
	switch wfdef.ParentKind(s.path) {
	case wfdef.KindChain:
		return e.chainStepDone(ctx, s)
	case wfdef.KindGraph:
		return e.graphStepDone(ctx, s)
	}
	if wfdef.IsCallback(s.path) {
		return e.callbackDone(ctx, s)
	}
	return e.memberDone(ctx, s)
}

// finish applies c, a wfstore.Finish of a composite (with the counts it
// makes in the same write), and returns the composite as a finished step
// for its parent. A composite already finished is returned as it is (a
// repeated call); a cancelled workflow stops the walk.
func (e *Engine) finish(ctx context.Context, wf string, c wfstore.Change) (*step, error) {
	if c.Path == wfstore.RootPath {
		return nil, e.finishRoot(ctx, wf, c)
	}
	n, err := e.st.Change(ctx, wf, c)
	var nc *wfstore.ErrNodeConflict
	switch {
	case errors.As(err, &nc):
		if n = nc.Composite(); n == nil || n.State == wfstate.Cancelled || !n.State.Terminal() {
			return nil, nil
		}
	case err != nil:
		return nil, err
	default:
		e.log.InfoContext(ctx, "workflow node finished", "workflow_id", wf, "node", c.Path, "state", string(n.State))
	}
	next := stepOfNode(n)
	return &next, nil
}

// finishRoot applies c, a wfstore.Finish of the workflow's root; a
// workflow that failed runs its compensation and on_failure handler
// (each once, whoever gets here).
func (e *Engine) finishRoot(ctx context.Context, wf string, c wfstore.Change) error {
	root, err := e.st.ChangeRoot(ctx, wf, c)
	moved := err == nil
	var nc *wfstore.ErrNodeConflict
	switch {
	case errors.As(err, &nc):
		if root = nc.Root(); root == nil || root.State == wfstate.Cancelled || !root.State.Terminal() {
			return nil
		}
	case err != nil:
		return err
	default:
		e.log.InfoContext(ctx, "workflow node finished", "workflow_id", wf, "node", c.Path, "state", string(root.State))
	}
	if root.State == wfstate.Failed && (moved || root.Compensation == "" || root.Compensation == wfstore.CompensationWaiting) {
		return (saga{e}).afterFailure(ctx, root)
	}
	return nil
}

// chainStepDone starts the next step of a chain, or finishes the chain
// after its last step or a failed one. The next step's jobs are written in
// the same transaction as the chain's count of step k, but for a workflow
// that is a chain whose next step is a job: that job's conditional put is
// the only write (Store.PutNext).
func (e *Engine) chainStepDone(ctx context.Context, s step) (*step, error) {
	parent, k := wfdef.ParentPath(s.path), s.index()
	if !s.ok {
		return e.finish(ctx, s.wf, wfstore.FailChain(parent, k, s.path, e.now()))
	}
	if (s.job != nil && s.job.WorkflowLast) || (s.node != nil && s.node.Last) {
		// The last step, as its job or node says: no next step to read.
		return e.finish(ctx, s.wf, wfstore.Finish(parent, true, e.now()).Counting(k, true))
	}
	nextPath := wfdef.ChildPath(parent, wfdef.Segment(wfdef.KindChain, k+1))
	var next wfstore.Node
	ahead := wfjobs.AheadOf(s.job)
	if len(ahead) > 0 {
		// The finished job carries the next step's definition: no read.
		next = wfjobs.StepOfAhead(s.job, parent, k+1, ahead[0])
	} else {
		var err error
		next, err = e.st.GetNode(ctx, s.wf, nextPath)
		if errors.Is(err, store.ErrNotFound) {
			return e.finish(ctx, s.wf, wfstore.Finish(parent, true, e.now()).Counting(k, true))
		}
		if err != nil {
			return nil, err
		}
	}
	t := wfstore.NewTree([]wfstore.Node{next})
	_, nextIsJob := next.(*wfstore.Step)
	if !nextIsJob {
		nodes, err := e.st.Subtree(ctx, s.wf, nextPath)
		if err != nil {
			return nil, err
		}
		t = wfstore.NewTree(nodes)
	}
	pr, err := e.mk.ChainResults(ctx, s.wf, s.job, parent, k)
	if err != nil {
		return nil, err
	}
	jobs, timed, err := e.mk.Launch(ctx, t, nextPath, pr)
	if err != nil {
		return nil, err
	}
	if len(ahead) > 1 && len(jobs) == 1 {
		rest := make([]*wfstore.Step, 0, len(ahead)-1)
		for i, a := range ahead[1:] {
			rest = append(rest, wfjobs.StepOfAhead(s.job, parent, k+2+i, a))
		}
		e.mk.CarryAhead(jobs[0], rest)
	}
	if err := e.mk.Admit(ctx, jobs); err != nil {
		return nil, err
	}
	if parent == wfstore.RootPath && nextIsJob && len(jobs) == 1 && len(timed) == 0 {
		// A workflow that is a chain, its next step a job: the job's put
		// is the step's record, with no write of the root. A stopped
		// workflow's cancel put a placeholder in its place first
		// (chainHold); finding one, the step finished late.
		written, err := e.st.PutNext(ctx, s.wf, jobs[0], e.redel)
		if err == nil && !written {
			err = e.lateStep(ctx, s.wf)
		}
		if err == nil {
			err = fault.Hit(fault.WorkflowAfterRecord)
		}
		return nil, err
	}
	// The writes are conditional on their scope running: the root for the
	// workflow's own steps, a handler's node for its chain's.
	scope := wfstore.RootPath
	if strings.HasPrefix(s.path, "/~") {
		head, _, _ := strings.Cut(s.path[1:], "/")
		scope = "/" + head
	}
	err = e.st.Advance(ctx, wfstore.Advance{WorkflowID: s.wf, Jobs: jobs, RedeliverAfter: e.redel, Scope: scope, ScopeStates: []wfstate.State{wfstate.Running},
		Changes: append([]wfstore.Change{wfstore.CountAndGoOn(parent, k)}, e.mk.Deadlines(timed)...)})
	if conflicted(err) || errors.Is(err, wfstore.ErrWorkflowNotRunning) {
		// The chain finished meanwhile (its timeout), or the workflow
		// did: nothing starts, but a failed workflow's compensation may
		// be waiting for this step.
		return nil, e.lateStep(ctx, s.wf)
	}
	if err == nil {
		err = fault.Hit(fault.WorkflowAfterRecord)
	}
	return nil, err
}

// lateStep goes on with a failed workflow whose compensation waits for
// steps still running, after one of them finished: without it the
// sweeper's check does so within compensationRecheck. It costs a read,
// only on this path (a step finishing after its workflow or chain did).
func (e *Engine) lateStep(ctx context.Context, wf string) error {
	root, err := found(e.st.GetRoot(ctx, wf))
	if err != nil || root == nil || root.State != wfstate.Failed || root.Compensation != wfstore.CompensationWaiting {
		return err
	}
	return (saga{e}).afterFailure(ctx, root)
}

// found is v and err, but nil for store.ErrNotFound (v the zero value).
func found[T any](v T, err error) (T, error) {
	if errors.Is(err, store.ErrNotFound) {
		var zero T
		return zero, nil
	}
	return v, err
}

// stopIfNotRunning turns "the workflow stopped" into the end of the walk:
// a cancelled workflow starts nothing more.
func stopIfNotRunning(err error) error {
	if errors.Is(err, wfstore.ErrWorkflowNotRunning) {
		return nil
	}
	return err
}

// memberDone counts a job (or nested composite) of a group or batch, in
// the composite itself or in its counter shard, and applies what follows
// when it was the last.
func (e *Engine) memberDone(ctx context.Context, s step) (*step, error) {
	parent, i := wfdef.ParentPath(s.path), s.index()
	var n *wfstore.Composite
	if s.shard == "" {
		var err error
		if n, err = e.st.Change(ctx, s.wf, wfstore.CountChild(parent, i, s.ok)); err != nil {
			return nil, err
		}
	} else {
		sh, err := e.st.CountOnShard(ctx, s.wf, parent, s.shard, i, s.ok)
		if err != nil || !sh.Full() {
			return nil, err
		}
		if n, err = e.st.RollUp(ctx, s.wf, parent, sh); err != nil {
			return nil, err
		}
	}
	if err := fault.Hit(fault.WorkflowAfterRecord); err != nil {
		return nil, err
	}
	return e.settle(ctx, n)
}

// membersDone reports whether every child of a group or batch finished,
// and how many failed.
func membersDone(n *wfstore.Composite) (bool, int) {
	if n.Shards > 0 {
		shards, _, fail := n.RolledCounts()
		return shards >= n.Shards, fail
	}
	return len(n.OK)+len(n.Fail) >= n.Total, len(n.Fail)
}

// settle applies what a composite's progress (as read or written) calls
// for and was not done yet: a composite whose children all finished (or
// can no longer run) finishes; a batch whose jobs finished fires its
// callbacks. It returns the composite as a finished step when it is
// finished.
func (e *Engine) settle(ctx context.Context, n *wfstore.Composite) (*step, error) {
	if n.State.Terminal() {
		if n.State == wfstate.Cancelled || n.Path == wfstore.RootPath {
			return nil, nil
		}
		s := stepOfNode(n)
		return &s, nil
	}
	if n.Reopening != "" {
		// A retry is re-opening the workflow: the counts of what failed are
		// being forgotten, so they decide nothing. The retry settles the
		// root when it is done.
		return nil, nil
	}
	switch n.Kind {
	case wfdef.KindChain:
		if len(n.Fail) > 0 {
			return e.finish(ctx, n.WorkflowID, wfstore.FailChain(n.Path, wfstore.SortedInts(n.Fail)[0], firstFailed(n), e.now()))
		}
		if len(n.OK) >= n.Total {
			return e.finish(ctx, n.WorkflowID, wfstore.Finish(n.Path, true, e.now()))
		}
	case wfdef.KindGraph:
		if done, failed := graphDone(n); done {
			return e.finish(ctx, n.WorkflowID, wfstore.Finish(n.Path, !failed, e.now()).Blaming(firstFailed(n)))
		}
	case wfdef.KindGroup:
		if done, fail := membersDone(n); done {
			return e.finish(ctx, n.WorkflowID, wfstore.Finish(n.Path, fail == 0, e.now()).Blaming(firstFailed(n)))
		}
	case wfdef.KindBatch:
		done, fail := membersDone(n)
		if !done {
			return nil, nil
		}
		fired := firedFor(n.Callbacks, fail)
		if len(fired) == 0 {
			return e.finish(ctx, n.WorkflowID, wfstore.Finish(n.Path, fail == 0, e.now()).Blaming(firstFailed(n)))
		}
		if n.FiredAt == "" {
			return nil, e.fire(ctx, n, fired)
		}
		if len(n.CallbacksOK)+len(n.CallbacksFail) >= len(n.Fired) {
			f := wfstore.Finish(n.Path, len(n.CallbacksFail) == 0, e.now())
			if len(n.CallbacksFail) > 0 {
				f = f.Blaming(wfdef.ChildPath(n.Path, n.CallbacksFail[0]))
			}
			return e.finish(ctx, n.WorkflowID, f)
		}
	}
	return nil, nil
}

// firstFailed is the path of the first failed child counted on n ("":
// none).
func firstFailed(n *wfstore.Composite) string {
	if len(n.Fail) == 0 {
		return ""
	}
	return wfdef.ChildPath(n.Path, wfdef.Segment(n.Kind, wfstore.SortedInts(n.Fail)[0]))
}

// firedFor lists the callbacks a finished batch triggers (ojs-workflows
// section 6.5).
func firedFor(callbacks []string, fail int) []string {
	var out []string
	for _, name := range wfdef.Callbacks {
		if wfstore.HasString(callbacks, name) && (name == "on_complete" || name == "on_success" && fail == 0 || name == "on_failure" && fail > 0) {
			out = append(out, name)
		}
	}
	return out
}

// fire enqueues a finished batch's triggered callbacks, exactly once: the
// callback jobs and the record that they fired are one transaction
// conditional on no callbacks having fired. Each callback receives the
// result of every job of the batch, failed ones included.
func (e *Engine) fire(ctx context.Context, n *wfstore.Composite, fired []string) error {
	nodes, err := e.st.Subtree(ctx, n.WorkflowID, n.Path)
	if err != nil {
		return err
	}
	t := wfstore.NewTree(nodes)
	pr, err := e.mk.Results(ctx, t, t.Kids[n.Path])
	if err != nil {
		return err
	}
	var jobs []*job.Job
	for _, name := range fired {
		var cb *wfstore.Step
		if it := t.Callbacks[n.Path][name]; it != nil {
			cb = t.Step(it.Path)
		}
		if cb == nil {
			return fmt.Errorf("workflow %s batch %s: callback %s missing", n.WorkflowID, n.Path, name)
		}
		j, err := e.mk.NewJob(cb, pr)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
	}
	if err := e.mk.Admit(ctx, jobs); err != nil {
		return err
	}
	err = e.st.Advance(ctx, wfstore.Advance{WorkflowID: n.WorkflowID, Jobs: jobs, RedeliverAfter: e.redel,
		Changes: []wfstore.Change{wfstore.FireCallbacksOnce(n.Path, fired, e.now())}})
	if conflicted(err) {
		return nil // fired already
	}
	if err == nil {
		e.log.InfoContext(ctx, "batch callbacks fired", "workflow_id", n.WorkflowID, "node", n.Path, "callbacks", fired)
		err = fault.Hit(fault.WorkflowAfterFire)
	}
	return stopIfNotRunning(err)
}

// callbackDone counts a finished callback; the batch finishes when every
// fired callback did: completed if they all completed.
func (e *Engine) callbackDone(ctx context.Context, s step) (*step, error) {
	name, _ := wfdef.CallbackName(s.path)
	n, err := e.st.Change(ctx, s.wf, wfstore.CountCallback(wfdef.ParentPath(s.path), name, s.ok))
	if err != nil {
		return nil, err
	}
	return e.settle(ctx, n)
}

// graphDoneWith is graphDone once step i is counted (ok or failed).
func graphDoneWith(n *wfstore.Composite, i int, ok bool) (bool, bool) {
	c := *n
	if ok {
		c.OK = append(append([]int{}, n.OK...), i)
	} else {
		c.Fail = append(append([]int{}, n.Fail...), i)
	}
	return graphDone(&c)
}

// graphDone reports whether every step of a graph finished or can never
// run (a step it depends on, directly or not, failed), and whether one
// failed.
func graphDone(n *wfstore.Composite) (done, failed bool) {
	deps := wfjobs.GraphOf(n).Deps
	blocked := make([]int8, len(deps)) // 0 unknown, 1 blocked, 2 not
	var isBlocked func(i int) bool
	isBlocked = func(i int) bool {
		if blocked[i] != 0 {
			return blocked[i] == 1
		}
		blocked[i] = 2
		for _, d := range deps[i] {
			if slices.Contains(n.Fail, d) || (!slices.Contains(n.OK, d) && isBlocked(d)) {
				blocked[i] = 1
				return true
			}
		}
		return false
	}
	for i := range deps {
		if !n.Done(i) && !isBlocked(i) {
			return false, false
		}
	}
	return true, len(n.Fail) > 0
}

// graphStepDone records a finished step of a graph. The steps that depend
// on it and whose other dependencies all completed start in the same
// transaction as the record; the record is conditional on the decisions
// taken for the others ("not all of its dependencies completed yet")
// still holding, so two steps finishing at once cannot both leave a
// common dependent unstarted: the later one's write fails, re-reads and
// starts it. A failed step starts nothing; the steps that depend on it
// never run. The graph's progress and the dependent steps (which the
// job names) are read in one request. In a workflow that is a graph the
// record and the jobs are two writes instead of a transaction
// (wfstore.AdvanceMarked; the root's mark says its steps start that way).
func (e *Engine) graphStepDone(ctx context.Context, s step) (*step, error) {
	parent, i := wfdef.ParentPath(s.path), s.index()
	gk := wfstore.NodeKey{WorkflowID: s.wf, Path: parent}
	stepKeyOf := func(x int) wfstore.NodeKey {
		return wfstore.NodeKey{WorkflowID: s.wf, Path: wfdef.ChildPath(parent, wfdef.Segment(wfdef.KindGraph, x))}
	}
	for tries := 0; tries < 20; tries++ {
		keys := []wfstore.NodeKey{gk}
		if s.ok && s.job != nil {
			for _, d := range s.job.WorkflowNext {
				keys = append(keys, stepKeyOf(d))
			}
		}
		p, err := e.st.ReadProgress(ctx, keys, nil, nil)
		if err != nil {
			return nil, err
		}
		g := p.Composite(gk)
		if g == nil {
			return nil, nil
		}
		if g.Done(i) || g.State.Terminal() {
			return e.settle(ctx, g)
		}
		if !s.ok {
			if last, _ := graphDoneWith(g, i, false); last {
				// Nothing else runs or can: count it and fail the graph in
				// one write.
				return e.finish(ctx, s.wf, wfstore.Finish(parent, false, e.now()).Counting(i, false).Blaming(s.path))
			}
			n, err := e.st.Change(ctx, s.wf, wfstore.CountChild(parent, i, false))
			if err != nil {
				return nil, err
			}
			return e.settle(ctx, n)
		}
		shape := wfjobs.GraphOf(g)
		var ready []*wfstore.Step
		var notAll [][]int
		for d := range shape.Deps {
			if !slices.Contains(shape.Deps[d], i) {
				continue
			}
			rest := slices.DeleteFunc(slices.Clone(shape.Deps[d]), func(x int) bool { return x == i })
			if !allIn(rest, g.OK) {
				notAll = append(notAll, rest)
				continue
			}
			n, _ := p.Nodes[stepKeyOf(d)].(*wfstore.Step)
			if n == nil {
				// The job did not name it (a step recreated by repair):
				// read it.
				if n, err = e.st.GetStep(ctx, s.wf, stepKeyOf(d).Path); err != nil {
					return nil, err
				}
			}
			ready = append(ready, n)
		}
		w := wfstore.CountAndGoOn(parent, i).IfNotAllOK(notAll)
		if len(ready) == 0 {
			if last, failed := graphDoneWith(g, i, true); last {
				// The last step: count it and finish the graph in one write.
				return e.finish(ctx, s.wf, wfstore.Finish(parent, !failed, e.now()).Counting(i, true).IfNotAllOK(notAll).Blaming(firstFailed(g)))
			}
			n, err := e.st.Change(ctx, s.wf, w)
			if conflicted(err) && !wfstore.RefusedByReopening(err) {
				continue // a dependency finished meanwhile: decide again
			}
			if err != nil {
				return nil, err
			}
			if err := fault.Hit(fault.WorkflowAfterRecord); err != nil {
				return nil, err
			}
			return e.settle(ctx, n)
		}
		jobs, err := e.mk.GraphJobs(ctx, s.wf, s.job, parent, shape, ready)
		if err == nil {
			err = e.mk.Admit(ctx, jobs)
		}
		if err != nil {
			return nil, err
		}
		if parent == wfstore.RootPath && len(jobs) == len(ready) {
			// A workflow that is a graph, the steps it starts jobs: two
			// writes instead of a transaction, guarded by the root's mark
			// (the steps that should exist follow from its ok set).
			err = e.st.AdvanceMarked(ctx, s.wf, w, wfstore.RootPath, jobs, e.redel)
		} else {
			err = e.st.Advance(ctx, wfstore.Advance{WorkflowID: s.wf, Jobs: jobs, RedeliverAfter: e.redel, Changes: []wfstore.Change{w}})
		}
		if conflicted(err) && !wfstore.RefusedByReopening(err) {
			continue
		}
		if err == nil {
			err = fault.Hit(fault.WorkflowAfterRecord)
		}
		return nil, stopIfNotRunning(err)
	}
	return nil, fmt.Errorf("workflow %s: graph step %s: too much contention", s.wf, s.path)
}
