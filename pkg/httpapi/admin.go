package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
)

// addAdmin registers the Admin API (ojs-admin-api.md) under
// /ojs/v1/admin. The worker directive routes are registered by New.
func (s *Server) addAdmin(a *api, ad *admin.Service) {
	const p = "/ojs/v1/admin"
	s.add(LevelAdmin, http.MethodGet, p+"/queues", paged(func(r *http.Request, page, per int) (any, error) {
		return ad.Queues(r.Context(), page, per, a.isPush())
	}))
	s.add(LevelAdmin, http.MethodGet, p+"/queues/{name}", ok(func(r *http.Request, p params) (any, error) { return ad.Queue(r.Context(), p("name"), a.isPush()) }))
	for verb, paused := range map[string]bool{"pause": true, "resume": false} {
		s.add(LevelAdmin, http.MethodPost, p+"/queues/{name}/"+verb, ok(func(r *http.Request, p params) (any, error) { return ad.SetPaused(r.Context(), p("name"), paused) }))
	}
	s.add(LevelAdmin, http.MethodDelete, p+"/queues/{name}/jobs", withBody(func(r *http.Request, p params, raw []byte) (any, error) { return ad.Purge(r.Context(), p("name"), raw) }))
	s.add(LevelAdmin, http.MethodPut, p+"/queues/{name}/config", withBody(func(r *http.Request, p params, raw []byte) (any, error) {
		return ad.SetConfig(r.Context(), p("name"), raw)
	}))
	s.addPools(ad.Pools())
	s.add(LevelAdmin, http.MethodGet, p+"/jobs", queried(admin.ParseJobQuery, ad.SearchJobs))
	s.add(LevelAdmin, http.MethodGet, p+"/jobs/{id}", ok(func(r *http.Request, p params) (any, error) {
		m, _, err := ad.JobDetail(r.Context(), p("id"))
		return m, err
	}))
	s.add(LevelAdmin, http.MethodPost, p+"/jobs/{id}/cancel", ok(func(r *http.Request, p params) (any, error) { return previous(ad.CancelJob(r.Context(), p("id"))) }))
	s.add(LevelAdmin, http.MethodPost, p+"/jobs/{id}/retry", byPath("job", "id", ad.RetryJob))
	// Literal actions: a wildcard here would overlap /jobs/{id}/cancel.
	for _, act := range []string{admin.BulkRetry, admin.BulkCancel, admin.BulkDelete} {
		s.add(LevelAdmin, http.MethodPost, p+"/jobs/bulk/"+act, withBody(func(r *http.Request, _ params, raw []byte) (any, error) { return ad.Bulk(r.Context(), act, raw) }))
	}
	s.add(LevelAdmin, http.MethodGet, p+"/workers/{id}", byPath("", "id", ad.Worker))
	s.add(LevelAdmin, http.MethodDelete, p+"/workers/{id}", noContent(ad.Deregister))
	s.add(LevelAdmin, http.MethodGet, p+"/stats", ok(func(r *http.Request, _ params) (any, error) { return ad.Stats(r.Context()) }))
	s.add(LevelAdmin, http.MethodGet, p+"/stats/history", queried(ad.ParseHistoryQuery, ad.History))
	s.add(LevelAdmin, http.MethodGet, p+"/dead-letter", queried(admin.ParseJobQuery, ad.DeadLetter))
	if a.dead != nil {
		s.add(LevelAdmin, http.MethodGet, p+"/dead-letter/stats", ok(func(r *http.Request, _ params) (any, error) { return a.dead.Stats(r.Context()) }))
		s.add(LevelAdmin, http.MethodGet, p+"/dead-letter/{id}", byPath("job", "id", a.dead.Get))
		s.add(LevelAdmin, http.MethodPost, p+"/dead-letter/{id}/retry", a.retryDead())
		// 204 (ojs-dead-letter.md 10 through the Admin API, as the
		// conformance suite expects); the data plane's DELETE answers 200.
		s.add(LevelAdmin, http.MethodDelete, p+"/dead-letter/{id}", noContent(a.dead.Delete))
		s.add(LevelAdmin, http.MethodPost, p+"/dead-letter/retry", a.deadBulk(true))
	}
	s.add(LevelAdmin, http.MethodDelete, p+"/dead-letter", ok(func(r *http.Request, _ params) (any, error) {
		raw, err := bulkBody(r, true)
		if err != nil {
			return nil, err
		}
		res, err := ad.PurgeDead(r.Context(), raw)
		if err != nil {
			return nil, err
		}
		return map[string]any{"purged_count": res.Succeeded, "deleted": res.Succeeded, "matched": res.Matched,
			"failed": res.Failed, "job_ids": res.JobIDs, "has_more": res.HasMore}, nil
	}))
	s.add(LevelAdmin, http.MethodGet, p+"/system/config", ok(a.systemConfig))
}

