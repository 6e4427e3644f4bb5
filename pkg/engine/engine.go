// Package engine is the logic of the DynamoDB Streams function: it reads
// each change of the table and does what the change implies. For jobs it
// relays push-mode jobs to SQS when they become ready (a transactional
// outbox: the API never writes to DynamoDB and SQS in one request, so no
// crash between the two can lose a job; a failed batch is retried by the
// stream and every send is idempotent because the worker claims with a
// condition). It collects the OJS events of every change, each derived by
// the package that owns the changed item (pkg/events for jobs,
// pkg/wfevents for workflows, pkg/queue for queues and workers,
// pkg/cron, pkg/deadletter), stores them and publishes them to
// EventBridge, and advances workflows.
package engine

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfevents"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// Change is one stream record: the item before and after (nil when absent),
// as a job (Old, New) or as a workflow node (OldNode, NewNode).
type Change struct {
	Old, New             *store.Item
	OldNode, NewNode     wfstore.Node
	OldQueue, NewQueue   *queue.QueueInfo
	OldCron, NewCron     *cron.Info
	OldPrune, NewPrune   *deadletter.PruneRun
	OldWorker, NewWorker *queue.WorkerInfo
	OldKey, NewKey       *ratelimit.State
	// At is the record's approximate creation time.
	At time.Time
	// SequenceNumber identifies the record for partial batch failures.
	SequenceNumber string
	// Expired marks a removal by the table's TTL (a pruned finished job or
	// workflow): it implies no event.
	Expired bool
}

// Workflows verifies that finished workflow steps were advanced (the
// guarantee behind the requests that advance them) and resumes what a
// request left to the stream function (implemented by *workflow.Engine).
type Workflows interface {
	Verify(ctx context.Context, fs []workflow.Finished) error
	Resume(ctx context.Context, wfID string) error
}

// WorkflowEvents tells the workflow events the changes imply
// (implemented by *wfevents.Deriver).
type WorkflowEvents interface {
	Events(ctx context.Context, source string, nodes []wfevents.NodeChange, jobs []wfevents.JobChange) ([]events.Event, error)
}

// EventStore keeps events for the events API (implemented by
// *events.Store).
type EventStore interface {
	PutEvents(ctx context.Context, evs []events.Event, ttl time.Duration) error
}

// Publisher publishes events to subscribers (EventBridge on AWS).
type Publisher interface {
	Publish(ctx context.Context, evs []events.Event) error
}

// Sender sends deliveries (implemented by *dispatch.Dispatcher).
type Sender interface {
	Send(ctx context.Context, ds []dispatch.Delivery) error
}

// SlotReleaser frees a rate limit key's slot held by a job's attempt
// (implemented by *ratelimit.Keys).
type SlotReleaser interface {
	Release(ctx context.Context, key, id string, attempt int) error
}

// SlotEnded reports the rate limit slot a change frees: a keyed job's
// attempt that was active and is no longer (finished, failed, requeued,
// cancelled or deleted).
func SlotEnded(c Change) (key, id string, attempt int, ok bool) {
	if c.Old == nil || c.Old.Job == nil || c.Old.Job.State != job.Active || c.Old.Job.KeyLimit == nil {
		return "", "", 0, false
	}
	o := c.Old.Job
	if n := c.New; n != nil && n.Job != nil && n.Job.State == job.Active && n.Job.Attempt == o.Attempt {
		return "", "", 0, false
	}
	return o.KeyLimit.Key, o.ID, o.Attempt, true
}

