package store

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
	"golang.org/x/sync/errgroup"
)

// Hot partitions are spread over the shard counts of
// topology.JobTable.Shards, by a hash of what they hold; readers read every
// shard.

// shardOf picks one of n shards for key (FNV-1a); always 0 when n <= 1.
func shardOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// shardKey is base in shard 0 and base#<shard> in the others. Queue names
// and the fixed bases hold no '#', so no two keys collide.
func shardKey(base string, shard int) string {
	if shard == 0 {
		return base
	}
	return base + "#" + strconv.Itoa(shard)
}

// ShardKeys lists every shard's key of base.
func ShardKeys(base string, n int) []string {
	keys := make([]string, max(n, 1))
	for i := range keys {
		keys[i] = shardKey(base, i)
	}
	return keys
}

func shards() topology.Shards { return topology.JobTable.Shards }

// readyKey is the ready-index partition of an available job.
func readyKey(queue, id string) string {
	return shardKey(availPrefix+queue, shardOf(id, shards().Ready))
}

// dueKey is the due-index partition of a job waiting for a time.
func dueKey(queue, id string) string {
	return shardKey(duePrefix+queue, shardOf(id, shards().Due))
}

// tenantKey is the tenant-index partition of a tenant's job of queue:
// the tenant's own ready partitions of the queue, spread like readyKey.
func tenantKey(tenant, queue, id string) string {
	return shardKey(tenant+"~"+queue, shardOf(id, shards().Ready))
}

// TenantKeys lists every tenant-index partition of a tenant's queue.
func TenantKeys(tenant, queue string) []string { return ShardKeys(tenant+"~"+queue, shards().Ready) }

// readyKeys and dueKeys list every partition of a queue.
func readyKeys(queue string) []string { return ShardKeys(availPrefix+queue, shards().Ready) }
func dueKeys(queue string) []string   { return ShardKeys(duePrefix+queue, shards().Due) }

// RegistryPK is the partition holding a queue's registry and rate items.
func RegistryPK(queue string) string {
	return shardKey(queuesPK, shardOf(queue, shards().Registry))
}

// EachShard runs read for every partition key at once and returns the
// answers in key order.
func EachShard[T any](ctx context.Context, keys []string, read func(ctx context.Context, pk string) (T, error)) ([]T, error) {
	out := make([]T, len(keys))
	if len(keys) == 1 {
		v, err := read(ctx, keys[0])
		out[0] = v
		return out, err
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, k := range keys {
		g.Go(func() error {
			v, err := read(gctx, k)
			out[i] = v
			return err
		})
	}
	return out, g.Wait()
}

// mergeItems merges sorted parts into one list in cmp order (ties keep
// part order), at most limit long.
func mergeItems(parts [][]Item, limit int, cmp func(a, b Item) int) []Item {
	var all []Item
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortStableFunc(all, cmp)
	return all[:min(len(all), limit)]
}

// maxDueStale bounds how long FETCH trusts what it last read of a due
// shard (entries other processes write are seen at most this late).
const maxDueStale = time.Second

// dueWatch remembers, per due partition, when this process last read it
// and the earliest time it may next hold a due entry (lowered by every due
// entry this process writes): FETCH reads only the shards that may hold
// something due, at most once a second otherwise.
type dueWatch struct {
	mu   sync.Mutex
	next map[string]time.Time
	read map[string]time.Time
}

// wanted reports whether partition pk must be read at now.
func (w *dueWatch) wanted(pk string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	next, known := w.next[pk]
	return !known || !now.Before(next) || now.Sub(w.read[pk]) >= maxDueStale
}

// seen records a read of pk at now whose first entry not yet due is next
// (zero: none left).
func (w *dueWatch) seen(pk string, now, next time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.next == nil {
		w.next, w.read = map[string]time.Time{}, map[string]time.Time{}
	}
	if next.IsZero() {
		next = now.Add(maxDueStale)
	}
	w.next[pk], w.read[pk] = next, now
}

// wrote lowers pk's next due time to at: this process listed an entry due
// then.
func (w *dueWatch) wrote(pk string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if next, ok := w.next[pk]; ok && at.Before(next) {
		w.next[pk] = at
	}
}

// DueNow is Due for FETCH: it reads only the due shards of the queue that
// may hold an entry due at now (dueWatch), up to limit entries each.
func (s *Store) DueNow(ctx context.Context, queue string, now time.Time, limit int) ([]Item, error) {
	var keys []string
	for _, pk := range dueKeys(queue) {
		if s.due.wanted(pk, now) {
			keys = append(keys, pk)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	parts, err := EachShard(ctx, keys, func(ctx context.Context, pk string) ([]Item, error) {
		items, err := s.queryShard(ctx, topology.IndexDue, "due_pk = :pk", pk, now, "", limit)
		if err != nil {
			return nil, err
		}
		n := 0
		for n < len(items) && !items[n].DueAt.After(now) {
			n++
		}
		var next time.Time
		switch {
		case n < len(items):
			next = items[n].DueAt
		case len(items) == limit:
			next = now // a full page of due entries: more may be due
		}
		s.due.seen(pk, now, next)
		return items[:n], nil
	})
	if err != nil {
		return nil, err
	}
	// Every due entry read is returned (up to limit per shard): a shard is
	// not read again before its next entry, so none may be left behind.
	return mergeItems(parts, len(keys)*limit, byDueAt), nil
}
