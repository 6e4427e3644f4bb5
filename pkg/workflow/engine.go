package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Node states.
const (
	StateWaiting   = "waiting"
	StateRunning   = "running"
	StateCompleted = "completed"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
)

// Store is the persistence the engine uses (implemented by *store.Store).
type Store interface {
	CreateWorkflow(ctx context.Context, nodes []store.Node, shards []store.NewShard) error
	GetNode(ctx context.Context, wfID, path string) (*store.Node, error)
	GetShard(ctx context.Context, wfID, path, key string) (*store.Shard, error)
	WorkflowItems(ctx context.Context, wfID string) ([]*store.Node, error)
	RecordOutcome(ctx context.Context, o store.Outcome) (bool, error)
	RollUp(ctx context.Context, wfID, path, key string, sh *store.Shard) (bool, error)
	FireCallbacks(ctx context.Context, wfID, path string, fired []string, at time.Time) (bool, error)
	CallbacksDone(ctx context.Context, wfID, path string) (bool, int, error)
	SetNodeState(ctx context.Context, wfID, path, to string, at time.Time, failedIndex *int, from ...string) (bool, error)
	CreateWorkflowJobs(ctx context.Context, wfID string, jobs []*job.Job, redeliverAfter time.Duration) error
	BatchGetJobs(ctx context.Context, ids []string) (map[string]*job.Job, error)
	DueWorkflows(ctx context.Context, now time.Time, limit int) (map[string]time.Time, error)
	PostponeWorkflowCheck(ctx context.Context, wfID string, due, next time.Time) error
	Apply(ctx context.Context, t store.Transition) (*job.Job, error)
}

var _ Store = (*store.Store)(nil)

