package lifecycle_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// A bulk dead letter retry is a pass over the dead letter queue, oldest
// first, that ends: it does not select workflow jobs (the retry refuses
// them, and newest-first pages of refusals repeated has_more forever), a
// job it retried that failed again is not selected again by the same pass,
// and a call reads at most its scan budget, going on from next_cursor.
func TestBulkDeadLetterRetryIsOnePassThatEnds(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	s := lifecycle.New(st, lifecycle.Config{Now: c.Now, Rand: func() float64 { return 0.5 }})
	ctx := context.Background()
	const q = "bulk-pass"
	var plain []string
	for range 5 {
		c.Add(time.Second)
		plain = append(plain, discard(t, s, q))
	}
	// Three jobs of a workflow, discarded after them (the newest).
	var wf []string
	for i := range 3 {
		c.Add(time.Second)
		e, err := job.ParseEnqueue([]byte(`{"type":"test.dead","args":[],"options":{"queue":"`+q+`","retry":{"max_attempts":1}}}`), c.Now())
		if err != nil {
			t.Fatal(err)
		}
		j := e.Job
		j.WorkflowID, j.WorkflowStepID = "wf-bulk", []string{"a", "b", "c"}[i]
		if err := s.Admit(ctx, []*job.Job{j}); err != nil {
			t.Fatal(err)
		}
		if err := st.Create(ctx, []*job.Job{j}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{q}}); err != nil || len(got) != 1 {
			t.Fatalf("fetch workflow job: %v %v", got, err)
		}
		if _, err := s.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "Boom", Message: "boom"}, 0); err != nil {
			t.Fatal(err)
		}
		wf = append(wf, j.ID)
	}

	var retried []string
	call := func(f lifecycle.DeadFilter) lifecycle.BulkResult {
		t.Helper()
		f.Queue = q
		r, err := s.RetryDeadMatching(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Failed) != 0 {
			t.Fatalf("failures: %+v", r.Failed)
		}
		retried = append(retried, r.JobIDs...)
		return r
	}
	r := call(lifecycle.DeadFilter{Limit: 2})
	if !slices.Equal(r.JobIDs, plain[:2]) || !r.HasMore || r.NextCursor == "" {
		t.Fatalf("first call: %+v (want the two oldest, has_more and a cursor)", r)
	}
	// The oldest fails again before the pass goes on.
	c.Add(time.Second)
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{q}, Count: 10})
	if err != nil || len(got) != 2 {
		t.Fatalf("fetch retried: %v %v", got, err)
	}
	for _, j := range got {
		if j.ID == plain[0] {
			if _, err := s.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "Boom", Message: "again"}, 0); err != nil {
				t.Fatal(err)
			}
		} else if _, err := s.Ack(ctx, j.ID, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	for calls := 0; r.HasMore; calls++ {
		if calls == 10 {
			t.Fatalf("the pass does not end: %+v", r)
		}
		r = call(lifecycle.DeadFilter{Limit: 2, Cursor: r.NextCursor})
	}
	if !slices.Equal(retried, plain) {
		t.Fatalf("retried %v, want each of %v once, oldest first", retried, plain)
	}
	left := deadIDs(t, s, q)
	want := append([]string{plain[0]}, wf...)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("dead letter after the pass: %v, want %v (the re-failed job and the workflow's)", left, want)
	}

	// A new pass with a scan budget of 2 reads the workflow's three jobs
	// and the re-failed one over two calls, and retries the latter.
	retried = nil
	c.Add(time.Second)
	r = call(lifecycle.DeadFilter{Limit: 10, Scan: 2})
	if r.Matched != 0 || !r.HasMore || r.NextCursor == "" {
		t.Fatalf("budgeted call: %+v (want nothing matched yet, has_more)", r)
	}
	for calls := 0; r.HasMore; calls++ {
		if calls == 3 { // four items at two a call, and perhaps an empty last page
			t.Fatalf("budgeted pass does not end: %+v", r)
		}
		r = call(lifecycle.DeadFilter{Limit: 10, Scan: 2, Cursor: r.NextCursor})
	}
	if !slices.Equal(retried, plain[:1]) {
		t.Fatalf("budgeted pass retried %v, want %v", retried, plain[:1])
	}
	if _, err := s.RetryDeadMatching(ctx, lifecycle.DeadFilter{Queue: q, Limit: 1, Cursor: "junk"}); code(err) != "invalid_request" {
		t.Fatalf("bad cursor: %v", err)
	}
}
