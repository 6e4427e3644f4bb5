package queue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Backpressure (urn:ojs:ext:backpressure, docs/backpressure.md): a queue
// may be bounded to a depth (its available, scheduled and retryable jobs);
// a PUSH or batch PUSH that would pass the bound is refused with 429
// QUEUE_FULL, the whole batch (ojs-backpressure.md 9.3), and one above the
// warning share of it is answered with the pressure.

// Bound is a queue's backpressure setting.
type Bound struct {
	MaxDepth int     `json:"max_depth"`
	Strategy string  `json:"strategy"`
	Warning  float64 `json:"warning_threshold"`
}

// Defaults of a bound.
const (
	StrategyReject = "reject"
	DefaultWarning = 0.8
)

// Bound is the queue's backpressure bound (nil: unbounded).
func (i *QueueInfo) Bound() *Bound {
	if i == nil || i.MaxDepth <= 0 {
		return nil
	}
	return &Bound{MaxDepth: i.MaxDepth, Strategy: StrategyReject, Warning: i.Warning}
}

// SetQueueBound sets (b non-nil) or removes a queue's bound.
func (s *Store) SetQueueBound(ctx context.Context, name string, b *Bound, now time.Time) error {
	u := expression.Remove(expression.Name("bp_max")).Remove(expression.Name("bp_warn"))
	if b != nil {
		u = expression.Set(expression.Name("bp_max"), expression.Value(b.MaxDepth)).Set(expression.Name("bp_warn"), expression.Value(b.Warning))
	}
	_, err := s.upsert(ctx, name, "set queue "+name+" bound", now, u, types.ReturnValueNone)
	return err
}

// QueueInfo reads one queue's registry item (nil: not registered).
func (s *Store) QueueInfo(ctx context.Context, name string) (*QueueInfo, error) {
	return get[QueueInfo](ctx, s, &dynamodb.GetItemInput{}, queueKey(name), "queue "+name)
}

// RecordRejections adds n refused enqueues to a queue's count, with the
// depth that refused them (the stream derives backpressure.rejected).
func (s *Store) RecordRejections(ctx context.Context, name string, n int64, depth int) error {
	u := expression.Add(expression.Name("bp_rejected"), expression.Value(n)).Set(expression.Name("bp_depth"), expression.Value(depth)).
		Add(expression.Name(attrVersion), expression.Value(1))
	if _, err := s.update(ctx, queueKey(name), u, nil, types.ReturnValueNone); err != nil {
		return fmt.Errorf("record rejections of queue %s: %w", name, err)
	}
	return nil
}

// admitPrefix keys a bounded queue's admission counter (sk BP#<name>):
// the jobs PUSH admitted to it, ever. Apart from the registry item so that
// its write per PUSH stays out of the stream (topology.StreamFilter).
const admitPrefix = "BP#"

func admitKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: store.AttrS(store.RegistryPK(name)), attrSK: store.AttrS(admitPrefix + name)}
}

// admitted is an admission counter item.
type admitted struct {
	Admitted int64 `dynamodbav:"admitted"`
}

// Admitted reads a queue's admission counter (0 before the first).
func (s *Store) Admitted(ctx context.Context, name string) (int64, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: admitKey(name), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("read admissions of queue %s: %w", name, err)
	}
	var c admitted
	return c.Admitted, attributevalue.UnmarshalMap(out.Item, &c)
}

// Admit adds n to a queue's admission counter if it is at most limit
// before, and returns the new value; ok is false (and nothing written)
// when it is above.
func (s *Store) Admit(ctx context.Context, name string, n, limit int64) (after int64, ok bool, err error) {
	cond := expression.Or(expression.AttributeNotExists(expression.Name("admitted")), expression.Name("admitted").LessThanEqual(expression.Value(limit)))
	av, err := s.update(ctx, admitKey(name), expression.Add(expression.Name("admitted"), expression.Value(n)), &cond, types.ReturnValueUpdatedNew)
	if _, failed := errors.AsType[*types.ConditionalCheckFailedException](err); failed {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("admit to queue %s: %w", name, err)
	}
	var c admitted
	return c.Admitted, true, attributevalue.UnmarshalMap(av, &c)
}

