package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// The ready index projects no payloads, so FETCH budgets its answer by
// the size recorded on the job ("fb"). Whatever grew the job since it was
// created (failures, lease expiries, a dead letter's revival with new
// meta), the recorded size covers the job's answer as the claim returns
// it, within twice store.FetchSlack.
func TestRecordedFetchSizeFollowsTheJob(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	j := newJob(t, `{"type":"grow.job","args":["small"],"queue":"grow"}`, t0)
	if err := s.Create(ctx, []*job.Job{j}, time.Minute); err != nil {
		t.Fatal(err)
	}
	big := job.ErrorInfo{Type: "grow.error", Message: strings.Repeat("<", 20<<10)}
	now := t0
	for round := 1; round <= 5; round++ {
		ready, err := s.ReadyOf(ctx, "", "grow", "", 1)
		if err != nil || len(ready) != 1 {
			t.Fatalf("round %d: ready %d %v", round, len(ready), err)
		}
		now = now.Add(time.Second)
		claimed, err := s.Apply(ctx, store.Claim(j.ID, store.ClaimOpts{Queue: "grow", WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Second), Deadline: now.Add(time.Minute)}))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(claimed)
		answer := awslimit.JSONStringLen(b)
		if fb := ready[0].FetchBytes; fb < answer || fb > answer+2*store.FetchSlack {
			t.Fatalf("round %d: recorded size %d for an answer of %d bytes", round, fb, answer)
		}
		big.Attempt = claimed.Attempt
		switch round % 3 {
		case 1: // a failure, retried after a second
			r, err := s.Apply(ctx, store.Fail(claimed, store.Failure{Error: big, Retry: true, NextAttempt: now.Add(time.Second)}, now))
			if err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Second)
			if _, err := s.Apply(ctx, store.Promote(r, now, time.Minute, false)); err != nil {
				t.Fatal(err)
			}
		case 2: // the lease ends
			now = now.Add(time.Second)
			if _, err := s.Apply(ctx, store.ExpireLease(claimed, store.Failure{Error: big, Retry: true}, now, time.Minute, false)); err != nil {
				t.Fatal(err)
			}
		case 0: // discarded, then revived with larger meta
			d, err := s.Apply(ctx, store.Fail(claimed, store.Failure{Error: big}, now))
			if err != nil {
				t.Fatal(err)
			}
			meta := json.RawMessage(`{"note":"` + strings.Repeat("m", 10<<10) + `"}`)
			if _, err := s.Apply(ctx, store.Revive(d, now, time.Minute, "", meta, false)); err != nil {
				t.Fatal(err)
			}
		}
	}
}
