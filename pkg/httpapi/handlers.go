package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// Producer is the job operations of a producer (OJS PUSH, batch PUSH,
// INFO, CANCEL, ACTIVATE; implemented by *lifecycle.Service).
type Producer interface {
	Push(ctx context.Context, raw []byte) (*job.Job, error)
	PushBatch(ctx context.Context, raws [][]byte) ([]*job.Job, error)
	Info(ctx context.Context, id string) (*job.Job, error)
	Cancel(ctx context.Context, id string) (*job.Job, job.State, error)
	Activate(ctx context.Context, id string) (*job.Job, error)
}

// Worker is the job operations of a worker (OJS FETCH, ACK, FAIL, BEAT)
// and the worker directives and listing (implemented by
// *lifecycle.Service).
type Worker interface {
	Fetch(ctx context.Context, r lifecycle.FetchRequest) ([]*job.Job, error)
	AckOwned(ctx context.Context, id, workerID string, attempt int, result json.RawMessage) (*job.Job, error)
	NackOwned(ctx context.Context, id, workerID string, attempt int, in lifecycle.ErrorInput) (*job.Job, error)
	Heartbeat(ctx context.Context, r lifecycle.HeartbeatRequest) (lifecycle.HeartbeatResult, error)
	SetWorkerDirective(ctx context.Context, id, directive string) (*queue.WorkerInfo, error)
	Workers(ctx context.Context) ([]queue.WorkerInfo, error)
}

// Queues is queue control: pause and resume, the queue listing and stats,
// the push-mode queues and the queue registry (implemented by
// *queue.Service).
type Queues interface {
	SetPaused(ctx context.Context, queue string, paused bool) (queue.QueueState, error)
	QueueStates(ctx context.Context) ([]queue.QueueState, error)
	Stats(ctx context.Context, queue string) (*queue.QueueStats, error)
	IsPush(queue string) bool
	EnsureQueue(ctx context.Context, queue string) error
	Pressure(queues ...string) *queue.Pressure
	FetchPool(ctx context.Context, name string) (*queue.Pool, error)
	Shares(p *queue.Pool, count int) map[string]int
}

// Services are the services the API serves, by operation family. A nil
// Queues serves no push-mode queues and registers no workflow queues;
// the routes of a nil service fail when called.
type Services struct {
	// Producer serves the producer routes (/ojs/v1/jobs...).
	Producer Producer
	// Worker serves the worker routes (/ojs/v1/workers/...) and the
	// worker directives and listing.
	Worker Worker
	// Queues serves the queue routes (/ojs/v1/queues...).
	Queues Queues
	// Progress serves the progress reports (/ojs/v1/jobs/{id}/progress).
	Progress Progress
}

// DeadLetter is the dead letter queue the API serves (implemented by
// *deadletter.Service).
type DeadLetter interface {
	List(ctx context.Context, queue string, limit int) (jobs []*job.Job, more bool, err error)
	Get(ctx context.Context, id string) (*job.Job, error)
	Retry(ctx context.Context, id string, o deadletter.RetryOverride) (*job.Job, error)
	Delete(ctx context.Context, id string) error
	RetryMatching(ctx context.Context, f deadletter.Filter) (deadletter.BulkResult, error)
	Purge(ctx context.Context, f deadletter.Filter) (deadletter.BulkResult, error)
	Stats(ctx context.Context) (deadletter.Stats, error)
}

// Backend reports the health of the storage backend.
type Backend interface {
	Ping(ctx context.Context) error
}

// EventLog reads the event log for GET /ojs/v1/events (implemented by
// *events.Store).
type EventLog interface {
	QueryEvents(ctx context.Context, f events.Filter, now time.Time) (*events.Page, error)
}

// tableBackend is a Backend that names its DynamoDB client and table
// (*store.Store): the event log defaults to the one in that table.
type tableBackend interface {
	DB() store.DynamoAPI
	Table() string
}

// Workflows is the workflow service (implemented by *workflow.Engine).
type Workflows interface {
	Create(ctx context.Context, raw []byte) (*wfview.View, error)
	Get(ctx context.Context, id string) (*wfview.View, error)
	Cancel(ctx context.Context, id string) (*wfview.View, error)
	Retry(ctx context.Context, id string) (*wfview.View, error)
}

// Crons is the cron schedule service (implemented by *cron.Service).
type Crons interface {
	Register(ctx context.Context, raw []byte) (cron.View, bool, error)
	List(ctx context.Context, enabled *bool) ([]cron.View, error)
	Get(ctx context.Context, name string) (cron.View, error)
	SetEnabled(ctx context.Context, name string, raw []byte) (cron.View, error)
	Delete(ctx context.Context, name string) (cron.View, error)
}

