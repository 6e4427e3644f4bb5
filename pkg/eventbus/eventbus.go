// Package eventbus publishes OJS events to an Amazon EventBridge bus: one
// entry per event, Source "ojs", DetailType the event type, Detail the
// whole OJS envelope. Publishing is at least once: a retried stream batch
// publishes its events again with the same ids, which consumers use to
// deduplicate.
package eventbus

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
)

// Source is the EventBridge source of every entry (rules match on it).
const Source = "ojs"

// maxEntries is PutEvents' limit of entries per request; maxBytes its limit
// of request size (256 KiB).
const (
	maxEntries = 10
	maxBytes   = 256 << 10
)

// API is the part of the EventBridge client the publisher uses.
type API interface {
	PutEvents(context.Context, *eventbridge.PutEventsInput, ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// Publisher publishes to one bus.
type Publisher struct {
	Client API
	Bus    string
	// Retries bounds the re-sends of entries EventBridge reports as failed
	// (throttling, internal errors). Default 3.
	Retries int
	// Types, when not nil, are the event types (and "job.*" patterns)
	// published; the others are only stored for the events API. The api
	// wiring sets it from OJS_PUBLISH_EVENTS (events.DefaultPublished).
	Types []string
}

// Publish sends evs (those of Types) in requests of at most 10 entries and 256 KiB. An event
// too large for EventBridge is sent with its data replaced by a note
// pointing at the events API, which keeps the whole event.
func (p *Publisher) Publish(ctx context.Context, evs []events.Event) error {
	var batch []types.PutEventsRequestEntry
	size := 0
	for i := range evs {
		if p.Types != nil && !events.MatchType(p.Types, evs[i].Type) {
			continue
		}
		entry, err := p.entry(&evs[i])
		if err != nil {
			return err
		}
		n := entrySize(entry)
		if len(batch) == maxEntries || (len(batch) > 0 && size+n > maxBytes) {
			if err := p.send(ctx, batch); err != nil {
				return err
			}
			batch, size = nil, 0
		}
		batch = append(batch, entry)
		size += n
	}
	if len(batch) > 0 {
		return p.send(ctx, batch)
	}
	return nil
}

func (p *Publisher) entry(e *events.Event) (types.PutEventsRequestEntry, error) {
	body, err := e.Marshal()
	if err != nil {
		return types.PutEventsRequestEntry{}, fmt.Errorf("encode event %s: %w", e.ID, err)
	}
	if len(body) > maxBytes-1024 {
		small := *e
		small.Data = map[string]any{"truncated": true, "bytes": len(body),
			"hint": "the event is larger than EventBridge accepts; read it from GET /ojs/v1/events"}
		for _, k := range []string{"job_id", "job_type", "queue", "workflow_id"} {
			if v, ok := e.Data[k]; ok {
				small.Data[k] = v
			}
		}
		if body, err = small.Marshal(); err != nil {
			return types.PutEventsRequestEntry{}, err
		}
	}
	t := e.At()
	return types.PutEventsRequestEntry{
		EventBusName: aws.String(p.Bus), Source: aws.String(Source), DetailType: aws.String(e.Type),
		Detail: aws.String(string(body)), Time: &t, Resources: []string{},
	}, nil
}

// entrySize follows EventBridge's entry size calculation (source, detail
// type, detail and time; resources are empty).
func entrySize(e types.PutEventsRequestEntry) int {
	return 14 + len(aws.ToString(e.Source)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Detail))
}

func (p *Publisher) send(ctx context.Context, entries []types.PutEventsRequestEntry) error {
	retries := p.Retries
	if retries <= 0 {
		retries = 3
	}
	for attempt := 0; ; attempt++ {
		out, err := p.Client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
		if err != nil {
			return fmt.Errorf("publish %d events: %w", len(entries), err)
		}
		if out.FailedEntryCount == 0 {
			return nil
		}
		var again []types.PutEventsRequestEntry
		var firstErr string
		for i, r := range out.Entries {
			if r.ErrorCode != nil && i < len(entries) {
				again = append(again, entries[i])
				firstErr = cmp.Or(firstErr, aws.ToString(r.ErrorCode)+": "+aws.ToString(r.ErrorMessage))
			}
		}
		if len(again) == 0 {
			return fmt.Errorf("publish: EventBridge reported %d failed entries without saying which", out.FailedEntryCount)
		}
		if attempt >= retries {
			return fmt.Errorf("publish: %d of %d events failed after %d retries (%s)", len(again), len(entries), retries, firstErr)
		}
		entries = again
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
		}
	}
}
