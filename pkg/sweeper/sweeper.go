// Package sweeper is the periodic repair run by the sweeper function: it
// promotes due scheduled and retryable jobs, requeues or discards jobs whose
// lease expired, re-sends available push-mode jobs not claimed within the
// redelivery delay, fires due cron schedules, repairs stalled workflows and
// applies the dead letter retention policy.
package sweeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Store is what the sweeper reads and writes directly of the job items.
type Store interface {
	Apply(ctx context.Context, t store.Transition) (*job.Job, error)
	ListQueue(ctx context.Context, l store.Listing, queue string, states []job.State, limit int, cursor string) (store.IndexPage, error)
}

// Queues is what the sweeper reads and writes of the queue registry
// (implemented by *queue.Store).
type Queues interface {
	QueueInfos(ctx context.Context) ([]queue.QueueInfo, error)
	ClearRedeliver(ctx context.Context, name, token string) error
}

var _ Queues = (*queue.Store)(nil)

// Sweeper runs sweeps.
type Sweeper struct {
	Service *lifecycle.Service
	Store   Store
	// Queues lists the registered queues and clears their redelivery
	// marks.
	Queues Queues
	Sender lifecycleSender
	// PushQueues are always swept, registered or not.
	PushQueues []string
	// Workflows, when set, has its stalled workflows repaired each sweep.
	Workflows interface {
		Repair(ctx context.Context, limit int) (int, error)
		Timeouts(ctx context.Context, limit int) (int, error)
	}
	// Crons, when set, fires the cron schedules that are due each sweep.
	Crons interface {
		Run(ctx context.Context) (cron.RunResult, error)
	}
	// DeadLetter, when set, applies the dead letter retention policy each
	// sweep (implemented by *deadletter.Service).
	DeadLetter interface {
		Prune(ctx context.Context) (deadletter.PruneResult, error)
	}
	// BatchSize is how many due jobs one query handles. Default 100.
	BatchSize int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

type lifecycleSender interface {
	Send(ctx context.Context, ds []dispatch.Delivery) error
}

// Result counts what a sweep did.
type Result struct {
	Queues int `json:"queues"`
	// Resolved counts the due jobs the sweep found (promoted, requeued,
	// discarded, or moved by someone else first).
	Resolved    int `json:"resolved"`
	Redelivered int `json:"redelivered"`
	Workflows   int `json:"workflows_checked"`
	TimedOut    int `json:"workflow_nodes_timed_out"`
	CronsFired  int `json:"crons_fired"`
	DeadPruned  int `json:"dead_letter_pruned"`
	// NextCron is when the first cron schedule not due yet is (zero:
	// unknown).
	NextCron time.Time `json:"-"`
}

// busy reports whether the sweep found anything to do.
func (r Result) busy() bool {
	return r.Resolved+r.Redelivered+r.Workflows+r.TimedOut+r.CronsFired+r.DeadPruned > 0
}

// Sweep makes one pass over every queue.
func (s *Sweeper) Sweep(ctx context.Context) (Result, error) {
	infos, err := s.Queues.QueueInfos(ctx)
	if err != nil {
		return Result{}, err
	}
	paused := map[string]bool{} // by every queue to sweep
	for _, q := range s.PushQueues {
		paused[q] = false
	}
	var resumed []queue.QueueInfo
	for _, qi := range infos {
		paused[qi.Name] = qi.Paused
		if qi.Redeliver != "" && !qi.Paused {
			resumed = append(resumed, qi)
		}
	}
	queues := slices.Sorted(maps.Keys(paused))
	limit := cmp.Or(max(s.BatchSize, 0), 100)
	res := Result{Queues: len(queues)}
	var errs []error
	for _, q := range queues {
		due, n, err := s.sweepQueue(ctx, q, limit, paused[q])
		res.Resolved += due
		res.Redelivered += n
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %s: %w", q, err))
		}
	}
	for _, qi := range resumed {
		n, err := s.redeliverResumed(ctx, qi)
		res.Redelivered += n
		if err != nil {
			errs = append(errs, fmt.Errorf("resumed queue %s: %w", qi.Name, err))
		}
	}
	if s.Crons != nil {
		cr, err := s.Crons.Run(ctx)
		res.CronsFired, res.NextCron, errs = cr.Fired, cr.Next, append(errs, err) // errors.Join drops nils
	}
	if s.DeadLetter != nil {
		pr, err := s.DeadLetter.Prune(ctx)
		res.DeadPruned = pr.Pruned
		if err != nil {
			errs = append(errs, fmt.Errorf("dead letter retention: %w", err))
		}
	}
	if s.Workflows != nil {
		n, err := s.Workflows.Timeouts(ctx, limit)
		res.TimedOut, errs = n, append(errs, err)
		n, err = s.Workflows.Repair(ctx, limit)
		res.Workflows, errs = n, append(errs, err)
	}
	return res, errors.Join(errs...)
}

