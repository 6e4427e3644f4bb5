package cron_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	st  *store.Store
	clk *testenv.Clock
	svc *lifecycle.Service
	q   *queue.Service
	cr  *cron.Service
}

func setup(t *testing.T, start time.Time) *fixture {
	t.Helper()
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(start)
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc})
	return &fixture{st: st, clk: clk, svc: svc, q: qsvc, cr: &cron.Service{Store: cron.NewStore(st), Jobs: svc, Queues: qsvc}}
}

func (f *fixture) register(t *testing.T, body string) cron.View {
	t.Helper()
	v, _, err := f.cr.Register(context.Background(), []byte(body))
	if err != nil {
		t.Fatalf("register %s: %v", body, err)
	}
	return v
}

func (f *fixture) run(t *testing.T) cron.RunResult {
	t.Helper()
	r, err := f.cr.Run(context.Background())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return r
}

func (f *fixture) fetchAll(t *testing.T, q string) []*job.Job {
	t.Helper()
	var all []*job.Job
	for {
		js, err := f.svc.Fetch(context.Background(), lifecycle.FetchRequest{Queues: []string{q}, Count: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(js) == 0 {
			return all
		}
		all = append(all, js...)
	}
}

// firstRun registers a minutely schedule on queue q, fires its first
// occurrence and fetches the job (active: the overlap case), which it
// returns.
func (f *fixture) firstRun(t *testing.T, body, q string) *job.Job {
	t.Helper()
	f.register(t, body)
	f.clk.Add(time.Minute)
	f.run(t)
	js := f.fetchAll(t, q)
	if len(js) != 1 {
		t.Fatalf("%d first runs", len(js))
	}
	return js[0]
}

func TestRegisterListGetDelete(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Date(2026, 2, 12, 20, 15, 0, 0, time.UTC))
	ctx := context.Background()
	v, created, err := f.cr.Register(ctx, []byte(`{"name":"daily-report","cron":"0 9 * * *","timezone":"America/New_York",
		"type":"report.generate","args":[{"report":"daily_summary"}],"options":{"queue":"reports","timeout":300},
		"description":"Generate daily summary report at 9 AM ET","run_count":99,"next_run_at":"2000-01-01T00:00:00Z"}`))
	if err != nil || !created {
		t.Fatalf("register: %v created=%v", err, created)
	}
	if v.NextRunAt == nil || *v.NextRunAt != "2026-02-13T14:00:00Z" || v.RunCount != 0 || v.LastRunAt != nil || !v.Enabled ||
		v.OverlapPolicy != "skip" || v.Timezone != "America/New_York" || string(v.Type) != `"report.generate"` {
		t.Fatalf("view: %+v next=%v", v, v.NextRunAt)
	}
	// The conformance suite's shape, updating in place (upsert: 200).
	v2, created, err := f.cr.Register(ctx, []byte(`{"name":"daily-report","expression":"@hourly","job_template":{"type":"report.generate","args":[],"options":{"queue":"reports"}}}`))
	if err != nil || created || v2.Expression != "@hourly" || v2.CreatedAt != v.CreatedAt || *v2.NextRunAt != "2026-02-12T21:00:00Z" || v2.Timezone != "UTC" {
		t.Fatalf("upsert: %+v created=%v err=%v", v2, created, err)
	}
	f.register(t, `{"name":"other","cron":"*/5 * * * *","type":"a.b","enabled":false}`)
	all, _ := f.cr.List(ctx, nil)
	on := true
	enabled, _ := f.cr.List(ctx, &on)
	if len(all) != 2 || len(enabled) != 1 || enabled[0].Name != "daily-report" || all[1].NextRunAt != nil {
		t.Fatalf("list: %d all, %d enabled", len(all), len(enabled))
	}
	got, err := f.cr.SetEnabled(ctx, "other", []byte(`{"enabled":true}`))
	if err != nil || got.NextRunAt == nil || *got.NextRunAt != "2026-02-12T20:20:00Z" {
		t.Fatalf("enable: %+v %v", got, err)
	}
	got, _ = f.cr.SetEnabled(ctx, "other", []byte(`{"enabled":false}`))
	if got.NextRunAt != nil || got.Enabled {
		t.Fatalf("disable: %+v", got)
	}
	if _, err := f.cr.Delete(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	for _, op := range []func() error{
		func() error { _, err := f.cr.Delete(ctx, "other"); return err },
		func() error { _, err := f.cr.Get(ctx, "other"); return err },
		func() error { _, err := f.cr.SetEnabled(ctx, "other", []byte(`{"enabled":true}`)); return err },
	} {
		if err := op(); ojserr.As(err).Code != ojserr.NotFound {
			t.Fatalf("unknown schedule: %v", err)
		}
	}
}

func TestRegistrationRejectsBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Now())
	for _, body := range []string{
		``, `[]`, `{"cron":"* * * * *","type":"a.b"}`, `{"name":"Bad Name","cron":"* * * * *","type":"a.b"}`,
		`{"name":"x","type":"a.b"}`, `{"name":"x","cron":"not a valid cron","type":"a.b"}`,
		`{"name":"x","expression":"0 0 0 0 0 0 0","job_template":{"type":"a.b"}}`,
		`{"name":"x","expression":"99 25 32 13 8","job_template":{"type":"a.b"}}`,
		`{"name":"x","cron":"* * * * *","type":"a.b","timezone":"EST"}`,
		`{"name":"x","cron":"* * * * *","type":"a.b","timezone":"+05:00"}`,
		`{"name":"x","cron":"* * * * *","type":"a.b","overlap_policy":"sometimes"}`,
		`{"name":"x","cron":"* * * * *"}`, `{"name":"x","cron":"* * * * *","type":"Bad Type"}`,
		`{"name":"x","cron":"* * * * *","type":"a.b","args":{"not":"an array"}}`,
		`{"name":"x","cron":"* * * * *","type":"a.b","options":{"queue":"Bad Queue"}}`,
		`{"name":"x","cron":"* * * * *","job_template":{"type":"a.b","id":"019539a4-aaaa-7000-8000-111111111111"}}`,
		`{"name":"x","cron":"* * * * *","type":"a.b","job_template":{"type":"a.b"}}`,
		`{"name":"x","cron":"* * * * *","type":"a.b","cron_expression":"typo"}`,
		`{"name":"x","cron":"* * * * *","expression":"@daily","type":"a.b"}`,
		`{"name":7,"cron":"* * * * *","type":"a.b"}`,
	} {
		_, _, err := f.cr.Register(context.Background(), []byte(body))
		if oe := ojserr.As(err); err == nil || oe.Status() != 400 || oe.Message == "" {
			t.Errorf("register %s: got %v, want a 400", body, err)
		}
	}
	if all, _ := f.cr.List(context.Background(), nil); len(all) != 0 {
		t.Fatalf("rejected registrations left %d schedules", len(all))
	}
}