// Timing of the bound check: a process reads a queue's bound at most once
// per BoundRefresh and counts a bounded queue's depth at most once per
// DepthRefresh (and again when a refusal's count is older than
// RecountAfter); RejectRecord is how often it records refusals.
// QueueFullRetryAfter is the Retry-After of a refusal.
const (
	BoundRefresh        = 5 * time.Second
	DepthRefresh        = time.Second
	RecountAfter        = 100 * time.Millisecond
	RejectRecord        = time.Second
	QueueFullRetryAfter = 5
)

// boundCache is a process's view of the queues' bounds and depths.
type boundCache struct {
	mu     sync.Mutex
	queues map[string]*boundView
}

// boundView is what a process knows of a queue: its bound, and for a
// bounded one its depth counted at countedAt with the admission counter
// read just before (base) and as last written (last): the depth now is at
// most depth + last - base (jobs taken since only lower it).
type boundView struct {
	name       string
	readAt     time.Time
	bound      *Bound
	countedAt  time.Time
	depth      int
	base, last int64
	// refused since the last record, and when that was
	refused    int64
	recordedAt time.Time
}

// Pressure is a bounded queue's depth against its bound after an
// admission; Warn is set above the bound's warning share.
type Pressure struct {
	Queue        string
	Depth, Bound int
	Ratio        float64
	Warn         bool
}

// Headers are the response headers of ojs-backpressure.md 7.2 and 7.3.
func (p *Pressure) Headers() map[string]string {
	return map[string]string{"X-OJS-Queue-Depth": strconv.Itoa(p.Depth), "X-OJS-Queue-Bound": strconv.Itoa(p.Bound),
		"X-OJS-Queue-Pressure": strconv.FormatFloat(p.Ratio, 'f', 3, 64)}
}

// CheckBounds admits jobs to their tenants' enqueue rates (checkTenants,
// TENANT_LIMIT_EXCEEDED) and to their queues' bounds, or refuses all of
// them with QUEUE_FULL when one queue's would pass its bound. Admission is one
// conditional write of the queue's counter, so processes never admit past
// a bound together: the condition allows what the last count left room
// for (jobs taken since the count are seen at the next one). An unbounded
// queue costs a read of its registry item per BoundRefresh; a bounded one
// the write per PUSH and a count of its waiting jobs per DepthRefresh. A
// batch refused by its second bounded queue leaves the first one's
// counter up until the next count.
func (s *Service) CheckBounds(ctx context.Context, jobs []*job.Job) error {
	now := s.clock()
	if err := s.checkTenants(ctx, jobs, now); err != nil {
		return err
	}
	per := map[string]int{}
	for _, j := range jobs {
		per[j.Queue]++
	}
	c := &s.bounds
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range slices.Sorted(maps.Keys(per)) {
		v, err := s.view(ctx, q, now, false)
		if err != nil {
			return err
		}
		if v.bound == nil {
			continue
		}
		n := int64(per[q])
		ok, err := s.admit(ctx, v, n)
		if err == nil && !ok && now.Sub(v.countedAt) >= RecountAfter {
			if v, err = s.view(ctx, q, now, true); err == nil {
				ok, err = s.admit(ctx, v, n)
			}
		}
		if err != nil {
			return err
		}
		if !ok {
			v.refused += n
			s.recordRefusals(ctx, q, v, now)
			return queueFull(q, v.depthNow(), v.bound.MaxDepth)
		}
	}
	return nil
}

