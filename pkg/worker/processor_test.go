package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
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
	qsvc := queue.NewService(st, queue.Config{PushQueues: []string{"lambda"}, Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc})
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

// message is the SQS message the stream function sends for j as it is
// stored now: an available job's carries its claim hint (the claim is
// written without a read); any other's names the job only (as the
// sweeper's re-sends and messages sent before hints do).
func message(t *testing.T, p *worker.Processor, j *job.Job) worker.Message {
	t.Helper()
	d := dispatch.Delivery{Job: j}
	if it, err := p.Items.GetItem(context.Background(), j.ID); err == nil {
		d = dispatch.Delivery{Job: it.Job, Check: it.DueAt}
	}
	b, err := json.Marshal(dispatch.NewMessage(d))
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
	m := message(t, p, j)
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
	if failed := p.Process(ctx, []worker.Message{message(t, p, sch), message(t, p, cancelled), message(t, p, unknown), poison}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if runs.Load() != 0 {
		t.Fatal("a job ran that was not ready")
	}
	if len(s.ds) != 1 || s.ds[0].Job.ID != sch.ID || s.ds[0].Delay < 58*time.Second || s.ds[0].Delay > 60*time.Second {
		t.Fatalf("the early message must be re-sent with the remaining delay: %+v", s.ds)
	}
	clk.Add(61 * time.Second)
	if failed := p.Process(ctx, []worker.Message{message(t, p, sch)}); len(failed) != 0 || runs.Load() != 1 {
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
		if failed := p.Process(ctx, []worker.Message{message(t, p, j)}); len(failed) != 0 {
			t.Fatalf("%s: %v", arg, failed)
		}
		got, _ := svc.Info(ctx, j.ID)
		if got.State != want.state || got.Error == nil || got.Error.Type != want.typ {
			t.Fatalf("%s: %s %+v", arg, got.State, got.Error)
		}
	}
}

// TestResultOverTheLimitFailsTheJob: a handler whose result passes the
// 1 MiB result limit fails its job at once (result_too_large, not
// retried), instead of an ACK refused with 413 leaving the job active until
// its lease expired.
func TestResultOverTheLimitFailsTheJob(t *testing.T) {
	t.Parallel()
	svc, p, _, _ := setup(t, func(ctx context.Context, j *worker.Job) (any, error) {
		return strings.Repeat("r", job.MaxResultBytes), nil
	})
	ctx := context.Background()
	j, _ := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda"}}`))
	if failed := p.Process(ctx, []worker.Message{message(t, p, j)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	got, _ := svc.Info(ctx, j.ID)
	if got.State != job.Discarded || got.Error == nil || got.Error.Type != "result_too_large" || got.Attempt != 1 {
		t.Fatalf("job: %s attempt %d error %+v", got.State, got.Attempt, got.Error)
	}
}

// failingCompletions fails the first n writes that complete a job.
type failingCompletions struct {
	*dynamodb.Client
	n atomic.Int32
}

func (c *failingCompletions) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, v := range in.ExpressionAttributeValues {
		if s, ok := v.(*types.AttributeValueMemberS); ok && s.Value == string(job.Completed) && c.n.Add(-1) >= 0 {
			return nil, fmt.Errorf("injected: DynamoDB unavailable")
		}
	}
	return c.Client.UpdateItem(ctx, in, o...)
}

// TestAFailedAckIsWrittenAgainWhileTheLeaseHolds: a handler's success
// whose ACK write fails is written again, not left to SQS's redelivery
// (which finds the job running, then runs it again once the lease ends).
func TestAFailedAckIsWrittenAgainWhileTheLeaseHolds(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	db := &failingCompletions{Client: testenv.DynamoDB()}
	db.n.Store(3)
	failing := store.New(db, st.Table())
	qsvc := queue.NewService(failing, queue.Config{PushQueues: []string{"lambda"}})
	svc := lifecycle.New(failing, lifecycle.Config{Queues: qsvc})
	var runs atomic.Int32
	mux := worker.NewMux()
	if err := mux.Handle("t.pay", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) (any, error) {
		runs.Add(1)
		return map[string]string{"paid": "yes"}, nil
	})); err != nil {
		t.Fatal(err)
	}
	p := &worker.Processor{Service: svc, Items: st, Mux: mux, Sender: &sent{}}
	ctx := context.Background()
	j, err := svc.Push(ctx, []byte(`{"type":"t.pay","args":[],"options":{"queue":"lambda","retry":{"max_attempts":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if failed := p.Process(ctx, []worker.Message{message(t, p, j)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	got, err := svc.Info(ctx, j.ID)
	if err != nil || got.State != job.Completed || string(got.Result) != `{"paid":"yes"}` || runs.Load() != 1 || db.n.Load() >= 0 {
		t.Fatalf("job %+v (%v) after %d runs, %d injected failures left", got, err, runs.Load(), db.n.Load())
	}
}

// TestAHandlerFinishingAtItsTimeoutKeepsItsResult: the handler's time
// ends with the claim's lease (less a margin for the ACK), so a handler
// that succeeds a moment before its context's deadline has its result
// written; its timeout counted from the handler's start would end after
// the lease, and the ACK would be refused.
func TestAHandlerFinishingAtItsTimeoutKeepsItsResult(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	qsvc := queue.NewService(st, queue.Config{PushQueues: []string{"lambda"}})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc}) // the real clock: the lease runs out
	mux := worker.NewMux()
	var margin time.Duration
	if err := mux.Handle("t.run", worker.HandlerFunc(func(ctx context.Context, j *worker.Job) (any, error) {
		// The handler's deadline against the claim's lease, read from the
		// job as written (no sleeping to the last millisecond: on a busy
		// machine that measures the scheduler, not the deadline).
		dl, _ := ctx.Deadline()
		cur, err := svc.Info(ctx, j.ID)
		if err != nil {
			return nil, err
		}
		margin = cur.LeaseUntil.Sub(dl)
		return "paid", nil
	})); err != nil {
		t.Fatal(err)
	}
	p := &worker.Processor{Service: svc, Items: st, Mux: mux, Sender: &sent{}}
	ctx := context.Background()
	j, err := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda","timeout_ms":1000,"retry":{"max_attempts":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if failed := p.Process(ctx, []worker.Message{message(t, p, j)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	// The lease is held to the millisecond: a deadline 200 ms or more
	// before its end leaves the ACK the time it needs.
	if margin < 200*time.Millisecond {
		t.Fatalf("the handler's deadline is %v before the lease's end: a success just before it would be written after the lease", margin)
	}
	got, err := svc.Info(ctx, j.ID)
	if err != nil || got.State != job.Completed || string(got.Result) != `"paid"` {
		t.Fatalf("job: %v %s (%v), want completed", got.State, got.Result, err)
	}
}

// TestAJobCancelledWhileItRunsIsReported: the handler's success after its
// job was cancelled is not recorded (the job stays cancelled), the
// message is done, and the worker logs that the outcome was dropped.
func TestAJobCancelledWhileItRunsIsReported(t *testing.T) {
	t.Parallel()
	var svc *lifecycle.Service
	svc, p, _, _ := setup(t, func(ctx context.Context, j *worker.Job) (any, error) {
		if _, _, err := svc.Cancel(ctx, j.ID); err != nil {
			return nil, err
		}
		return "paid", nil
	})
	var logs strings.Builder
	var mu sync.Mutex
	p.Logger = slog.New(slog.NewJSONHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(b)
	}), nil))
	ctx := context.Background()
	j, err := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if failed := p.Process(ctx, []worker.Message{message(t, p, j)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	got, err := svc.Info(ctx, j.ID)
	if err != nil || got.State != job.Cancelled || len(got.Result) != 0 {
		t.Fatalf("job: %v %s (%v), want cancelled without a result", got.State, got.Result, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "cancelled while its handler ran") || !strings.Contains(logs.String(), j.ID) {
		t.Fatalf("no warning of the dropped outcome in the log: %s", logs.String())
	}
}

// A push-mode handler whose job is cancelled while it runs is stopped: its
// context is cancelled within CancelPoll, and nothing is recorded for the
// attempt (the job stays cancelled, with no error of the attempt).
func TestCancellingARunningJobStopsItsHandler(t *testing.T) {
	t.Parallel()
	started := make(chan string, 1)
	stopped := make(chan time.Duration, 1)
	svc, p, _, _ := setup(t, func(ctx context.Context, j *worker.Job) (any, error) {
		t0 := time.Now()
		started <- j.ID
		select {
		case <-ctx.Done():
			stopped <- time.Since(t0)
			return nil, ctx.Err()
		case <-time.After(20 * time.Second):
			stopped <- -1
			return "ran to the end", nil
		}
	})
	p.CancelPoll = 50 * time.Millisecond
	ctx := context.Background()
	j, err := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda","retry":{"max_attempts":3}}}`))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []string, 1)
	go func() { done <- p.Process(ctx, []worker.Message{message(t, p, j)}) }()
	<-started
	if _, _, err := svc.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if d := <-stopped; d < 0 {
		t.Fatal("the handler of a cancelled job ran to its end")
	}
	if failed := <-done; len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	got, err := svc.Info(ctx, j.ID)
	if err != nil || got.State != job.Cancelled || got.Error != nil || len(got.Errors) != 0 {
		t.Fatalf("job: %v error %+v errors %v (%v), want cancelled with no error recorded", got.State, got.Error, got.Errors, err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// A push-mode handler reports progress through its job: the report is on
// the job while it runs, and the completed job shows 1.
func TestAHandlerReportsProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var seen *job.Progress
	var svc *lifecycle.Service
	svc, p, _, _ := setup(t, func(ctx context.Context, j *worker.Job) (any, error) {
		if err := j.ReportProgress(ctx, 0.6, "most rows"); err != nil {
			return nil, err
		}
		cur, err := svc.Info(ctx, j.ID)
		if err == nil {
			seen = cur.Progress
		}
		return nil, err
	})
	j, _ := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda"}}`))
	if failed := p.Process(ctx, []worker.Message{message(t, p, j)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if seen == nil || *seen.Value != 0.6 || seen.Message != "most rows" {
		t.Fatalf("progress while running: %+v", seen)
	}
	got, _ := svc.Info(ctx, j.ID)
	if pr := got.ProgressShown(); got.State != job.Completed || pr == nil || *pr.Value != 1 {
		t.Fatalf("completed job %s shows %+v", got.State, pr)
	}
	if err := (&worker.Job{ID: j.ID}).ReportProgress(ctx, 0.5, ""); err == nil {
		t.Fatal("a job outside the processor reported progress")
	}
}

// A handler saves a checkpoint and fails; its retry resumes from it.
func TestARetryResumesFromTheCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var resumed atomic.Value
	svc, p, _, clk := setup(t, func(ctx context.Context, j *worker.Job) (any, error) {
		if j.Attempt == 1 {
			if j.LastCheckpoint != nil {
				return nil, worker.NonRetryable("unexpected", "a first attempt with a checkpoint")
			}
			if err := j.SaveCheckpoint(ctx, 0.5, map[string]int{"last_row": 7}); err != nil {
				return nil, err
			}
			return nil, errors.New("flaky")
		}
		resumed.Store(string(j.LastCheckpoint))
		return nil, nil
	})
	j, _ := svc.Push(ctx, []byte(`{"type":"t.run","args":[],"options":{"queue":"lambda","retry":{"max_attempts":3,"initial_interval":"PT1S","jitter":false}}}`))
	if failed := p.Process(ctx, []worker.Message{message(t, p, j)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if got, _ := svc.Info(ctx, j.ID); got.State != job.Retryable || string(got.LastCheckpoint) != `{"last_row":7}` {
		t.Fatalf("after the first attempt: %s, checkpoint %s", got.State, got.LastCheckpoint)
	}
	clk.Add(time.Minute)
	if failed := p.Process(ctx, []worker.Message{message(t, p, j)}); len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if got, _ := svc.Info(ctx, j.ID); got.State != job.Completed || resumed.Load() != `{"last_row":7}` {
		t.Fatalf("the retry: %s, resumed from %v", got.State, resumed.Load())
	}
}

// A handler that returns RateLimited holds its job's rate limit key: the
// key's next job is not run before the hold's time, and is then.
func TestARateLimitedHandlerHoldsItsKey(t *testing.T) {
	t.Parallel()
	ran := map[string]int{}
	var clk *testenv.Clock
	svc, p, _, c := setup(t, func(ctx context.Context, j *worker.Job) (any, error) {
		var mode string
		if err := j.Bind(&mode); err != nil {
			return nil, err
		}
		ran[mode]++
		if mode == "limited" {
			return nil, worker.RateLimited("429 from the API", clk.Now().Add(time.Minute))
		}
		return "ok", nil
	})
	clk = c
	ctx := context.Background()
	push := func(mode string) *job.Job {
		j, err := svc.Push(ctx, []byte(`{"type":"t.run","args":["`+mode+`"],"options":{"queue":"lambda","rate_limit":{"key":"api","concurrency":5}}}`))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	limited, next := push("limited"), push("ok")
	p.Process(ctx, []worker.Message{message(t, p, limited)})
	if got, _ := svc.Info(ctx, limited.ID); got.State != job.Retryable || got.Error.Type != "RateLimitExceeded" {
		t.Fatalf("the limited job: %s %+v", got.State, got.Error)
	}
	p.Process(ctx, []worker.Message{message(t, p, next)})
	if got, _ := svc.Info(ctx, next.ID); ran["ok"] != 0 || got.State != job.Available {
		t.Fatalf("a job of the held key ran (%d) or left available (%s)", ran["ok"], got.State)
	}
	clk.Add(time.Minute + time.Second)
	p.Process(ctx, []worker.Message{message(t, p, next)})
	if got, _ := svc.Info(ctx, next.ID); ran["ok"] != 1 || got.State != job.Completed {
		t.Fatalf("after the hold: ran %d, %s", ran["ok"], got.State)
	}
}
