package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfjobs"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
)

// Workflow control beyond OJS 1.0 (docs/workflows.md, "Control"):
// timeouts, compensation, the on_failure and on_cancel handlers, and
// retry from the failed step.

// stopper stops the work of a cancelled workflow or of a node that timed
// out: what has not started is cancelled, and the jobs a writer may still
// put are held by placeholders.
type stopper struct{ *Engine }

// saga runs what follows a workflow's failure or cancel: its compensation
// steps and its on_failure and on_cancel handlers.
type saga struct{ *Engine }

// ErrorCodeTimeout is the error code of a workflow or node that timed out.
const ErrorCodeTimeout = "workflow_timeout"

// Timeouts fails the nested workflow nodes whose timeout passed (the
// sweeper calls it every sweep; a workflow's own timeout is checked by
// Repair, at its deadline). It returns how many timed out.
func (e *Engine) Timeouts(ctx context.Context, limit int) (int, error) {
	now := e.now()
	due, err := wfstore.NewChecks(e.st).DueTimeouts(ctx, now, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range due {
		ok, err := e.timeout(ctx, k.WorkflowID, k.Path, now)
		if err != nil {
			return n, fmt.Errorf("time out %s%s: %w", k.WorkflowID, k.Path, err)
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// timeout fails a node whose deadline passed, once: what has not started
// under it is cancelled (its jobs, and its nested composites so that
// nothing starts there any more), active jobs run on and their results
// change nothing, and the failure goes up as any failed step's does. It
// reports whether this call timed the node out.
func (e *Engine) timeout(ctx context.Context, wf, path string, now time.Time) (bool, error) {
	n, err := found(e.st.GetComposite(ctx, wf, path))
	if err != nil || n == nil {
		return false, err
	}
	if n.State.Terminal() {
		// Finished, and still listed: a deadline written again by a
		// repeated advance after it finished. Its entry would be read
		// again every sweep, first in line, and enough of them would keep
		// the real timeouts behind them from being read at all.
		_, err := e.st.Change(ctx, wf, wfstore.DropCheck(path, n.State))
		return false, ignoreConflict(err)
	}
	if n.Deadline == 0 || now.Before(time.UnixMilli(n.Deadline)) {
		return false, nil
	}
	kind := n.Kind
	if path == wfstore.RootPath {
		kind = "workflow"
	}
	msg, _ := json.Marshal(map[string]any{"code": ErrorCodeTimeout, "type": ErrorCodeTimeout,
		"message": fmt.Sprintf("The %s did not finish within its timeout of %d ms.", kind, n.TimeoutMS), "timeout_ms": n.TimeoutMS})
	var failed wfstore.Node
	if path == wfstore.RootPath {
		failed, err = e.st.ChangeRoot(ctx, wf, wfstore.TimeOut(path, now, string(msg)))
	} else {
		failed, err = e.st.Change(ctx, wf, wfstore.TimeOut(path, now, string(msg)))
	}
	if err != nil {
		return false, ignoreConflict(err) // a conflict: it finished (or timed out) first
	}
	e.log.InfoContext(ctx, "workflow node timed out", "workflow_id", wf, "node", path, "timeout_ms", n.TimeoutMS)
	if err := (stopper{e}).stopBelow(ctx, wf, path, now); err != nil {
		return true, err
	}
	if root, ok := failed.(*wfstore.Root); ok {
		return true, (saga{e}).afterFailure(ctx, root)
	}
	return true, e.advance(ctx, stepOfNode(failed.(*wfstore.Composite)))
}

// stopBelow cancels what has not started under a node that ended early
// (timed out): its nested composites (so nothing starts in them) and its
// jobs that have not started; active jobs run on.
func (sp stopper) stopBelow(ctx context.Context, wf, path string, now time.Time) error {
	nodes, err := sp.st.Subtree(ctx, wf, path)
	if err != nil {
		return err
	}
	var ids []string
	for _, node := range nodes {
		n := node.Base()
		if strings.HasPrefix(n.Path, "/~") || n.Path == path {
			continue
		}
		if n.Kind == wfdef.KindJob {
			ids = append(ids, wfdef.JobID(wf, n.Path))
			continue
		}
		if !n.State.Terminal() {
			if _, err := sp.st.Change(ctx, wf, wfstore.CancelNode(n.Path, now)); ignoreConflict(err) != nil {
				return err
			}
		}
	}
	if path == wfstore.RootPath {
		// The workflow timed out while its creation may still be writing
		// its first jobs unguarded.
		root, err := sp.st.GetRoot(ctx, wf)
		if err != nil {
			return err
		}
		if err := sp.takeUnwritten(ctx, root, nodes, now); err != nil {
			return err
		}
	}
	_, _, err = sp.cancelJobs(ctx, ids, now, nil, nil)
	return err
}

// cancelJobs cancels the jobs among ids that have not started, 100 to a
// transaction (store.ApplyAll), and returns how many it cancelled and how
// many it did not get to before the time budget says once the jobs are
// read (nil: no limit; see store.WithBudget). A job that started or
// finished meanwhile is left alone. With guard, the jobs are cancelled
// only while it holds (store.ErrGuardFailed once it does not).
func (sp stopper) cancelJobs(ctx context.Context, ids []string, now time.Time, budget func() time.Time, guard *store.Guard) (cancelled, left int, err error) {
	jobs, err := sp.jobs.BatchGetJobs(ctx, ids)
	if err != nil {
		return 0, 0, err
	}
	var ts []store.Transition
	for _, j := range jobs {
		switch j.State {
		case job.Scheduled, job.Available, job.Pending, job.Retryable:
			ts = append(ts, store.Cancel(j.ID, now, j.State))
		}
	}
	if budget != nil {
		ctx = store.WithBudget(ctx, budget())
	}
	var errs []error
	if guard != nil {
		errs, err = sp.jobs.ApplyAllIf(ctx, ts, *guard)
	} else {
		errs, err = sp.jobs.ApplyAll(ctx, ts)
	}
	for _, err := range errs {
		switch {
		case err == nil:
			cancelled++
		case errors.Is(err, store.ErrNotTried):
			left++
		}
	}
	return cancelled, left, err
}

// rootChange applies a change of a workflow's root that applies only in
// the state it expects: one that finds the root in another (a retry
// re-opened it meanwhile) is left undone.
func rootChange(ctx context.Context, st *wfstore.Store, wfID string, c wfstore.Change) error {
	_, err := st.ChangeRoot(ctx, wfID, c)
	return ignoreConflict(err)
}

// conflicted reports whether err is a change's condition failing
// (*wfstore.ErrNodeConflict): the node moved on meanwhile.
func conflicted(err error) bool {
	var nc *wfstore.ErrNodeConflict
	return errors.As(err, &nc)
}

// ignoreConflict is err, or nil when it is a change's condition failing.
func ignoreConflict(err error) error {
	if conflicted(err) {
		return nil
	}
	return err
}

// cancelSliceEnd is when a pass of finishCancel stops starting
// transactions: Config.CancelSlice from now, or half of what is left of
// ctx's time if that is sooner (wall clock, as store.WithBudget reads it).
// The stream function's batch, and every record behind it in the shard,
// waits for the pass: a 2,100-job cancel under load outlasted the
// function's timeout, which restarted it to do it all again.
func (sp stopper) cancelSliceEnd(ctx context.Context) time.Time {
	now := time.Now()
	end := now.Add(sp.cancelSlice)
	if dl, ok := ctx.Deadline(); ok {
		end = minTime(end, now.Add(dl.Sub(now)/2))
	}
	return end
}

// finishCancel cancels the jobs of a cancelled workflow that the request
// cancelling it did not get to (its root marked cancelling, or the
// request died), then removes the mark and the root's check: the stream
// function runs it from the mark, the sweeper from the check. A pass stops
// at its slice (cancelSliceEnd) and leaves the mark and the check for the
// next. items are the workflow's items if the caller has them (nil: read
// them).
func (sp stopper) finishCancel(ctx context.Context, root *wfstore.Root, items []wfstore.Node) error {
	if items == nil {
		var err error
		if items, err = sp.st.WorkflowItems(ctx, root.WorkflowID); err != nil {
			return err
		}
	}
	if err := sp.takeUnwritten(ctx, root, items, sp.now()); err != nil {
		return err
	}
	// Only while the workflow is still cancelled: a retry re-opening it
	// meanwhile returns its jobs to their queues, which this must not
	// cancel again.
	guard := wfstore.RootIn(root.WorkflowID, wfstate.Cancelled)
	cancelled, left, err := sp.cancelJobs(ctx, jobIDs(root.WorkflowID, items), sp.now(), func() time.Time { return sp.cancelSliceEnd(ctx) }, &guard)
	if errors.Is(err, store.ErrGuardFailed) {
		sp.log.InfoContext(ctx, "cancelled workflow retried meanwhile; its jobs are left to the retry", "workflow_id", root.WorkflowID)
		return nil
	}
	if err != nil {
		return err
	}
	if left > 0 {
		// The root keeps its mark and its check. A pass that got
		// somewhere records it on a marked root, a change from which the
		// stream function runs the next pass (behind the records now in
		// its shard); the sweeper's check is the guarantee.
		sp.log.InfoContext(ctx, "cancelled workflow's jobs partly cancelled; the next pass goes on", "workflow_id", root.WorkflowID,
			"jobs_cancelled", cancelled, "jobs_left", left)
		if cancelled > 0 && root.Cancelling {
			return rootChange(ctx, sp.st, root.WorkflowID, wfstore.NextCancelPass())
		}
		return nil
	}
	if cancelled > 0 {
		sp.log.InfoContext(ctx, "workflow's remaining jobs cancelled", "workflow_id", root.WorkflowID, "jobs_cancelled", cancelled)
	}
	return rootChange(ctx, sp.st, root.WorkflowID, wfstore.CancelDone())
}

// takeUnwritten is the first step of a cancel (or of a root timeout's
// stop) while jobs of the workflow may still be written without a check
// of the root: its first jobs, while its creation writes them by plain
// conditional puts (root.Unguarded); a chain's next job, which its
// advance puts with no write of the root (wfstore.Store.PutNext); a
// graph's next steps, between the advance's mark and its puts
// (root.Launching, wfstore.AdvanceMarked). Every such job not written yet
// is put as cancelled, so the writer's put of it fails and the stopped
// workflow gains no job; the puts check that the root is still stopped,
// in the same transaction. The ones written already exist, and the cancel
// cancels them as any other. A chain is read again after its
// placeholder's put, until one holds: its step may have completed and put
// the job first.
func (sp stopper) takeUnwritten(ctx context.Context, root *wfstore.Root, items []wfstore.Node, now time.Time) error {
	for pass := 0; ; pass++ {
		var unwritten []*job.Job
		if root.Unguarded && pass == 0 {
			var err error
			if unwritten, _, err = sp.mk.Launch(ctx, wfstore.NewTree(items), wfstore.RootPath, wfjobs.EmptyResults(root.Kind)); err != nil {
				return err
			}
		}
		j, err := sp.launching(ctx, root, items)
		if err != nil {
			return err
		}
		if unwritten = append(unwritten, j...); len(unwritten) == 0 {
			return nil
		}
		ids := make([]string, len(unwritten))
		for i, j := range unwritten {
			ids[i] = j.ID
		}
		have, err := sp.jobs.BatchGetJobs(ctx, ids)
		if err != nil {
			return err
		}
		missing := slices.DeleteFunc(unwritten, func(j *job.Job) bool { return have[j.ID] != nil })
		if len(missing) == 0 {
			return nil
		}
		// Each put as cancelled (never run, in no index), in transactions that
		// check the root is still stopped: a retry that re-opened the workflow
		// since it was read lets their writers write them instead.
		tomb := make([]*job.Job, len(missing))
		for i, j := range missing {
			tomb[i] = wfstore.Placeholder(j, now)
		}
		err = sp.st.Advance(ctx, wfstore.Advance{WorkflowID: root.WorkflowID, Jobs: tomb,
			Scope: wfstore.RootPath, ScopeStates: []wfstate.State{wfstate.Cancelled, wfstate.Failed}})
		if errors.Is(err, wfstore.ErrWorkflowNotRunning) {
			sp.log.InfoContext(ctx, "workflow re-opened while its cancel took its unwritten jobs; their writers write them", "workflow_id", root.WorkflowID)
			return nil
		}
		if err != nil {
			return err
		}
		sp.log.InfoContext(ctx, "cancelled jobs the workflow's writers had not written yet", "workflow_id", root.WorkflowID, "jobs", len(missing))
		if root.Kind != wfdef.KindChain || pass > len(items) {
			return nil
		}
	}
}

// launching is, for a workflow that is a chain, the job its advance may
// still put (chainHold); for a workflow that is a graph, the jobs of every
// step whose dependencies all completed and that has not finished
// (graphLaunching).
func (sp stopper) launching(ctx context.Context, root *wfstore.Root, items []wfstore.Node) ([]*job.Job, error) {
	switch root.Kind {
	case wfdef.KindGraph:
		if root.Launching != "" {
			return sp.graphLaunching(ctx, root, items)
		}
	case wfdef.KindChain:
		return sp.chainHold(ctx, root, items)
	}
	return nil, nil
}

// chainHold is the job of a workflow that is a chain that an advance may
// still put (wfstore.Store.PutNext), built as the advance builds it (with
// the results of the steps before it), when it is not there: the next job
// step after the first step not completed, or that step's own job when
// the one before it completed. None when the first step not completed
// failed or was cancelled (nothing follows it), or when what follows is a
// composite (its advance is a transaction that checks the root). Its
// jobs are read here; the steps' items may be older: a next job that
// exists shows that the step before it completed (or holds already).
func (sp stopper) chainHold(ctx context.Context, root *wfstore.Root, items []wfstore.Node) ([]*job.Job, error) {
	t := wfstore.NewTree(items)
	kids := t.Kids[wfstore.RootPath]
	var ids []string
	for _, it := range kids {
		ids = append(ids, wfdef.JobID(root.WorkflowID, it.Path))
	}
	have, err := sp.jobs.BatchGetJobs(ctx, ids)
	if err != nil {
		return nil, err
	}
	jobOf := func(i int) *job.Job { return have[wfdef.JobID(root.WorkflowID, kids[i].Path)] }
	hold := func(i int) ([]*job.Job, error) {
		if i >= len(kids) || kids[i].Kind != wfdef.KindJob || i == 0 {
			return nil, nil
		}
		pr, err := sp.mk.ChainResults(ctx, root.WorkflowID, nil, wfstore.RootPath, i-1)
		if err != nil {
			return nil, err
		}
		js, _, err := sp.mk.Launch(ctx, t, kids[i].Path, pr)
		return js, err
	}
	for i, it := range kids {
		st := it.State
		if it.Kind == wfdef.KindJob {
			j := jobOf(i)
			if j == nil {
				return hold(i)
			}
			st = wfstate.Running
			switch {
			case j.State == job.Completed:
				st = wfstate.Completed
			case j.State.Terminal():
				st = wfstate.Failed
			}
		}
		switch {
		case st == wfstate.Completed:
			continue
		case st.Terminal():
			return nil, nil
		case i+1 < len(kids) && kids[i+1].Kind == wfdef.KindJob && jobOf(i+1) != nil:
			continue // it completed since the items were read, or holds already
		}
		return hold(i + 1)
	}
	return nil, nil
}

// graphLaunching is, for a workflow that is a graph whose steps start by
// marked advances, the jobs that should exist by its progress and do not:
// every job step not counted whose dependencies (one at least) all
// completed and whose job is missing, built as its advance builds it
// (with their results). Two batched reads, however wide the graph: the
// candidates' jobs, then the missing ones' dependencies.
func (sp stopper) graphLaunching(ctx context.Context, root *wfstore.Root, items []wfstore.Node) ([]*job.Job, error) {
	t := wfstore.NewTree(items)
	shape := wfjobs.GraphOf(&root.Composite)
	var cands []*wfstore.Step
	var ids []string
	for _, it := range t.Kids[wfstore.RootPath] {
		deps := shape.Deps[it.Index]
		n := t.Step(it.Path)
		if n == nil || len(deps) == 0 || root.Done(n.Index) || !allIn(deps, root.OK) {
			continue
		}
		cands = append(cands, n)
		ids = append(ids, wfdef.JobID(root.WorkflowID, n.Path))
	}
	have, err := sp.jobs.BatchGetJobs(ctx, ids) // (no request for none)
	if err != nil {
		return nil, err
	}
	missing := slices.DeleteFunc(cands, func(n *wfstore.Step) bool { return have[wfdef.JobID(root.WorkflowID, n.Path)] != nil })
	return sp.mk.GraphJobs(ctx, root.WorkflowID, nil, wfstore.RootPath, shape, missing)
}

// allIn reports whether every one of xs is in set.
func allIn(xs, set []int) bool {
	return !slices.ContainsFunc(xs, func(x int) bool { return !slices.Contains(set, x) })
}

// jobIDs lists the ids of a workflow's step jobs (not its handlers').
func jobIDs(wfID string, items []wfstore.Node) []string {
	var ids []string
	for _, n := range items {
		if st, ok := n.(*wfstore.Step); ok && !strings.HasPrefix(st.Path, "/~") {
			ids = append(ids, wfdef.JobID(wfID, st.Path))
		}
	}
	return ids
}

// afterFailure runs once a workflow failed: the compensations of its
// completed steps (newest first), then its on_failure handler. Each is
// started by a conditional write, so any number of callers start it
// once.
func (sg saga) afterFailure(ctx context.Context, root *wfstore.Root) error {
	if root.Compensable > 0 && (root.Compensation == "" || root.Compensation == wfstore.CompensationWaiting) {
		started, err := sg.startCompensation(ctx, root)
		if err != nil || started {
			return err
		}
	}
	if root.Compensation == wfstore.CompensationRunning || root.Compensation == wfstore.CompensationWaiting {
		return nil // the handler runs when the compensation ends
	}
	return sg.launchHandler(ctx, root, wfdef.HandlerOnFailure)
}

// compensationRecheck is how often the sweeper looks again at a failed
// workflow whose compensation waits for steps still running.
const compensationRecheck = 15 * time.Second

// startCompensation plans and starts a failed workflow's compensation:
// the steps that completed and carry a compensate job, newest completion
// first, run one after another. While any step that carries one has not
// finished (a timeout failed the workflow around it), it only marks the
// root waiting and sets its progress check: the step may still complete
// and must be undone with the others, so the plan is made once they all
// finished (by the sweeper's check, or by the late step's own record). It
// reports whether there was any (or may be).
func (sg saga) startCompensation(ctx context.Context, root *wfstore.Root) (bool, error) {
	wf := root.WorkflowID
	nodes, err := sg.st.WorkflowItems(ctx, wf)
	if err != nil {
		return false, err
	}
	var ids []string
	byID := map[string]*wfstore.Step{}
	for _, node := range nodes {
		if n, ok := node.(*wfstore.Step); ok && n.Compensate != "" && !strings.HasPrefix(n.Path, "/~") {
			id := wfdef.JobID(wf, n.Path)
			ids = append(ids, id)
			byID[id] = n
		}
	}
	jobs, err := sg.jobs.BatchGetJobs(ctx, ids)
	if err != nil {
		return false, err
	}
	var done []*wfstore.Step // completed: to undo
	running := 0
	for id, j := range jobs {
		switch {
		case j.State == job.Completed && j.CompletedAt != nil:
			done = append(done, byID[id])
		case !j.State.Terminal():
			running++
		}
	}
	now := sg.now()
	if running > 0 {
		_, err := sg.st.Change(ctx, wf, wfstore.CompensationWaits(now.Add(compensationRecheck)))
		if conflicted(err) {
			return true, nil // started by someone else (or the workflow was retried)
		}
		if err != nil {
			return false, err
		}
		if root.Compensation != wfstore.CompensationWaiting {
			sg.log.InfoContext(ctx, "workflow compensation waits for steps still running", "workflow_id", wf, "running", running)
		}
		root.Compensation = wfstore.CompensationWaiting
		return true, nil
	}
	if len(done) == 0 {
		// Nothing to undo: record that, so the handler can run.
		_, err := sg.st.Change(ctx, wf, wfstore.CompensationSkipped())
		var nc *wfstore.ErrNodeConflict
		if errors.As(err, &nc) && nc.Root() != nil && (nc.State() != wfstate.Failed || nc.Root().Compensation != wfstore.CompensationNone) {
			// Retried, or its compensation started elsewhere (whose end
			// runs the handler): not this caller's to go on with.
			root.Compensation = nc.Root().Compensation
			return true, nil
		}
		if err != nil && nc == nil {
			return false, err
		}
		root.Compensation = wfstore.CompensationNone
		return false, nil
	}
	jobOf := func(n *wfstore.Step) *job.Job { return jobs[wfdef.JobID(wf, n.Path)] }
	slices.SortFunc(done, func(a, b *wfstore.Step) int {
		return cmp.Or(jobOf(b).CompletedAt.Compare(*jobOf(a).CompletedAt), strings.Compare(b.Path, a.Path))
	})
	plan := make([]string, len(done))
	for i, n := range done {
		plan[i] = n.Path
	}
	first, err := sg.mk.CompensationJob(ctx, wf, 0, done[0], jobOf(done[0]))
	if err != nil {
		return false, err
	}
	comp := &wfstore.Composite{Item: wfstore.Item{WorkflowID: wf, Path: wfdef.CompensatePath, Kind: wfdef.KindChain, Name: "compensation", Index: -1,
		State: wfstate.Running, Times: wfstore.Times{StartedAt: job.Timestamp(now)}, TTL: first.WorkflowExpiry}, Total: len(plan), Plan: plan}
	err = sg.st.Advance(ctx, wfstore.Advance{WorkflowID: wf, Jobs: []*job.Job{first}, RedeliverAfter: sg.redel, NewNodes: []wfstore.Node{comp},
		Scope: wfstore.RootPath, ScopeStates: []wfstate.State{wfstate.Failed},
		Changes: []wfstore.Change{wfstore.CompensationStarts()}})
	if conflicted(err) || errors.Is(err, wfstore.ErrWorkflowNotRunning) {
		return true, nil // started by someone else (or the workflow was retried)
	}
	if err != nil {
		return false, err
	}
	root.Compensation = wfstore.CompensationRunning
	sg.log.InfoContext(ctx, "workflow compensation started", "workflow_id", wf, "steps", len(plan))
	return true, nil
}

// compensationStepDone goes on with a failed workflow's compensation
// after step k finished (whatever its outcome: one failed compensation
// does not stop the others); after the last, it records the outcome on
// the workflow and runs its on_failure handler.
func (sg saga) compensationStepDone(ctx context.Context, s step) (*step, error) {
	k := s.index()
	comp, err := sg.st.GetComposite(ctx, s.wf, wfdef.CompensatePath)
	if err != nil {
		return nil, err
	}
	if comp.Done(k) || comp.State.Terminal() {
		return nil, sg.endCompensation(ctx, comp)
	}
	if k+1 >= len(comp.Plan) {
		ok := s.ok && len(comp.Fail) == 0
		f := wfstore.Finish(wfdef.CompensatePath, ok, sg.now()).Counting(k, s.ok)
		if !ok {
			f = f.Blaming(cmp.Or(firstFailed(comp), s.path))
		}
		if _, err := sg.finish(ctx, s.wf, f); err != nil {
			return nil, err
		}
		comp, err = sg.st.GetComposite(ctx, s.wf, wfdef.CompensatePath)
		if err != nil {
			return nil, err
		}
		return nil, sg.endCompensation(ctx, comp)
	}
	next, err := sg.st.GetStep(ctx, s.wf, comp.Plan[k+1])
	if err != nil {
		return nil, err
	}
	undone, err := sg.jobs.BatchGetJobs(ctx, []string{wfdef.JobID(s.wf, next.Path)})
	if err != nil {
		return nil, err
	}
	j, err := sg.mk.CompensationJob(ctx, s.wf, k+1, next, undone[wfdef.JobID(s.wf, next.Path)])
	if err != nil {
		return nil, err
	}
	err = sg.st.Advance(ctx, wfstore.Advance{WorkflowID: s.wf, Jobs: []*job.Job{j}, RedeliverAfter: sg.redel,
		Scope: wfdef.CompensatePath, ScopeStates: []wfstate.State{wfstate.Running}, Changes: []wfstore.Change{wfstore.CountChild(wfdef.CompensatePath, k, s.ok)}})
	return nil, stopIfNotRunning(err)
}

// endCompensation records a finished compensation on the workflow, once,
// and runs the on_failure handler.
func (sg saga) endCompensation(ctx context.Context, comp *wfstore.Composite) error {
	if !comp.State.Terminal() {
		return nil
	}
	outcome := wfstore.CompensationCompleted
	if comp.State != wfstate.Completed {
		outcome = wfstore.CompensationFailed
	}
	root, err := sg.st.ChangeRoot(ctx, comp.WorkflowID, wfstore.CompensationEnds(outcome, comp.FailedStep))
	if err != nil {
		return ignoreConflict(err) // a conflict: retried or cancelled meanwhile
	}
	return sg.launchHandler(ctx, root, wfdef.HandlerOnFailure)
}

// launchHandler starts a handler of a failed or cancelled workflow, once
// (its node moves from waiting to running in the transaction that writes
// its first job). The handler receives the workflow's state, the error
// that failed it and the results of its completed steps, keyed by step.
func (sg saga) launchHandler(ctx context.Context, root *wfstore.Root, name string) error {
	if !wfstore.HasString(root.Handlers, name) {
		return nil
	}
	wf := root.WorkflowID
	path := wfdef.HandlerPath(name)
	nodes, err := sg.st.WorkflowItems(ctx, wf)
	if err != nil {
		return err
	}
	t := wfstore.NewTree(nodes)
	h := t.Special[path]
	if h == nil || h.State != wfstate.Waiting {
		return nil
	}
	pr, err := sg.mk.HandlerInput(ctx, t, root)
	if err != nil {
		return err
	}
	jobs, _, err := sg.mk.Launch(ctx, t, path, pr)
	if err != nil {
		return err
	}
	if err := sg.mk.Admit(ctx, jobs); err != nil {
		return err
	}
	err = sg.st.Advance(ctx, wfstore.Advance{WorkflowID: wf, Jobs: jobs, RedeliverAfter: sg.redel, Scope: path, ScopeStates: []wfstate.State{wfstate.Waiting},
		Changes: []wfstore.Change{wfstore.StartNode(path, sg.now())}})
	if conflicted(err) || errors.Is(err, wfstore.ErrWorkflowNotRunning) {
		return nil // started already
	}
	if err == nil {
		sg.log.InfoContext(ctx, "workflow handler started", "workflow_id", wf, "handler", name)
	}
	return err
}

// handlerDone records a finished handler (its job, or its chain) on the
// workflow.
func (sg saga) handlerDone(ctx context.Context, s step) error {
	name := strings.TrimPrefix(s.path, "/~")
	if s.job != nil {
		// A handler that is one job: its node records the outcome.
		if _, err := sg.st.Change(ctx, s.wf, wfstore.FinishHandler(s.path, s.ok, sg.now())); ignoreConflict(err) != nil {
			return err
		}
	}
	_, err := sg.st.Change(ctx, s.wf, wfstore.CountHandler(name, s.ok))
	return ignoreConflict(err)
}

// Retry re-opens a failed or cancelled workflow whose compensation has not
// run: its failed and cancelled steps run again, the steps that never ran
// run when their turn comes, and completed steps keep their results and
// do not run again. It answers 409 for a running or completed workflow
// (and for one a concurrent retry re-opened first).
func (e *Engine) Retry(ctx context.Context, wfID string) (*wfview.View, error) {
	if err := validWorkflowID(wfID); err != nil {
		return nil, err
	}
	root, err := e.st.GetRoot(ctx, wfID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && root.Creating) {
		return nil, ojserr.NotFoundf("workflow", wfID)
	}
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if root.State != wfstate.Failed && root.State != wfstate.Cancelled {
		return nil, ojserr.StateConflict(ojserr.Conflict, "Workflow %s is %s; only a failed or cancelled workflow can be retried.", wfID, root.State).
			With("workflow_id", wfID).With("current_state", string(root.State))
	}
	if compensated(root) {
		return nil, compensatedConflict(root)
	}
	// Not while an on_failure or on_cancel handler of this run works: the
	// retry would have to stop it half-way (its job's id is the same in
	// every run, so it cannot be left running beside a next launch).
	for _, name := range root.Handlers {
		h, err := found(e.st.GetNode(ctx, wfID, wfdef.HandlerPath(name)))
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		if h != nil && h.Base().State == wfstate.Running {
			return nil, ojserr.StateConflict(ojserr.Conflict, "Workflow %s's %s handler is still running; retry the workflow once it has finished.", wfID, name).
				With("workflow_id", wfID).With("current_state", string(root.State)).With("handler", name)
		}
	}
	now := e.now()
	checkAt, deadline := now.Add(CheckAfter), time.Time{}
	if root.TimeoutMS > 0 {
		// The workflow's timeout runs again from the retry.
		deadline = now.Add(time.Duration(root.TimeoutMS) * time.Millisecond)
		checkAt = minTime(checkAt, deadline)
	}
	if err := e.keepRunning(ctx, root, nil, now); err != nil {
		return nil, ojserr.Backend(err)
	}
	// (Not once its compensation started meanwhile.)
	_, err = e.st.ChangeRoot(ctx, wfID, wfstore.RetryWorkflow(root.State, now, checkAt, deadline))
	var nc *wfstore.ErrNodeConflict
	if errors.As(err, &nc) {
		if r := nc.Root(); r != nil && compensated(r) {
			return nil, compensatedConflict(r) // its compensation started meanwhile
		}
		return nil, ojserr.StateConflict(ojserr.Conflict, "Workflow %s is %s; only a failed or cancelled workflow can be retried.", wfID, nc.State()).
			With("workflow_id", wfID).With("current_state", string(nc.State()))
	}
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	e.log.InfoContext(ctx, "workflow retried", "workflow_id", wfID, "run", root.Run+1)
	if err := e.reopen(ctx, wfID); err != nil {
		// The sweeper's repair finishes re-opening it.
		e.log.WarnContext(ctx, "workflow retry not finished; the sweeper will", "workflow_id", wfID, "error", err.Error())
	}
	return e.Get(ctx, wfID)
}

// compensated reports whether a workflow's compensation started (a
// compensated workflow cannot be retried); one that waits for its
// running steps has not.
func compensated(root *wfstore.Root) bool {
	c := root.Compensation
	return c != "" && c != wfstore.CompensationNone && c != wfstore.CompensationWaiting
}

func compensatedConflict(root *wfstore.Root) error {
	return ojserr.StateConflict(ojserr.Conflict, "Workflow %s was compensated (its completed steps were undone); it cannot be retried.", root.WorkflowID).
		With("workflow_id", root.WorkflowID).With("current_state", string(root.State)).With("compensation", root.Compensation)
}

// removeFinishedJobs deletes the finished jobs of the job nodes among
// nodes (a retry re-arming a handler or a batch's callbacks, whose job ids
// are the same in every run). A job still running is left, unless stop is
// set: it is cancelled first, and deleted.
func (e *Engine) removeFinishedJobs(ctx context.Context, wf string, nodes []*wfstore.Item, stop bool) error {
	var ids []string
	for _, n := range nodes {
		if n.Kind == wfdef.KindJob {
			ids = append(ids, wfdef.JobID(wf, n.Path))
		}
	}
	jobs, err := e.jobs.BatchGetJobs(ctx, ids) // (no request for none)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if stop && !j.State.Terminal() {
			cancelled, err := e.jobs.Apply(ctx, store.Cancel(j.ID, e.now(), j.State))
			var ce *store.ConflictError
			switch {
			case err == nil:
				e.log.WarnContext(ctx, "workflow retry cancelled a handler job of the run before", "workflow_id", wf, "job_id", j.ID, "previous_state", string(j.State))
				j = cancelled
			case errors.As(err, &ce) && ce.Current != nil:
				j = ce.Current // it moved meanwhile
			default:
				return err
			}
		}
		switch j.State {
		case job.Completed, job.Discarded, job.Cancelled:
			if err := e.st.DeleteWorkflowJob(ctx, wf, j.ID, j.State); err != nil {
				return err
			}
		}
	}
	return nil
}

// reopen runs a retried workflow's failed and cancelled steps again: each
// failed or cancelled composite waits again (its deadline restarted), each
// failed or cancelled job goes back to its queue, the counts of what
// failed are forgotten, the handlers may run again, and every finished
// step not counted (one a timeout stopped counting) is advanced. Every
// write is conditional or idempotent, so a repeat finishes what a retry
// that died left.
func (e *Engine) reopen(ctx context.Context, wf string) error {
	nodes, err := e.st.WorkflowItems(ctx, wf)
	if err != nil {
		return err
	}
	now := e.now()
	t := wfstore.NewTree(nodes)
	jobs, err := e.jobs.BatchGetJobs(ctx, jobIDs(wf, nodes))
	if err != nil {
		return err
	}
	r := &retryRun{e: e, wf: wf, t: t, nodes: nodes, jobs: jobs, now: now, redecided: map[string]bool{}}
	// Composites: forget failed children, wait again. Each one with a
	// failed child (or failed itself) is marked (Composite.Reopening) in the
	// same write, and its counter shards with theirs, until the failed
	// jobs are back in their queues: a record of a failure the retry
	// undoes, arriving in between, finds the step uncounted and its job
	// still failed, and would count it again (failing a group whose
	// member then completes, firing a batch's on_failure though its
	// members all complete, or failing a nested composite its chain then
	// never goes past). Nothing counts on a marked item; what finished
	// meanwhile is counted below, once the marks are gone.
	marked, err := r.composites(ctx)
	if err != nil {
		return err
	}
	if err := r.handlers(ctx); err != nil {
		return err
	}
	readvance, err := r.placeholders(ctx)
	if err != nil {
		return err
	}
	if err := r.failedJobs(ctx); err != nil {
		return err
	}
	// The failed jobs are back in their queues: the marks go, the shards'
	// before their composites', the root's last (until then the
	// sweeper's repair finishes a retry that dies here).
	if err := e.clearMarks(ctx, wf, t, marked); err != nil {
		return err
	}
	if _, err := e.st.Change(ctx, wf, wfstore.ClearReopening(wfstore.RootPath)); ignoreConflict(err) != nil {
		return err
	}
	for _, s := range readvance {
		if err := e.advance(ctx, s); err != nil {
			return err
		}
	}
	// What the marks held back, and what a timeout stopped from counting,
	// is counted now, read again; a workflow whose failed steps were all
	// callbacks or composites may be complete as it stands. The root's
	// check does the same (Repair), with the same code.
	return e.repair(ctx, wf, now)
}

// retryRun is one retry's reopening of a workflow (Engine.reopen), in its
// phases: composites, handlers, placeholders, failed jobs.
type retryRun struct {
	e     *Engine
	wf    string
	t     *wfstore.Tree
	nodes []wfstore.Node
	jobs  map[string]*job.Job
	now   time.Time
	// redecided are jobs not to run again: the callbacks of batches whose
	// members run again, and removed placeholders.
	redecided map[string]bool
}

// failedChild reports a step whose failure the retry undoes.
func (r *retryRun) failedChild(n *wfstore.Item) bool {
	if n.Kind == wfdef.KindJob {
		j := r.jobs[wfdef.JobID(r.wf, n.Path)]
		return j != nil && (j.State == job.Discarded || j.State == job.Cancelled)
	}
	return n.State == wfstate.Failed || n.State == wfstate.Cancelled
}

// composites makes every composite with a failed child (or failed itself)
// wait again, marked until the failed jobs are back in their queues; a
// batch whose members run again has its callbacks decided again. It
// returns the marked composites by path.
func (r *retryRun) composites(ctx context.Context) (map[string]*wfstore.Composite, error) {
	e, wf, t, now, redecided, failedChild := r.e, r.wf, r.t, r.now, r.redecided, r.failedChild
	marked := map[string]*wfstore.Composite{} // by path (the root always)
	for _, node := range r.nodes {
		n := wfstore.CompositeOf(node)
		if n == nil || strings.HasPrefix(n.Path, "/~") {
			continue
		}
		if n.Reopening != "" {
			marked[n.Path] = n // the root, or by a retry that died before clearing it
		}
		var r wfstore.Reopening
		touched := n.State == wfstate.Failed || n.State == wfstate.Cancelled
		for _, c := range t.Kids[n.Path] {
			if failedChild(c) {
				touched = true
				if slices.Contains(n.Fail, c.Index) {
					r.Fail = append(r.Fail, c.Index)
				}
			}
		}
		for name, cb := range t.Callbacks[n.Path] {
			if failedChild(cb) {
				touched = true
				if wfstore.HasString(n.CallbacksFail, name) {
					r.CallbacksFail = append(r.CallbacksFail, name)
				}
			}
		}
		if n.Shards > 0 {
			if err := e.reopenShards(ctx, n, t, failedChild, &r); err != nil {
				return nil, err
			}
		}
		if n.Kind == wfdef.KindBatch && n.FiredAt != "" && (len(r.Fail) > 0 || len(r.Rolled) > 0) {
			// Members run again: the callbacks are decided again when they
			// finish (on_success may fire where on_failure did), with
			// their results. The callbacks' jobs of the run before are
			// removed (their ids are the same in every run) and not run
			// again now.
			r.Refire = true
			var cbs []*wfstore.Item
			for _, cb := range t.Callbacks[n.Path] {
				cbs = append(cbs, cb)
				redecided[wfdef.JobID(wf, cb.Path)] = true
			}
			if err := e.removeFinishedJobs(ctx, wf, cbs, false); err != nil {
				return nil, err
			}
		}
		if n.Path != wfstore.RootPath && (n.State == wfstate.Failed || n.State == wfstate.Cancelled) {
			r.From, r.At = n.State, now
			// Its clock restarts if it had started (its jobs run again
			// now); one a failure stopped before it started gets its
			// deadline when the advance reaches it, as the first time.
			if n.TimeoutMS > 0 && n.Deadline != 0 {
				r.Deadline = now.Add(time.Duration(n.TimeoutMS) * time.Millisecond)
			}
		}
		if touched && n.Path != wfstore.RootPath {
			r.Mark = true
			marked[n.Path] = n
		}
		if len(r.Fail) == 0 && len(r.CallbacksFail) == 0 && len(r.Rolled) == 0 && r.From == "" && n.FailedStep == "" && n.Error == "" && !r.Mark {
			continue
		}
		if _, err := e.st.Change(ctx, wf, wfstore.Reopen(n.Path, r)); ignoreConflict(err) != nil {
			return nil, err
		}
	}
	return marked, nil
}

// handlers makes the failure and cancel handlers wait again.
func (r *retryRun) handlers(ctx context.Context) error {
	e, wf, t, nodes, now := r.e, r.wf, r.t, r.nodes, r.now
	// Handlers wait again, for a later failure or cancel. The jobs they
	// ran in the run before are removed first: a handler job's id is
	// derived from the workflow and its path, the same in every run, so
	// the next launch could not write it (the handler would show running
	// and never run). Retry refuses while a handler runs; one launched
	// between its check and its write (or found by the sweeper's repair)
	// is cancelled, so that it can run again for a later failure.
	for path, h := range t.Special {
		if path != wfdef.CompensatePath && h.State != wfstate.Waiting {
			var under []*wfstore.Item
			for _, node := range nodes {
				if n := node.Base(); n.Path == path || strings.HasPrefix(n.Path, path+"/") {
					under = append(under, n)
				}
			}
			if err := e.removeFinishedJobs(ctx, wf, under, true); err != nil {
				return err
			}
			// (A chain handler's steps need no reset: its launch starts the
			// chain from its first step.)
			if err := e.rearm(ctx, wf, h, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// placeholders removes a chain's placeholder jobs and returns the steps
// to advance again from.
func (r *retryRun) placeholders(ctx context.Context) ([]step, error) {
	e, wf, t, jobs, redecided := r.e, r.wf, r.t, r.jobs, r.redecided
	// A chain's placeholders are removed, not run again: a cancel's
	// placeholder for a step whose step before it had not completed would
	// run before it, without its result. Each is put again
	// by the advance from the step before it: below for one that
	// completed, else when it completes.
	var readvance []step
	if t.Root != nil && t.Root.Kind == wfdef.KindChain {
		kids := t.Kids[wfstore.RootPath]
		for i := 1; i < len(kids); i++ {
			id := wfdef.JobID(wf, kids[i].Path)
			j := jobs[id]
			if j == nil || !wfstore.IsPlaceholder(j) {
				continue
			}
			if err := e.st.DeleteWorkflowJob(ctx, wf, id, j.State); err != nil {
				return nil, err
			}
			redecided[id] = true
			if p := jobs[wfdef.JobID(wf, kids[i-1].Path)]; p != nil && p.State == job.Completed {
				readvance = append(readvance, stepOfJob(p))
			} else if c := t.Composite(kids[i-1].Path); c != nil && c.State == wfstate.Completed {
				readvance = append(readvance, stepOfNode(c))
			}
		}
	}
	return readvance, nil
}

// failedJobs puts the failed and cancelled jobs back in their queues,
// but those redecided.
func (r *retryRun) failedJobs(ctx context.Context) error {
	e, jobs, redecided, now := r.e, r.jobs, r.redecided, r.now
	// Failed and cancelled jobs run again.
	for _, j := range jobs {
		if redecided[j.ID] {
			continue
		}
		if j.State == job.Discarded || j.State == job.Cancelled {
			if _, err := e.jobs.Apply(ctx, store.Reopen(j, now, e.redel)); err != nil {
				var ce *store.ConflictError
				if !errors.As(err, &ce) {
					return err
				}
			}
		}
	}
	return nil
}

// clearMarks removes a retry's marks from the counter shards of the
// composites in marked and from those composites but the root.
func (e *Engine) clearMarks(ctx context.Context, wf string, t *wfstore.Tree, marked map[string]*wfstore.Composite) error {
	for _, path := range slices.Sorted(maps.Keys(marked)) {
		if marked[path].Shards == 0 {
			continue
		}
		keys := map[string]bool{}
		for _, c := range t.Kids[path] {
			if c.PShard != "" && !keys[c.PShard] {
				keys[c.PShard] = true
				if err := e.st.ClearShardMark(ctx, wf, path, c.PShard); err != nil {
					return err
				}
			}
		}
	}
	for _, path := range slices.Sorted(maps.Keys(marked)) {
		if path == wfstore.RootPath {
			continue // the last (reopen)
		}
		if _, err := found(e.st.Change(ctx, wf, wfstore.ClearReopening(path))); err != nil {
			return err
		}
	}
	return nil
}

// rearm moves a handler's node back to waiting for its next launch,
// forgetting its counts. A running one, whose jobs were just cancelled,
// ends cancelled first.
func (e *Engine) rearm(ctx context.Context, wf string, n *wfstore.Item, now time.Time) error {
	from := n.State
	if from == wfstate.Running {
		cur, err := e.st.Change(ctx, wf, wfstore.CancelNode(n.Path, now, wfstate.Running))
		var nc *wfstore.ErrNodeConflict
		switch {
		case err == nil:
			from = cur.State
		case errors.As(err, &nc) && nc.Current != nil:
			from = nc.State() // finished meanwhile
		default:
			return err
		}
	}
	if from == wfstate.Waiting || from == wfstate.Running {
		return nil // waiting already, or launched again meanwhile
	}
	_, err := e.st.Change(ctx, wf, wfstore.RearmHandler(n.Path, from, now))
	return ignoreConflict(err)
}

// reopenShards forgets a wide group's or batch's failed children in their
// shards, and the roll-ups of those shards (they roll up again when the
// children finish).
func (e *Engine) reopenShards(ctx context.Context, n *wfstore.Composite, t *wfstore.Tree, failedChild func(*wfstore.Item) bool, r *wfstore.Reopening) error {
	byShard := map[string][]int{}
	for _, c := range t.Kids[n.Path] {
		if failedChild(c) {
			byShard[c.PShard] = append(byShard[c.PShard], c.Index)
		}
	}
	for key, idx := range byShard {
		if err := e.st.ForgetInShard(ctx, n.WorkflowID, n.Path, key, idx); err != nil {
			return err
		}
		for _, rolled := range n.Rolled {
			if strings.HasPrefix(rolled, key+":") {
				r.Rolled = append(r.Rolled, rolled)
			}
		}
	}
	return nil
}
