package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// FetchRequest is a FETCH.
type FetchRequest struct {
	Queues   []string
	Count    int
	WorkerID string
	// Visibility is the lease length; 0 uses the job's own or the default.
	Visibility time.Duration
	// MaxBytes bounds the sum of the jobs' store.FetchBytes, the first one
	// counted twice (the answer repeats it as "job"). Default
	// DefaultFetchBytes.
	MaxBytes int
	// Wait is how long a FETCH that finds nothing keeps looking, every
	// FetchWaitPoll (a long poll, worker protocol 6.1). Capped at
	// MaxFetchWait and by the request's deadline less FetchWaitMargin.
	Wait time.Duration
	// Shares, when set, is how many of Count each queue gets first
	// (queue.Service.Shares: a fair-scheduling pool); what a queue cannot
	// fill goes to the others in order. Nil: the queues in order, each
	// drained before the next (ojs-core.md).
	Shares map[string]int
	// Tenant, when set, scopes the FETCH to that tenant's jobs (read from
	// the tenant index, claimed on condition of the tenant); "" fetches
	// every tenant's (docs/multi-tenancy.md).
	Tenant string
	// Worker, when set, is what the worker offers: only the jobs whose
	// needs it meets are claimed, those it prefers first (job.Needs,
	// docs/ml-resources.md). Nil claims any job.
	Worker *job.Capabilities
}

// MaxFetchWait bounds FetchRequest.Wait (topology.MaxFetchWait).
const MaxFetchWait = topology.MaxFetchWait

// FetchWaitPoll is how often a waiting FETCH looks at its queues again
// (half a read unit a shard when empty).
const FetchWaitPoll = 50 * time.Millisecond

// FetchWaitMargin is the time a waiting FETCH keeps for its answer before
// its request's deadline.
const FetchWaitMargin = 2 * time.Second

// MaxFetch bounds the jobs one FETCH returns.
const MaxFetch = 100

// MaxFetchQueues bounds the queues one FETCH names: each costs DynamoDB
// reads even when empty.
const MaxFetchQueues = 20

// MaxWorkerQueues bounds the queues a heartbeat lists.
const MaxWorkerQueues = 100

// DefaultFetchBytes is the FETCH answer budget when FetchRequest.MaxBytes
// is zero: Lambda's response limit less 64 KiB for status, headers and
// framing (an answer over it would fail after its jobs were claimed).
const DefaultFetchBytes = awslimit.LambdaResponseBytes - 64<<10

// Fetch claims up to Count jobs from the queues in order: highest priority
// first, FIFO within a priority, due jobs of each queue promoted and expired
// leases requeued first. It stops before the job that would take the answer
// past MaxBytes; a job that cannot fit an answer even alone is skipped.
func (s *Service) Fetch(ctx context.Context, r FetchRequest) ([]*job.Job, error) {
	if len(r.Queues) == 0 {
		return nil, ojserr.Invalid("queues", "The 'queues' field must list at least one queue.")
	}
	if len(r.Queues) > MaxFetchQueues {
		return nil, ojserr.Invalid("queues", "A FETCH names at most %d queues; got %d.", MaxFetchQueues, len(r.Queues)).With("max_queues", MaxFetchQueues)
	}
	for _, q := range r.Queues {
		if err := job.ValidateQueue(q); err != nil {
			return nil, err
		}
	}
	r.Count = min(max(r.Count, 1), MaxFetch)
	if r.Tenant != "" {
		if err := job.ValidateTenant(r.Tenant); err != nil {
			return nil, err
		}
		ctx = job.WithTenant(ctx, r.Tenant) // the claims' condition (claim)
	}
	if r.MaxBytes <= 0 {
		r.MaxBytes = DefaultFetchBytes
	}
	wait := min(r.Wait, MaxFetchWait)
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)-FetchWaitMargin)
	}
	end := time.Now().Add(wait)
	for pass := 0; ; pass++ {
		out, next, err := s.fetchOnce(ctx, r, pass == 0)
		if next == passStop || err != nil || len(out) > 0 {
			return out, err
		}
		// A long poll: look again until a job is claimed, the worker is
		// told to stop, the wait is over or the caller is gone.
		pause := FetchWaitPoll
		if next == passHeld {
			pause = FetchWaitHeld
		}
		if left := time.Until(end); left <= 0 || !ctxsleep.Sleep(ctx, min(pause, left)) {
			return out, nil
		}
	}
}

