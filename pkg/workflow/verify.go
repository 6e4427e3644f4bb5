package workflow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfjobs"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

// Finished is a change the stream function saw that finished a workflow
// step: a workflow job reaching a terminal state (Job), or a nested
// composite finishing (Node).
type Finished struct {
	Job  *job.Job
	Node wfstore.Node
}

func (f Finished) step() (step, bool) {
	if f.Job != nil && f.Job.WorkflowID != "" && f.Job.State.Terminal() {
		return stepOfJob(f.Job), true
	}
	if c, ok := f.Node.(*wfstore.Composite); ok && (c.State == wfstate.Completed || c.State == wfstate.Failed) {
		return stepOfNode(c), true
	}
	return step{}, false
}

// counter names the item a step is counted in: its parent (Node) or one
// of its parent's shards (Shard).
func (s step) counter() (wfstore.NodeKey, *wfstore.ShardRef) {
	nk := wfstore.NodeKey{WorkflowID: s.wf, Path: wfdef.ParentPath(s.path)}
	if s.shard == "" {
		return nk, nil
	}
	return nk, &wfstore.ShardRef{WorkflowID: s.wf, Path: nk.Path, Key: s.shard}
}

// nextInRootChain is the path of the step after s when s is a step of a
// workflow that is a chain and completed: the step whose job, when it is
// one, is the record that s completed (wfstore.Store.PutNext).
func (s step) nextInRootChain() (string, bool) {
	k := s.index()
	last := (s.job != nil && s.job.WorkflowLast) || (s.node != nil && s.node.Last)
	if !s.ok || last || k < 0 || wfdef.ParentPath(s.path) != wfstore.RootPath || wfdef.ParentKind(s.path) != wfdef.KindChain {
		return "", false
	}
	return wfdef.ChildPath(wfstore.RootPath, wfdef.Segment(wfdef.KindChain, k+1)), true
}

// nextInRootGraph are the paths of the steps that wait for s when s is a
// step of a workflow that is a graph and completed (as its job names
// them): steps an advance without a transaction may have counted ready
// but not written (wfstore.AdvanceMarked).
func (s step) nextInRootGraph() []string {
	if !s.ok || s.job == nil || wfdef.ParentPath(s.path) != wfstore.RootPath || wfdef.ParentKind(s.path) != wfdef.KindGraph {
		return nil
	}
	var paths []string
	for _, d := range s.job.WorkflowNext {
		paths = append(paths, wfdef.ChildPath(wfstore.RootPath, wfdef.Segment(wfdef.KindGraph, d)))
	}
	return paths
}

// unwrittenInRootGraph are the steps waiting for s whose dependencies all
// completed by root's progress but whose jobs p does not show: a marked
// advance's request died between its two writes.
func (s step) unwrittenInRootGraph(root *wfstore.Root, p *wfstore.Progress) []int {
	if root.State != wfstate.Running || root.Launching == "" || root.Kind != wfdef.KindGraph || s.nextInRootGraph() == nil {
		return nil
	}
	shape := wfjobs.GraphOf(&root.Composite)
	var out []int
	for _, d := range s.job.WorkflowNext {
		path := wfdef.ChildPath(wfstore.RootPath, wfdef.Segment(wfdef.KindGraph, d))
		if d < len(shape.Deps) && !root.Done(d) && allIn(shape.Deps[d], root.OK) && !p.Jobs[wfdef.JobID(s.wf, path)] {
			out = append(out, d)
		}
	}
	return out
}

// recorded reports whether p shows s counted in its parent.
func (s step) recorded(p *wfstore.Progress) bool {
	nk, sr := s.counter()
	if sr != nil {
		sh := p.Shards[*sr]
		return sh != nil && (slices.Contains(sh.OK, s.index()) || slices.Contains(sh.Fail, s.index()))
	}
	n := p.Composite(nk)
	if n == nil {
		return false
	}
	if name, ok := wfdef.CallbackName(s.path); ok {
		return wfstore.HasString(n.CallbacksOK, name) || wfstore.HasString(n.CallbacksFail, name)
	}
	return n.Done(s.index())
}

