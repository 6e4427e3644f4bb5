package lifecycle_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// countingClient counts the DynamoDB requests a store makes.
type countingClient struct {
	*dynamodb.Client
	n atomic.Int64
}

func (c *countingClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.n.Add(1)
	return c.Client.GetItem(ctx, in, o...)
}

func (c *countingClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.n.Add(1)
	return c.Client.PutItem(ctx, in, o...)
}

func (c *countingClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.n.Add(1)
	return c.Client.UpdateItem(ctx, in, o...)
}

func (c *countingClient) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.n.Add(1)
	return c.Client.Query(ctx, in, o...)
}

func (c *countingClient) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	c.n.Add(1)
	return c.Client.BatchGetItem(ctx, in, o...)
}

// newCountedService is newService on a client that counts its DynamoDB
// requests.
func newCountedService(t *testing.T) (*lifecycle.Service, *countingClient, *clock) {
	t.Helper()
	s, _, db, c := newCountedServices(t)
	return s, db, c
}

// newCountedServices is newCountedService with its queue service (on the
// same client).
func newCountedServices(t *testing.T) (*lifecycle.Service, *queue.Service, *countingClient, *clock) {
	t.Helper()
	st, _ := testenv.Table(t)
	db := &countingClient{Client: testenv.DynamoDB()}
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	counted := store.New(db, st.Table())
	q := queue.NewService(counted, queue.Config{Now: c.Now})
	return lifecycle.New(counted, lifecycle.Config{Now: c.Now, Queues: q}), q, db, c
}

