package httpapi

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/tenant"
)

// The observability endpoints (ojs-observability.md): GET /metrics in the
// Prometheus text format, GET /ready and GET /health at the root for load
// balancers. A request id (X-Request-Id, echoed or generated) is on every
// answer, and W3C trace context travels in a job's meta (kept verbatim).

// durationBuckets are the request duration histogram's upper bounds (s).
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// requestMetrics counts this process's requests by route and status. On
// Lambda each instance counts its own (Prometheus treats a restart as a
// counter reset); the table-derived gauges are the same on every instance.
type requestMetrics struct {
	mu     sync.Mutex
	counts map[[2]string]uint64
	hist   map[string]*histogram
}

type histogram struct {
	buckets []uint64
	sum     float64
	count   uint64
}

func newRequestMetrics() *requestMetrics {
	return &requestMetrics{counts: map[[2]string]uint64{}, hist: map[string]*histogram{}}
}

func (m *requestMetrics) observe(route string, status int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[[2]string{route, strconv.Itoa(status)}]++
	h := m.hist[route]
	if h == nil {
		h = &histogram{buckets: make([]uint64, len(durationBuckets))}
		m.hist[route] = h
	}
	sec := d.Seconds()
	for i, b := range durationBuckets {
		if sec <= b {
			h.buckets[i]++
		}
	}
	h.sum += sec
	h.count++
}

func (m *requestMetrics) write(b *strings.Builder) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b.WriteString("# HELP ojs_http_requests_total HTTP requests served by this API instance, by route and status.\n# TYPE ojs_http_requests_total counter\n")
	keys := slices.SortedFunc(maps.Keys(m.counts), func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	for _, k := range keys {
		fmt.Fprintf(b, "ojs_http_requests_total{route=%s,code=%s} %d\n", label(k[0]), label(k[1]), m.counts[k])
	}
	b.WriteString("# HELP ojs_http_request_duration_seconds HTTP request duration on this API instance, by route.\n# TYPE ojs_http_request_duration_seconds histogram\n")
	for _, r := range slices.Sorted(maps.Keys(m.hist)) {
		h := m.hist[r]
		for i, ub := range durationBuckets {
			fmt.Fprintf(b, "ojs_http_request_duration_seconds_bucket{route=%s,le=\"%g\"} %d\n", label(r), ub, h.buckets[i])
		}
		fmt.Fprintf(b, "ojs_http_request_duration_seconds_bucket{route=%s,le=\"+Inf\"} %d\n", label(r), h.count)
		fmt.Fprintf(b, "ojs_http_request_duration_seconds_sum{route=%s} %g\n", label(r), h.sum)
		fmt.Fprintf(b, "ojs_http_request_duration_seconds_count{route=%s} %d\n", label(r), h.count)
	}
}

// label quotes a Prometheus label value.
func label(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(v) + `"`
}

// addObservability registers /metrics, /ready and /health.
func (s *Server) addObservability(a *api, ad *admin.Service) {
	s.add(LevelAny, http.MethodGet, "/health", ok(a.health))
	s.add(LevelAny, http.MethodGet, "/ready", ok(a.ready))
	s.addRaw(LevelAdmin, http.MethodGet, "/metrics", func(w http.ResponseWriter, r *http.Request, _ params) error {
		var b strings.Builder
		fmt.Fprintf(&b, "# HELP ojs_info This OJS implementation.\n# TYPE ojs_info gauge\nojs_info{implementation=\"ojs-serverless\",version=%s,spec=%s} 1\n",
			label(ImplementationVersion), label(job.SpecVersion))
		fmt.Fprintf(&b, "# HELP ojs_process_start_time_seconds When this API instance started (Unix seconds).\n# TYPE ojs_process_start_time_seconds gauge\nojs_process_start_time_seconds %d\n", s.started.Unix())
		if ad != nil {
			if err := writeTableMetrics(r, &b, a, ad); err != nil {
				return err
			}
		}
		s.metrics.write(&b)
		// Exactly text/plain: the Prometheus text format 0.0.4 is the
		// default for it, and the conformance suite compares the header.
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(b.String()))
		return nil
	})
}

// writeTableMetrics writes the gauges derived from the table: queue depth
// by state (ojs.queue.depth), pause state, dead letter size, throughput of
// the last five minutes and workers. They cost what GET /admin/queues
// costs (docs/admin.md).
func writeTableMetrics(r *http.Request, b *strings.Builder, a *api, ad *admin.Service) error {
	ql, err := ad.Queues(r.Context(), 1, 1<<20, a.isPush())
	if err != nil {
		return err
	}
	b.WriteString("# HELP ojs_queue_depth Jobs per queue and state (available, active, scheduled, retryable, discarded: now; completed, cancelled: in the last hour).\n# TYPE ojs_queue_depth gauge\n")
	for _, q := range ql.Items {
		c := q.Counts
		for _, kv := range []struct {
			state string
			n     int
		}{{"available", c.Available}, {"active", c.Active}, {"scheduled", c.Scheduled}, {"retryable", c.Retryable},
			{"discarded", c.Discarded}, {"completed", c.Completed}, {"cancelled", c.Cancelled}} {
			fmt.Fprintf(b, "ojs_queue_depth{queue=%s,state=%s} %d\n", label(q.Name), label(kv.state), kv.n)
		}
	}
	b.WriteString("# HELP ojs_queue_paused 1 when the queue is paused.\n# TYPE ojs_queue_paused gauge\n")
	for _, q := range ql.Items {
		fmt.Fprintf(b, "ojs_queue_paused{queue=%s} %d\n", label(q.Name), boolNum(q.Paused))
	}
	b.WriteString("# HELP ojs_dead_letter_total Dead letter jobs per queue.\n# TYPE ojs_dead_letter_total gauge\n")
	for _, q := range ql.Items {
		fmt.Fprintf(b, "ojs_dead_letter_total{queue=%s} %d\n", label(q.Name), q.Counts.Discarded)
	}
	b.WriteString("# HELP ojs_queue_throughput_per_minute Jobs completed (processed) and attempts failed per minute over the last five minutes.\n# TYPE ojs_queue_throughput_per_minute gauge\n")
	for _, q := range ql.Items {
		fmt.Fprintf(b, "ojs_queue_throughput_per_minute{queue=%s,outcome=\"processed\"} %g\n", label(q.Name), q.Throughput.ProcessedPerMinute)
		fmt.Fprintf(b, "ojs_queue_throughput_per_minute{queue=%s,outcome=\"failed\"} %g\n", label(q.Name), q.Throughput.FailedPerMinute)
	}
	wl, err := ad.Workers(r.Context(), 1, admin.MaxWorkers)
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "# HELP ojs_workers_active Workers that sent a heartbeat recently.\n# TYPE ojs_workers_active gauge\nojs_workers_active %d\n", wl.Summary.Running+wl.Summary.Quiet)
	fmt.Fprintf(b, "# HELP ojs_workers_stale Workers whose last heartbeat is older than the stale limit.\n# TYPE ojs_workers_stale gauge\nojs_workers_stale %d\n", wl.Summary.Stale)
	return writeTenantMetrics(r, b, a)
}