// Verify is the stream function's guarantee behind the requests that
// advance workflows. For every finished step it reads (in batches of 100,
// shared by the whole stream batch) the item its parent counts it in; a
// step already counted costs nothing more unless its parent is due to
// finish or fire callbacks and has not; a step not counted (the request
// that finished it died first, or has not got there yet) is advanced here
// with the same code, whose conditional writes make the two paths safe to
// race. Steps of cancelled workflows are skipped.
func (e *Engine) Verify(ctx context.Context, fs []Finished) error {
	var steps []step
	var nodes []wfstore.NodeKey
	var shards []wfstore.ShardRef
	var jobs []string // the next job steps of root chains (unwritten)
	for _, f := range fs {
		if r, ok := f.Node.(*wfstore.Root); ok {
			// A workflow that ended: its compensation and handlers run.
			if err := e.rootEnded(ctx, r); err != nil {
				return err
			}
			continue
		}
		s, ok := f.step()
		if !ok {
			continue
		}
		if strings.HasPrefix(s.path, "/~") {
			// A compensation or handler step: few, advanced directly (every
			// write of theirs is conditional).
			if err := e.advance(ctx, s); err != nil {
				return fmt.Errorf("workflow %s step %s: %w", s.wf, s.path, err)
			}
			continue
		}
		steps = append(steps, s)
		nk, sr := s.counter()
		nodes = append(nodes, nk, wfstore.NodeKey{WorkflowID: s.wf, Path: wfstore.RootPath})
		if sr != nil {
			shards = append(shards, *sr)
		}
		if next, ok := s.nextInRootChain(); ok {
			jobs = append(jobs, wfdef.JobID(s.wf, next))
		}
		for _, next := range s.nextInRootGraph() {
			jobs = append(jobs, wfdef.JobID(s.wf, next))
		}
	}
	if len(steps) == 0 {
		return nil
	}
	p, err := e.st.ReadProgress(ctx, nodes, shards, jobs)
	if err != nil {
		return err
	}
	settled := map[string]bool{}
	for _, s := range steps {
		root := p.Root(s.wf)
		if root == nil || root.State == wfstate.Cancelled {
			continue
		}
		np, inChain := s.nextInRootChain()
		if inChain && p.Jobs[wfdef.JobID(s.wf, np)] {
			continue // the next job is the step's record (Store.PutNext)
		}
		// (A root marked launching np is a marked advance's, written before
		// chains advanced by PutNext, whose request died before the job.)
		unrecorded := !s.recorded(p) || inChain && root.State == wfstate.Running && root.Launching == np
		var missing []int
		if !unrecorded {
			// The same for a graph: its steps whose dependencies all
			// completed, counted, without their jobs.
			missing = s.unwrittenInRootGraph(root, p)
		}
		if unrecorded || len(missing) > 0 {
			cur, err := e.current(ctx, s)
			switch {
			case err != nil:
				return err
			case cur == nil:
				continue // it changed since (a retry re-opened it): stale
			case unrecorded:
				e.log.InfoContext(ctx, "advancing a workflow step the request did not record", "workflow_id", s.wf, "node", s.path)
				err = e.advance(ctx, *cur)
			default:
				e.log.InfoContext(ctx, "writing the jobs of graph steps the request counted ready but did not write", "workflow_id", s.wf, "steps", missing)
				err = e.relaunchGraph(ctx, *cur, root, missing)
			}
			if err != nil {
				return fmt.Errorf("workflow %s step %s: %w", s.wf, s.path, err)
			}
			continue
		}
		nk, sr := s.counter()
		key := nk.WorkflowID + nk.Path + "#" + s.shard
		if settled[key] {
			continue
		}
		settled[key] = true
		parent := p.Composite(nk)
		if sr != nil {
			sh := p.Shards[*sr]
			if sh == nil || !sh.Full() {
				continue
			}
			if parent == nil || !parent.ShardRolled(sh.Key) {
				// A full shard not rolled up: the request that filled it
				// died before it did.
				if parent, err = e.st.RollUp(ctx, s.wf, nk.Path, sh); wfstore.RefusedByReopening(err) {
					continue // the retry re-opening it rolls it up
				} else if err != nil {
					return err
				}
			}
		}
		if parent != nil {
			if err := e.settleAndAdvance(ctx, parent); err != nil {
				return err
			}
		}
	}
	return nil
}

