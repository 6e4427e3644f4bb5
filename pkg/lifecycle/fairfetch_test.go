package lifecycle_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
)

// A FETCH of a pool shares its count over the pool's queues by weight
// (smooth weighted round-robin, so that FETCHes of one job take turns), a
// queue short of its share leaves the rest to the others, and a plain
// FETCH of the same queues still drains them in order.
func TestFairFetch(t *testing.T) {
	t.Parallel()
	s, q, _ := newServices(t)
	ctx := context.Background()
	for _, name := range []string{"fair-a", "fair-b"} {
		for i := range 12 {
			if _, err := s.Push(ctx, fmt.Appendf(nil, `{"type":"fair.job","args":[%d],"options":{"queue":%q}}`, i, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	fetch := func(p *queue.Pool, count int) map[string]int {
		t.Helper()
		r := lifecycle.FetchRequest{Queues: []string{"fair-a", "fair-b"}, Count: count, WorkerID: "w"}
		if p != nil {
			r.Shares = q.Shares(p, count)
		}
		jobs, err := s.Fetch(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, j := range jobs {
			got[j.Queue]++
		}
		return got
	}
	weighted, err := queue.ParsePool("fair", []byte(`{"name":"fair","strategy":"weighted","queues":{"fair-a":{"weight":3},"fair-b":{"weight":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := fetch(weighted, 4); got["fair-a"] != 3 || got["fair-b"] != 1 {
		t.Fatalf("weighted 3:1, FETCH of 4: %v", got)
	}
	rr := &queue.Pool{Name: "rr", Queues: []string{"fair-a", "fair-b"}}
	if err := queue.ValidatePool(rr); err != nil || rr.Strategy != queue.StrategyRoundRobin {
		t.Fatalf("default strategy %q, %v", rr.Strategy, err)
	}
	turns := map[string]int{}
	for range 4 {
		for k, v := range fetch(rr, 1) {
			turns[k] += v
		}
	}
	if turns["fair-a"] != 2 || turns["fair-b"] != 2 {
		t.Fatalf("round-robin, four FETCHes of one: %v", turns)
	}
	// fair-a has 7 left, fair-b 9: a plain FETCH drains fair-a first.
	if got := fetch(nil, 8); got["fair-a"] != 7 || got["fair-b"] != 1 {
		t.Fatalf("a plain FETCH of 8: %v, want fair-a's 7 then 1 of fair-b", got)
	}
	// fair-a is empty: a pool's FETCH takes fair-b's jobs for its share too.
	if got := fetch(weighted, 4); got["fair-b"] != 4 {
		t.Fatalf("weighted with fair-a empty: %v", got)
	}
	for body, status := range map[string]int{
		`{"queues":[]}`: 400, `{"queues":["a","a"]}`: 400, `{"queues":["a"],"strategy":"least-loaded"}`: 422,
		`{"queues":["a","b"],"strategy":"weighted","weights":{"a":1}}`: 400, `{"queues":{"a":{"weight":0}},"strategy":"weighted"}`: 400,
		`{"name":"other","queues":["a"]}`: 400, `{"queues":"a"}`: 400, `[]`: 400,
	} {
		if _, err := queue.ParsePool("p", []byte(body)); ojserr.As(err).Status() != status {
			t.Errorf("pool %s: %v, want %d", body, err, status)
		}
	}
}
