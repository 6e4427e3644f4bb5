package cron

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// RunResult counts what one pass did.
type RunResult struct {
	Fired   int `json:"fired"`
	Skipped int `json:"skipped"`
	Held    int `json:"held"`
	// Next is when the first schedule not due now is (zero: unknown).
	Next time.Time `json:"-"`
}

// dueBatch is how many due schedules one query reads; a pass reads up to
// maxRounds of them.
const (
	dueBatch  = 100
	maxRounds = 20
)

// Run fires every schedule that is due: it enqueues the occurrence's job
// and advances the schedule in one transaction conditional on the version
// it read, so a schedule fires once per occurrence however many sweepers
// run at once. An occurrence missed while nothing ran (for example a
// sweeper outage) is fired once, late; the ones before it are dropped
// (ojs-cron.md section 7.3).
func (s *Service) Run(ctx context.Context) (RunResult, error) {
	var res RunResult
	var errs []error
	for round := 0; round < maxRounds; round++ {
		names, next, err := s.Store.Due(ctx, s.Jobs.Now(), dueBatch)
		if err != nil {
			return res, err
		}
		res.Next = next
		failed := 0
		for _, name := range names {
			if err := s.evaluate(ctx, name, &res); err != nil {
				errs = append(errs, fmt.Errorf("cron %s: %w", name, err))
				failed++
			}
		}
		// A full page may hide more due schedules; one that failed stays
		// due, so stop rather than read it again.
		if len(names) < dueBatch || failed > 0 {
			break
		}
	}
	return res, errors.Join(errs...)
}

// evaluate looks at one schedule, retrying when it changed under us.
func (s *Service) evaluate(ctx context.Context, name string, res *RunResult) error {
	for attempt := 0; attempt < 5; attempt++ {
		err := s.step(ctx, name, res)
		if errors.Is(err, ErrChanged) || errors.Is(err, ErrPrevNotDone) {
			continue // re-read: someone else fired it, or the previous run restarted
		}
		return err
	}
	return nil
}

func (s *Service) step(ctx context.Context, name string, res *RunResult) error {
	c, err := s.Store.Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	now := s.Jobs.Now()
	if !c.Enabled || c.NextMS == 0 || c.DueMS > now.UnixMilli() {
		return nil // the index was stale
	}
	sched, loc, err := c.schedule()
	if err != nil {
		return err
	}
	occurrence := time.UnixMilli(c.NextMS).UTC()
	occurrenceDue := !occurrence.After(now)

	prevRunning := false
	if c.OverlapPolicy != OverlapAllow && c.LastJobID != "" {
		j, err := s.Store.Job(ctx, c.LastJobID)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		default:
			prevRunning = !j.State.Terminal()
		}
	}

	st := Step{Next: occurrence, Held: c.Held, RedeliverAfter: s.Jobs.RedeliverAfter()}
	fire, scheduled := false, occurrence
	if occurrenceDue {
		st.Next = advance(sched, loc, occurrence, now)
		switch c.OverlapPolicy {
		case OverlapAllow, OverlapCancelPrevious:
			fire = true
		case OverlapEnqueue:
			if prevRunning || st.Held > 0 {
				st.Held++
			} else {
				fire = true
			}
		default: // skip
			if prevRunning {
				st.Skipped = true
				st.Event = &Event{Type: "skipped", Reason: "overlap_skip", ActiveJobID: c.LastJobID,
					ScheduledTime: stamp(occurrence), ActualTime: job.Timestamp(now)}
			} else {
				fire = true
			}
		}
	}
	if !fire && c.OverlapPolicy == OverlapEnqueue && st.Held > 0 && !prevRunning {
		fire, scheduled = true, now
		st.Held--
	}
	if fire && c.OverlapPolicy == OverlapCancelPrevious && prevRunning {
		// The previous run is cancelled before the next is enqueued, never
		// after: a sweeper dying in between leaves the occurrence due, and
		// the next pass (finding the previous run finished) fires it.
		// Cancelled after the fire's commit, a crash or a failed cancel
		// would leave both running, and no later pass would look at the
		// older one again.
		if err := s.cancelPrevious(ctx, c); err != nil {
			return err
		}
	}
	if fire {
		j, err := s.occurrenceJob(c, scheduled, now)
		if err != nil {
			return err
		}
		if err := s.Queues.Admit(ctx, []*job.Job{j}); err != nil {
			return err
		}
		st.Job, st.Ran = j, true
		st.PrevMustBeDone = c.OverlapPolicy == OverlapSkip || c.OverlapPolicy == OverlapEnqueue
		st.Event = &Event{Type: "triggered", JobID: j.ID, ScheduledTime: stamp(scheduled), ActualTime: job.Timestamp(now)}
	}
	st.DueAt = st.Next
	if st.Held > 0 {
		if r := now.Add(cmp.Or(max(s.HeldRecheck, 0), time.Second)); r.Before(st.DueAt) {
			st.DueAt = r
		}
		if st.Held > 2 {
			s.log().WarnContext(ctx, "cron occurrences are piling up behind a running job", "cron_name", c.Name, "held", st.Held, "running_job_id", c.LastJobID)
		}
	}
	if err := s.Store.Step(ctx, c, st, now); err != nil {
		return err
	}
	switch {
	case fire:
		res.Fired++
		s.log().InfoContext(ctx, "cron fired", "cron_name", c.Name, "job_id", st.Job.ID, "scheduled_time", stamp(scheduled), "queue", st.Job.Queue)
	case st.Skipped:
		res.Skipped++
		s.log().InfoContext(ctx, "cron occurrence skipped: previous run not finished", "cron_name", c.Name, "active_job_id", c.LastJobID)
	case st.Held > c.Held:
		res.Held++
	}
	return nil
}