// settleAndAdvance settles n and, when that finished it, advances its
// parent (one found finished was advanced by whoever finished it).
func (e *Engine) settleAndAdvance(ctx context.Context, n *wfstore.Composite) error {
	next, err := e.settle(ctx, n)
	if err != nil || next == nil || n.State.Terminal() {
		return err
	}
	return e.advance(ctx, *next)
}

// relaunchGraph writes the jobs of the steps of a workflow that is a graph
// that s completed the dependencies of (with others) and whose jobs were
// not written, as the advance that counted them builds them: the root's
// record again (a set addition, conditional on the workflow running,
// marked) and the jobs' conditional puts.
func (e *Engine) relaunchGraph(ctx context.Context, s step, root *wfstore.Root, missing []int) error {
	ready := make([]*wfstore.Step, 0, len(missing))
	for _, d := range missing {
		n, err := e.st.GetStep(ctx, s.wf, wfdef.ChildPath(wfstore.RootPath, wfdef.Segment(wfdef.KindGraph, d)))
		if err != nil {
			return err
		}
		ready = append(ready, n)
	}
	jobs, err := e.mk.GraphJobs(ctx, s.wf, s.job, wfstore.RootPath, wfjobs.GraphOf(&root.Composite), ready)
	if err == nil {
		err = e.mk.Admit(ctx, jobs)
	}
	if err != nil {
		return err
	}
	err = e.st.AdvanceMarked(ctx, s.wf, wfstore.CountAndGoOn(wfstore.RootPath, s.index()), wfstore.RootPath, jobs, e.redel)
	return stopIfNotRunning(err)
}

// current re-reads a finished step the stream saw and returns it as it is
// now, or nil when it is no longer what the record said (a retry
// re-opened it since): a stale record must not count it again.
func (e *Engine) current(ctx context.Context, s step) (*step, error) {
	if s.job != nil {
		jobs, err := e.jobs.BatchGetJobs(ctx, []string{s.job.ID})
		if err != nil {
			return nil, err
		}
		j := jobs[s.job.ID]
		if j == nil || j.State != s.job.State {
			return nil, nil
		}
		cur := stepOfJob(j)
		return &cur, nil
	}
	n, err := found(e.st.GetComposite(ctx, s.wf, s.path))
	if err != nil || n == nil || n.State != s.node.State {
		return nil, err
	}
	cur := stepOfNode(n)
	return &cur, nil
}

// rootEnded runs what follows a workflow's end (the guarantee behind the
// request that ended it): a failed workflow's compensation and on_failure
// handler, a cancelled one's on_cancel handler. Each starts once.
func (e *Engine) rootEnded(ctx context.Context, n *wfstore.Root) error {
	end, err := time.Parse(time.RFC3339Nano, cmp.Or(n.CompletedAt, n.CancelledAt))
	if err != nil {
		end = e.now()
	}
	// Kept its retention after its end, and at least half RunGrace: time
	// for its compensation and handlers.
	if err := e.keep(ctx, n, nil, end.Unix()+max(n.Retain, int64(RunGrace/time.Second/2))); err != nil {
		return err
	}
	if n.State != wfstate.Failed && n.State != wfstate.Cancelled {
		return nil
	}
	cur, err := found(e.st.GetRoot(ctx, n.WorkflowID))
	if err != nil || cur == nil {
		return err
	}
	switch cur.State {
	case wfstate.Failed:
		return (saga{e}).afterFailure(ctx, cur)
	case wfstate.Cancelled:
		return (saga{e}).launchHandler(ctx, cur, wfdef.HandlerOnCancel)
	}
	return nil
}

