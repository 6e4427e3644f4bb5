// Package lifecycle implements the OJS job operations (PUSH, INFO, CANCEL,
// ACTIVATE, FETCH, ACK, FAIL, BEAT) and the time-driven moves (promotion of
// due jobs, lease expiry) on top of pkg/store. It decides; the store applies
// each decision as one conditional write. Both the API function and the
// push-mode worker use it, so a job follows the same rules in both modes.
package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// EventLog is the event log Stats reads a queue's failures from
// (implemented by *events.Store).
type EventLog interface {
	QueryEvents(ctx context.Context, f events.Filter, now time.Time) (*events.Page, error)
}

var _ EventLog = (*events.Store)(nil)

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
	// Workflows, when set, advances a workflow job's workflow in the
	// request that finished the job, before it answers (the stream
	// function verifies it behind every request). Nil: the stream
	// function alone advances workflows.
	Workflows Finisher
	// Events is the event log Stats counts a queue's failed attempts of
	// the last hour in. Default: the log in the store's table, read with
	// the store's client (events.NewStore(st.DB(), st.Table())).
	Events EventLog
	// Queues is the persistence of the queue and worker items. Default: the
	// items in the store's table, read with the store's client.
	Queues *queue.Store
}

// Service runs the job operations.
type Service struct {
	st     *store.Store
	qs     *queue.Store
	push   map[string]bool
	redel  time.Duration
	now    func() time.Time
	rnd    func() float64
	log    *slog.Logger
	queues sync.Map // queue names already registered by this process
	rates  sync.Map // queue -> rate limit this process last recorded
	pauses pauseCache
	// workers remembers which workers are quiet or terminating.
	workers stoppingWorkers
	// flow advances workflows inline (Config.Workflows).
	flow Finisher
	// evlog is the event log (Config.Events).
	evlog EventLog
	// contention is when a FETCH of this process last lost a claim, by
	// queue (Unix ns): FETCHes of a queue contended within
	// contentionWindow start on a random candidate (claimRounds).
	contention sync.Map
	// pausedSeen holds the queues a FETCH of this process last found
	// paused (until one finds them not paused): a FETCH naming one reads
	// the queues' state first and skips the paused queues' ready queries.
	pausedSeen sync.Map
}

// New returns a service on st, the job items' persistence.
func New(st *store.Store, c Config) *Service {
	s := &Service{st: st, qs: c.Queues, push: map[string]bool{}, redel: c.RedeliverAfter, now: c.Now, rnd: c.Rand, log: c.Logger,
		flow: c.Workflows, evlog: c.Events}
	if s.evlog == nil {
		s.evlog = events.NewStore(st.DB(), st.Table())
	}
	if s.qs == nil {
		s.qs = queue.NewStore(st.DB(), st.Table())
	}
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
	if err := s.qs.SetQueueRate(ctx, j.Queue, j.RateLimit, s.Now()); err != nil {
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
	if err := s.qs.EnsureQueue(ctx, q, s.Now()); err != nil {
		return err
	}
	s.queues.Store(q, true)
	return nil
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
