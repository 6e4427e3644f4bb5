package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/internal/testenv"
)

func ev(typ, subject, queue string, at time.Time, seq int64) events.Event {
	return events.New("ojs://test/engine", typ, subject, at, seq, map[string]any{"job_type": "t." + queue, "queue": queue, "job_id": subject}, "k")
}

func ids(evs []events.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func TestEventLogQueriesInTimeOrderAcrossShardsAndDays(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var all []events.Event
	// 60 jobs over three days (so several index days and every shard), each
	// with enqueued then completed; queues alternate a/b.
	for i := range 60 {
		at := now.Add(-50 * time.Hour).Add(time.Duration(i) * 50 * time.Minute)
		q := []string{"a", "b"}[i%2]
		subj := fmt.Sprintf("job-%02d", i)
		all = append(all, ev(events.JobEnqueued, subj, q, at, 0), ev(events.JobCompleted, subj, q, at.Add(time.Second), 1))
	}
	if err := s.PutEvents(ctx, all, time.Hour); err != nil {
		t.Fatal(err)
	}
	// Writing the same events again (a duplicated stream record) changes nothing.
	if err := s.PutEvents(ctx, append(all[:10:10], all[:10]...), time.Hour); err != nil {
		t.Fatal(err)
	}

	// Page through everything since the start, 7 at a time.
	var got []events.Event
	f := events.Filter{Since: now.Add(-72 * time.Hour), Limit: 7}
	for pages := 0; ; pages++ {
		if pages > 30 {
			t.Fatal("pagination does not end")
		}
		p, err := s.QueryEvents(ctx, f, now)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Events...)
		if !p.HasMore {
			break
		}
		if len(p.Events) != 7 || p.Cursor != p.Events[6].ID {
			t.Fatalf("page of %d with cursor %s", len(p.Events), p.Cursor)
		}
		f.After = p.Cursor
	}
	if len(got) != len(all) {
		t.Fatalf("paged %d events, stored %d", len(got), len(all))
	}
	for i := range got {
		if got[i].ID != all[i].ID {
			t.Fatalf("event %d is %s (%s), want %s (%s)", i, got[i].ID, got[i].Time, all[i].ID, all[i].Time)
		}
	}

	// Filters: type, queue, job type, one job, a time window, the default
	// window (last 24 hours).
	check := func(name string, f events.Filter, want func(e events.Event) bool) {
		t.Helper()
		f.Limit = 1000
		p, err := s.QueryEvents(ctx, f, now)
		if err != nil {
			t.Fatal(err)
		}
		var exp []string
		for _, e := range all {
			if want(e) {
				exp = append(exp, e.ID)
			}
		}
		if fmt.Sprint(ids(p.Events)) != fmt.Sprint(exp) {
			t.Errorf("%s: got %d events, want %d", name, len(p.Events), len(exp))
		}
	}
	since := now.Add(-72 * time.Hour)
	check("type", events.Filter{Since: since, Types: []string{events.JobCompleted}}, func(e events.Event) bool { return e.Type == events.JobCompleted })
	check("prefix", events.Filter{Since: since, Types: []string{"job.*"}}, func(e events.Event) bool { return true })
	check("queue", events.Filter{Since: since, Queues: []string{"b"}}, func(e events.Event) bool { return e.Queue() == "b" })
	check("job type and type", events.Filter{Since: since, JobTypes: []string{"t.a"}, Types: []string{events.JobEnqueued}},
		func(e events.Event) bool { return e.JobType() == "t.a" && e.Type == events.JobEnqueued })
	check("one job", events.Filter{SubjectCategory: "job", SubjectID: "job-07"}, func(e events.Event) bool { return e.Subject == "job-07" })
	from, until := now.Add(-30*time.Hour), now.Add(-20*time.Hour)
	check("window", events.Filter{Since: from, Until: until}, func(e events.Event) bool { return !e.At().Before(from) && e.At().Before(until) })
	check("default window", events.Filter{}, func(e events.Event) bool { return e.At().After(now.Add(-24 * time.Hour)) })
}
