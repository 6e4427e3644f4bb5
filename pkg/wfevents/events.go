// Package wfevents derives the workflow events (ojs-workflows.md Appendix
// B) from the stream function's changes of workflow nodes and workflow
// jobs: a Deriver reads what a change does not carry (a workflow's root,
// a chain's length) from the workflow items (pkg/wfstore) and the jobs
// (pkg/store), and caches what never changes of a node for the life of
// the process. pkg/engine calls it for each batch of changes.
package wfevents

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// Deriver derives the workflow events of stream changes (Events). One
// lives as long as the stream function's process, and its shapes cache
// with it.
type Deriver struct {
	// st is the workflow items' store, jobs the table kernel's job store;
	// both on the same table.
	st   *wfstore.Store
	jobs *store.Store
	// shapes caches what never changes of the nodes events are derived
	// from (see Events).
	shapes *shapeCache
}

// New returns a deriver on the table kernel st: its workflow items
// (wfstore.New(st)) and its jobs (st).
func New(st *store.Store) *Deriver {
	return &Deriver{st: wfstore.New(st), jobs: st, shapes: &shapeCache{}}
}

// NodeChange is one stream record of a workflow node: the node before
// (nil when created) and after, and the record's time.
type NodeChange struct {
	Old, New wfstore.Node
	At       time.Time
}

// JobChange is one stream record of a job: before, after, the item
// version after, and the record's time.
type JobChange struct {
	Old, New *job.Job
	Version  int64
	At       time.Time
}

// Events returns the workflow events (ojs-workflows.md Appendix B, with
// the fields of ojs-events.md section 4.4) that a batch of changes
// implies:
//
//   - root created: workflow.created, then workflow.started (a workflow
//     starts at creation: its first jobs are written with it);
//   - a job of a workflow finished: workflow.step_completed or
//     workflow.step_failed in a chain, workflow.job_completed or
//     workflow.job_failed in a group, batch or graph (callbacks: their
//     job events and workflow.callback_fired tell it);
//   - a nested chain, group or batch finished: the same, for its parent;
//   - a batch's callbacks triggered: workflow.callback_fired each;
//   - root finished: workflow.completed, workflow.failed or
//     workflow.cancelled.
//
// Every event's id is derived from the item and its version, so a
// duplicated record yields the same events. Reads (the root for its name,
// a chain for its length) are cached for the batch, and what never changes
// once written (a node's kind, name and number of children) for the life
// of the process; a job carries its step id. So a chain step's events cost
// no read in a warm stream function.
func (d *Deriver) Events(ctx context.Context, source string, nodes []NodeChange, jobs []JobChange) ([]events.Event, error) {
	b := &wfEvents{d: d, source: source, nodes: map[string]wfstore.Node{}}
	for _, c := range nodes {
		if c.New != nil {
			b.put(c.New)
			d.shapes.put(c.New)
		}
	}
	for _, c := range nodes {
		if c.New == nil {
			continue
		}
		if err := b.nodeChange(ctx, c); err != nil {
			return nil, err
		}
	}
	for _, c := range jobs {
		if err := b.jobChange(ctx, c); err != nil {
			return nil, err
		}
	}
	return b.out, nil
}

type wfEvents struct {
	d      *Deriver
	source string
	nodes  map[string]wfstore.Node
	out    []events.Event
}

// shapeOf is the unchanging part of a node: from the process's cache, or
// read once; nil if the node no longer exists.
func (b *wfEvents) shapeOf(ctx context.Context, wfID, path string) (*shape, error) {
	if s, ok := b.d.shapes.get(wfID + path); ok {
		return &s, nil
	}
	n, err := b.node(ctx, wfID, path)
	if err != nil || n == nil {
		return nil, err
	}
	s := b.d.shapes.put(n)
	return &s, nil
}

func (b *wfEvents) put(n wfstore.Node) {
	k := n.Base().WorkflowID + n.Base().Path
	if cur, ok := b.nodes[k]; !ok || cur == nil || cur.Base().Version() < n.Base().Version() {
		b.nodes[k] = n
	}
}

// root reads a workflow's root once per batch; nil if it no longer
// exists.
func (b *wfEvents) root(ctx context.Context, wfID string) (*wfstore.Root, error) {
	n, err := b.node(ctx, wfID, wfstore.RootPath)
	r, _ := n.(*wfstore.Root)
	return r, err
}

