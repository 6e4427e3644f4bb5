package sweeper

import (
	"errors"
	"testing"
	"time"
)

// After a sweep that did something, or failed, the loop sweeps again a
// tick later; after an idle one it waits IdleTicks ticks, less when a cron
// schedule is due sooner (never less than a tick), and never past the
// invocation's end.
func TestNextWait(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tick, far := time.Second, now.Add(time.Hour)
	for _, c := range []struct {
		name  string
		r     Result
		err   error
		until time.Time
		want  time.Duration
	}{
		{"due jobs", Result{Resolved: 3}, nil, far, tick},
		{"a re-send", Result{Redelivered: 1}, nil, far, tick},
		{"a cron fired", Result{CronsFired: 1}, nil, far, tick},
		{"a failure", Result{}, errors.New("x"), far, tick},
		{"idle", Result{Queues: 4}, nil, far, IdleTicks * tick},
		{"idle, a cron in 3 s", Result{NextCron: now.Add(3 * time.Second)}, nil, far, 3 * time.Second},
		{"idle, a cron overdue", Result{NextCron: now.Add(-time.Second)}, nil, far, tick},
		{"idle, the invocation ends in 4 s", Result{}, nil, now.Add(4 * time.Second), 3 * time.Second},
	} {
		if got := nextWait(c.r, c.err, tick, now, c.until); got != c.want {
			t.Errorf("%s: waits %v, want %v", c.name, got, c.want)
		}
	}
}
