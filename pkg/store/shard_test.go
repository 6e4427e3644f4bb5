package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// shardIn is the shard of n a key hashes to.
func shardIn(n int) func(string) int { return func(k string) int { return store.ShardOf(k, n) } }

// idsOf lists the ids of jobs, those of push-mode jobs only if push.
func idsOf(jobs []*job.Job, pushOnly bool) []string {
	var out []string
	for _, j := range jobs {
		if j.Push || !pushOnly {
			out = append(out, j.ID)
		}
	}
	return out
}

// TestShardOfSpreadsKeys: the hash spreads a fixed set of keys over every
// shard, evenly enough that none holds twice its share.
func TestShardOfSpreadsKeys(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		sizes := make([]int, n)
		for i := range 400 {
			sizes[store.ShardOf(fmt.Sprintf("019a6b2c-%04x-7000-8000-000000000000", i), n)]++
		}
		for _, c := range sizes {
			if c == 0 || c > 2*400/n {
				t.Fatalf("%d shards: sizes %v", n, sizes)
			}
		}
	}
	if store.ShardOf("anything", 1) != 0 || store.ShardOf("anything", 0) != 0 {
		t.Fatal("one shard or none must be shard 0")
	}
}

// hotQueue creates n available jobs on one queue with mixed priorities,
// created in random order at distinct times (every third push-mode), and
// returns them in fetch order: priority first, then FIFO, then id.
func hotQueue(t *testing.T, s *store.Store, queue string, n int) []*job.Job {
	t.Helper()
	jobs := make([]*job.Job, n)
	for i := range jobs {
		body := fmt.Sprintf(`{"type":"a.b","args":[%d],"queue":%q,"priority":%d}`, i, queue, []int{-1, 0, 5}[rand.IntN(3)])
		jobs[i] = newJob(t, body, t0.Add(time.Duration(rand.IntN(1000))*time.Millisecond))
		jobs[i].Push = i%3 == 0
	}
	for _, j := range jobs {
		if err := s.Create(context.Background(), []*job.Job{j}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	order := slices.Clone(jobs)
	sort.SliceStable(order, func(a, b int) bool {
		x, y := order[a], order[b]
		if x.Priority != y.Priority {
			return x.Priority > y.Priority
		}
		if !x.EnqueuedAt.Equal(*y.EnqueuedAt) {
			return x.EnqueuedAt.Before(*y.EnqueuedAt)
		}
		return x.ID < y.ID
	})
	return order
}

func jobIDs(jobs []*job.Job) string {
	var s []string
	for _, j := range jobs {
		s = append(s, j.ID[len(j.ID)-6:])
	}
	return strings.Join(s, " ")
}

func itemIDs(items []store.Item) string {
	var jobs []*job.Job
	for _, it := range items {
		jobs = append(jobs, it.Job)
	}
	return jobIDs(jobs)
}

// One busy queue's ready and due entries are spread over their shards, and
// fetch order (priority, then FIFO) holds across them: in Ready's merge,
// in the Admin API's paged listing and in the counts.
func TestAQueueIsSpreadOverShardsAndKeepsFetchOrder(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	table := s.Table()
	ctx := context.Background()
	sh := topology.JobTable.Shards
	if sh.Ready < 2 || sh.Due < 2 {
		t.Fatalf("the queue partitions are not sharded: %+v", sh)
	}
	all := hotQueue(t, s, "hot", 60)
	// Push-mode jobs are not in the ready index (SQS holds their place in
	// line), only in the due index (their redelivery check).
	var order []*job.Job
	for _, j := range all {
		if !j.Push {
			order = append(order, j)
		}
	}
	testenv.Spread(t, "ready", testenv.PartitionSizes(t, table, topology.IndexReady, "ready_pk", "avail#hot", sh.Ready), idsOf(order, false), shardIn(sh.Ready))
	testenv.Spread(t, "due", testenv.PartitionSizes(t, table, topology.IndexDue, "due_pk", "due#hot", sh.Due), idsOf(all, true), shardIn(sh.Due))

	for _, limit := range []int{1, 7, 40, 100} {
		items, err := s.ReadyOf(ctx, "", "hot", "", limit)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := itemIDs(items), jobIDs(order[:min(limit, len(order))]); got != want {
			t.Fatalf("Ready(%d) order\n got  %s\n want %s", limit, got, want)
		}
	}

	// The Admin API's listing pages through every ready shard in fetch
	// order, then through the push-mode jobs by due time.
	var paged []store.Item
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 30 {
			t.Fatal("listing does not end")
		}
		p, err := s.ListQueue(ctx, store.ListAvailable, "hot", nil, 7, cursor)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, p.Items...)
		if cursor = p.Cursor; cursor == "" {
			break
		}
	}
	if len(paged) != 60 {
		t.Fatalf("paged listing has %d jobs, want 60", len(paged))
	}
	if got, want := itemIDs(paged[:40]), jobIDs(order); got != want {
		t.Fatalf("paged listing, pull-mode part\n got  %s\n want %s", got, want)
	}
	pushSeen := map[string]bool{}
	for i, it := range paged[40:] {
		if !it.Job.Push || pushSeen[it.Job.ID] || (i > 0 && it.DueAt.Before(paged[40+i-1].DueAt)) {
			t.Fatalf("paged listing, push-mode part: entry %d (%s) not push-mode, repeated or out of due order", i, it.Job.ID)
		}
		pushSeen[it.Job.ID] = true
	}
	// Filtered: the waiting listing of the due shards holds the push-mode
	// jobs' redelivery checks, in due order, each once.
	var waiting []store.Item
	cursor = ""
	for pages := 0; ; pages++ {
		if pages > 30 {
			t.Fatal("listing does not end")
		}
		p, err := s.ListQueue(ctx, store.ListWaiting, "hot", []job.State{job.Available}, 3, cursor)
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, p.Items...)
		if cursor = p.Cursor; cursor == "" {
			break
		}
	}
	if len(waiting) != 20 {
		t.Fatalf("waiting listing has %d entries, want 20", len(waiting))
	}
	seen := map[string]bool{}
	for i, it := range waiting {
		if seen[it.Job.ID] || !it.Job.Push {
			t.Fatalf("waiting listing: entry %d (%s) repeated or not push-mode", i, it.Job.ID)
		}
		seen[it.Job.ID] = true
		if i > 0 && it.DueAt.Before(waiting[i-1].DueAt) {
			t.Fatalf("waiting listing out of due order at %d", i)
		}
	}
	if _, err := s.ListQueue(ctx, store.ListAvailable, "hot", nil, 7, "bm90LWEtY3Vyc29y"); err == nil {
		t.Fatal("a cursor the store did not make must be refused")
	}

	c, err := s.CountQueue(ctx, "hot")
	if err != nil || c.Available != 60 || c.Active != 0 {
		t.Fatalf("counts %+v %v", c, err)
	}
	m, capped, err := s.CountStates(ctx, store.ListAvailable, "hot", 1000)
	if err != nil || capped || m[job.Available] != 40 {
		t.Fatalf("count states of ready %v capped=%v %v; want the 40 pull-mode jobs", m, capped, err)
	}
	m, capped, err = s.CountStates(ctx, store.ListWaiting, "hot", 1000)
	if err != nil || capped || m[job.Available] != 20 {
		t.Fatalf("count states of due %v capped=%v %v; want the 20 push-mode jobs", m, capped, err)
	}
	if _, capped, _ := s.CountStates(ctx, store.ListAvailable, "hot", 10); !capped {
		t.Fatal("a count past its bound must say so")
	}
}

