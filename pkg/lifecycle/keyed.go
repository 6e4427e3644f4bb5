package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/tenant"
)

// HeldError answers a claim of a keyed job whose rate limit key allows no
// start now (ojs-rate-limiting.md 8.1): the job stays available and the
// claimer goes on to the next one. Wait is how long the key allows none
// (0 when unknown: a concurrency slot frees when an attempt ends).
type HeldError struct {
	Key   string
	Limit ratelimit.Limit
	Wait  time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("rate limit key %s holds its jobs (%s)", e.Key, e.Limit)
}

// keyedClaims claims keyed jobs for a Service.
type keyedClaims struct {
	st   *store.Store
	keys *ratelimit.Keys
	now  func() time.Time
	log  *slog.Logger
	// held is, by key, until when (Unix ns) this process takes the key to
	// allow no start (a HeldError's wait, or keyRecheck): the candidates
	// of a full key cost no read of it meanwhile.
	held sync.Map
	// jobs is, by job id, the key of the keyed jobs claims found (at most
	// maxKnownJobs): a candidate whose key is held is skipped without a
	// claim's failed write.
	jobs boundedMap[string, string]
}

// maxKnownJobs bounds keyedClaims.jobs (emptied when full).
const maxKnownJobs = 50_000

// heldJob reports whether job id is a keyed job whose key this process
// takes to be held now.
func (k *keyedClaims) heldJob(id string) bool {
	key, ok := k.jobs.get(id)
	if !ok {
		return false
	}
	v, ok := k.held.Load(key)
	return ok && v.(heldUntil).until > k.now().UnixNano()
}

// heldUntil is an entry of keyedClaims.held.
type heldUntil struct {
	until int64
	limit ratelimit.Limit
}

// keyRecheck is how long a key found full by concurrency is taken as full
// before it is read again (its slots checked against their holders).
const keyRecheck = FetchWaitHeld

// keyedTries bounds the transactions one keyed claim tries: each retry
// follows a change of the key's item between its read and the write.
const keyedTries = 4

// claim claims available job j (as the refused plain claim found it) in
// one transaction with a start of its rate limit key (ratelimit.Keys.
// Take), or answers *HeldError while the key allows none (at once while
// this process knows the key held). A key found full by concurrency has
// its slots checked once against their holders first: a slot whose
// attempt is over (its release still on its way from the stream) is
// freed.
func (k *keyedClaims) claim(ctx context.Context, j *job.Job, opts store.ClaimOpts) (*job.Job, *store.Item, error) {
	kl := j.KeyLimit
	opts.Key = kl.Key
	// A job to drop is dropped on the key as read, never on memory.
	if v, ok := k.held.Load(kl.Key); ok && kl.OnLimit != job.OnLimitDrop {
		h := v.(heldUntil)
		if wait := time.Duration(h.until - k.now().UnixNano()); wait > 0 {
			k.jobs.put(j.ID, kl.Key)
			return nil, nil, &HeldError{Key: kl.Key, Limit: h.limit, Wait: wait}
		}
	}
	claimed, cur, err := k.tryClaim(ctx, j, opts)
	if he, ok := errors.AsType[*HeldError](err); ok {
		k.held.Store(kl.Key, heldUntil{k.now().Add(cmp.Or(he.Wait, keyRecheck)).UnixNano(), he.Limit})
		if kl.OnLimit == job.OnLimitDrop {
			return k.drop(ctx, j, he)
		}
		k.jobs.put(j.ID, kl.Key)
	} else {
		k.jobs.del(j.ID)
	}
	return claimed, cur, err
}

// drop discards job j, whose key he holds, instead of leaving it
// available (on_limit "drop"); the stream derives job.discarded and
// rate_limit.dropped. It answers as for a job gone, so the claimer goes on
// to the next one.
func (k *keyedClaims) drop(ctx context.Context, j *job.Job, he *HeldError) (*job.Job, *store.Item, error) {
	msg := fmt.Sprintf("Rate limit key '%s' allowed no start (%s) and the job's on_limit is \"drop\".", he.Key, he.Limit)
	_, err := k.st.Apply(ctx, store.Unstarted(j, events.RateLimitedError, msg, k.now()))
	if _, ok := errors.AsType[*store.ConflictError](err); ok || errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil // taken or changed meanwhile
	}
	if err != nil {
		return nil, nil, err
	}
	k.log.InfoContext(ctx, "job dropped by its rate limit key", "job_id", j.ID, "rate_limit_key", he.Key, "limit", string(he.Limit))
	return nil, nil, nil
}