// noContent serves op on the path value id with a 204.
func noContent(op func(context.Context, string) error) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p params) error {
		if err := op(r.Context(), p("id")); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// queried serves op on the request's query parameters as parse reads them.
func queried[Q, T any](parse func(url.Values) (Q, error), op func(context.Context, Q) (T, error)) handlerFunc {
	return ok(func(r *http.Request, _ params) (any, error) {
		q, err := parse(r.URL.Query())
		if err != nil {
			return nil, err
		}
		return op(r.Context(), q)
	})
}

// paged serves a listing read with pageParams.
func paged(fn func(r *http.Request, page, per int) (any, error)) handlerFunc {
	return ok(func(r *http.Request, _ params) (any, error) {
		page, per, err := pageParams(r)
		if err != nil {
			return nil, err
		}
		return fn(r, page, per)
	})
}

// pageParams reads page (1-based) and per_page (1..100, default 20).
func pageParams(r *http.Request) (int, int, error) {
	page, per := 1, admin.DefaultPerPage
	q := r.URL.Query()
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1_000_000 {
			return 0, 0, ojserr.Invalid("page", "'page' must be a positive integer.")
		}
		page = n
	}
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > admin.MaxPerPage {
			return 0, 0, ojserr.Invalid("per_page", "'per_page' must be an integer from 1 to %d.", admin.MaxPerPage)
		}
		per = n
	}
	return page, per, nil
}

// isPush tells push-mode queues (nil without a queue service).
func (a *api) isPush() func(string) bool {
	if a.queueSvc != nil {
		return a.queueSvc.IsPush
	}
	return nil
}

// systemConfig serves GET /admin/system/config: non-sensitive settings
// (ojs-admin-api.md 12.2). Secrets (the auth token) are never shown, only
// whether one is set.
func (a *api) systemConfig(*http.Request, params) (any, error) {
	cfg := a.s.cfg
	return map[string]any{
		"implementation": map[string]any{"name": "ojs-serverless", "version": ImplementationVersion},
		"backend":        "dynamodb",
		"auth":           map[string]any{"bearer_token_required": cfg.AuthToken != ""},
		"limits": map[string]any{"max_request_bytes": MaxBodyBytes, "max_fetch_count": lifecycle.MaxFetch,
			"max_bulk_jobs": admin.MaxBulk, "max_page_size": admin.MaxPerPage, "min_priority": job.MinPriority, "max_priority": job.MaxPriority},
		"admin": map[string]any{"stale_worker_after": admin.DefaultStaleAfter.String(), "max_query_calls": admin.MaxQueryCalls,
			"max_count_per_partition": admin.MaxCountPerPartition, "max_stats_events": admin.MaxStatsEvents, "event_window": admin.EventWindow.String()},
		"indexes":     topology.JobTable.IndexNames(),
		"maintenance": map[string]any{"supported": false},
	}, nil
}

// workflowQueues lists the queues of a workflow request's jobs (callbacks,
// handlers and compensations too; at most 100), so that they are
// registered like the queues of pushed jobs: the queue list, the console
// and the searches over all queues read the registry.
func workflowQueues(raw []byte, now time.Time) []string {
	p, err := wfdef.Parse(raw, now)
	if err != nil {
		return nil
	}
	var out []string
	for k := range p.Kept {
		if !slices.Contains(out, k.Queue) && len(out) < 100 {
			out = append(out, k.Queue)
		}
	}
	return out
}

// addPools serves the fair-scheduling extension's admin routes
// (ojs-fair-scheduling.md 10).
func (s *Server) addPools(ad admin.Pools) {
	const p = "/ojs/v1/admin"
	s.add(LevelAdmin, http.MethodGet, p+"/pools", ok(func(r *http.Request, _ params) (any, error) {
		list, err := ad.List(r.Context())
		return map[string]any{"items": list}, err
	}))
	s.add(LevelAdmin, http.MethodPut, p+"/pools/{name}", withBody(func(r *http.Request, p params, raw []byte) (any, error) {
		pool, isNew, err := ad.Put(r.Context(), p("name"), raw)
		return created(isNew, "", map[string]any{"pool": pool}), err
	}))
	s.add(LevelAdmin, http.MethodGet, p+"/pools/{name}", byPath("pool", "name", ad.Get))
	s.add(LevelAdmin, http.MethodDelete, p+"/pools/{name}", ok(func(r *http.Request, p params) (any, error) {
		return map[string]any{"deleted": true, "name": p("name")}, ad.Delete(r.Context(), p("name"))
	}))
	s.add(LevelAdmin, http.MethodGet, p+"/scheduling/stats", byPath("stats", "", func(ctx context.Context, _ string) (*admin.SchedulingStats, error) {
		return ad.Stats(ctx)
	}))
}
