package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// NodeChange is one stream record of a workflow node: the node before
// (nil when created) and after, and the record's time.
type NodeChange struct {
	Old, New *store.Node
	At       time.Time
}

// Events returns the workflow events (ojs-workflows.md Appendix B, with the
// fields of ojs-events.md section 4.4) that a batch of node changes
// implies:
//
//   - root created: workflow.created, then workflow.started (a workflow
//     starts at creation: its first jobs are enqueued at once);
//   - a chain step's outcome recorded: workflow.step_completed or
//     workflow.step_failed; a group's or batch's job: workflow.job_completed
//     or workflow.job_failed;
//   - a batch's callbacks triggered: workflow.callback_fired per callback;
//   - root finished: workflow.completed, workflow.failed or
//     workflow.cancelled.
//
// Every event's id is derived from the node and its version, so a
// duplicated record yields the same events. Reads (the root for its name,
// a chain for its length, the failed step of a failed workflow) are cached
// for the batch.
func (e *Engine) Events(ctx context.Context, source string, changes []NodeChange) ([]events.Event, error) {
	b := &wfEvents{e: e, source: source, nodes: map[string]*store.Node{}}
	for _, c := range changes {
		if c.New == nil {
			continue
		}
		if err := b.change(ctx, c); err != nil {
			return nil, err
		}
	}
	return b.out, nil
}

type wfEvents struct {
	e      *Engine
	source string
	nodes  map[string]*store.Node
	out    []events.Event
}