// TestFetchRequests pins what FETCH costs in DynamoDB requests with the
// queue's partitions sharded: one query per ready shard, the due shards
// only when something may be due (at most once a second otherwise), one
// read of the queue and worker state only when there are candidates (an
// empty poll needs none), and one conditional write per job.
func TestFetchRequests(t *testing.T) {
	t.Parallel()
	s, db, c := newCountedService(t)
	ctx := context.Background()
	sh := topology.JobTable.Shards
	fetch := func(count int) (int, int64) {
		t.Helper()
		before := db.n.Load()
		got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"cost"}, Count: count, WorkerID: "w-cost"})
		if err != nil {
			t.Fatal(err)
		}
		return len(got), db.n.Load() - before
	}
	if n, req := fetch(10); n != 0 || req != int64(sh.Due+sh.Ready) {
		t.Fatalf("first empty FETCH: %d jobs, %d requests; want 0 and %d", n, req, sh.Due+sh.Ready)
	}
	c.Add(100 * time.Millisecond)
	if n, req := fetch(10); n != 0 || req != int64(sh.Ready) {
		t.Fatalf("empty FETCH: %d jobs, %d requests; want 0 and %d (no state read)", n, req, sh.Ready)
	}
	for i := range 10 {
		if _, err := s.Push(ctx, []byte(fmt.Sprintf(`{"type":"cost.job","args":[%d],"options":{"queue":"cost"}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	c.Add(100 * time.Millisecond)
	if n, req := fetch(10); n != 10 || req != int64(1+sh.Ready+10) {
		t.Fatalf("FETCH of 10: %d jobs, %d requests; want 10 and %d", n, req, 1+sh.Ready+10)
	}
	c.Add(time.Second) // the due shards are read again once a second
	if n, req := fetch(1); n != 0 || req != int64(sh.Due+sh.Ready) {
		t.Fatalf("empty FETCH a second later: %d jobs, %d requests; want 0 and %d", n, req, sh.Due+sh.Ready)
	}
}

// A paused queue that holds jobs costs its first FETCH the ready queries
// and the state read; once this process has seen it paused, a FETCH reads
// its state first and stops there: one request while it stays paused. The
// pause is still read fresh by every FETCH: once resumed, the next FETCH
// takes the job, and the one after that costs an empty poll again.
func TestAPausedQueueHoldingJobsCostsOneReadAFetch(t *testing.T) {
	t.Parallel()
	s, q, db, c := newCountedServices(t)
	ctx := context.Background()
	sh := topology.JobTable.Shards
	fetch := func() (int, int64) {
		t.Helper()
		c.Add(100 * time.Millisecond)
		before := db.n.Load()
		got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"held-cost"}, WorkerID: "w-held"})
		if err != nil {
			t.Fatal(err)
		}
		return len(got), db.n.Load() - before
	}
	if _, err := s.Push(ctx, []byte(`{"type":"held.job","args":[],"options":{"queue":"held-cost"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetPaused(ctx, "held-cost", true); err != nil {
		t.Fatal(err)
	}
	if n, req := fetch(); n != 0 || req != int64(sh.Due+sh.Ready+1) {
		t.Fatalf("first FETCH of the paused queue: %d jobs, %d requests; want 0 and %d", n, req, sh.Due+sh.Ready+1)
	}
	for range 3 {
		if n, req := fetch(); n != 0 || req != 1 {
			t.Fatalf("FETCH of a queue seen paused: %d jobs, %d requests; want 0 and 1 (its state)", n, req)
		}
	}
	if _, err := q.SetPaused(ctx, "held-cost", false); err != nil {
		t.Fatal(err)
	}
	if n, req := fetch(); n != 1 || req != int64(1+sh.Ready+1) {
		t.Fatalf("FETCH after resume: %d jobs, %d requests; want 1 and %d (state, ready queries, claim)", n, req, 1+sh.Ready+1)
	}
	// The queue just showed a job: the next FETCH reads the state with the
	// ready queries instead of after them (lifecycle.BusyFor), even when
	// it then finds nothing; once the queue has been idle that long, an
	// empty poll costs no state read again (the due shards are read too,
	// as once a second).
	if n, req := fetch(); n != 0 || req != int64(sh.Ready+1) {
		t.Fatalf("empty FETCH right after a busy one: %d jobs, %d requests; want 0 and %d", n, req, sh.Ready+1)
	}
	c.Add(lifecycle.BusyFor)
	if n, req := fetch(); n != 0 || req != int64(sh.Due+sh.Ready) {
		t.Fatalf("empty FETCH of a queue idle for a second: %d jobs, %d requests; want 0 and %d", n, req, sh.Due+sh.Ready)
	}
}

// failingClaims fails the claims (UpdateItems) after the first ok ones.
type failingClaims struct {
	*dynamodb.Client
	ok atomic.Int64
}

func (c *failingClaims) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if c.ok.Add(-1) < 0 {
		return nil, fmt.Errorf("injected: DynamoDB unavailable")
	}
	return c.Client.UpdateItem(ctx, in, o...)
}

// TestFetchAnswersWhatItClaimedBeforeAnError: a FETCH whose third claim
// fails answers the two jobs it claimed (active under its lease) instead
// of an error that would leave them unrun until their leases end; a FETCH
// that claimed nothing answers the error.
func TestFetchAnswersWhatItClaimedBeforeAnError(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	db := &failingClaims{Client: testenv.DynamoDB()}
	s := lifecycle.New(store.New(db, st.Table()), lifecycle.Config{})
	plain := lifecycle.New(st, lifecycle.Config{})
	ctx := context.Background()
	for i := range 5 {
		if _, err := plain.Push(ctx, []byte(fmt.Sprintf(`{"type":"pay.out","args":[%d],"options":{"queue":"pay","retry":{"max_attempts":1}}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	db.ok.Store(2)
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"pay"}, Count: 5, WorkerID: "w1"})
	if err != nil || len(got) != 2 {
		t.Fatalf("FETCH with the third claim failing: %d jobs, %v; want the 2 claimed and no error", len(got), err)
	}
	for _, j := range got {
		cur, err := plain.Info(ctx, j.ID)
		if err != nil || string(cur.State) != "active" || cur.Attempt != 1 {
			t.Fatalf("answered job %s is %+v (%v)", j.ID, cur, err)
		}
	}
	if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"pay"}, Count: 5, WorkerID: "w1"}); err == nil || len(got) != 0 {
		t.Fatalf("FETCH whose first claim fails: %d jobs, %v; want an error", len(got), err)
	}
}

// lostAnswer sends the first write of a job item (a PUSH's put, a claim's
// or an ACK's update) twice and answers the second try: what the SDK does
// when the first answer is lost on the way.
type lostAnswer struct {
	*dynamodb.Client
	done atomic.Bool
}

// again sends a job item's write once more first, the first time.
func (c *lostAnswer) again(sk types.AttributeValue, send func() error) error {
	if s, _ := sk.(*types.AttributeValueMemberS); s != nil && s.Value == "JOB" && c.done.CompareAndSwap(false, true) {
		return send()
	}
	return nil
}

func (c *lostAnswer) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := c.again(in.Key["sk"], func() error { _, err := c.Client.UpdateItem(ctx, in, o...); return err }); err != nil {
		return nil, err
	}
	return c.Client.UpdateItem(ctx, in, o...)
}

func (c *lostAnswer) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := c.again(in.Item["sk"], func() error { _, err := c.Client.PutItem(ctx, in, o...); return err }); err != nil {
		return nil, err
	}
	return c.Client.PutItem(ctx, in, o...)
}

// TestAClaimWhoseAnswerWasLostIsStillTheFetchers: the retry of a claim
// that landed finds the job active; the claim's token tells it is this
// FETCH's own claim, which it answers, instead of leaving the job claimed
// and unrun until its lease ends.
func TestAClaimWhoseAnswerWasLostIsStillTheFetchers(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	db := &lostAnswer{Client: testenv.DynamoDB()}
	s := lifecycle.New(store.New(db, st.Table()), lifecycle.Config{})
	plain := lifecycle.New(st, lifecycle.Config{})
	ctx := context.Background()
	j, err := plain.Push(ctx, []byte(`{"type":"pay.out","args":[],"options":{"queue":"lost","retry":{"max_attempts":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"lost"}, WorkerID: "w1"})
	if err != nil || len(got) != 1 || got[0].ID != j.ID || got[0].Attempt != 1 {
		t.Fatalf("FETCH whose claim's answer was lost: %v %v, want the job in attempt 1", got, err)
	}
	if !db.done.Load() {
		t.Fatal("the claim was not sent twice")
	}
	// The same for an ACK: answered as done, not 409.
	db.done.Store(false)
	done, err := s.AckOwned(ctx, j.ID, "w1", 1, []byte(`"paid"`))
	if err != nil || done.State != "completed" || !db.done.Load() {
		t.Fatalf("ACK whose answer was lost: %+v %v", done, err)
	}
}

// TestAPushWhoseAnswerWasLostIsNotADuplicate: the SDK's retry of a PUSH
// whose put landed finds the job there; the put's token tells it is its
// own, so the PUSH succeeds instead of answering 409.
func TestAPushWhoseAnswerWasLostIsNotADuplicate(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	db := &lostAnswer{Client: testenv.DynamoDB()}
	s := lifecycle.New(store.New(db, st.Table()), lifecycle.Config{})
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"pay.out","args":[],"options":{"queue":"lostput"}}`))
	if err != nil || j == nil || !db.done.Load() {
		t.Fatalf("PUSH whose answer was lost: %+v %v", j, err)
	}
	// A real duplicate (the same id pushed again) is still refused.
	if _, err := s.Push(ctx, []byte(`{"id":"`+j.ID+`","type":"pay.out","args":[],"options":{"queue":"lostput"}}`)); err == nil {
		t.Fatal("a second PUSH with the same id was accepted")
	}
}