// fetchOnce is one pass of Fetch over r's queues (r validated); next says
// what a waiting FETCH does if the pass claimed nothing. first is set on a
// FETCH's first pass (the later passes of a waiting FETCH found nothing).
func (s *Service) fetchOnce(ctx context.Context, r FetchRequest, first bool) (out []*job.Job, next fetchNext, err error) {
	used := 0
	out = []*job.Job{}
	if stop, _ := s.workers.get(r.WorkerID); stop {
		return out, passStop, nil // a quiet or terminating worker gets no new jobs
	}
	// fs is one consistent read of the queues' pause state and rate limit
	// and of the worker's state (so that a pause holds for every FETCH
	// after it), made once the first queue shows candidates. readState
	// reads it; errStopping reports a worker that is quiet or terminating.
	var fs *queue.FetchState
	// While a queue keeps showing candidates, the state is read alongside
	// them rather than after (one round trip less per FETCH; an idle
	// queue's empty FETCH still never reads it).
	var early chan stateRead
	if first && s.busy.recently(r.Queues, s.Now()) {
		early = make(chan stateRead, 1)
		go func() {
			st, err := s.queues.FetchState(ctx, r.Queues, r.WorkerID)
			early <- stateRead{st, err}
		}()
	}
	readState := func() (err error) {
		var st queue.FetchState
		if early != nil {
			res := <-early
			st, err, early = res.st, res.err, nil
		} else {
			st, err = s.queues.FetchState(ctx, r.Queues, r.WorkerID)
		}
		if err != nil {
			return err
		}
		fs = &st
		if w := fs.Worker; w != nil && (stopping(w.State) || stopping(w.Directive)) {
			s.workers.put(r.WorkerID, true)
			return errStopping
		}
		return nil
	}
	// A queue last seen paused is likely paused still: its state is read first.
	if s.queues.SeenPaused(r.Queues) {
		if err := readState(); err != nil {
			return s.passFailed(ctx, out, err)
		}
	}
	full := false // the next job would pass MaxBytes
	// With shares, a first round takes each queue's share, a second what
	// is left from any queue in order.
	rounds := 1
	if r.Shares != nil {
		rounds = 2
	}
	dry := map[string]bool{} // queues the first round found empty
	for round := range rounds {
		for _, q := range r.Queues {
			if len(out) >= r.Count || full {
				break
			}
			want := r.Count - len(out)
			if dry[q] {
				continue
			}
			if round == 0 && r.Shares != nil {
				if want = min(want, r.Shares[q]); want == 0 {
					continue
				}
			}
			if fs != nil && fs.Queues[q].Paused {
				next = passHeld
				continue // a paused queue is not fetched; its jobs wait
			}
			if round == 0 || r.Shares[q] == 0 {
				// Due jobs first (store.DueNow reads only shards that may hold some).
				now := s.Now()
				due, err := s.st.DueNow(ctx, q, now, 25)
				if err != nil {
					return s.passFailed(ctx, out, err)
				}
				if _, _, err := s.resolve(ctx, due, now, false); err != nil {
					return s.passFailed(ctx, out, err)
				}
			}
			// Twice the candidates it wants, and a few: a window wide enough
			// for racing FETCHes to part ways (claimRounds), at no extra cost.
			asked := min(2*want+8, MaxFetch)
			items, err := s.candidates(ctx, q, r.Tenant, asked)
			if err != nil {
				return s.passFailed(ctx, out, err)
			}
			if len(items) == 0 {
				dry[q] = true
				continue
			}
			s.busy.saw(q, s.Now())
			if fs == nil {
				if err := readState(); err != nil {
					return s.passFailed(ctx, out, err)
				}
			}
			qs := fs.Queues[q]
			if qs.Paused {
				next = passHeld
				continue
			}
			if rate := qs.Rate; rate > 0 {
				// A rate-limited queue hands out at most rate jobs a second:
				// reserve the jobs before claiming them.
				want = min(want, max(1, int(rate)))
				ok, err := s.qs.TakeRateTokens(ctx, q, want, rate, s.Now())
				if err != nil {
					return s.passFailed(ctx, out, err)
				}
				if !ok {
					next = passHeld
					continue
				}
			}
			claimed, n, blocked, held, err := s.claimFair(ctx, r, q, qs, items, asked, want, used)
			if held && len(claimed) == 0 {
				next = passHeld // rate limit keys held its jobs
			}
			out, used, full = append(out, claimed...), n, blocked
			if err != nil {
				return s.passFailed(ctx, out, err)
			}
		}
	}
	return out, next, nil
}