// tryClaim is claim without the process's memory of held keys.
func (k *keyedClaims) tryClaim(ctx context.Context, j *job.Job, opts store.ClaimOpts) (*job.Job, *store.Item, error) {
	keys, kl := k.keys, j.KeyLimit
	st, err := keys.Get(ctx, kl.Key)
	if errors.Is(err, ratelimit.ErrNotFound) {
		st, err = keys.Record(ctx, kl, opts.Now) // admitted before the key was recorded
	}
	checked := false
	for tries := 0; ; tries++ {
		if err != nil {
			return nil, nil, err
		}
		now := k.now()
		wait, limit := st.Wait(now)
		if wait != 0 && limit == ratelimit.Concurrency && !checked {
			checked = true
			freed, err := k.freeStale(ctx, st)
			if err != nil {
				return nil, nil, err
			}
			if freed > 0 {
				st, err = keys.Get(ctx, kl.Key)
				continue
			}
		}
		if wait != 0 && st.Held == "" {
			// The first claim held by the key marks it (rate_limit.exceeded).
			if err := keys.MarkHeld(ctx, st, limit, now); err != nil {
				return nil, nil, err
			}
		}
		if wait != 0 || tries >= keyedTries {
			return nil, nil, &HeldError{Key: kl.Key, Limit: limit, Wait: max(wait, 0)}
		}
		take, err := keys.Take(st, j.ID, j.Attempt+1, now)
		if err != nil {
			return nil, nil, err
		}
		claimed, err := k.st.ApplyWith(ctx, store.Claim(j.ID, opts), take)
		if wf, ok := errors.AsType[*store.WithFailedError](err); ok {
			st, err = ratelimit.Decode(wf.Item) // the key moved on: decide again
			if err == nil && st == nil {
				st, err = keys.Record(ctx, kl, now)
			}
			continue
		}
		if errors.Is(err, store.ErrTransactionConflict) {
			if !ctxsleep.Sleep(ctx, store.ConflictBackoff(tries)) {
				return nil, nil, ctx.Err()
			}
			st, err = keys.Get(ctx, kl.Key)
			continue
		}
		if ce, ok := errors.AsType[*store.ConflictError](err); ok {
			return nil, &store.Item{Job: ce.Current, DueAt: ce.DueAt}, nil
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		k.log.InfoContext(ctx, "job claimed", "job_id", claimed.ID, "queue", claimed.Queue, "attempt", claimed.Attempt,
			"worker_id", opts.WorkerID, "rate_limit_key", kl.Key)
		return claimed, nil, nil
	}
}

// hold makes job j's rate limit key start no job before the time its
// failure names (rate_limit_until, ojs-rate-limiting.md 9.1); a job
// without a key of its own (none, or its tenant's concurrency key), or a
// time past, changes nothing (and the error is not parsed for it). A
// failed write is logged: the FAIL stands.
func (k *keyedClaims) hold(ctx context.Context, j *job.Job, in ErrorInput, now time.Time) {
	if j.KeyLimit == nil || j.KeyLimit.Key == tenant.ConcurrencyKey(j.Tenant) {
		return
	}
	until := in.holdUntil()
	if !until.After(now) {
		return
	}
	if err := k.keys.PauseUntil(ctx, j.KeyLimit.Key, until, in.Message, now); err != nil {
		k.log.WarnContext(ctx, "holding a rate limit key failed", "key", j.KeyLimit.Key, "job_id", j.ID, "error", err.Error())
		return
	}
	// This process takes the key as held at once.
	k.held.Store(j.KeyLimit.Key, heldUntil{until.UnixNano(), ratelimit.Dynamic})
}

// freeStale frees the slots of st whose attempts are over (read now) and
// returns how many it freed.
func (k *keyedClaims) freeStale(ctx context.Context, st *ratelimit.State) (int, error) {
	if len(st.Slots) == 0 {
		return 0, nil
	}
	jobs, err := k.st.BatchGetJobs(ctx, slices.Collect(maps.Keys(st.Slots)))
	if err != nil {
		return 0, err
	}
	stale := st.Stale(jobs)
	for id, attempt := range stale {
		if err := k.keys.Release(ctx, st.Key, id, attempt); err != nil {
			return 0, err
		}
	}
	return len(stale), nil
}
