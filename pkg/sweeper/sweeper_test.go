package sweeper_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/sweeper"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func receiveIDs(t *testing.T, url string) []string {
	t.Helper()
	out, err := testenv.SQS().ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range out.Messages {
		var env struct{ ID string }
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil {
			t.Fatalf("message body is not a job message: %s", aws.ToString(m.Body))
		}
		ids = append(ids, env.ID)
	}
	return ids
}

// TestSweeperRedeliversAJobTheRelayNeverSent covers the crash between the
// DynamoDB write and the SQS send: no stream relay runs here, so only the
// sweeper can deliver the job, after the redelivery delay, and only once
// per delay.
func TestSweeperRedeliversAJobTheRelayNeverSent(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	url := testenv.Queue(t)
	clk := testenv.NewClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	qsvc := queue.NewService(st, queue.Config{PushQueues: []string{"lambda"}, Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, RedeliverAfter: 5 * time.Minute, Queues: qsvc})
	sw := &sweeper.Sweeper{Service: svc, Store: st, Queues: queue.NewStore(st.DB(), st.Table()), DeadLetter: deadletter.New(st, svc, qsvc, deadletter.Config{}), Sender: dispatch.New(testenv.SQS(), map[string]string{"lambda": url}), PushQueues: []string{"lambda"}}
	ctx := context.Background()
	j, err := svc.Push(ctx, []byte(`{"type":"demo.greet","args":["x"],"options":{"queue":"lambda"}}`))
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	if r, err := sw.Sweep(ctx); err != nil || r.Redelivered != 0 {
		t.Fatalf("early sweep: %+v %v", r, err)
	}
	clk.Add(5 * time.Minute)
	if r, err := sw.Sweep(ctx); err != nil || r.Redelivered != 1 {
		t.Fatalf("sweep: %+v %v", r, err)
	}
	if ids := receiveIDs(t, url); len(ids) != 1 || ids[0] != j.ID {
		t.Fatalf("SQS holds %v, want [%s]", ids, j.ID)
	}
	if r, _ := sw.Sweep(ctx); r.Redelivered != 0 {
		t.Fatal("the sweeper re-sent before the next redelivery delay")
	}
}

