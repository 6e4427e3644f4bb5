package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Message is one SQS delivery.
type Message struct {
	// ID is the SQS message id (reported back on failure).
	ID   string
	Body []byte
}

// Sender re-sends a job message with a delay (implemented by
// *dispatch.Dispatcher).
type Sender interface {
	Send(ctx context.Context, ds []dispatch.Delivery) error
}

// Processor runs SQS deliveries of push-mode jobs.
type Processor struct {
	Service *lifecycle.Service
	Items   lifecycle.ItemStore
	Mux     *Mux
	Sender  Sender
	// WorkerID identifies this function instance in claims. Default
	// "lambda".
	WorkerID string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// CancelPoll is how often the job of a handler still running is read:
	// once it was cancelled (or its attempt taken over), the handler's
	// context is cancelled (ojs-core.md 7.6). The first read is CancelPoll
	// after the handler starts. Default 5 s; negative turns it off.
	CancelPoll time.Duration
}

// DefaultCancelPoll is Processor.CancelPoll's default.
const DefaultCancelPoll = 5 * time.Second

// errJobGone is the cause a running handler's context is cancelled with
// when its job was cancelled, or its attempt is no longer the job's.
var errJobGone = errors.New("the job was cancelled, or its attempt ended, while the handler ran")

// stopMargin is kept free before the invocation deadline to record the
// outcome.
const stopMargin = 3 * time.Second

// ackMargin is how long before the claim's lease ends the handler is
// stopped, so that its outcome is written while the lease holds (the ACK's
// time is read on this process's clock, as the lease's was).
const ackMargin = 250 * time.Millisecond

// Process runs a batch of messages concurrently and returns the ids of the
// messages that must be delivered again (infrastructure failures only: a
// job failure is recorded in DynamoDB and its message is done).
func (p *Processor) Process(ctx context.Context, msgs []Message) []string {
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for _, m := range msgs {
		wg.Go(func() {
			if err := p.processOne(ctx, m); err != nil {
				p.log().ErrorContext(ctx, "message failed; SQS will deliver it again", "message_id", m.ID, "job_id", messageJobID(m.Body), "error", err.Error())
				mu.Lock()
				failed = append(failed, m.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}

// messageJobID returns the job id of a message body (an OJS envelope), or
// "" when it has none. Only for logs: it decodes the body again.
func messageJobID(body []byte) string {
	var env struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &env)
	return env.ID
}

func (p *Processor) log() *slog.Logger { return cmp.Or(p.Logger, slog.Default()) }

func (p *Processor) processOne(ctx context.Context, m Message) error {
	// The body is a dispatch.Message (an older whole envelope reads the same).
	var env dispatch.Message
	if err := json.Unmarshal(m.Body, &env); err != nil || job.ValidateID(env.ID) != nil {
		// A message that names no job can never succeed: drop it.
		p.log().WarnContext(ctx, "dropping message that is not an OJS job message", "message_id", m.ID)
		return nil
	}
	lease := job.DefaultTimeout
	if dl, ok := ctx.Deadline(); ok {
		lease = time.Until(dl) + stopMargin
	}
	d, err := p.Service.ClaimDelivered(ctx, p.Items, env, cmp.Or(p.WorkerID, "lambda"), lease)
	if err != nil {
		return fmt.Errorf("claim job %s: %w", env.ID, err)
	}
	if d.RetryIn > 0 {
		j, err := p.Service.Info(ctx, env.ID)
		if err != nil {
			return err
		}
		return p.Sender.Send(ctx, []dispatch.Delivery{{Job: j, Delay: d.RetryIn}})
	}
	if d.Job == nil {
		return nil
	}
	if err := fault.Hit(fault.WorkerAfterClaim); err != nil {
		return err
	}
	return p.run(ctx, d.Job)
}

// run executes a claimed job and records its outcome.
func (p *Processor) run(ctx context.Context, j *job.Job) error {
	log := p.log().With("job_id", j.ID, "type", j.Type, "attempt", j.Attempt)
	h, ok := p.Mux.Handler(j.Type)
	if !ok {
		log.WarnContext(ctx, "no handler registered for job type; discarding")
		return p.record(ctx, j, func() error {
			_, err := p.Service.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "handler_not_found", Code: lifecycle.CodeDiscard,
				Message: fmt.Sprintf("No handler is registered for job type %q in the worker function.", j.Type)}, j.Attempt)
			return err
		})
	}
	// The handler runs until its timeout, but never past the claim's lease
	// less ackMargin (an ACK after the lease's end is refused).
	start := time.Now()
	end := start.Add(j.Timeout)
	if left, ok := p.leaseLeft(j); ok && start.Add(left-ackMargin).Before(end) {
		end = start.Add(left - ackMargin)
	}
	cutByInvocation := false // the function's own timeout ends the run first
	if dl, ok := ctx.Deadline(); ok && dl.Add(-stopMargin).Before(end) {
		end = dl.Add(-stopMargin)
		cutByInvocation = true
	}
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	runCtx, stop := context.WithCancelCause(runCtx)
	defer stop(nil)
	go p.watch(runCtx, j, stop)
	result, herr := safeRun(runCtx, h, &Job{ID: j.ID, Type: j.Type, Queue: j.Queue, Args: j.Args, Meta: j.Meta, Attempt: j.Attempt, MaxAttempts: j.Retry.MaxAttempts,
		WorkflowID: j.WorkflowID, ParentResults: j.ParentResults, LastCheckpoint: j.LastCheckpoint, progress: func(ctx context.Context, in lifecycle.ProgressInput) error {
			_, err := p.Service.ReportProgress(ctx, j.ID, in)
			return err
		}})
	if errors.Is(context.Cause(runCtx), errJobGone) {
		// Its outcome would be refused: nothing to record.
		log.WarnContext(ctx, "job was cancelled (or its attempt ended) while its handler ran; the handler was stopped and its outcome is not recorded",
			"duration_ms", time.Since(start).Milliseconds())
		return nil
	}
	herr = cmp.Or(herr, runCtx.Err())
	if herr != nil && cutByInvocation && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		// The execution environment is about to stop, not the job's own
		// timeout: an interrupted attempt (ojs-graceful-shutdown.md 7.2),
		// retried per the job's policy.
		herr = &Error{Type: lifecycle.ErrShutdownTimeout, Message: "The worker function's invocation ended before the handler finished (the function timeout is shorter than the job's timeout)."}
	}
	dur := time.Since(start)
	if herr == nil {
		raw, err := json.Marshal(result)
		if err != nil {
			herr = NonRetryable("invalid_result", "The handler's result is not JSON-encodable: "+err.Error())
		} else if len(raw) > job.MaxResultBytes || store.PackedBytes(raw) > store.MaxPackedResultBytes {
			// ACK would refuse it (413) and the job would stay active
			// until its lease expired, then be retried to no end.
			herr = NonRetryable("result_too_large", fmt.Sprintf("The handler's result is %d bytes; a job's result is at most %d bytes, %d compressed (store large outputs elsewhere and return a reference).", len(raw), job.MaxResultBytes, store.MaxPackedResultBytes))
		} else {
			if string(raw) == "null" {
				raw = nil
			}
			if err := fault.Hit(fault.WorkerAfterHandler); err != nil {
				return err
			}
			err := p.record(ctx, j, func() error {
				_, err := p.Service.Ack(ctx, j.ID, raw, j.Attempt)
				return err
			})
			if err == nil {
				log.InfoContext(ctx, "job handler succeeded", "duration_ms", dur.Milliseconds())
				err = fault.Hit(fault.WorkerAfterAck)
			}
			return err
		}
	}
	typ, code, msg, details := describe(herr)
	var raw json.RawMessage
	if details != nil {
		raw, _ = json.Marshal(details)
	}
	log.InfoContext(ctx, "job handler failed", "duration_ms", dur.Milliseconds(), "error_type", typ)
	return p.record(ctx, j, func() error {
		_, err := p.Service.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: typ, Code: code, Message: msg, Details: raw}, j.Attempt)
		return err
	})
}

