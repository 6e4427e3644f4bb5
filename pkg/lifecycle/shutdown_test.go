package lifecycle_test

import (
	"context"
	"testing"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// A worker that reported quiet or terminate, or that an operator told to
// be quiet, gets no new jobs (ojs-graceful-shutdown.md 5.1); others do.
func TestQuietWorkerIsAssignedNothing(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	s := lifecycle.New(st, lifecycle.Config{})
	ctx := context.Background()
	for range 3 {
		if _, err := s.Push(ctx, []byte(`{"type":"test.echo","args":[],"options":{"queue":"quiet-q"}}`)); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(w string) int {
		got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"quiet-q"}, WorkerID: w})
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	if _, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w-quiet", State: lifecycle.WorkerQuiet}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w-stop", State: lifecycle.WorkerTerminate}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetWorkerDirective(ctx, "w-told", lifecycle.WorkerQuiet); err != nil {
		t.Fatal(err)
	}
	// A second service shares nothing in memory with the first: it reads
	// the worker's state from the table.
	st2 := lifecycle.New(st, lifecycle.Config{})
	for _, w := range []string{"w-quiet", "w-stop", "w-told"} {
		if n := fetch(w); n != 0 {
			t.Errorf("worker %s got %d jobs", w, n)
		}
		if got, err := st2.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"quiet-q"}, WorkerID: w}); err != nil || len(got) != 0 {
			t.Errorf("worker %s got %d jobs from another instance (%v)", w, len(got), err)
		}
	}
	if n := fetch("w-running"); n != 1 {
		t.Errorf("a running worker got %d jobs", n)
	}
	if n := fetch(""); n != 1 {
		t.Errorf("an anonymous fetch got %d jobs", n)
	}
}

// An attempt interrupted by a worker's shutdown is retried even when the
// worker marked the error non-retryable; other errors so marked are not.
func TestShutdownErrorIsRetried(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	no := false
	for _, tc := range []struct {
		typ  string
		want job.State
	}{{lifecycle.ErrShutdown, job.Retryable}, {lifecycle.ErrShutdownTimeout, job.Retryable}, {"Boom", job.Discarded}} {
		j, err := s.Push(ctx, []byte(`{"type":"test.sd","args":[],"options":{"queue":"shutdown-q","retry":{"max_attempts":3}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"shutdown-q"}}); err != nil || len(got) != 1 {
			t.Fatalf("fetch: %v %v", got, err)
		}
		d, err := s.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: tc.typ, Message: "interrupted", Retryable: &no}, 0)
		if err != nil || d.State != tc.want {
			t.Errorf("%s: state %v (%v), want %s", tc.typ, d.State, err, tc.want)
		}
	}
}
