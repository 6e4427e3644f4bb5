package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/internal/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/worker"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type sent struct {
	mu sync.Mutex
	ds []dispatch.Delivery
}

func (s *sent) Send(_ context.Context, ds []dispatch.Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ds = append(s.ds, ds...)
	return nil
}

func setup(t *testing.T, handler worker.HandlerFunc) (*lifecycle.Service, *worker.Processor, *sent, *testenv.Clock) {
	t.Helper()
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Now().UTC())
	svc := lifecycle.New(st, lifecycle.Config{PushQueues: []string{"lambda"}, Now: clk.Now})
	mux := worker.NewMux()
	if err := mux.Handle("t.run", handler); err != nil {
		t.Fatal(err)
	}
	if err := mux.Handle("t.run", handler); err == nil {
		t.Fatal("duplicate registration must fail")
	}
	s := &sent{}
	return svc, &worker.Processor{Service: svc, Items: st, Mux: mux, Sender: s}, s, clk
}

// message is the SQS message the dispatcher sends for j.
func message(t *testing.T, j *job.Job) worker.Message {
	b, err := json.Marshal(dispatch.NewMessage(j))
	if err != nil {
		t.Fatal(err)
	}
	return worker.Message{ID: "m-" + j.ID, Body: b}
}

func TestDuplicateDeliveriesRunTheHandlerOnce(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	svc, p, _, _ := setup(t, func(ctx context.Context, j *worker.Job) (any, error) {
		runs.Add(1)
		time.Sleep(50 * time.Millisecond)
		return map[string]int{"n": 1}, nil
	})
	ctx := context.Background()
	j, _ := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda"}}`))
	m := message(t, j)
	if failed := p.Process(ctx, []worker.Message{m, m, m, m}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if failed := p.Process(ctx, []worker.Message{m}); len(failed) != 0 {
		t.Fatalf("late duplicate failed: %v", failed)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
	got, _ := svc.Info(ctx, j.ID)
	if got.State != job.Completed || string(got.Result) != `{"n":1}` {
		t.Fatalf("job: %+v", got)
	}
}

func TestEarlyAndStaleMessages(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	svc, p, s, clk := setup(t, func(ctx context.Context, j *worker.Job) (any, error) { runs.Add(1); return nil, nil })
	ctx := context.Background()
	sch, _ := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda","scheduled_at":"+PT60S"}}`))
	cancelled, _ := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda"}}`))
	if _, _, err := svc.Cancel(ctx, cancelled.ID); err != nil {
		t.Fatal(err)
	}
	unknown := &job.Job{ID: "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6", Type: "t.run", Queue: "lambda"}
	poison := worker.Message{ID: "poison", Body: []byte("{not json")}
	if failed := p.Process(ctx, []worker.Message{message(t, sch), message(t, cancelled), message(t, unknown), poison}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if runs.Load() != 0 {
		t.Fatal("a job ran that was not ready")
	}
	if len(s.ds) != 1 || s.ds[0].Job.ID != sch.ID || s.ds[0].Delay < 58*time.Second || s.ds[0].Delay > 60*time.Second {
		t.Fatalf("the early message must be re-sent with the remaining delay: %+v", s.ds)
	}
	clk.Add(61 * time.Second)
	if failed := p.Process(ctx, []worker.Message{message(t, sch)}); len(failed) != 0 || runs.Load() != 1 {
		t.Fatalf("due job: failed=%v runs=%d", failed, runs.Load())
	}
}

func TestHandlerErrorsAndPanicsAreRecorded(t *testing.T) {
	t.Parallel()
	svc, p, _, _ := setup(t, func(ctx context.Context, j *worker.Job) (any, error) {
		var mode string
		if err := j.Bind(&mode); err != nil {
			return nil, err
		}
		switch mode {
		case "panic":
			panic("boom")
		case "fatal":
			return nil, worker.NonRetryable("card.declined", "no")
		}
		return nil, context.DeadlineExceeded
	})
	ctx := context.Background()
	cases := map[string]struct {
		state job.State
		typ   string
	}{
		`"panic"`:   {job.Retryable, "handler_panic"},
		`"fatal"`:   {job.Discarded, "card.declined"},
		`"timeout"`: {job.Retryable, "timeout"},
	}
	for arg, want := range cases {
		j, _ := svc.Push(ctx, []byte(`{"type":"t.run","args":[`+arg+`],"options":{"queue":"lambda"}}`))
		if failed := p.Process(ctx, []worker.Message{message(t, j)}); len(failed) != 0 {
			t.Fatalf("%s: %v", arg, failed)
		}
		got, _ := svc.Info(ctx, j.ID)
		if got.State != want.state || got.Error == nil || got.Error.Type != want.typ {
			t.Fatalf("%s: %s %+v", arg, got.State, got.Error)
		}
	}
}

// TestResultOverTheLimitFailsTheJob: a handler whose result passes the
// 64 KiB result limit fails its job at once (result_too_large, not
// retried), instead of an ACK refused with 413 leaving the job active until
// its lease expired.
func TestResultOverTheLimitFailsTheJob(t *testing.T) {
	t.Parallel()
	svc, p, _, _ := setup(t, func(ctx context.Context, j *worker.Job) (any, error) {
		return strings.Repeat("r", job.MaxResultBytes), nil
	})
	ctx := context.Background()
	j, _ := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda"}}`))
	if failed := p.Process(ctx, []worker.Message{message(t, j)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	got, _ := svc.Info(ctx, j.ID)
	if got.State != job.Discarded || got.Error == nil || got.Error.Type != "result_too_large" || got.Attempt != 1 {
		t.Fatalf("job: %s attempt %d error %+v", got.State, got.Attempt, got.Error)
	}
}