// The implementations of the interfaces above.
var (
	_ Producer   = (*lifecycle.Service)(nil)
	_ Worker     = (*lifecycle.Service)(nil)
	_ Queues     = (*queue.Service)(nil)
	_ DeadLetter = (*deadletter.Service)(nil)
	_ Backend    = (*store.Store)(nil)
	_ EventLog   = (*events.Store)(nil)
	_ Workflows  = (*workflow.Engine)(nil)
	_ Crons      = (*cron.Service)(nil)
)

// New returns the OJS HTTP handler. wfs may be nil (no workflow routes).
func New(svc Services, backend Backend, wfs Workflows, cfg Config) *Server {
	cfg.Version = cmp.Or(cfg.Version, job.SpecVersion)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Events == nil {
		if tb, ok := backend.(tableBackend); ok {
			cfg.Events = events.NewStore(tb.DB(), tb.Table())
		}
	}
	s := &Server{cfg: cfg, started: cfg.Now(), mux: http.NewServeMux(), patterns: map[string]Level{}, metrics: newRequestMetrics()}
	a := &api{jobs: svc.Producer, worker: svc.Worker, progress: svc.Progress, queueSvc: svc.Queues, dead: cfg.DeadLetter, backend: backend, wfs: wfs, s: s}
	a.limits, _ = svc.Queues.(RateLimits)
	s.add(LevelAny, http.MethodGet, "/ojs/manifest", ok(func(*http.Request, params) (any, error) { return Manifest(), nil }))
	s.add(LevelAny, http.MethodGet, "/ojs/v1/health", ok(a.health))
	s.add(LevelProducer, http.MethodPost, "/ojs/v1/jobs", a.push)
	s.add(LevelProducer, http.MethodPost, "/ojs/v1/jobs/batch", a.pushBatch)
	s.add(LevelProducer, http.MethodGet, "/ojs/v1/jobs/{id}", under("job", func(r *http.Request, p params) (any, error) {
		return scoped(r)(a.jobs.Info(r.Context(), p("id")))
	}))
	s.add(LevelProducer, http.MethodDelete, "/ojs/v1/jobs/{id}", ok(a.cancel))
	s.add(LevelProducer, http.MethodPost, "/ojs/v1/jobs/{id}/activate", ok(a.activate))
	s.add(LevelWorker, http.MethodPost, "/ojs/v1/workers/fetch", ok(a.fetch))
	s.add(LevelWorker, http.MethodPost, "/ojs/v1/workers/ack", ok(a.ack))
	s.add(LevelWorker, http.MethodPost, "/ojs/v1/workers/nack", ok(a.nack))
	s.add(LevelWorker, http.MethodPost, "/ojs/v1/jobs/{id}/ack", ok(a.ack))
	s.add(LevelWorker, http.MethodPost, "/ojs/v1/jobs/{id}/nack", ok(a.nack))
	s.add(LevelWorker, http.MethodPost, "/ojs/v1/workers/heartbeat", ok(a.heartbeat))
	s.addProgress(a)
	if cfg.Checkpoints != nil {
		s.addCheckpoints(a, cfg.Checkpoints)
	}
	s.addRateLimits(a)
	if cfg.Tenants != nil {
		s.addTenants(a, cfg.Tenants)
	}
	if cfg.Schemas != nil {
		s.addSchemas(cfg.Schemas)
	}
	if cfg.Webhooks != nil {
		s.addWebhooks(cfg.Webhooks)
	}
	if cfg.Admin != nil {
		s.add(LevelAdmin, http.MethodGet, "/ojs/v1/admin/workers", paged(func(r *http.Request, page, per int) (any, error) { return cfg.Admin.Workers(r.Context(), page, per) }))
		s.addAdmin(a, cfg.Admin)
	} else {
		s.add(LevelAdmin, http.MethodGet, "/ojs/v1/admin/workers", ok(a.workers))
	}
	s.addObservability(a, cfg.Admin)
	s.addGracefulShutdown(a, cfg.Admin)
	if cfg.Console != nil {
		s.addConsole(cfg.Console)
	}
	s.add(LevelAdmin, http.MethodPost, "/ojs/v1/admin/workers/{id}/quiet", a.workerDirective(lifecycle.WorkerQuiet))
	s.add(LevelAdmin, http.MethodPost, "/ojs/v1/admin/workers/{id}/terminate", a.workerDirective(lifecycle.WorkerTerminate))
	if a.dead != nil {
		s.add(LevelAdmin, http.MethodGet, "/ojs/v1/dead-letter", ok(a.deadLetter))
		s.add(LevelAdmin, http.MethodGet, "/ojs/v1/dead-letter/stats", ok(func(r *http.Request, _ params) (any, error) {
			if err := unscoped(r, "Dead letter statistics"); err != nil {
				return nil, err
			}
			return a.dead.Stats(r.Context())
		}))
		s.add(LevelAdmin, http.MethodPost, "/ojs/v1/dead-letter/retry", a.deadBulk(true))
		s.add(LevelAdmin, http.MethodDelete, "/ojs/v1/dead-letter", a.deadBulk(false))
		s.add(LevelAdmin, http.MethodGet, "/ojs/v1/dead-letter/{id}", under("job", func(r *http.Request, p params) (any, error) {
			return scoped(r)(a.dead.Get(r.Context(), p("id")))
		}))
		s.add(LevelAdmin, http.MethodPost, "/ojs/v1/dead-letter/{id}/retry", a.retryDead())
		s.add(LevelAdmin, http.MethodDelete, "/ojs/v1/dead-letter/{id}", ok(a.deleteDead))
	}
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/queues", ok(func(r *http.Request, _ params) (any, error) {
		qs, err := a.queueSvc.QueueStates(r.Context())
		return map[string]any{"queues": qs, "pagination": map[string]any{"total": len(qs), "limit": len(qs), "offset": 0, "has_more": false}}, err
	}))
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/queues/{name}/stats", ok(a.queueStats))
	s.add(LevelAdmin, http.MethodPost, "/ojs/v1/queues/{name}/pause", a.pauseQueue(true))
	s.add(LevelAdmin, http.MethodPost, "/ojs/v1/queues/{name}/resume", a.pauseQueue(false))
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/events", ok(a.events))
	if wfs != nil {
		s.addWorkflows(a, wfs)
	}
	if cfg.Crons != nil {
		a.crons = cfg.Crons
		s.add(LevelAdmin, http.MethodPost, "/ojs/v1/cron", withBody(a.registerCron))
		s.add(LevelAdmin, http.MethodGet, "/ojs/v1/cron", ok(a.listCrons))
		s.add(LevelAdmin, http.MethodGet, "/ojs/v1/cron/{name}", ok(func(r *http.Request, p params) (any, error) { return cronBody(a.crons.Get(r.Context(), p("name"))) }))
		s.add(LevelAdmin, http.MethodPatch, "/ojs/v1/cron/{name}", withBody(func(r *http.Request, p params, raw []byte) (any, error) {
			return cronBody(a.crons.SetEnabled(r.Context(), p("name"), raw))
		}))
		s.add(LevelAdmin, http.MethodDelete, "/ojs/v1/cron/{name}", ok(func(r *http.Request, p params) (any, error) {
			v, err := a.crons.Delete(r.Context(), p("name"))
			return map[string]any{"deleted": true, "name": v.Name, "cron": v}, err
		}))
	}
	return s
}

