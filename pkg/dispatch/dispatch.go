// Package dispatch sends push-mode jobs to their SQS queues. A message is a
// small reference to a job (Message), never the job itself, and only a hint
// that it may be ready: the consumer's conditional claim decides.
package dispatch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
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

// tries bounds the sends of one entry that fails for a reason that may
// pass (throttling, a service error); the SDK's own retries come on top.
const tries = 3

// Message is the body of every SQS message the product sends: which job
// may be ready, with the OJS envelope's field names.
type Message struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	Queue string `json:"queue"`
	// Attempt is the number of attempts made when the message was sent
	// (0 before the first): a hint for logs; the claim decides.
	Attempt int `json:"attempt"`
	// Claim is set on a message sent as its job became available: what the
	// worker's claim needs to skip reading the job first (ClaimDelivered).
	Claim *ClaimHint `json:"claim,omitempty"`
}

// ClaimHint is what a claim of an available job needs from the job.
type ClaimHint struct {
	// TimeoutMS is the job's execution timeout (it bounds the lease).
	TimeoutMS int64 `json:"timeout_ms"`
	// CheckMS is the job's redelivery check as written (Unix ms), which a
	// claim keeps as its lease's due entry when it falls after the lease.
	CheckMS int64 `json:"check_ms,omitempty"`
}

// NewMessage returns the message for delivery d.
func NewMessage(d Delivery) Message {
	j := d.Job
	m := Message{ID: j.ID, Type: j.Type, Queue: j.Queue, Attempt: j.Attempt}
	if !d.Check.IsZero() && j.State == job.Available {
		timeout := cmp.Or(max(j.Timeout, 0), job.DefaultTimeout)
		m.Claim = &ClaimHint{TimeoutMS: timeout.Milliseconds(), CheckMS: d.Check.UnixMilli()}
	}
	return m
}

// Delivery is one job to send, after Delay.
type Delivery struct {
	Job   *job.Job
	Delay time.Duration
	// Check is the redelivery check of an available job as written with Job
	// (zero when unknown); when set, the message carries a ClaimHint.
	Check time.Time
}

// SendError reports the jobs whose messages could not be sent for a reason
// that may pass; a later send of the same jobs can succeed.
type SendError struct {
	// JobIDs lists the jobs not sent.
	JobIDs []string
	// Err describes the failures.
	Err error
}

func (e *SendError) Error() string {
	return fmt.Sprintf("%d push-mode job messages were not sent: %v", len(e.JobIDs), e.Err)
}

func (e *SendError) Unwrap() error { return e.Err }

