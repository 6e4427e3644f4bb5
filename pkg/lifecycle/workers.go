package lifecycle

import "sync"

// stoppingWorkers remembers the workers known to be quiet or terminating,
// for good: such a worker never runs again (ojs-graceful-shutdown.md 5.1).
// Others are read from the table on every FETCH.
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
