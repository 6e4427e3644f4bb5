package lifecycle_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/internal/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
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

// raced lets another worker's FETCH claim the head of the queue just
// before this process's first claim lands: that claim is lost.
type raced struct {
	*dynamodb.Client
	other *lifecycle.Service
	queue string
	once  sync.Once
}

func (c *raced) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if sk, _ := in.Key["sk"].(*types.AttributeValueMemberS); sk != nil && sk.Value == "JOB" {
		var err error
		c.once.Do(func() {
			_, err = c.other.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{c.queue}, Count: 1, WorkerID: "other"})
		})
		if err != nil {
			return nil, err
		}
	}
	return c.Client.UpdateItem(ctx, in, o...)
}

// A process whose FETCH lost a claim starts its next FETCHes of that queue
// (for a second) from a random candidate rather than the head every other
// worker races for, so they stop losing their first claims to each other;
// after that second, or without contention, it takes the head again.
func TestAFetchAfterALostClaimStartsAwayFromTheHead(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	cfg := lifecycle.Config{Now: c.Now, Rand: func() float64 { return 0.5 }}
	other := lifecycle.New(st, cfg)
	db := &raced{Client: testenv.DynamoDB(), other: other, queue: "hot"}
	s := lifecycle.New(store.New(db, st.Table()), cfg)
	ctx := context.Background()
	var ids []string
	for i := range 20 {
		j, err := other.Push(ctx, []byte(fmt.Sprintf(`{"type":"hot.job","args":[%d],"options":{"queue":"hot"}}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
		c.Add(time.Millisecond)
	}
	// The other worker takes job 0 under this FETCH's claim of it; this
	// FETCH goes on to the next candidates.
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"hot"}, Count: 1})
	if err != nil || len(got) != 1 || got[0].ID == ids[0] {
		t.Fatalf("the raced FETCH: %v %v", got, err)
	}
	taken := map[string]bool{ids[0]: true, got[0].ID: true}
	head := ""
	for _, id := range ids {
		if !taken[id] {
			head = id
			break
		}
	}
	next, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"hot"}, Count: 1})
	if err != nil || len(next) != 1 {
		t.Fatalf("the next FETCH: %v %v", next, err)
	}
	if next[0].ID == head {
		t.Fatalf("the FETCH right after a lost claim took the head %s again", head)
	}
	taken[next[0].ID] = true
	c.Add(2 * time.Second)
	for _, id := range ids {
		if !taken[id] {
			head = id
			break
		}
	}
	later, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"hot"}, Count: 1})
	if err != nil || len(later) != 1 || later[0].ID != head {
		t.Fatalf("a FETCH 2 s later took %v (%v), want the head %s", later, err, head)
	}
}