// TestRedeliveryChecksBackOffWhileAJobWaits: a push-mode job nobody claims
// (its message waiting behind a backlog, or lost) is re-sent after 1, 2, 4
// and 8 redelivery delays, then every 12 at most; not every delay.
func TestRedeliveryChecksBackOffWhileAJobWaits(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	url := testenv.Queue(t)
	clk := testenv.NewClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	qsvc := queue.NewService(st, queue.Config{PushQueues: []string{"lambda"}, Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, RedeliverAfter: 5 * time.Minute, Queues: qsvc})
	sw := &sweeper.Sweeper{Service: svc, Store: st, Queues: queue.NewStore(st.DB(), st.Table()), DeadLetter: deadletter.New(st, svc, qsvc, deadletter.Config{}), Sender: dispatch.New(testenv.SQS(), map[string]string{"lambda": url}), PushQueues: []string{"lambda"}}
	ctx := context.Background()
	j, err := svc.Push(ctx, []byte(`{"type":"demo.greet","args":["x"],"options":{"queue":"lambda"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var sentAt []int
	for minute := 1; minute <= 150; minute++ {
		clk.Add(time.Minute)
		r, err := sw.Sweep(ctx)
		if err != nil {
			t.Fatalf("sweep at minute %d: %v", minute, err)
		}
		if r.Redelivered > 0 {
			sentAt = append(sentAt, minute)
		}
	}
	if want := []int{5, 10, 20, 40, 80, 140}; !slices.Equal(sentAt, want) {
		t.Fatalf("re-sent at minutes %v, want %v", sentAt, want)
	}
	got := receiveAll(t, url, len(sentAt))
	if len(got) != len(sentAt) {
		t.Fatalf("SQS holds %d messages, want %d", len(got), len(sentAt))
	}
	for _, id := range got {
		if id != j.ID {
			t.Fatalf("SQS holds %v, want only copies of %s", got, j.ID)
		}
	}
	if cur, err := svc.Info(ctx, j.ID); err != nil || cur.State != job.Available {
		t.Fatalf("job after the sweeps: %+v %v", cur, err)
	}
}

func TestSweeperPromotesDueJobsAndRequeuesExpiredLeases(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc})
	sw := &sweeper.Sweeper{Service: svc, Store: st, Queues: queue.NewStore(st.DB(), st.Table()), DeadLetter: deadletter.New(st, svc, qsvc, deadletter.Config{}), Sender: dispatch.New(testenv.SQS(), nil)}
	ctx := context.Background()
	later, _ := svc.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"sw","scheduled_at":"+PT1H"}}`))
	running, _ := svc.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"sw2","visibility_timeout_ms":30000}}`))
	if got, _ := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"sw2"}}); len(got) != 1 {
		t.Fatal("fetch")
	}
	clk.Add(time.Hour)
	res, err := sw.Sweep(ctx)
	if err != nil || res.Resolved != 2 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	// Read as stored (Info would make the moves itself).
	a, _ := st.Get(ctx, later.ID)
	b, _ := st.Get(ctx, running.ID)
	if a.State != job.Available || b.State != job.Available || b.Error == nil || b.Error.Type != "visibility_timeout" {
		t.Fatalf("after sweep: %s %s %+v", a.State, b.State, b.Error)
	}
	if res, err := sw.Sweep(ctx); err != nil || res.Resolved != 0 {
		t.Fatalf("a second sweep found work: %+v %v", res, err)
	}
}

// failingCrons fails every cron pass and ends the loop (stop) after the
// third, so the test counts sweeps, not time.
type failingCrons struct {
	calls int
	stop  context.CancelFunc
}

func (f *failingCrons) Run(context.Context) (cron.RunResult, error) {
	f.calls++
	if f.calls == 3 {
		f.stop()
	}
	return cron.RunResult{}, errors.New("schedule broken")
}

// TestLoopKeepsSweepingAfterAnError: a failing part (here the cron pass)
// is reported but does not stop the invocation's later sweeps.
func TestLoopKeepsSweepingAfterAnError(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	qsvc := queue.NewService(st, queue.Config{})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &failingCrons{stop: cancel}
	sw := &sweeper.Sweeper{Service: svc, Store: st, Queues: queue.NewStore(st.DB(), st.Table()), DeadLetter: deadletter.New(st, svc, qsvc, deadletter.Config{}), Sender: dispatch.New(testenv.SQS(), nil), Crons: fc}
	// The deadline is far: only the third failing pass ends the loop.
	_, err := sw.Loop(ctx, 20*time.Millisecond, time.Now().Add(10*time.Minute))
	if err == nil || fc.calls != 3 {
		t.Fatalf("sweeps after an error: %d (err %v)", fc.calls, err)
	}
}

// flaky passes every call to the SQS emulator but fails the entries of the
// named jobs with a failure that may pass (SenderFault false), as SQS does
// under throttling.
type flaky struct {
	real dispatch.SQSAPI
	mu   sync.Mutex
	bad  map[string]bool
}

func (f *flaky) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	var pass []sqstypes.SendMessageBatchRequestEntry
	var failed []sqstypes.BatchResultErrorEntry
	for _, e := range in.Entries {
		if f.bad[aws.ToString(e.MessageAttributes["ojs_job_id"].StringValue)] {
			failed = append(failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("injected")})
			continue
		}
		pass = append(pass, e)
	}
	f.mu.Unlock()
	out := &sqs.SendMessageBatchOutput{}
	if len(pass) > 0 {
		in2 := *in
		in2.Entries = pass
		o, err := f.real.SendMessageBatch(ctx, &in2, opts...)
		if err != nil {
			return nil, err
		}
		out = o
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

// TestSweeperMovesOnWhenOneJobCannotBeSent: one job of a page whose message
// keeps failing is tried again every sweep, but the others of its page are
// sent once, not again with it on every sweep.
func TestSweeperMovesOnWhenOneJobCannotBeSent(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	url := testenv.Queue(t)
	clk := testenv.NewClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	qsvc := queue.NewService(st, queue.Config{PushQueues: []string{"lambda"}, Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, RedeliverAfter: 5 * time.Minute, Queues: qsvc})
	f := &flaky{real: testenv.SQS(), bad: map[string]bool{}}
	sw := &sweeper.Sweeper{Service: svc, Store: st, Queues: queue.NewStore(st.DB(), st.Table()), DeadLetter: deadletter.New(st, svc, qsvc, deadletter.Config{}), Sender: dispatch.New(f, map[string]string{"lambda": url}), PushQueues: []string{"lambda"}}
	ctx := context.Background()
	var ids []string
	for i := 0; i < 4; i++ {
		j, err := svc.Push(ctx, []byte(`{"type":"demo.greet","args":["x"],"options":{"queue":"lambda"}}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
		clk.Add(time.Millisecond)
	}
	bad := ids[1]
	f.bad[bad] = true
	clk.Add(6 * time.Minute)
	r, err := sw.Sweep(ctx)
	var se *dispatch.SendError
	if !errors.As(err, &se) || !slices.Equal(se.JobIDs, []string{bad}) || r.Redelivered != 3 {
		t.Fatalf("sweep: %+v %v, want 3 redelivered and a SendError naming %s", r, err, bad)
	}
	got := receiveAll(t, url, 3)
	want := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == bad })
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("first sweep sent %v, want %v", got, want)
	}
	// The next sweeps retry the failing job alone.
	for i := 0; i < 2; i++ {
		if r, err := sw.Sweep(ctx); !errors.As(err, &se) || r.Redelivered != 0 {
			t.Fatalf("sweep %d: %+v %v", i+2, r, err)
		}
	}
	f.mu.Lock()
	f.bad[bad] = false
	f.mu.Unlock()
	if r, err := sw.Sweep(ctx); err != nil || r.Redelivered != 1 {
		t.Fatalf("sweep once the job can be sent: %+v %v", r, err)
	}
	if got := receiveAll(t, url, 1); !slices.Equal(got, []string{bad}) {
		t.Fatalf("SQS holds %v, want only [%s]: the rest of the page was sent again", got, bad)
	}
}

