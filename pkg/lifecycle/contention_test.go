package lifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

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

// A FETCH of a queue on which this process lost a claim moments ago starts
// on a random candidate of the first priority instead of the head (racing
// workers that read the same heads part ways instead of all claiming the
// first), never takes a job while one of higher priority is untried, and
// goes back to strict order once the contention is older than its window.
func TestAContendedFetchStartsOnARandomCandidateOfTheFirstPriority(t *testing.T) {
	t.Parallel()
	// The random draw picks the last of the candidates it spreads over.
	s, c := newServiceDrawing(t, 0.99)
	ctx := context.Background()
	push := func(q string, priority int, name string) string {
		t.Helper()
		j, err := s.Push(ctx, []byte(fmt.Sprintf(`{"type":"spread.job","args":[%q],"options":{"queue":%q,"priority":%d}}`, name, q, priority)))
		if err != nil {
			t.Fatal(err)
		}
		c.Add(time.Millisecond)
		return j.ID
	}
	fetch := func(q string, n int) []string {
		t.Helper()
		jobs, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{q}, Count: n, WorkerID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		return ids
	}
	var high, low []string
	for i := range 3 {
		high = append(high, push("spread", 5, fmt.Sprint("high-", i)))
	}
	for i := range 3 {
		low = append(low, push("spread", 0, fmt.Sprint("low-", i)))
	}
	s.MarkContended("spread")
	if got := fetch("spread", 1); fmt.Sprint(got) != fmt.Sprint(high[2:3]) {
		t.Fatalf("contended FETCH of 1: %v, want the last of the first priority %v (head %s)", got, high[2], high[0])
	}
	// Three more: the two high-priority jobs left, then the oldest low one.
	got := fetch("spread", 3)
	slices.Sort(got)
	want := []string{high[0], high[1], low[0]}
	slices.Sort(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("contended FETCH of 3: %v, want %v", got, want)
	}
	// Another queue of the same process is not contended: strict order.
	first := push("calm", 0, "a")
	push("calm", 0, "b")
	if got := fetch("calm", 1); fmt.Sprint(got) != fmt.Sprint([]string{first}) {
		t.Fatalf("uncontended FETCH: %v, want the head %s", got, first)
	}
	// Past the window, strict order again.
	c.Add(3 * time.Second)
	if got := fetch("spread", 1); fmt.Sprint(got) != fmt.Sprint(low[1:2]) {
		t.Fatalf("FETCH after the contention window: %v, want the head %s", got, low[1])
	}
}
