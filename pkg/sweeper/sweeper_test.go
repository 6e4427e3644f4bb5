package sweeper_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/internal/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
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
			t.Fatalf("message body is not a job envelope: %s", aws.ToString(m.Body))
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
	svc := lifecycle.New(st, lifecycle.Config{PushQueues: []string{"lambda"}, Now: clk.Now, RedeliverAfter: 5 * time.Minute})
	sw := &sweeper.Sweeper{Service: svc, Store: st, Sender: dispatch.New(testenv.SQS(), map[string]string{"lambda": url}), PushQueues: []string{"lambda"}}
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

func TestSweeperPromotesDueJobsAndRequeuesExpiredLeases(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now})
	sw := &sweeper.Sweeper{Service: svc, Store: st, Sender: dispatch.New(testenv.SQS(), nil)}
	ctx := context.Background()
	later, _ := svc.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"sw","scheduled_at":"+PT1H"}}`))
	running, _ := svc.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"sw2","visibility_timeout_ms":30000}}`))
	if got, _ := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"sw2"}}); len(got) != 1 {
		t.Fatal("fetch")
	}
	clk.Add(time.Hour)
	if _, err := sw.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	a, _ := svc.Info(ctx, later.ID)
	b, _ := svc.Info(ctx, running.ID)
	if a.State != job.Available || b.State != job.Available || b.Error == nil || b.Error.Type != "visibility_timeout" {
		t.Fatalf("after sweep: %s %s %+v", a.State, b.State, b.Error)
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
	svc := lifecycle.New(st, lifecycle.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &failingCrons{stop: cancel}
	sw := &sweeper.Sweeper{Service: svc, Store: st, Sender: dispatch.New(testenv.SQS(), nil), Crons: fc}
	// The deadline is far: only the third failing pass ends the loop.
	_, err := sw.Loop(ctx, 20*time.Millisecond, time.Now().Add(10*time.Minute))
	if err == nil || fc.calls != 3 {
		t.Fatalf("sweeps after an error: %d (err %v)", fc.calls, err)
	}
}