// checkTenants counts jobs against their tenants' max_enqueue_rate
// (tenant.Registry.AdmitEnqueue), refusing all of them when one tenant's
// would pass it. A tenant without the limit costs a read of its limits
// per 10 s per process; one with it a write per PUSH.
func (s *Service) checkTenants(ctx context.Context, jobs []*job.Job, now time.Time) error {
	per := map[string]int{}
	for _, j := range jobs {
		if j.Tenant != "" {
			per[j.Tenant]++
		}
	}
	for _, t := range slices.Sorted(maps.Keys(per)) {
		l, err := s.tenants.LimitsOf(ctx, t, now)
		if err != nil {
			return ojserr.Backend(err)
		}
		if l.MaxEnqueueRate != nil {
			if err := s.tenants.AdmitEnqueue(ctx, t, per[t], l.MaxEnqueueRate, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// admit writes n admissions to v's queue if they fit its bound.
func (s *Service) admit(ctx context.Context, v *boundView, n int64) (bool, error) {
	limit := v.base + int64(v.bound.MaxDepth-v.depth) - n
	if limit < v.base {
		return false, nil // no room even before other processes' admissions
	}
	after, ok, err := s.qs.Admit(ctx, v.name, n, limit)
	if err != nil {
		return false, ojserr.Backend(err)
	}
	if ok {
		v.last = after
	}
	return ok, nil
}

// depthNow is the most the queue's depth can be, as far as v knows.
func (v *boundView) depthNow() int { return v.depth + int(v.last-v.base) }

// Pressure is the most pressed of queues' as this process last saw them
// (no request; nil when none is bounded).
func (s *Service) Pressure(queues ...string) *Pressure {
	c := &s.bounds
	c.mu.Lock()
	defer c.mu.Unlock()
	var worst *Pressure
	for _, q := range queues {
		v := c.queues[q]
		if v == nil || v.bound == nil {
			continue
		}
		d := v.depthNow()
		p := &Pressure{Queue: q, Depth: d, Bound: v.bound.MaxDepth, Ratio: float64(d) / float64(v.bound.MaxDepth)}
		p.Warn = p.Ratio > v.bound.Warning
		if worst == nil || p.Ratio > worst.Ratio {
			worst = p
		}
	}
	return worst
}

// view is queue q's bound and depth as this process knows them, read
// again when stale or recount is set (the caller holds the cache's lock).
func (s *Service) view(ctx context.Context, q string, now time.Time, recount bool) (*boundView, error) {
	c := &s.bounds
	if c.queues == nil {
		c.queues = map[string]*boundView{}
	}
	v := c.queues[q]
	if v == nil {
		v = &boundView{name: q}
		c.queues[q] = v
	}
	if now.Sub(v.readAt) >= BoundRefresh {
		info, err := s.qs.QueueInfo(ctx, q)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		v.bound, v.readAt = info.Bound(), now
	}
	if v.bound != nil && (recount || now.Sub(v.countedAt) >= DepthRefresh) {
		// The counter before the count: a job admitted in between is
		// counted twice (refused early), never missed.
		base, err := s.qs.Admitted(ctx, q)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		n, err := s.st.CountQueue(ctx, q)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		v.depth, v.countedAt, v.base, v.last = n.Available+n.Scheduled+n.Retryable, now, base, base
	}
	return v, nil
}

// recordRefusals writes the refusals counted since the last record, at
// most once per RejectRecord (a failure is logged: the refusal stands).
func (s *Service) recordRefusals(ctx context.Context, q string, v *boundView, now time.Time) {
	if now.Sub(v.recordedAt) < RejectRecord {
		return
	}
	if err := s.qs.RecordRejections(ctx, q, v.refused, v.depthNow()); err != nil {
		s.log.WarnContext(ctx, "recording backpressure refusals failed", "queue", q, "error", err.Error())
		return
	}
	v.refused, v.recordedAt = 0, now
}

// QueueFull is ojs-backpressure.md 7.1's refusal.
func queueFull(q string, depth, bound int) error {
	e := ojserr.Newf(ojserr.QueueFull, "Queue '%s' has reached its depth bound (%d).", q, bound).
		With("queue", q).With("depth", depth).With("bound", bound).With("strategy", StrategyReject)
	e.Retryable = true
	e.Headers = map[string]string{"Retry-After": strconv.Itoa(QueueFullRetryAfter),
		"X-OJS-Queue-Depth": strconv.Itoa(depth), "X-OJS-Queue-Bound": strconv.Itoa(bound)}
	return e
}
