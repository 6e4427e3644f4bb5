package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

type fetched struct {
	jobs []*job.Job
	err  error
	took time.Duration
}

// fetchAsync runs r and sends its answer.
func fetchAsync(ctx context.Context, s *lifecycle.Service, r lifecycle.FetchRequest) <-chan fetched {
	ch := make(chan fetched, 1)
	go func() {
		start := time.Now()
		jobs, err := s.Fetch(ctx, r)
		ch <- fetched{jobs, err, time.Since(start)}
	}()
	return ch
}

// A FETCH with a wait that finds its queue empty keeps looking (a long
// poll, worker protocol 6.1) and answers with a job pushed while it waits,
// long before its wait is over.
func TestAWaitingFetchTakesAJobPushedWhileItWaits(t *testing.T) {
	t.Parallel()
	s, db, _ := newCountedService(t)
	ctx := context.Background()
	before := db.n.Load()
	ch := fetchAsync(ctx, s, lifecycle.FetchRequest{Queues: []string{"longpoll"}, WorkerID: "w-wait", Wait: 15 * time.Second})
	// Eight requests are at least two empty passes (each queries the
	// queue's two ready shards; the first may also read its four due
	// shards): the FETCH is waiting; without a wait it answers after the
	// first.
	for db.n.Load()-before < 8 {
		select {
		case f := <-ch:
			t.Fatalf("the FETCH answered before it looked a second time: %d jobs, %v", len(f.jobs), f.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	j, err := s.Push(ctx, []byte(`{"type":"wait.job","args":[],"options":{"queue":"longpoll"}}`))
	if err != nil {
		t.Fatal(err)
	}
	pushed := time.Now()
	f := <-ch
	t.Logf("answered %v after the push", time.Since(pushed))
	if f.err != nil || len(f.jobs) != 1 || f.jobs[0].ID != j.ID || f.jobs[0].State != job.Active {
		t.Fatalf("waiting FETCH: %+v %v, want job %s active", f.jobs, f.err, j.ID)
	}
	if f.took >= 15*time.Second {
		t.Fatalf("the FETCH answered after its whole wait (%v)", f.took)
	}
}

// A waiting FETCH that finds nothing answers empty once its wait is over,
// having looked again every FetchWaitPoll; a FETCH without a wait looks
// once.
func TestAWaitingFetchAnswersEmptyAfterItsWait(t *testing.T) {
	t.Parallel()
	s, db, _ := newCountedService(t)
	ctx := context.Background()
	before := db.n.Load()
	f := <-fetchAsync(ctx, s, lifecycle.FetchRequest{Queues: []string{"idle"}, Wait: 300 * time.Millisecond})
	if f.err != nil || len(f.jobs) != 0 {
		t.Fatalf("%+v %v", f.jobs, f.err)
	}
	if f.took < 300*time.Millisecond {
		t.Fatalf("answered after %v, before its wait of 300ms", f.took)
	}
	if n := db.n.Load() - before; n < 4 {
		t.Fatalf("%d requests: the FETCH did not look again while it waited", n)
	}
	before = db.n.Load()
	if f := <-fetchAsync(ctx, s, lifecycle.FetchRequest{Queues: []string{"idle"}}); f.err != nil || len(f.jobs) != 0 {
		t.Fatalf("%+v %v", f.jobs, f.err)
	}
	if n := db.n.Load() - before; n != 2 {
		t.Fatalf("a FETCH without a wait made %d requests, want 2 (the ready shards)", n)
	}
	// The request's deadline bounds the wait (FetchWaitMargin kept for the
	// answer): a wait that does not fit answers after one look.
	dctx, cancel := context.WithTimeout(ctx, lifecycle.FetchWaitMargin)
	defer cancel()
	before = db.n.Load()
	if f := <-fetchAsync(dctx, s, lifecycle.FetchRequest{Queues: []string{"idle"}, Wait: 10 * time.Second}); f.err != nil || len(f.jobs) != 0 {
		t.Fatalf("%+v %v", f.jobs, f.err)
	}
	if n := db.n.Load() - before; n != 2 {
		t.Fatalf("a wait past the deadline's margin made %d requests, want 2", n)
	}
}

// A waiting FETCH of a paused queue that holds jobs looks again every
// FetchWaitHeld, not every FetchWaitPoll (each look reads the queue's
// state), and takes the job once the queue is resumed.
func TestAWaitingFetchOfAPausedQueueLooksLessOften(t *testing.T) {
	t.Parallel()
	s, q, db, _ := newCountedServices(t)
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"wait.job","args":[],"options":{"queue":"held"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetPaused(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	before := db.n.Load()
	f := <-fetchAsync(ctx, s, lifecycle.FetchRequest{Queues: []string{"held"}, Wait: 1200 * time.Millisecond})
	if f.err != nil || len(f.jobs) != 0 {
		t.Fatalf("a paused queue handed out %+v %v", f.jobs, f.err)
	}
	// The first look reads the due shards, the ready shards and the
	// state (7 requests); the queue is then known paused, so the looks
	// every 250 ms and at the end read its state alone (1 each): about
	// 12. Every FetchWaitPoll it would be about 7 + 24.
	if n := db.n.Load() - before; n > 16 {
		t.Fatalf("%d requests in a 1.2 s wait on a paused queue", n)
	}
	ch := fetchAsync(ctx, s, lifecycle.FetchRequest{Queues: []string{"held"}, Wait: 15 * time.Second})
	if _, err := q.SetPaused(ctx, "held", false); err != nil {
		t.Fatal(err)
	}
	if f := <-ch; f.err != nil || len(f.jobs) != 1 || f.jobs[0].ID != j.ID {
		t.Fatalf("after resume: %+v %v", f.jobs, f.err)
	}
}

// A waiting FETCH of a quiet worker answers at once: it gets no new jobs.
func TestAWaitingFetchOfAQuietWorkerAnswersAtOnce(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	if _, err := s.Push(ctx, []byte(`{"type":"wait.job","args":[],"options":{"queue":"quietq"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w-quiet"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetWorkerDirective(ctx, "w-quiet", "quiet"); err != nil {
		t.Fatal(err)
	}
	f := <-fetchAsync(ctx, s, lifecycle.FetchRequest{Queues: []string{"quietq"}, WorkerID: "w-quiet", Wait: 15 * time.Second})
	if f.err != nil || len(f.jobs) != 0 {
		t.Fatalf("a quiet worker got %+v %v", f.jobs, f.err)
	}
	if f.took >= 15*time.Second {
		t.Fatalf("a quiet worker's FETCH waited its whole wait (%v)", f.took)
	}
}
