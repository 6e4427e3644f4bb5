// Package admin implements the OJS Admin API (ojs-admin-api.md) and the
// reads behind the web console. Nothing here scans the table: every read
// is a bounded query of an index partition or of the event log, or a read
// by key (docs/admin.md).
package admin

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Bounds of the operator's reads (docs/admin.md).
const (
	// MaxPerPage is the largest page of a listing.
	MaxPerPage = 100
	// DefaultPerPage is a listing's page size when none is asked for.
	DefaultPerPage = 20
	// MaxQueryCalls bounds the DynamoDB queries one listing call makes; a
	// listing that stops there returns a cursor (maybe with fewer items).
	MaxQueryCalls = 10
	// MaxCountPerPartition bounds the index entries one count reads per
	// queue and index partition; counts above it are reported as capped.
	MaxCountPerPartition = 10000
	// MaxStatsEvents bounds the events one statistics call reads.
	MaxStatsEvents = 20000
	// MaxBulk bounds the jobs one bulk operation or purge acts on;
	// has_more tells the caller to call again.
	MaxBulk = 1000
	// DefaultStaleAfter is how long after its last heartbeat a worker is
	// stale.
	DefaultStaleAfter = 2 * time.Minute
)

// EventLog is the event log the searches, statistics and histories read
// (implemented by *events.Store).
type EventLog interface {
	QueryEvents(ctx context.Context, f events.Filter, now time.Time) (*events.Page, error)
}

// Queues is the queue registry and the worker items the admin service
// reads and writes (implemented by *queue.Store).
type Queues interface {
	QueueInfos(ctx context.Context) ([]queue.QueueInfo, error)
	SetQueueRate(ctx context.Context, name string, perSecond float64, now time.Time) error
	SetQueueBound(ctx context.Context, name string, b *queue.Bound, now time.Time) error
	SetTenantFairness(ctx context.Context, name, strategy string, now time.Time) error
	Workers(ctx context.Context, limit int) ([]queue.WorkerInfo, error)
	Worker(ctx context.Context, id string) (*queue.WorkerInfo, error)
	DeleteWorker(ctx context.Context, id string, staleBefore time.Time) error
}

// Jobs is the job service the admin operations go through, so that they
// follow the same rules as the data plane (implemented by
// *lifecycle.Service).
type Jobs interface {
	Cancel(ctx context.Context, id string) (*job.Job, job.State, error)
	SetWorkerDirective(ctx context.Context, id, directive string) (*queue.WorkerInfo, error)
}

// QueueControl is the queue service a pause or resume goes through, as
// the data plane's does (implemented by *queue.Service).
type QueueControl interface {
	SetPaused(ctx context.Context, queue string, paused bool) (queue.QueueState, error)
}

// DeadLetter is the dead letter queue the admin operations go through
// (implemented by *deadletter.Service).
type DeadLetter interface {
	Retry(ctx context.Context, id string, o deadletter.RetryOverride) (*job.Job, error)
	Delete(ctx context.Context, id string) error
	Purge(ctx context.Context, f deadletter.Filter) (deadletter.BulkResult, error)
	Count(ctx context.Context, queue string) (int, error)
}

// The implementations of the interfaces above.
var (
	_ EventLog     = (*events.Store)(nil)
	_ Queues       = (*queue.Store)(nil)
	_ Jobs         = (*lifecycle.Service)(nil)
	_ QueueControl = (*queue.Service)(nil)
	_ DeadLetter   = (*deadletter.Service)(nil)
)

// Config configures a Service. Zero values mean defaults.
type Config struct {
	// StaleAfter is how long after its last heartbeat a worker counts as
	// stale (and may be deregistered). Default DefaultStaleAfter.
	StaleAfter time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// Started is when this process started (uptime). Default: New's time.
	Started time.Time
	// Events is the event log. Default: the log in the store's table,
	// read with the store's client (events.NewStore(st.DB(), st.Table())).
	Events EventLog
}

// Service answers the Admin API.
type Service struct {
	st   *store.Store
	qs   Queues
	jobs Jobs
	ctl  QueueControl
	dead DeadLetter
	cfg  Config
}

// New returns an admin service on st (job items), qs (queue and worker
// items), jobs, the queue service ctl and the dead letter queue dead.
func New(st *store.Store, qs Queues, jobs Jobs, ctl QueueControl, dead DeadLetter, cfg Config) *Service {
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Started.IsZero() {
		cfg.Started = cfg.Now()
	}
	if cfg.Events == nil {
		cfg.Events = events.NewStore(st.DB(), st.Table())
	}
	return &Service{st: st, qs: qs, jobs: jobs, ctl: ctl, dead: dead, cfg: cfg}
}

// queryEvents reads one page of the event log (Config.Events).
func (s *Service) queryEvents(ctx context.Context, f events.Filter, now time.Time) (*events.Page, error) {
	if s.cfg.Events == nil {
		return nil, errors.New("admin: no event log")
	}
	return s.cfg.Events.QueryEvents(ctx, f, now)
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

// queueNames lists the registered queues by name.
func (s *Service) queueNames(ctx context.Context) ([]queue.QueueInfo, error) {
	qs, err := s.qs.QueueInfos(ctx)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	slices.SortFunc(qs, func(a, b queue.QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return qs, nil
}

// queuesOf is []string{name}, or every registered queue's name when name is "".
func (s *Service) queuesOf(ctx context.Context, name string) ([]string, error) {
	if name != "" {
		return []string{name}, nil
	}
	qs, err := s.queueNames(ctx)
	names := make([]string, len(qs))
	for i, qi := range qs {
		names[i] = qi.Name
	}
	return names, err
}

func (s *Service) queueInfo(ctx context.Context, name string) (*queue.QueueInfo, error) {
	qs, err := s.queueNames(ctx)
	if err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(qs, func(q queue.QueueInfo) bool { return q.Name == name }); i >= 0 {
		return &qs[i], nil
	}
	return nil, nil
}
