// Package workflow implements the OJS workflow primitives (chain, group,
// batch, their nesting, and dependency graphs; ojs-workflows.md and
// ojs-http-binding.md section 14) on the job lifecycle.
//
// A workflow is a tree of nodes stored under one DynamoDB partition; its
// leaves are jobs. The request that finishes a job (ACK or FAIL over HTTP,
// the worker function, the sweeper) advances the workflow before it
// answers, through JobFinished; the stream function runs Verify on the
// same table changes as the guarantee for a request that died half way.
// Every step is a conditional write or transaction whose record is the
// commit point of the step (see docs/workflows.md), so the two paths and
// any duplicates start every job and fire every callback exactly once.
//
// The definitions it runs are parsed and validated by pkg/wfdef, which
// also names the nodes' paths and the jobs' ids; their items are stored
// through pkg/wfstore. A workflow's view is rendered by pkg/wfview, and
// the events its changes imply are derived by pkg/wfevents.
package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfjobs"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
)

// Admitter admits the jobs the engine creates (wfjobs.Admitter).
type Admitter = wfjobs.Admitter

// Config configures an Engine.
type Config struct {
	// Admit admits the jobs the engine creates (the queue service).
	// Default: only the push flag from PushQueues is set.
	Admit Admitter
	// PushQueues are the push-mode queues (used without Admit).
	PushQueues []string
	// RedeliverAfter is passed to job creation (see lifecycle.Config).
	// Default 5 min.
	RedeliverAfter time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// AsyncItems is the size (nodes, counter shards and first jobs) past
	// which a workflow is created asynchronously (see Create). 0: never.
	AsyncItems int
	// CreationSlice is how long one Resume writes an asynchronously
	// created workflow before it hands the rest to the next (default
	// DefaultCreationSlice).
	CreationSlice time.Duration
	// CancelSlice is how long one pass of a cancelled workflow's job
	// cancels (the stream function's, from the root's cancelling mark, or
	// the sweeper's, from its check) runs before it leaves the rest to the
	// next (default DefaultCreationSlice): the records behind it in its
	// shard wait that long at most. A pass makes one transaction (99 jobs)
	// at least.
	CancelSlice time.Duration
	// ResultTTL is result_ttl in seconds for jobs that set none
	// (OJS_RESULT_TTL; default job.DefaultResultTTL), QueueResultTTLs by
	// queue before it (OJS_QUEUE_RESULT_TTL): a workflow's retention
	// derives from them (retention).
	ResultTTL       *int64
	QueueResultTTLs map[string]int64
}

// DefaultCreationSlice bounds how long one stream invocation spends on a
// large workflow's creation, so the other records of its shard (push
// relays, advancement) wait at most that long behind it.
const DefaultCreationSlice = 5 * time.Second

// DefaultAsyncItems is the AsyncItems the functions use unless
// OJS_ASYNC_CREATE_ITEMS says otherwise: a group of about 2,000 jobs. At
// DynamoDB's 1,000 writes a second per partition (a workflow's nodes share
// one, a queue's ready index another) writing 4,000 items takes about 4 s
// on AWS, well inside API Gateway's 29 s; 10,000 jobs would take 20.
const DefaultAsyncItems = 4000

// Engine creates, advances, cancels and reads workflows. What a step
// starts is built by its maker (pkg/wfjobs).
type Engine struct {
	// st is the workflow items' store, jobs the table kernel's job store
	// (its jobs' reads and transitions); both on the same table.
	st    *wfstore.Store
	jobs  *store.Store
	mk    *wfjobs.Maker
	redel time.Duration
	now   func() time.Time
	log   *slog.Logger
	// resultTTL and queueTTLs are Config.ResultTTL and QueueResultTTLs.
	resultTTL int64
	queueTTLs map[string]int64
	async     int
	// slice bounds one Resume of a creation, cancelSlice one pass of
	// finishCancel (Config.CreationSlice, CancelSlice).
	slice, cancelSlice time.Duration
}