// Dispatcher sends jobs to the SQS queue of their OJS queue.
type Dispatcher struct {
	sqs  SQSAPI
	urls map[string]string
	// Logger receives the messages that can never be sent. Default
	// slog.Default().
	Logger *slog.Logger
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
func (d *Dispatcher) Queues() []string { return slices.Collect(maps.Keys(d.urls)) }

func (d *Dispatcher) log() *slog.Logger { return cmp.Or(d.Logger, slog.Default()) }

// entry is one message to send with the job it stands for.
type entry struct {
	jobID string
	e     types.SendMessageBatchRequestEntry
	size  int
}

// messageSize is what SQS counts against its message size limit: the body
// and each message attribute's name, data type and value.
func messageSize(e types.SendMessageBatchRequestEntry) int {
	n := len(aws.ToString(e.MessageBody))
	for k, v := range e.MessageAttributes {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// Send sends the deliveries, grouped per queue in batches of up to ten
// messages and awslimit.SQSBatchBytes; a failed entry of a batch is retried
// alone. A message that can never be sent (SQS refuses it as the sender's
// fault, or its queue is not push-mode here) is logged and skipped: its job
// stays available, with its redelivery check, and failing the call would
// hold back the other messages on every retry. Messages that may still be
// sent (throttling, service errors) are returned as a *SendError naming
// their jobs; callers retry (a duplicate is harmless, a loss is not).
func (d *Dispatcher) Send(ctx context.Context, ds []Delivery) error {
	byQueue := map[string][]entry{}
	for _, dl := range ds {
		if _, ok := d.urls[dl.Job.Queue]; !ok {
			d.log().ErrorContext(ctx, "push-mode job of a queue that is not push-mode here; not sent (FETCH can still claim it)",
				"job_id", dl.Job.ID, "queue", dl.Job.Queue)
			continue
		}
		body, err := json.Marshal(NewMessage(dl))
		if err != nil {
			return fmt.Errorf("encode message for job %s: %w", dl.Job.ID, err)
		}
		delay := min(max(dl.Delay, 0), MaxDelay)
		e := types.SendMessageBatchRequestEntry{
			Id:           aws.String(strconv.Itoa(len(byQueue[dl.Job.Queue]))),
			MessageBody:  aws.String(string(body)),
			DelaySeconds: int32((delay + time.Second - 1) / time.Second),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"ojs_job_id": {DataType: aws.String("String"), StringValue: aws.String(dl.Job.ID)},
				"ojs_type":   {DataType: aws.String("String"), StringValue: aws.String(dl.Job.Type)},
			},
		}
		size := messageSize(e)
		if size > awslimit.SQSMessageBytes {
			// Cannot happen for a valid job (ids, types and queue names
			// are short), but a message SQS must refuse is never sent.
			d.log().ErrorContext(ctx, "push-mode job message exceeds the SQS message size; left for the sweeper",
				"job_id", dl.Job.ID, "queue", dl.Job.Queue, "message_bytes", size, "max_bytes", awslimit.SQSMessageBytes)
			continue
		}
		byQueue[dl.Job.Queue] = append(byQueue[dl.Job.Queue], entry{jobID: dl.Job.ID, e: e, size: size})
	}
	var failed []string
	var errs []error
	for q, entries := range byQueue {
		for len(entries) > 0 {
			n, size := 0, 0
			for n < len(entries) && n < 10 && size+entries[n].size <= awslimit.SQSBatchBytes {
				size += entries[n].size
				n++
			}
			ids, err := d.sendBatch(ctx, q, entries[:n])
			failed, errs = append(failed, ids...), append(errs, err) // errors.Join drops nils
			entries = entries[n:]
		}
	}
	if len(failed) > 0 {
		return &SendError{JobIDs: failed, Err: errors.Join(errs...)}
	}
	return nil
}

// sendBatch sends one batch and returns the jobs whose messages may still
// be sent later (with why); messages that can never be sent are logged.
func (d *Dispatcher) sendBatch(ctx context.Context, queue string, entries []entry) ([]string, error) {
	url := d.urls[queue]
	var lastErr error
	for try := 0; try < tries && len(entries) > 0; try++ {
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: make([]types.SendMessageBatchRequestEntry, len(entries))}
		for i, e := range entries {
			in.Entries[i] = e.e
		}
		out, err := d.sqs.SendMessageBatch(ctx, in)
		if err != nil {
			if senderFault(err) {
				if len(entries) == 1 {
					d.poison(ctx, queue, entries[0], err.Error())
					return nil, nil
				}
				// The request as a whole was refused: send each message
				// alone so that one bad message does not keep the others.
				var ids []string
				var errs []error
				for _, e := range entries {
					f, err := d.sendBatch(ctx, queue, []entry{e})
					ids, errs = append(ids, f...), append(errs, err)
				}
				return ids, errors.Join(errs...)
			}
			lastErr = fmt.Errorf("send %d messages to %s: %w", len(entries), url, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		byID := map[string]entry{}
		for _, e := range entries {
			byID[aws.ToString(e.e.Id)] = e
		}
		var retry []entry
		for _, f := range out.Failed {
			e, ok := byID[aws.ToString(f.Id)]
			if !ok {
				continue
			}
			why := aws.ToString(f.Code) + ": " + aws.ToString(f.Message)
			if f.SenderFault {
				d.poison(ctx, queue, e, why)
				continue
			}
			lastErr = fmt.Errorf("send message for job %s to %s: %s", e.jobID, url, why)
			retry = append(retry, e)
		}
		entries = retry
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.jobID
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return ids, lastErr
}

// poison logs a message SQS refused as the sender's fault (it can never be
// sent).
func (d *Dispatcher) poison(ctx context.Context, queue string, e entry, why string) {
	d.log().ErrorContext(ctx, "SQS refused a push-mode job message; left for the sweeper",
		"job_id", e.jobID, "queue", queue, "message_bytes", e.size, "error", why)
}

// senderFault reports whether err is SQS refusing the request for what it
// carries (not throttling, a missing queue or permissions): the same request
// cannot succeed, but its messages sent one by one may.
func senderFault(err error) bool {
	ae, ok := errors.AsType[smithy.APIError](err)
	if !ok {
		return false
	}
	code := ae.ErrorCode()
	for _, c := range []string{"InvalidParameterValue", "InvalidMessageContents", "BatchRequestTooLong", "MessageTooLong",
		"BatchEntryIdsNotDistinct", "TooManyEntriesInBatchRequest", "InvalidBatchEntryId", "InvalidAttributeValue", "UnsupportedOperation"} {
		if strings.HasSuffix(code, c) {
			return true
		}
	}
	return false
}
