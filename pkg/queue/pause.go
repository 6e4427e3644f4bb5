package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// PauseCacheTTL is how long a push-mode worker trusts that a queue is not
// paused: a pause reaches the worker function within this time (FETCH
// reads the pause state fresh); a resume takes effect at once.
const PauseCacheTTL = time.Second

// pauseCache holds each queue's pause state as last read, and when.
type pauseCache struct {
	mu     sync.Mutex
	queues map[string]pauseRead
}

type pauseRead struct {
	at     time.Time
	paused bool
}

// Paused reports whether queue q is paused, reading its registry item (one
// consistent read) at most once per PauseCacheTTL while it is not paused.
func (s *Service) Paused(ctx context.Context, q string) (bool, error) {
	c := &s.pauses
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	// A cached "paused" is always re-read, so a resume takes effect at
	// once everywhere; a cached "not paused" is trusted for PauseCacheTTL.
	if r, ok := c.queues[q]; ok && !r.paused && now.Sub(r.at) <= PauseCacheTTL {
		return false, nil
	}
	fs, err := s.qs.FetchState(ctx, []string{q}, "")
	if err != nil {
		return false, err
	}
	p := fs.Queues[q].Paused
	c.remember(q, p, now)
	return p, nil
}

// remember records q's pause state as of at (the caller holds c.mu).
func (c *pauseCache) remember(q string, paused bool, at time.Time) {
	if c.queues == nil {
		c.queues = map[string]pauseRead{}
	}
	c.queues[q] = pauseRead{at: at, paused: paused}
}

// QueueState is a queue's pause state as the API shows it.
type QueueState struct {
	Name     string `json:"name"`
	Status   string `json:"status"`
	Paused   bool   `json:"paused"`
	PausedAt string `json:"paused_at,omitempty"`
	// RateLimit is the queue's FETCH rate in jobs per second (set by a
	// job's options.rate_limit; 0: none).
	RateLimit float64 `json:"rate_limit_per_second,omitempty"`
	// Backpressure is the queue's depth bound, when it has one.
	Backpressure *Bound `json:"backpressure,omitempty"`
}

func queueState(i *QueueInfo) QueueState {
	st := QueueState{Name: i.Name, Status: "active", Paused: i.Paused, PausedAt: i.PausedAt, RateLimit: i.RateLimit, Backpressure: i.Bound()}
	if i.Paused {
		st.Status = "paused"
	}
	return st
}

// SetPaused pauses or resumes a queue. A paused queue still accepts jobs;
// they wait, neither fetched nor delivered, until the queue is resumed.
func (s *Service) SetPaused(ctx context.Context, name string, paused bool) (QueueState, error) {
	if err := job.ValidateQueue(name); err != nil {
		return QueueState{}, err
	}
	info, err := s.qs.SetQueuePaused(ctx, name, paused, s.clock())
	if err != nil {
		return QueueState{}, ojserr.Backend(err)
	}
	s.registered.Store(name, true)
	s.pauses.mu.Lock()
	s.pauses.remember(name, paused, time.Now())
	s.pauses.mu.Unlock()
	s.log.InfoContext(ctx, "queue pause state changed", "queue", name, "paused", paused)
	return queueState(info), nil
}

// QueueStates lists every registered queue with its pause state.
func (s *Service) QueueStates(ctx context.Context) ([]QueueState, error) {
	infos, err := s.qs.QueueInfos(ctx)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	out := make([]QueueState, len(infos))
	for i := range infos {
		out[i] = queueState(&infos[i])
	}
	return out, nil
}

// QueueStats is GET /queues/{name}/stats.
type QueueStats struct {
	QueueState
	Available         int `json:"available"`
	Active            int `json:"active"`
	Scheduled         int `json:"scheduled"`
	Retryable         int `json:"retryable"`
	Discarded         int `json:"discarded"`
	Completed         int `json:"completed"`
	CompletedLastHour int `json:"completed_last_hour"`
	FailedLastHour    int `json:"failed_last_hour"`
}

// Depth is the queue's waiting jobs, what a backpressure bound limits
// (ojs-backpressure.md 3): available, scheduled and retryable.
func (q *QueueStats) Depth() int { return q.Available + q.Scheduled + q.Retryable }

// Stats counts a queue's jobs by state (from the job store's indexes), its
// completions of the last hour (from the "done" index, which the ACK's
// own write updates: counted when the ACK returns) and its failed
// attempts of the last hour (from the event log, which trails by the
// stream's delay). "completed" is the last hour's count.
func (s *Service) Stats(ctx context.Context, name string) (*QueueStats, error) {
	if err := job.ValidateQueue(name); err != nil {
		return nil, err
	}
	c, err := s.st.CountQueue(ctx, name)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	now := s.clock()
	done, err := s.st.CountCompleted(ctx, name, now.Add(-time.Hour))
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if s.ev == nil {
		return nil, ojserr.Backend(errors.New("queue stats: no event log"))
	}
	failed := 0
	f := events.Filter{Types: []string{events.JobFailed}, Queues: []string{name}, Since: now.Add(-time.Hour), Limit: events.MaxLimit}
	for range 100 {
		p, err := s.ev.QueryEvents(ctx, f, now)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		if failed += len(p.Events); !p.HasMore {
			break
		}
		f.After = p.Cursor
	}
	st := QueueState{Name: name, Status: "active"}
	infos, err := s.qs.QueueInfos(ctx)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	for i := range infos {
		if infos[i].Name == name {
			st = queueState(&infos[i])
		}
	}
	return &QueueStats{QueueState: st, Available: c.Available, Active: c.Active, Scheduled: c.Scheduled, Retryable: c.Retryable,
		Discarded: c.Discarded, Completed: done, CompletedLastHour: done, FailedLastHour: failed}, nil
}
