package lifecycle

import (
	"context"
	"sync"
	"time"
)

// WorkerStateTTL is how long a FETCH trusts that a worker is still
// running: a worker reported quiet (or told to be quiet by an operator)
// through another API instance gets no new jobs after at most this long.
// A quiet or terminating worker never becomes running again (worker ids
// are per process), so that answer is cached for good.
const WorkerStateTTL = time.Second

// workerStates caches which workers are quiet or terminating.
type workerStates struct {
	mu   sync.Mutex
	seen map[string]workerSeen
}

type workerSeen struct {
	stopping bool
	at       time.Time
}

const maxCachedWorkers = 10000

func (c *workerStates) get(id string, now time.Time) (stopping, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.seen[id]
	if !ok {
		return false, false
	}
	return w.stopping, w.stopping || now.Sub(w.at) <= WorkerStateTTL
}

func (c *workerStates) put(id string, stopping bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil || len(c.seen) >= maxCachedWorkers {
		c.seen = map[string]workerSeen{} // bounded: start over
	}
	if old, ok := c.seen[id]; ok && old.stopping {
		stopping = true
	}
	c.seen[id] = workerSeen{stopping: stopping, at: now}
}

func stopping(state string) bool { return state == WorkerQuiet || state == WorkerTerminate }

// workerStopping reports whether the worker is quiet or terminating, by
// its own heartbeat or an operator's directive: such a worker is assigned
// no new jobs (ojs-graceful-shutdown.md 5.1). Anonymous fetches (no
// worker_id) are never refused.
func (s *Service) workerStopping(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	now := time.Now()
	if st, fresh := s.workers.get(id, now); fresh {
		return st, nil
	}
	w, err := s.st.WorkerState(ctx, id)
	if err != nil {
		return false, err
	}
	st := w != nil && (stopping(w.State) || stopping(w.Directive))
	s.workers.put(id, st, now)
	return st, nil
}