// TestFiresOncePerOccurrenceWithConcurrentSweepers runs four evaluators
// at once for every tick: each occurrence enqueues exactly one job.
func TestFiresOncePerOccurrenceWithConcurrentSweepers(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Date(2026, 2, 12, 14, 0, 30, 0, time.UTC))
	f.register(t, `{"name":"every-minute","expression":"* * * * *","overlap_policy":"allow","job_template":{"type":"tick.tock","args":[1],"options":{"queue":"cron-q"}}}`)
	if r := f.run(t); r.Fired != 0 {
		t.Fatalf("fired before the first occurrence: %+v", r)
	}
	for tick := 0; tick < 3; tick++ {
		f.clk.Add(time.Minute)
		var wg sync.WaitGroup
		var mu sync.Mutex
		fired := 0
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := f.cr.Run(context.Background())
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				fired += r.Fired
				mu.Unlock()
			}()
		}
		wg.Wait()
		if fired != 1 {
			t.Fatalf("tick %d: fired %d times", tick, fired)
		}
	}
	jobs := f.fetchAll(t, "cron-q")
	if len(jobs) != 3 {
		t.Fatalf("%d jobs enqueued, want 3", len(jobs))
	}
	var meta map[string]string
	_ = json.Unmarshal(jobs[0].Meta, &meta)
	if meta["cron_name"] != "every-minute" || meta["cron_triggered_at"] != "2026-02-12T14:01:00Z" || jobs[0].Type != "tick.tock" || string(jobs[0].Args) != "[1]" {
		t.Fatalf("first job: %s %s %s", jobs[0].Type, jobs[0].Args, jobs[0].Meta)
	}
	v, _ := f.cr.Get(context.Background(), "every-minute")
	if v.RunCount != 3 || *v.NextRunAt != "2026-02-12T14:04:00Z" || *v.LastJobID != jobs[2].ID {
		t.Fatalf("after three runs: %+v", v)
	}
}