// creatingGrace is how long a workflow's creation may take before the
// sweeper deletes what a creator that died left behind (or finishes an
// asynchronous creation).
const creatingGrace = 2 * time.Minute

// Repair checks running workflows whose check is due for progress that a
// request and the stream both lost (the stream's retries exhausted): it
// deletes a large workflow whose creator died while writing it, creates
// first jobs a creator did not get to, advances every finished step not
// counted, and settles every composite whose children are done. All of it
// is idempotent, so repairing a healthy workflow changes nothing. It
// returns how many workflows it checked.
func (e *Engine) Repair(ctx context.Context, limit int) (int, error) {
	now := e.now()
	due, err := wfstore.NewChecks(e.st).DueWorkflows(ctx, now, limit)
	if err != nil {
		return 0, err
	}
	for id, at := range due {
		if err := e.repair(ctx, id, now); err != nil {
			return 0, fmt.Errorf("repair workflow %s: %w", id, err)
		}
		next := now.Add(CheckAfter)
		if root, err := e.st.GetRoot(ctx, id); err == nil && root.Deadline > 0 && time.UnixMilli(root.Deadline).After(now) {
			next = minTime(next, time.UnixMilli(root.Deadline))
		}
		if err := wfstore.NewChecks(e.st).PostponeWorkflowCheck(ctx, id, at, next); err != nil {
			return 0, err
		}
	}
	return len(due), nil
}

// pastCreatingGrace reports whether root's workflow began more than
// creatingGrace before now: no creating request can still be writing it.
func pastCreatingGrace(root *wfstore.Root, now time.Time) bool {
	created, err := time.Parse(time.RFC3339Nano, root.CreatedAt)
	return err == nil && now.Sub(created) > creatingGrace
}

