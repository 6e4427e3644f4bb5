package queue

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/tenant"
)

// EventLog is the event log Stats reads a queue's failures from
// (implemented by *events.Store).
type EventLog interface {
	QueryEvents(ctx context.Context, f events.Filter, now time.Time) (*events.Page, error)
}

var _ EventLog = (*events.Store)(nil)

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
	// PushQueues names the push-mode queues (delivered through SQS to the
	// worker function). Default: none; jobs on other queues wait for
	// FETCH.
	PushQueues []string
	// Store is the persistence of the queue and worker items. Default: the
	// items in the job store's table, read with its client
	// (NewStore(st.DB(), st.Table())).
	Store *Store
	// Events is the event log Stats counts a queue's failed attempts of
	// the last hour in. Default: the log in the job store's table, read
	// with its client (events.NewStore(st.DB(), st.Table())).
	Events EventLog
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// ResultTTLs is result_ttl, in seconds, by queue, for the jobs
	// admitted that set none (OJS_QUEUE_RESULT_TTL).
	ResultTTLs map[string]int64
}

// Service runs the queue operations. It keeps per-process caches, so one
// Service serves a process.
type Service struct {
	st   *store.Store
	qs   *Store
	ev   EventLog
	push map[string]bool
	now  func() time.Time
	log  *slog.Logger
	// ttls is Config.ResultTTLs.
	ttls map[string]int64
	// registered holds the queue names already registered by this process.
	registered sync.Map
	// rates holds, by queue, the rate limit this process last recorded.
	rates  sync.Map
	pauses pauseCache
	// pausedSeen holds the queues a FETCH of this process last found
	// paused (until one finds them not paused): a FETCH naming one reads
	// the queues' state first and skips the paused queues' ready queries.
	pausedSeen sync.Map
	// bounds holds the backpressure bounds and depths (bound.go).
	bounds boundCache
	// poolc holds the pools FETCH read and their turns (pool.go).
	poolc poolCache
	// tenants is the tenant registry (Admit records each tenant's
	// queues); queueTenants holds the tenant/queue pairs this process
	// recorded.
	tenants      *tenant.Registry
	queueTenants sync.Map
	// keys are the rate limit keys; keyStates holds, by key, the state
	// this process last recorded (KeyHeaders).
	keys      *ratelimit.Keys
	keyMu     sync.Mutex
	keyStates map[string]*ratelimit.State
}

// maxKeyStates bounds Service.keyStates (emptied when full).
const maxKeyStates = 1000

