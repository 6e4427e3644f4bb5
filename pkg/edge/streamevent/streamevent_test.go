package streamevent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/ojs-aws/ojs-serverless/pkg/engine"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

func sample(t *testing.T) events.DynamoDBEvent {
	t.Helper()
	raw, err := os.ReadFile("../../../events/dynamodb-stream-job.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestChangeDecodesSampleRecords(t *testing.T) {
	t.Parallel()
	ev := sample(t)
	ins, err := Change(ev.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	if ins.Old != nil || ins.New == nil || ins.New.Job.State != job.Available || !ins.New.Job.Push || ins.New.Job.Type != "demo.greet" ||
		string(ins.New.Job.Args) != `["sample"]` || ins.New.Version != 1 || ins.New.DueAt.UnixMilli() != 1795255500000 {
		t.Fatalf("insert: %+v %+v", ins, ins.New)
	}
	// A job inserted available on a push queue is delivered once, now,
	// with its redelivery check (the message's claim hint).
	ds := engine.Deliveries(ins, time.UnixMilli(1795255200000))
	if len(ds) != 1 || ds[0].Delay != 0 || ds[0].Job.ID != "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6" || ds[0].Check.UnixMilli() != 1795255500000 {
		t.Fatalf("deliveries: %+v", ds)
	}
	mod, err := Change(ev.Records[1])
	if err != nil {
		t.Fatal(err)
	}
	if mod.Old.Job.State != job.Available || mod.New.Job.State != job.Active || mod.New.Job.Attempt != 1 || len(mod.New.Job.Errors) != 1 {
		t.Fatalf("modify: %+v", mod.New.Job)
	}
	if ds := engine.Deliveries(mod, time.Now()); len(ds) != 0 {
		t.Fatalf("a claim must not be delivered: %+v", ds)
	}
	// A removal by the table's TTL (a pruned job or workflow item).
	rm := ev.Records[1]
	rm.Change.NewImage, rm.UserIdentity = nil, &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"}
	if c, err := Change(rm); err != nil || !c.Expired || mod.Expired {
		t.Fatalf("ttl removal: %+v %v", c, err)
	}
}

// Worker heartbeats and the dead letter pruner's record decode into the
// changes the engine turns into worker and dead_letter events.
func TestChangeDecodesAdminRecords(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../events/dynamodb-stream-admin.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	w, err := Change(ev.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	if w.NewWorker == nil || w.OldWorker != nil || w.New != nil || w.NewWorker.ID != "worker-1" || w.NewWorker.Concurrency != 10 ||
		len(w.NewWorker.Queues) != 2 || w.NewWorker.LastHeartbeatAt != "2026-11-21T08:00:00.000Z" {
		t.Fatalf("worker: %+v", w.NewWorker)
	}
	p, err := Change(ev.Records[1])
	if err != nil {
		t.Fatal(err)
	}
	if p.OldPrune == nil || p.NewPrune == nil || p.OldPrune.LastRun != 7 || p.NewPrune.LastRun != 8 || p.NewPrune.Pruned != 12 ||
		p.NewPrune.ByQueue["billing"] != 9 || p.NewPrune.ByCount != 10 {
		t.Fatalf("prune run: %+v -> %+v", p.OldPrune, p.NewPrune)
	}
}

type failing struct{ at int }

func (f failing) Process(context.Context, []engine.Change) (int, error) {
	if f.at < 0 {
		return -1, nil
	}
	return f.at, errors.New("sqs unavailable")
}

func TestHandlerReportsFirstFailedSequenceNumber(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	ev := sample(t)
	res, err := Handler(failing{at: 1}, log)(context.Background(), ev)
	if err != nil || len(res.BatchItemFailures) != 1 || res.BatchItemFailures[0].ItemIdentifier != "111000000000000000000002" {
		t.Fatalf("%+v %v", res, err)
	}
	// The failure line names the record and its job, so it can be found
	// by job id.
	failed, _ := Change(ev.Records[1])
	var line map[string]any
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	if failed.New == nil || failed.New.Job == nil || line["job_id"] != failed.New.Job.ID || line["sequence_number"] != "111000000000000000000002" {
		t.Errorf("failure log %v, want job_id %v", line, failed.New)
	}
	res, _ = Handler(failing{at: -1}, log)(context.Background(), sample(t))
	if len(res.BatchItemFailures) != 0 {
		t.Fatalf("success reported failures: %+v", res)
	}
	// Failed at the first record: a function error, so that the mapping
	// bisects the batch instead of retrying it whole until every record
	// of it goes to the dead-letter queue with the bad one.
	res, err = Handler(failing{at: 0}, log)(context.Background(), sample(t))
	if err == nil || len(res.BatchItemFailures) != 0 {
		t.Fatalf("failure at the first record: %+v %v, want a function error", res, err)
	}
}

// A rate limit key's item decodes as one, and its held mark's change
// derives rate_limit.exceeded.
func TestChangeDecodesRateLimitKeys(t *testing.T) {
	t.Parallel()
	img := func(held string) map[string]events.DynamoDBAttributeValue {
		m := map[string]events.DynamoDBAttributeValue{
			"pk": events.NewStringAttribute("RLK#api"), "sk": events.NewStringAttribute("RLK"),
			"key": events.NewStringAttribute("api"), "policy": events.NewStringAttribute(`{"key":"api","concurrency":1}`),
			"slots": events.NewMapAttribute(map[string]events.DynamoDBAttributeValue{"j1": events.NewNumberAttribute("1")}),
			"ep":    events.NewNumberAttribute("1"),
		}
		if held != "" {
			m["held"], m["held_n"] = events.NewStringAttribute(held), events.NewNumberAttribute("1")
		}
		return m
	}
	c, err := Change(events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{OldImage: img(""), NewImage: img("concurrency")}})
	if err != nil || c.NewKey == nil || c.OldKey == nil || c.New != nil || c.NewKey.Held != "concurrency" || c.NewKey.Slots["j1"] != 1 {
		t.Fatalf("change: %+v %v", c, err)
	}
}