// stateRead is a FetchState read started early.
type stateRead struct {
	st  queue.FetchState
	err error
}

// BusyFor is how long after a FETCH of this process found candidates in a
// queue the next FETCH of it reads the queues' state early (a worker that
// polls once a second finds an idle queue idle).
const BusyFor = time.Second

// busyQueues is when a FETCH of this process last found candidates, by
// queue (Unix ns).
type busyQueues struct{ m sync.Map }

func (b *busyQueues) saw(q string, now time.Time) { b.m.Store(q, now.UnixNano()) }

// recently reports whether a FETCH of this process found candidates in
// one of queues less than BusyFor before now.
func (b *busyQueues) recently(queues []string, now time.Time) bool {
	since := now.Add(-BusyFor).UnixNano()
	for _, q := range queues {
		if at, ok := b.m.Load(q); ok && at.(int64) > since {
			return true
		}
	}
	return false
}

// fetchNext is what a waiting FETCH does after a pass that claimed nothing.
type fetchNext int

const (
	// passAgain looks again after FetchWaitPoll.
	passAgain fetchNext = iota
	// passHeld looks again after FetchWaitHeld: a queue held jobs it could
	// not hand out (paused, or out of rate tokens).
	passHeld
	// passStop answers now: the worker is quiet or terminating.
	passStop
)

// FetchWaitHeld is how often a waiting FETCH looks again at queues that
// hold jobs it may not take (paused or rate limited).
const FetchWaitHeld = 250 * time.Millisecond

// errStopping ends a pass of a FETCH by a quiet or terminating worker.
var errStopping = errors.New("the worker is quiet or terminating")

// passFailed is fetchFailed for a pass of a FETCH (errStopping: the jobs
// claimed are the answer).
func (s *Service) passFailed(ctx context.Context, out []*job.Job, err error) ([]*job.Job, fetchNext, error) {
	if err == errStopping {
		return out, passStop, nil
	}
	out, err = s.fetchFailed(ctx, out, err)
	return out, passStop, err
}

// writeParallel bounds the job writes one request has in flight at once:
// a FETCH's claims, a heartbeat's extensions.
const writeParallel = 10

// contentionWindow is how long after a lost claim this process treats
// FETCHes of the queue as contended.
const contentionWindow = 2 * time.Second

// maxHeldWindows bounds the windows of candidates one FETCH of a queue
// reads while rate limit keys hold the jobs it finds.
const maxHeldWindows = 5

// claimPast is claimRounds over a queue's candidates items (asked of
// them read) that goes on to the next window of the queue's ready jobs
// while the window claimed short because rate limit keys held some of its
// jobs (ojs-rate-limiting.md 8.1: a held job is skipped, the next
// eligible one assigned) or because r.Worker did not fit some (fitting),
// up to maxHeldWindows windows. held reports that a key held a candidate
// or one did not fit.
func (s *Service) claimPast(ctx context.Context, r FetchRequest, q string, items []store.Item, asked, want, used int) (out []*job.Job, n int, blocked, held bool, err error) {
	n = used
	for window := 1; ; window++ {
		heldHere, fit := false, items
		if r.Worker != nil {
			if fit, heldHere, err = s.needs.fitting(ctx, s.st, r.Worker, items); err != nil {
				return out, n, blocked, held, err
			}
		}
		claimed, after, full, err := s.claimRounds(ctx, r, q, fit, want-len(out), n, &heldHere)
		out, n, blocked, held = append(out, claimed...), after, full, held || heldHere
		if err != nil || !heldHere || full || len(out) >= want || len(items) < asked || window >= maxHeldWindows || s.queues.IsPush(q) {
			return out, n, blocked, held, err
		}
		if items, err = s.st.ReadyOf(ctx, r.Tenant, q, items[len(items)-1].ReadySK, asked); err != nil {
			return out, n, blocked, held, err
		}
	}
}

