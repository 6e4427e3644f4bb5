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
}

// Sender sends deliveries (implemented by *dispatch.Dispatcher).
type Sender interface {
	Send(ctx context.Context, ds []dispatch.Delivery) error
}

// Engine processes stream changes.
type Engine struct {
	Sender Sender
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

// Process handles a batch of changes in order. On error it returns the
// index of the first change that must be retried (with everything after
// it, as DynamoDB Streams requires).
func (e *Engine) Process(ctx context.Context, changes []Change) (int, error) {
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	var ds []dispatch.Delivery
	for _, c := range changes {
		ds = append(ds, Deliveries(c, now())...)
	}
	if len(ds) == 0 {
		return -1, nil
	}
	if err := e.Sender.Send(ctx, ds); err != nil {
		return 0, err
	}
	log := e.Logger
	if log == nil {
		log = slog.Default()
	}
	log.InfoContext(ctx, "relayed push-mode jobs to SQS", "count", len(ds))
	return -1, nil
}
