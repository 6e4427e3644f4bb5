package queue_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// withoutBatchGet is a client without BatchGetItem: FetchState reads each
// item on its own.
type withoutBatchGet struct{ store.DynamoAPI }

// registryShard is the shard of the queue registry that queue hashes to
// (store.RegistryPK: QUEUES in shard 0, QUEUES#<n> in the others).
func registryShard(t *testing.T, queue string) int {
	t.Helper()
	_, n, ok := strings.Cut(store.RegistryPK(queue), "#")
	if !ok {
		return 0
	}
	i, err := strconv.Atoi(n)
	if err != nil {
		t.Fatalf("registry partition of %s: %v", queue, err)
	}
	return i
}

// The queue registry is spread over its shards by queue name; the list,
// pause state and rate limiter of each queue are found in its shard.
func TestTheQueueRegistryIsSpread(t *testing.T) {
	t.Parallel()
	k, _ := testenv.Table(t)
	table := k.Table()
	s := queue.NewStore(k.DB(), table)
	ctx := context.Background()
	var names []string
	for i := range 16 {
		names = append(names, fmt.Sprintf("queue-%02d", i))
	}
	for _, q := range names {
		if err := s.EnsureQueue(ctx, q, t0); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Spread(t, "registry", testenv.PartitionSizes(t, table, "", "pk", "QUEUES", topology.JobTable.Shards.Registry), names, func(k string) int { return registryShard(t, k) })
	got, err := s.Queues(ctx)
	if err != nil || strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("queues %v %v", got, err)
	}
	for _, q := range names {
		if _, err := s.SetQueuePaused(ctx, q, q == "queue-07", t0); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range names {
		p, _, err := s.QueueFetchState(ctx, q)
		if err != nil || p != (q == "queue-07") {
			t.Fatalf("queue %s paused=%v %v", q, p, err)
		}
	}
	infos, _ := s.QueueInfos(ctx)
	if len(infos) != 16 {
		t.Fatalf("%d queues listed after pausing, want 16 (an update wrote outside its shard)", len(infos))
	}
	// FETCH's one read of its queues and worker finds each in its shard,
	// through BatchGetItem and through a client without it alike.
	if _, err := s.WorkerBeat(ctx, queue.WorkerInfo{ID: "w-quiet", State: "quiet"}, t0); err != nil {
		t.Fatal(err)
	}
	plain := queue.NewStore(withoutBatchGet{DynamoAPI: testenv.DynamoDB()}, table)
	for _, st := range []*queue.Store{s, plain} {
		fs, err := st.FetchState(ctx, append(names, "never-registered"), "w-quiet")
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range names {
			if fs.Queues[q].Paused != (q == "queue-07") {
				t.Fatalf("fetch state of %s: %+v", q, fs.Queues[q])
			}
		}
		if fs.Queues["never-registered"].Paused || fs.Worker == nil || fs.Worker.State != "quiet" {
			t.Fatalf("fetch state: %+v, worker %+v", fs.Queues["never-registered"], fs.Worker)
		}
		if fs, err := st.FetchState(ctx, names[:1], "w-unknown"); err != nil || fs.Worker != nil {
			t.Fatalf("an unknown worker: %+v %v", fs.Worker, err)
		}
	}
}

// The rate limiter holds a queue for n / rate even when that is under a
// millisecond: held in milliseconds, a rate above 1,000 a second rounded
// the hold to nothing and every FETCH of the same millisecond passed.
func TestRateLimitAboveAThousandASecondHolds(t *testing.T) {
	t.Parallel()
	k, _ := testenv.Table(t)
	s := queue.NewStore(k.DB(), k.Table())
	ctx := context.Background()
	take := func(at time.Time) bool {
		t.Helper()
		ok, err := s.TakeRateTokens(ctx, "fast", 1, 4000, at) // 250 µs a job
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !take(t0) {
		t.Fatal("first reservation refused")
	}
	if take(t0.Add(100 * time.Microsecond)) {
		t.Fatal("a second job 100 µs later passed a 4,000/s limit")
	}
	if !take(t0.Add(250 * time.Microsecond)) {
		t.Fatal("refused after the hold")
	}
	// 200 reservations, tried every 100 µs, at 4,000/s: one per 250 µs.
	start := t0.Add(time.Second)
	var last time.Time
	for at, n := start, 0; n < 200; at = at.Add(100 * time.Microsecond) {
		if take(at) {
			n, last = n+1, at
		}
	}
	if d := last.Sub(start); d < 199*250*time.Microsecond {
		t.Fatalf("200 jobs passed within %v at 4,000/s", d)
	}
}