// receiveAll reads until it has want messages (or two minutes pass), then
// once more to catch extras, and returns their job ids sorted.
func receiveAll(t *testing.T, url string, want int) []string {
	t.Helper()
	var ids []string
	deadline := time.Now().Add(2 * time.Minute)
	for len(ids) < want && time.Now().Before(deadline) {
		ids = append(ids, receiveIDs(t, url)...)
	}
	ids = append(ids, receiveIDs(t, url)...)
	slices.Sort(ids)
	return ids
}

// TestResumeSendsEveryWaitingJobOnce: resuming a push-mode queue with more
// available jobs than one page re-sends each of them once (it used to send
// the first page up to 100 times and never the rest).
func TestResumeSendsEveryWaitingJobOnce(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	url := testenv.Queue(t)
	clk := testenv.NewClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	qsvc := queue.NewService(st, queue.Config{PushQueues: []string{"lambda"}, Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, RedeliverAfter: 5 * time.Minute, Queues: qsvc})
	sw := &sweeper.Sweeper{Service: svc, Store: st, Queues: queue.NewStore(st.DB(), st.Table()), DeadLetter: deadletter.New(st, svc, qsvc, deadletter.Config{}), Sender: dispatch.New(testenv.SQS(), map[string]string{"lambda": url}), PushQueues: []string{"lambda"}}
	ctx := context.Background()
	if _, err := qsvc.SetPaused(ctx, "lambda", true); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for b := 0; b < 2; b++ {
		raws := make([][]byte, 600)
		for i := range raws {
			raws[i] = []byte(`{"type":"demo.greet","args":["x"],"options":{"queue":"lambda"}}`)
		}
		js, err := svc.PushBatch(ctx, raws)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range js {
			want[j.ID] = true
		}
	}
	if _, err := qsvc.SetPaused(ctx, "lambda", false); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	r, err := sw.Sweep(ctx)
	if err != nil || r.Redelivered != len(want) {
		t.Fatalf("sweep after resume: %+v %v, want %d redelivered", r, err, len(want))
	}
	got := receiveAll(t, url, len(want))
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for id := range want {
		if seen[id] != 1 {
			t.Fatalf("job %s sent %d times, want once (%d messages for %d jobs)", id, seen[id], len(got), len(want))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d messages for %d jobs", len(got), len(want))
	}
	if r, err := sw.Sweep(ctx); err != nil || r.Redelivered != 0 {
		t.Fatalf("second sweep: %+v %v, want nothing sent", r, err)
	}
}

// TestOneSweepResolvesMoreThanOnePage: a queue with more due jobs than
// one page (BatchSize) has them all promoted by one sweep, not a page per
// sweep (a minute apart on AWS).
func TestOneSweepResolvesMoreThanOnePage(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc})
	sw := &sweeper.Sweeper{Service: svc, Store: st, Queues: queue.NewStore(st.DB(), st.Table()), DeadLetter: deadletter.New(st, svc, qsvc, deadletter.Config{}), Sender: dispatch.New(testenv.SQS(), map[string]string{}), BatchSize: 20}
	ctx := context.Background()
	raws := make([][]byte, 70)
	for i := range raws {
		raws[i] = []byte(`{"type":"later.job","args":[],"options":{"queue":"later","scheduled_at":"2026-11-21T10:01:00Z"}}`)
	}
	js, err := svc.PushBatch(ctx, raws)
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)
	if _, err := sw.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		cur, err := svc.Info(ctx, j.ID)
		if err != nil || cur.State != job.Available {
			t.Fatalf("job %s after one sweep: %v %v, want available", j.ID, cur.State, err)
		}
	}
}
