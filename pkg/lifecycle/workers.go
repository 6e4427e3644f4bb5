package lifecycle

import "sync"

// stoppingWorkers remembers the workers known to be quiet or terminating.
// Such a worker never becomes running again (worker ids are per process,
// and a directive is never withdrawn), so the answer is kept for good; a
// worker not known to be stopping is read from the table on every FETCH
// (with the queues' state, queue.FetchState), so a quiet reported through
// another API instance holds at once (ojs-graceful-shutdown.md 5.1).
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