// Due reads every due shard and answers the earliest entries first.
func TestDueMergesShardsInDueOrder(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	table := s.Table()
	ctx := context.Background()
	var jobs []*job.Job
	for i, k := range rand.Perm(24) {
		at := t0.Add(time.Duration(1+k) * time.Second).Format(time.RFC3339Nano)
		jobs = append(jobs, newJob(t, fmt.Sprintf(`{"type":"a.b","args":[%d],"queue":"later","scheduled_at":%q}`, i, at), t0))
	}
	if err := s.Create(ctx, jobs, time.Minute); err != nil {
		t.Fatal(err)
	}
	testenv.Spread(t, "due", testenv.PartitionSizes(t, table, topology.IndexDue, "due_pk", "due#later", topology.JobTable.Shards.Due), idsOf(jobs, false), shardIn(topology.JobTable.Shards.Due))
	slices.SortStableFunc(jobs, func(a, b *job.Job) int { return a.ScheduledAt.Compare(*b.ScheduledAt) })
	due, err := s.Due(ctx, "later", t0.Add(time.Hour), 5)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := itemIDs(due), jobIDs(jobs[:5]); got != want {
		t.Fatalf("Due: got %s, want the earliest %s", got, want)
	}
	cut := *jobs[10].ScheduledAt
	due, _ = s.Due(ctx, "later", cut, 100)
	if got, want := itemIDs(due), jobIDs(jobs[:11]); got != want {
		t.Fatalf("Due at %s: got %s, want %s", cut, got, want)
	}
}

// countingDB counts the queries a store makes.
type countingDB struct {
	store.DynamoAPI
	queries atomic.Int64
}

func (c *countingDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.queries.Add(1)
	return c.DynamoAPI.Query(ctx, in, o...)
}