// maxMetricTenants bounds the tenants /metrics labels (ojs-multi-tenancy.md
// 15.4 recommends at most 1,000 tenant_id values).
const maxMetricTenants = 1000

// writeTenantMetrics writes the per-tenant gauges (ojs-multi-tenancy.md
// 11.2, MT-006) of the first maxMetricTenants tenants by id: available
// jobs per queue (the tenant index: exact for pull-mode queues) and, for
// a tenant with a max_concurrency, its active jobs (its concurrency key's
// slots). Each tenant and queue costs a count of the tenant index, each
// limited tenant a read of its key.
func writeTenantMetrics(r *http.Request, b *strings.Builder, a *api) error {
	if a.tenants == nil {
		return nil
	}
	list, err := a.tenants.List(r.Context())
	if err != nil {
		return err
	}
	shown := list[:min(len(list), maxMetricTenants)]
	b.WriteString("# HELP ojs_tenant_jobs_available Available jobs per tenant and queue (pull-mode queues; the tenant index).\n# TYPE ojs_tenant_jobs_available gauge\n")
	for _, in := range shown {
		for _, q := range in.Queues {
			n, err := a.tenants.Available(r.Context(), in.ID, q)
			if err != nil {
				return err
			}
			fmt.Fprintf(b, "ojs_tenant_jobs_available{tenant_id=%s,queue=%s} %d\n", label(in.ID), label(q), n)
		}
	}
	b.WriteString("# HELP ojs_tenant_jobs_active Active jobs of each tenant with a max_concurrency, and the limit.\n# TYPE ojs_tenant_jobs_active gauge\n")
	for _, in := range shown {
		if in.Limits.MaxConcurrency == nil || a.limits == nil {
			continue
		}
		k, err := a.limits.KeyInfo(r.Context(), tenant.ConcurrencyKey(in.ID))
		if ojserr.As(err).Code == ojserr.NotFound {
			continue
		}
		if err != nil {
			return err
		}
		if k.Concurrency != nil {
			fmt.Fprintf(b, "ojs_tenant_jobs_active{tenant_id=%s} %d\n", label(in.ID), k.Concurrency.Active)
		}
	}
	fmt.Fprintf(b, "# HELP ojs_tenant_metrics_omitted Tenants past the first %d, not labelled.\n# TYPE ojs_tenant_metrics_omitted gauge\nojs_tenant_metrics_omitted %d\n",
		maxMetricTenants, len(list)-len(shown))
	return nil
}

func boolNum(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ready serves GET /ready: 200 when the job table answers, else 503.
func (a *api) ready(r *http.Request, _ params) (any, error) {
	if err := a.backend.Ping(r.Context()); err != nil {
		a.s.cfg.Logger.ErrorContext(r.Context(), "readiness check failed", "error", err.Error())
		return answer{http.StatusServiceUnavailable, "", map[string]any{"status": "not_ready", "backend": map[string]any{"type": "dynamodb", "status": "unhealthy"}}}, nil
	}
	return map[string]any{"status": "ready", "backend": map[string]any{"type": "dynamodb", "status": "ok"}}, nil
}

// The graceful shutdown extension's routes (ojs-graceful-shutdown.md as
// the conformance suite exercises it): BEAT under its short name, where a
// worker reports "drain" (this backend's "quiet": no new jobs) or
// "shutdown": true ("terminate"), and a worker's health.
func (s *Server) addGracefulShutdown(a *api, ad *admin.Service) {
	s.add(LevelWorker, http.MethodPost, "/ojs/v1/workers/beat", ok(a.heartbeat))
	if ad != nil {
		s.add(LevelWorker, http.MethodGet, "/ojs/v1/workers/{id}/health", ok(func(r *http.Request, p params) (any, error) {
			wk, err := ad.Worker(r.Context(), p("id"))
			if err != nil {
				return nil, err
			}
			state := wk.State
			switch state {
			case "quiet":
				state = "draining"
			case "terminate":
				state = "shutting_down"
			}
			status := http.StatusOK
			if wk.Stale || state != "running" {
				status = http.StatusServiceUnavailable
			}
			return answer{status, "", map[string]any{"worker_id": wk.ID, "state": state, "active_jobs": wk.ActiveJobs,
				"last_heartbeat_at": wk.LastHeartbeatAt, "stale": wk.Stale, "directive": wk.Directive}}, nil
		}))
	}
}
