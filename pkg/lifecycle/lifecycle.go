// Package lifecycle implements the OJS job operations (PUSH, INFO, CANCEL,
// ACTIVATE, FETCH, ACK, FAIL, BEAT) and the time-driven moves (promotion of
// due jobs, lease expiry) on top of pkg/store. It decides; the store applies
// each decision as one conditional write. Both the API function and the
// push-mode worker use it, so a job follows the same rules in both modes.
// The queue operations it relies on (job admission, push mode, pause
// state) are pkg/queue's Service.
package lifecycle

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Finisher advances the workflow of a job that reached a terminal state
// (implemented by *workflow.Engine).
type Finisher interface {
	JobFinished(ctx context.Context, j *job.Job) error
}

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
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
	// request that finished the job. Nil: the stream function alone does.
	Workflows Finisher
	// Queues is the queue service (admission, push mode, pauses; its Store
	// the queue and worker items), one per process. Default: one with no
	// push-mode queues.
	Queues *queue.Service
	// ResultTTL is result_ttl, in seconds, for jobs that set none
	// (OJS_RESULT_TTL). Default job.DefaultResultTTL.
	ResultTTL *int64
	// Schemas validates each PUSH's args against its type's registered
	// schema (*schema.Registry). Nil: no validation.
	Schemas interface {
		Validate(ctx context.Context, j *job.Job) error
	}
	// Middleware are enqueue steps run after PropagateRequestID and before
	// the schema validation (middleware.go).
	Middleware []EnqueueMiddleware
}

// Service runs the job operations.
type Service struct {
	st *store.Store
	// queues is the queue service (Config.Queues); qs its store.
	queues *queue.Service
	qs     *queue.Store
	redel  time.Duration
	// resultTTL is Config.ResultTTL.
	resultTTL int64
	now       func() time.Time
	rnd       func() float64
	log       *slog.Logger
	// workers remembers the workers known to be quiet or terminating, for
	// good: such a worker never runs again (ojs-graceful-shutdown.md 5.1).
	// Others are read from the table on every FETCH.
	workers boundedMap[string, bool]
	// flow advances workflows inline (Config.Workflows).
	flow Finisher
	// chain is the enqueue middleware (chainOf).
	chain []EnqueueMiddleware
	// contention is when a FETCH of this process last lost a claim, by
	// queue (Unix ns; see claimRounds).
	contention sync.Map
	// busy is when a FETCH of this process last found candidates.
	busy busyQueues
	// keyed claims the jobs of rate limit keys (keyed.go).
	keyed *keyedClaims
	// needs are the needs of jobs a FETCH stating capabilities read (fit.go).
	needs needsCache
}

// New returns a service on st, the job items' persistence.
func New(st *store.Store, c Config) *Service {
	s := &Service{st: st, queues: c.Queues, redel: cmp.Or(max(c.RedeliverAfter, 0), 5*time.Minute), now: c.Now, rnd: c.Rand,
		log: cmp.Or(c.Logger, slog.Default()), flow: c.Workflows, chain: chainOf(c), resultTTL: *cmp.Or(c.ResultTTL, aws.Int64(job.DefaultResultTTL))}
	if s.queues == nil {
		s.queues = queue.NewService(st, queue.Config{Now: c.Now, Logger: c.Logger})
	}
	s.qs = s.queues.Store()
	if s.now == nil {
		s.now = time.Now
	}
	if s.rnd == nil {
		s.rnd = rand.Float64
	}
	s.keyed = &keyedClaims{st: st, keys: s.queues.Keys(), now: s.Now, log: s.log, jobs: boundedMap[string, string]{max: maxKnownJobs}}
	s.workers.max, s.needs.m.max = maxCachedWorkers, maxNeedsCached
	return s
}

// Now returns the service clock's time.
func (s *Service) Now() time.Time { return s.now().UTC() }

// RedeliverAfter is the redelivery delay for unclaimed push-mode jobs.
func (s *Service) RedeliverAfter() time.Duration { return s.redel }

// finished advances the workflow of a job the service just moved to a
// terminal state. A failure is logged, not returned: the stream function
// advances what a request left undone.
func (s *Service) finished(ctx context.Context, j *job.Job) {
	if s.flow == nil || j == nil || j.WorkflowID == "" || !j.State.Terminal() {
		return
	}
	err := fault.Hit(fault.LifecycleBeforeAdvance)
	if err == nil {
		err = s.flow.JobFinished(ctx, j)
	}
	if err != nil {
		s.log.WarnContext(ctx, "workflow not advanced inline; the stream function will", "job_id", j.ID, "workflow_id", j.WorkflowID, "error", err.Error())
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// boundedMap is a map safe for concurrent use that starts over once it
// holds max entries: what this process learnt, in bounded memory.
type boundedMap[K comparable, V any] struct {
	mu  sync.Mutex
	m   map[K]V
	max int
}

func (b *boundedMap[K, V]) get(k K) (V, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[k]
	return v, ok
}

func (b *boundedMap[K, V]) put(k K, v V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil || len(b.m) >= b.max {
		b.m = map[K]V{}
	}
	b.m[k] = v
}

func (b *boundedMap[K, V]) del(k K) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, k)
}

// maxCachedWorkers bounds Service.workers.
const maxCachedWorkers = 10000

func stopping(state string) bool { return state == WorkerQuiet || state == WorkerTerminate }
