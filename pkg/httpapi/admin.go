package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// addAdmin registers the Admin API (ojs-admin-api.md) under
// /ojs/v1/admin. The worker directive routes are registered by New.
func (s *Server) addAdmin(a *api, ad *admin.Service) {
	h := &adminAPI{ad: ad, api: a}
	const p = "/ojs/v1/admin"
	s.add(LevelAdmin, http.MethodGet, p+"/queues", h.queues)
	s.add(LevelAdmin, http.MethodGet, p+"/queues/{name}", h.queue)
	s.add(LevelAdmin, http.MethodPost, p+"/queues/{name}/pause", h.pause(true))
	s.add(LevelAdmin, http.MethodPost, p+"/queues/{name}/resume", h.pause(false))
	s.add(LevelAdmin, http.MethodDelete, p+"/queues/{name}/jobs", h.purgeQueue)
	s.add(LevelAdmin, http.MethodPut, p+"/queues/{name}/config", h.configQueue)
	s.add(LevelAdmin, http.MethodGet, p+"/jobs", h.jobs)
	s.add(LevelAdmin, http.MethodGet, p+"/jobs/{id}", h.job)
	s.add(LevelAdmin, http.MethodPost, p+"/jobs/{id}/cancel", h.cancel)
	s.add(LevelAdmin, http.MethodPost, p+"/jobs/{id}/retry", h.retry)
	// Literal actions: a wildcard here would overlap /jobs/{id}/cancel.
	for _, act := range []string{admin.BulkRetry, admin.BulkCancel, admin.BulkDelete} {
		s.add(LevelAdmin, http.MethodPost, p+"/jobs/bulk/"+act, h.bulk(act))
	}
	s.add(LevelAdmin, http.MethodGet, p+"/workers/{id}", h.worker)
	s.add(LevelAdmin, http.MethodDelete, p+"/workers/{id}", h.deregister)
	s.add(LevelAdmin, http.MethodGet, p+"/stats", h.stats)
	s.add(LevelAdmin, http.MethodGet, p+"/stats/history", h.history)
	s.add(LevelAdmin, http.MethodGet, p+"/dead-letter", h.deadLetter)
	if a.dead != nil {
		s.add(LevelAdmin, http.MethodGet, p+"/dead-letter/stats", a.deadStats)
		s.add(LevelAdmin, http.MethodGet, p+"/dead-letter/{id}", a.deadJob)
		s.add(LevelAdmin, http.MethodPost, p+"/dead-letter/{id}/retry", a.retryDead)
		s.add(LevelAdmin, http.MethodDelete, p+"/dead-letter/{id}", h.deleteDead)
		s.add(LevelAdmin, http.MethodPost, p+"/dead-letter/retry", a.deadBulk(true))
	}
	s.add(LevelAdmin, http.MethodDelete, p+"/dead-letter", h.purgeDead)
	s.add(LevelAdmin, http.MethodGet, p+"/system/config", h.systemConfig)
}

type adminAPI struct {
	ad  *admin.Service
	api *api
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

func (h *adminAPI) queues(w http.ResponseWriter, r *http.Request, _ params) error {
	page, per, err := pageParams(r)
	if err != nil {
		return err
	}
	l, err := h.ad.Queues(r.Context(), page, per, h.api.isPush())
	return reply(w, l, err)
}

func (h *adminAPI) queue(w http.ResponseWriter, r *http.Request, p params) error {
	q, err := h.ad.Queue(r.Context(), p["name"], h.api.isPush())
	return reply(w, q, err)
}

func (h *adminAPI) pause(paused bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p params) error {
		res, err := h.ad.SetPaused(r.Context(), p["name"], paused)
		return reply(w, res, err)
	}
}

func (h *adminAPI) purgeQueue(w http.ResponseWriter, r *http.Request, p params) error {
	raw, err := readBody(r)
	if err != nil {
		return err
	}
	res, err := h.ad.Purge(r.Context(), p["name"], raw)
	return reply(w, res, err)
}

func (h *adminAPI) configQueue(w http.ResponseWriter, r *http.Request, p params) error {
	raw, err := readBody(r)
	if err != nil {
		return err
	}
	q, err := h.ad.SetConfig(r.Context(), p["name"], raw)
	return reply(w, q, err)
}

func (h *adminAPI) jobs(w http.ResponseWriter, r *http.Request, _ params) error {
	q, err := admin.ParseJobQuery(r.URL.Query())
	if err != nil {
		return err
	}
	page, err := h.ad.SearchJobs(r.Context(), q)
	return reply(w, page, err)
}

func (h *adminAPI) job(w http.ResponseWriter, r *http.Request, p params) error {
	m, _, err := h.ad.JobDetail(r.Context(), p["id"])
	return reply(w, m, err)
}

func (h *adminAPI) cancel(w http.ResponseWriter, r *http.Request, p params) error {
	j, prev, err := h.ad.CancelJob(r.Context(), p["id"])
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"job": withFields(j, map[string]any{"previous_state": prev})})
	return nil
}

func (h *adminAPI) retry(w http.ResponseWriter, r *http.Request, p params) error {
	j, err := h.ad.RetryJob(r.Context(), p["id"])
	return reply(w, map[string]any{"job": j}, err)
}