// node reads a node once per batch; nil if it no longer exists.
func (b *wfEvents) node(ctx context.Context, wfID, path string) (wfstore.Node, error) {
	k := wfID + path
	if n, ok := b.nodes[k]; ok {
		return n, nil
	}
	n, err := b.d.st.GetNode(ctx, wfID, path)
	if errors.Is(err, store.ErrNotFound) {
		n, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	b.nodes[k] = n
	return n, nil
}

func (b *wfEvents) add(wfID, typ string, at time.Time, seq int64, root *wfstore.Root, data map[string]any, key ...string) {
	var s *shape
	if root != nil {
		sh := shapeOfNode(root)
		s = &sh
	}
	b.addShaped(wfID, typ, at, seq, s, data, key...)
}

func (b *wfEvents) addShaped(wfID, typ string, at time.Time, seq int64, root *shape, data map[string]any, key ...string) {
	data["workflow_id"] = wfID
	if root != nil {
		data["workflow_type"], data["workflow_name"] = root.kind, root.name
		if root.tenant != "" {
			data["tenant_id"] = root.tenant // paged with the tenant's (docs/multi-tenancy.md)
		}
	}
	b.out = append(b.out, events.New(b.source, typ, wfID, at, seq, data, key...))
}

func (b *wfEvents) nodeChange(ctx context.Context, c NodeChange) error {
	n, at := c.New.Base(), c.At
	var oldState wfstate.State
	if c.Old != nil {
		oldState = c.Old.Base().State
	}
	key := func(k int) []string { return []string{n.Path, strconv.FormatInt(n.Version(), 10), strconv.Itoa(k)} }
	seq := func(k int) int64 { return n.Version()*8 + int64(k) }
	comp := wfstore.CompositeOf(c.New)
	if comp != nil {
		if err := b.compositeChange(ctx, comp, wfstore.CompositeOf(c.Old), at, key, seq); err != nil {
			return err
		}
	}
	if strings.HasPrefix(n.Path, "/~") && n.Path != wfdef.CompensatePath && oldState != n.State {
		root, err := b.root(ctx, n.WorkflowID)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(n.Path, "/~")
		switch n.State {
		case wfstate.Running:
			b.add(n.WorkflowID, events.WorkflowHandlerStarted, parseTime(n.StartedAt, at), seq(3), root, map[string]any{"handler": name}, key(3)...)
		case wfstate.Completed, wfstate.Failed:
			b.add(n.WorkflowID, events.WorkflowHandlerFinished, parseTime(n.CompletedAt, at), seq(3), root,
				map[string]any{"handler": name, "state": string(n.State)}, key(3)...)
		}
		return nil
	}
	if n.Path == wfdef.CompensatePath {
		return nil // the root's compensation attribute tells it
	}
	if r, ok := c.New.(*wfstore.Root); ok {
		old, _ := c.Old.(*wfstore.Root)
		return b.rootChange(ctx, r, old, at, key, seq)
	}
	if comp != nil && oldState != n.State && (n.State == wfstate.Completed || n.State == wfstate.Failed) {
		return b.stepEvent(ctx, n.WorkflowID, n.Path, n.Kind, n.State == wfstate.Completed, parseTime(n.CompletedAt, at), seq(0),
			map[string]any{"duration_ms": since(n.StartedAt, n.CompletedAt)}, key(0))
	}
	return nil
}

// compositeChange derives a composite's own events: its batch's
// callbacks fired, its timeout.
func (b *wfEvents) compositeChange(ctx context.Context, n, old *wfstore.Composite, at time.Time, key func(int) []string, seq func(int) int64) error {
	var oldFired []string
	if old != nil {
		oldFired = old.Fired
	}
	if len(n.Fired) > len(oldFired) {
		root, err := b.root(ctx, n.WorkflowID)
		if err != nil {
			return err
		}
		for i, cb := range slices.Sorted(slices.Values(n.Fired)) {
			if wfstore.HasString(oldFired, cb) {
				continue
			}
			b.add(n.WorkflowID, events.WorkflowCallbackFired, parseTime(n.FiredAt, at), seq(i), root, map[string]any{"callback": cb, "batch_path": n.Path,
				"job_id": wfdef.JobID(n.WorkflowID, wfdef.ChildPath(n.Path, cb))}, key(i)...)
		}
	}
	if n.Error != "" && (old == nil || old.Error == "") && n.State == wfstate.Failed {
		var e struct {
			Code string `json:"code"`
		}
		if json.Unmarshal([]byte(n.Error), &e) == nil && e.Code == workflow.ErrorCodeTimeout {
			root, err := b.root(ctx, n.WorkflowID)
			if err != nil {
				return err
			}
			b.add(n.WorkflowID, events.WorkflowTimedOut, parseTime(n.CompletedAt, at), seq(2), root, map[string]any{"node_path": n.Path,
				"node_type": n.Kind, "timeout_ms": n.TimeoutMS, "error": json.RawMessage(n.Error)}, key(2)...)
		}
	}
	return nil
}

// rootChange derives the workflow's own events from its root's change.
func (b *wfEvents) rootChange(ctx context.Context, n, old *wfstore.Root, at time.Time, key func(int) []string, seq func(int) int64) error {
	if old == nil {
		created := parseTime(n.CreatedAt, at)
		d := func() map[string]any { return map[string]any{"total_steps": n.Total, "job_count": n.JobCount} }
		b.add(n.WorkflowID, events.WorkflowCreated, created, seq(0), n, d(), key(0)...)
		b.add(n.WorkflowID, events.WorkflowStarted, parseTime(n.StartedAt, created), seq(1), n, d(), key(1)...)
		return nil
	}
	if n.Compensation != old.Compensation {
		switch n.Compensation {
		case wfstore.CompensationRunning:
			b.add(n.WorkflowID, events.WorkflowCompensating, at, seq(4), n, map[string]any{"steps": n.Compensable}, key(4)...)
		case wfstore.CompensationCompleted, wfstore.CompensationFailed:
			b.add(n.WorkflowID, events.WorkflowCompensated, at, seq(4), n, map[string]any{"state": n.Compensation}, key(4)...)
		}
	}
	if (old.State == wfstate.Failed || old.State == wfstate.Cancelled) && n.State == wfstate.Running {
		b.add(n.WorkflowID, events.WorkflowRetried, parseTime(n.StartedAt, at), seq(5), n, map[string]any{"run": n.Run, "previous_state": string(old.State)}, key(5)...)
		return nil
	}
	if old.State == n.State {
		return nil
	}
	end := parseTime(n.CompletedAt, at)
	d := map[string]any{"total_steps": n.Total, "job_count": n.JobCount, "duration_ms": since(n.StartedAt, n.CompletedAt)}
	switch n.State {
	case wfstate.Completed:
		b.add(n.WorkflowID, events.WorkflowCompleted, end, seq(0), n, d, key(0)...)
	case wfstate.Cancelled:
		b.add(n.WorkflowID, events.WorkflowCancelled, parseTime(n.CancelledAt, end), seq(0), n, d, key(0)...)
	case wfstate.Failed:
		if err := b.failedStep(ctx, n, d); err != nil {
			return err
		}
		b.add(n.WorkflowID, events.WorkflowFailed, end, seq(0), n, d, key(0)...)
	}
	return nil
}

func (b *wfEvents) jobChange(ctx context.Context, c JobChange) error {
	j := c.New
	if j == nil || j.WorkflowID == "" || !j.State.Terminal() || c.Old != nil && c.Old.State.Terminal() ||
		wfdef.IsCallback(j.WorkflowNode) || strings.HasPrefix(j.WorkflowNode, "/~") {
		return nil
	}
	if j.State == job.Cancelled {
		root, err := b.root(ctx, j.WorkflowID)
		if err != nil || root == nil || root.State == wfstate.Cancelled {
			return err // a cancelled workflow's jobs: workflow.cancelled tells it
		}
	}
	at := c.At
	if j.CompletedAt != nil {
		at = *j.CompletedAt
	} else if j.CancelledAt != nil {
		at = *j.CancelledAt
	}
	d := map[string]any{"job_id": j.ID, "attempt": j.Attempt, "job_type": j.Type}
	if j.StartedAt != nil && j.CompletedAt != nil {
		d["duration_ms"] = j.CompletedAt.Sub(*j.StartedAt).Milliseconds()
	}
	if j.State != job.Completed && j.Error != nil {
		d["error"] = map[string]any{"code": errCode(j.Error), "message": j.Error.Message}
	}
	if j.WorkflowStepID != "" {
		d["step_id"] = j.WorkflowStepID
	}
	return b.stepEvent(ctx, j.WorkflowID, j.WorkflowNode, j.Type, j.State == job.Completed, at, c.Version*8,
		d, []string{"job", j.ID, strconv.FormatInt(c.Version, 10)})
}

// stepEvent reports a step (a job, or a nested composite) of a workflow
// finishing. d holds the step's id already when its job carried it.
func (b *wfEvents) stepEvent(ctx context.Context, wfID, path, stepType string, ok bool, at time.Time, seq int64, d map[string]any, key []string) error {
	root, err := b.shapeOf(ctx, wfID, wfstore.RootPath)
	if err != nil || root == nil {
		return err
	}
	parent, err := b.shapeOf(ctx, wfID, wfdef.ParentPath(path))
	if err != nil || parent == nil {
		return err
	}
	idx := wfdef.ChildIndex(path)
	d["step_index"], d["step_type"], d["node_path"] = idx, stepType, path
	if _, known := d["step_id"]; !known {
		n, err := b.node(ctx, wfID, path)
		if err != nil {
			return err
		}
		d["step_id"] = strings.TrimPrefix(path, "/")
		if n != nil {
			d["step_id"] = n.Base().StepKey()
		}
		if id, ok := d["job_id"]; ok && (n == nil || n.Base().StepID == "") {
			d["step_id"] = id
		}
	}
	d["parent_type"] = parent.kind
	typ := events.WorkflowJobCompleted
	if parent.kind == wfdef.KindChain {
		typ = events.WorkflowStepCompleted
		remaining := parent.total - idx - 1
		if !ok {
			typ, remaining = events.WorkflowStepFailed, 0
		}
		d["remaining_steps"], d["steps_remaining"] = remaining, remaining
	} else {
		if !ok {
			typ = events.WorkflowJobFailed
		}
		d["job_index"] = idx
	}
	b.addShaped(wfID, typ, at, seq, root, d, key...)
	return nil
}

// shape is what the events need of a node that never changes once it is
// written: its kind, the workflow's name (the root's), its number of
// children.
type shape struct {
	kind, name, tenant string
	total              int
}

func shapeOfNode(n wfstore.Node) shape {
	s := shape{kind: n.Base().Kind}
	if c := wfstore.CompositeOf(n); c != nil {
		s.total = c.Total
	}
	if r, ok := n.(*wfstore.Root); ok {
		s.name, s.tenant = cmp.Or(r.Name, r.Kind), r.Tenant
	}
	return s
}

// shapeCache holds shapes for the life of a process (the stream function's
// execution environment), up to maxShapes, then starts over.
type shapeCache struct {
	mu sync.Mutex
	m  map[string]shape
}

const maxShapes = 100_000

func (c *shapeCache) get(k string) (shape, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[k]
	return s, ok
}

func (c *shapeCache) put(n wfstore.Node) shape {
	s := shapeOfNode(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxShapes {
		c.m = make(map[string]shape, 1024)
	}
	c.m[n.Base().WorkflowID+n.Base().Path] = s
	return s
}

// failedStep names the job whose failure failed the workflow, following
// each failed composite's failed_step down to a job step, with its error.
func (b *wfEvents) failedStep(ctx context.Context, root *wfstore.Root, d map[string]any) error {
	d["failed_step_id"], d["failed_step_type"] = "", ""
	d["error"] = map[string]any{"code": "workflow_failed", "message": "a step of the workflow failed"}
	if root.FailedIndex != nil {
		d["failed_step_index"] = *root.FailedIndex
	}
	var node wfstore.Node = root
	for depth := 0; depth <= wfdef.MaxDepth+1; depth++ {
		c := wfstore.CompositeOf(node)
		if c == nil || c.FailedStep == "" {
			break
		}
		next, err := b.node(ctx, root.WorkflowID, c.FailedStep)
		if err != nil || next == nil {
			return err
		}
		node = next
	}
	n, ok := node.(*wfstore.Step)
	if !ok {
		return nil
	}
	id := wfdef.JobID(root.WorkflowID, n.Path)
	d["failed_step_id"], d["failed_step_type"], d["failed_job_id"] = cmp.Or(n.StepID, id), n.JobType, id
	jobs, err := b.d.jobs.BatchGetJobs(ctx, []string{id})
	if err != nil {
		return err
	}
	if j := jobs[id]; j != nil && j.Error != nil {
		d["error"] = map[string]any{"code": errCode(j.Error), "message": j.Error.Message}
	}
	return nil
}

func errCode(e *job.ErrorInfo) string {
	switch {
	case e.Code != "":
		return e.Code
	case e.Type != "":
		return e.Type
	}
	return "handler_error"
}

func parseTime(s string, def time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t
	}
	return def
}

func since(from, to string) int64 {
	a, err1 := time.Parse(time.RFC3339Nano, from)
	b, err2 := time.Parse(time.RFC3339Nano, to)
	if err1 != nil || err2 != nil || b.Before(a) {
		return 0
	}
	return b.Sub(a).Milliseconds()
}