// cancelPrevious cancels the schedule's previous run. A run that finished
// or went away meanwhile is as good; any other failure leaves the
// occurrence due for the next pass.
func (s *Service) cancelPrevious(ctx context.Context, c *Info) error {
	_, _, err := s.Jobs.Cancel(ctx, c.LastJobID)
	if err == nil {
		s.log().InfoContext(ctx, "cron cancelled its previous run", "cron_name", c.Name, "job_id", c.LastJobID)
		return nil
	}
	j, gerr := s.Store.Job(ctx, c.LastJobID)
	if errors.Is(gerr, store.ErrNotFound) || (gerr == nil && j.State.Terminal()) {
		return nil
	}
	return fmt.Errorf("cancel previous run %s: %w", c.LastJobID, err)
}

// advance is the occurrence after one that fired at now: the first one
// after now, so missed occurrences collapse into the one that fired.
func advance(sched *Schedule, loc *time.Location, occurrence, now time.Time) time.Time {
	if every := sched.Every(); every > 0 {
		next := occurrence.Add(every)
		if !next.After(now) {
			next = now.Add(every)
		}
		return next.Truncate(time.Millisecond)
	}
	return firstRun(sched, loc, now)
}

// occurrenceJob builds the job one occurrence enqueues from the
// schedule's template, with the cron name and occurrence time in its meta
// (ojs-cron.md section 6.3).
func (s *Service) occurrenceJob(c *Info, scheduled, now time.Time) (*job.Job, error) {
	e, err := job.ParseEnqueue([]byte(c.Template), now)
	if err != nil {
		return nil, fmt.Errorf("stored job template: %w", err)
	}
	j := e.Job
	meta := map[string]json.RawMessage{}
	if len(j.Meta) > 0 {
		if err := json.Unmarshal(j.Meta, &meta); err != nil {
			return nil, fmt.Errorf("stored job template meta: %w", err)
		}
	}
	meta["cron_name"], _ = json.Marshal(c.Name)
	meta["cron_triggered_at"], _ = json.Marshal(stamp(scheduled))
	if j.Meta, err = json.Marshal(meta); err != nil {
		return nil, err
	}
	return j, nil
}

func stamp(t time.Time) string {
	if t.Nanosecond() == 0 {
		return t.UTC().Format(time.RFC3339)
	}
	return job.Timestamp(t)
}