type api struct {
	jobs     Producer
	worker   Worker
	progress Progress
	queueSvc Queues
	// limits is queueSvc when it serves rate limit keys.
	limits RateLimits
	// tenants is Config.Tenants.
	tenants Tenants
	dead    DeadLetter
	backend Backend
	wfs     Workflows
	crons   Crons
	s       *Server
}

// registerCron serves POST /ojs/v1/cron (ojs-cron.md section 8).
func (a *api) registerCron(r *http.Request, _ params, raw []byte) (any, error) {
	v, isNew, err := a.crons.Register(r.Context(), raw)
	return created(isNew, "/ojs/v1/cron/"+v.Name, map[string]any{"cron_job": v, "cron": v}), err
}

// cronBody is a schedule's answer: under "cron_job" (ojs-cron.md) and "cron" (the conformance suite).
func cronBody(v cron.View, err error) (any, error) {
	return map[string]any{"cron_job": v, "cron": v}, err
}

func (a *api) listCrons(r *http.Request, _ params) (any, error) {
	var enabled *bool
	if e := r.URL.Query().Get("enabled"); e != "" {
		b, err := strconv.ParseBool(e)
		if err != nil {
			return nil, ojserr.Invalid("enabled", "The 'enabled' query parameter must be true or false.")
		}
		enabled = &b
	}
	vs, err := a.crons.List(r.Context(), enabled)
	return map[string]any{"cron_jobs": vs, "crons": vs, "count": len(vs)}, err
}

func (a *api) createWorkflow(r *http.Request, _ params, raw []byte) (any, error) {
	v, err := a.wfs.Create(r.Context(), raw)
	if err != nil {
		return nil, err
	}
	if a.queueSvc != nil {
		for _, q := range workflowQueues(raw, a.s.cfg.Now()) {
			if err := a.queueSvc.EnsureQueue(r.Context(), q); err != nil {
				// The workflow is stored; only the queue list lags.
				a.s.cfg.Logger.WarnContext(r.Context(), "registering a workflow queue failed", "queue", q, "error", err.Error())
			}
		}
	}
	status := http.StatusCreated
	if wfview.Creating(v) {
		// Accepted; its nodes and first jobs are being written (GET shows
		// x_creating until they all exist).
		status = http.StatusAccepted
	}
	return answer{status, "/ojs/v1/workflows/" + v.ID, map[string]any{"workflow": v}}, nil
}