// node reads a node once per batch; nil if it no longer exists.
func (b *wfEvents) node(ctx context.Context, wfID, path string) (*store.Node, error) {
	k := wfID + path
	if n, ok := b.nodes[k]; ok {
		return n, nil
	}
	n, err := b.e.st.GetNode(ctx, wfID, path)
	if errors.Is(err, store.ErrNotFound) {
		n, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	b.nodes[k] = n
	return n, nil
}

func (b *wfEvents) add(n *store.Node, typ string, at time.Time, k int, root *store.Node, data map[string]any) {
	data["workflow_id"] = n.WorkflowID
	if root != nil {
		data["workflow_type"], data["workflow_name"] = root.Kind, name(root)
	}
	seq := n.Version*8 + int64(k)
	b.out = append(b.out, events.New(b.source, typ, n.WorkflowID, at, seq, data, n.Path, strconv.FormatInt(n.Version, 10), strconv.Itoa(k)))
}

func name(root *store.Node) string {
	if root.Name != "" {
		return root.Name
	}
	return root.Kind
}

func (b *wfEvents) change(ctx context.Context, c NodeChange) error {
	n, old := c.New, c.Old
	at := c.At
	var oldOutcome string
	var oldFired []string
	if old != nil {
		oldOutcome, oldFired = old.Outcome, old.Fired
	}
	if n.Outcome != "" && oldOutcome == "" && n.Path != store.RootPath {
		if err := b.outcome(ctx, n, at); err != nil {
			return err
		}
	}
	if len(n.Fired) > len(oldFired) {
		root, err := b.node(ctx, n.WorkflowID, store.RootPath)
		if err != nil {
			return err
		}
		fired := append([]string(nil), n.Fired...)
		sort.Strings(fired)
		for i, cb := range fired {
			if contains(oldFired, cb) {
				continue
			}
			b.add(n, events.WorkflowCallbackFired, parseTime(n.FiredAt, at), i, root, map[string]any{"callback": cb, "batch_path": n.Path,
				"job_id": JobID(n.WorkflowID, childPath(n.Path, cb))})
		}
	}
	if n.Path == store.RootPath {
		return b.rootChange(ctx, old, n, at)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// outcome reports a step of a chain or a job of a group or batch finishing.
func (b *wfEvents) outcome(ctx context.Context, n *store.Node, at time.Time) error {
	seg := n.Path[strings.LastIndex(n.Path, "/")+1:]
	if strings.HasPrefix(seg, "on_") {
		return nil // a callback: its job's events and the batch's outcome tell it
	}
	root, err := b.node(ctx, n.WorkflowID, store.RootPath)
	if err != nil || root == nil {
		return err
	}
	ok := n.Outcome == "ok"
	stepType := n.JobType
	if n.Kind != KindJob {
		stepType = n.Kind
	}
	d := map[string]any{"step_index": n.Index, "step_type": stepType, "step_id": n.Path,
		"duration_ms": since(n.StartedAt, n.CompletedAt), "node_path": n.Path}
	if n.Kind == KindJob {
		d["job_id"] = JobID(n.WorkflowID, n.Path)
		d["step_id"] = d["job_id"]
		d["attempt"] = n.Attempt
	}
	if !ok && n.Error != "" {
		var ei job.ErrorInfo
		if json.Unmarshal([]byte(n.Error), &ei) == nil {
			d["error"] = map[string]any{"code": errCode(&ei), "message": ei.Message}
		}
	}
	at = parseTime(n.CompletedAt, at)
	parent, err := b.node(ctx, n.WorkflowID, parentOf(n.Path))
	if err != nil || parent == nil {
		return err
	}
	typ := events.WorkflowJobCompleted
	if parent.Kind == KindChain {
		typ = events.WorkflowStepCompleted
		if !ok {
			typ = events.WorkflowStepFailed
		}
		remaining := parent.Total - n.Index - 1
		if !ok {
			remaining = 0
		}
		d["remaining_steps"], d["steps_remaining"] = remaining, remaining
	} else {
		if !ok {
			typ = events.WorkflowJobFailed
		}
		d["job_index"] = n.Index
	}
	d["parent_type"] = parent.Kind
	b.add(n, typ, at, 0, root, d)
	return nil
}

func (b *wfEvents) rootChange(ctx context.Context, old, n *store.Node, at time.Time) error {
	if old == nil {
		created := parseTime(n.CreatedAt, at)
		d := func() map[string]any {
			return map[string]any{"total_steps": n.Total, "job_count": n.JobCount}
		}
		b.add(n, events.WorkflowCreated, created, 0, n, d())
		b.add(n, events.WorkflowStarted, parseTime(n.StartedAt, created), 1, n, d())
		return nil
	}
	if old.State == n.State {
		return nil
	}
	end := parseTime(n.CompletedAt, at)
	d := map[string]any{"total_steps": n.Total, "job_count": n.JobCount, "duration_ms": since(n.StartedAt, n.CompletedAt),
		"completed_count": n.OK, "failed_count": n.Fail}
	switch n.State {
	case StateCompleted:
		b.add(n, events.WorkflowCompleted, end, 0, n, d)
	case StateCancelled:
		b.add(n, events.WorkflowCancelled, parseTime(n.CancelledAt, end), 0, n, d)
	case StateFailed:
		if err := b.failedStep(ctx, n, d); err != nil {
			return err
		}
		b.add(n, events.WorkflowFailed, end, 0, n, d)
	}
	return nil
}

// failedStep names the job whose failure failed the workflow: the failed
// leaf that finished first.
func (b *wfEvents) failedStep(ctx context.Context, root *store.Node, d map[string]any) error {
	nodes, err := b.e.st.WorkflowItems(ctx, root.WorkflowID)
	if err != nil {
		return err
	}
	var first *store.Node
	for _, n := range nodes {
		if n.Kind == KindJob && n.Outcome == "fail" && (first == nil || n.CompletedAt < first.CompletedAt) {
			first = n
		}
	}
	d["failed_step_id"], d["failed_step_type"] = "", ""
	d["error"] = map[string]any{"code": "workflow_failed", "message": "a step of the workflow failed"}
	if root.FailedIndex != nil {
		d["failed_step_index"] = *root.FailedIndex
	}
	if first == nil {
		return nil
	}
	d["failed_step_id"], d["failed_step_type"], d["failed_job_id"] = JobID(root.WorkflowID, first.Path), first.JobType, JobID(root.WorkflowID, first.Path)
	var ei job.ErrorInfo
	if first.Error != "" && json.Unmarshal([]byte(first.Error), &ei) == nil {
		d["error"] = map[string]any{"code": errCode(&ei), "message": ei.Message}
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