// claimFair is claimPast for an unscoped FETCH of a queue shared among
// its tenants (qs.TenantFairness, docs/multi-tenancy.md): each tenant gets
// its share of want, by smooth weighted round robin over this process's
// FETCHes of the queue (queue.Service.Shares; weights from the tenants'
// fairness_weight), from its own jobs (the tenant index); what the shares
// leave, the queue's jobs in order fill (items, asked of them read: jobs
// without a tenant among them). Any other FETCH of q is claimPast's.
func (s *Service) claimFair(ctx context.Context, r FetchRequest, q string, qs queue.FetchQueueState, items []store.Item, asked, want, used int) (out []*job.Job, n int, blocked, held bool, err error) {
	if r.Tenant != "" || qs.TenantFairness == "" || len(qs.Tenants) == 0 {
		return s.claimPast(ctx, r, q, items, asked, want, used)
	}
	pool := &queue.Pool{Name: "tenants:" + q, Queues: qs.Tenants, Strategy: qs.TenantFairness, Weights: map[string]int{}}
	if qs.TenantFairness == queue.StrategyWeighted {
		for _, t := range qs.Tenants {
			l, err := s.queues.Tenants().LimitsOf(ctx, t, s.Now())
			if err != nil {
				return nil, used, false, false, err
			}
			pool.Weights[t] = l.Weight()
		}
	}
	n = used
	shares := s.queues.Shares(pool, want)
	for _, t := range qs.Tenants {
		if shares[t] == 0 || blocked {
			continue
		}
		ask := min(2*shares[t]+8, MaxFetch)
		ti, err := s.st.ReadyOf(ctx, t, q, "", ask)
		if err != nil {
			return out, n, blocked, held, err
		}
		tr := r
		tr.Tenant = t // the tenant's windows (claimPast); the claims stay unscoped
		got, after, full, h, err := s.claimPast(ctx, tr, q, ti, ask, shares[t], n)
		out, n, blocked, held = append(out, got...), after, full, held || h
		if err != nil {
			return out, n, blocked, held, err
		}
	}
	if left := want - len(out); left > 0 && !blocked {
		taken := map[string]bool{}
		for _, j := range out {
			taken[j.ID] = true
		}
		items = slices.DeleteFunc(items, func(it store.Item) bool { return taken[it.Job.ID] })
		got, after, full, h, err := s.claimPast(ctx, r, q, items, asked, left, n)
		return append(out, got...), after, full, held || h, err
	}
	return out, n, blocked, held, nil
}

// claimRounds claims up to want of a queue's candidates for FETCH r, whose
// answer holds used bytes so far, in rounds: each round claims at once the
// next candidates that fit the answer (up to writeParallel). After a lost
// claim, or while q was contended within contentionWindow, the candidates
// of the next priority are tried from a random one on (spread), so racing
// FETCHes part ways; without contention the jobs claimed are the first in
// priority-then-FIFO order. It returns the jobs claimed, the answer's
// bytes with them, whether the next candidate would pass r.MaxBytes, and
// an error that stopped it (with the jobs claimed before it, which must be
// answered). It sets *held when a rate limit key held a candidate (which
// it skips).
func (s *Service) claimRounds(ctx context.Context, r FetchRequest, q string, items []store.Item, want, used int, held *bool) ([]*job.Job, int, bool, error) {
	var out []*job.Job
	next := 0
	if s.contended(q) {
		s.spread(items)
	}
	for len(out) < want && next < len(items) {
		var round []store.Item
		var sizes []int
		bytes, largest, blocked := 0, 0, false
		for ; next < len(items) && len(round) < min(want-len(out), writeParallel); next++ {
			it := items[next]
			if s.keyed.heldJob(it.Job.ID) {
				*held = true // its key holds it, as a claim found before: no write
				continue
			}
			size, err := fetchBytes(ctx, s.st, it)
			if err != nil {
				return out, used, false, err
			}
			if size == 0 {
				continue // deleted since the index was read
			}
			first := 0
			if used == 0 {
				// The answer repeats its first job ("job"): whichever of
				// the round's that is, it counts twice.
				first = max(largest, size)
			}
			if used+bytes+size+first > r.MaxBytes {
				if used > 0 || len(round) > 0 {
					blocked = true
					break
				}
				s.log.ErrorContext(ctx, "job too large for a FETCH answer; skipped", "job_id", it.Job.ID, "queue", q,
					"answer_bytes", 2*size, "max_bytes", r.MaxBytes)
				continue
			}
			round, sizes = append(round, it), append(sizes, size)
			bytes, largest = bytes+size, max(largest, size)
		}
		if len(round) == 0 {
			return out, used, blocked, nil
		}
		got := make([]*job.Job, len(round))
		errs := make([]error, len(round))
		var wg sync.WaitGroup
		for i, it := range round {
			wg.Go(func() { got[i], errs[i] = s.Claim(ctx, it.Job, r.WorkerID, r.Visibility, time.Time{}) })
		}
		wg.Wait()
		lost := 0
		for i, j := range got {
			if _, ok := errors.AsType[*HeldError](errs[i]); ok {
				errs[i], *held = nil, true
				continue // still available: its key allows no start now
			}
			switch {
			case j != nil:
				if used == 0 {
					used += sizes[i] // the answer's "job"
				}
				used += sizes[i]
				out = append(out, j)
			case errs[i] == nil:
				lost++
			}
		}
		if err := errors.Join(errs...); err != nil {
			return out, used, false, err
		}
		if blocked && lost == 0 {
			return out, used, true, nil
		}
		// (Blocked with claims lost: the candidate that did not fit may
		// fit now, and is next.)
		if lost > 0 {
			// Contention: another FETCH is claiming the same heads.
			s.contention.Store(q, s.now().UnixNano())
			s.spread(items[next:])
		}
	}
	return out, used, false, nil
}

