package deadletter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
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
	s, qsvc, d := newServices(st, c, deadletter.Config{})
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
		if err := qsvc.Admit(ctx, []*job.Job{j}); err != nil {
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
	call := func(f deadletter.Filter) deadletter.BulkResult {
		t.Helper()
		f.Queue = q
		r, err := d.RetryMatching(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Failed) != 0 {
			t.Fatalf("failures: %+v", r.Failed)
		}
		retried = append(retried, r.JobIDs...)
		return r
	}
	r := call(deadletter.Filter{Limit: 2})
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
		r = call(deadletter.Filter{Limit: 2, Cursor: r.NextCursor})
	}
	if !slices.Equal(retried, plain) {
		t.Fatalf("retried %v, want each of %v once, oldest first", retried, plain)
	}
	left := deadIDs(t, d, q)
	want := append([]string{plain[0]}, wf...)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("dead letter after the pass: %v, want %v (the re-failed job and the workflow's)", left, want)
	}

	// A new pass with a scan budget of 2 reads the workflow's three jobs
	// and the re-failed one over two calls, and retries the latter.
	retried = nil
	c.Add(time.Second)
	r = call(deadletter.Filter{Limit: 10, Scan: 2})
	if r.Matched != 0 || !r.HasMore || r.NextCursor == "" {
		t.Fatalf("budgeted call: %+v (want nothing matched yet, has_more)", r)
	}
	for calls := 0; r.HasMore; calls++ {
		if calls == 3 { // four items at two a call, and perhaps an empty last page
			t.Fatalf("budgeted pass does not end: %+v", r)
		}
		r = call(deadletter.Filter{Limit: 10, Scan: 2, Cursor: r.NextCursor})
	}
	if !slices.Equal(retried, plain[:1]) {
		t.Fatalf("budgeted pass retried %v, want %v", retried, plain[:1])
	}
	if _, err := d.RetryMatching(ctx, deadletter.Filter{Queue: q, Limit: 1, Cursor: "junk"}); code(err) != "invalid_request" {
		t.Fatalf("bad cursor: %v", err)
	}
}

// TestDeadLetterListStopsBeforeLambdasResponseLimit: four dead jobs of
// 250 KiB of '<' (about 1.8 MB each as FETCH counts it: JSON, where encoding/json writes
// '<' as \u003c; a few KB stored) would make a 7 MB answer: the list
// stops before the job that would take it past store.ListBytes and says
// there is more.
func TestDeadLetterListStopsBeforeLambdasResponseLimit(t *testing.T) {
	t.Parallel()
	s, d, _ := newService(t)
	ctx := context.Background()
	const q = "bigdead"
	for i := 0; i < 4; i++ {
		body := fmt.Sprintf(`{"type":"big.dead","args":["%s",%d],"options":{"queue":%q,"retry":{"max_attempts":1}}}`, strings.Repeat("<", 250<<10), i, q)
		if _, err := s.Push(ctx, []byte(body)); err != nil {
			t.Fatal(err)
		}
		got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{q}, WorkerID: "w"})
		if err != nil || len(got) != 1 {
			t.Fatalf("fetch %d: %d jobs, %v", i, len(got), err)
		}
		if j, err := s.Nack(ctx, got[0].ID, lifecycle.ErrorInput{Type: "big.error", Message: "boom"}, 0); err != nil || j.State != job.Discarded {
			t.Fatalf("fail %d: %v", i, err)
		}
	}
	jobs, more, err := d.List(ctx, q, 50)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, j := range jobs {
		total += store.FetchBytes(j)
	}
	if len(jobs) != 2 || !more || total > store.ListBytes {
		t.Fatalf("dead letter list: %d jobs of %d bytes, more %v", len(jobs), total, more)
	}
	if small, more, err := d.List(ctx, q, 1); err != nil || len(small) != 1 || !more {
		t.Fatalf("a list of one: %d jobs, more %v, %v", len(small), more, err)
	}
}

// TestBulkDeadLetterCallsStopAtTheirByteBound: a bulk retry or purge holds
// the jobs it acts on in memory; past its byte bound (64 MiB, 4 MiB here)
// a call stops with has_more and a cursor, and the calls that go on from
// it act on the rest, each job once.
func TestBulkDeadLetterCallsStopAtTheirByteBound(t *testing.T) {
	defer deadletter.SetMaxBulkBytes(4 << 20)()
	s, d, clk := newService(t)
	ctx := context.Background()
	for _, op := range []string{"retry", "purge"} {
		q := "bulkbytes-" + op
		var ids []string
		for i := 0; i < 3; i++ {
			clk.Add(time.Second) // a pass selects jobs discarded before it started
			body := fmt.Sprintf(`{"type":"big.dead","args":["%s",%d],"options":{"queue":%q,"retry":{"max_attempts":1}}}`, strings.Repeat("<", 250<<10), i, q)
			j, err := s.Push(ctx, []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{q}, WorkerID: "w"}); err != nil || len(got) != 1 {
				t.Fatalf("fetch %d: %v", i, err)
			}
			if _, err := s.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "big.error", Message: "boom"}, 0); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
		clk.Add(time.Second)
		call := d.RetryMatching
		if op == "purge" {
			call = d.Purge
		}
		done := map[string]int{}
		cursor := ""
		for calls := 1; ; calls++ {
			res, err := call(ctx, deadletter.Filter{Queue: q, Limit: 100, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			if calls == 1 && (res.Succeeded != 2 || !res.HasMore) {
				t.Fatalf("%s: the first call acted on %d jobs, has_more %v", op, res.Succeeded, res.HasMore)
			}
			for _, id := range res.JobIDs {
				done[id]++
			}
			if !res.HasMore || calls > 3 {
				break
			}
			cursor = res.NextCursor
		}
		for _, id := range ids {
			if done[id] != 1 {
				t.Fatalf("%s: job %s acted on %d times", op, id, done[id])
			}
		}
	}
}