// withFields renders j and adds extra top-level fields.
func withFields(j *job.Job, extra map[string]any) map[string]any {
	b, _ := json.Marshal(j)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	maps.Copy(m, extra)
	return m
}

func (a *api) push(w http.ResponseWriter, r *http.Request, _ params) error {
	raw, err := readBody(r)
	if err != nil {
		return err
	}
	j, err := a.jobs.Push(r.Context(), raw)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/ojs/v1/jobs/"+j.ID)
	a.pressure(w, j)
	if j.Deduplicated {
		// A unique policy with on_conflict "ignore" found this job.
		writeJSON(w, http.StatusOK, map[string]any{"job": j, "deduplicated": true})
		return nil
	}
	// The id at the top level too: the durable-execution suite (and
	// clients written like it) read $.id (docs/conformance.md).
	writeJSON(w, http.StatusCreated, map[string]any{"job": j, "id": j.ID})
	return nil
}

func (a *api) pushBatch(w http.ResponseWriter, r *http.Request, _ params) error {
	var req struct {
		Jobs      []json.RawMessage `json:"jobs"`
		Atomicity string            `json:"atomicity"`
	}
	if err := readObject(r, &req); err != nil {
		return err
	}
	if req.Jobs == nil {
		return ojserr.Invalid("jobs", "The 'jobs' field is required and must be an array of jobs.")
	}
	switch req.Atomicity {
	case "", "partial":
	case "atomic":
		if len(req.Jobs) > store.MaxBatch {
			return ojserr.Newf(ojserr.ValidationError, "An atomic batch holds at most %d jobs (one DynamoDB transaction); got %d. Send it in smaller batches or with atomicity \"partial\".", store.MaxBatch, len(req.Jobs)).
				With("field", "atomicity").With("max_atomic_batch_size", store.MaxBatch)
		}
	default:
		return ojserr.Invalid("atomicity", "'atomicity' must be \"atomic\" or \"partial\".")
	}
	raws := make([][]byte, len(req.Jobs))
	for i, j := range req.Jobs {
		raws[i] = j
	}
	jobs, err := a.jobs.PushBatch(r.Context(), raws)
	if pe, ok := errors.AsType[*lifecycle.PartialError](err); ok {
		status := http.StatusMultiStatus
		if len(jobs) == 0 {
			status = http.StatusUnprocessableEntity
		}
		if jobs == nil {
			jobs = []*job.Job{}
		}
		writeJSON(w, status, map[string]any{"jobs": jobs, "count": len(jobs), "succeeded": len(jobs), "failed": len(pe.Failed), "errors": pe.Failed})
		return nil
	}
	if err != nil {
		return err
	}
	a.pressure(w, jobs...)
	writeJSON(w, http.StatusCreated, map[string]any{"jobs": jobs, "count": len(jobs), "succeeded": len(jobs), "failed": 0})
	return nil
}

// pressure adds the backpressure warning headers (ojs-backpressure.md
// 7.3) when a bounded queue of jobs is above its warning share, and the
// X-RateLimit-* headers of keyed jobs (keyHeaders).
func (a *api) pressure(w http.ResponseWriter, jobs ...*job.Job) {
	a.keyHeaders(w, jobs...)
	if a.queueSvc == nil {
		return
	}
	queues := make([]string, len(jobs))
	for i, j := range jobs {
		queues[i] = j.Queue
	}
	if p := a.queueSvc.Pressure(queues...); p != nil && p.Warn {
		for k, v := range p.Headers() {
			w.Header().Set(k, v)
		}
	}
}

func (a *api) cancel(r *http.Request, p params) (any, error) {
	if err := a.owns(r, p("id")); err != nil {
		return nil, err
	}
	return previous(a.jobs.Cancel(r.Context(), p("id")))
}

// previous answers a job with the state it left.
func previous(j *job.Job, prev job.State, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return map[string]any{"job": withFields(j, map[string]any{"previous_state": prev})}, nil
}

func (a *api) activate(r *http.Request, p params) (any, error) {
	if err := a.owns(r, p("id")); err != nil {
		return nil, err
	}
	j, err := a.jobs.Activate(r.Context(), p("id"))
	return previous(j, job.Pending, err)
}

