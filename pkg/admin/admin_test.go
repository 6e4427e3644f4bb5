package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// These tests run the admin service on DynamoDB Local. Events, which the
// stream function derives from job changes in the deployed system, are
// derived here by the same code (events.FromJob) and stored with
// PutEvents, so that searches and statistics read a real events index.

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	st    *store.Store
	log   *events.Store
	jobs  *lifecycle.Service
	dead  *deadletter.Service
	ad    *admin.Service
	clock *testenv.Clock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st, _ := testenv.Table(t)
	c := testenv.NewClock(time.Now().UTC().Truncate(time.Millisecond))
	log := events.NewStore(st.DB(), st.Table())
	qsvc := queue.NewService(st, queue.Config{Now: c.Now, Events: log})
	svc := lifecycle.New(st, lifecycle.Config{Now: c.Now, Rand: func() float64 { return 0.5 }, Queues: qsvc})
	dead := deadletter.New(st, svc, qsvc, deadletter.Config{})
	return &env{st: st, log: log, jobs: svc, dead: dead, ad: admin.New(st, qsvc.Store(), svc, qsvc, dead, admin.Config{Now: c.Now, Events: log}), clock: c}
}

func (e *env) push(t *testing.T, typ, queue string) *job.Job {
	t.Helper()
	j, err := e.jobs.Push(context.Background(), fmt.Appendf(nil, `{"type":%q,"args":[],"options":{"queue":%q,"retry":{"max_attempts":1}}}`, typ, queue))
	if err != nil {
		t.Fatal(err)
	}
	e.emit(t, nil, j)
	return j
}

// emit stores the events of one job change, as the stream function does.
func (e *env) emit(t *testing.T, old, cur *job.Job) {
	t.Helper()
	if err := e.log.PutEvents(context.Background(), events.FromJob("test", old, cur, int64(cur.Attempt+1), e.clock.Now()), time.Hour); err != nil {
		t.Fatal(err)
	}
}

// run fetches one job of queue and completes it (ok) or fails it.
func (e *env) run(t *testing.T, queue string, ok bool) *job.Job {
	t.Helper()
	ctx := context.Background()
	e.clock.Add(time.Millisecond)
	got, err := e.jobs.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{queue}, Count: 1, WorkerID: "w"})
	if err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	a := got[0]
	e.clock.Add(time.Millisecond)
	var done *job.Job
	if ok {
		done, err = e.jobs.Ack(ctx, a.ID, json.RawMessage(`{}`), 0)
	} else {
		done, err = e.jobs.Nack(ctx, a.ID, lifecycle.ErrorInput{Type: "Boom", Message: "boom"}, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.emit(t, a, done)
	return done
}

func ids(p *admin.JobPage) []string {
	var out []string
	for _, j := range p.Jobs() {
		out = append(out, j.ID)
	}
	return out
}

func TestQueuesCountsAndStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for range 3 {
		e.push(t, "a.job", "qa")
	}
	e.push(t, "b.job", "qb")
	e.run(t, "qa", true)
	e.run(t, "qa", false)
	l, err := e.ad.Queues(ctx, 1, 20, nil)
	if err != nil || len(l.Items) != 2 || *l.Pagination.Total != 2 {
		t.Fatalf("queues: %+v %v", l, err)
	}
	qa := l.Items[0]
	want := admin.Counts{Available: 1, Completed: 1, Discarded: 1}
	if qa.Name != "qa" || qa.Counts != want || qa.State != "active" || qa.Throughput.ProcessedPerMinute != 0.2 {
		t.Errorf("qa: %+v", qa)
	}
	st, err := e.ad.Stats(ctx)
	if err != nil || st.Queues != 2 || st.Jobs.Available != 2 || st.Jobs.Completed != 1 || st.Jobs.Discarded != 1 {
		t.Errorf("stats: %+v %v", st, err)
	}
	if _, err := e.ad.SetPaused(ctx, "qb", true); err != nil {
		t.Fatal(err)
	}
	q, err := e.ad.Queue(ctx, "qb", nil)
	if err != nil || !q.Paused || q.State != "paused" || q.OldestAvailableAt == nil || q.Configuration == nil {
		t.Errorf("qb: %+v %v", q, err)
	}
	if _, err := e.ad.Queue(ctx, "nope", nil); ojserr.As(err).Code != ojserr.NotFound {
		t.Errorf("unknown queue: %v", err)
	}
	// Two pages of one queue each.
	p1, _ := e.ad.Queues(ctx, 1, 1, nil)
	p2, _ := e.ad.Queues(ctx, 2, 1, nil)
	if len(p1.Items) != 1 || !p1.Pagination.HasMore || len(p2.Items) != 1 || p2.Items[0].Name != "qb" || p2.Pagination.HasMore {
		t.Errorf("pages: %+v %+v", p1, p2)
	}
}

func TestSearchByIndexPagesAcrossQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var want []string
	for i := range 5 {
		want = append(want, e.push(t, "x.job", "q1").ID)
		e.clock.Add(time.Millisecond)
		_ = i
	}
	for range 4 {
		want = append(want, e.push(t, "y.job", "q2").ID)
		e.clock.Add(time.Millisecond)
	}
	var got []string
	q := admin.JobQuery{State: job.Available, PerPage: 2}
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		p, err := e.ad.SearchJobs(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) > 2 || p.Source != "index" {
			t.Fatalf("page: %+v", p)
		}
		got = append(got, ids(p)...)
		if !p.Pagination.HasMore {
			break
		}
		q.Cursor = p.Pagination.NextCursor
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("every available job once, in fetch order per queue:\n got %v\nwant %v", got, want)
	}
	// Type prefix and queue filters.
	p, err := e.ad.SearchJobs(ctx, admin.JobQuery{State: job.Available, Type: "y.*", PerPage: 100})
	if err != nil || len(p.Items) != 4 {
		t.Errorf("type prefix: %d %v", len(p.Items), err)
	}
	if _, err := e.ad.SearchJobs(ctx, admin.JobQuery{State: job.Available, Cursor: "garbage"}); ojserr.As(err).Code != ojserr.InvalidRequest {
		t.Errorf("bad cursor: %v", err)
	}
	if _, err := e.ad.SearchJobs(ctx, admin.JobQuery{State: job.Pending}); ojserr.As(err).Status() != 400 {
		t.Errorf("pending: %v", err)
	}
}

func TestSearchByEventsListsEachJobOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	a := e.push(t, "ev.job", "qe")
	e.clock.Add(time.Millisecond)
	b := e.push(t, "ev.job", "qe")
	done := e.run(t, "qe", true)
	// The job is enqueued again (a dead letter retry emits job.enqueued
	// later): it must still be listed once, by its creation.
	failed := e.run(t, "qe", false)
	e.clock.Add(time.Millisecond)
	retried, err := e.dead.Retry(ctx, failed.ID, deadletter.RetryOverride{})
	if err != nil {
		t.Fatal(err)
	}
	e.emit(t, failed, retried)
	all, err := e.ad.SearchJobs(ctx, admin.JobQuery{Queue: "qe", PerPage: 100})
	if err != nil || all.Source != "events" || fmt.Sprint(ids(all)) != fmt.Sprint([]string{a.ID, b.ID}) {
		t.Errorf("all jobs created in the window: %v %v", ids(all), err)
	}
	c, err := e.ad.SearchJobs(ctx, admin.JobQuery{State: job.Completed, PerPage: 100})
	if err != nil || fmt.Sprint(ids(c)) != fmt.Sprint([]string{done.ID}) {
		t.Errorf("completed: %v %v", ids(c), err)
	}
	// Paging by one.
	p1, _ := e.ad.SearchJobs(ctx, admin.JobQuery{Queue: "qe", PerPage: 1})
	if len(p1.Items) != 1 || !p1.Pagination.HasMore {
		t.Fatalf("page 1: %+v", p1.Pagination)
	}
	p2, _ := e.ad.SearchJobs(ctx, admin.JobQuery{Queue: "qe", PerPage: 1, Cursor: p1.Pagination.NextCursor})
	if fmt.Sprint(append(ids(p1), ids(p2)...)) != fmt.Sprint([]string{a.ID, b.ID}) {
		t.Errorf("pages: %v %v", ids(p1), ids(p2))
	}
	// History: two enqueues, a completion, a failed attempt in the window.
	h, err := e.ad.History(ctx, admin.HistoryQuery{Period: time.Hour, PeriodName: "1h", Since: e.clock.Now().Add(-time.Hour), Until: e.clock.Now().Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var enq, proc, fail int
	for _, bk := range h.Data {
		enq, proc, fail = enq+bk.Enqueued, proc+bk.Processed, fail+bk.Failed
	}
	if enq != 3 || proc != 1 || fail != 1 {
		t.Errorf("history: enqueued %d processed %d failed %d: %+v", enq, proc, fail, h.Data)
	}
}

func TestBulkNeedsConfirmAndActs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.push(t, "k", "qk")
	e.push(t, "k", "qk")
	e.run(t, "qk", false)
	for _, body := range []string{`{"filter":{"state":"discarded"}}`, `{"filter":{"state":"discarded"},"confirm":false}`} {
		if _, err := e.ad.Bulk(ctx, admin.BulkRetry, []byte(body)); ojserr.As(err).Status() != 400 {
			t.Errorf("%s: %v", body, err)
		}
	}
	if _, err := e.ad.Bulk(ctx, admin.BulkRetry, []byte(`{"filter":{"state":"completed"},"confirm":true}`)); ojserr.As(err).Status() != 400 {
		t.Errorf("retry of completed jobs accepted: %v", err)
	}
	r, err := e.ad.Bulk(ctx, admin.BulkRetry, []byte(`{"filter":{"queue":"qk"},"confirm":true}`))
	if err != nil || r.Matched != 1 || r.Succeeded != 1 {
		t.Fatalf("retry: %+v %v", r, err)
	}
	r, err = e.ad.Bulk(ctx, admin.BulkCancel, []byte(`{"filter":{"queue":"qk","state":"available"},"confirm":true}`))
	if err != nil || r.Matched != 2 || r.Succeeded != 2 {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	left, _ := e.ad.SearchJobs(ctx, admin.JobQuery{Queue: "qk", State: job.Available})
	if len(left.Items) != 0 {
		t.Errorf("available after bulk cancel: %v", ids(left))
	}
	// Purge of a queue: confirm required; finished jobs go.
	if _, err := e.ad.Purge(ctx, "qk", []byte(`{"states":["cancelled"]}`)); ojserr.As(err).Status() != 400 {
		t.Errorf("purge without confirm: %v", err)
	}
}

func TestPurgeAndDeleteFinished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.push(t, "p", "qp")
	e.push(t, "p", "qp")
	done := e.run(t, "qp", true)
	e.clock.Add(time.Millisecond)
	res, err := e.ad.Purge(ctx, "qp", []byte(`{"states":["completed","available"],"confirm":true}`))
	if err != nil || res.PurgedCount != 2 || res.Matched != 2 || len(res.Failed) != 0 {
		t.Fatalf("purge: %+v %v", res, err)
	}
	if _, err := e.st.Get(ctx, done.ID); err != store.ErrNotFound {
		t.Errorf("purged job still there: %v", err)
	}
	if _, err := e.ad.Purge(ctx, "qp", []byte(`{"states":["active"],"confirm":true}`)); ojserr.As(err).Status() != 400 {
		t.Errorf("purge of active jobs: %v", err)
	}
}