// contended reports whether a FETCH of this process lost a claim on queue
// q within the last contentionWindow.
func (s *Service) contended(q string) bool {
	at, ok := s.contention.Load(q)
	return ok && s.now().Sub(time.Unix(0, at.(int64))) < contentionWindow
}

// spread rotates the leading candidates of items that share the first
// one's priority so that they start from a random one: the order is kept
// across priorities, and within the first priority every candidate is
// still tried.
func (s *Service) spread(items []store.Item) {
	k := 1
	for k < len(items) && items[k].Job.Priority == items[0].Job.Priority {
		k++
	}
	if k > 1 {
		rotateFrom(items[:k], min(int(s.rnd()*float64(k)), k-1))
	}
}

// candidates reads up to n available jobs of queue q for a FETCH: a
// pull-mode queue's from the ready index (of tenant's jobs only, from the
// tenant index, when set), a push-mode queue's from the due index
// (store.ReadyPush; another tenant's jobs fail the claim's condition).
func (s *Service) candidates(ctx context.Context, q, tenant string, n int) ([]store.Item, error) {
	if !s.queues.IsPush(q) {
		return s.st.ReadyOf(ctx, tenant, q, "", n)
	}
	return s.st.ReadyPush(ctx, q, n)
}

// fetchFailed ends a FETCH that met an error: with nothing claimed yet
// the error is the answer; once jobs are claimed they are (the error is
// logged), or they would stay unrun until their leases end.
func (s *Service) fetchFailed(ctx context.Context, out []*job.Job, err error) ([]*job.Job, error) {
	if len(out) == 0 {
		return nil, ojserr.Backend(err)
	}
	s.log.ErrorContext(ctx, "FETCH stopped early; answering the jobs it claimed", "claimed", len(out), "error", err.Error())
	return out, nil
}

