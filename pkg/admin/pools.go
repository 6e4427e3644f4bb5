package admin

import (
	"context"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
)

// PoolStore is the persistence of the fair-scheduling pools (implemented
// by *queue.Store; Config.Pools, or the Queues store when it has them).
type PoolStore interface {
	PutPool(ctx context.Context, p *queue.Pool, now time.Time) error
	Pool(ctx context.Context, name string) (*queue.Pool, error)
	Pools(ctx context.Context) ([]queue.Pool, error)
	DeletePool(ctx context.Context, name string) (bool, error)
}

// Pools is the fair-scheduling side of the Admin API: pools and the
// scheduling statistics.
type Pools struct{ s *Service }

// Pools returns the service's pool operations.
func (s *Service) Pools() Pools { return Pools{s} }

func (a Pools) store(name ...string) (PoolStore, error) {
	for _, n := range name {
		if err := queue.ValidatePoolName(n); err != nil {
			return nil, err
		}
	}
	if ps, ok := a.s.qs.(PoolStore); ok {
		return ps, nil
	}
	return nil, ojserr.New(ojserr.Unsupported, "This deployment keeps no scheduling pools.")
}

// Put creates or replaces pool name (PUT /admin/pools/{name},
// ojs-fair-scheduling.md 10.1); created reports a new one.
func (a Pools) Put(ctx context.Context, name string, raw []byte) (p *queue.Pool, created bool, err error) {
	ps, err := a.store()
	if err != nil {
		return nil, false, err
	}
	if p, err = queue.ParsePool(name, raw); err != nil {
		return nil, false, err
	}
	old, err := ps.Pool(ctx, name)
	if err != nil {
		return nil, false, ojserr.Backend(err)
	}
	if err := ps.PutPool(ctx, p, a.s.now()); err != nil {
		return nil, false, ojserr.Backend(err)
	}
	a.s.cfg.Logger.InfoContext(ctx, "pool set", "pool", name, "strategy", p.Strategy, "queues", p.Queues)
	return p, old == nil, nil
}

// Get reads one pool (404 when none).
func (a Pools) Get(ctx context.Context, name string) (*queue.Pool, error) {
	ps, err := a.store(name)
	if err != nil {
		return nil, err
	}
	p, err := ps.Pool(ctx, name)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if p == nil {
		return nil, ojserr.NotFoundf("pool", name)
	}
	return p, nil
}

// List lists the pools.
func (a Pools) List(ctx context.Context) ([]queue.Pool, error) {
	ps, err := a.store()
	if err != nil {
		return nil, err
	}
	list, err := ps.Pools(ctx)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return list, nil
}

// Delete removes a pool (404 when none).
func (a Pools) Delete(ctx context.Context, name string) error {
	ps, err := a.store(name)
	if err != nil {
		return err
	}
	found, err := ps.DeletePool(ctx, name)
	if err != nil {
		return ojserr.Backend(err)
	}
	if !found {
		return ojserr.NotFoundf("pool", name)
	}
	return nil
}

// SchedulingWindow is the window of GET /admin/scheduling/stats.
const SchedulingWindow = time.Minute

// QueueDispatch is one queue's dispatches (job starts) in the window.
type QueueDispatch struct {
	Name  string  `json:"name"`
	Count int     `json:"dispatch_count_1m"`
	Ratio float64 `json:"dispatch_ratio_1m"`
	// Target is its share by its pool's weights (pools only).
	Target *float64 `json:"target_ratio,omitempty"`
}

// PoolDispatch is a pool's queues' dispatches against their weights.
type PoolDispatch struct {
	queue.Pool
	Queues []QueueDispatch `json:"dispatch"`
}

// SchedulingStats is GET /admin/scheduling/stats (ojs-fair-scheduling.md
// 10.2): every queue's job starts in the last minute and its share of
// them, and each pool's against its weights, from the event log
// (job.started, at most MaxStatsEvents events).
type SchedulingStats struct {
	Window string          `json:"window"`
	Queues []QueueDispatch `json:"queues"`
	Pools  []PoolDispatch  `json:"pools"`
	Capped bool            `json:"capped,omitempty"`
}

// Stats computes the scheduling statistics.
func (a Pools) Stats(ctx context.Context) (*SchedulingStats, error) {
	started := map[string]int{}
	capped, err := a.s.readEvents(ctx, events.Filter{Types: []string{events.JobStarted}, Since: a.s.now().Add(-SchedulingWindow), Limit: events.MaxLimit},
		func(e *events.Event) { started[e.Queue()]++ })
	if err != nil {
		return nil, err
	}
	out := &SchedulingStats{Window: "PT1M", Queues: dispatches(started, nil, nil), Pools: []PoolDispatch{}, Capped: capped}
	if ps, err := a.store(); err == nil {
		list, err := ps.Pools(ctx)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		for _, p := range list {
			out.Pools = append(out.Pools, PoolDispatch{Pool: p, Queues: dispatches(started, p.Queues, &p)})
		}
	}
	return out, nil
}

// dispatches lists queues' (nil: every queue started) dispatch counts and
// shares, with their pool's target shares when p is set.
func dispatches(started map[string]int, queues []string, p *queue.Pool) []QueueDispatch {
	if queues == nil {
		queues = slices.Sorted(maps.Keys(started))
	}
	total, weights := 0, 0
	for _, q := range queues {
		total += started[q]
		if p != nil {
			weights += weightOf(p, q)
		}
	}
	out := make([]QueueDispatch, 0, len(queues))
	for _, q := range queues {
		d := QueueDispatch{Name: q, Count: started[q]}
		if total > 0 {
			d.Ratio = math.Round(1000*float64(started[q])/float64(total)) / 1000
		}
		if p != nil && weights > 0 {
			d.Target = new(math.Round(1000*float64(weightOf(p, q))/float64(weights)) / 1000)
		}
		out = append(out, d)
	}
	return out
}

func weightOf(p *queue.Pool, q string) int {
	if p.Strategy == queue.StrategyWeighted {
		return p.Weights[q]
	}
	return 1
}
