package lifecycle_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// Concurrent FETCHes of one queue, racing for the same heads (and so
// taking the path that re-orders the rest of a FETCH's candidates after a
// lost claim), hand out every job exactly once, and a FETCH that meets no
// contention still hands them out in strict order.
func TestConcurrentFetchesClaimEachJobOnce(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	const n = 120
	for i := 0; i < n; i++ {
		if _, err := s.Push(ctx, []byte(fmt.Sprintf(`{"type":"race.job","args":[%d],"options":{"queue":"race"}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for empty := 0; empty < 3; {
				jobs, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"race"}, Count: 10, WorkerID: fmt.Sprint("w", w)})
				if err != nil {
					t.Error(err)
					return
				}
				if len(jobs) == 0 {
					empty++
				}
				mu.Lock()
				for _, j := range jobs {
					seen[j.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d of %d jobs handed out", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("job %s handed out %d times", id, c)
		}
	}
	// Alone, a FETCH takes the oldest first.
	var first []string
	for i := 0; i < 5; i++ {
		j, err := s.Push(ctx, []byte(fmt.Sprintf(`{"type":"race.job","args":[%d],"options":{"queue":"race2"}}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, j.ID)
	}
	jobs, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"race2"}, Count: 3})
	if err != nil || len(jobs) != 3 || jobs[0].ID != first[0] || jobs[1].ID != first[1] || jobs[2].ID != first[2] {
		t.Fatalf("uncontended FETCH order: %v %v", jobs, err)
	}
}
