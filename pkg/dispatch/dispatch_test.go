package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// queue creates an SQS queue that accepts messages up to maxBytes.
func queue(t *testing.T, maxBytes int) string {
	t.Helper()
	out, err := testenv.SQS().CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(testenv.Name(t, "q")),
		Attributes: map[string]string{"MaximumMessageSize": strconv.Itoa(maxBytes)}})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	return aws.ToString(out.QueueUrl)
}

// receive reads messages until it holds want of them or two minutes pass,
// then once more to catch extras.
func receive(t *testing.T, url string, want int) []types.Message {
	t.Helper()
	var got []types.Message
	deadline := time.Now().Add(2 * time.Minute)
	for len(got) < want && time.Now().Before(deadline) {
		out, err := testenv.SQS().ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.Messages...)
	}
	out, err := testenv.SQS().ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	return append(got, out.Messages...)
}

func messageIDs(t *testing.T, msgs []types.Message) []string {
	t.Helper()
	var ids []string
	for _, m := range msgs {
		var msg dispatch.Message
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &msg); err != nil {
			t.Fatalf("message body is not a dispatch.Message: %s", aws.ToString(m.Body))
		}
		ids = append(ids, msg.ID)
	}
	slices.Sort(ids)
	return ids
}

func newJob(t *testing.T, typ string, args int) *job.Job {
	t.Helper()
	return &job.Job{ID: uuid.Must(uuid.NewV7()).String(), Type: typ, Queue: "lambda", State: job.Available,
		Args: json.RawMessage(`["` + strings.Repeat("a", args) + `"]`), Meta: json.RawMessage(`{}`)}
}

// TestMessageIsAReferenceWhateverTheJobSize sends a job at the envelope
// limit, with a full error history and parent_results, to a queue that
// takes SQS's 256 KiB: the message is the job's reference, not the job.
func TestMessageIsAReferenceWhateverTheJobSize(t *testing.T) {
	t.Parallel()
	url := queue(t, awslimit.SQSMessageBytes)
	d := dispatch.New(testenv.SQS(), map[string]string{"lambda": url})
	j := newJob(t, "report.generate", job.MaxEnvelopeBytes-200)
	j.Attempt = 3
	j.ParentResults = json.RawMessage(`{"0":"` + strings.Repeat("r", 100<<10) + `"}`)
	for i := 0; i < job.MaxErrorHistory; i++ {
		j.Errors = append(j.Errors, job.ErrorInfo{Type: "x", Message: strings.Repeat("e", 4096)})
	}
	j.Timeout = 90 * time.Second
	check := time.UnixMilli(1795255500000)
	if err := d.Send(context.Background(), []dispatch.Delivery{{Job: j, Check: check}}); err != nil {
		t.Fatalf("send: %v", err)
	}
	msgs := receive(t, url, 1)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	body := aws.ToString(msgs[0].Body)
	var got dispatch.Message
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	// With the claim's hint: the timeout and the redelivery check.
	want := dispatch.Message{ID: j.ID, Type: "report.generate", Queue: "lambda", Attempt: 3,
		Claim: &dispatch.ClaimHint{TimeoutMS: 90000, CheckMS: check.UnixMilli()}}
	if got.Claim == nil || *got.Claim != *want.Claim || got.ID != want.ID || got.Type != want.Type || got.Queue != want.Queue || got.Attempt != want.Attempt || len(body) > 512 {
		t.Fatalf("message %s (%d bytes), want %+v", body, len(body), want)
	}
	if a := msgs[0].MessageAttributes; aws.ToString(a["ojs_job_id"].StringValue) != j.ID || aws.ToString(a["ojs_type"].StringValue) != j.Type {
		t.Fatalf("message attributes %+v", a)
	}
}

