// Package engine is the logic of the DynamoDB Streams function: it reads
// each change of the table and does what the change implies. For jobs it
// relays push-mode jobs to SQS when they become ready (a transactional
// outbox: the API never writes to DynamoDB and SQS in one request, so no
// crash between the two can lose a job; a failed batch is retried by the
// stream and every send is idempotent because the worker claims with a
// condition).
package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Change is one stream record: the item before and after (nil when absent).
type Change struct {
	Old, New *store.Item
	// SequenceNumber identifies the record for partial batch failures.
	SequenceNumber string
	// StartWorkflow is set when the record inserted a workflow's root.
	StartWorkflow string
}

// Workflows advances workflows (implemented by *workflow.Engine).
type Workflows interface {
	Start(ctx context.Context, wfID string) error
	JobFinished(ctx context.Context, j *job.Job) error
}

// Sender sends deliveries (implemented by *dispatch.Dispatcher).
type Sender interface {
	Send(ctx context.Context, ds []dispatch.Delivery) error
}

// Engine processes stream changes.
type Engine struct {
	Sender Sender
	// Workflows, when set, is driven by workflow root inserts and by
	// workflow jobs reaching a terminal state.
	Workflows Workflows
	// Concurrency bounds the workflow actions run at once. Default 16.
	Concurrency int
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
		return []dispatch.Delivery{{Job: n.Job}}
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
	log := e.Logger
	if log == nil {
		log = slog.Default()
	}
	var ds []dispatch.Delivery
	for _, c := range changes {
		ds = append(ds, Deliveries(c, now())...)
	}
	if len(ds) > 0 {
		if err := e.Sender.Send(ctx, ds); err != nil {
			return 0, err
		}
		log.InfoContext(ctx, "relayed push-mode jobs to SQS", "count", len(ds))
	}
	if e.Workflows == nil {
		return -1, nil
	}
	conc := e.Concurrency
	if conc <= 0 {
		conc = 16
	}
	sem := make(chan struct{}, conc)
	var mu sync.Mutex
	first, firstErr := -1, error(nil)
	var wg sync.WaitGroup
	for i, c := range changes {
		act := e.workflowAction(c)
		if act == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := act(ctx); err != nil {
				mu.Lock()
				if first < 0 || i < first {
					first, firstErr = i, err
				}
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return first, firstErr
}

// workflowAction returns what a change means for workflows, or nil.
func (e *Engine) workflowAction(c Change) func(context.Context) error {
	if c.StartWorkflow != "" {
		id := c.StartWorkflow
		return func(ctx context.Context) error { return e.Workflows.Start(ctx, id) }
	}
	if c.New == nil || c.New.Job == nil || c.New.Job.WorkflowID == "" || !c.New.Job.State.Terminal() {
		return nil
	}
	if c.Old != nil && c.Old.Job != nil && c.Old.Job.State == c.New.Job.State {
		return nil
	}
	j := c.New.Job
	return func(ctx context.Context) error { return e.Workflows.JobFinished(ctx, j) }
}
