// Package lifecycle implements the OJS job operations (PUSH, INFO, CANCEL,
// ACTIVATE, FETCH, ACK, FAIL, BEAT) and the time-driven moves (promotion of
// due jobs, lease expiry) on top of pkg/store. It decides; the store applies
// each decision as one conditional write. Both the API function and the
// push-mode worker use it, so a job follows the same rules in both modes.
package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Store is the persistence the service needs (implemented by *store.Store).
type Store interface {
	Create(ctx context.Context, jobs []*job.Job, redeliverAfter time.Duration) error
	Get(ctx context.Context, id string) (*job.Job, error)
	GetItem(ctx context.Context, id string) (store.Item, error)
	CreateUnique(ctx context.Context, j *job.Job, redeliverAfter time.Duration, until, now time.Time, holder string, holderVersion int64) error
	UniqueHolder(ctx context.Context, key string) (store.UniqueLock, error)
	ReviveUnique(ctx context.Context, t store.Transition, key string, now time.Time, holder string) (*job.Job, error)
	Apply(ctx context.Context, t store.Transition) (*job.Job, error)
	Ready(ctx context.Context, queue string, limit int) ([]store.Item, error)
	ReadyPush(ctx context.Context, queue string, limit int) ([]store.Item, error)
	Due(ctx context.Context, queue string, now time.Time, limit int) ([]store.Item, error)
	DueNow(ctx context.Context, queue string, now time.Time, limit int) ([]store.Item, error)
	Dead(ctx context.Context, queue string, limit int, cursor string) (store.Page, error)
	DeadOldest(ctx context.Context, queue string, since, before time.Time, limit int, cursor string) (store.Page, error)
	EnsureQueue(ctx context.Context, name string, now time.Time) error
	Queues(ctx context.Context) ([]string, error)
	DeleteDead(ctx context.Context, id string) error
	SetQueuePaused(ctx context.Context, name string, paused bool, now time.Time) (*store.QueueInfo, error)
	QueueInfos(ctx context.Context) ([]store.QueueInfo, error)
	QueuePaused(ctx context.Context, name string) (bool, error)
	FetchState(ctx context.Context, queues []string, workerID string) (store.FetchState, error)
	SetQueueRate(ctx context.Context, name string, perSecond float64, now time.Time) error
	TakeRateTokens(ctx context.Context, name string, n int, perSecond float64, now time.Time) (bool, error)
	CountQueue(ctx context.Context, queue string) (store.QueueCounts, error)
	CountCompleted(ctx context.Context, queue string, since time.Time) (int, error)
	QueryEvents(ctx context.Context, f events.Filter, now time.Time) (*events.Page, error)
	WorkerBeat(ctx context.Context, w store.WorkerInfo, now time.Time) (*store.WorkerInfo, error)
	SetWorkerDirective(ctx context.Context, id, directive string, now time.Time) (*store.WorkerInfo, error)
	Workers(ctx context.Context, limit int) ([]store.WorkerInfo, error)
	ClaimPruneRun(ctx context.Context, now, next time.Time) (int64, bool, time.Time, error)
	FinishPruneRun(ctx context.Context, run int64, r store.PruneRun, now time.Time, next *time.Time) error
	PruneState(ctx context.Context) (*store.PruneRun, error)
	OldestDead(ctx context.Context, queue string, before *time.Time, limit int) ([]store.DeadRef, error)
	CountDead(ctx context.Context, queue string) (int, error)
	PruneDead(ctx context.Context, ref store.DeadRef, now time.Time) (bool, error)
}

var _ Store = (*store.Store)(nil)

// Finisher advances the workflow of a job that reached a terminal state
// (implemented by *workflow.Engine).
type Finisher interface {
	JobFinished(ctx context.Context, j *job.Job) error
}

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
	// PushQueues names the push-mode queues (delivered through SQS to the
	// worker function). Jobs on other queues wait for FETCH.
	PushQueues []string
	// RedeliverAfter is how long an available push-mode job may wait
	// unclaimed before the sweeper sends it to SQS again. Default 5 min.
	RedeliverAfter time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Rand returns uniform floats in [0,1) for retry jitter. Default
	// math/rand/v2.
	Rand func() float64
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// DeadRetention is the dead letter retention policy. Zero fields mean
	// the defaults (180 days, 10,000 jobs, pruned every 5 minutes).
	DeadRetention Retention
	// Workflows, when set, advances a workflow job's workflow in the
	// request that finished the job, before it answers (the stream
	// function verifies it behind every request). Nil: the stream
	// function alone advances workflows.
	Workflows Finisher
}

// Service runs the job operations.
type Service struct {
	st     Store
	push   map[string]bool
	redel  time.Duration
	now    func() time.Time
	rnd    func() float64
	log    *slog.Logger
	queues sync.Map // queue names already registered by this process
	rates  sync.Map // queue -> rate limit this process last recorded
	pauses pauseCache
	// retention is the dead letter retention policy.
	retention Retention
	// workers remembers which workers are quiet or terminating.
	workers stoppingWorkers
	// pruneAfter (Unix ms) is when this process may next try to claim a
	// pruning run: the claim is a write, not to be spent on every sweep.
	pruneAfter atomic.Int64
	// flow advances workflows inline (Config.Workflows).
	flow Finisher
}

