package lifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/engine"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// pushKeyed pushes n jobs of queue q under options.rate_limit rl.
func pushKeyed(t *testing.T, s *lifecycle.Service, q, rl string, n int) []*job.Job {
	t.Helper()
	var out []*job.Job
	for i := range n {
		j, err := s.Push(context.Background(), fmt.Appendf(nil, `{"type":"rl.job","args":[%d],"options":{"queue":%q,"rate_limit":%s}}`, i, q, rl))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	return out
}

func fetchN(t *testing.T, s *lifecycle.Service, q string, n int) []*job.Job {
	t.Helper()
	got, err := s.Fetch(context.Background(), lifecycle.FetchRequest{Queues: []string{q}, Count: n, WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A key's concurrency limit holds its jobs available past the limit while
// FETCH goes on to other keys' and unkeyed jobs; a slot frees when its
// attempt ends (here found by the next claim, the stream's release not
// running in this test), and the key's state reads as the extension says.
func TestKeyConcurrencyHoldsAndSkips(t *testing.T) {
	t.Parallel()
	s, q, clk := newServices(t)
	ctx := context.Background()
	a := pushKeyed(t, s, "rl-c", `{"key":"api-a","concurrency":2}`, 3)
	pushKeyed(t, s, "rl-c", `{"key":"api-b","concurrency":1}`, 2)
	pushKeyed(t, s, "rl-c", `null`, 1)
	got := fetchN(t, s, "rl-c", 10)
	byKey := map[string]int{}
	for _, j := range got {
		k := ""
		if j.KeyLimit != nil {
			k = j.KeyLimit.Key
		}
		byKey[k]++
	}
	if len(got) != 4 || byKey["api-a"] != 2 || byKey["api-b"] != 1 || byKey[""] != 1 {
		t.Fatalf("first FETCH: %v (%d jobs), want 2 of api-a, 1 of api-b, the unkeyed one", byKey, len(got))
	}
	if again := fetchN(t, s, "rl-c", 10); len(again) != 0 {
		t.Fatalf("every key is full, yet a FETCH got %d", len(again))
	}
	if st, err := q.Keys().Get(ctx, "api-a"); err != nil || st.Held != ratelimit.Concurrency || st.Episode != 1 {
		t.Fatalf("api-a after a held claim: %+v %v", st, err)
	}
	in, err := q.KeyInfo(ctx, "api-a")
	if err != nil || in.Concurrency == nil || in.Concurrency.Limit != 2 || in.Concurrency.Active != 2 || in.Concurrency.Available != 0 {
		t.Fatalf("api-a: %+v %v", in, err)
	}
	var held *job.Job
	for _, j := range a {
		if cur, _ := s.Info(ctx, j.ID); cur.State == job.Available {
			held = cur
		}
	}
	if held == nil {
		t.Fatal("no api-a job left available")
	}
	for _, j := range got {
		if j.KeyLimit != nil && j.KeyLimit.Key == "api-a" {
			if _, err := s.Ack(ctx, j.ID, nil, 0); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	clk.Add(time.Second) // past the process's memory of the full key
	next := fetchN(t, s, "rl-c", 10)
	if len(next) != 1 || next[0].ID != held.ID || next[0].Attempt != 1 {
		t.Fatalf("after an ACK freed a slot: %d jobs, want %s", len(next), held.ID)
	}
	if _, err := q.KeyInfo(ctx, "no-such-key"); code(err) != ojserr.NotFound {
		t.Fatalf("unknown key: %v", err)
	}
}

// Concurrent FETCHes never start more of a key's jobs than its limit:
// the start is counted in the claim's transaction.
func TestKeyConcurrencyIsAtomic(t *testing.T) {
	t.Parallel()
	s, _, _ := newServices(t)
	pushKeyed(t, s, "rl-race", `{"key":"one-at-a-time","concurrency":1}`, 8)
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			got, err := s.Fetch(context.Background(), lifecycle.FetchRequest{Queues: []string{"rl-race"}, Count: 3, WorkerID: "w"})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += len(got)
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != 1 {
		t.Fatalf("six racing FETCHes started %d jobs of a key with concurrency 1", total)
	}
}

// A rate window counts starts and lets the key start again once the
// window has passed; a throttle spaces starts by period/limit.
func TestKeyRateWindowAndThrottle(t *testing.T) {
	t.Parallel()
	s, q, clk := newServices(t)
	ctx := context.Background()
	// Start on a window boundary, so the test's steps stay in one window.
	now := clk.Now()
	clk.Add(now.Truncate(time.Minute).Add(time.Minute).Sub(now))
	pushKeyed(t, s, "rl-rate", `{"key":"mail","rate":{"limit":2,"period":"PT1M"}}`, 3)
	if got := fetchN(t, s, "rl-rate", 10); len(got) != 2 {
		t.Fatalf("rate 2 a minute: FETCH got %d", len(got))
	}
	in, err := q.KeyInfo(ctx, "mail")
	if err != nil || in.Rate == nil || in.Rate.CurrentCount != 2 || in.Rate.Limit != 2 || in.Rate.Period != "PT1M" {
		t.Fatalf("mail: %+v %v", in.Rate, err)
	}
	clk.Add(30 * time.Second)
	if got := fetchN(t, s, "rl-rate", 10); len(got) != 0 {
		t.Fatalf("same window: FETCH got %d", len(got))
	}
	clk.Add(31 * time.Second)
	if got := fetchN(t, s, "rl-rate", 10); len(got) != 1 {
		t.Fatalf("next window: FETCH got %d, want the third job", len(got))
	}

	// The shorthand: "rate": n with "period" beside it, here a throttle-free
	// one a second; and a throttle of one per 10 s.
	pushKeyed(t, s, "rl-thr", `{"key":"slow","throttle":{"limit":1,"period":"PT10S"}}`, 2)
	if got := fetchN(t, s, "rl-thr", 10); len(got) != 1 {
		t.Fatalf("throttle: FETCH got %d", len(got))
	}
	clk.Add(5 * time.Second)
	if got := fetchN(t, s, "rl-thr", 10); len(got) != 0 {
		t.Fatalf("throttle after 5 s: FETCH got %d", len(got))
	}
	clk.Add(5 * time.Second)
	if got := fetchN(t, s, "rl-thr", 10); len(got) != 1 {
		t.Fatalf("throttle after 10 s: FETCH got %d", len(got))
	}
}

// A push-mode delivery of a job whose key is full is sent again later,
// the job staying available; the stream's release frees the slot for it.
func TestKeyedPushDeliveryWaits(t *testing.T) {
	t.Parallel()
	h := newPushHarness(t, time.Minute)
	ctx := context.Background()
	first := h.push(t, `"rate_limit":{"key":"push-key","concurrency":1}`)
	second := h.push(t, `"rate_limit":{"key":"push-key","concurrency":1}`)
	d, err := h.svc.ClaimDelivered(ctx, h.st, h.message(t, first.ID), "w", time.Minute)
	if err != nil || d.Job == nil {
		t.Fatalf("first delivery: %+v %v", d, err)
	}
	d2, err := h.svc.ClaimDelivered(ctx, h.st, h.message(t, second.ID), "w", time.Minute)
	if err != nil || d2.Job != nil || d2.RetryIn != lifecycle.HeldRedelivery {
		t.Fatalf("second delivery with the key full: %+v %v", d2, err)
	}
	if cur, _ := h.svc.Info(ctx, second.ID); cur.State != job.Available || cur.Attempt != 0 {
		t.Fatalf("held job: %s attempt %d", cur.State, cur.Attempt)
	}
	// The first completes; the stream function releases its slot.
	before, err := h.st.GetItem(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Ack(ctx, first.ID, nil, 0); err != nil {
		t.Fatal(err)
	}
	after, err := h.st.GetItem(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := engine.Change{Old: &before, New: &after}
	key, id, attempt, ok := engine.SlotEnded(c)
	if !ok || key != "push-key" || id != first.ID || attempt != 1 {
		t.Fatalf("slot ended: %q %q %d %v", key, id, attempt, ok)
	}
	if err := h.q.Keys().Release(ctx, key, id, attempt); err != nil {
		t.Fatal(err)
	}
	if in, err := h.q.KeyInfo(ctx, "push-key"); err != nil || in.Concurrency.Active != 0 {
		t.Fatalf("after release: %+v %v", in, err)
	}
	h.clk.Add(time.Second) // past the process's memory of the full key
	d3, err := h.svc.ClaimDelivered(ctx, h.st, h.message(t, second.ID), "w", time.Minute)
	if err != nil || d3.Job == nil || d3.Job.ID != second.ID {
		t.Fatalf("redelivery after the release: %+v %v", d3, err)
	}
	// A change that keeps the attempt active frees nothing.
	if _, _, _, ok := engine.SlotEnded(engine.Change{Old: &after, New: &store.Item{Job: d3.Job}}); ok {
		t.Fatal("a completed job's change freed a slot again")
	}
}

// options.rate_limit is validated: a key with the extension's pattern and
// at least one limit, on_limit "wait" only, the queue-level shape apart.
func TestKeyLimitValidation(t *testing.T) {
	t.Parallel()
	s, _, _ := newServices(t)
	for rl, want := range map[string]int{
		`{"key":"ok-key","concurrency":1}`:                         201,
		`{"key":"ok-key","rate":1,"period":"second"}`:              201,
		`{"key":"ok-key","rate":{"limit":5,"period":"PT1M"}}`:      201,
		`{"key":"ok-key","concurrency":1,"on_limit":"wait"}`:       201,
		`{"max_per_second":5}`:                                     201,
		`{"key":"-bad","concurrency":1}`:                           400,
		`{"key":"ok-key"}`:                                         400,
		`{"key":"ok-key","concurrency":-1}`:                        400,
		`{"key":"ok-key","concurrency":1,"on_limit":"drop"}`:       201,
		`{"key":"ok-key","concurrency":1,"on_limit":"later"}`:      400,
		`{"key":"ok-key","concurrency":1,"on_limit":"reschedule"}`: 400,
		`{"key":"ok-key","rate":{"limit":5,"period":"soon"}}`:      400,
		`{"key":"ok-key","rate":{"period":"PT1M"}}`:                400,
		`{"key":"ok-key","concurrency":1,"max_per_second":3}`:      400,
		`"fast"`: 400,
	} {
		_, err := s.Push(context.Background(), fmt.Appendf(nil, `{"type":"rl.v","args":[],"options":{"queue":"rl-v","rate_limit":%s}}`, rl))
		got := 201
		if err != nil {
			got = ojserr.As(err).Status()
		}
		if got != want {
			t.Errorf("rate_limit %s: %d (%v), want %d", rl, got, err, want)
		}
	}
}

// FETCH goes past a window of jobs their key holds to the next eligible
// job (ojs-rate-limiting.md 8.1), and a job a claim found held costs the
// next FETCH no write while its key stays held.
func TestHeldJobsAreSkippedPastTheWindow(t *testing.T) {
	t.Parallel()
	h := newPushHarness(t, time.Minute)
	kl := `{"key":"busy","concurrency":1}`
	pushKeyed(t, h.svc, "rl-deep", kl, 1)
	if got := fetchN(t, h.svc, "rl-deep", 1); len(got) != 1 {
		t.Fatalf("first: %d", len(got))
	}
	pushKeyed(t, h.svc, "rl-deep", kl, 40)
	free := pushKeyed(t, h.svc, "rl-deep", `null`, 1)[0]
	got := fetchN(t, h.svc, "rl-deep", 1)
	if len(got) != 1 || got[0].ID != free.ID {
		t.Fatalf("behind 40 held jobs: %v, want the unkeyed job %s", got, free.ID)
	}
	before := h.rec.Set()
	if again := fetchN(t, h.svc, "rl-deep", 1); len(again) != 0 {
		t.Fatalf("again: %d", len(again))
	}
	if w := h.rec.Set().Sub(before)["DynamoDB UpdateItem"]; w.Calls != 0 {
		t.Fatalf("a FETCH of held jobs already known made %d writes", w.Calls)
	}
}

// A job whose on_limit is "drop" is discarded when its key allows no
// start (error type rate_limited, job.discarded and rate_limit.dropped
// derived from the change), while FETCH takes the ones the key allows;
// a job that waits stays available beside it.
func TestKeyDropsWhatItCannotStart(t *testing.T) {
	t.Parallel()
	s, _, _ := newServices(t)
	ctx := context.Background()
	dropping := pushKeyed(t, s, "rl-d", `{"key":"lossy","concurrency":1,"on_limit":"drop"}`, 3)
	waiting := pushKeyed(t, s, "rl-d", `{"key":"lossy","concurrency":1}`, 1)
	got := fetchN(t, s, "rl-d", 10) // claimed in parallel: any may take the slot
	if len(got) != 1 {
		t.Fatalf("FETCH under concurrency 1: %d jobs", len(got))
	}
	for _, j := range dropping {
		if j.ID == got[0].ID {
			continue
		}
		cur, err := s.Info(ctx, j.ID)
		if err != nil || cur.State != job.Discarded || cur.Error == nil || cur.Error.Type != events.RateLimitedError {
			t.Fatalf("a job past its key's limit with on_limit drop: %+v %v", cur, err)
		}
		evs := events.FromJob("src", j, cur, 2, time.Now())
		var types []string
		for _, e := range evs {
			types = append(types, e.Type)
		}
		if !slices.Contains(types, events.RateLimitDropped) || !slices.Contains(types, events.JobDiscarded) {
			t.Fatalf("events of the drop: %v", types)
		}
	}
	if cur, _ := s.Info(ctx, waiting[0].ID); cur.State != job.Available && cur.ID != got[0].ID {
		t.Fatalf("the job that waits: %s", cur.State)
	}
}
