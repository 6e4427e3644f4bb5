package lifecycle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
)

// A bounded queue (ojs-backpressure.md) takes jobs up to its depth bound,
// warns above the warning share, refuses a PUSH past the bound with 429
// QUEUE_FULL and its headers, refuses a whole batch that would pass it,
// records the refusals for the backpressure.rejected event, takes jobs
// again once its depth went down, and an unbounded queue is not limited.
func TestBackpressureBoundsAQueue(t *testing.T) {
	t.Parallel()
	s, q, c := newServices(t)
	ctx := context.Background()
	push := func(queueName string, n int) error {
		raws := make([][]byte, n)
		for i := range raws {
			raws[i] = []byte(fmt.Sprintf(`{"type":"bp.job","args":[%d],"options":{"queue":%q}}`, i, queueName))
		}
		_, err := s.PushBatch(ctx, raws)
		return err
	}
	if err := q.Store().SetQueueBound(ctx, "bounded", &queue.Bound{MaxDepth: 4, Strategy: queue.StrategyReject, Warning: 0.5}, c.Now()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := push("bounded", 1); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
	if p := q.Pressure("bounded"); p == nil || p.Depth != 2 || p.Bound != 4 || p.Warn {
		t.Fatalf("pressure at 2 of 4: %+v", p)
	}
	if err := push("bounded", 1); err != nil {
		t.Fatal(err)
	}
	if p := q.Pressure("bounded"); p == nil || !p.Warn || p.Headers()["X-OJS-Queue-Pressure"] != "0.750" {
		t.Fatalf("pressure at 3 of 4: %+v", p)
	}
	// A batch of two would pass the bound: refused whole, nothing written.
	err := push("bounded", 2)
	e := ojserr.As(err)
	if e.Status() != 429 || e.Headers["Retry-After"] == "" || e.Headers["X-OJS-Queue-Depth"] != "3" || e.Headers["X-OJS-Queue-Bound"] != "4" {
		t.Fatalf("a batch past the bound: %v (status %d, headers %v)", err, e.Status(), e.Headers)
	}
	if code, _ := e.Wire(); code != "QUEUE_FULL" {
		t.Errorf("refused with code %s, want QUEUE_FULL", code)
	}
	c.Add(queue.DepthRefresh)
	if st, _ := q.Stats(ctx, "bounded"); st.Depth() != 3 {
		t.Fatalf("depth %d after the refused batch, want 3", st.Depth())
	}
	if err := push("bounded", 1); err != nil {
		t.Fatalf("the fourth job: %v", err)
	}
	if err := push("bounded", 1); ojserr.As(err).Status() != 429 {
		t.Fatalf("the fifth job: %v, want 429", err)
	}
	// The refusals are on the registry item, for the stream's event (the
	// batch's two, and a second later the fifth job).
	info, err := q.Store().QueueInfo(ctx, "bounded")
	if err != nil || info.Rejected != 3 || info.RejectedDepth != 4 {
		t.Fatalf("recorded refusals %+v %v, want 3 at depth 4", info, err)
	}
	evs := queue.Events("ojs://test", &queue.QueueInfo{Name: "bounded"}, info, c.Now())
	if len(evs) != 1 || evs[0].Type != events.BackpressureRejected || evs[0].Data["bound"] != 4 || evs[0].Data["rejected"] != int64(3) {
		t.Fatalf("events %+v", evs)
	}
	// Workers take two jobs: once the depth is counted again, two fit.
	if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"bounded"}, Count: 2, WorkerID: "w"}); err != nil || len(got) != 2 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	c.Add(queue.DepthRefresh)
	if err := push("bounded", 2); err != nil {
		t.Fatalf("two jobs after two were taken: %v", err)
	}
	// Unbounding takes effect within BoundRefresh.
	if err := q.Store().SetQueueBound(ctx, "bounded", nil, c.Now()); err != nil {
		t.Fatal(err)
	}
	c.Add(queue.BoundRefresh)
	if err := push("bounded", 10); err != nil || q.Pressure("bounded") != nil {
		t.Fatalf("an unbounded queue: %v, pressure %+v", err, q.Pressure("bounded"))
	}
	// Another queue is not limited by this one's bound.
	if err := push("free", 10); err != nil {
		t.Fatal(err)
	}
}

// Two API processes (two services, each with its own caches, on one table)
// pushing in turn never admit past a bound together: admission is one
// conditional write of the queue's counter.
func TestBackpressureHoldsAcrossProcesses(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	var svcs []*lifecycle.Service
	var qs *queue.Service
	for range 2 {
		qs = queue.NewService(st, queue.Config{Now: c.Now})
		svcs = append(svcs, lifecycle.New(st, lifecycle.Config{Now: c.Now, Queues: qs}))
	}
	ctx := context.Background()
	if err := qs.Store().SetQueueBound(ctx, "shared", &queue.Bound{MaxDepth: 3, Strategy: queue.StrategyReject, Warning: 0.8}, c.Now()); err != nil {
		t.Fatal(err)
	}
	admitted, refused := 0, 0
	for i := range 8 {
		_, err := svcs[i%2].Push(ctx, []byte(`{"type":"bp.job","args":[],"options":{"queue":"shared"}}`))
		switch {
		case err == nil:
			admitted++
		case ojserr.As(err).Status() == 429:
			refused++
		default:
			t.Fatal(err)
		}
	}
	if admitted != 3 || refused != 5 {
		t.Fatalf("admitted %d, refused %d; want 3 and 5", admitted, refused)
	}
}