type fetchRequest struct {
	Queues              []string        `json:"queues"`
	Count               json.RawMessage `json:"count"`
	WorkerID            string          `json:"worker_id"`
	VisibilityTimeoutMS json.RawMessage `json:"visibility_timeout_ms"`
	// WaitMS is this implementation's long poll (worker protocol 6.1):
	// how long a FETCH that finds nothing keeps looking before it answers
	// empty. Absent: Config.FetchWait.
	WaitMS json.RawMessage `json:"wait_ms"`
	// Pool names a fair-scheduling pool to fetch from (instead of
	// queues); Strategy and Weights share a FETCH of queues the same way
	// (ojs-fair-scheduling.md 5.2).
	Pool     string         `json:"pool"`
	Strategy string         `json:"strategy"`
	Weights  map[string]int `json:"weights"`
	// Capabilities and Labels are the worker's resources and labels (the
	// ML resources extension, docs/ml-resources.md).
	Capabilities json.RawMessage `json:"capabilities"`
	Labels       json.RawMessage `json:"labels"`
}

// shares resolves a FETCH's pool or strategy into its queues and their
// shares (nil shares: the queues in order).
func (a *api) shares(r *http.Request, req *fetchRequest, count int) (map[string]int, error) {
	var p *queue.Pool
	switch {
	case req.Pool != "":
		if len(req.Queues) > 0 || req.Strategy != "" {
			return nil, ojserr.Invalid("pool", "A FETCH names a pool or queues (with a strategy), not both.")
		}
		var err error
		if p, err = a.queueSvc.FetchPool(r.Context(), req.Pool); err != nil {
			return nil, err
		}
		req.Queues = p.Queues
	case req.Strategy != "" || req.Weights != nil:
		p = &queue.Pool{Queues: req.Queues, Strategy: req.Strategy, Weights: req.Weights}
		if err := queue.ValidatePool(p); err != nil {
			return nil, err
		}
	default:
		return nil, nil
	}
	return a.queueSvc.Shares(p, count), nil
}

func intParam(field string, raw json.RawMessage, lo, hi int64) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < lo || n > hi {
		return 0, ojserr.Invalid(field, "The '%s' field must be an integer between %d and %d.", field, lo, hi)
	}
	return n, nil
}

func (a *api) fetch(r *http.Request, _ params) (any, error) {
	var req fetchRequest
	if err := readObject(r, &req); err != nil {
		return nil, err
	}
	count, err := intParam("count", req.Count, 1, lifecycle.MaxFetch)
	if err != nil {
		return nil, err
	}
	vt, err := intParam("visibility_timeout_ms", req.VisibilityTimeoutMS, 1, job.MaxTimeout.Milliseconds())
	if err != nil {
		return nil, err
	}
	if len(req.WorkerID) > 256 {
		return nil, ojserr.Invalid("worker_id", "The 'worker_id' field is at most 256 characters.")
	}
	wait := a.s.cfg.FetchWait
	if len(req.WaitMS) > 0 && string(req.WaitMS) != "null" {
		ms, err := intParam("wait_ms", req.WaitMS, 0, lifecycle.MaxFetchWait.Milliseconds())
		if err != nil {
			return nil, err
		}
		wait = time.Duration(ms) * time.Millisecond
	}
	shares, err := a.shares(r, &req, int(count))
	if err != nil {
		return nil, err
	}
	caps, err := job.ParseCapabilities(req.Capabilities, req.Labels)
	if err != nil {
		return nil, err
	}
	jobs, err := a.worker.Fetch(r.Context(), lifecycle.FetchRequest{Queues: req.Queues, Count: int(count), WorkerID: req.WorkerID,
		Visibility: time.Duration(vt) * time.Millisecond, Wait: wait, Shares: shares, Tenant: tenantOf(r), Worker: caps})
	if err != nil {
		return nil, err
	}
	out := map[string]any{"jobs": jobs}
	if len(jobs) > 0 {
		out["job"] = jobs[0]
	}
	return out, nil
}

// jobReport is what an ACK and a NACK name: the job, the worker holding
// its reservation and the attempt.
type jobReport struct {
	JobID    string          `json:"job_id"`
	WorkerID string          `json:"worker_id"`
	Attempt  json.RawMessage `json:"attempt"`
}

// readReport reads an ACK's or NACK's body into req (which embeds rep),
// sets its job id (from the path of POST /jobs/{id}/ack and /nack,
// ojs-results.md 10.1 and ojs-serverless.md 4.2, where a body job_id may
// only repeat it), checks the job is the request's tenant's and returns
// its attempt.
func (a *api) readReport(r *http.Request, p params, req any, rep *jobReport) (int, error) {
	if err := readObject(r, req); err != nil {
		return 0, err
	}
	switch path := p("id"); {
	case path != "" && rep.JobID != "" && rep.JobID != path:
		return 0, ojserr.Invalid("job_id", "The body's 'job_id' differs from the job in the path.")
	case path != "":
		rep.JobID = path
	case rep.JobID == "":
		return 0, ojserr.Invalid("job_id", "The 'job_id' field is required.")
	}
	n, err := intParam("attempt", rep.Attempt, 1, math.MaxInt32)
	if err != nil {
		return 0, err
	}
	return int(n), a.owns(r, rep.JobID)
}

