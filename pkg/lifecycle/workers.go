package lifecycle

import "sync"

// boundedMap is a map safe for concurrent use that starts over once it
// holds max entries: what this process learnt, in bounded memory.
type boundedMap[K comparable, V any] struct {
	mu  sync.Mutex
	m   map[K]V
	max int
}

func (b *boundedMap[K, V]) get(k K) (V, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[k]
	return v, ok
}

func (b *boundedMap[K, V]) put(k K, v V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil || len(b.m) >= b.max {
		b.m = map[K]V{}
	}
	b.m[k] = v
}

func (b *boundedMap[K, V]) del(k K) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, k)
}

// maxCachedWorkers bounds Service.workers.
const maxCachedWorkers = 10000

func stopping(state string) bool { return state == WorkerQuiet || state == WorkerTerminate }