// redeliverResumed re-sends the available push-mode jobs of a resumed
// queue (their messages were dropped while it was paused), then clears the
// queue's mark. A crash in between re-sends them again: harmless.
func (s *Sweeper) redeliverResumed(ctx context.Context, qi queue.QueueInfo) (int, error) {
	sent := 0
	var sendErr error
	cursor := ""
	for round := 0; round < 1000; round++ {
		page, err := s.Store.ListQueue(ctx, store.ListAvailable, qi.Name, nil, 1000, cursor)
		if err != nil {
			return sent, err
		}
		if ds := pushDeliveries(page.Items); len(ds) > 0 {
			if err := s.Sender.Send(ctx, ds); err != nil {
				// Jobs not sent keep their own redelivery check: the mark
				// is cleared all the same.
				var se *dispatch.SendError
				if !errors.As(err, &se) {
					return sent, err
				}
				sendErr = errors.Join(sendErr, err)
				sent -= len(se.JobIDs)
			}
			sent += len(ds)
		}
		if cursor = page.Cursor; cursor == "" {
			break
		}
	}
	return sent, errors.Join(sendErr, s.Queues.ClearRedeliver(ctx, qi.Name, qi.Redeliver))
}

// sweepQueue resolves q's due jobs and re-sends its unclaimed push-mode
// jobs; it returns how many due jobs it found and how many it re-sent.
func (s *Sweeper) sweepQueue(ctx context.Context, q string, limit int, paused bool) (due, redelivered int, err error) {
	for round := 0; round < 50; round++ {
		items, n, more, err := s.Service.ResolveDue(ctx, q, limit, false)
		due += n
		if err != nil {
			return due, redelivered, err
		}
		if err := fault.Hit(fault.SweeperAfterResolve); err != nil {
			return due, redelivered, err
		}
		n, err = s.redeliver(ctx, items, paused)
		if redelivered += n; err != nil {
			return due, redelivered, err
		}
		if !more {
			break
		}
	}
	return due, redelivered, nil
}

// redeliver re-sends available push-mode jobs whose redelivery check is due
// and then pushes the check back (recheckIn): a crash in between causes a
// duplicate message, never a lost one. A paused queue's jobs are not sent;
// only their next check is pushed back.
func (s *Sweeper) redeliver(ctx context.Context, items []store.Item, paused bool) (int, error) {
	ds := pushDeliveries(items)
	if len(ds) == 0 {
		return 0, nil
	}
	// Jobs not sent keep their redelivery check (the next sweep tries them
	// again); the others' checks move on.
	unsent := map[string]bool{}
	var sendErr error
	if paused {
		ds = nil
	} else if err := s.Sender.Send(ctx, ds); err != nil {
		var se *dispatch.SendError
		if !errors.As(err, &se) {
			return 0, err
		}
		for _, id := range se.JobIDs {
			unsent[id] = true
		}
		sendErr = err
	}
	if err := fault.Hit(fault.SweeperAfterSend); err != nil {
		return len(ds), err
	}
	now := s.Service.Now()
	for _, it := range items {
		if !it.Job.Push || unsent[it.Job.ID] {
			continue
		}
		if _, err := s.Store.Apply(ctx, store.Redelivered(it.Job.ID, it.DueAt, now.Add(recheckIn(it.Job, now, s.Service.RedeliverAfter())))); err != nil {
			if _, ok := errors.AsType[*store.ConflictError](err); !ok && !errors.Is(err, store.ErrNotFound) {
				return len(ds), err
			}
		}
	}
	s.logger().InfoContext(ctx, "redelivered unclaimed push-mode jobs", "count", len(ds)-len(unsent))
	return len(ds) - len(unsent), sendErr
}