func (a *api) ack(r *http.Request, p params) (any, error) {
	var req struct {
		jobReport
		Result json.RawMessage `json:"result"`
	}
	attempt, err := a.readReport(r, p, &req, &req.jobReport)
	if err != nil {
		return nil, err
	}
	if string(req.Result) == "null" {
		req.Result = nil
	}
	// With worker_id, only the worker holding the reservation may ACK
	// (ojs-worker-protocol.md 5.6).
	// With attempt (the FETCH answer's), only that attempt: a late ACK of
	// an attempt whose lease ended cannot complete the next one.
	j, err := a.worker.AckOwned(r.Context(), req.JobID, req.WorkerID, attempt, req.Result)
	if err != nil {
		return nil, err
	}
	return withFields(j, map[string]any{"acknowledged": true, "job_id": j.ID, "job": j}), nil
}

func (a *api) nack(r *http.Request, p params) (any, error) {
	var req struct {
		jobReport
		Error *struct {
			Code      string          `json:"code"`
			Type      string          `json:"type"`
			Message   string          `json:"message"`
			Retryable *bool           `json:"retryable"`
			Backtrace []string        `json:"backtrace"`
			Details   json.RawMessage `json:"details"`
			// RateLimitUntil holds the job's rate limit key until then
			// (ojs-rate-limiting.md 9.1).
			RateLimitUntil string `json:"rate_limit_until"`
		} `json:"error"`
		Requeue bool `json:"requeue"`
	}
	attempt, err := a.readReport(r, p, &req, &req.jobReport)
	if err != nil {
		return nil, err
	}
	if req.Error == nil {
		return nil, ojserr.Invalid("error", "The 'error' object is required.")
	}
	if len(req.Error.Message) > 64<<10 || len(req.Error.Details) > 64<<10 {
		return nil, ojserr.Newf(ojserr.PayloadTooLarge, "The error message and details are limited to 64 KiB each.").With("field", "error")
	}
	in := lifecycle.ErrorInput{Type: req.Error.Type, Code: req.Error.Code, Message: req.Error.Message, Retryable: req.Error.Retryable,
		Backtrace: req.Error.Backtrace, Details: req.Error.Details, Requeue: req.Requeue, RateLimitUntil: req.Error.RateLimitUntil}
	j, err := a.worker.NackOwned(r.Context(), req.JobID, req.WorkerID, attempt, in)
	if err != nil {
		return nil, err
	}
	return withFields(j, map[string]any{"job_id": j.ID, "job": j}), nil
}

// heartbeat serves BEAT. It accepts both request shapes in use: the
// worker protocol's (active_jobs as a count, active_job_ids as the list)
// and the HTTP binding's (active_jobs as the list, or one job_id).
func (a *api) heartbeat(r *http.Request, _ params) (any, error) {
	var req struct {
		WorkerID            string          `json:"worker_id"`
		State               string          `json:"state"`
		ActiveJobs          json.RawMessage `json:"active_jobs"`
		ActiveJobIDs        []string        `json:"active_job_ids"`
		JobID               string          `json:"job_id"`
		Hostname            string          `json:"hostname"`
		Queues              []string        `json:"queues"`
		Concurrency         json.RawMessage `json:"concurrency"`
		VisibilityTimeoutMS json.RawMessage `json:"visibility_timeout_ms"`
		Shutdown            bool            `json:"shutdown"`
	}
	if err := readObject(r, &req); err != nil {
		return nil, err
	}
	// ojs-graceful-shutdown.md's words for the same states: a draining
	// worker takes no new jobs (quiet); one shutting down terminates.
	switch {
	case req.Shutdown:
		req.State = lifecycle.WorkerTerminate
	case req.State == "drain" || req.State == "draining":
		req.State = lifecycle.WorkerQuiet
	}
	conc, err := intParam("concurrency", req.Concurrency, 1, 100000)
	if err != nil {
		return nil, err
	}
	hr := lifecycle.HeartbeatRequest{WorkerID: req.WorkerID, State: req.State, JobIDs: req.ActiveJobIDs, Hostname: req.Hostname, Queues: req.Queues,
		Concurrency: int(conc)}
	if len(req.ActiveJobs) > 0 && string(req.ActiveJobs) != "null" {
		var ids []string
		if json.Unmarshal(req.ActiveJobs, &ids) == nil {
			hr.JobIDs = append(hr.JobIDs, ids...)
		} else if json.Unmarshal(req.ActiveJobs, &hr.Active) != nil || hr.Active < 0 {
			return nil, ojserr.Invalid("active_jobs", "'active_jobs' must be a list of job ids or a non-negative count.")
		}
	}
	if req.JobID != "" {
		hr.JobIDs = append(hr.JobIDs, req.JobID)
	}
	vt, err := intParam("visibility_timeout_ms", req.VisibilityTimeoutMS, 1, job.MaxTimeout.Milliseconds())
	if err != nil {
		return nil, err
	}
	hr.Visibility = time.Duration(vt) * time.Millisecond
	res, err := a.worker.Heartbeat(r.Context(), hr)
	if err != nil {
		return nil, err
	}
	return map[string]any{"state": res.State, "directive": res.State, "jobs_extended": res.Extended, "jobs_cancelled": res.Cancelled,
		"server_time": job.Timestamp(a.s.cfg.Now()), "acknowledged": true}, nil
}