// FETCH's read of the due shards (DueNow) reads a shard only when its
// next entry falls due, when this process listed something there, or
// once a second for what other processes wrote.
func TestDueNowReadsAShardOnlyWhenSomethingMayBeDue(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	table := st.Table()
	ctx := context.Background()
	db := &countingDB{DynamoAPI: testenv.DynamoDB()}
	mine, other := store.New(db, table), store.New(testenv.DynamoDB(), table)
	n := topology.JobTable.Shards.Due
	reads := func(now time.Time) ([]store.Item, int64) {
		t.Helper()
		before := db.queries.Load()
		items, err := mine.DueNow(ctx, "q", now, 25)
		if err != nil {
			t.Fatal(err)
		}
		return items, db.queries.Load() - before
	}
	if items, q := reads(t0); len(items) != 0 || q != int64(n) {
		t.Fatalf("first read: %d items, %d queries; want 0 and one per shard (%d)", len(items), q, n)
	}
	if _, q := reads(t0.Add(500 * time.Millisecond)); q != 0 {
		t.Fatalf("an idle queue read again within a second: %d queries", q)
	}
	// Another process lists a job due at t0+600ms: this one sees it once
	// its second is up.
	theirs := newJob(t, `{"type":"a.b","args":[],"queue":"q","scheduled_at":"2026-11-21T10:00:00.6Z"}`, t0)
	if err := other.Create(ctx, []*job.Job{theirs}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if items, q := reads(t0.Add(700 * time.Millisecond)); len(items) != 0 || q != 0 {
		t.Fatalf("within the second: %d items, %d queries", len(items), q)
	}
	items, q := reads(t0.Add(time.Second))
	if len(items) != 1 || items[0].Job.ID != theirs.ID || q != int64(n) {
		t.Fatalf("after the second: %d items, %d queries", len(items), q)
	}
	// Every entry was read and handed to the caller to move: no shard
	// holds anything else falling due, so none is read again at once.
	if items, q := reads(t0.Add(1100 * time.Millisecond)); len(items) != 0 || q != 0 {
		t.Fatalf("after a complete read: %d items, %d queries; want none", len(items), q)
	}
	// This process lists a job due at t0+1.3s: read as soon as it is due,
	// though the shard was read 200 ms before.
	mineJob := newJob(t, `{"type":"a.b","args":[],"queue":"q","scheduled_at":"2026-11-21T10:00:01.3Z"}`, t0)
	if err := mine.Create(ctx, []*job.Job{mineJob}, time.Minute); err != nil {
		t.Fatal(err)
	}
	items, _ = reads(t0.Add(1300 * time.Millisecond))
	found := false
	for _, it := range items {
		found = found || it.Job.ID == mineJob.ID
	}
	if !found {
		t.Fatalf("a job this process scheduled was not read when due: %s", itemIDs(items))
	}
}

// Entries with equal sort values (jobs due at the same millisecond) are
// each listed once when the Admin API pages across the due shards.
func TestListingPagesThroughTiesAcrossShards(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	want := map[string]bool{}
	var jobs []*job.Job
	for i := range 30 {
		j := newJob(t, fmt.Sprintf(`{"type":"a.b","args":[%d],"queue":"ties","scheduled_at":"2026-11-21T11:00:00Z"}`, i), t0)
		jobs = append(jobs, j)
		want[j.ID] = true
	}
	if err := s.Create(ctx, jobs, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 4, 7} {
		seen := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("listing does not end")
			}
			p, err := s.ListQueue(ctx, store.ListWaiting, "ties", nil, limit, cursor)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Items {
				if seen[it.Job.ID] {
					t.Fatalf("limit %d: %s listed twice", limit, it.Job.ID)
				}
				seen[it.Job.ID] = true
			}
			if cursor = p.Cursor; cursor == "" {
				break
			}
		}
		if len(seen) != len(want) {
			t.Fatalf("limit %d: %d of %d jobs listed", limit, len(seen), len(want))
		}
	}
}

// TestCompletionsSpreadOverShards: a queue's completions are listed in the
// due shards their jobs leave (no one key takes every completion of a busy
// queue), and CountCompleted counts every one once.
func TestCompletionsSpreadOverShards(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	const n = 24
	var jobs []*job.Job
	for i := range n {
		j := newJob(t, `{"type":"a.b","args":[],"queue":"donequeue"}`, t0.Add(time.Duration(i)*time.Millisecond))
		j.Push = i%3 == 0
		jobs = append(jobs, j)
	}
	if err := s.Create(ctx, jobs, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if _, err := s.Apply(ctx, store.Claim(j.ID, store.ClaimOpts{Queue: j.Queue, Now: t0, LeaseUntil: t0.Add(time.Minute)})); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, store.Complete(j.ID, nil, 1, t0.Add(time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.CountCompleted(ctx, "donequeue", t0)
	if err != nil || got != n {
		t.Fatalf("CountCompleted = %d, %v; want %d", got, err, n)
	}
	if later, _ := s.CountCompleted(ctx, "donequeue", t0.Add(2*time.Second)); later != 0 {
		t.Fatalf("%d completions after the last one", later)
	}
	keys := map[string]int{}
	out, err := testenv.DynamoDB().Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.Table()), IndexName: aws.String(topology.IndexDone)})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range out.Items {
		keys[it["done_pk"].(*types.AttributeValueMemberS).Value]++
	}
	if len(keys) < 3 {
		t.Fatalf("%d completions in %d partitions (%v), want them spread over the due shards", n, len(keys), keys)
	}
	for k, c := range keys {
		if c > n/2 {
			t.Errorf("partition %s holds %d of %d completions", k, c, n)
		}
	}
}
