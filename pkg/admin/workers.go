package admin

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// MaxWorkers bounds the workers listed (the most recent heartbeats first).
const MaxWorkers = 1000

// Worker is a worker as the Admin API shows it (ojs-admin-api.md 9.1).
type Worker struct {
	queue.WorkerInfo
	// Stale is set when the last heartbeat is older than StaleAfter; the
	// state is then "stale".
	Stale bool `json:"stale"`
	// ActiveJobIDs (detail only) are the jobs the worker holds now.
	ActiveJobIDs []string `json:"active_job_ids,omitempty"`
}

// WorkerSummary counts workers by state.
type WorkerSummary struct {
	Total   int `json:"total"`
	Running int `json:"running"`
	Quiet   int `json:"quiet"`
	Stale   int `json:"stale"`
}

// WorkerList is GET /admin/workers.
type WorkerList struct {
	Items      []Worker      `json:"items"`
	Summary    WorkerSummary `json:"summary"`
	Pagination Pagination    `json:"pagination"`
}

func (s *Service) worker(w queue.WorkerInfo, now time.Time) Worker {
	out := Worker{WorkerInfo: w}
	out.State = cmp.Or(out.State, "running")
	if t, err := time.Parse(time.RFC3339Nano, w.LastHeartbeatAt); err == nil && now.Sub(t) > s.cfg.StaleAfter {
		out.Stale, out.State = true, "stale"
	}
	return out
}

// Workers lists the workers seen in the last day (heartbeats), most
// recent first, page by page.
func (s *Service) Workers(ctx context.Context, page, perPage int) (*WorkerList, error) {
	ws, err := s.qs.Workers(ctx, MaxWorkers)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	now := s.now()
	out := &WorkerList{Items: []Worker{}}
	all := make([]Worker, len(ws))
	for i, w := range ws {
		all[i] = s.worker(w, now)
		switch all[i].State {
		case "stale":
			out.Summary.Stale++
		case lifecycle.WorkerQuiet, lifecycle.WorkerTerminate:
			out.Summary.Quiet++
		default:
			out.Summary.Running++
		}
	}
	out.Summary.Total = len(all)
	shown, pg := pageOf(all, page, perPage)
	out.Items, out.Pagination = append(out.Items, shown...), pg
	return out, nil
}

// Worker returns one worker with the jobs it holds (read from the due
// index partitions of the queues it serves, active jobs only).
func (s *Service) Worker(ctx context.Context, id string) (*Worker, error) {
	if id == "" || len(id) > 256 {
		return nil, ojserr.Invalid("id", "A worker id is 1 to 256 characters.")
	}
	w, err := s.qs.Worker(ctx, id)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if w == nil {
		return nil, ojserr.NotFoundf("worker", id)
	}
	out := s.worker(*w, s.now())
	out.ActiveJobIDs = []string{}
	for _, q := range w.Queues {
		if len(out.ActiveJobIDs) >= 100 || job.ValidateQueue(q) != nil {
			break
		}
		cursor := ""
		for range MaxQueryCalls {
			p, err := s.st.ListQueue(ctx, store.ListWaiting, q, []job.State{job.Active}, 100, cursor)
			if err != nil {
				return nil, ojserr.Backend(err)
			}
			for _, it := range p.Items {
				if it.Job.WorkerID == id {
					out.ActiveJobIDs = append(out.ActiveJobIDs, it.Job.ID)
				}
			}
			if cursor = p.Cursor; cursor == "" {
				break
			}
		}
	}
	return &out, nil
}

// QuietWorker tells a worker, on its next heartbeat, to stop fetching.
func (s *Service) QuietWorker(ctx context.Context, id string) (*queue.WorkerInfo, error) {
	return s.jobs.SetWorkerDirective(ctx, id, lifecycle.WorkerQuiet)
}

// Deregister removes a stale worker's record (ojs-admin-api.md 9.4). A
// worker that sent a heartbeat within StaleAfter is refused (409). The
// jobs it held are not touched here: their leases expire and they are
// retried per their policy, as for any worker that disappears.
func (s *Service) Deregister(ctx context.Context, id string) error {
	if id == "" || len(id) > 256 {
		return ojserr.Invalid("id", "A worker id is 1 to 256 characters.")
	}
	err := s.qs.DeleteWorker(ctx, id, s.now().Add(-s.cfg.StaleAfter))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ojserr.NotFoundf("worker", id)
	case errors.Is(err, queue.ErrWorkerNotStale):
		return ojserr.StateConflict(ojserr.Conflict, "Worker '%s' sent a heartbeat within the last %s; only stale workers can be deregistered (quiet it first).", id, s.cfg.StaleAfter).With("worker_id", id)
	case err != nil:
		return ojserr.Backend(err)
	}
	s.cfg.Logger.InfoContext(ctx, "worker deregistered", "worker_id", id)
	return nil
}