func (a *api) workers(r *http.Request, _ params) (any, error) {
	ws, err := a.worker.Workers(r.Context())
	return map[string]any{"items": ws, "pagination": map[string]any{"total": len(ws)}}, err
}

// workerDirective serves POST /ojs/v1/admin/workers/{id}/quiet and
// /terminate: the worker learns it on its next heartbeat.
func (a *api) workerDirective(directive string) handlerFunc {
	return under("worker", func(r *http.Request, p params) (any, error) {
		return a.worker.SetWorkerDirective(r.Context(), p("id"), directive)
	})
}

func limitParam(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 50, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, ojserr.Invalid("limit", "The 'limit' parameter must be an integer between 1 and 100.")
	}
	return n, nil
}

func (a *api) deadLetter(r *http.Request, _ params) (any, error) {
	limit, err := limitParam(r)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query().Get("queue")
	if q != "" {
		if err := job.ValidateQueue(q); err != nil {
			return nil, err
		}
	}
	jobs, more, err := a.dead.List(r.Context(), q, limit)
	if t := tenantOf(r); t != "" {
		// A scoped request sees its tenant's (the page then holds fewer).
		jobs = slices.DeleteFunc(jobs, func(j *job.Job) bool { return j.Tenant != t })
	}
	return map[string]any{"jobs": jobs, "pagination": map[string]any{"total": len(jobs), "limit": limit, "offset": 0, "has_more": more}}, err
}

// deadBulk serves POST /dead-letter/retry and DELETE /dead-letter (a
// purge): {"filter": {...}, "confirm": true}, or for DELETE the same as
// query parameters (deadQueryBody).
func (a *api) deadBulk(retry bool) handlerFunc {
	return ok(func(r *http.Request, _ params) (any, error) {
		if err := unscoped(r, "Bulk dead letter operations"); err != nil {
			return nil, err
		}
		raw, err := bulkBody(r, !retry)
		if err != nil {
			return nil, err
		}
		f, err := deadletter.ParseBulk(raw)
		if err != nil {
			return nil, err
		}
		op, key := a.dead.Purge, "deleted"
		if retry {
			op, key = a.dead.RetryMatching, "retried"
		}
		res, err := op(r.Context(), f)
		if err != nil {
			return nil, err
		}
		out := map[string]any{"matched": res.Matched, "succeeded": res.Succeeded, "failed": res.Failed, "job_ids": res.JobIDs, "has_more": res.HasMore, key: res.Succeeded}
		if res.NextCursor != "" {
			out["next_cursor"] = res.NextCursor
		}
		return out, nil
	})
}

// bulkBody reads a dead letter bulk request: the body or, when query is
// set and the body is empty, the query parameters (deadQueryBody).
func bulkBody(r *http.Request, query bool) ([]byte, error) {
	raw, err := readBody(r)
	if err != nil || !query || len(strings.TrimSpace(string(raw))) > 0 {
		return raw, err
	}
	return deadQueryBody(r)
}

// deadQueryBody turns DELETE /dead-letter's query parameters into the
// bulk request body.
func deadQueryBody(r *http.Request) ([]byte, error) {
	q := r.URL.Query()
	body := map[string]any{"confirm": q.Get("confirm") == "true"}
	filter := map[string]string{}
	for _, k := range []string{"queue", "type", "error_type", "since"} {
		if v := q.Get(k); v != "" {
			filter[k] = v
		}
	}
	body["filter"] = filter
	if c := q.Get("cursor"); c != "" {
		body["cursor"] = c
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return nil, ojserr.Invalid("limit", "'limit' must be a whole number.")
		}
		body["limit"] = n
	}
	return json.Marshal(body)
}

func (a *api) retryDead() handlerFunc {
	return withBody(func(r *http.Request, p params, raw []byte) (any, error) {
		o, err := deadletter.ParseRetryRequest(raw)
		if err != nil {
			return nil, err
		}
		if err := a.owns(r, p("id")); err != nil {
			return nil, err
		}
		j, err := a.dead.Retry(r.Context(), p("id"), o)
		return map[string]any{"job": j}, err
	})
}

