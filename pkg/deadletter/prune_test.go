package deadletter_test

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
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// The retention policy: jobs older than max_age go first, then the oldest
// beyond max_count over every queue; a run happens at most once per
// interval however many sweepers call at once; a job retried out of the
// dead letter queue is never pruned; the stats show the policy.
func TestDeadLetterRetentionPrunes(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	c := &clock{t: time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)}
	s, _, d := newServices(st, c, deadletter.Config{Retention: deadletter.Retention{MaxAge: 10 * 24 * time.Hour, MaxCount: 4, Interval: 5 * time.Minute}})
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
	if _, err := d.Retry(ctx, oldRetried, deadletter.RetryOverride{}); err != nil {
		t.Fatal(err)
	}
	c.Add(2 * 24 * time.Hour) // day 11: old1 is past max_age, the young ones are not

	// Four sweepers at once: one run.
	var wg sync.WaitGroup
	results := make([]deadletter.PruneResult, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i], errs[i] = d.Prune(ctx) }()
	}
	wg.Wait()
	ran := 0
	var res deadletter.PruneResult
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
	if got := deadIDs(t, d, "prune-q1"); fmt.Sprint(got) != fmt.Sprint(want1) {
		t.Errorf("prune-q1 keeps %v, want %v", got, want1)
	}
	if got := deadIDs(t, d, "prune-q2"); fmt.Sprint(got) != fmt.Sprint(want2) {
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
	if r, err := d.Prune(ctx); err != nil || r.Ran {
		t.Fatalf("second run within the interval: %+v %v", r, err)
	}
	stats, err := d.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Retention.MaxAge != "P10D" || stats.Retention.MaxCount != 4 || stats.Retention.NextPruneAt == nil ||
		*stats.Retention.NextPruneAt != c.Now().Add(5*time.Minute).Format(time.RFC3339) {
		t.Errorf("stats retention %+v", stats.Retention)
	}
	c.Add(5 * time.Minute)
	if r, err := d.Prune(ctx); err != nil || !r.Ran || r.Pruned != 0 {
		t.Fatalf("run after the interval: %+v %v", r, err)
	}
}

func TestParseRetention(t *testing.T) {
	r, err := deadletter.ParseRetention("", "", "")
	if err != nil || r.MaxAge != 180*24*time.Hour || r.MaxCount != 10000 || r.Interval != 5*time.Minute {
		t.Fatalf("defaults: %+v %v", r, err)
	}
	r, err = deadletter.ParseRetention("P30D", "500", "1m")
	if err != nil || r.MaxAge != 30*24*time.Hour || r.MaxCount != 500 || r.Interval != time.Minute {
		t.Fatalf("set: %+v %v", r, err)
	}
	for _, bad := range [][3]string{{"forever", "", ""}, {"", "-1", ""}, {"", "x", ""}, {"", "", "-5s"}} {
		if _, err := deadletter.ParseRetention(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("%q accepted", bad)
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
	q := queue.NewService(st, queue.Config{Now: c.Now})
	s := lifecycle.New(st, lifecycle.Config{Now: c.Now, Queues: q})
	d := deadletter.New(st, s, q, deadletter.Config{})
	ctx := context.Background()
	id := discard(t, s, "prune-race")
	refs, err := d.OldestRefs(ctx, "prune-race", nil, 10)
	if err != nil || len(refs) != 1 {
		t.Fatalf("refs %v %v", refs, err)
	}
	// The pruner's mark, its delete not yet made.
	if _, err := testenv.DynamoDB().UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table,
		Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "JOB#" + id}, "sk": &types.AttributeValueMemberS{Value: "JOB"}},
		UpdateExpression: aws.String("SET pruned_at = :m"), ExpressionAttributeValues: map[string]types.AttributeValue{":m": &types.AttributeValueMemberN{Value: "1"}}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, id); err != nil {
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
	if ok, err := d.PruneRef(ctx, refs[0], c.Now()); ok || err != nil {
		t.Fatalf("the pruner's delete after the operator's: %v %v", ok, err)
	}
	if err := d.Delete(ctx, id); code(err) != "not_found" {
		t.Fatalf("delete again: %v", err)
	}
}
