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

// An override replaces the jobs' policy until it expires or is removed,
// and a start decided before it is refused by the Take's condition; a
// hold (PauseUntil) stops every start until its time, only moves later,
// and derives one rate_limit.dynamic_adjusted; the registry lists every
// key recorded or overridden.
func TestKeyOverrideHoldAndListing(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	keys := ratelimit.New(st.DB(), st.Table())
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	five, zero := 5, 0
	if _, err := keys.Record(ctx, &job.KeyLimit{Key: "api", Concurrency: &five}, now); err != nil {
		t.Fatal(err)
	}
	before, _ := keys.Get(ctx, "api")
	ov, err := keys.SetOverride(ctx, &job.KeyLimit{Key: "api", Concurrency: &zero}, now.Add(time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	if wait, limit := ov.Wait(now); wait != -1 || limit != ratelimit.Concurrency {
		t.Fatalf("override of concurrency 0: wait %v %q", wait, limit)
	}
	if in := ov.Info(now); in.Override == nil || in.Concurrency.Limit != 0 || in.Override.ExpiresAt == "" {
		t.Fatalf("info under the override: %+v", in)
	}
	u, _ := keys.Take(before, "j1", 1, now)
	if err := apply(t, u); err == nil {
		t.Fatal("a start decided before the override was taken")
	}
	if wait, _ := ov.Wait(now.Add(time.Hour)); wait != 0 {
		t.Fatalf("the override expired, yet wait %v", wait)
	}
	if in := ov.Info(now.Add(time.Hour)); in.Override != nil || in.Concurrency.Limit != 5 {
		t.Fatalf("info after expiry: %+v", in)
	}
	cleared, err := keys.ClearOverride(ctx, "api", now)
	if err != nil || cleared.Override != nil {
		t.Fatalf("clear: %+v %v", cleared, err)
	}
	if _, err := keys.ClearOverride(ctx, "nope", now); !errors.Is(err, ratelimit.ErrNotFound) {
		t.Fatalf("clear an unknown key: %v", err)
	}
	// An override of a key no job named yet creates it.
	fresh, err := keys.SetOverride(ctx, &job.KeyLimit{Key: "later", Concurrency: &five}, time.Time{}, now)
	if err != nil || fresh.Policy == nil || fresh.Limits(now).Concurrency == nil {
		t.Fatalf("override of a new key: %+v %v", fresh, err)
	}

	until := now.Add(30 * time.Second)
	for _, at := range []time.Time{until, now.Add(10 * time.Second)} { // the earlier one changes nothing
		if err := keys.PauseUntil(ctx, "api", at, "429 upstream", now); err != nil {
			t.Fatal(err)
		}
	}
	held, _ := keys.Get(ctx, "api")
	if wait, limit := held.Wait(now); wait != 30*time.Second || limit != ratelimit.Dynamic {
		t.Fatalf("held: wait %v %q", wait, limit)
	}
	u, _ = keys.Take(cleared, "j2", 1, now)
	if err := apply(t, u); err == nil {
		t.Fatal("a start decided before the hold was taken")
	}
	u, _ = keys.Take(held, "j2", 1, until)
	if err := apply(t, u); err != nil {
		t.Fatalf("a start at the hold's end: %v", err)
	}
	evs := ratelimit.Events("src", cleared, held, now)
	if len(evs) != 1 || evs[0].Type != events.RateLimitDynamicAdjusted || evs[0].Data["reason"] != "429 upstream" {
		t.Fatalf("dynamic_adjusted: %+v", evs)
	}
	if err := keys.PauseUntil(ctx, "nope", until, "", now); err != nil {
		t.Fatalf("a hold of an unknown key: %v", err)
	}

	names, err := keys.Names(ctx)
	if err != nil || len(names) != 2 || names[0] != "api" || names[1] != "later" {
		t.Fatalf("names: %v %v", names, err)
	}
	states, err := keys.States(ctx, append(names, "nope"))
	if err != nil || len(states) != 2 || states[1].Key != "later" {
		t.Fatalf("states: %v %v", states, err)
	}
}

// DynamoDB Local's stream images carry a key's empty slot map as another
// attribute's value: decoded as no slots, the rest intact.
func TestDecodeToleratesAGarbledEmptySlotMap(t *testing.T) {
	t.Parallel()
	st, err := ratelimit.Decode(map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: "k"},
		"slots": &types.AttributeValueMemberS{Value: "429 from the API"}, "until_ms": &types.AttributeValueMemberN{Value: "1795945910791"}})
	if err != nil || len(st.Slots) != 0 || st.Until.UnixMilli() != 1795945910791 {
		t.Fatalf("decoded: %+v %v", st, err)
	}
}