func TestWorkersStaleAndDeregister(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	id := testenv.Name(t, "w")
	if _, err := e.jobs.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: id, Queues: []string{"qw"}}); err != nil {
		t.Fatal(err)
	}
	w, err := e.ad.Worker(ctx, id)
	if err != nil || w.Stale || w.State != "running" {
		t.Fatalf("worker: %+v %v", w, err)
	}
	if err := e.ad.Deregister(ctx, id); ojserr.As(err).Status() != 409 {
		t.Fatalf("deregister of a live worker: %v", err)
	}
	e.clock.Add(admin.DefaultStaleAfter + time.Second)
	l, err := e.ad.Workers(ctx, 1, 20)
	if err != nil || l.Summary.Stale < 1 {
		t.Fatalf("workers: %+v %v", l, err)
	}
	if err := e.ad.Deregister(ctx, id); err != nil {
		t.Fatalf("deregister: %v", err)
	}
	if _, err := e.ad.Worker(ctx, id); ojserr.As(err).Code != ojserr.NotFound {
		t.Errorf("after deregister: %v", err)
	}
}

func TestParseJobQuery(t *testing.T) {
	t.Parallel()
	for q, ok := range map[string]bool{"state=available&queue=a&per_page=5": true, "state=nope": false, "per_page=0": false, "per_page=101": false,
		"since=yesterday": false, "page=2": false, "bogus=1": false, "type=email.*&since=2026-01-01T00:00:00Z": true, "queue=BAD QUEUE": false} {
		v, _ := url.ParseQuery(q)
		if _, err := admin.ParseJobQuery(v); (err == nil) != ok {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// A push-mode queue's available jobs are in the due index only (SQS holds
// their place in line): the Admin API still counts, lists, searches and
// purges them, with each pull-mode job of the same call once.
func TestAPushModeQueuesAvailableJobsAreCountedListedAndPurged(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	c := testenv.NewClock(time.Now().UTC().Truncate(time.Millisecond))
	log := events.NewStore(st.DB(), st.Table())
	qsvc := queue.NewService(st, queue.Config{Now: c.Now, PushQueues: []string{"lambda"}, Events: log})
	svc := lifecycle.New(st, lifecycle.Config{Now: c.Now, Queues: qsvc})
	dead := deadletter.New(st, svc, qsvc, deadletter.Config{})
	e := &env{st: st, log: log, jobs: svc, dead: dead, ad: admin.New(st, qsvc.Store(), svc, qsvc, dead, admin.Config{Now: c.Now, Events: log}), clock: c}
	ctx := context.Background()
	var want []string
	for range 3 {
		want = append(want, e.push(t, "p.job", "lambda").ID)
		c.Add(time.Millisecond)
	}
	e.push(t, "q.job", "pullq")
	isPush := func(q string) bool { return q == "lambda" }
	l, err := e.ad.Queues(ctx, 1, 20, isPush)
	if err != nil || len(l.Items) != 2 {
		t.Fatalf("queues: %+v %v", l, err)
	}
	for _, q := range l.Items {
		if n := map[string]int{"lambda": 3, "pullq": 1}[q.Name]; q.Counts.Available != n {
			t.Errorf("%s: %d available, want %d", q.Name, q.Counts.Available, n)
		}
	}
	q, err := e.ad.Queue(ctx, "lambda", isPush)
	if err != nil || q.Mode != "push" || q.OldestAvailableAt == nil {
		t.Errorf("lambda: %+v %v", q, err)
	}
	p, err := e.ad.SearchJobs(ctx, admin.JobQuery{Queue: "lambda", State: job.Available, PerPage: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := ids(p)
	for p.Pagination.HasMore {
		if p, err = e.ad.SearchJobs(ctx, admin.JobQuery{Queue: "lambda", State: job.Available, PerPage: 2, Cursor: p.Pagination.NextCursor}); err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(p)...)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("search of available push-mode jobs: %v, want %v", got, want)
	}
	res, err := e.ad.Purge(ctx, "lambda", []byte(`{"states":["available"],"confirm":true}`))
	if err != nil || res.PurgedCount != 3 {
		t.Fatalf("purge: %+v %v", res, err)
	}
	if c, err := st.CountQueue(ctx, "lambda"); err != nil || c.Available != 0 {
		t.Fatalf("after the purge: %+v %v", c, err)
	}
}

// PUT /admin/queues/{name}/config sets, shows and removes a backpressure
// bound, and refuses what this backend does not serve by name.
func TestQueueConfigBackpressure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.push(t, "cfg.job", "cfgq")
	q, err := e.ad.SetConfig(ctx, "cfgq", []byte(`{"backpressure":{"max_depth":5,"warning_threshold":0.6}}`))
	if err != nil {
		t.Fatal(err)
	}
	if b := q.Configuration.Backpressure; b == nil || b.MaxDepth != 5 || b.Warning != 0.6 || b.Strategy != queue.StrategyReject || q.Bound == nil {
		t.Fatalf("configured %+v (bound %+v)", q.Configuration, q.Bound)
	}
	for body, status := range map[string]int{
		`{"backpressure":{"max_depth":5,"strategy":"block"}}`:        422,
		`{"backpressure":{"max_depth":5,"strategy":"drop_oldest"}}`:  422,
		`{"backpressure":{"max_depth":5,"max_size_bytes":1000}}`:     422,
		`{"backpressure":{"max_depth":-1}}`:                          400,
		`{"backpressure":{"strategy":"reject"}}`:                     400,
		`{"backpressure":{"max_depth":5,"warning_threshold":1.5}}`:   400,
		`{"backpressure":"full"}`:                                    400,
		`{"backpressure":{"max_depth":5},"concurrency":{"limit":1}}`: 422,
		`{}`: 400,
	} {
		if _, err := e.ad.SetConfig(ctx, "cfgq", []byte(body)); ojserr.As(err).Status() != status {
			t.Errorf("%s: %v, want %d", body, err, status)
		}
	}
	if q, err := e.ad.SetConfig(ctx, "cfgq", []byte(`{"backpressure":null}`)); err != nil || q.Configuration.Backpressure != nil {
		t.Fatalf("removed: %+v %v", q, err)
	}
}

// Pools are created (then replaced), read, listed and deleted; the
// scheduling statistics count each queue's job starts of the last minute
// against its pool's weights.
func TestPoolsAndSchedulingStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	body := []byte(`{"strategy":"weighted","queues":["pa","pb"],"weights":{"pa":3,"pb":1}}`)
	if p, created, err := e.ad.Pools().Put(ctx, "workers", body); err != nil || !created || p.Strategy != queue.StrategyWeighted {
		t.Fatalf("create: %+v %v %v", p, created, err)
	}
	if _, created, err := e.ad.Pools().Put(ctx, "workers", body); err != nil || created {
		t.Fatalf("replace: created %v, %v", created, err)
	}
	if list, err := e.ad.Pools().List(ctx); err != nil || len(list) != 1 || list[0].Weights["pa"] != 3 {
		t.Fatalf("list: %+v %v", list, err)
	}
	for range 3 {
		j := e.push(t, "p.job", "pa")
		claimed, err := e.jobs.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"pa"}, WorkerID: "w"})
		if err != nil || len(claimed) != 1 {
			t.Fatal(claimed, err)
		}
		e.emit(t, j, claimed[0])
	}
	st, err := e.ad.Pools().Stats(ctx)
	if err != nil || len(st.Pools) != 1 || len(st.Pools[0].Queues) != 2 {
		t.Fatalf("stats %+v %v", st, err)
	}
	if a := st.Pools[0].Queues[0]; a.Name != "pa" || a.Count != 3 || a.Ratio != 1 || a.Target == nil || *a.Target != 0.75 {
		t.Errorf("pool queue pa: %+v", a)
	}
	if err := e.ad.Pools().Delete(ctx, "workers"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ad.Pools().Get(ctx, "workers"); ojserr.As(err).Status() != 404 {
		t.Fatalf("a deleted pool: %v", err)
	}
	if err := e.ad.Pools().Delete(ctx, "workers"); ojserr.As(err).Status() != 404 {
		t.Fatalf("deleting it again: %v", err)
	}
}
