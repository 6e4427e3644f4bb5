package lifecycle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/tenant"
)

// A request's tenant goes into its jobs' meta.tenant_id (a meta naming
// another is refused); a FETCH scoped to a tenant takes only its jobs,
// however many of another's are ahead of them, and one not scoped takes
// any; a job failed for good leaves its tenant's listing.
func TestTenantScopedFetch(t *testing.T) {
	t.Parallel()
	s, _, _ := newServices(t)
	ctx := context.Background()
	as := func(tenant string) context.Context { return job.WithTenant(ctx, tenant) }
	push := func(ctx context.Context, body string) *job.Job {
		t.Helper()
		j, err := s.Push(ctx, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	for i := range 30 {
		push(as("beta"), fmt.Sprintf(`{"type":"t.job","args":[%d],"options":{"queue":"tq"}}`, i))
	}
	a := push(as("alpha"), `{"type":"t.job","args":["a"],"meta":{"trace":"x"},"options":{"queue":"tq"}}`)
	if a.Tenant != "alpha" || string(a.Meta) != `{"tenant_id":"alpha","trace":"x"}` {
		t.Fatalf("alpha's job: tenant %q meta %s", a.Tenant, a.Meta)
	}
	if _, err := s.Push(as("alpha"), []byte(`{"type":"t.job","args":[],"meta":{"tenant_id":"beta"},"options":{"queue":"tq"}}`)); code(err) != ojserr.InvalidRequest {
		t.Fatalf("a meta naming another tenant: %v", err)
	}
	if j := push(ctx, `{"type":"t.job","args":[],"meta":{"tenant_id":"gamma"},"options":{"queue":"tq2"}}`); j.Tenant != "gamma" {
		t.Fatalf("meta.tenant_id without the header: tenant %q", j.Tenant)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"tq"}, Count: 5, WorkerID: "w", Tenant: "alpha"})
	if err != nil || len(got) != 1 || got[0].ID != a.ID || got[0].Tenant != "alpha" {
		t.Fatalf("alpha's FETCH behind 30 of beta's: %d jobs %v", len(got), err)
	}
	if again, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"tq"}, Count: 5, WorkerID: "w", Tenant: "alpha"}); len(again) != 0 {
		t.Fatalf("alpha has no job left, yet got %d", len(again))
	}
	// alpha's job fails for good: it leaves alpha's listing (the tenant
	// index shares the dead letter's sort key).
	if _, err := s.Nack(ctx, a.ID, lifecycle.ErrorInput{Type: "fatal", Message: "no", Retryable: new(false)}, 0); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"tq"}, Count: 5, WorkerID: "w", Tenant: "alpha"}); len(again) != 0 {
		t.Fatalf("a discarded job was fetched again: %d", len(again))
	}
	all, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"tq"}, Count: 50, WorkerID: "w"})
	if err != nil || len(all) != 30 {
		t.Fatalf("an unscoped FETCH: %d jobs %v", len(all), err)
	}
	if _, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"tq"}, Tenant: "bad tenant"}); code(err) != ojserr.InvalidRequest {
		t.Fatalf("an invalid tenant: %v", err)
	}
}

// A tenant's max_concurrency holds its jobs past the limit, scoped FETCH
// or not, other tenants' jobs going on; a new limit applies to the jobs
// already waiting.
func TestTenantMaxConcurrency(t *testing.T) {
	t.Parallel()
	s, q, clk := newServices(t)
	ctx := context.Background()
	one := 1
	if _, err := q.SetTenantLimits(ctx, "lim", tenant.Limits{MaxConcurrency: &one}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Push(job.WithTenant(ctx, "lim"), fmt.Appendf(nil, `{"type":"t","args":[%d],"options":{"queue":"tl"}}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	other, err := s.Push(job.WithTenant(ctx, "free"), []byte(`{"type":"t","args":[],"options":{"queue":"tl"}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"tl"}, Count: 10, WorkerID: "w"})
	if err != nil || len(got) != 2 {
		t.Fatalf("unscoped FETCH with lim limited to 1: %d jobs %v", len(got), err)
	}
	if got[0].ID != other.ID && got[1].ID != other.ID {
		t.Fatal("the other tenant's job was held too")
	}
	if again, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"tl"}, Count: 10, WorkerID: "w", Tenant: "lim"}); len(again) != 0 {
		t.Fatalf("lim at its limit, yet a scoped FETCH got %d", len(again))
	}
	two := 2
	if _, err := q.SetTenantLimits(ctx, "lim", tenant.Limits{MaxConcurrency: &two}); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second) // past the process's memory of the full key
	if more, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"tl"}, Count: 10, WorkerID: "w", Tenant: "lim"}); len(more) != 1 {
		t.Fatalf("limit raised to 2: a scoped FETCH got %d, want 1", len(more))
	}
	if _, err := q.SetTenantLimits(ctx, "lim", tenant.Limits{MaxConcurrency: new(-1)}); code(err) != ojserr.InvalidRequest {
		t.Fatalf("a negative limit: %v", err)
	}
}