// TestMissedOccurrencesFireOnce: after an outage one catch-up run fires
// and the schedule moves to the next future occurrence.
func TestMissedOccurrencesFireOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Date(2026, 2, 12, 14, 0, 0, 0, time.UTC))
	f.register(t, `{"name":"five","cron":"*/5 * * * *","type":"a.b","options":{"queue":"catch-up"}}`)
	f.clk.Add(47 * time.Minute)
	if r := f.run(t); r.Fired != 1 {
		t.Fatalf("catch-up: %+v", r)
	}
	// A pass says when the next schedule is due (the sweeper sleeps
	// until then when idle).
	if r := f.run(t); r.Fired != 0 || !r.Next.Equal(time.Date(2026, 2, 12, 14, 50, 0, 0, time.UTC)) {
		t.Fatalf("fired again, or the next run unknown: %+v", r)
	}
	v, _ := f.cr.Get(context.Background(), "five")
	if *v.NextRunAt != "2026-02-12T14:50:00Z" {
		t.Fatalf("next after catch-up = %s", *v.NextRunAt)
	}
}

func TestOverlapPolicies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t, time.Date(2026, 2, 12, 14, 0, 30, 0, time.UTC))
	for _, p := range []string{"skip", "allow", "cancel_previous", "enqueue"} {
		n := strings.ReplaceAll(p, "_", "-")
		f.register(t, `{"name":"p-`+n+`","cron":"* * * * *","overlap_policy":"`+p+`","type":"a.b","options":{"queue":"ov-`+n+`","visibility_timeout_ms":600000}}`)
	}
	f.clk.Add(time.Minute)
	if r := f.run(t); r.Fired != 4 {
		t.Fatalf("first tick: %+v", r)
	}
	first := map[string]*job.Job{}
	for _, p := range []string{"skip", "allow", "cancel_previous", "enqueue"} {
		js := f.fetchAll(t, "ov-"+strings.ReplaceAll(p, "_", "-")) // now active: the overlap case
		if len(js) != 1 {
			t.Fatalf("%s: %d jobs", p, len(js))
		}
		first[p] = js[0]
	}
	f.clk.Add(time.Minute)
	r := f.run(t)
	if r.Fired != 2 || r.Skipped != 1 || r.Held != 1 {
		t.Fatalf("second tick: %+v (want allow and cancel_previous fired, skip skipped, enqueue held)", r)
	}
	if js := f.fetchAll(t, "ov-skip"); len(js) != 0 {
		t.Fatal("skip enqueued while the previous run was active")
	}
	if js := f.fetchAll(t, "ov-allow"); len(js) != 1 {
		t.Fatal("allow did not enqueue")
	}
	if j, _ := f.svc.Info(ctx, first["cancel_previous"].ID); j.State != job.Cancelled {
		t.Fatalf("cancel_previous left the previous run %s", j.State)
	}
	if js := f.fetchAll(t, "ov-cancel-previous"); len(js) != 1 {
		t.Fatal("cancel_previous did not enqueue")
	}
	if js := f.fetchAll(t, "ov-enqueue"); len(js) != 0 {
		t.Fatal("enqueue ran the next occurrence while the previous was active")
	}
	// The held occurrence runs once the previous run finishes.
	if _, err := f.svc.Ack(ctx, first["enqueue"].ID, json.RawMessage(`null`), 0); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(2 * time.Second)
	if r := f.run(t); r.Fired != 1 {
		t.Fatalf("held occurrence: %+v", r)
	}
	if js := f.fetchAll(t, "ov-enqueue"); len(js) != 1 {
		t.Fatal("the held occurrence was not enqueued after the previous run finished")
	}
	v, _ := f.cr.Get(ctx, "p-skip")
	if v.SkipCount != 1 || v.RunCount != 1 {
		t.Fatalf("skip counters: %+v", v)
	}
	// A finished previous run no longer blocks skip.
	if _, err := f.svc.Ack(ctx, first["skip"].ID, nil, 0); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(time.Minute)
	f.run(t)
	if js := f.fetchAll(t, "ov-skip"); len(js) != 1 {
		t.Fatal("skip did not run after the previous run finished")
	}
}

