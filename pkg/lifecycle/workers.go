package lifecycle

import (
	"context"
	"sync"
)

// stoppingWorkers remembers the workers known to be quiet or terminating.
// Such a worker never becomes running again (worker ids are per process,
// and a directive is never withdrawn), so the answer is kept for good; a
// worker not known to be stopping is read from the table on every FETCH,
// so a quiet reported through another API instance holds at once.
type stoppingWorkers struct {
	mu  sync.Mutex
	ids map[string]bool
}

const maxCachedWorkers = 10000

func (c *stoppingWorkers) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids[id]
}

func (c *stoppingWorkers) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil || len(c.ids) >= maxCachedWorkers {
		c.ids = map[string]bool{} // bounded: start over
	}
	c.ids[id] = true
}

func stopping(state string) bool { return state == WorkerQuiet || state == WorkerTerminate }

// workerStopping reports whether the worker is quiet or terminating, by
// its own heartbeat or an operator's directive: such a worker is assigned
// no new jobs (ojs-graceful-shutdown.md 5.1). It costs one small
// consistent read per FETCH that names a worker not yet known to be
// stopping. Anonymous fetches (no worker_id) are never refused.
func (s *Service) workerStopping(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	if s.workers.has(id) {
		return true, nil
	}
	w, err := s.st.WorkerState(ctx, id)
	if err != nil {
		return false, err
	}
	if w != nil && (stopping(w.State) || stopping(w.Directive)) {
		s.workers.add(id)
		return true, nil
	}
	return false, nil
}
