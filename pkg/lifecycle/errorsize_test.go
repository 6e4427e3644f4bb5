package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// TestLargestFailuresKeepTheItemUnder400KB: a job at the stored size
// limit (args that barely compress, as large as store.MaxJobItemBytes
// lets them be) fails 25 times with the largest error the API accepts (64 KiB of
// details, 50 frames of 1 KiB), then completes with a 64 KiB result.
// DynamoDB Local refuses items over 400 KB as DynamoDB does: every FAIL
// and the ACK must still be written, the history cut to its byte budget.
func TestLargestFailuresKeepTheItemUnder400KB(t *testing.T) {
	t.Parallel()
	s, clk := newService(t)
	ctx := context.Background()
	body := largestStored(t, func(arg string) string {
		return fmt.Sprintf(`{"type":"big.fail","args":[%q],"options":{"queue":"q","retry":{"max_attempts":30,"initial_interval":"PT1S","backoff_coefficient":1,"jitter":false}}}`, arg)
	})
	j, err := s.Push(ctx, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	frames := make([]string, 50)
	for i := range frames {
		frames[i] = strings.Repeat("f", 1024)
	}
	details := json.RawMessage(`{"dump":"` + strings.Repeat("d", 64<<10-12) + `"}`)
	for attempt := 1; attempt <= 25; attempt++ {
		got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"q"}, WorkerID: "w"})
		if err != nil || len(got) != 1 || got[0].Attempt != attempt {
			t.Fatalf("fetch %d: %d jobs, %v", attempt, len(got), err)
		}
		in := lifecycle.ErrorInput{Type: "big.error", Message: strings.Repeat("m", 64<<10), Backtrace: frames, Details: details}
		if _, err := s.Nack(ctx, j.ID, in, 0); err != nil {
			t.Fatalf("fail %d: %v", attempt, err)
		}
		clk.Add(2 * time.Second)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"q"}, WorkerID: "w"})
	if err != nil || len(got) != 1 {
		t.Fatalf("last fetch: %v", err)
	}
	if _, err := s.Ack(ctx, j.ID, json.RawMessage(`"`+strings.Repeat("r", job.MaxResultBytes-2)+`"`), 0); err != nil {
		t.Fatalf("ack: %v", err)
	}
	done, err := s.Info(ctx, j.ID)
	if err != nil || done.State != job.Completed {
		t.Fatalf("job: %v %v", done.State, err)
	}
	total := 0
	for _, e := range done.Errors {
		b, _ := json.Marshal(e)
		total += len(b)
	}
	last := done.Errors[len(done.Errors)-1]
	if total > job.MaxErrorHistoryBytes || len(done.Errors) < 2 || last.Attempt != 25 || !strings.HasSuffix(last.Message, job.TruncatedMarker) {
		t.Fatalf("history: %d entries of %d bytes, last attempt %d", len(done.Errors), total, last.Attempt)
	}
}

// largestStored returns the body envelope(arg) for the longest arg of
// random base64 (which compresses to about three quarters) whose job
// store.CheckJobItem still accepts, within 1 KiB.
func largestStored(t *testing.T, envelope func(arg string) string) string {
	t.Helper()
	text := testenv.RandomText(job.MaxEnvelopeBytes, 7)
	fits := func(n int) bool {
		e, err := job.ParseEnqueue([]byte(envelope(text[:n])), time.Now())
		if err != nil {
			return false
		}
		_, err = store.CheckJobItem(e.Job, 5*time.Minute)
		return err == nil
	}
	lo, hi := 0, job.MaxEnvelopeBytes-1024
	for hi-lo > 1024 {
		if mid := (lo + hi) / 2; fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo < store.MaxJobItemBytes {
		t.Fatalf("only %d bytes of base64 fit; they should compress", lo)
	}
	return envelope(text[:lo])
}

// TestDeadLetterListStopsBeforeLambdasResponseLimit: four dead jobs of
// 250 KiB of '<' (about 1.8 MB each as FETCH counts it: JSON, where encoding/json writes
// '<' as \u003c; a few KB stored) would make a 7 MB answer: the list
// stops before the job that would take it past store.ListBytes and says
// there is more.
func TestDeadLetterListStopsBeforeLambdasResponseLimit(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
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
	jobs, more, err := s.DeadLetter(ctx, q, 50)
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
	if small, more, err := s.DeadLetter(ctx, q, 1); err != nil || len(small) != 1 || !more {
		t.Fatalf("a list of one: %d jobs, more %v, %v", len(small), more, err)
	}
}

// TestBulkDeadLetterCallsStopAtTheirByteBound: a bulk retry or purge holds
// the jobs it acts on in memory; past its byte bound (64 MiB, 4 MiB here)
// a call stops with has_more and a cursor, and the calls that go on from
// it act on the rest, each job once.
func TestBulkDeadLetterCallsStopAtTheirByteBound(t *testing.T) {
	defer lifecycle.SetMaxBulkBytes(4 << 20)()
	s, clk := newService(t)
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
		call := s.RetryDeadMatching
		if op == "purge" {
			call = s.PurgeDead
		}
		done := map[string]int{}
		cursor := ""
		for calls := 1; ; calls++ {
			res, err := call(ctx, lifecycle.DeadFilter{Queue: q, Limit: 100, Cursor: cursor})
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