// New returns an engine on the table kernel st: its workflow items
// (wfstore.New(st)) and its jobs (st).
func New(st *store.Store, c Config) *Engine {
	e := &Engine{st: wfstore.New(st), jobs: st, redel: c.RedeliverAfter, now: c.Now, log: cmp.Or(c.Logger, slog.Default()),
		resultTTL: *cmp.Or(c.ResultTTL, aws.Int64(job.DefaultResultTTL)), queueTTLs: c.QueueResultTTLs,
		async: c.AsyncItems, slice: c.CreationSlice, cancelSlice: c.CancelSlice}
	if e.redel <= 0 {
		e.redel = 5 * time.Minute
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.slice <= 0 {
		e.slice = DefaultCreationSlice
	}
	if e.cancelSlice <= 0 {
		e.cancelSlice = DefaultCreationSlice
	}
	e.mk = wfjobs.NewMaker(e.st, st, c.Admit, c.PushQueues, e.redel, e.now)
	return e
}

// ShardSize is how many children share one counter shard: a group or
// batch with n > ShardSize jobs counts them in ceil(n/ShardSize) shards,
// so no item takes a write for every child.
const ShardSize = 100

// RunGrace is how long a workflow is given to run before its retention
// starts: its items and jobs expire at its creation plus its retention
// plus RunGrace. One that runs longer has them all extended (keep).
const RunGrace = 24 * time.Hour

// retention is the workflow's retention in seconds, the longest of its
// jobs' (result_ttl, else its queue's default, else the environment's):
// -1 (kept for ever) if any job's is.
func (e *Engine) retention(parsed *wfdef.Parsed) int64 {
	r := int64(0)
	for k := range parsed.Kept {
		t, ok := e.queueTTLs[k.Queue]
		switch {
		case k.Set:
			t = k.TTL
		case !ok:
			t = e.resultTTL
		}
		if t == job.PermanentResultTTL {
			return t
		}
		r = max(r, t)
	}
	return r
}

// CheckAfter is how often the sweeper checks a running workflow for
// progress lost with a request and a stream record that both failed.
const CheckAfter = 5 * time.Minute

// Create validates a workflow, writes it and starts it: its first jobs are
// written with it (in the same transaction up to store.MaxBatch items),
// so every job id in the answer exists when it arrives. A workflow of more
// than Config.AsyncItems items is created asynchronously instead: only its
// root is written before the answer, which has x_creating set (the API
// answers 202), and Resume writes the rest.
func (e *Engine) Create(ctx context.Context, raw []byte) (*wfview.View, error) {
	now := e.now().UTC()
	parsed, err := wfdef.Parse(raw, now)
	if err == nil {
		err = parsed.AssignTenant(job.TenantFrom(ctx))
	}
	if err == nil {
		err = parsed.CheckPins(job.RegionFrom(ctx))
	}
	if err != nil {
		return nil, err
	}
	id := parsed.ID
	if id == "" {
		id = uuid.Must(uuid.NewV7()).String()
	}
	b, err := e.build(ctx, parsed, id, now)
	if err != nil {
		return nil, err
	}
	if e.async > 0 && len(b.nodes)+len(b.shards)+len(b.jobs) > e.async {
		v, err := e.begin(ctx, raw, b)
		if !errors.Is(err, wfstore.ErrTooLargeToDefer) {
			return v, err
		}
	}
	if err := e.st.CreateWorkflow(ctx, wfstore.NewWorkflow{Nodes: b.nodes, Shards: b.shards, Jobs: b.jobs, RedeliverAfter: e.redel, FreshID: parsed.ID == ""}); err != nil {
		if errors.Is(err, wfstore.ErrWorkflowExists) {
			return nil, workflowExists(id)
		}
		return nil, ojserr.Backend(err)
	}
	e.log.InfoContext(ctx, "workflow created", "workflow_id", id, "type", parsed.Root.Kind, "jobs", parsed.Jobs, "started_jobs", len(b.jobs))
	byID := make(map[string]*job.Job, len(b.jobs))
	for _, j := range b.jobs {
		byID[j.ID] = j
	}
	return wfview.Render(b.t, byID), nil
}

// workflowExists is the answer to a creation whose id is taken.
func workflowExists(id string) error {
	return ojserr.Newf(ojserr.Duplicate, "A workflow with id '%s' already exists.", id).With("existing_workflow_id", id)
}

// built is what creating a workflow writes: its nodes (the root first),
// counter shards and first jobs, and the nodes as a tree.
type built struct {
	root   *wfstore.Root
	nodes  []wfstore.Node
	shards []wfstore.Shard
	jobs   []*job.Job
	t      *wfstore.Tree
}

// build derives the items of workflow id from its parsed definition, as
// of now. The same definition, id and time always give the same items
// (job ids are derived from the workflow id and the path), which is what
// lets Resume finish a creation another process started.
func (e *Engine) build(ctx context.Context, parsed *wfdef.Parsed, id string, now time.Time) (*built, error) {
	var nodes []wfstore.Node
	var shards []wfstore.Shard
	var root *wfstore.Root
	comps := map[string]*wfstore.Composite{}
	compensable := 0
	keep, ttl := e.retention(parsed), int64(0)
	if keep >= 0 {
		ttl = now.Add(RunGrace).Unix() + keep
	}
	wfdef.Walk(parsed.Root, func(d *wfdef.Def) {
		it := wfstore.Item{WorkflowID: id, Path: d.Path, Kind: d.Kind, Name: d.Name, Index: d.Index, StepID: d.StepID, State: wfstate.Waiting, Deps: d.Deps, TTL: ttl}
		if p := comps[wfdef.ParentPath(d.Path)]; p != nil && d.Path != wfstore.RootPath && d.Index >= 0 {
			// Children of wide groups and batches are counted in shards;
			// a chain's last step knows it.
			if p.Shards > 0 {
				it.PShard = wfstore.ShardKey(d.Index % p.Shards)
			}
			it.Last = p.Kind == wfdef.KindChain && d.Index == p.Total-1
		}
		if d.Kind == wfdef.KindJob {
			if len(d.Compensate) > 0 {
				compensable++
			}
			nodes = append(nodes, &wfstore.Step{Item: it, Def: store.Packed(d.Request), JobType: d.JobType, Compensate: store.Packed(d.Compensate)})
			return
		}
		c := wfstore.Composite{Item: it, Total: len(d.Children), TimeoutMS: d.TimeoutMS}
		if (d.Kind == wfdef.KindGroup || d.Kind == wfdef.KindBatch) && c.Total > ShardSize {
			// Only groups and batches count in shards: a chain runs one
			// step at a time, a graph decides on its whole progress.
			c.Shards = (c.Total + ShardSize - 1) / ShardSize
		}
		for k := range c.Shards {
			// Shard k counts the children whose index is k modulo Shards.
			shards = append(shards, wfstore.Shard{Path: d.Path, Key: wfstore.ShardKey(k), Expected: (c.Total - k + c.Shards - 1) / c.Shards})
		}
		for _, name := range wfdef.Callbacks {
			if d.Callbacks[name] != nil {
				c.Callbacks = append(c.Callbacks, name)
			}
		}
		if d.Kind == wfdef.KindGraph {
			g := wfjobs.GraphShape{IDs: make([]string, len(d.Children)), Deps: make([][]int, len(d.Children))}
			for i, c := range d.Children {
				g.IDs[i], g.Deps[i] = c.StepID, append([]int{}, c.Deps...)
			}
			b, _ := json.Marshal(g)
			c.Graph = string(b)
		}
		if d.Path != wfstore.RootPath {
			comps[d.Path] = &c
			nodes = append(nodes, &c)
			return
		}
		root = &wfstore.Root{Composite: c, Form: parsed.Form, JobCount: parsed.Jobs, Retain: keep, Tenant: parsed.Tenant}
		root.State = wfstate.Running
		root.CreatedAt, root.StartedAt = job.Timestamp(now), job.Timestamp(now)
		check := now.Add(CheckAfter)
		if d.TimeoutMS > 0 {
			// The progress check comes no later than the deadline: it
			// times the workflow out.
			root.Deadline = now.Add(time.Duration(d.TimeoutMS) * time.Millisecond).UnixMilli()
			check = minTime(check, time.UnixMilli(root.Deadline))
		}
		wfstore.WorkflowCheckDue(root, check)
		for _, h := range wfdef.Handlers {
			if d.Handlers[h] != nil {
				root.Handlers = append(root.Handlers, h)
			}
		}
		comps[d.Path] = &root.Composite
		nodes = append(nodes, root)
	})
	root.Compensable = compensable
	t := wfstore.NewTree(nodes)
	// Graph steps know the steps that depend on them.
	for _, n := range nodes {
		for _, d := range n.Base().Deps {
			dep := t.Item(wfdef.ChildPath(wfdef.ParentPath(n.Base().Path), wfdef.Segment(wfdef.KindGraph, d)))
			dep.Next = append(dep.Next, n.Base().Index)
		}
	}
	jobs, timed, err := e.mk.Launch(ctx, t, wfstore.RootPath, wfjobs.EmptyResults(parsed.Root.Kind))
	if err != nil {
		return nil, err
	}
	for _, n := range timed {
		if n.Path != wfstore.RootPath {
			// A nested composite that starts with the workflow: its
			// deadline runs from now.
			n.Deadline = now.Add(time.Duration(n.TimeoutMS) * time.Millisecond).UnixMilli()
			n.DuePK, n.DueAt = "", 0
			wfstore.TimeoutDue(n)
		}
	}
	if err := e.mk.Admit(ctx, jobs); err != nil {
		return nil, err
	}
	return &built{root: root, nodes: nodes, shards: shards, jobs: jobs, t: t}, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Cancel cancels a running workflow: its jobs that have not started are
// cancelled, active ones may finish and their outcomes change nothing.
func (e *Engine) Cancel(ctx context.Context, wfID string) (*wfview.View, error) {
	if err := validWorkflowID(wfID); err != nil {
		return nil, err
	}
	now, began := e.now(), time.Now()
	// The cancelled root stays in the sweeper's checks (CheckAt) until its
	// jobs are all cancelled: if this request dies before it gets to them,
	// or the stream's retries run out, the sweeper cancels them.
	root, err := e.st.ChangeRoot(ctx, wfID, wfstore.CancelWorkflow(now, now.Add(cancelCheckAfter)))
	var nc *wfstore.ErrNodeConflict
	creating := errors.As(err, &nc) && nc.Root() != nil && nc.Root().Creating
	if errors.Is(err, store.ErrNotFound) || creating && len(nc.Root().CDef) == 0 {
		return nil, ojserr.NotFoundf("workflow", wfID)
	}
	if creating {
		return nil, ojserr.StateConflict(ojserr.Conflict, "Workflow %s is still being created; cancel it once GET no longer shows x_creating.", wfID).
			With("workflow_id", wfID).With("current_state", "pending")
	}
	if nc != nil {
		return nil, ojserr.StateConflict(ojserr.Conflict, "Workflow %s is already in terminal state '%s'.", wfID, nc.State()).
			With("workflow_id", wfID).With("current_state", string(nc.State()))
	}
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	items, err := e.st.WorkflowItems(ctx, wfID)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	// Within the API's time: past it the stream function cancels the rest.
	var budget func() time.Time
	if dl, ok := ctx.Deadline(); ok {
		// The answer reads the workflow again (about as long as reading it
		// took so far) and waits for the transactions under way.
		budget = func() time.Time { return dl.Add(-cancelReserve - 2*time.Since(began)) }
	}
	if err := (stopper{e}).takeUnwritten(ctx, root, items, now); err != nil {
		return nil, ojserr.Backend(err)
	}
	guard := wfstore.RootIn(wfID, wfstate.Cancelled)
	cancelled, left, err := (stopper{e}).cancelJobs(ctx, jobIDs(wfID, items), now, budget, &guard)
	if errors.Is(err, store.ErrGuardFailed) {
		// Retried meanwhile: its jobs are the retry's now.
		return e.Get(ctx, wfID)
	}
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if left > 0 {
		if err := rootChange(ctx, e.st, wfID, wfstore.MarkCancelling()); err != nil {
			return nil, ojserr.Backend(err)
		}
		e.log.WarnContext(ctx, "workflow cancelled; the stream function cancels the jobs left", "workflow_id", wfID,
			"jobs_cancelled", cancelled, "jobs_left", left)
	} else {
		e.log.InfoContext(ctx, "workflow cancelled", "workflow_id", wfID, "jobs_cancelled", cancelled)
	}
	if err := (saga{e}).launchHandler(ctx, root, wfdef.HandlerOnCancel); err != nil {
		// The stream function starts it from the root's change.
		e.log.WarnContext(ctx, "on_cancel handler not started; the stream function will", "workflow_id", wfID, "error", err.Error())
	}
	v, err := e.Get(ctx, wfID)
	if err == nil && left > 0 {
		v.Cancelling = &wfview.ViewCancelling{JobsLeft: left}
	}
	return v, err
}

// cancelCheckAfter is when the sweeper makes sure a cancelled workflow's
// jobs are all cancelled (and then drops it from its checks).
const cancelCheckAfter = time.Minute

// cancelReserve is the time Cancel keeps before its deadline, besides
// twice its reads' time, for the answer once it stops cancelling jobs.
const cancelReserve = 8 * time.Second

func validWorkflowID(id string) error {
	if job.ValidateID(id) != nil {
		return ojserr.Invalid("id", "Workflow ids are lowercase hyphenated UUIDv7 strings.")
	}
	return nil
}