// fetchBytes is what a FETCH candidate adds to the answer once claimed
// (store.FetchBytes): recorded on the job and projected by the ready
// index; a job written before it was recorded is read by key (0: gone).
func fetchBytes(ctx context.Context, st *store.Store, it store.Item) (int, error) {
	if it.FetchBytes > 0 {
		return it.FetchBytes, nil
	}
	if !it.Partial {
		return store.FetchBytes(it.Job), nil
	}
	j, err := st.Get(ctx, it.Job.ID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return store.FetchBytes(j), nil
}

// rotateFrom rotates s left by r: s[r] first, s[r-1] last.
func rotateFrom[T any](s []T, r int) {
	slices.Reverse(s[:r])
	slices.Reverse(s[r:])
	slices.Reverse(s)
}

// Claim tries to move j (as last read) from available to active for
// workerID with a lease of visibility (0: the job's own, else the
// default); redelivery is store.ClaimOpts.Redelivery. It returns nil, nil
// when someone else got it or it expired (then it is discarded).
func (s *Service) Claim(ctx context.Context, j *job.Job, workerID string, visibility time.Duration, redelivery time.Time) (*job.Job, error) {
	claimed, _, err := s.claim(ctx, j, workerID, visibility, redelivery)
	return claimed, err
}

// claim is Claim that also returns the job as the refused write found it
// (nil when it was claimed, gone, or discarded as expired): a claimer that
// had not read the job goes on from there without reading it.
func (s *Service) claim(ctx context.Context, j *job.Job, workerID string, visibility time.Duration, redelivery time.Time) (*job.Job, *store.Item, error) {
	now := s.Now()
	if j.ExpiresAt != nil && !j.ExpiresAt.After(now) {
		return nil, nil, s.expire(ctx, j, now)
	}
	if visibility <= 0 {
		visibility = j.Visibility
	}
	visibility = cmp.Or(max(visibility, 0), job.DefaultVisibilityTimeout)
	timeout := cmp.Or(max(j.Timeout, 0), job.DefaultTimeout)
	opts := store.ClaimOpts{Queue: j.Queue, WorkerID: workerID, Now: now, LeaseUntil: now.Add(visibility), Deadline: now.Add(timeout), Redelivery: redelivery,
		Tenant: job.TenantFrom(ctx)}
	claimed, err := s.st.Apply(ctx, store.Claim(j.ID, opts))
	var ce *store.ConflictError
	if errors.As(err, &ce) && !redelivery.IsZero() && ce.Current.State == job.Available && ce.Current.KeyLimit == nil &&
		(ce.Current.ExpiresAt == nil || ce.Current.ExpiresAt.After(now)) {
		// Still available, so the redelivery check moved before the
		// lease's end since it was read (or is gone): claim it the usual way.
		opts.Redelivery = time.Time{}
		claimed, err = s.st.Apply(ctx, store.Claim(j.ID, opts))
	}
	if errors.As(err, &ce) {
		if ce.Current.State == job.Available && ce.Current.ExpiresAt != nil && !ce.Current.ExpiresAt.After(now) {
			return nil, nil, s.expire(ctx, ce.Current, now)
		}
		if opts.Tenant != "" && ce.Current.Tenant != opts.Tenant {
			return nil, nil, nil // another tenant's: not for this FETCH
		}
		if ce.Current.State == job.Available && ce.Current.KeyLimit != nil {
			// A keyed job: claimed only with a start of its key.
			opts.Redelivery = ce.DueAt
			return s.keyed.claim(ctx, ce.Current, opts)
		}
		return nil, &store.Item{Job: ce.Current, DueAt: ce.DueAt}, nil
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrTransactionConflict) {
		return nil, nil, nil // gone, or being claimed in a keyed claim's transaction
	}
	if err != nil {
		return nil, nil, err
	}
	s.log.InfoContext(ctx, "job claimed", "job_id", claimed.ID, "queue", claimed.Queue, "attempt", claimed.Attempt, "worker_id", workerID)
	return claimed, nil, nil
}

// expire discards job j (as read, possibly from an index) whose
// expires_at has passed. It reads the job by key first: the discard
// appends to the error history, which an index does not project.
func (s *Service) expire(ctx context.Context, j *job.Job, now time.Time) error {
	j, err := s.st.Get(ctx, j.ID)
	if err != nil {
		return ignoreConflict(err) // gone: nothing to expire
	}
	if j.ExpiresAt == nil || j.ExpiresAt.After(now) || (j.State != job.Available && j.State != job.Scheduled && j.State != job.Retryable) {
		return nil // moved meanwhile
	}
	expired, err := s.st.Apply(ctx, store.Expire(j, now))
	if err != nil {
		return ignoreConflict(err)
	}
	s.finished(ctx, expired)
	s.log.InfoContext(ctx, "job expired", "job_id", j.ID, "queue", j.Queue)
	return nil
}

// leaseEnded is the answer to an ACK, FAIL or heartbeat of an attempt
// whose lease ended: the attempt is over whether or not the job was
// requeued yet (ojs-worker-protocol.md 5.5).
func leaseEnded(op string, j *job.Job) error {
	e := ojserr.StateConflict(ojserr.Conflict, "Cannot %s job %s: its lease ended; the attempt is over and the job is requeued or discarded per its retry policy.", op, j.ID).
		With("job_id", j.ID).With("current_state", string(j.State)).With("attempt", j.Attempt)
	if j.LeaseUntil != nil {
		e = e.With("lease_expired_at", job.Timestamp(*j.LeaseUntil))
	}
	return e
}
