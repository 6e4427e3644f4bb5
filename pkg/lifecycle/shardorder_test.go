package lifecycle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// FETCH hands out a queue spread over ready shards in strict order
// (priority, then FIFO), and jobs that fall due (scheduled ones, promoted
// by the FETCH itself from the due shards) take their place by priority.
func TestFetchOrderHoldsAcrossShards(t *testing.T) {
	t.Parallel()
	if topology.JobTable.Shards.Ready < 2 || topology.JobTable.Shards.Due < 2 {
		t.Fatalf("queue partitions not sharded: %+v", topology.JobTable.Shards)
	}
	s, c := newService(t)
	ctx := context.Background()
	type pushed struct {
		id       string
		priority int
		seq      int
	}
	var want []pushed
	for i := range 40 {
		p := []int{-3, 0, 2}[rand.IntN(3)]
		j, err := s.Push(ctx, []byte(fmt.Sprintf(`{"type":"o.job","args":[%d],"options":{"queue":"sharded","priority":%d}}`, i, p)))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, pushed{j.ID, p, i})
		c.Add(time.Millisecond)
	}
	var later []string
	for i := range 6 {
		at := c.Now().Add(2 * time.Second).Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)
		j, err := s.Push(ctx, []byte(fmt.Sprintf(`{"type":"o.job","args":["later-%d"],"options":{"queue":"sharded","priority":5,"scheduled_at":%q}}`, i, at)))
		if err != nil || j.State != job.Scheduled {
			t.Fatalf("schedule: %+v %v", j, err)
		}
		later = append(later, j.ID)
	}
	slices.SortStableFunc(want, func(a, b pushed) int {
		if a.priority != b.priority {
			return b.priority - a.priority
		}
		return a.seq - b.seq
	})
	var order []string
	fetch := func(n int) {
		t.Helper()
		for range n {
			got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"sharded"}, Count: 1, WorkerID: "w"})
			if err != nil || len(got) != 1 {
				t.Fatalf("fetch: %d jobs, %v", len(got), err)
			}
			order = append(order, got[0].ID)
		}
	}
	fetch(10)
	c.Add(3 * time.Second) // the scheduled jobs fall due: priority 5 goes first
	fetch(36)
	var expect []string
	for _, p := range want[:10] {
		expect = append(expect, p.id)
	}
	expect = append(expect, later...)
	for _, p := range want[10:] {
		expect = append(expect, p.id)
	}
	if !slices.Equal(order, expect) {
		for i := range order {
			if order[i] != expect[i] {
				t.Fatalf("fetch %d handed out %s, want %s", i, order[i], expect[i])
			}
		}
	}
	if got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"sharded"}, Count: 10}); len(got) != 0 {
		t.Fatalf("%d jobs left after every job was fetched", len(got))
	}
}