// New returns a service on st.
func New(st Store, c Config) *Service {
	s := &Service{st: st, push: map[string]bool{}, redel: c.RedeliverAfter, now: c.Now, rnd: c.Rand, log: c.Logger,
		retention: c.DeadRetention.withDefaults(), flow: c.Workflows}
	for _, q := range c.PushQueues {
		s.push[q] = true
	}
	if s.redel <= 0 {
		s.redel = 5 * time.Minute
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.rnd == nil {
		s.rnd = rand.Float64
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// Now returns the service clock's time.
func (s *Service) Now() time.Time { return s.now().UTC() }

// RedeliverAfter is the redelivery delay for unclaimed push-mode jobs.
func (s *Service) RedeliverAfter() time.Duration { return s.redel }

// IsPush reports whether queue is a push-mode queue.
func (s *Service) IsPush(queue string) bool { return s.push[queue] }

// SetWorkflows sets the Finisher after construction (the workflow engine
// and the service refer to each other).
func (s *Service) SetWorkflows(f Finisher) { s.flow = f }

// finished advances the workflow of a job the service just moved to a
// terminal state, before the request answers. A failure here is logged,
// not returned: the job's change is committed, and the stream function
// verifies every finished workflow job and advances what a request left
// undone.
func (s *Service) finished(ctx context.Context, j *job.Job) {
	if s.flow == nil || j == nil || j.WorkflowID == "" || !j.State.Terminal() {
		return
	}
	if err := fault.Hit(fault.LifecycleBeforeAdvance); err != nil {
		s.log.WarnContext(ctx, "workflow not advanced inline; the stream function will", "job_id", j.ID, "workflow_id", j.WorkflowID, "error", err.Error())
		return
	}
	if err := s.flow.JobFinished(ctx, j); err != nil {
		s.log.WarnContext(ctx, "workflow not advanced inline; the stream function will", "job_id", j.ID, "workflow_id", j.WorkflowID, "error", err.Error())
	}
}

// Admit prepares jobs for writing, the one way every job is prepared
// whoever creates it (PUSH, batch PUSH, cron, workflows): push mode from
// its queue, the queue registered (once per process), and the queue's
// rate limit recorded when the job sets one.
func (s *Service) Admit(ctx context.Context, jobs []*job.Job) error {
	for _, j := range jobs {
		j.Push = s.push[j.Queue]
		if err := s.ensureQueue(ctx, j.Queue); err != nil {
			return ojserr.Backend(err)
		}
		if err := s.setRate(ctx, j); err != nil {
			return ojserr.Backend(err)
		}
	}
	return nil
}

// apiError maps store errors to API errors.
func apiError(err error, id, op string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return ojserr.NotFoundf("job", id)
	}
	var ce *store.ConflictError
	if errors.As(err, &ce) {
		return ojserr.StateConflict(ojserr.Conflict, "Cannot %s job in state '%s'.", op, ce.Current.State).
			With("job_id", id).With("current_state", string(ce.Current.State)).With("target_state", string(ce.Tried.To))
	}
	var oe *ojserr.Error
	if errors.As(err, &oe) {
		return oe
	}
	return ojserr.Backend(err)
}

// setRate records a job's options.rate_limit as its queue's FETCH rate
// (once per process and value).
func (s *Service) setRate(ctx context.Context, j *job.Job) error {
	if j.RateLimit <= 0 {
		return nil
	}
	if v, ok := s.rates.Load(j.Queue); ok && v.(float64) == j.RateLimit {
		return nil
	}
	if err := s.st.SetQueueRate(ctx, j.Queue, j.RateLimit, s.Now()); err != nil {
		return err
	}
	s.rates.Store(j.Queue, j.RateLimit)
	return nil
}

// EnsureQueue registers a queue name (once per process).
func (s *Service) EnsureQueue(ctx context.Context, q string) error { return s.ensureQueue(ctx, q) }

func (s *Service) ensureQueue(ctx context.Context, q string) error {
	if _, ok := s.queues.Load(q); ok {
		return nil
	}
	if err := s.st.EnsureQueue(ctx, q, s.Now()); err != nil {
		return err
	}
	s.queues.Store(q, true)
	return nil
}

// Push validates and creates one job.
func (s *Service) Push(ctx context.Context, raw []byte) (*job.Job, error) {
	jobs, err := s.PushBatch(ctx, [][]byte{raw})
	if err != nil {
		var oe *ojserr.Error
		if errors.As(err, &oe) {
			delete(oe.Details, "index")
		}
		return nil, err
	}
	return jobs[0], nil
}

// MaxBulk is the most jobs one batch PUSH holds (ojs-bulk-operations.md
// section 7: at least 1,000).
const MaxBulk = 1000

// PushBatch validates every job (one invalid job rejects the batch and
// nothing is written; the error names its index), then creates them: up
// to store.MaxBatch jobs in one DynamoDB transaction, all or none; larger
// batches in transactions of store.MaxBatch, each all or none. When a
// chunk fails, the jobs created so far are returned with a *PartialError
// naming every job that was not.
func (s *Service) PushBatch(ctx context.Context, raws [][]byte) ([]*job.Job, error) {
	if len(raws) == 0 {
		return nil, ojserr.Invalid("jobs", "The 'jobs' array must hold at least one job.")
	}
	if len(raws) > MaxBulk {
		return nil, ojserr.Invalid("jobs", "A batch holds at most %d jobs; got %d.", MaxBulk, len(raws)).With("max_batch_size", MaxBulk)
	}
	now := s.Now()
	jobs := make([]*job.Job, len(raws))
	seen := map[string]int{}
	for i, raw := range raws {
		e, err := job.ParseEnqueue(raw, now)
		if err != nil {
			oe := ojserr.As(err)
			if len(raws) > 1 {
				oe.Message = fmt.Sprintf("Batch validation failed: job at index %d: %s", i, oe.Message)
			}
			return nil, oe.With("index", i)
		}
		if prev, dup := seen[e.Job.ID]; dup {
			return nil, ojserr.Invalid("id", "Jobs at index %d and %d have the same id.", prev, i).With("index", i)
		}
		seen[e.Job.ID] = i
		jobs[i] = e.Job
	}
	for i, j := range jobs {
		if j.Unique != nil && len(jobs) > 1 {
			return nil, ojserr.Invalid("unique", "Unique policies are honoured on single PUSH only; job at index %d has one. Enqueue it with POST /ojs/v1/jobs.", i).With("index", i)
		}
	}
	// Admit first: it sets push mode, which the item sizes count.
	if err := s.Admit(ctx, jobs); err != nil {
		return nil, err
	}
	sizes, err := s.itemSizes(jobs)
	if err != nil {
		return nil, err
	}
	if jobs[0].Unique != nil {
		j, err := s.pushUnique(ctx, jobs[0])
		if err != nil {
			return nil, err
		}
		if !j.Deduplicated {
			s.log.InfoContext(ctx, "job pushed", "job_id", j.ID, "type", j.Type, "queue", j.Queue, "state", string(j.State), "push_mode", j.Push, "unique", true)
		}
		return []*job.Job{j}, nil
	}
	if len(jobs) > store.MaxBatch {
		return s.createChunked(ctx, jobs, sizes)
	}
	if err := s.st.Create(ctx, jobs, s.redel); err != nil {
		return nil, createChunkError(err, 0)
	}
	for _, j := range jobs {
		s.log.InfoContext(ctx, "job pushed", "job_id", j.ID, "type", j.Type, "queue", j.Queue, "state", string(j.State), "push_mode", j.Push)
	}
	return jobs, nil
}

func createChunkError(err error, offset int) *ojserr.Error {
	if oe, ok := asTooLarge(err); ok {
		return oe
	}
	var dup *store.DuplicateError
	if errors.As(err, &dup) {
		return ojserr.Newf(ojserr.Duplicate, "A job with id '%s' already exists.", dup.ID).With("existing_job_id", dup.ID).With("index", offset+dup.Index)
	}
	return ojserr.Backend(err)
}

// PartialError reports a large batch of which some chunks were created
// and some were not.
type PartialError struct {
	// Failed lists the jobs not created, by index in the request.
	Failed []BatchFailure
}

// BatchFailure is one job of a batch that was not created.
type BatchFailure struct {
	Index int           `json:"index"`
	JobID string        `json:"job_id"`
	Error *ojserr.Error `json:"error"`
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("%d jobs of the batch were not created", len(e.Failed))
}

// createChunked writes a large batch in transactions of up to
// store.MaxBatch jobs that each fit DynamoDB's transaction size (txChunks),
// four at a time, keeping request order in the result.
func (s *Service) createChunked(ctx context.Context, jobs []*job.Job, sizes []int) ([]*job.Job, error) {
	starts := txChunks(sizes)
	n := len(starts) - 1
	errs := make([]error, n)
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for c := 0; c < n; c++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(c int) {
			defer wg.Done()
			defer func() { <-sem }()
			errs[c] = s.st.Create(ctx, jobs[starts[c]:starts[c+1]], s.redel)
		}(c)
	}
	wg.Wait()
	var created []*job.Job
	var pe PartialError
	for c, err := range errs {
		chunk := jobs[starts[c]:starts[c+1]]
		if err == nil {
			created = append(created, chunk...)
			continue
		}
		ce := createChunkError(err, starts[c])
		for i, j := range chunk {
			pe.Failed = append(pe.Failed, BatchFailure{Index: starts[c] + i, JobID: j.ID, Error: ce})
		}
	}
	s.log.InfoContext(ctx, "batch pushed", "jobs", len(jobs), "created", len(created), "failed", len(pe.Failed), "chunks", n)
	if len(pe.Failed) > 0 {
		return created, &pe
	}
	return created, nil
}

// Info returns a job. An active job whose lease has ended is requeued (or
// discarded per its retry policy) first, so a read sees it as it is at the
// lease's end rather than as of the last sweep.
func (s *Service) Info(ctx context.Context, id string) (*job.Job, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	j, err := s.st.Get(ctx, id)
	if err != nil {
		return nil, apiError(err, id, "read")
	}
	if now := s.Now(); leaseOver(j, now) {
		// The job is requeued at its lease's end (ojs-worker-protocol.md
		// 5.5), not at the next sweep: the read makes the move the
		// sweeper would, with the same conditional write.
		moved, err := s.st.Apply(ctx, s.leaseExpiry(j, now, false))
		var ce *store.ConflictError
		switch {
		case err == nil:
			s.log.InfoContext(ctx, "due job resolved", "job_id", j.ID, "from", string(j.State), "to", string(moved.State))
			s.finished(ctx, moved)
			return moved, nil
		case errors.As(err, &ce) && ce.Current != nil:
			return ce.Current, nil // moved by someone else first
		default:
			return nil, apiError(err, id, "read")
		}
	}
	return j, nil
}

func validID(id string) error {
	if job.ValidateID(id) != nil {
		return ojserr.Invalid("id", "Job ids are lowercase hyphenated UUIDv7 strings; '%s' is not one.", truncate(id, 64))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Cancel cancels a job that has not finished and returns it with the state
// it left. Cancelling a finished job is a conflict.
func (s *Service) Cancel(ctx context.Context, id string) (*job.Job, job.State, error) {
	if err := validID(id); err != nil {
		return nil, "", err
	}
	before, err := s.st.Get(ctx, id)
	if err != nil {
		return nil, "", apiError(err, id, "cancel")
	}
	if before.State.Terminal() {
		return nil, "", ojserr.StateConflict(ojserr.InvalidRequest, "Cannot cancel job in terminal state '%s'.", before.State).
			With("job_id", id).With("current_state", string(before.State))
	}
	j, err := s.st.Apply(ctx, store.Cancel(id, s.Now(), before.State))
	if err != nil {
		// It moved meanwhile: retry once against its new state.
		var ce *store.ConflictError
		if errors.As(err, &ce) && !ce.Current.State.Terminal() {
			before = ce.Current
			j, err = s.st.Apply(ctx, store.Cancel(id, s.Now(), before.State))
		}
		if err != nil {
			return nil, "", apiError(err, id, "cancel")
		}
	}
	s.log.InfoContext(ctx, "job cancelled", "job_id", id, "previous_state", string(before.State))
	s.finished(ctx, j)
	return j, before.State, nil
}

// Activate moves a pending job to available.
func (s *Service) Activate(ctx context.Context, id string) (*job.Job, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	cur, err := s.st.Get(ctx, id)
	if err != nil {
		return nil, apiError(err, id, "activate")
	}
	if cur.State != job.Pending {
		return nil, ojserr.StateConflict(ojserr.InvalidRequest, "Cannot activate job in state '%s'. Only jobs in 'pending' state can be activated.", cur.State).
			With("job_id", id).With("current_state", string(cur.State))
	}
	j, err := s.st.Apply(ctx, store.Activate(cur, s.Now(), s.redel))
	return j, apiError(err, id, "activate")
}

// ErrorInput is a failure reported by a worker (FAIL) or a push-mode
// handler.
type ErrorInput struct {
	// Type is the error type matched against non_retryable_errors.
	Type string
	// Code is an OJS error code or a handler response code (RETRY,
	// DISCARD, DEAD_LETTER, FAIL) that overrides the retry policy.
	Code      string
	Message   string
	Retryable *bool
	Backtrace []string
	Details   json.RawMessage
	// Requeue returns the job to available at once instead of applying the
	// retry policy (the attempt still counts).
	Requeue bool
}

// errorType is the type matched against non_retryable_errors: the explicit
// type, else details.error_class, else the code.
func (in ErrorInput) errorType() string {
	if in.Type != "" {
		return in.Type
	}
	var d struct {
		ErrorClass string `json:"error_class"`
	}
	if len(in.Details) > 0 && json.Unmarshal(in.Details, &d) == nil && d.ErrorClass != "" {
		return d.ErrorClass
	}
	if in.Code != "" {
		return in.Code
	}
	return "handler_error"
}

// Handler response codes (ojs-retry.md section 7).
const (
	CodeRetry      = "RETRY"
	CodeDiscard    = "DISCARD"
	CodeDeadLetter = "DEAD_LETTER"
	CodeFail       = "FAIL"
)

// decide applies the retry policy to a failed attempt of j.
// Error types of attempts interrupted by a worker's graceful shutdown
// (ojs-graceful-shutdown.md 5.3 and 7.2).
const (
	ErrShutdown        = "ShutdownError"
	ErrShutdownTimeout = "ShutdownTimeout"
)

func (s *Service) decide(j *job.Job, in ErrorInput, now time.Time) store.Failure {
	typ := in.errorType()
	msg := in.Message
	if msg == "" {
		msg = "The handler failed without a message."
	}
	info := job.ErrorInfo{Type: truncate(typ, 1024), Code: truncate(in.Code, 1024), Message: truncate(msg, 4096), Retryable: in.Retryable,
		Details: in.Details, Attempt: j.Attempt, Timestamp: job.Timestamp(now)}
	// At most 50 lines of 1 KiB: an unbounded backtrace made the job item
	// larger than DynamoDB's 400 KB and the FAIL a 500.
	for _, l := range in.Backtrace[:min(len(in.Backtrace), 50)] {
		info.Backtrace = append(info.Backtrace, truncate(l, 1024))
	}
	retry := j.Retry.CanRetry(j.Attempt)
	switch strings.ToUpper(in.Code) {
	case CodeDiscard, CodeDeadLetter, CodeFail:
		retry = false
	}
	// An attempt interrupted by a worker's shutdown did not fail on its
	// own (ojs-graceful-shutdown.md 5.3): it is retried even if the worker
	// marked the error non-retryable; the policy still decides.
	interrupted := typ == ErrShutdown || typ == ErrShutdownTimeout
	if in.Retryable != nil && !*in.Retryable && !interrupted {
		retry = false
	}
	if j.Retry.IsNonRetryable(typ) {
		retry = false
	}
	f := store.Failure{Error: info, Retry: retry}
	if retry {
		f.NextAttempt = now.Add(j.Retry.Delay(j.Attempt, s.rnd))
	}
	return f
}

// Ack completes an active job. attempt > 0 pins the attempt being
// acknowledged (push-mode worker); pull-mode ACKs pass 0.
func (s *Service) Ack(ctx context.Context, id string, result json.RawMessage, attempt int) (*job.Job, error) {
	return s.ack(ctx, id, result, attempt, "")
}

// ack completes an active job; with workerID set, only if that worker
// holds its reservation (a condition of the same write, not a read first).
func (s *Service) ack(ctx context.Context, id string, result json.RawMessage, attempt int, workerID string) (*job.Job, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if len(result) > job.MaxResultBytes {
		return nil, ojserr.Newf(ojserr.PayloadTooLarge, "The result is %d bytes; the maximum is %d bytes.", len(result), job.MaxResultBytes).With("field", "result")
	}
	t := store.Complete(id, result, attempt, s.Now())
	if workerID != "" {
		t = t.HeldBy(workerID)
	}
	j, err := s.st.Apply(ctx, t)
	if err != nil {
		var ce *store.ConflictError
		if errors.As(err, &ce) && workerID != "" && ce.Current.State == job.Active && ce.Current.WorkerID != workerID && ce.Current.WorkerID != "" {
			return nil, notHolder("acknowledge", id, workerID)
		}
		if errors.As(err, &ce) && ce.Current.State == job.Active && (attempt == 0 || ce.Current.Attempt == attempt) {
			return nil, leaseEnded("acknowledge", ce.Current)
		}
		if errors.As(err, &ce) && attempt != 0 && ce.Current.Attempt != attempt {
			return nil, attemptOver("acknowledge", ce.Current, attempt)
		}
		if errors.As(err, &ce) {
			return nil, ojserr.StateConflict(ojserr.Conflict, "Cannot acknowledge job not in 'active' state. Current state: '%s'.", ce.Current.State).
				With("job_id", id).With("current_state", string(ce.Current.State)).With("expected_state", "active")
		}
		return nil, apiError(err, id, "acknowledge")
	}
	s.log.InfoContext(ctx, "job completed", "job_id", id, "attempt", j.Attempt)
	s.finished(ctx, j)
	return j, nil
}

// Nack records a failed attempt and applies the retry policy: the job
// becomes retryable (with next_attempt_at) or discarded.
func (s *Service) Nack(ctx context.Context, id string, in ErrorInput, attempt int) (*job.Job, error) {
	return s.nack(ctx, id, in, attempt, "")
}

// nack records a failed attempt; with workerID set, only if that worker
// holds the job's reservation (checked on the read, and a condition of the
// write).
func (s *Service) nack(ctx context.Context, id string, in ErrorInput, attempt int, workerID string) (*job.Job, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	for tries := 0; tries < 3; tries++ {
		cur, err := s.st.Get(ctx, id)
		if err != nil {
			return nil, apiError(err, id, "fail")
		}
		if attempt > 0 && cur.Attempt != attempt {
			return nil, attemptOver("fail", cur, attempt)
		}
		if cur.State != job.Active {
			return nil, ojserr.StateConflict(ojserr.Conflict, "Cannot fail job not in 'active' state. Current state: '%s'.", cur.State).
				With("job_id", id).With("current_state", string(cur.State)).With("expected_state", "active")
		}
		if workerID != "" && cur.WorkerID != workerID && cur.WorkerID != "" {
			return nil, notHolder("fail", id, workerID)
		}
		now := s.Now()
		if cur.LeaseUntil != nil && !cur.LeaseUntil.After(now) {
			return nil, leaseEnded("fail", cur)
		}
		f := s.decide(cur, in, now)
		t := store.Fail(cur, f, now)
		if in.Requeue {
			t = store.Requeue(cur, f.Error, now, s.redel)
		}
		if workerID != "" {
			t = t.HeldBy(workerID)
		}
		j, err := s.st.Apply(ctx, t)
		var ce *store.ConflictError
		if errors.As(err, &ce) {
			continue // a heartbeat or lease change raced us; read again
		}
		if err != nil {
			return nil, apiError(err, id, "fail")
		}
		s.log.InfoContext(ctx, "job failed", "job_id", id, "attempt", j.Attempt, "state", string(j.State), "error_type", f.Error.Type)
		s.finished(ctx, j)
		return j, nil
	}
	return nil, ojserr.Backend(fmt.Errorf("fail job %s: too much contention", id))
}

// FetchRequest is a FETCH.
type FetchRequest struct {
	Queues   []string
	Count    int
	WorkerID string
	// Visibility is the lease length; 0 uses the job's own or the default.
	Visibility time.Duration
	// MaxBytes bounds the answer: jobs are claimed only while the sum of
	// their store.FetchBytes stays within it, the first one counted twice
	// (the HTTP binding's answer repeats it as "job"). Default
	// DefaultFetchBytes.
	MaxBytes int
}

// MaxFetch bounds the jobs one FETCH returns.
const MaxFetch = 100

// MaxFetchQueues bounds the queues one FETCH names: each costs DynamoDB
// reads even when empty.
const MaxFetchQueues = 20

// MaxWorkerQueues bounds the queues a heartbeat lists.
const MaxWorkerQueues = 100

// Fetch claims up to Count jobs from the queues in order: highest priority
// first, FIFO within a priority. Due scheduled and retryable jobs of each
// queue are promoted first and expired leases requeued, so pull workers see
// them without waiting for the sweeper. It stops before the job that would
// take the answer past MaxBytes (that job and the rest stay available,
// their attempts untouched); a job that cannot fit an answer even alone is
// skipped and logged.
func (s *Service) Fetch(ctx context.Context, r FetchRequest) ([]*job.Job, error) {
	if len(r.Queues) == 0 {
		return nil, ojserr.Invalid("queues", "The 'queues' field must list at least one queue.")
	}
	if len(r.Queues) > MaxFetchQueues {
		return nil, ojserr.Invalid("queues", "A FETCH names at most %d queues; got %d.", MaxFetchQueues, len(r.Queues)).With("max_queues", MaxFetchQueues)
	}
	for _, q := range r.Queues {
		if err := job.ValidateQueue(q); err != nil {
			return nil, err
		}
	}
	if r.Count <= 0 {
		r.Count = 1
	}
	if r.Count > MaxFetch {
		r.Count = MaxFetch
	}
	if r.MaxBytes <= 0 {
		r.MaxBytes = DefaultFetchBytes
	}
	used := 0
	out := []*job.Job{}
	// One consistent read of every queue's pause state and rate limit and
	// of the worker's state (skipped once it is known to be stopping):
	// read fresh, not cached, so a pause holds for every FETCH after it.
	if s.workers.has(r.WorkerID) {
		return out, nil // a quiet or terminating worker gets no new jobs
	}
	fs, err := s.st.FetchState(ctx, r.Queues, r.WorkerID)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if w := fs.Worker; w != nil && (stopping(w.State) || stopping(w.Directive)) {
		s.workers.add(r.WorkerID)
		return out, nil
	}
	full := false // the next job would pass MaxBytes
	for _, q := range r.Queues {
		if len(out) >= r.Count || full {
			break
		}
		qs := fs.Queues[q]
		rate := qs.Rate
		if qs.Paused {
			continue // a paused queue is not fetched; its jobs wait
		}
		// The due shards that may hold something due now (store.DueNow):
		// promotions and requeues are seen at once, and an idle queue
		// costs no due reads.
		now := s.Now()
		due, err := s.st.DueNow(ctx, q, now, 25)
		if err != nil {
			return s.fetchFailed(ctx, out, err)
		}
		if _, _, err := s.resolve(ctx, due, now, false); err != nil {
			return s.fetchFailed(ctx, out, err)
		}
		want := r.Count - len(out)
		// Twice the candidates it wants, and a few: without contention
		// the FETCH takes the first ones in order; with it, the rotation
		// below has a window wide enough for racing FETCHes to part ways
		// (a lost claim is a billed write). The extra entries cost no
		// more: a Query bills per 4 KB read, and an entry is ~150 bytes.
		items, err := s.candidates(ctx, q, min(2*want+8, MaxFetch))
		if err != nil {
			return s.fetchFailed(ctx, out, err)
		}
		if rate > 0 && len(items) > 0 {
			// A rate-limited queue hands out at most rate jobs a second:
			// reserve the jobs before claiming them.
			want = min(want, max(1, int(rate)))
			ok, err := s.st.TakeRateTokens(ctx, q, want, rate, s.Now())
			if err != nil {
				return s.fetchFailed(ctx, out, err)
			}
			if !ok {
				continue
			}
		}
		claimed, n, blocked, err := s.claimRounds(ctx, r, q, items, want, used)
		out, used, full = append(out, claimed...), n, blocked
		if err != nil {
			return s.fetchFailed(ctx, out, err)
		}
	}
	return out, nil
}

// claimParallel bounds the claims a FETCH has in flight at once.
const claimParallel = 10

// claimRounds claims up to want of a queue's candidates for FETCH r, whose
// answer holds used bytes so far, in rounds: each round takes the next
// candidates that fit the answer (up to claimParallel, and what is still
// wanted) and claims them at once, so that a FETCH holds its candidates
// for one round trip instead of one per job; racing FETCHes that read the
// same heads overlap less, and lose fewer claims (every lost claim is a
// billed write). After a round that lost a claim, the candidates left are
// taken from a random one on, wrapping round to the skipped ones: two
// FETCHes racing in lockstep part ways, and each still tries every
// candidate. Without contention nothing changes: the jobs claimed are the
// first ones in priority-then-FIFO order, answered in that order. It
// returns the jobs claimed, the answer's bytes with them, whether the next
// candidate would pass r.MaxBytes, and an error that stopped it (with the
// jobs claimed before it, which are active under this worker's lease and
// must be answered).
func (s *Service) claimRounds(ctx context.Context, r FetchRequest, q string, items []store.Item, want, used int) ([]*job.Job, int, bool, error) {
	var out []*job.Job
	next, rotated := 0, false
	for len(out) < want && next < len(items) {
		var round []store.Item
		var sizes []int
		bytes, largest, blocked := 0, 0, false
		for next < len(items) && len(round) < min(want-len(out), claimParallel) {
			it := items[next]
			size, err := s.fetchBytes(ctx, it)
			if err != nil {
				return out, used, false, err
			}
			if size == 0 {
				next++
				continue // deleted since the index was read
			}
			first := 0
			if used == 0 {
				// The answer repeats its first job ("job"): whichever of
				// the round's that is, it counts twice.
				first = max(largest, size)
			}
			if used+bytes+size+first > r.MaxBytes {
				if used > 0 || len(round) > 0 {
					blocked = true
					break
				}
				s.log.ErrorContext(ctx, "job too large for a FETCH answer; skipped", "job_id", it.Job.ID, "queue", q,
					"answer_bytes", 2*size, "max_bytes", r.MaxBytes)
				next++
				continue
			}
			round = append(round, it)
			sizes = append(sizes, size)
			bytes += size
			largest = max(largest, size)
			next++
		}
		if len(round) == 0 {
			return out, used, blocked, nil
		}
		got := make([]*job.Job, len(round))
		errs := make([]error, len(round))
		var wg sync.WaitGroup
		for i, it := range round {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = s.Claim(ctx, it.Job, r.WorkerID, r.Visibility, time.Time{})
			}()
		}
		wg.Wait()
		lost := 0
		for i, j := range got {
			switch {
			case j != nil:
				if used == 0 {
					used += sizes[i] // the answer's "job"
				}
				used += sizes[i]
				out = append(out, j)
			case errs[i] == nil:
				lost++
			}
		}
		if err := errors.Join(errs...); err != nil {
			return out, used, false, err
		}
		if blocked && lost == 0 {
			return out, used, true, nil
		}
		// (Blocked with claims lost: the candidate that did not fit may
		// fit now, and is next.)
		if lost > 0 && !rotated && next+1 < len(items) {
			// Contention: another FETCH is claiming the same heads.
			rotateFrom(items[next:], rand.IntN(len(items)-next))
			rotated = true
		}
	}
	return out, used, false, nil
}

// candidates reads up to n available jobs of queue q for a FETCH: a
// pull-mode queue's in priority-then-FIFO order (the ready index); a
// push-mode queue's, which are not in that index (SQS holds their place in
// line), from the due index (store.ReadyPush). FETCHing a push-mode queue
// is a way to drain it by hand, not its worker function's path.
func (s *Service) candidates(ctx context.Context, q string, n int) ([]store.Item, error) {
	if !s.push[q] {
		return s.st.Ready(ctx, q, n)
	}
	return s.st.ReadyPush(ctx, q, n)
}

// fetchFailed ends a FETCH that met an error: with nothing claimed yet
// the error is the answer; once a job is claimed it is active under this
// worker's lease, so the jobs claimed are the answer and the error only
// logged. Answering an error would leave them unrun until their leases
// end, each losing an attempt (a job with one attempt would be discarded
// without ever having run).
func (s *Service) fetchFailed(ctx context.Context, out []*job.Job, err error) ([]*job.Job, error) {
	if len(out) == 0 {
		return nil, ojserr.Backend(err)
	}
	s.log.ErrorContext(ctx, "FETCH stopped early; answering the jobs it claimed", "claimed", len(out), "error", err.Error())
	return out, nil
}

// fetchBytes is what a FETCH candidate adds to the answer once claimed
// (store.FetchBytes): recorded on the job and projected by the ready
// index; a job written before it was recorded is read by key (0: gone).
func (s *Service) fetchBytes(ctx context.Context, it store.Item) (int, error) {
	if it.FetchBytes > 0 {
		return it.FetchBytes, nil
	}
	if !it.Partial {
		return store.FetchBytes(it.Job), nil
	}
	j, err := s.st.Get(ctx, it.Job.ID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return store.FetchBytes(j), nil
}

// rotateFrom rotates s left by r: s[r] first, s[r-1] last.
func rotateFrom[T any](s []T, r int) {
	slices.Reverse(s[:r])
	slices.Reverse(s[r:])
	slices.Reverse(s)
}

// Claim tries to move j (as last read) from available to active for
// workerID with a lease of visibility (0: the job's own, else the default).
// redelivery is the time of j's redelivery check as read (zero when not
// known: store.ClaimOpts.Redelivery). It returns nil, nil when someone else
// got it or it expired (then it is discarded).
func (s *Service) Claim(ctx context.Context, j *job.Job, workerID string, visibility time.Duration, redelivery time.Time) (*job.Job, error) {
	claimed, _, err := s.claim(ctx, j, workerID, visibility, redelivery)
	return claimed, err
}

// claim is Claim that also returns the job as the refused write found it
// (nil when it was claimed, gone, or discarded as expired): a claimer that
// had not read the job goes on from there without reading it.
func (s *Service) claim(ctx context.Context, j *job.Job, workerID string, visibility time.Duration, redelivery time.Time) (*job.Job, *store.Item, error) {
	now := s.Now()
	if j.ExpiresAt != nil && !j.ExpiresAt.After(now) {
		return nil, nil, s.expire(ctx, j, now)
	}
	if visibility <= 0 {
		visibility = j.Visibility
	}
	if visibility <= 0 {
		visibility = job.DefaultVisibilityTimeout
	}
	timeout := j.Timeout
	if timeout <= 0 {
		timeout = job.DefaultTimeout
	}
	opts := store.ClaimOpts{Queue: j.Queue, WorkerID: workerID, Now: now, LeaseUntil: now.Add(visibility), Deadline: now.Add(timeout), Redelivery: redelivery}
	claimed, err := s.st.Apply(ctx, store.Claim(j.ID, opts))
	var ce *store.ConflictError
	if errors.As(err, &ce) && !redelivery.IsZero() && ce.Current.State == job.Available &&
		(ce.Current.ExpiresAt == nil || ce.Current.ExpiresAt.After(now)) {
		// Still available, so the redelivery check moved before the
		// lease's end since it was read (or is gone): claim it the usual way.
		opts.Redelivery = time.Time{}
		claimed, err = s.st.Apply(ctx, store.Claim(j.ID, opts))
	}
	if errors.As(err, &ce) {
		if ce.Current.State == job.Available && ce.Current.ExpiresAt != nil && !ce.Current.ExpiresAt.After(now) {
			return nil, nil, s.expire(ctx, ce.Current, now)
		}
		return nil, &store.Item{Job: ce.Current, DueAt: ce.DueAt}, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	s.log.InfoContext(ctx, "job claimed", "job_id", claimed.ID, "queue", claimed.Queue, "attempt", claimed.Attempt, "worker_id", workerID)
	return claimed, nil, nil
}

// expire discards job j (as read, possibly from an index) whose
// expires_at has passed. It reads the job by key first: the discard
// appends to the error history, which an index does not project.
func (s *Service) expire(ctx context.Context, j *job.Job, now time.Time) error {
	j, err := s.st.Get(ctx, j.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if j.ExpiresAt == nil || j.ExpiresAt.After(now) || (j.State != job.Available && j.State != job.Scheduled && j.State != job.Retryable) {
		return nil // moved meanwhile
	}
	expired, err := s.st.Apply(ctx, store.Expire(j, now))
	if err == nil {
		s.finished(ctx, expired)
	}
	var ce *store.ConflictError
	if err != nil && !errors.As(err, &ce) && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err == nil {
		s.log.InfoContext(ctx, "job expired", "job_id", j.ID, "queue", j.Queue)
	}
	return nil
}

// leaseEnded is the answer to an ACK, FAIL or heartbeat of an attempt
// whose lease ended: the attempt is over whether or not the job was
// requeued yet (ojs-worker-protocol.md 5.5).
func leaseEnded(op string, j *job.Job) error {
	e := ojserr.StateConflict(ojserr.Conflict, "Cannot %s job %s: its lease ended; the attempt is over and the job is requeued or discarded per its retry policy.", op, j.ID).
		With("job_id", j.ID).With("current_state", string(j.State)).With("attempt", j.Attempt)
	if j.LeaseUntil != nil {
		e = e.With("lease_expired_at", job.Timestamp(*j.LeaseUntil))
	}
	return e
}

// ResolveDue applies the time-driven moves to up to limit due jobs of a
// queue: due scheduled and retryable jobs become available (or are
// discarded if expired) and active jobs whose lease ended are requeued or
// discarded per their retry policy. It returns the available push-mode jobs
// whose redelivery check is due (the sweeper re-sends them; others ignore
// them), and more: the page was full and something on it moved, so the
// next page may hold more due jobs.
func (s *Service) ResolveDue(ctx context.Context, queue string, limit int, inline bool) (redeliver []store.Item, more bool, err error) {
	now := s.Now()
	items, err := s.st.Due(ctx, queue, now, limit)
	if err != nil {
		return nil, false, err
	}
	redeliver, stay, err := s.resolve(ctx, items, now, inline)
	return redeliver, len(items) >= limit && stay < len(items), err
}

// resolve applies the time-driven moves to due items read at now and
// returns the available push-mode ones (see ResolveDue) and how many
// stay where they are (an active job whose lease was extended).
func (s *Service) resolve(ctx context.Context, items []store.Item, now time.Time, inline bool) (redeliver []store.Item, stay int, err error) {
	for _, it := range items {
		j := it.Job
		var t store.Transition
		switch j.State {
		case job.Scheduled, job.Retryable:
			if j.ExpiresAt != nil && !j.ExpiresAt.After(now) {
				if err := s.expire(ctx, j, now); err != nil {
					return redeliver, stay, err
				}
				continue
			}
			t = store.Promote(j, now, s.redel, inline)
		case job.Active:
			if !leaseOver(j, now) {
				stay++
				continue
			}
			// The requeue appends to the error history, which the index
			// does not project: read the job by key.
			full, err := s.st.Get(ctx, j.ID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return redeliver, stay, err
			}
			if !leaseOver(full, now) {
				stay++
				continue // a heartbeat extended it or it finished meanwhile
			}
			j = full
			t = s.leaseExpiry(j, now, inline)
		case job.Available:
			redeliver = append(redeliver, it)
			continue
		default:
			stay++
			continue
		}
		moved, err := s.st.Apply(ctx, t)
		if err != nil {
			var ce *store.ConflictError
			if errors.As(err, &ce) || errors.Is(err, store.ErrNotFound) {
				continue // someone else moved it first
			}
			return redeliver, stay, err
		}
		s.log.InfoContext(ctx, "due job resolved", "job_id", j.ID, "from", string(j.State), "to", string(t.To))
		s.finished(ctx, moved)
	}
	return redeliver, stay, nil
}

// leaseOver reports whether an active job's lease has ended.
func leaseOver(j *job.Job, now time.Time) bool {
	return j.State == job.Active && j.LeaseUntil != nil && !j.LeaseUntil.After(now)
}

// leaseExpiry is the move of an active job whose lease ended: requeued or
// discarded per its retry policy, the attempt recorded as a visibility
// timeout (or as the execution timeout, when the lease ran to it).
func (s *Service) leaseExpiry(j *job.Job, now time.Time, inline bool) store.Transition {
	in := ErrorInput{Type: "visibility_timeout", Code: "timeout", Message: "The job's lease expired before the worker acknowledged or failed it; its worker is presumed dead."}
	if j.Deadline != nil && !j.LeaseUntil.Before(*j.Deadline) {
		in = ErrorInput{Type: "timeout", Code: "timeout", Message: "The job exceeded its execution timeout of " + j.Timeout.String() + "."}
	}
	return store.ExpireLease(j, s.decide(j, in, now), now, s.redel, inline)
}

// HeartbeatRequest is a worker's BEAT (ojs-worker-protocol.md 4.2).
type HeartbeatRequest struct {
	WorkerID string
	// State is what the worker reports: running, quiet or terminate.
	State    string
	JobIDs   []string
	Active   int
	Hostname string
	Queues   []string
	// Concurrency is the worker's concurrency setting (0: not reported).
	Concurrency int
	// Visibility is the new lease of each job (default 30 s).
	Visibility time.Duration
}

// HeartbeatResult is the answer: the jobs whose lease was extended, the
// ones among the worker's active jobs that were cancelled meanwhile (it
// should stop them: ojs-core.md 7.6 asks for the news in the next BEAT),
// and the state the worker must move to (running, quiet or terminate).
type HeartbeatResult struct {
	Extended  []string
	Cancelled []string
	State     string
}

// Worker states and directives.
const (
	WorkerRunning   = "running"
	WorkerQuiet     = "quiet"
	WorkerTerminate = "terminate"
)

// Heartbeat records the worker, extends the leases of its active jobs and
// returns its directive: one set by an operator (SetWorkerDirective), or
// the one an active job's meta.test_directive asks for (the OJS
// conformance suite's hook), else running. A directive never moves a
// worker backwards (terminate is never answered with quiet or running).
func (s *Service) Heartbeat(ctx context.Context, r HeartbeatRequest) (HeartbeatResult, error) {
	if r.WorkerID == "" {
		return HeartbeatResult{}, ojserr.Invalid("worker_id", "The 'worker_id' field is required.")
	}
	if len(r.WorkerID) > 256 {
		return HeartbeatResult{}, ojserr.Invalid("worker_id", "The 'worker_id' is longer than 256 characters.")
	}
	// The worker registry item holds these: unbounded, they made it larger
	// than DynamoDB's 400 KB and the heartbeat a 500.
	if len(r.Hostname) > 256 {
		return HeartbeatResult{}, ojserr.Invalid("hostname", "The 'hostname' is longer than 256 characters.")
	}
	if len(r.Queues) > MaxWorkerQueues {
		return HeartbeatResult{}, ojserr.Invalid("queues", "A heartbeat lists at most %d queues.", MaxWorkerQueues)
	}
	for _, q := range r.Queues {
		if err := job.ValidateQueue(q); err != nil {
			return HeartbeatResult{}, err
		}
	}
	switch r.State {
	case "", WorkerRunning, WorkerQuiet, WorkerTerminate:
	default:
		return HeartbeatResult{}, ojserr.Invalid("state", "'state' must be running, quiet or terminate.")
	}
	if len(r.JobIDs) > MaxFetch {
		return HeartbeatResult{}, ojserr.Invalid("active_jobs", "At most %d active jobs per heartbeat.", MaxFetch)
	}
	for _, id := range r.JobIDs {
		if err := validID(id); err != nil {
			return HeartbeatResult{}, err
		}
	}
	res := HeartbeatResult{Extended: []string{}, Cancelled: []string{}, State: WorkerRunning}
	now := s.Now()
	active := r.Active
	if active < len(r.JobIDs) {
		active = len(r.JobIDs)
	}
	w, err := s.st.WorkerBeat(ctx, store.WorkerInfo{ID: r.WorkerID, State: r.State, ActiveJobs: active, Hostname: r.Hostname, Queues: r.Queues,
		Concurrency: r.Concurrency}, now)
	if err != nil {
		return HeartbeatResult{}, ojserr.Backend(err)
	}
	directive := w.Directive
	if stopping(w.State) || stopping(directive) {
		s.workers.add(r.WorkerID)
	}
	var until time.Time // zero: each job's own lease length
	if r.Visibility > 0 {
		until = now.Add(r.Visibility)
	}
	for _, id := range r.JobIDs {
		j, err := s.st.Apply(ctx, store.Extend(id, r.WorkerID, until, now))
		var ce *store.ConflictError
		if errors.As(err, &ce) && ce.Current.State == job.Active && ce.Current.Deadline != nil && ce.Current.Deadline.After(now) &&
			ce.Current.LeaseUntil != nil && ce.Current.LeaseUntil.After(now) && (r.WorkerID == ce.Current.WorkerID || ce.Current.WorkerID == "") {
			// The extension would pass the execution deadline: extend to it.
			j, err = s.st.Apply(ctx, store.Extend(id, r.WorkerID, *ce.Current.Deadline, now))
		}
		if err == nil && j.Deadline != nil && j.LeaseUntil != nil && j.LeaseUntil.After(*j.Deadline) {
			// The claim's lease length passes the deadline: clamp it.
			if clamped, cerr := s.st.Apply(ctx, store.Clamp(id, *j.Deadline)); cerr == nil {
				j = clamped
			}
		}
		if errors.As(err, &ce) && ce.Current.State == job.Cancelled {
			// Known from the refused extension's own answer: no read.
			res.Cancelled = append(res.Cancelled, id)
		}
		if errors.As(err, &ce) || errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return HeartbeatResult{}, ojserr.Backend(err)
		}
		res.Extended = append(res.Extended, id)
		directive = stronger(directive, testDirective(j))
	}
	res.State = stronger(stronger(WorkerRunning, r.State), directive)
	return res, nil
}

// stronger is the later of two worker states (running < quiet < terminate).
func stronger(a, b string) string {
	rank := map[string]int{WorkerRunning: 1, WorkerQuiet: 2, WorkerTerminate: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func testDirective(j *job.Job) string {
	if j == nil || len(j.Meta) == 0 {
		return ""
	}
	var m struct {
		D string `json:"test_directive"`
	}
	_ = json.Unmarshal(j.Meta, &m)
	if m.D == WorkerQuiet || m.D == WorkerTerminate {
		return m.D
	}
	return ""
}

// SetWorkerDirective tells a worker, through its next heartbeat, to go
// quiet or terminate (ojs-admin-api.md 9.3).
func (s *Service) SetWorkerDirective(ctx context.Context, id, directive string) (*store.WorkerInfo, error) {
	if id == "" || len(id) > 256 {
		return nil, ojserr.Invalid("id", "A worker id is 1 to 256 characters.")
	}
	if directive != WorkerQuiet && directive != WorkerTerminate {
		return nil, ojserr.Invalid("directive", "The directive must be quiet or terminate.")
	}
	w, err := s.st.SetWorkerDirective(ctx, id, directive, s.Now())
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return w, nil
}

// Workers lists the workers seen in the last day, latest heartbeat first.
func (s *Service) Workers(ctx context.Context) ([]store.WorkerInfo, error) {
	ws, err := s.st.Workers(ctx, 1000)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return ws, nil
}

// DeadLetter lists discarded jobs of the given queues (all registered
// queues when none), newest first within a queue.
func (s *Service) DeadLetter(ctx context.Context, queue string, limit int) ([]*job.Job, error) {
	queues := []string{queue}
	if queue == "" {
		var err error
		if queues, err = s.st.Queues(ctx); err != nil {
			return nil, ojserr.Backend(err)
		}
	}
	out := []*job.Job{}
	for _, q := range queues {
		page, err := s.st.Dead(ctx, q, limit-len(out), "")
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		out = append(out, page.Jobs...)
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}