// watch reads job j every CancelPoll while its handler runs and stops the
// handler with errJobGone once the job is no longer this attempt's.
func (p *Processor) watch(ctx context.Context, j *job.Job, stop context.CancelCauseFunc) {
	every := cmp.Or(p.CancelPoll, DefaultCancelPoll)
	if every < 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		it, err := p.Items.GetItem(ctx, j.ID)
		if ctx.Err() != nil {
			return
		}
		gone := errors.Is(err, store.ErrNotFound)
		if err == nil {
			gone = it.Job.State != job.Active || it.Job.Attempt != j.Attempt
		}
		if gone {
			stop(errJobGone)
			return
		}
	}
}

// leaseLeft is how long the claim's lease of j still holds, on the
// service's clock (the one the lease was written with).
func (p *Processor) leaseLeft(j *job.Job) (time.Duration, bool) {
	if j.LeaseUntil == nil {
		return 0, false
	}
	return j.LeaseUntil.Sub(p.Service.Now()), true
}

// record writes an attempt's outcome, again while the write fails for a
// reason that may pass and the claim's lease holds (returned, the error
// would lose the outcome: the redelivered message finds the job running
// elsewhere). The write is pinned to the attempt, so one that landed
// although its answer was lost makes the next try a conflict, which counts
// as written.
func (p *Processor) record(ctx context.Context, j *job.Job, write func() error) error {
	wait := 50 * time.Millisecond
	for {
		werr := write()
		if e := ojserr.As(werr); werr != nil && e.Code == ojserr.Conflict && e.Details["current_state"] == string(job.Cancelled) {
			// Cancelled while it ran (ojs-core.md 7.6): say so, for operators.
			p.log().WarnContext(ctx, "job was cancelled while its handler ran; its outcome is not recorded", "job_id", j.ID, "attempt", j.Attempt)
		}
		err := recordErr(werr)
		if err == nil {
			return nil
		}
		wait = min(2*wait, 2*time.Second)
		if left, ok := p.leaseLeft(j); !ok || left <= wait {
			return err
		}
		p.log().WarnContext(ctx, "recording the attempt's outcome failed; trying again", "job_id", j.ID, "error", err.Error())
		if !ctxsleep.Sleep(ctx, wait) {
			return err
		}
	}
}

// recordErr treats a conflict (the job was cancelled or its lease taken
// over meanwhile) as done: the late outcome changes nothing.
func recordErr(err error) error {
	if err == nil || ojserr.Is(err, ojserr.Conflict) || ojserr.Is(err, ojserr.NotFound) {
		return nil
	}
	if oe, ok := errors.AsType[*ojserr.Error](err); ok && oe.Status() < 500 {
		return nil
	}
	return err
}

func safeRun(ctx context.Context, h Handler, j *Job) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &Error{Type: "handler_panic", Message: fmt.Sprintf("panic: %v", r), Details: map[string]any{"stack": string(debug.Stack())}}
		}
	}()
	return h.Handle(ctx, j)
}
