package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// apply writes a Take's update alone (the claim's transaction holds it
// with the job's claim).
func apply(t *testing.T, u *types.Update) error {
	t.Helper()
	_, err := testenv.DynamoDB().UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: u.TableName, Key: u.Key,
		UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
		ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues})
	return err
}

// A key's slots are taken under its limit and released by the attempt
// that holds them only; a held mark is written once an episode and
// cleared by the next start, and the stream derives one exceeded and one
// released event from those changes.
func TestKeySlotsAndHeldEpisodes(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	keys := ratelimit.New(st.DB(), st.Table())
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	two := 2
	if _, err := keys.Get(ctx, "k"); !errors.Is(err, ratelimit.ErrNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
	s0, err := keys.Record(ctx, &job.KeyLimit{Key: "k", Concurrency: &two}, now)
	if err != nil || len(s0.Slots) != 0 || *s0.Policy.Concurrency != 2 {
		t.Fatalf("record: %+v %v", s0, err)
	}
	for _, id := range []string{"j1", "j2"} {
		cur, _ := keys.Get(ctx, "k")
		u, err := keys.Take(cur, id, 1, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := apply(t, u); err != nil {
			t.Fatalf("take %s: %v", id, err)
		}
	}
	full, _ := keys.Get(ctx, "k")
	if wait, limit := full.Wait(now); wait != -1 || limit != ratelimit.Concurrency {
		t.Fatalf("two of two slots taken: wait %v %q", wait, limit)
	}
	// A take decided on a stale read is refused by its condition.
	u, _ := keys.Take(s0, "j3", 1, now)
	if err := apply(t, u); err == nil {
		t.Fatal("a third slot was taken past the limit")
	}
	for range 2 {
		if err := keys.MarkHeld(ctx, full, ratelimit.Concurrency, now); err != nil {
			t.Fatal(err)
		}
	}
	held, _ := keys.Get(ctx, "k")
	if held.Held != ratelimit.Concurrency || held.Episode != 1 || held.HeldN != 2 {
		t.Fatalf("held mark: %q episode %d use %d", held.Held, held.Episode, held.HeldN)
	}
	// A release of another attempt keeps the slot; the holder's frees it.
	if err := keys.Release(ctx, "k", "j1", 2); err != nil {
		t.Fatal(err)
	}
	if cur, _ := keys.Get(ctx, "k"); len(cur.Slots) != 2 {
		t.Fatalf("slots after a stale release: %v", cur.Slots)
	}
	if err := keys.Release(ctx, "k", "j1", 1); err != nil {
		t.Fatal(err)
	}
	freed, _ := keys.Get(ctx, "k")
	if len(freed.Slots) != 1 || freed.Held == "" {
		t.Fatalf("after the release: slots %v held %q", freed.Slots, freed.Held)
	}
	u, _ = keys.Take(freed, "j3", 1, now)
	if err := apply(t, u); err != nil {
		t.Fatal(err)
	}
	after, _ := keys.Get(ctx, "k")
	if after.Held != "" || after.LastJob != "j3" {
		t.Fatalf("the start after the mark: held %q last %q", after.Held, after.LastJob)
	}
	ex := ratelimit.Events("src", full, held, now)
	rel := ratelimit.Events("src", freed, after, now)
	if len(ex) != 1 || ex[0].Type != events.RateLimitExceeded || ex[0].Data["strategy"] != "concurrency" || ex[0].Data["limit"] != 2 {
		t.Fatalf("exceeded: %+v", ex)
	}
	if len(rel) != 1 || rel[0].Type != events.RateLimitReleased || rel[0].Data["job_id"] != "j3" {
		t.Fatalf("released: %+v", rel)
	}
	if again := ratelimit.Events("src", held, held, now); len(again) != 0 {
		t.Fatalf("a change within an episode: %+v", again)
	}
	if same := ratelimit.Events("src", full, held, now); same[0].ID != ex[0].ID {
		t.Fatal("a retried stream batch derived another event id")
	}
}

// A rate window counts starts within it and starts afresh in the next;
// headers describe the binding limit.
func TestKeyRateWindowHeaders(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	keys := ratelimit.New(st.DB(), st.Table())
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 10, 0, time.UTC)
	p := &job.KeyLimit{Key: "w", Rate: &job.Window{Limit: 2, Period: time.Minute, PeriodText: "PT1M"}}
	if _, err := keys.Record(ctx, p, now); err != nil {
		t.Fatal(err)
	}
	for i, at := range []time.Time{now, now.Add(time.Second)} {
		cur, _ := keys.Get(ctx, "w")
		u, _ := keys.Take(cur, "j", i+1, at)
		if err := apply(t, u); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	cur, _ := keys.Get(ctx, "w")
	if wait, limit := cur.Wait(now.Add(2 * time.Second)); limit != ratelimit.Rate || wait != 48*time.Second {
		t.Fatalf("window full: %v %q, want 48s to the next minute", wait, limit)
	}
	h := cur.Headers(now.Add(2 * time.Second))
	if h["X-RateLimit-Limit"] != "2" || h["X-RateLimit-Remaining"] != "0" || h["X-RateLimit-Reset"] != "1795953660" {
		t.Fatalf("headers: %v", h)
	}
	next := now.Add(time.Minute)
	if wait, _ := cur.Wait(next); wait != 0 {
		t.Fatalf("next window: wait %v", wait)
	}
	u, _ := keys.Take(cur, "j", 3, next)
	if err := apply(t, u); err != nil {
		t.Fatalf("first start of the next window: %v", err)
	}
	if in := func() ratelimit.Info { c, _ := keys.Get(ctx, "w"); return c.Info(next) }(); in.Rate.CurrentCount != 1 {
		t.Fatalf("next window's count: %+v", in.Rate)
	}
}