func (a *api) deleteDead(r *http.Request, p params) (any, error) {
	if err := a.owns(r, p("id")); err != nil {
		return nil, err
	}
	return map[string]any{"deleted": true, "job_id": p("id")}, a.dead.Delete(r.Context(), p("id"))
}

// queueStats serves GET /queues/{name}/stats: the counts both flat under
// "queue" (as the conformance suite reads them) and under "stats" (as the
// HTTP binding's example shows).
func (a *api) queueStats(r *http.Request, p params) (any, error) {
	if t := tenantOf(r); t != "" {
		return a.tenantQueue(r, p("name"), t)
	}
	st, err := a.queueSvc.Stats(r.Context(), p("name"))
	if err != nil {
		return nil, err
	}
	stats := map[string]any{"queue": st.Name,
		"available": st.Available, "active": st.Active, "scheduled": st.Scheduled, "retryable": st.Retryable,
		"discarded": st.Discarded, "completed_last_hour": st.CompletedLastHour, "failed_last_hour": st.FailedLastHour,
		"depth": st.Depth(),
	}
	if b := st.Backpressure; b != nil {
		stats["max_depth"], stats["pressure"] = b.MaxDepth, float64(st.Depth())/float64(b.MaxDepth)
	}
	return map[string]any{"queue": st, "status": st.Status, "stats": stats, "computed_at": job.Timestamp(a.s.cfg.Now())}, nil
}

func (a *api) pauseQueue(paused bool) handlerFunc {
	return ok(func(r *http.Request, p params) (any, error) {
		st, err := a.queueSvc.SetPaused(r.Context(), p("name"), paused)
		return map[string]any{"queue": st, "status": st.Status, "paused_at": st.PausedAt}, err
	})
}

// events serves GET /ojs/v1/events (ojs-events.md section 6.4): events in
// time order after the cursor, filtered by type, queue, job type, job or
// workflow and time.
func (a *api) events(r *http.Request, _ params) (any, error) {
	f, err := events.ParseQuery(r.URL.Query())
	if err != nil {
		return nil, err
	}
	f.MaxBytes = store.ListBytes
	f.Tenant = tenantOf(r) // a request scoped to a tenant reads its events
	if a.s.cfg.Events == nil {
		return nil, ojserr.Backend(errors.New("no event log"))
	}
	page, err := a.s.cfg.Events.QueryEvents(r.Context(), f, a.s.cfg.Now())
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return page, nil
}

func (a *api) health(r *http.Request, _ params) (any, error) {
	start := a.s.cfg.Now()
	err := a.backend.Ping(r.Context())
	backend := map[string]any{"type": "dynamodb", "status": "ok", "latency_ms": a.s.cfg.Now().Sub(start).Milliseconds()}
	status, code := "ok", http.StatusOK
	if err != nil {
		a.s.cfg.Logger.ErrorContext(r.Context(), "health check failed", "error", err.Error())
		status, code = "degraded", http.StatusServiceUnavailable
		backend["status"], backend["error"] = "unhealthy", "the job table is unreachable"
	}
	out := map[string]any{"status": status, "version": job.SpecVersion, "uptime_seconds": int64(a.s.cfg.Now().Sub(a.s.started).Seconds()), "backend": backend}
	if a.s.cfg.Region != "" {
		out["region"] = a.s.cfg.Region // federation clients check whom they reach
	}
	return answer{code, "", out}, nil
}

// addWorkflows registers the workflow routes (ojs-workflows.md); a request
// scoped to a tenant reads and cancels only its tenant's workflows.
func (s *Server) addWorkflows(a *api, wfs Workflows) {
	s.add(LevelProducer, http.MethodPost, "/ojs/v1/workflows", withBody(a.createWorkflow))
	s.add(LevelProducer, http.MethodGet, "/ojs/v1/workflows/{id}", under("workflow", func(r *http.Request, p params) (any, error) {
		return a.workflowFor(r, p("id"))
	}))
	s.add(LevelProducer, http.MethodGet, "/ojs/v1/workflows/{id}/progress", ok(func(r *http.Request, p params) (any, error) {
		v, err := a.workflowFor(r, p("id"))
		if err != nil {
			return nil, err
		}
		return v.ProgressOf(), nil
	}))
	s.add(LevelProducer, http.MethodDelete, "/ojs/v1/workflows/{id}", under("workflow", func(r *http.Request, p params) (any, error) {
		if tenantOf(r) != "" {
			if _, err := a.workflowFor(r, p("id")); err != nil {
				return nil, err
			}
		}
		return wfs.Cancel(r.Context(), p("id"))
	}))
	// A failed or cancelled workflow runs again from its failed steps.
	s.add(LevelAdmin, http.MethodPost, "/ojs/v1/workflows/{id}/retry", byPath("workflow", "id", wfs.Retry))
}
