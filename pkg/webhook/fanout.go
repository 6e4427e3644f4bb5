package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"golang.org/x/sync/errgroup"
)

// Admitter admits jobs to their queue (implemented by *queue.Service: it
// marks the reserved queue's jobs push-mode).
type Admitter interface {
	Admit(ctx context.Context, jobs []*job.Job) error
}

// JobWriter creates jobs (implemented by *store.Store).
type JobWriter interface {
	Create(ctx context.Context, jobs []*job.Job, redeliverAfter time.Duration) error
}

// Fanout turns the events of a stream batch into deliveries: for each event
// and each active subscription that wants it, one delivery job on the
// reserved queue. It is a publisher of the stream function's engine, beside
// EventBridge; events about the reserved queue's own jobs are never
// delivered (a delivery does not beget deliveries).
type Fanout struct {
	Subs  *Store
	Admit Admitter
	Jobs  JobWriter
	// RedeliverAfter is the lifecycle's redelivery check of push-mode jobs.
	RedeliverAfter time.Duration
	Now            func() time.Time
	Logger         *slog.Logger
}

// Publish enqueues the deliveries of evs. A delivery already enqueued (the
// same batch retried) is left as it is.
func (f *Fanout) Publish(ctx context.Context, evs []events.Event) error {
	subs, err := f.Subs.Active(ctx)
	if err != nil || len(subs) == 0 {
		return err
	}
	now := time.Now()
	if f.Now != nil {
		now = f.Now()
	}
	var jobs []*job.Job
	for i := range evs {
		e := &evs[i]
		if e.Queue() == job.WebhookQueue {
			continue
		}
		for s := range subs {
			if !subs[s].Wants(e) {
				continue
			}
			j, err := Delivery(&subs[s], e, now)
			if err != nil {
				return err
			}
			jobs = append(jobs, j)
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	if err := f.Admit.Admit(ctx, jobs); err != nil {
		return err
	}
	// One job a write: a transaction would fail whole on the one delivery
	// an earlier try of the batch already enqueued.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, j := range jobs {
		g.Go(func() error {
			err := f.Jobs.Create(gctx, []*job.Job{j}, f.RedeliverAfter)
			if _, dup := errors.AsType[*store.DuplicateError](err); dup {
				return nil
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("webhook deliveries: %w", err)
	}
	if f.Logger != nil {
		f.Logger.DebugContext(ctx, "webhook deliveries enqueued", "count", len(jobs))
	}
	return nil
}

// Args is a delivery job's one argument: the subscription and the body to
// POST, the event as stored (or, past MaxEventBytes, with its data replaced
// by a note pointing at the events API).
type Args struct {
	SubscriptionID string          `json:"subscription_id"`
	Event          json.RawMessage `json:"event"`
}

// MaxEventBytes is the largest event a delivery carries whole (a job's
// result can make a job.completed event of 1 MiB).
const MaxEventBytes = 256 << 10

// Delivery builds the delivery job of event e for subscription s: its id
// a UUIDv7 whose time is the event's and whose other bits hash the event
// id and the subscription id, so the same pair is the same job.
func Delivery(s *Subscription, e *events.Event, now time.Time) (*job.Job, error) {
	at := e.At()
	if at.IsZero() {
		at = now
	}
	ev, err := e.MarshalWithin(MaxEventBytes, "a webhook delivery")
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(map[string]any{
		"id": deliveryID(at, e.ID, s.ID), "type": JobType, "queue": job.WebhookQueue, "args": []Args{{SubscriptionID: s.ID, Event: ev}},
		"meta": map[string]string{"webhook_subscription_id": s.ID, "event_id": e.ID, "event_type": e.Type},
		"retry": map[string]any{"max_attempts": max(1, s.MaxAttempts), "initial_interval": "PT5S", "backoff_coefficient": 2.0,
			"max_interval": "PT10M", "jitter": true},
	})
	if err != nil {
		return nil, err
	}
	en, err := job.ParseInternal(body, now)
	if err != nil {
		return nil, fmt.Errorf("webhook delivery of %s: %w", e.ID, err)
	}
	return en.Job, nil
}

func deliveryID(at time.Time, eventID, subID string) string {
	h := sha256.Sum256([]byte(eventID + "\x00" + subID))
	var u uuid.UUID
	ms := uint64(at.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	copy(u[6:], h[:10])
	u[6] = 0x70 | u[6]&0x0f // version 7
	u[8] = 0x80 | u[8]&0x3f // RFC 4122 variant
	return u.String()
}
