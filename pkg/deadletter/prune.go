package deadletter

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/retry"
)

// Retention is the dead letter retention policy (ojs-dead-letter.md 5):
// jobs discarded longer than MaxAge ago are pruned, and of what remains
// only the newest MaxCount (over every queue) are kept.
type Retention struct {
	// MaxAge defaults to 180 days.
	MaxAge time.Duration
	// MaxCount defaults to 10,000.
	MaxCount int
	// Interval is the time between pruning runs. Default 5 minutes.
	Interval time.Duration
}

// Retention defaults (ojs-dead-letter.md 5.2 and 8.1).
const (
	DefaultMaxAge         = 180 * 24 * time.Hour
	DefaultMaxCount       = 10000
	DefaultPruneInterval  = 5 * time.Minute
	maxPrunedPerRun       = 1000
	maxQueuesCountedInRun = 10000
)

func (r Retention) withDefaults() Retention {
	if r.MaxAge <= 0 {
		r.MaxAge = DefaultMaxAge
	}
	if r.MaxCount <= 0 {
		r.MaxCount = DefaultMaxCount
	}
	if r.Interval <= 0 {
		r.Interval = DefaultPruneInterval
	}
	return r
}

// ParseRetention reads the retention settings: maxAge as an ISO 8601
// duration ("P180D") or a Go duration ("4320h"), maxCount as a positive
// integer and interval as a duration like maxAge; empty strings keep the
// defaults. It fails naming the setting that is not valid.
func ParseRetention(maxAge, maxCount, interval string) (Retention, error) {
	var r Retention
	dur := func(name, v string) (time.Duration, error) {
		if v == "" {
			return 0, nil
		}
		if d, err := retry.ParseDuration(v); err == nil {
			return d, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%s=%q is not a positive duration (ISO 8601 like P180D, or Go like 4320h)", name, v)
		}
		return d, nil
	}
	var err error
	if r.MaxAge, err = dur("max_age", maxAge); err != nil {
		return r, err
	}
	if r.Interval, err = dur("prune interval", interval); err != nil {
		return r, err
	}
	if maxCount != "" {
		n, err := strconv.Atoi(maxCount)
		if err != nil || n <= 0 {
			return r, fmt.Errorf("max_count=%q is not a positive integer", maxCount)
		}
		r.MaxCount = n
	}
	return r.withDefaults(), nil
}

// RetentionView is the policy as the stats endpoint shows it.
type RetentionView struct {
	MaxAge      string  `json:"max_age"`
	MaxCount    int     `json:"max_count"`
	NextPruneAt *string `json:"next_prune_at"`
}

// PruneResult is what one pruning run removed.
type PruneResult struct {
	// Ran is false when another run started within the interval.
	Ran     bool           `json:"ran"`
	Pruned  int            `json:"pruned"`
	ByAge   int            `json:"by_age"`
	ByCount int            `json:"by_count"`
	ByQueue map[string]int `json:"by_queue,omitempty"`
	// More is set when the run stopped at its budget with more to prune;
	// the next sweep continues.
	More bool `json:"more"`
}

// Prune applies the retention policy (ojs-dead-letter.md 8.1): at most one
// run per interval (claimed with a conditional write), removing jobs older
// than MaxAge, then the oldest beyond MaxCount, at most 1,000 per run. A
// job retried meanwhile is never pruned.
func (s *Service) Prune(ctx context.Context) (PruneResult, error) {
	pol := s.retention
	now := s.now()
	if now.UnixMilli() < s.pruneAfter.Load() {
		return PruneResult{}, nil // known not to be time yet
	}
	run, ok, nextAt, err := s.tb.claimPruneRun(ctx, now, now.Add(pol.Interval))
	if err != nil {
		return PruneResult{}, err
	}
	s.pruneAfter.Store(nextAt.UnixMilli())
	if !ok {
		return PruneResult{}, nil
	}
	res := PruneResult{Ran: true, ByQueue: map[string]int{}}
	queues, err := s.qs.Queues(ctx)
	if err != nil {
		return res, err
	}
	budget := maxPrunedPerRun
	prune := func(refs []ref) (int, error) {
		n := 0
		for _, r := range refs {
			if budget == 0 {
				res.More = true
				break
			}
			ok, err := s.tb.prune(ctx, r, now)
			if err != nil {
				return n, err
			}
			if ok {
				n++
				budget--
				res.ByQueue[r.Queue]++
			}
		}
		return n, nil
	}
	// 1. Older than max_age, queue by queue.
	cutoff := now.Add(-pol.MaxAge)
	for _, q := range queues {
		if budget == 0 {
			res.More = true
			break
		}
		refs, err := s.tb.oldest(ctx, q, cutoff, budget+1)
		if err != nil {
			return res, err
		}
		if len(refs) > budget {
			res.More = true
		}
		n, err := prune(refs)
		res.ByAge += n
		if err != nil {
			return res, err
		}
	}
	// 2. Beyond max_count over every queue: the oldest go first.
	if budget > 0 {
		total := 0
		counts := map[string]int{}
		for i, q := range queues {
			if i >= maxQueuesCountedInRun {
				break
			}
			c, err := s.tb.count(ctx, q)
			if err != nil {
				return res, err
			}
			counts[q] = c
			total += c
		}
		if excess := total - pol.MaxCount; excess > 0 {
			take := min(excess, budget)
			if excess > budget {
				res.More = true
			}
			var all []ref
			for _, q := range queues {
				if counts[q] == 0 {
					continue
				}
				refs, err := s.tb.oldest(ctx, q, time.Time{}, min(take, counts[q]))
				if err != nil {
					return res, err
				}
				all = append(all, refs...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i].SortKey < all[j].SortKey })
			if len(all) > take {
				all = all[:take]
			}
			n, err := prune(all)
			res.ByCount += n
			if err != nil {
				return res, err
			}
		}
	}
	res.Pruned = res.ByAge + res.ByCount
	var next *time.Time
	if res.More {
		next = &now // the next sweep carries on
		s.pruneAfter.Store(now.UnixMilli())
	}
	if err := s.tb.finishPruneRun(ctx, run, PruneRun{Pruned: res.Pruned, ByAge: res.ByAge, ByCount: res.ByCount, ByQueue: res.ByQueue}, s.now(), next); err != nil {
		return res, err
	}
	if res.Pruned > 0 {
		s.log.InfoContext(ctx, "dead letter jobs pruned", "pruned", res.Pruned, "by_age", res.ByAge, "by_count", res.ByCount, "more", res.More)
	}
	return res, nil
}

// retentionView reads when the next pruning run may start.
func (s *Service) retentionView(ctx context.Context) (RetentionView, error) {
	age := retry.FormatDuration(s.retention.MaxAge)
	if d := s.retention.MaxAge; d%(24*time.Hour) == 0 {
		age = "P" + strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "D" // as ojs-dead-letter.md writes it
	}
	v := RetentionView{MaxAge: age, MaxCount: s.retention.MaxCount}
	st, err := s.tb.pruneState(ctx)
	if err != nil {
		return v, err
	}
	at := s.now()
	if st != nil && st.NextAt > 0 {
		at = time.UnixMilli(st.NextAt).UTC()
	}
	ts := at.Format(time.RFC3339)
	v.NextPruneAt = &ts
	return v, nil
}