func (h *adminAPI) bulk(action string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ params) error {
		raw, err := readBody(r)
		if err != nil {
			return err
		}
		res, err := h.ad.Bulk(r.Context(), action, raw)
		return reply(w, res, err)
	}
}

// workers serves GET /ojs/v1/admin/workers with the summary counts.
func (h *adminAPI) workers(w http.ResponseWriter, r *http.Request, _ params) error {
	page, per, err := pageParams(r)
	if err != nil {
		return err
	}
	l, err := h.ad.Workers(r.Context(), page, per)
	return reply(w, l, err)
}

func (h *adminAPI) worker(w http.ResponseWriter, r *http.Request, p params) error {
	wk, err := h.ad.Worker(r.Context(), p["id"])
	return reply(w, wk, err)
}

func (h *adminAPI) deregister(w http.ResponseWriter, r *http.Request, p params) error {
	if err := h.ad.Deregister(r.Context(), p["id"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *adminAPI) stats(w http.ResponseWriter, r *http.Request, _ params) error {
	st, err := h.ad.Stats(r.Context())
	return reply(w, st, err)
}

func (h *adminAPI) history(w http.ResponseWriter, r *http.Request, _ params) error {
	q, err := h.ad.ParseHistoryQuery(r.URL.Query())
	if err != nil {
		return err
	}
	hist, err := h.ad.History(r.Context(), q)
	return reply(w, hist, err)
}

func (h *adminAPI) deadLetter(w http.ResponseWriter, r *http.Request, _ params) error {
	q, err := admin.ParseJobQuery(r.URL.Query())
	if err != nil {
		return err
	}
	l, err := h.ad.DeadLetter(r.Context(), q)
	return reply(w, l, err)
}

// deleteDead answers 204 (ojs-dead-letter.md 10 through the Admin API, as
// the conformance suite expects); the data plane's DELETE answers 200.
func (h *adminAPI) deleteDead(w http.ResponseWriter, r *http.Request, p params) error {
	if err := h.api.dead.Delete(r.Context(), p["id"]); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *adminAPI) purgeDead(w http.ResponseWriter, r *http.Request, _ params) error {
	raw, err := readBody(r)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(raw))) == 0 {
		if raw, err = deadQueryBody(r); err != nil {
			return err
		}
	}
	res, err := h.ad.PurgeDead(r.Context(), raw)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged_count": res.Succeeded, "deleted": res.Succeeded, "matched": res.Matched,
		"failed": res.Failed, "job_ids": res.JobIDs, "has_more": res.HasMore})
	return nil
}

// systemConfig serves GET /admin/system/config: non-sensitive settings
// (ojs-admin-api.md 12.2). Secrets (the auth token) are never shown, only
// whether one is set.
func (h *adminAPI) systemConfig(w http.ResponseWriter, r *http.Request, _ params) error {
	cfg := h.api.s.cfg
	writeJSON(w, http.StatusOK, map[string]any{
		"implementation": map[string]any{"name": "ojs-serverless", "version": ImplementationVersion},
		"backend":        "dynamodb",
		"auth":           map[string]any{"bearer_token_required": cfg.AuthToken != ""},
		"limits": map[string]any{"max_request_bytes": MaxBodyBytes, "max_fetch_count": lifecycle.MaxFetch,
			"max_bulk_jobs": admin.MaxBulk, "max_page_size": admin.MaxPerPage, "min_priority": job.MinPriority, "max_priority": job.MaxPriority},
		"admin": map[string]any{"stale_worker_after": admin.DefaultStaleAfter.String(), "max_query_calls": admin.MaxQueryCalls,
			"max_count_per_partition": admin.MaxCountPerPartition, "max_stats_events": admin.MaxStatsEvents, "event_window": admin.EventWindow.String()},
		"indexes":     topology.JobTable.IndexNames(),
		"maintenance": map[string]any{"supported": false},
	})
	return nil
}

// workflowQueues lists the queues a workflow request's jobs use (every
// options.queue, and "default" for a job without one), so that they are
// registered like the queues of pushed jobs: the queue list, the console
// and the searches over all queues read the registry.
func workflowQueues(raw []byte) []string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	seen := map[string]bool{}
	var walk func(x any, depth int)
	walk = func(x any, depth int) {
		if depth > 64 {
			return
		}
		switch t := x.(type) {
		case map[string]any:
			if _, job := t["args"]; job {
				q := "default"
				if o, ok := t["options"].(map[string]any); ok {
					if s, ok := o["queue"].(string); ok && s != "" {
						q = s
					}
				}
				if s, ok := t["queue"].(string); ok && s != "" {
					q = s
				}
				seen[q] = true
			}
			for _, c := range t {
				walk(c, depth+1)
			}
		case []any:
			for _, c := range t {
				walk(c, depth+1)
			}
		}
	}
	walk(v, 0)
	out := make([]string, 0, len(seen))
	for q := range seen {
		if job.ValidateQueue(q) == nil && len(out) < 100 {
			out = append(out, q)
		}
	}
	return out
}
