package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
)

// Finished is a change the stream function saw that finished a workflow
// step: a workflow job reaching a terminal state (Job), or a nested
// composite finishing (Node).
type Finished struct {
	Job  *job.Job
	Node *store.Node
}

func (f Finished) step() (step, bool) {
	switch {
	case f.Job != nil && f.Job.WorkflowID != "" && f.Job.State.Terminal():
		return stepOfJob(f.Job), true
	case f.Node != nil && f.Node.Path != store.RootPath && f.Node.Kind != KindJob &&
		(f.Node.State == wfstate.Completed || f.Node.State == wfstate.Failed):
		return stepOfNode(f.Node), true
	}
	return step{}, false
}

// counter names the item a step is counted in: its parent (Node) or one
// of its parent's shards (Shard).
func (s step) counter() (store.NodeKey, *store.ShardRef) {
	parent := parentOf(s.path)
	if s.shard != "" {
		return store.NodeKey{WorkflowID: s.wf, Path: parent}, &store.ShardRef{WorkflowID: s.wf, Path: parent, Key: s.shard}
	}
	return store.NodeKey{WorkflowID: s.wf, Path: parent}, nil
}

// recorded reports whether p shows s counted in its parent.
func (s step) recorded(p *store.Progress) bool {
	nk, sr := s.counter()
	if sr != nil {
		sh := p.Shards[*sr]
		return sh != nil && (hasInt(sh.OK, s.index()) || hasInt(sh.Fail, s.index()))
	}
	n := p.Nodes[nk]
	if n == nil {
		return false
	}
	if name, ok := callbackName(s.path); ok {
		return store.HasString(n.CallbacksOK, name) || store.HasString(n.CallbacksFail, name)
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
	var nodes []store.NodeKey
	var shards []store.ShardRef
	for _, f := range fs {
		s, ok := f.step()
		if !ok {
			continue
		}
		steps = append(steps, s)
		nk, sr := s.counter()
		nodes = append(nodes, nk, store.NodeKey{WorkflowID: s.wf, Path: store.RootPath})
		if sr != nil {
			shards = append(shards, *sr)
		}
	}
	if len(steps) == 0 {
		return nil
	}
	p, err := e.st.ReadProgress(ctx, nodes, shards)
	if err != nil {
		return err
	}
	settled := map[string]bool{}
	for _, s := range steps {
		root := p.Nodes[store.NodeKey{WorkflowID: s.wf, Path: store.RootPath}]
		if root == nil || root.State == wfstate.Cancelled {
			continue
		}
		if !s.recorded(p) {
			e.log.InfoContext(ctx, "advancing a workflow step the request did not record", "workflow_id", s.wf, "node", s.path)
			if err := e.advance(ctx, s); err != nil {
				return fmt.Errorf("workflow %s step %s: %w", s.wf, s.path, err)
			}
			continue
		}
		nk, sr := s.counter()
		key := nk.WorkflowID + nk.Path
		if sr != nil {
			key += "#" + sr.Key
		}
		if settled[key] {
			continue
		}
		settled[key] = true
		parent := p.Nodes[nk]
		if sr != nil {
			sh := p.Shards[*sr]
			if sh == nil || !sh.Full() {
				continue
			}
			if parent == nil || !parent.ShardRolled(sh.Key) {
				// A full shard not rolled up: the request that filled it
				// died before it did.
				if parent, err = e.st.RollUp(ctx, s.wf, nk.Path, sh); err != nil {
					return err
				}
			}
		}
		if parent == nil {
			continue
		}
		next, err := e.settle(ctx, parent)
		if err != nil {
			return err
		}
		if next != nil && !parent.State.Terminal() {
			if err := e.advance(ctx, *next); err != nil {
				return err
			}
		}
	}
	return nil
}

// creatingGrace is how long a workflow's creation may take before the
// sweeper deletes what a creator that died left behind.
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
	due, err := e.st.DueWorkflows(ctx, now, limit)
	if err != nil {
		return 0, err
	}
	for id, at := range due {
		if err := e.repair(ctx, id, now); err != nil {
			return 0, fmt.Errorf("repair workflow %s: %w", id, err)
		}
		if err := e.st.PostponeWorkflowCheck(ctx, id, at, now.Add(CheckAfter)); err != nil {
			return 0, err
		}
	}
	return len(due), nil
}

func (e *Engine) repair(ctx context.Context, id string, now time.Time) error {
	items, err := e.st.WorkflowItems(ctx, id)
	if err != nil || len(items) == 0 || items[0].Path != store.RootPath {
		return err
	}
	root := items[0]
	if root.Creating {
		if created, err := time.Parse(time.RFC3339Nano, root.CreatedAt); err == nil && now.Sub(created) > creatingGrace {
			deleted, err := e.st.DeleteWorkflow(ctx, id)
			if deleted {
				e.log.WarnContext(ctx, "deleted a workflow whose creation never finished", "workflow_id", id)
			}
			return err
		}
		return nil
	}
	if root.State != wfstate.Running {
		return nil
	}
	t := newTreeOf(items)
	var ids []string
	for _, n := range items {
		if n.Kind == KindJob {
			ids = append(ids, JobID(id, n.Path))
		}
	}
	jobs, err := e.st.BatchGetJobs(ctx, ids)
	if err != nil {
		return err
	}
	// First jobs a creator that died did not write.
	first, err := e.launch(ctx, t, store.RootPath, emptyResults(root.Kind))
	if err != nil {
		return err
	}
	var missing []*job.Job
	for _, j := range first {
		if jobs[j.ID] == nil {
			missing = append(missing, j)
		}
	}
	if len(missing) > 0 {
		e.log.WarnContext(ctx, "repairing a workflow whose first jobs are missing", "workflow_id", id, "missing", len(missing))
		if err := e.admitJobs(ctx, missing); err != nil {
			return err
		}
		if err := stopIfNotRunning(e.st.Advance(ctx, store.Advance{WorkflowID: id, Jobs: missing, RedeliverAfter: e.redel})); err != nil {
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
		if n.Kind != KindJob && n.Path != store.RootPath {
			fs = append(fs, Finished{Node: n})
		}
	}
	if err := e.Verify(ctx, fs); err != nil {
		return err
	}
	// Composites whose children are all done (a finish lost after the
	// last count).
	for _, n := range items {
		if n.Kind == KindJob || n.State.Terminal() {
			continue
		}
		cur, err := e.st.GetNode(ctx, id, n.Path)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		next, err := e.settle(ctx, cur)
		if err != nil {
			return err
		}
		if next != nil && !cur.State.Terminal() {
			if err := e.advance(ctx, *next); err != nil {
				return err
			}
		}
	}
	return nil
}
