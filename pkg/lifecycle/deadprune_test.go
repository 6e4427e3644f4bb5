package lifecycle_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// discard pushes a job to queue q and discards it at the clock's time.
func discard(t *testing.T, s *lifecycle.Service, q string) string {
	t.Helper()
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"test.dead","args":[],"options":{"queue":"`+q+`","retry":{"max_attempts":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{q}})
	if err != nil || len(got) != 1 || got[0].ID != j.ID {
		t.Fatalf("fetch %s: %v %v", j.ID, got, err)
	}
	if d, err := s.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "Boom", Message: "boom"}, 0); err != nil || d.State != job.Discarded {
		t.Fatalf("nack: %+v %v", d, err)
	}
	return j.ID
}

func deadIDs(t *testing.T, s *lifecycle.Service, q string) []string {
	t.Helper()
	jobs, _, err := s.DeadLetter(context.Background(), q, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	sort.Strings(ids)
	return ids
}

// The retention policy: jobs older than max_age go first, then the oldest
// beyond max_count over every queue; a run happens at most once per
// interval however many sweepers call at once; a job retried out of the
// dead letter queue is never pruned; the stats show the policy.
func TestDeadLetterRetentionPrunes(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	c := &clock{t: time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)}
	s := lifecycle.New(st, lifecycle.Config{Now: c.Now, Rand: func() float64 { return 0.5 },
		DeadRetention: lifecycle.Retention{MaxAge: 10 * 24 * time.Hour, MaxCount: 4, Interval: 5 * time.Minute}})
	ctx := context.Background()

	// Day 0: two old jobs in q1 (one of them retried later).
	old1 := discard(t, s, "prune-q1")
	oldRetried := discard(t, s, "prune-q1")
	c.Add(9 * 24 * time.Hour)
	// Day 9: six younger jobs over two queues, oldest first: y0..y5.
	var young []string
	for i := range 6 {
		c.Add(time.Minute)
		young = append(young, discard(t, s, fmt.Sprintf("prune-q%d", 1+i%2)))
	}
	if _, err := s.RetryDead(ctx, oldRetried, lifecycle.RetryOverride{}); err != nil {
		t.Fatal(err)
	}
	c.Add(2 * 24 * time.Hour) // day 11: old1 is past max_age, the young ones are not

	// Four sweepers at once: one run.
	var wg sync.WaitGroup
	results := make([]lifecycle.PruneResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i], errs[i] = s.PruneDead(ctx) }()
	}
	wg.Wait()
	ran := 0
	var res lifecycle.PruneResult
	for i, r := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if r.Ran {
			ran++
			res = r
		}
	}
	if ran != 1 {
		t.Fatalf("%d pruning runs at once, want 1", ran)
	}
	// old1 by age; then 6 young remain against max_count 4: y0 and y1 go.
	if res.ByAge != 1 || res.ByCount != 2 || res.Pruned != 3 || res.More || res.ByQueue["prune-q1"] != 2 || res.ByQueue["prune-q2"] != 1 {
		t.Fatalf("prune result %+v", res)
	}
	want1 := []string{young[2], young[4]}
	want2 := []string{young[3], young[5]}
	sort.Strings(want1)
	sort.Strings(want2)
	if got := deadIDs(t, s, "prune-q1"); fmt.Sprint(got) != fmt.Sprint(want1) {
		t.Errorf("prune-q1 keeps %v, want %v", got, want1)
	}
	if got := deadIDs(t, s, "prune-q2"); fmt.Sprint(got) != fmt.Sprint(want2) {
		t.Errorf("prune-q2 keeps %v, want %v", got, want2)
	}
	for _, id := range []string{old1, young[0], young[1]} {
		if _, err := s.Info(ctx, id); code(err) != ojserr.NotFound {
			t.Errorf("pruned job %s: %v", id, err)
		}
	}
	if j, err := s.Info(ctx, oldRetried); err != nil || j.State != job.Available {
		t.Errorf("the retried job was touched: %+v %v", j, err)
	}

	// Within the interval nothing runs; after it, a run finds nothing.
	if r, err := s.PruneDead(ctx); err != nil || r.Ran {
		t.Fatalf("second run within the interval: %+v %v", r, err)
	}
	stats, err := s.DeadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Retention.MaxAge != "P10D" || stats.Retention.MaxCount != 4 || stats.Retention.NextPruneAt == nil ||
		*stats.Retention.NextPruneAt != c.Now().Add(5*time.Minute).Format(time.RFC3339) {
		t.Errorf("stats retention %+v", stats.Retention)
	}
	c.Add(5 * time.Minute)
	if r, err := s.PruneDead(ctx); err != nil || !r.Ran || r.Pruned != 0 {
		t.Fatalf("run after the interval: %+v %v", r, err)
	}
}