// TestRefusedMessageDoesNotHoldBackItsBatch: SQS refuses one entry of a
// batch as the sender's fault (here a message over a small queue's size
// limit); the other messages are sent, the refused one is logged and not
// returned as an error (which would make the stream retry its batch
// forever).
func TestRefusedMessageDoesNotHoldBackItsBatch(t *testing.T) {
	t.Parallel()
	url := queue(t, 1024)
	var logs bytes.Buffer
	d := dispatch.New(testenv.SQS(), map[string]string{"lambda": url})
	d.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	var ds []dispatch.Delivery
	var want []string
	for i := 0; i < 6; i++ {
		j := newJob(t, "demo.greet", 10)
		if i == 2 {
			j.Type = "t." + strings.Repeat("x", 1200) // a crafted job: no valid one is this long
		} else {
			want = append(want, j.ID)
		}
		ds = append(ds, dispatch.Delivery{Job: j})
	}
	if err := d.Send(context.Background(), ds); err != nil {
		t.Fatalf("send: %v", err)
	}
	slices.Sort(want)
	if got := messageIDs(t, receive(t, url, len(want))); !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	if !strings.Contains(logs.String(), ds[2].Job.ID) || !strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Fatalf("the refused message was not logged: %s", logs.String())
	}
}

// flaky passes every call to the SQS emulator, but answers the entries of
// the named jobs with a failure that may pass (SenderFault false) for
// their first fails sends, as SQS does under throttling.
type flaky struct {
	real  dispatch.SQSAPI
	mu    sync.Mutex
	fails map[string]int
	calls int
}

func (f *flaky) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	f.calls++
	var pass []types.SendMessageBatchRequestEntry
	var failed []types.BatchResultErrorEntry
	for _, e := range in.Entries {
		id := aws.ToString(e.MessageAttributes["ojs_job_id"].StringValue)
		if f.fails[id] > 0 {
			f.fails[id]--
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("injected"), SenderFault: false})
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

func TestFailedEntryIsRetriedAloneAndReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fails int
	}{{"passes on retry", 1}, {"keeps failing", 100}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := queue(t, awslimit.SQSMessageBytes)
			var ds []dispatch.Delivery
			var ids []string
			for i := 0; i < 5; i++ {
				j := newJob(t, "demo.greet", 10)
				ds = append(ds, dispatch.Delivery{Job: j})
				ids = append(ids, j.ID)
			}
			bad := ids[3]
			f := &flaky{real: testenv.SQS(), fails: map[string]int{bad: tc.fails}}
			err := dispatch.New(f, map[string]string{"lambda": url}).Send(context.Background(), ds)
			want := slices.Clone(ids)
			if tc.fails > 1 {
				var se *dispatch.SendError
				if !errors.As(err, &se) || !slices.Equal(se.JobIDs, []string{bad}) {
					t.Fatalf("send: %v, want a SendError naming %s", err, bad)
				}
				want = slices.DeleteFunc(want, func(id string) bool { return id == bad })
			} else if err != nil {
				t.Fatalf("send: %v", err)
			}
			slices.Sort(want)
			// Every other message is sent exactly once: a failed entry is
			// retried alone, not with its batch.
			if got := messageIDs(t, receive(t, url, len(want))); !slices.Equal(got, want) {
				t.Fatalf("received %v, want %v", got, want)
			}
		})
	}
}

// TestDeliveryForAQueueNotPushModeHereHoldsNothingBack: a job written
// while its queue was push-mode, read by a function deployed without that
// queue, is skipped; the other deliveries are sent and no error makes the
// stream batch (or the sweep) fail on it every time.
func TestDeliveryForAQueueNotPushModeHereHoldsNothingBack(t *testing.T) {
	t.Parallel()
	url := queue(t, awslimit.SQSMessageBytes)
	d := dispatch.New(testenv.SQS(), map[string]string{"lambda": url})
	ok := newJob(t, "report.generate", 100)
	gone := newJob(t, "report.generate", 100)
	gone.Queue = "no-longer-push"
	if err := d.Send(context.Background(), []dispatch.Delivery{{Job: gone}, {Job: ok}}); err != nil {
		t.Fatalf("send: %v", err)
	}
	msgs := receive(t, url, 1)
	if len(msgs) != 1 || !strings.Contains(aws.ToString(msgs[0].Body), ok.ID) {
		t.Fatalf("received %v, want only %s", msgs, ok.ID)
	}
}