// NewService returns the queue service on st, the job store: its table
// holds the queue items (Config.Store) and the job counts Stats reads.
func NewService(st *store.Store, c Config) *Service {
	s := &Service{st: st, qs: c.Store, ev: c.Events, push: map[string]bool{}, now: c.Now, log: c.Logger, ttls: c.ResultTTLs}
	if s.qs == nil {
		s.qs = NewStore(st.DB(), st.Table())
	}
	if s.ev == nil {
		s.ev = events.NewStore(st.DB(), st.Table())
	}
	s.keys, s.keyStates = ratelimit.New(st.DB(), st.Table()), map[string]*ratelimit.State{}
	s.tenants = tenant.New(st.DB(), st.Table())
	for _, q := range c.PushQueues {
		s.push[q] = true
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.log = cmp.Or(s.log, slog.Default())
	return s
}

// Store returns the queue and worker items' persistence the service
// reads and writes (Config.Store).
func (s *Service) Store() *Store { return s.qs }

// clock is the service clock's time (UTC).
func (s *Service) clock() time.Time { return s.now().UTC() }

// IsPush reports whether queue is a push-mode queue.
func (s *Service) IsPush(queue string) bool { return s.push[queue] }

// Tenants returns the tenant registry (pkg/tenant).
func (s *Service) Tenants() *tenant.Registry { return s.tenants }

// Keys returns the rate limit keys (pkg/ratelimit).
func (s *Service) Keys() *ratelimit.Keys { return s.keys }

// Admit prepares jobs for writing, whoever creates them: push mode from
// the queue, the queue registered and its rate limit recorded, a tenant's
// queue in the tenant registry and its priority boost applied, and the
// policy of each rate limit key recorded on the key (the last job's of
// each key).
func (s *Service) Admit(ctx context.Context, jobs []*job.Job) error {
	keyed := map[string]*job.KeyLimit{}
	owned := map[string]bool{} // tenants' keys: their limits set the policy
	for _, j := range jobs {
		if j.Tenant != "" {
			l, err := s.tenants.LimitsOf(ctx, j.Tenant, s.clock())
			if err != nil {
				return ojserr.Backend(err)
			}
			j.Priority = l.Boost(j.Priority)
			// A tenant's max_concurrency holds its jobs (those without
			// a rate limit key of their own) under the tenant's key.
			if l.MaxConcurrency != nil && j.KeyLimit == nil {
				j.KeyLimit = &job.KeyLimit{Key: tenant.ConcurrencyKey(j.Tenant), Concurrency: l.MaxConcurrency}
				owned[j.KeyLimit.Key] = true
			}
		}
		if j.KeyLimit != nil {
			keyed[j.KeyLimit.Key] = j.KeyLimit
		}
		j.Push = s.push[j.Queue]
		if ttl, ok := s.ttls[j.Queue]; ok && j.ResultTTL == nil {
			j.ResultTTL = &ttl
		}
		if err := s.EnsureQueue(ctx, j.Queue); err != nil {
			return ojserr.Backend(err)
		}
		if err := s.setRate(ctx, j); err != nil {
			return ojserr.Backend(err)
		}
		if j.Tenant != "" {
			if err := s.recordTenant(ctx, j.Tenant, j.Queue); err != nil {
				return ojserr.Backend(err)
			}
		}
	}
	for _, p := range keyed {
		record := s.keys.Record
		if owned[p.Key] {
			record = s.keys.Ensure // a limit read up to 10 s ago must not undo a newer one
		}
		st, err := record(ctx, p, s.clock())
		if err != nil {
			return ojserr.Backend(err)
		}
		s.keyMu.Lock()
		if len(s.keyStates) >= maxKeyStates {
			clear(s.keyStates)
		}
		s.keyStates[p.Key] = st
		s.keyMu.Unlock()
	}
	return nil
}

// KeyHeaders are the X-RateLimit-* headers of an enqueue of jobs: those
// of the first keyed job's key as this process last recorded it (nil when
// none is keyed).
func (s *Service) KeyHeaders(jobs ...*job.Job) map[string]string {
	for _, j := range jobs {
		if j.KeyLimit == nil {
			continue
		}
		s.keyMu.Lock()
		st := s.keyStates[j.KeyLimit.Key]
		s.keyMu.Unlock()
		if st != nil {
			return st.Headers(s.clock())
		}
	}
	return nil
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
	if err := s.qs.SetQueueRate(ctx, j.Queue, j.RateLimit, s.clock()); err != nil {
		return err
	}
	s.rates.Store(j.Queue, j.RateLimit)
	return nil
}

// EnsureQueue registers a queue name (once per process: a name this
// process registered, or paused or resumed, costs no request).
func (s *Service) EnsureQueue(ctx context.Context, q string) error {
	if _, ok := s.registered.Load(q); ok {
		return nil
	}
	if err := s.qs.EnsureQueue(ctx, q, s.clock()); err != nil {
		return err
	}
	s.registered.Store(q, true)
	return nil
}

// FetchState reads the state a FETCH needs (Store.FetchState: the
// registry items of queues and the worker workerID, "" for none) and
// notes which of queues are paused, for SeenPaused.
func (s *Service) FetchState(ctx context.Context, queues []string, workerID string) (FetchState, error) {
	fs, err := s.qs.FetchState(ctx, queues, workerID)
	if err != nil {
		return fs, err
	}
	for _, q := range queues {
		if fs.Queues[q].Paused {
			s.pausedSeen.Store(q, true)
		} else {
			s.pausedSeen.Delete(q)
		}
	}
	return fs, nil
}

// SeenPaused reports whether the last FetchState of this process that
// read one of queues found it paused.
func (s *Service) SeenPaused(queues []string) bool {
	for _, q := range queues {
		if _, ok := s.pausedSeen.Load(q); ok {
			return true
		}
	}
	return false
}

// recordTenant registers that tenant has jobs on queue, in the tenant's
// item and the queue's (once per process and pair).
func (s *Service) recordTenant(ctx context.Context, tenant, queue string) error {
	pair := tenant + "\x00" + queue
	if _, ok := s.queueTenants.Load(pair); ok {
		return nil
	}
	if err := s.tenants.Record(ctx, tenant, queue, s.clock()); err != nil {
		return err
	}
	if err := s.qs.AddQueueTenant(ctx, queue, tenant, s.clock()); err != nil {
		return err
	}
	s.queueTenants.Store(pair, true)
	return nil
}

// SetTenantLimits sets a tenant's limits (ojs-multi-tenancy.md 9.3; as
// tenant.ParseLimits read them) and
// its concurrency key's policy at once, so that the tenant's jobs already
// waiting under the key follow the new limit (nil: none).
func (s *Service) SetTenantLimits(ctx context.Context, id string, l tenant.Limits) (*tenant.Info, error) {
	if err := job.ValidateTenant(id); err != nil {
		return nil, err
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if _, err := s.keys.Record(ctx, &job.KeyLimit{Key: tenant.ConcurrencyKey(id), Concurrency: l.MaxConcurrency}, s.clock()); err != nil {
		return nil, ojserr.Backend(err)
	}
	in, err := s.tenants.SetLimits(ctx, id, l, s.clock())
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return in, nil
}