func TestParseRetention(t *testing.T) {
	r, err := lifecycle.ParseRetention("", "", "")
	if err != nil || r.MaxAge != 180*24*time.Hour || r.MaxCount != 10000 || r.Interval != 5*time.Minute {
		t.Fatalf("defaults: %+v %v", r, err)
	}
	r, err = lifecycle.ParseRetention("P30D", "500", "1m")
	if err != nil || r.MaxAge != 30*24*time.Hour || r.MaxCount != 500 || r.Interval != time.Minute {
		t.Fatalf("set: %+v %v", r, err)
	}
	for _, bad := range [][3]string{{"forever", "", ""}, {"", "-1", ""}, {"", "x", ""}, {"", "", "-5s"}} {
		if _, err := lifecycle.ParseRetention(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

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

// deleteRecorder keeps the item each DeleteItem removed, as the stream
// function would see it (its old image).
type deleteRecorder struct {
	*dynamodb.Client
	mu      sync.Mutex
	removed []map[string]types.AttributeValue
}

func (r *deleteRecorder) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c := *in
	c.ReturnValues = types.ReturnValueAllOld
	out, err := r.Client.DeleteItem(ctx, &c, o...)
	if err == nil && len(out.Attributes) > 0 {
		r.mu.Lock()
		r.removed = append(r.removed, out.Attributes)
		r.mu.Unlock()
	}
	return out, err
}

// An operator deleting a dead letter job the pruner has marked and not yet
// removed deletes it unmarked, so the stream function reports
// dead_letter.deleted (the mark in the deleted item made it
// dead_letter.pruned); the pruner's delete then finds nothing.
func TestAnOperatorDeleteRacingThePrunerStaysADelete(t *testing.T) {
	t.Parallel()
	base, _ := testenv.Table(t)
	table := base.Table()
	rec := &deleteRecorder{Client: testenv.DynamoDB()}
	st := store.New(rec, table)
	c := &clock{t: time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)}
	s := lifecycle.New(st, lifecycle.Config{Now: c.Now})
	ctx := context.Background()
	id := discard(t, s, "prune-race")
	refs, err := st.OldestDead(ctx, "prune-race", nil, 10)
	if err != nil || len(refs) != 1 {
		t.Fatalf("refs %v %v", refs, err)
	}
	// The pruner's mark, its delete not yet made.
	if _, err := testenv.DynamoDB().UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table,
		Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "JOB#" + id}, "sk": &types.AttributeValueMemberS{Value: "JOB"}},
		UpdateExpression: aws.String("SET pruned_at = :m"), ExpressionAttributeValues: map[string]types.AttributeValue{":m": &types.AttributeValueMemberN{Value: "1"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDead(ctx, id); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	removed := rec.removed
	rec.mu.Unlock()
	if len(removed) != 1 {
		t.Fatalf("%d deletes", len(removed))
	}
	if _, marked := removed[0]["pruned_at"]; marked {
		t.Fatal("the operator's delete removed the pruner's mark with the job: the stream reports a prune")
	}
	if ok, err := st.PruneDead(ctx, refs[0], c.Now()); ok || err != nil {
		t.Fatalf("the pruner's delete after the operator's: %v %v", ok, err)
	}
	if err := s.DeleteDead(ctx, id); code(err) != "not_found" {
		t.Fatalf("delete again: %v", err)
	}
}