// A queue shared among its tenants gives an unscoped FETCH each tenant's
// share, round robin or by weight, however the jobs were queued; a queue
// that is not keeps its order.
func TestTenantFairFetch(t *testing.T) {
	t.Parallel()
	s, q, clk := newServices(t)
	ctx := context.Background()
	for _, queueName := range []string{"fair-rr", "fair-w", "plain"} {
		for _, tn := range []string{"ta", "tb"} {
			for i := range 10 {
				if _, err := s.Push(job.WithTenant(ctx, tn), fmt.Appendf(nil, `{"type":"t","args":[%d],"options":{"queue":%q}}`, i, queueName)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := q.Store().SetTenantFairness(ctx, "fair-rr", "round-robin", clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := q.Store().SetTenantFairness(ctx, "fair-w", "weighted", clk.Now()); err != nil {
		t.Fatal(err)
	}
	three := 3
	if _, err := q.SetTenantLimits(ctx, "ta", tenant.Limits{FairnessWeight: &three}); err != nil {
		t.Fatal(err)
	}
	byTenant := func(queueName string, count int) map[string]int {
		t.Helper()
		got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{queueName}, Count: count, WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, j := range got {
			m[j.Tenant]++
		}
		return m
	}
	if got := byTenant("fair-rr", 4); got["ta"] != 2 || got["tb"] != 2 {
		t.Fatalf("round robin, FETCH of 4: %v", got)
	}
	if got := byTenant("fair-w", 4); got["ta"] != 3 || got["tb"] != 1 {
		t.Fatalf("weighted 3:1, FETCH of 4: %v", got)
	}
	if got := byTenant("plain", 4); got["ta"] != 4 {
		t.Fatalf("a queue not shared: %v, want ta's four first", got)
	}
	// ta's share goes to tb once ta has nothing left.
	if left, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"fair-rr"}, Count: 20, WorkerID: "w", Tenant: "ta"}); len(left) != 8 {
		t.Fatalf("ta's own FETCH of the rest: %d", len(left))
	}
	if got := byTenant("fair-rr", 4); got["tb"] != 4 {
		t.Fatalf("work-conserving: %v, want tb's four", got)
	}
}

// A tenant's max_enqueue_rate refuses, with TENANT_LIMIT_EXCEEDED and
// the window's end as Retry-After, the PUSH or whole batch that would
// pass it in its window, other tenants going on; the next window counts
// afresh. max_queue_depth is refused as unsupported.
func TestTenantEnqueueRate(t *testing.T) {
	t.Parallel()
	s, q, clk := newServices(t)
	ctx := context.Background()
	l, err := tenant.ParseLimits([]byte(`{"max_enqueue_rate": {"limit": 3, "period": "PT1M"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetTenantLimits(ctx, "er", l); err != nil {
		t.Fatal(err)
	}
	as := job.WithTenant(ctx, "er")
	body := func(i int) []byte { return fmt.Appendf(nil, `{"type":"t","args":[%d],"options":{"queue":"te"}}`, i) }
	if _, err := s.PushBatch(as, [][]byte{body(0), body(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Push(as, body(2)); err != nil {
		t.Fatalf("the third of three: %v", err)
	}
	_, err = s.Push(as, body(3))
	oe := ojserr.As(err)
	if code(err) != ojserr.TenantLimitExceeded || oe.Status() != 429 || oe.Details["current"] != 3 || oe.Details["maximum"] != 3 ||
		oe.Details["limit"] != "max_enqueue_rate" || oe.Headers["Retry-After"] == "" {
		t.Fatalf("the fourth: %v %+v", err, oe)
	}
	if _, err := s.Push(job.WithTenant(ctx, "other"), body(4)); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	clk.Add(time.Minute)
	if _, err := s.PushBatch(as, [][]byte{body(5), body(6), body(7), body(8)}); code(err) != ojserr.TenantLimitExceeded {
		t.Fatalf("a batch of four past a limit of three: %v", err)
	}
	if _, err := s.PushBatch(as, [][]byte{body(5), body(6), body(7)}); err != nil {
		t.Fatalf("three in the next window: %v", err)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"te"}, Count: 20, WorkerID: "w", Tenant: "er"})
	if err != nil || len(got) != 6 {
		t.Fatalf("er's jobs: %d %v, want the 6 admitted", len(got), err)
	}
	for raw, want := range map[string]ojserr.Code{`{"max_queue_depth": 10}`: ojserr.Unsupported,
		`{"max_enqueue_rate": {"limit": 0}}`: ojserr.InvalidRequest, `{"fairness_weight": 0}`: ojserr.InvalidRequest} {
		if _, err := tenant.ParseLimits([]byte(raw)); code(err) != want {
			t.Errorf("%s: %v, want %s", raw, err, want)
		}
	}
}

// A tenant's priority_boost raises its jobs' priority as they are
// admitted, within the priority range; other tenants' stay as sent.
func TestTenantPriorityBoost(t *testing.T) {
	t.Parallel()
	s, q, _ := newServices(t)
	ctx := context.Background()
	l, err := tenant.ParseLimits([]byte(`{"priority_boost": 10}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetTenantLimits(ctx, "vip", l); err != nil {
		t.Fatal(err)
	}
	for tn, want := range map[string][2]int{"vip": {10, 100}, "std": {0, 95}} {
		for i, p := range []int{0, 95} {
			j, err := s.Push(job.WithTenant(ctx, tn), fmt.Appendf(nil, `{"type":"t","args":[],"options":{"queue":"tp","priority":%d}}`, p))
			if err != nil || j.Priority != want[i] {
				t.Fatalf("%s's job of priority %d: %d %v, want %d", tn, p, j.Priority, err, want[i])
			}
		}
	}
	if _, err := tenant.ParseLimits([]byte(`{"priority_boost": 201}`)); code(err) != ojserr.InvalidRequest {
		t.Fatalf("a boost past the range: %v", err)
	}
}
