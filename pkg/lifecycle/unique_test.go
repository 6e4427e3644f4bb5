package lifecycle_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

func TestUniqueRejectIgnoreReplace(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	first, err := s.Push(ctx, []byte(`{"type":"u.a","args":[1],"options":{"queue":"uq","unique":{"keys":["type","args"],"on_conflict":"reject"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Push(ctx, []byte(`{"type":"u.a","args":[1],"options":{"queue":"uq","unique":{"keys":["type","args"],"on_conflict":"reject"}}}`))
	if e := ojserr.As(err); err == nil || e.Code != ojserr.Duplicate || e.Status() != 409 || e.Details["existing_job_id"] != first.ID {
		t.Fatalf("reject: %v", err)
	}
	// Other args: another key.
	if _, err := s.Push(ctx, []byte(`{"type":"u.a","args":[2],"options":{"queue":"uq","unique":{"keys":["type","args"]}}}`)); err != nil {
		t.Fatalf("different args: %v", err)
	}
	got, err := s.Push(ctx, []byte(`{"type":"u.a","args":[1],"options":{"queue":"uq","unique":{"keys":["type","args"],"on_conflict":"ignore"}}}`))
	if err != nil || !got.Deduplicated || got.ID != first.ID {
		t.Fatalf("ignore: %+v %v", got, err)
	}
	repl, err := s.Push(ctx, []byte(`{"type":"u.a","args":[1],"options":{"queue":"uq","unique":{"keys":["type","args"],"on_conflict":"replace"}}}`))
	if err != nil || repl.ID == first.ID || repl.Deduplicated {
		t.Fatalf("replace: %+v %v", repl, err)
	}
	if old, _ := s.Info(ctx, first.ID); old.State != job.Cancelled {
		t.Fatalf("replaced job is %s, want cancelled", old.State)
	}
	// An active holder is not replaced.
	if js, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"uq"}, Count: 10}); len(js) != 2 {
		t.Fatalf("fetch: %d", len(js))
	}
	_, err = s.Push(ctx, []byte(`{"type":"u.a","args":[1],"options":{"queue":"uq","unique":{"keys":["type","args"],"on_conflict":"replace"}}}`))
	if code(err) != ojserr.Duplicate {
		t.Fatalf("replace of an active job: %v", err)
	}
	// Finishing the holder releases the key (default states are the
	// non-terminal ones).
	if _, err := s.Ack(ctx, repl.ID, nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Push(ctx, []byte(`{"type":"u.a","args":[1],"options":{"queue":"uq","unique":{"keys":["type","args"]}}}`)); err != nil {
		t.Fatalf("after the holder completed: %v", err)
	}
	// A unique policy in a batch is refused.
	_, err = s.PushBatch(ctx, [][]byte{[]byte(`{"type":"u.a","args":[9]}`), []byte(`{"type":"u.a","args":[9],"unique":{}}`)})
	if code(err) != ojserr.InvalidRequest {
		t.Fatalf("batch with unique: %v", err)
	}
}

func TestUniquePeriodStatesAndSchedule(t *testing.T) {
	t.Parallel()
	s, clk := newService(t)
	ctx := context.Background()
	a, err := s.Push(ctx, []byte(`{"type":"u.p","args":[],"options":{"queue":"up","unique":{"period":"PT2S"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Push(ctx, []byte(`{"type":"u.p","args":[],"options":{"queue":"up","unique":{"period":"PT2S"}}}`)); code(err) != ojserr.Duplicate {
		t.Fatalf("within the period: %v", err)
	}
	clk.Add(3 * time.Second)
	if _, err := s.Push(ctx, []byte(`{"type":"u.p","args":[],"options":{"queue":"up","unique":{"period":"PT2S"}}}`)); err != nil {
		t.Fatalf("after the period (holder %s still available): %v", a.ID, err)
	}
	// states: only completed jobs count; an available one does not.
	b, _ := s.Push(ctx, []byte(`{"type":"u.s","args":[],"options":{"queue":"us","unique":{"states":["completed"]}}}`))
	if _, err := s.Push(ctx, []byte(`{"type":"u.s","args":[],"options":{"queue":"us","unique":{"states":["completed"]}}}`)); err != nil {
		t.Fatalf("available holder with states [completed]: %v", err)
	}
	_ = b
	// replace_except_schedule keeps the holder's time.
	old, _ := s.Push(ctx, []byte(`{"type":"u.r","args":[{"user":1,"msg":"a"}],"options":{"queue":"ur","scheduled_at":"2026-11-21T14:00:00Z","unique":{"keys":["args"],"args_keys":["user"]}}}`))
	nw, err := s.Push(ctx, []byte(`{"type":"u.r","args":[{"user":1,"msg":"b"}],"options":{"queue":"ur","scheduled_at":"2026-11-21T15:00:00Z","unique":{"keys":["args"],"args_keys":["user"],"on_conflict":"replace_except_schedule"}}}`))
	if err != nil || nw.State != job.Scheduled || nw.ScheduledAtText != "2026-11-21T14:00:00Z" {
		t.Fatalf("replace_except_schedule: %+v %v", nw, err)
	}
	if o, _ := s.Info(ctx, old.ID); o.State != job.Cancelled {
		t.Fatalf("old scheduled job is %s", o.State)
	}
}

// TestUniqueUnderConcurrency: twenty concurrent enqueues of one key
// create exactly one job.
func TestUniqueUnderConcurrency(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, dups := 0, 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Push(ctx, []byte(`{"type":"u.c","args":[1],"options":{"queue":"uc","unique":{"keys":["args"]}}}`))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case code(err) == ojserr.Duplicate || code(err) == ojserr.Conflict:
				dups++
			default:
				t.Errorf("push: %v", err)
			}
		}()
	}
	wg.Wait()
	js, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"uc"}, Count: 50})
	if created != 1 || dups != 19 || len(js) != 1 {
		t.Fatalf("created %d, duplicates %d, jobs in queue %d", created, dups, len(js))
	}
}