// Config configures an Engine.
type Config struct {
	// PushQueues are the push-mode queues (jobs there get Push set).
	PushQueues []string
	// RedeliverAfter is passed to job creation (see lifecycle.Config).
	// Default 5 min.
	RedeliverAfter time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Engine creates, advances, cancels and reads workflows.
type Engine struct {
	st    Store
	push  map[string]bool
	redel time.Duration
	now   func() time.Time
	log   *slog.Logger
}

// New returns an engine on st.
func New(st Store, c Config) *Engine {
	e := &Engine{st: st, push: map[string]bool{}, redel: c.RedeliverAfter, now: c.Now, log: c.Logger}
	for _, q := range c.PushQueues {
		e.push[q] = true
	}
	if e.redel <= 0 {
		e.redel = 5 * time.Minute
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	return e
}

func shardsFor(n int) int {
	if n <= 0 {
		return 1
	}
	return (n + ShardSize - 1) / ShardSize
}

func shardOf(index, n int) string { return store.ShardKey(index % shardsFor(n)) }

// Create validates and stores a workflow; its root's stream record starts
// it (the API returns at once).
func (e *Engine) Create(ctx context.Context, raw []byte) (*View, error) {
	now := e.now().UTC()
	def, id, jobCount, err := Parse(raw, now)
	if err != nil {
		return nil, err
	}
	if id == "" {
		id = uuid.Must(uuid.NewV7()).String()
	}
	var nodes []store.Node
	var shards []store.NewShard
	Walk(def, func(d *Def) {
		n := store.Node{WorkflowID: id, Path: d.Path, Kind: d.Kind, Name: d.Name, Index: d.Index, JobType: d.JobType, State: StateWaiting}
		if d.Kind == KindJob {
			n.Def = string(d.Request)
		} else {
			n.Total = len(d.Children)
			n.Shards = shardsFor(n.Total)
			for k := 0; k < n.Shards; k++ {
				exp := n.Total / n.Shards
				if k < n.Total%n.Shards {
					exp++
				}
				shards = append(shards, store.NewShard{Path: d.Path, Key: store.ShardKey(k), Expected: exp})
			}
			for _, name := range Callbacks {
				if d.Callbacks[name] != nil {
					n.Callbacks = append(n.Callbacks, name)
				}
			}
		}
		if d.Path == store.RootPath {
			n.State = StateRunning
			n.CreatedAt, n.StartedAt, n.JobCount = job.Timestamp(now), job.Timestamp(now), jobCount
			store.WorkflowCheckDue(&n, now.Add(CheckAfter))
		}
		nodes = append(nodes, n)
	})
	if err := e.st.CreateWorkflow(ctx, nodes, shards); err != nil {
		if errors.Is(err, store.ErrWorkflowExists) {
			return nil, ojserr.Newf(ojserr.Duplicate, "A workflow with id '%s' already exists.", id).With("existing_workflow_id", id)
		}
		return nil, ojserr.Backend(err)
	}
	e.log.InfoContext(ctx, "workflow created", "workflow_id", id, "type", def.Kind, "jobs", jobCount)
	return render(def, id, nodes, nil), nil
}

// CheckAfter is how often the sweeper checks a running workflow for
// progress lost with a stream record that exhausted its retries.
const CheckAfter = 5 * time.Minute

// Repair re-drives running workflows whose check is due: a workflow none
// of whose jobs exist is started again, and every finished job not yet
// recorded in its workflow is recorded. Both are idempotent, so repairing a
// healthy workflow changes nothing. It returns how many workflows it
// checked.
func (e *Engine) Repair(ctx context.Context, limit int) (int, error) {
	now := e.now()
	due, err := e.st.DueWorkflows(ctx, now, limit)
	if err != nil {
		return 0, err
	}
	for id, at := range due {
		if err := e.repair(ctx, id); err != nil {
			return 0, fmt.Errorf("repair workflow %s: %w", id, err)
		}
		if err := e.st.PostponeWorkflowCheck(ctx, id, at, now.Add(CheckAfter)); err != nil {
			return 0, err
		}
	}
	return len(due), nil
}

func (e *Engine) repair(ctx context.Context, id string) error {
	items, err := e.st.WorkflowItems(ctx, id)
	if err != nil || len(items) == 0 || items[0].State != StateRunning {
		return err
	}
	var ids []string
	recorded := false
	for _, n := range items {
		if n.Kind != KindJob {
			continue
		}
		if n.Outcome != "" {
			recorded = true
		} else {
			ids = append(ids, JobID(id, n.Path))
		}
	}
	jobs, err := e.st.BatchGetJobs(ctx, ids)
	if err != nil {
		return err
	}
	if len(jobs) == 0 && !recorded {
		e.log.WarnContext(ctx, "repairing a workflow that never started", "workflow_id", id)
		return e.Start(ctx, id)
	}
	for _, j := range jobs {
		if j.State.Terminal() {
			if err := e.JobFinished(ctx, j); err != nil {
				return err
			}
		}
	}
	return nil
}

// Start starts a workflow's root (idempotent: run for every delivery of
// the root's stream record).
func (e *Engine) Start(ctx context.Context, wfID string) error {
	root, err := e.st.GetNode(ctx, wfID, store.RootPath)
	if err != nil {
		return err
	}
	if root.State != StateRunning {
		return nil
	}
	return e.startNode(ctx, wfID, root, json.RawMessage("{}"))
}

// start starts the node at path: a leaf's job is created; a chain starts
// its first step; a group or batch starts every child. Idempotent.
func (e *Engine) start(ctx context.Context, wfID, path string, parentResults json.RawMessage) error {
	n, err := e.st.GetNode(ctx, wfID, path)
	if err != nil {
		return err
	}
	return e.startNode(ctx, wfID, n, parentResults)
}

// startNode is start with the node already read.
func (e *Engine) startNode(ctx context.Context, wfID string, n *store.Node, parentResults json.RawMessage) error {
	path := n.Path
	if n.Kind == KindJob {
		return e.createJobs(ctx, wfID, []*store.Node{n}, parentResults)
	}
	if path != store.RootPath {
		if _, err := e.st.SetNodeState(ctx, wfID, path, StateRunning, e.now(), nil, StateWaiting); err != nil {
			return err
		}
	}
	if n.Kind == KindChain {
		return e.start(ctx, wfID, childPath(path, "s0"), parentResults)
	}
	// Group or batch: start every child; leaves in bulk.
	items, err := e.st.WorkflowItems(ctx, wfID)
	if err != nil {
		return err
	}
	var leaves []*store.Node
	for _, c := range items {
		if c.Path == path || parentOf(c.Path) != path || isCallback(c.Path) {
			continue
		}
		if c.Kind == KindJob {
			leaves = append(leaves, c)
		} else if err := e.start(ctx, wfID, c.Path, parentResults); err != nil {
			return err
		}
	}
	return e.createJobs(ctx, wfID, leaves, parentResults)
}

// createJobs creates the jobs of leaf nodes with deterministic ids.
func (e *Engine) createJobs(ctx context.Context, wfID string, leaves []*store.Node, parentResults json.RawMessage) error {
	if len(leaves) == 0 {
		return nil
	}
	now := e.now().UTC()
	jobs := make([]*job.Job, 0, len(leaves))
	for _, n := range leaves {
		en, err := job.ParseEnqueue([]byte(n.Def), now)
		if err != nil {
			return fmt.Errorf("workflow %s node %s: stored job no longer valid: %w", wfID, n.Path, err)
		}
		j := en.Job
		j.ID, j.WorkflowID, j.WorkflowNode, j.ParentResults = JobID(wfID, n.Path), wfID, n.Path, capResults(wfID, parentResults)
		j.Push = e.push[j.Queue]
		jobs = append(jobs, j)
	}
	err := e.st.CreateWorkflowJobs(ctx, wfID, jobs, e.redel)
	if errors.Is(err, store.ErrWorkflowNotRunning) {
		return nil // cancelled or finished meanwhile: create nothing
	}
	return err
}

// maxParentResults bounds parent_results inline in a job.
const maxParentResults = 128 << 10

func capResults(wfID string, r json.RawMessage) json.RawMessage {
	if len(r) <= maxParentResults {
		return r
	}
	b, _ := json.Marshal(map[string]any{"truncated": true, "bytes": len(r), "workflow_id": wfID,
		"hint": "parent_results exceed 128 KiB; read them from GET /ojs/v1/workflows/" + wfID})
	return b
}

func parentOf(path string) string {
	i := strings.LastIndex(path, "/")
	if i <= 0 {
		return store.RootPath
	}
	return path[:i]
}

func isCallback(path string) bool {
	seg := path[strings.LastIndex(path, "/")+1:]
	return strings.HasPrefix(seg, "on_")
}

// JobFinished advances the workflow of a job that reached a terminal
// state. It is idempotent: every step is a conditional write, and a
// repeated call re-checks every consequence (counting, roll-up, next step,
// callbacks, completion) without doing any twice.
func (e *Engine) JobFinished(ctx context.Context, j *job.Job) error {
	if j.WorkflowID == "" || !j.State.Terminal() {
		return nil
	}
	root, err := e.st.GetNode(ctx, j.WorkflowID, store.RootPath)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if root.State == StateCancelled {
		return nil // late completions of a cancelled workflow change nothing
	}
	ok := j.State == job.Completed
	var errJSON string
	if j.Error != nil {
		b, _ := json.Marshal(j.Error)
		errJSON = string(b)
	}
	var started time.Time
	if j.StartedAt != nil {
		started = *j.StartedAt
	}
	return e.finished(ctx, j.WorkflowID, j.WorkflowNode, ok, string(j.Result), errJSON, j.Attempt, started, root)
}

// finished records node path's outcome in its parent and applies the
// consequences, walking up while nodes finish. root, when not nil, is the
// root node as just read: it stands for the first parent's read when that
// parent is the root (a job of the root chain, group or batch).
func (e *Engine) finished(ctx context.Context, wfID, path string, ok bool, result, errJSON string, attempt int, started time.Time, root *store.Node) error {
	for path != store.RootPath {
		parent := parentOf(path)
		p := root
		root = nil
		if p == nil || parent != store.RootPath {
			var err error
			if p, err = e.st.GetNode(ctx, wfID, parent); err != nil {
				return err
			}
		}
		if p.State == StateCancelled {
			return nil
		}
		child, err := e.st.GetNode(ctx, wfID, path)
		if err != nil {
			return err
		}
		key := store.CallbackShard
		if !isCallback(path) {
			key = shardOf(child.Index, p.Total)
		}
		if _, err := e.st.RecordOutcome(ctx, store.Outcome{WorkflowID: wfID, Path: path, Parent: parent, ShardKey: key, OK: ok,
			Result: result, Error: errJSON, Attempt: attempt, At: e.now(), StartedAt: started}); err != nil {
			return err
		}
		if err := fault.Hit(fault.WorkflowAfterRecord); err != nil {
			return err
		}
		if child.Outcome != "" {
			ok = child.Outcome == "ok" // the first recorded outcome is the one that counts
		}
		sh, err := e.st.GetShard(ctx, wfID, parent, key)
		if err != nil {
			return err
		}
		if sh.OK+sh.Fail >= sh.Expected {
			if _, err := e.st.RollUp(ctx, wfID, parent, key, sh); err != nil {
				return err
			}
		}
		done, pok, err := e.decide(ctx, wfID, parent, path, ok, child.Index, p)
		if err != nil || !done {
			return err
		}
		path, ok, result, errJSON, attempt, started = parent, pok, "", "", 0, time.Time{}
	}
	return nil
}

// decide applies the parent's rule after a child finished. It returns
// whether the parent is now finished and with which outcome. read is the
// parent as read before the child's outcome was recorded: a chain decides
// on its kind and size alone, which never change; a group or batch
// decides on its rolled-up counts, so it is read again.
func (e *Engine) decide(ctx context.Context, wfID, path, childPath string, childOK bool, childIndex int, read *store.Node) (bool, bool, error) {
	p := read
	if p == nil || p.Kind != KindChain {
		var err error
		if p, err = e.st.GetNode(ctx, wfID, path); err != nil {
			return false, false, err
		}
	}
	now := e.now()
	finish := func(okState bool, failedIndex *int) (bool, bool, error) {
		to := StateCompleted
		if !okState {
			to = StateFailed
		}
		moved, err := e.st.SetNodeState(ctx, wfID, path, to, now, failedIndex, StateRunning, StateWaiting)
		if err != nil {
			return false, false, err
		}
		if moved {
			// This call finished the node, so its state is the one set.
			e.log.InfoContext(ctx, "workflow node finished", "workflow_id", wfID, "node", path, "state", to)
			return true, to == StateCompleted, nil
		}
		// Someone else finished it first (a repeated record) or it was
		// cancelled: read what it became.
		cur, err := e.st.GetNode(ctx, wfID, path)
		if err != nil {
			return false, false, err
		}
		if cur.State == StateCancelled {
			return false, false, nil
		}
		e.log.InfoContext(ctx, "workflow node finished", "workflow_id", wfID, "node", path, "state", cur.State)
		return true, cur.State == StateCompleted, nil
	}
	switch p.Kind {
	case KindChain:
		if !childOK {
			idx := childIndex
			return finish(false, &idx)
		}
		if childIndex+1 < p.Total {
			results, err := e.results(ctx, wfID, path, childIndex+1)
			if err != nil {
				return false, false, err
			}
			return false, false, e.start(ctx, wfID, childPathOf(path, "s", childIndex+1), results)
		}
		return finish(true, nil)
	case KindGroup:
		if p.ShardsDone < p.Shards {
			return false, false, nil
		}
		return finish(p.Fail == 0, nil)
	case KindBatch:
		if p.ShardsDone < p.Shards {
			return false, false, nil
		}
		fired := firedFor(p)
		if len(fired) == 0 {
			return finish(p.Fail == 0, nil)
		}
		if _, err := e.st.FireCallbacks(ctx, wfID, path, fired, now); err != nil {
			return false, false, err
		}
		if err := fault.Hit(fault.WorkflowAfterFire); err != nil {
			return false, false, err
		}
		if err := e.startCallbacks(ctx, wfID, path, fired); err != nil {
			return false, false, err
		}
		cbDone, cbFail, err := e.st.CallbacksDone(ctx, wfID, path)
		if err != nil || !cbDone {
			return false, false, err
		}
		return finish(cbFail == 0, nil)
	}
	return false, false, fmt.Errorf("workflow %s node %s: unknown kind %q", wfID, path, p.Kind)
}

func childPathOf(parent, seg string, i int) string { return childPath(parent, seg+strconv.Itoa(i)) }

// firedFor lists the callbacks a finished batch triggers (ojs-workflows
// section 6.5).
func firedFor(p *store.Node) []string {
	var out []string
	for _, name := range p.Callbacks {
		switch {
		case name == "on_complete",
			name == "on_success" && p.Fail == 0,
			name == "on_failure" && p.Fail > 0:
			out = append(out, name)
		}
	}
	return out
}

// startCallbacks creates the triggered callback jobs with the results of
// every batch job (failed ones included) as parent_results.
func (e *Engine) startCallbacks(ctx context.Context, wfID, path string, fired []string) error {
	results, err := e.results(ctx, wfID, path, -1)
	if err != nil {
		return err
	}
	var leaves []*store.Node
	for _, name := range fired {
		n, err := e.st.GetNode(ctx, wfID, childPath(path, name))
		if err != nil {
			return err
		}
		leaves = append(leaves, n)
	}
	return e.createJobs(ctx, wfID, leaves, results)
}

// results builds parent_results for a node's children: for a chain, the
// results of steps before upTo (and what the chain itself received, for
// nested chains, is not repeated); for a group or batch (upTo < 0), the
// result of every child. A composite child's result is its children's
// results keyed by index; a failed job contributes its error.
func (e *Engine) results(ctx context.Context, wfID, path string, upTo int) (json.RawMessage, error) {
	items, err := e.st.WorkflowItems(ctx, wfID)
	if err != nil {
		return nil, err
	}
	byParent := map[string][]*store.Node{}
	for _, n := range items {
		if n.Path != store.RootPath && !isCallback(n.Path) {
			byParent[parentOf(n.Path)] = append(byParent[parentOf(n.Path)], n)
		}
	}
	var resultOf func(n *store.Node) any
	resultOf = func(n *store.Node) any {
		if n.Kind == KindJob {
			if n.Outcome == "fail" {
				var errObj any
				_ = json.Unmarshal([]byte(n.Error), &errObj)
				return map[string]any{"state": "failed", "error": errObj}
			}
			if n.Result == "" {
				return nil
			}
			return json.RawMessage(n.Result)
		}
		m := map[string]any{}
		for _, c := range byParent[n.Path] {
			m[strconv.Itoa(c.Index)] = resultOf(c)
		}
		return m
	}
	out := map[string]any{}
	kids := byParent[path]
	sort.Slice(kids, func(i, j int) bool { return kids[i].Index < kids[j].Index })
	for _, c := range kids {
		if upTo >= 0 && c.Index >= upTo {
			break
		}
		out[strconv.Itoa(c.Index)] = resultOf(c)
	}
	return json.Marshal(out)
}

// Cancel cancels a running workflow: pending and waiting jobs are
// cancelled, active ones may finish and their outcomes change nothing.
func (e *Engine) Cancel(ctx context.Context, wfID string) (*View, error) {
	if err := validWorkflowID(wfID); err != nil {
		return nil, err
	}
	root, err := e.st.GetNode(ctx, wfID, store.RootPath)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ojserr.NotFoundf("workflow", wfID)
	}
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	now := e.now()
	moved, err := e.st.SetNodeState(ctx, wfID, store.RootPath, StateCancelled, now, nil, StateRunning, "pending")
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if !moved {
		cur, err := e.st.GetNode(ctx, wfID, store.RootPath)
		if err == nil {
			root = cur
		}
		return nil, ojserr.StateConflict(ojserr.Conflict, "Workflow %s is already in terminal state '%s'.", wfID, root.State).
			With("workflow_id", wfID).With("current_state", root.State)
	}
	items, err := e.st.WorkflowItems(ctx, wfID)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	var ids []string
	for _, n := range items {
		if n.Kind == KindJob && n.Outcome == "" {
			ids = append(ids, JobID(wfID, n.Path))
		}
	}
	jobs, err := e.st.BatchGetJobs(ctx, ids)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	for _, j := range jobs {
		switch j.State {
		case job.Scheduled, job.Available, job.Pending, job.Retryable:
			if _, err := e.st.Apply(ctx, store.Cancel(j.ID, now, j.State)); err != nil {
				var ce *store.ConflictError
				if !errors.As(err, &ce) {
					return nil, ojserr.Backend(err)
				}
			}
		}
	}
	e.log.InfoContext(ctx, "workflow cancelled", "workflow_id", wfID)
	return e.Get(ctx, wfID)
}

func validWorkflowID(id string) error {
	if job.ValidateID(id) != nil {
		return ojserr.Invalid("id", "Workflow ids are lowercase hyphenated UUIDv7 strings.")
	}
	return nil
}