// Engine processes stream changes.
type Engine struct {
	Sender Sender
	// Workflows, when set, verifies every finished workflow step (a job
	// reaching a terminal state, a nested composite finishing).
	Workflows Workflows
	// WorkflowEvents, when set, derives the workflow events of the
	// changes (stored and published with the others).
	WorkflowEvents WorkflowEvents
	// Events, when set, stores the lifecycle events the changes imply, with
	// EventTTL (default 7 days); Publisher, when set, also publishes them.
	Events    EventStore
	EventTTL  time.Duration
	Publisher Publisher
	// Webhooks, when set, enqueues the events' webhook deliveries
	// (*webhook.Fanout) once they are stored.
	Webhooks Publisher
	// Keys, when set, frees the rate limit slot of each keyed job's
	// attempt that ended (*ratelimit.Keys).
	Keys SlotReleaser
	// Source is the events' source URI. Default "ojs://ojs-serverless/engine".
	Source string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Deliveries lists the SQS sends a change calls for: a push-mode job that
// became available (unless a worker promoted it to claim it itself), and a
// push-mode job that became scheduled or retryable within the SQS delay
// limit (the delayed message wakes the worker when it is due).
func Deliveries(c Change, now time.Time) []dispatch.Delivery {
	if c.New == nil || c.New.Job == nil || !c.New.Job.Push {
		return nil
	}
	n := c.New
	var oldState job.State
	if c.Old != nil && c.Old.Job != nil {
		oldState = c.Old.Job.State
	}
	if n.Job.State == oldState {
		return nil
	}
	switch n.Job.State {
	case job.Available:
		if n.Dispatch == store.DispatchInline {
			return nil
		}
		// The image is the whole job with its redelivery check: the
		// message carries what the worker's claim needs (no read first).
		return []dispatch.Delivery{{Job: n.Job, Check: n.DueAt}}
	case job.Scheduled, job.Retryable:
		wait := n.DueAt.Sub(now)
		if wait > dispatch.MaxDelay {
			return nil // the sweeper promotes it when due
		}
		return []dispatch.Delivery{{Job: n.Job, Delay: wait}}
	}
	return nil
}

// Process handles a batch of changes. Deliveries are sent first (all at
// once, batched per queue); workflow actions then run concurrently (each
// is idempotent and safe to run alongside the others). On error it returns
// the index of the first change that must be retried, with everything
// after it, as DynamoDB Streams requires.
func (e *Engine) Process(ctx context.Context, changes []Change) (int, error) {
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	log := cmp.Or(e.Logger, slog.Default())
	var ds []dispatch.Delivery
	var fs []workflow.Finished
	for _, c := range changes {
		ds = append(ds, Deliveries(c, now())...)
		if f, ok := finished(c); ok {
			fs = append(fs, f)
		}
	}
	if len(ds) > 0 {
		if err := e.Sender.Send(ctx, ds); err != nil {
			return 0, err
		}
		log.InfoContext(ctx, "relayed push-mode jobs to SQS", "count", len(ds))
		if err := fault.Hit(fault.EngineAfterRelay); err != nil {
			return 0, err
		}
	}
	if e.Keys != nil {
		for _, c := range changes {
			if key, id, attempt, ok := SlotEnded(c); ok {
				if err := e.Keys.Release(ctx, key, id, attempt); err != nil {
					return 0, err
				}
			}
		}
	}
	if err := e.emit(ctx, changes, now()); err != nil {
		return 0, err
	}
	if err := fault.Hit(fault.EngineAfterEvents); err != nil {
		return 0, err
	}
	if e.Workflows == nil {
		return -1, nil
	}
	// Workflows accepted with 202: their creation is written here a slice
	// at a time, from each change of the root that leaves it holding the
	// definition and no writer's lease (its insert, then each slice giving
	// the lease back), so the other records of the shard wait one slice at
	// most. A slice that could not give its lease back leaves the rest to
	// the sweeper once the lease ends. Likewise a cancelled workflow whose
	// cancel request ran out of time (its root marked cancelling): Resume
	// cancels the jobs left.
	for _, c := range changes {
		if n, ok := c.NewNode.(*wfstore.Root); ok && (len(n.CDef) > 0 && n.CreateLease == 0 || n.Cancelling) {
			if err := e.Workflows.Resume(ctx, n.WorkflowID); err != nil && !errors.Is(err, wfstore.ErrCreationUnfinished) {
				return 0, err
			}
		}
	}
	if len(fs) == 0 {
		return -1, nil
	}
	if err := fault.Hit(fault.EngineWorkflowAction); err != nil {
		return 0, err
	}
	if err := e.Workflows.Verify(ctx, fs); err != nil {
		return 0, err
	}
	return -1, nil
}

// DefaultSource is the events' source when Engine.Source is empty.
const DefaultSource = "ojs://ojs-serverless/engine"

// emit derives the events of every change, stores them and publishes
// them. Everything is idempotent (deterministic event ids), so a failed
// batch is simply retried whole.
func (e *Engine) emit(ctx context.Context, changes []Change, now time.Time) error {
	if e.Events == nil && e.Publisher == nil && e.Webhooks == nil {
		return nil
	}
	src := cmp.Or(e.Source, DefaultSource)
	var evs []events.Event
	var nodes []wfevents.NodeChange
	var jobs []wfevents.JobChange
	for _, c := range changes {
		at := c.At
		if at.IsZero() {
			at = now
		}
		if c.New != nil && c.New.Job != nil {
			var old *job.Job
			if c.Old != nil {
				old = c.Old.Job
			}
			evs = append(evs, events.FromJob(src, old, c.New.Job, c.New.Version, at)...)
			if c.New.Job.WorkflowID != "" {
				jobs = append(jobs, wfevents.JobChange{Old: old, New: c.New.Job, Version: c.New.Version, At: at})
			}
		} else if c.New == nil && c.Old != nil && c.Old.Job != nil && !c.Expired {
			evs = append(evs, events.FromDeletedJob(src, c.Old.Job, c.Old.Pruned, c.Old.Version, at)...)
		}
		if c.NewNode != nil {
			nodes = append(nodes, wfevents.NodeChange{Old: c.OldNode, New: c.NewNode, At: at})
		}
		if c.NewQueue != nil {
			evs = append(evs, queue.Events(src, c.OldQueue, c.NewQueue, at)...)
		}
		if c.NewCron != nil {
			evs = append(evs, cron.Events(src, c.OldCron, c.NewCron, at)...)
		}
		if c.NewPrune != nil {
			evs = append(evs, deadletter.PrunedEvents(src, c.OldPrune, c.NewPrune, at)...)
		}
		if c.NewWorker != nil {
			evs = append(evs, queue.WorkerEvents(src, c.OldWorker, c.NewWorker, at)...)
		}
		if c.NewKey != nil {
			evs = append(evs, ratelimit.Events(src, c.OldKey, c.NewKey, at)...)
		}
	}
	if len(nodes)+len(jobs) > 0 && e.WorkflowEvents != nil {
		wevs, err := e.WorkflowEvents.Events(ctx, src, nodes, jobs)
		if err != nil {
			return err
		}
		evs = append(evs, wevs...)
	}
	if len(evs) == 0 {
		return nil
	}
	if e.Events != nil {
		if err := e.Events.PutEvents(ctx, evs, cmp.Or(max(e.EventTTL, 0), 7*24*time.Hour)); err != nil {
			return err
		}
	}
	for _, p := range []Publisher{e.Publisher, e.Webhooks} {
		if p != nil {
			if err := p.Publish(ctx, evs); err != nil {
				return err
			}
		}
	}
	return nil
}

// finished reports a change that finished a workflow step: a workflow
// job reaching a terminal state, or a nested composite finishing.
func finished(c Change) (workflow.Finished, bool) {
	if c.New != nil && c.New.Job != nil && c.New.Job.WorkflowID != "" && c.New.Job.State.Terminal() {
		if c.Old != nil && c.Old.Job != nil && c.Old.Job.State == c.New.Job.State {
			return workflow.Finished{}, false
		}
		return workflow.Finished{Job: c.New.Job}, true
	}
	if c.NewNode == nil {
		return workflow.Finished{}, false
	}
	if n := c.NewNode.Base(); (n.Kind != wfdef.KindJob || strings.HasPrefix(n.Path, "/~")) && n.State.Terminal() {
		// A composite (or the root, or a handler) that finished.
		if c.OldNode != nil && c.OldNode.Base().State == n.State {
			return workflow.Finished{}, false
		}
		return workflow.Finished{Node: c.NewNode}, true
	}
	return workflow.Finished{}, false
}