// pushDeliveries are the deliveries of the push-mode jobs among items.
func pushDeliveries(items []store.Item) []dispatch.Delivery {
	var ds []dispatch.Delivery
	for _, it := range items {
		if it.Job.Push {
			ds = append(ds, dispatch.Delivery{Job: it.Job})
		}
	}
	return ds
}

// maxRecheck bounds the wait between two redelivery checks of one job, in
// redelivery delays (an hour with the default of five minutes).
const maxRecheck = 12

// recheckIn is how long after a redelivery the job's next check waits: as
// long as the job has already waited since it became available, at least
// the redelivery delay and at most maxRecheck of them. The wait doubles, so
// a job whose message sits behind a backlog in SQS does not add a copy to
// it every delay, while a lost message is still re-sent within its age.
func recheckIn(j *job.Job, now time.Time, delay time.Duration) time.Duration {
	wait := delay
	if j.EnqueuedAt != nil {
		wait = max(wait, now.Sub(*j.EnqueuedAt))
	}
	return min(wait, maxRecheck*delay)
}

// IdleTicks is how many ticks Loop waits after a sweep that found nothing
// to do (no due job, re-send, workflow check, cron fire or pruning): an
// idle stack sweeping every second reads every queue's due shards every
// second, which is most of its AWS requests (the local stack: 41 of 62 a
// second). The wait ends early at the next cron schedule's time. FETCH
// resolves the due jobs of the queues it reads and a job read by id is
// resolved as it is read (lifecycle.Service.Info), so what waits longer
// is what only the sweeper does: push-mode leases and re-sends, workflow
// checks, a new cron schedule's first run.
const IdleTicks = 10

// Loop sweeps every tick until ctx is done or until; a zero tick sweeps
// once. After a sweep that found nothing to do it waits IdleTicks ticks,
// or until the next cron schedule is due if that is sooner.
func (s *Sweeper) Loop(ctx context.Context, tick time.Duration, until time.Time) (Result, error) {
	var total Result
	var last error
	for {
		r, err := s.Sweep(ctx)
		total.Queues = r.Queues
		total.Resolved += r.Resolved
		total.Redelivered += r.Redelivered
		total.Workflows += r.Workflows
		total.TimedOut += r.TimedOut
		total.CronsFired += r.CronsFired
		total.DeadPruned += r.DeadPruned
		if err != nil {
			// One failing queue or schedule must not stop the others'
			// time-driven moves for the rest of the invocation.
			last = err
			s.logger().ErrorContext(ctx, "sweep failed; continuing", "error", err.Error())
		}
		if tick <= 0 || time.Now().Add(tick).After(until) {
			return total, last
		}
		select {
		case <-ctx.Done():
			return total, last
		case <-time.After(nextWait(r, err, tick, time.Now(), until)):
		}
	}
}

// nextWait is how long Loop waits after a sweep with result r and error
// err at now: tick after a sweep that did something or failed, else
// IdleTicks ticks, cut short by the next cron schedule's time (never below
// a tick) and by until.
func nextWait(r Result, err error, tick time.Duration, now, until time.Time) time.Duration {
	if r.busy() || err != nil {
		return tick
	}
	wait := IdleTicks * tick
	if !r.NextCron.IsZero() {
		wait = max(min(wait, r.NextCron.Sub(now)), tick)
	}
	return max(min(wait, until.Sub(now)-tick), 0)
}

// Handler returns the sweeper function's handler for scheduled events: one
// sweep, or with tick > 0 a sweep every tick until shortly before the
// invocation's deadline or the next scheduled run.
func (s *Sweeper) Handler(tick time.Duration) func(ctx context.Context) (Result, error) {
	return func(ctx context.Context) (Result, error) {
		until := time.Now().Add(55 * time.Second)
		if dl, ok := ctx.Deadline(); ok && dl.Add(-5*time.Second).Before(until) {
			until = dl.Add(-5 * time.Second)
		}
		return s.Loop(ctx, tick, until)
	}
}

func (s *Sweeper) logger() *slog.Logger { return cmp.Or(s.Logger, slog.Default()) }
