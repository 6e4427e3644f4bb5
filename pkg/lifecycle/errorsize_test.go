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
