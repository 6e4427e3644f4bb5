package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// answerBytes is the FETCH answer as the api function returns it: the
// binding's {"jobs", "job"} JSON, carried as a string in the Lambda
// response.
func answerBytes(t *testing.T, jobs []*job.Job) int {
	t.Helper()
	out := map[string]any{"jobs": jobs}
	if len(jobs) > 0 {
		out["job"] = jobs[0]
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return awslimit.JSONStringLen(b)
}

func pushBig(t *testing.T, s *lifecycle.Service, queue, fill string, n, bytes int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		body := fmt.Sprintf(`{"type":"big.job","args":[%q],"options":{"queue":%q}}`, strings.Repeat(fill, bytes), queue)
		j, err := s.Push(context.Background(), []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	return ids
}

// TestFetchClaimsOnlyWhatFitsTheAnswer: a FETCH whose jobs would make an
// answer over Lambda's 6 MB claims only those that fit; the others stay
// available with their attempts untouched and go to the next FETCH.
func TestFetchClaimsOnlyWhatFitsTheAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		queues int
		fill   string // '<' is 6 bytes in the answer's JSON, 7 once in the Lambda response
		max    int
	}{
		{"eight queues of 1 MB", 8, "a", 31},
		{"one queue of HTML-escaped args", 1, "<", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newService(t)
			ctx := context.Background()
			var queues, ids []string
			for q := 0; q < tc.queues; q++ {
				name := fmt.Sprintf("big-%d", q)
				queues = append(queues, name)
				ids = append(ids, pushBig(t, s, name, tc.fill, 4, 250<<10)...)
			}
			got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: queues, Count: len(ids), WorkerID: "w"})
			if err != nil {
				t.Fatal(err)
			}
			if n := answerBytes(t, got); n > lifecycle.DefaultFetchBytes || len(got) == 0 || len(got) > tc.max {
				t.Fatalf("fetched %d jobs in an answer of %d bytes (budget %d)", len(got), n, lifecycle.DefaultFetchBytes)
			}
			var fetched []string
			for _, j := range got {
				fetched = append(fetched, j.ID)
			}
			var left []string
			for _, id := range ids {
				if slices.Contains(fetched, id) {
					continue
				}
				left = append(left, id)
				j, err := s.Info(ctx, id)
				if err != nil || j.State != job.Available || j.Attempt != 0 {
					t.Fatalf("job %s not fetched: %v attempt %d %v", id, j.State, j.Attempt, err)
				}
			}
			// The rest goes to the next FETCHes.
			for len(left) > 0 {
				more, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: queues, Count: len(ids), WorkerID: "w"})
				if err != nil || len(more) == 0 {
					t.Fatalf("next fetch: %d jobs, %v; %d left", len(more), err, len(left))
				}
				if n := answerBytes(t, more); n > lifecycle.DefaultFetchBytes {
					t.Fatalf("next answer of %d bytes", n)
				}
				for _, j := range more {
					left = slices.DeleteFunc(left, func(id string) bool { return id == j.ID })
				}
			}
		})
	}
}

// TestFetchSkipsAJobThatCannotFitAlone: a job too large for the answer
// budget even alone is not claimed (no attempt burned); the jobs behind it
// are.
func TestFetchSkipsAJobThatCannotFitAlone(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	big := pushBig(t, s, "q", "a", 1, 100<<10)[0]
	small := pushBig(t, s, "q", "a", 1, 10)[0]
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"q"}, Count: 5, MaxBytes: 150 << 10})
	if err != nil || len(got) != 1 || got[0].ID != small {
		t.Fatalf("fetch: %v %v", got, err)
	}
	if j, _ := s.Info(ctx, big); j.State != job.Available || j.Attempt != 0 {
		t.Fatalf("the skipped job: %s attempt %d", j.State, j.Attempt)
	}
}

// TestExpiryFromTheDueIndexKeepsTheHistory: the due index does not project
// the error history; a retryable job that expires while it waits is read
// by key before its discard appends the expiry to the history.
func TestExpiryFromTheDueIndexKeepsTheHistory(t *testing.T) {
	t.Parallel()
	s, clk := newService(t)
	ctx := context.Background()
	exp := clk.Now().Add(5 * time.Second).Format(time.RFC3339Nano)
	j, err := s.Push(ctx, []byte(fmt.Sprintf(`{"type":"exp.job","args":[],"options":{"queue":"exp","expires_at":%q,"retry":{"max_attempts":5,"initial_interval":"PT30S","jitter":false}}}`, exp)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"exp"}}); err != nil || len(got) != 1 {
		t.Fatalf("fetch: %d %v", len(got), err)
	}
	if _, err := s.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "first.failure", Message: "boom"}, 0); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute) // past expires_at and the backoff
	if _, _, _, err := s.ResolveDue(ctx, "exp", 10, false); err != nil {
		t.Fatal(err)
	}
	got, err := s.Info(ctx, j.ID)
	if err != nil || got.State != job.Discarded || len(got.Errors) != 2 || got.Errors[0].Type != "first.failure" || got.Errors[1].Type != "expired" {
		t.Fatalf("after expiry: state %s, errors %+v, %v", got.State, got.Errors, err)
	}
}