func TestDeletedOrDisabledScheduleDoesNotFire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t, time.Date(2026, 2, 12, 14, 0, 30, 0, time.UTC))
	f.register(t, `{"name":"gone","cron":"* * * * *","type":"a.b","options":{"queue":"gone-q"}}`)
	f.register(t, `{"name":"off","cron":"* * * * *","type":"a.b","options":{"queue":"gone-q"}}`)
	if _, err := f.cr.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cr.SetEnabled(ctx, "off", []byte(`{"enabled":false}`)); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(3 * time.Minute)
	if r := f.run(t); r.Fired != 0 {
		t.Fatalf("fired: %+v", r)
	}
	if js := f.fetchAll(t, "gone-q"); len(js) != 0 {
		t.Fatal("a deleted or disabled schedule enqueued a job")
	}
	_, err := f.cr.Get(ctx, "gone")
	if !errors.Is(err, err) || ojserr.As(err).Code != ojserr.NotFound {
		t.Fatal(err)
	}
}

// An occurrence that is due but not yet fired survives the schedule being
// registered again unchanged or PATCHed enabled again: both used to set the
// next run after now, dropping it without a trace. Held occurrences of an
// enqueue schedule survive the same.
func TestUpdatingAScheduleKeepsItsDueOccurrenceAndHeldRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t, time.Date(2026, 2, 12, 14, 0, 30, 0, time.UTC))
	body := `{"name":"minutely","cron":"* * * * *","overlap_policy":"allow","type":"a.b","options":{"queue":"keep-q"}}`
	f.register(t, body)
	f.clk.Add(50 * time.Second) // 14:01:20: the 14:01 occurrence is due, no sweep yet
	if v := f.register(t, body); *v.NextRunAt != "2026-02-12T14:01:00Z" {
		t.Fatalf("re-registering moved the due occurrence to %s", *v.NextRunAt)
	}
	if r := f.run(t); r.Fired != 1 {
		t.Fatalf("after re-registering: %+v", r)
	}
	f.clk.Add(time.Minute) // 14:02:20
	if _, err := f.cr.SetEnabled(ctx, "minutely", []byte(`{"enabled":true}`)); err != nil {
		t.Fatal(err)
	}
	if r := f.run(t); r.Fired != 1 {
		t.Fatalf("after PATCH enabled:true: %+v", r)
	}
	if js := f.fetchAll(t, "keep-q"); len(js) != 2 {
		t.Fatalf("%d runs, want 2", len(js))
	}
	// A changed expression starts from its own first occurrence.
	if v := f.register(t, strings.Replace(body, "* * * * *", "*/5 * * * *", 1)); *v.NextRunAt != "2026-02-12T14:05:00Z" {
		t.Fatalf("new expression: next %s", *v.NextRunAt)
	}

	// enqueue: an occurrence held behind a running job is kept too.
	eq := `{"name":"queued","cron":"* * * * *","overlap_policy":"enqueue","type":"a.b","options":{"queue":"held-q","visibility_timeout_ms":600000}}`
	first := f.firstRun(t, eq, "held-q")
	f.clk.Add(time.Minute)
	if r := f.run(t); r.Held != 1 {
		t.Fatalf("not held: %+v", r)
	}
	f.register(t, eq)
	if _, err := f.cr.SetEnabled(ctx, "queued", []byte(`{"enabled":true}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Ack(ctx, first.ID, nil, 0); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(2 * time.Second)
	if r := f.run(t); r.Fired != 1 {
		t.Fatalf("the held occurrence was dropped by the updates: %+v", r)
	}
}

// racyStore runs hook (once) between an update's read of a schedule and
// its write.
type racyStore struct {
	cron.Table
	hook func()
}

func (r *racyStore) Put(ctx context.Context, c cron.Info, prev *cron.Info, times cron.Times, now time.Time) (*cron.Info, bool, error) {
	if h := r.hook; h != nil {
		r.hook = nil
		h()
	}
	return r.Table.Put(ctx, c, prev, times, now)
}

// A sweeper firing a schedule between an update's read and its write is
// not undone by the write: the update reads again, and the occurrence
// fires once.
func TestAnUpdateRacingAFireDoesNotFireTheOccurrenceAgain(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Date(2026, 2, 12, 14, 0, 30, 0, time.UTC))
	body := `{"name":"raced","cron":"* * * * *","type":"a.b","options":{"queue":"race-q"}}`
	f.register(t, body)
	f.clk.Add(50 * time.Second)
	racy := &racyStore{Table: cron.NewStore(f.st)}
	updater := &cron.Service{Store: racy, Jobs: f.svc, Queues: f.q}
	racy.hook = func() {
		if r := f.run(t); r.Fired != 1 {
			t.Errorf("sweeper: %+v", r)
		}
	}
	v, _, err := updater.Register(context.Background(), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if *v.NextRunAt != "2026-02-12T14:02:00Z" {
		t.Fatalf("next after the raced update: %s", *v.NextRunAt)
	}
	if r := f.run(t); r.Fired != 0 {
		t.Fatalf("the update brought back the fired occurrence: %+v", r)
	}
	if js := f.fetchAll(t, "race-q"); len(js) != 1 {
		t.Fatalf("%d runs of one occurrence", len(js))
	}
}

// failingCancel fails the first cancel it is asked for, as a sweeper
// dying or a throttled write would.
type failingCancel struct {
	*lifecycle.Service
	mu     sync.Mutex
	failed bool
}

func (f *failingCancel) Cancel(ctx context.Context, id string) (*job.Job, job.State, error) {
	f.mu.Lock()
	fail := !f.failed
	f.failed = true
	f.mu.Unlock()
	if fail {
		return nil, "", errors.New("injected: cancel failed")
	}
	return f.Service.Cancel(ctx, id)
}

// cancel_previous never leaves two runs going: the previous run is
// cancelled before the next is enqueued, and a cancel that fails leaves
// the occurrence due for the next pass instead of firing beside it.
func TestCancelPreviousNeverLeavesTwoRunsGoing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setup(t, time.Date(2026, 2, 12, 14, 0, 30, 0, time.UTC))
	f.cr.Jobs = &failingCancel{Service: f.svc}
	first := f.firstRun(t, `{"name":"latest","cron":"* * * * *","overlap_policy":"cancel_previous","type":"a.b","options":{"queue":"cp-q","visibility_timeout_ms":600000}}`, "cp-q")
	f.clk.Add(time.Minute)
	if r, err := f.cr.Run(ctx); err == nil || r.Fired != 0 {
		t.Fatalf("a pass whose cancel failed: %+v, %v (want an error and no fire)", r, err)
	}
	if js := f.fetchAll(t, "cp-q"); len(js) != 0 {
		t.Fatal("the next run was enqueued while the previous one still runs")
	}
	if r := f.run(t); r.Fired != 1 {
		t.Fatalf("next pass: %+v", r)
	}
	if j, _ := f.svc.Info(ctx, first.ID); j.State != job.Cancelled {
		t.Fatalf("previous run %s", j.State)
	}
	if js := f.fetchAll(t, "cp-q"); len(js) != 1 {
		t.Fatal("the occurrence did not fire after the cancel")
	}
}