func (e *Engine) repair(ctx context.Context, id string, now time.Time) error {
	items, err := e.st.WorkflowItems(ctx, id)
	if err != nil || len(items) == 0 {
		return err
	}
	root, ok := items[0].(*wfstore.Root)
	if !ok {
		return nil
	}
	if len(root.CDef) > 0 || root.Creating {
		if !pastCreatingGrace(root, now) {
			return nil
		}
		if len(root.CDef) > 0 {
			// Accepted with 202: the stream function finishes its creation
			// (Resume); if that failed, this does.
			e.log.WarnContext(ctx, "finishing a workflow whose asynchronous creation did not", "workflow_id", id)
			if err := e.Resume(ctx, id); !errors.Is(err, wfstore.ErrCreationUnfinished) {
				return err
			}
			return nil // the next check goes on from what exists
		}
		deleted, err := e.st.DeleteWorkflow(ctx, id)
		if deleted {
			e.log.WarnContext(ctx, "deleted a workflow whose creation never finished", "workflow_id", id)
		}
		return err
	}
	if err := e.keepRunning(ctx, root, items, now); err != nil {
		return err
	}
	if root.State == wfstate.Cancelled {
		// Checked once after its cancel: its on_cancel handler and the
		// jobs the cancelling request or the stream did not get to. The
		// handler first: finishing the cancel removes the check, so a
		// handler that failed to start is tried again at the next sweep.
		if err := (saga{e}).launchHandler(ctx, root, wfdef.HandlerOnCancel); err != nil {
			return err
		}
		return (stopper{e}).finishCancel(ctx, root, items)
	}
	if root.State == wfstate.Failed && root.Compensation == wfstore.CompensationWaiting {
		// Its compensation waits for steps still running: start it if
		// they finished (else the check is set again).
		return (saga{e}).afterFailure(ctx, root)
	}
	if root.State != wfstate.Running {
		return nil
	}
	if root.Reopening != "" {
		// A retry that died half way, finished first: its marks refuse
		// every decision from counts, the timeout's too.
		return e.reopen(ctx, id)
	}
	if root.Deadline > 0 && !now.Before(time.UnixMilli(root.Deadline)) {
		_, err := e.timeout(ctx, id, wfstore.RootPath, now)
		return err
	}
	t := wfstore.NewTree(items)
	var ids []string
	for _, n := range items {
		if st, ok := n.(*wfstore.Step); ok {
			ids = append(ids, wfdef.JobID(id, st.Path))
		}
	}
	jobs, err := e.jobs.BatchGetJobs(ctx, ids)
	if err != nil {
		return err
	}
	// Jobs an advance built from a node read before an extension.
	var stale []string
	for id, j := range jobs {
		if j.WorkflowExpiry > 0 && j.WorkflowExpiry < root.TTL {
			stale = append(stale, id)
		}
	}
	if err := e.st.ExtendJobs(ctx, stale, root.TTL); err != nil {
		return err
	}
	// First jobs a creator that died did not write.
	first, _, err := e.mk.Launch(ctx, t, wfstore.RootPath, wfjobs.EmptyResults(root.Kind))
	if err != nil {
		return err
	}
	if missing := slices.DeleteFunc(first, func(j *job.Job) bool { return jobs[j.ID] != nil }); len(missing) > 0 {
		e.log.WarnContext(ctx, "repairing a workflow whose first jobs are missing", "workflow_id", id, "missing", len(missing))
		if err := e.mk.Admit(ctx, missing); err != nil {
			return err
		}
		if err := stopIfNotRunning(e.st.Advance(ctx, wfstore.Advance{WorkflowID: id, Jobs: missing, RedeliverAfter: e.redel})); err != nil {
			return err
		}
	}
	if root.Unguarded && pastCreatingGrace(root, now) {
		// Its creator died while writing the first jobs (a creation in the
		// API's request ends within its 29 s): they all exist now, so a
		// cancel need not look for unwritten ones.
		if err := rootChange(ctx, e.st, id, wfstore.ClearUnguarded()); err != nil {
			return err
		}
	}
	var fs []Finished
	for _, j := range jobs {
		if j.State.Terminal() {
			fs = append(fs, Finished{Job: j})
		}
	}
	for _, n := range items {
		if c, ok := n.(*wfstore.Composite); ok {
			fs = append(fs, Finished{Node: c})
		}
	}
	if err := e.Verify(ctx, fs); err != nil {
		return err
	}
	// Composites whose children are all done (a finish lost after the
	// last count).
	for _, node := range items {
		n := wfstore.CompositeOf(node)
		if n == nil || n.State.Terminal() {
			continue
		}
		cur, err := found(e.st.GetComposite(ctx, id, n.Path))
		if err == nil && cur != nil {
			err = e.settleAndAdvance(ctx, cur)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// keepRunning extends the expiry of workflow root, running (or run again
// by a retry) at now, to its retention after RunGrace from now once now
// is within half RunGrace of it: its progress check runs every
// CheckAfter, so it never passes while the workflow runs.
func (e *Engine) keepRunning(ctx context.Context, root *wfstore.Root, items []wfstore.Node, now time.Time) error {
	if root.TTL > now.Add(RunGrace/2).Unix() {
		return nil
	}
	return e.keep(ctx, root, items, now.Add(RunGrace).Unix()+root.Retain)
}

// keep extends the expiry of workflow root's items and jobs (of items,
// its nodes; nil: read) to until when it comes before: when it ends
// (rootEnded) and while it runs (keepRunning). Rare: only a workflow that
// runs longer than about RunGrace gets there.
func (e *Engine) keep(ctx context.Context, root *wfstore.Root, items []wfstore.Node, until int64) error {
	if root.TTL == 0 || root.TTL >= until {
		return nil
	}
	if items == nil {
		var err error
		if items, err = e.st.WorkflowItems(ctx, root.WorkflowID); err != nil {
			return err
		}
	}
	e.log.InfoContext(ctx, "extending a workflow's expiry", "workflow_id", root.WorkflowID, "ttl", until)
	if err := e.st.Extend(ctx, root.WorkflowID, allJobIDs(root.WorkflowID, items), until); err != nil {
		return err
	}
	root.TTL = until
	return nil
}
