// Package eventbus publishes OJS events to an Amazon EventBridge bus, Source
// "ojs": an event of a packed type (Publisher.Packed; job events by
// default) goes with the others of its stream batch in entries of
// DetailType "ojs.events" and Detail {"events": [...]}, each up to one
// 64 KB billing chunk; any other event is one entry, DetailType the event
// type, Detail the whole OJS envelope (docs/events.md). Publishing is at
// least once: a retried stream batch publishes its events again with the
// same ids, which consumers use to deduplicate.
package eventbus

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// Source is the EventBridge source of every entry (rules match on it).
const Source = "ojs"

// PackedDetailType is the DetailType of an entry holding several events.
const PackedDetailType = "ojs.events"

// maxEntries is PutEvents' limit of entries per request; maxBytes its limit
// of request size (256 KiB); chunkBytes the size EventBridge bills as one
// event, which a packed entry stays within.
const (
	maxEntries = 10
	maxBytes   = 256 << 10
	chunkBytes = 64 << 10
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
	// published; the others are only stored for the events API. The stream
	// function sets it from OJS_PUBLISH_EVENTS (events.DefaultPublished).
	Types []string
	// Packed are the published types (and patterns) sent packed, several
	// to an entry (from OJS_PUBLISH_PACKED, events.DefaultPacked); nil
	// sends every event in an entry of its own.
	Packed []string
}

// FromEnv builds the publisher the environment configures: OJS_EVENT_BUS
// (nil, nil when unset: the local stack publishes nothing),
// OJS_PUBLISH_EVENTS and OJS_PUBLISH_PACKED. Only the stream function
// calls it, so only its binary links the EventBridge client.
func FromEnv(cfg aws.Config) (*Publisher, error) {
	bus := os.Getenv(topology.EnvEventBus)
	if bus == "" {
		return nil, nil
	}
	published, err := events.ParsePublished(os.Getenv(topology.EnvPublishEvents))
	if err != nil {
		return nil, err
	}
	packed, err := events.ParsePacked(os.Getenv(topology.EnvPublishPacked))
	if err != nil {
		return nil, err
	}
	return &Publisher{Client: eventbridge.NewFromConfig(cfg), Bus: bus, Types: published, Packed: packed}, nil
}

// Publish sends evs (those of Types) in requests of at most 10 entries and
// 256 KiB, the events of Packed types packed into entries of up to 64 KB.
// An event too large for EventBridge is sent with its data replaced by a
// note pointing at the events API, which keeps the whole event.
func (p *Publisher) Publish(ctx context.Context, evs []events.Event) error {
	out := requests{p: p}
	var pack pack
	for i := range evs {
		e := &evs[i]
		if p.Types != nil && !events.MatchType(p.Types, e.Type) {
			continue
		}
		if p.Packed != nil && events.MatchType(p.Packed, e.Type) {
			body, err := e.Marshal()
			if err != nil {
				return fmt.Errorf("encode event %s: %w", e.ID, err)
			}
			if pack.fits(body) {
				pack.add(body, e.At())
				continue
			}
			if pack.n > 0 && len(body) < pack.room() {
				if err := out.add(ctx, pack.entry(p.Bus)); err != nil {
					return err
				}
				pack = pack.reset()
				pack.add(body, e.At())
				continue
			}
		}
		entry, err := p.entry(e)
		if err != nil {
			return err
		}
		if err := out.add(ctx, entry); err != nil {
			return err
		}
	}
	if pack.n > 0 {
		if err := out.add(ctx, pack.entry(p.Bus)); err != nil {
			return err
		}
	}
	return out.flush(ctx)
}

// requests gathers entries into PutEvents requests and sends each full one.
type requests struct {
	p     *Publisher
	batch []types.PutEventsRequestEntry
	size  int
}

func (r *requests) add(ctx context.Context, e types.PutEventsRequestEntry) error {
	n := entrySize(e)
	if len(r.batch) == maxEntries || (len(r.batch) > 0 && r.size+n > maxBytes) {
		if err := r.flush(ctx); err != nil {
			return err
		}
	}
	r.batch = append(r.batch, e)
	r.size += n
	return nil
}

func (r *requests) flush(ctx context.Context) error {
	if len(r.batch) == 0 {
		return nil
	}
	err := r.p.send(ctx, r.batch)
	r.batch, r.size = nil, 0
	return err
}

// pack is the detail of a packed entry being filled: {"events":[...]}.
type pack struct {
	detail []byte
	n      int
	last   time.Time
}

// packOverhead is an entry's size beside its detail's events: the source,
// the detail type, the 14 bytes EventBridge counts and {"events":[]}.
const packOverhead = 14 + len(Source) + len(PackedDetailType) + len(`{"events":[]}`)

// room is how many bytes of events an empty pack holds.
func (pack) room() int { return chunkBytes - packOverhead }

// fits reports whether body can join the pack within one chunk.
func (k *pack) fits(body []byte) bool {
	return len(k.detail)+len(body)+1 <= k.room()
}

func (k *pack) add(body []byte, at time.Time) {
	if k.n > 0 {
		k.detail = append(k.detail, ',')
	}
	k.detail = append(k.detail, body...)
	k.n++
	if at.After(k.last) {
		k.last = at
	}
}

func (k pack) reset() pack { return pack{detail: k.detail[:0]} }

func (k *pack) entry(bus string) types.PutEventsRequestEntry {
	detail := `{"events":[` + string(k.detail) + `]}`
	t := k.last
	return types.PutEventsRequestEntry{EventBusName: aws.String(bus), Source: aws.String(Source),
		DetailType: aws.String(PackedDetailType), Detail: aws.String(detail), Time: &t, Resources: []string{}}
}

func (p *Publisher) entry(e *events.Event) (types.PutEventsRequestEntry, error) {
	body, err := e.MarshalWithin(maxBytes-1024, "EventBridge")
	if err != nil {
		return types.PutEventsRequestEntry{}, fmt.Errorf("encode event %s: %w", e.ID, err)
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
