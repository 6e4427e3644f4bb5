// Package dispatch sends push-mode jobs to their SQS queues. A message body
// is the job's OJS JSON envelope (ojs-json-format.md), which is what OJS
// serverless adapters in other languages expect; consumers must still
// check DynamoDB before running anything, because a message is only a hint
// that a job may be ready (it can be duplicated, late or stale).
package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// SQSAPI is the part of the SQS client the dispatcher uses.
type SQSAPI interface {
	SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ SQSAPI = (*sqs.Client)(nil)

// MaxDelay is the longest SQS message delay; later deliveries are left to
// the sweeper.
const MaxDelay = 15 * time.Minute

// batchBytes keeps a SendMessageBatch under the oldest SQS payload limit.
const batchBytes = 250 << 10

// Delivery is one job to send, after Delay.
type Delivery struct {
	Job   *job.Job
	Delay time.Duration
}

// Dispatcher sends jobs to the SQS queue of their OJS queue.
type Dispatcher struct {
	sqs  SQSAPI
	urls map[string]string
}

// New returns a dispatcher; urls maps push-mode OJS queue names to SQS
// queue URLs.
func New(client SQSAPI, urls map[string]string) *Dispatcher {
	return &Dispatcher{sqs: client, urls: urls}
}

// ParseQueueURLs parses the OJS_PUSH_QUEUES value: a JSON object mapping
// OJS queue names to SQS queue URLs. Empty means no push-mode queues.
func ParseQueueURLs(s string) (map[string]string, error) {
	m := map[string]string{}
	if s == "" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("parse push queue map: %w", err)
	}
	for q, u := range m {
		if err := job.ValidateQueue(q); err != nil || u == "" {
			return nil, fmt.Errorf("parse push queue map: bad entry %q=%q", q, u)
		}
	}
	return m, nil
}

// Queues lists the push-mode queue names.
func (d *Dispatcher) Queues() []string {
	out := make([]string, 0, len(d.urls))
	for q := range d.urls {
		out = append(out, q)
	}
	return out
}

// Send sends the deliveries, grouped per queue in batches of up to ten. It
// returns an error naming the jobs that could not be sent; callers retry
// (SQS deduplicates nothing: a duplicate is harmless, a loss is not).
func (d *Dispatcher) Send(ctx context.Context, ds []Delivery) error {
	byQueue := map[string][]types.SendMessageBatchRequestEntry{}
	for _, dl := range ds {
		if _, ok := d.urls[dl.Job.Queue]; !ok {
			return fmt.Errorf("dispatch job %s: queue %q is not a push-mode queue", dl.Job.ID, dl.Job.Queue)
		}
		body, err := json.Marshal(dl.Job)
		if err != nil {
			return fmt.Errorf("encode job %s: %w", dl.Job.ID, err)
		}
		delay := dl.Delay
		if delay < 0 {
			delay = 0
		}
		if delay > MaxDelay {
			delay = MaxDelay
		}
		byQueue[dl.Job.Queue] = append(byQueue[dl.Job.Queue], types.SendMessageBatchRequestEntry{
			Id:           aws.String(strconv.Itoa(len(byQueue[dl.Job.Queue]))),
			MessageBody:  aws.String(string(body)),
			DelaySeconds: int32((delay + time.Second - 1) / time.Second),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"ojs_job_id": {DataType: aws.String("String"), StringValue: aws.String(dl.Job.ID)},
				"ojs_type":   {DataType: aws.String("String"), StringValue: aws.String(dl.Job.Type)},
			},
		})
	}
	var errs []error
	for q, entries := range byQueue {
		for len(entries) > 0 {
			n, size := 0, 0
			for n < len(entries) && n < 10 && (n == 0 || size+len(aws.ToString(entries[n].MessageBody)) <= batchBytes) {
				size += len(aws.ToString(entries[n].MessageBody))
				n++
			}
			if err := d.sendBatch(ctx, d.urls[q], entries[:n]); err != nil {
				errs = append(errs, err)
			}
			entries = entries[n:]
		}
	}
	return errors.Join(errs...)
}

func (d *Dispatcher) sendBatch(ctx context.Context, url string, entries []types.SendMessageBatchRequestEntry) error {
	for try := 0; try < 3 && len(entries) > 0; try++ {
		out, err := d.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			if try == 2 {
				return fmt.Errorf("send %d messages to %s: %w", len(entries), url, err)
			}
			continue
		}
		if len(out.Failed) == 0 {
			return nil
		}
		failed := map[string]bool{}
		for _, f := range out.Failed {
			failed[aws.ToString(f.Id)] = true
		}
		var retry []types.SendMessageBatchRequestEntry
		for _, e := range entries {
			if failed[aws.ToString(e.Id)] {
				retry = append(retry, e)
			}
		}
		entries = retry
	}
	if len(entries) > 0 {
		return fmt.Errorf("send to %s: %d messages failed", url, len(entries))
	}
	return nil
}