// TestRateLimitedQueue: options.rate_limit caps FETCH at max_per_second
// jobs a second for every fetcher together.
func TestRateLimitedQueue(t *testing.T) {
	t.Parallel()
	s, q, clk := newServices(t)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := s.Push(ctx, []byte(`{"type":"r.l","args":[],"options":{"queue":"rl","rate_limit":{"max_per_second":1}}}`)); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(n int) int {
		js, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"rl"}, Count: n})
		if err != nil {
			t.Fatal(err)
		}
		return len(js)
	}
	if got := fetch(5); got != 1 {
		t.Fatalf("first fetch: %d jobs, want 1", got)
	}
	if got := fetch(1); got != 0 {
		t.Fatalf("immediate second fetch: %d jobs, want 0", got)
	}
	clk.Add(1500 * time.Millisecond)
	if got := fetch(1); got != 1 {
		t.Fatalf("after 1.5 s: %d jobs, want 1", got)
	}
	// Concurrent fetchers share the limit.
	clk.Add(1100 * time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := fetch(1)
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 1 {
		t.Fatalf("six concurrent fetches got %d jobs in one second, want 1", total)
	}
	// The limiter item shares the registry's partition but is not a queue.
	qs, err := q.QueueStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "" {
			t.Fatalf("the queue list holds a nameless entry: %+v", qs)
		}
	}
	if _, err := s.Push(ctx, []byte(`{"type":"r.l","args":[],"options":{"rate_limit":{"max_per_second":0}}}`)); code(err) != ojserr.InvalidRequest {
		t.Fatalf("rate 0: %v", err)
	}
}

// TestLargeBatchIsChunked: a batch beyond one transaction is written in
// chunks of 100, each all or none; a failing chunk is reported job by job.
func TestLargeBatchIsChunked(t *testing.T) {
	t.Parallel()
	s, q, _ := newServices(t)
	ctx := context.Background()
	mk := func(n int, q string) [][]byte {
		raws := make([][]byte, n)
		for i := range raws {
			raws[i] = []byte(`{"type":"b.k","args":[` + strconv.Itoa(i) + `],"options":{"queue":"` + q + `"}}`)
		}
		return raws
	}
	jobs, err := s.PushBatch(ctx, mk(1000, "bulk-a"))
	if err != nil || len(jobs) != 1000 || string(jobs[999].Args) != "[999]" {
		t.Fatalf("1000 jobs: %d %v", len(jobs), err)
	}
	if st, _ := q.Stats(ctx, "bulk-a"); st.Available != 1000 {
		t.Fatalf("queue holds %d jobs", st.Available)
	}
	if _, err := s.PushBatch(ctx, mk(1001, "bulk-a")); code(err) != ojserr.InvalidRequest {
		t.Fatalf("1001 jobs: %v", err)
	}
	// Job 150 reuses an existing id: its chunk (100-199) fails whole.
	raws := mk(250, "bulk-b")
	raws[150] = []byte(`{"id":"` + jobs[0].ID + `","type":"b.k","args":[],"options":{"queue":"bulk-b"}}`)
	created, err := s.PushBatch(ctx, raws)
	var pe *lifecycle.PartialError
	if !errors.As(err, &pe) || len(created) != 150 || len(pe.Failed) != 100 || pe.Failed[0].Index != 100 || pe.Failed[50].Error.Code != ojserr.Duplicate {
		t.Fatalf("partial: created %d, err %v", len(created), err)
	}
	if st, _ := q.Stats(ctx, "bulk-b"); st.Available != 150 {
		t.Fatalf("queue holds %d jobs, want 150", st.Available)
	}
}
