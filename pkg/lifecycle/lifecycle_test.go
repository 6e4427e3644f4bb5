package lifecycle_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newService(t *testing.T) (*lifecycle.Service, *clock) {
	t.Helper()
	return newServiceDrawing(t, 0.5)
}

// newServiceDrawing is newService whose random draws all return draw.
func newServiceDrawing(t *testing.T, draw float64) (*lifecycle.Service, *clock) {
	t.Helper()
	s, _, c := newServicesDrawing(t, draw)
	return s, c
}

// newServices is newService with its queue service.
func newServices(t *testing.T) (*lifecycle.Service, *queue.Service, *clock) {
	t.Helper()
	return newServicesDrawing(t, 0.5)
}

// newServicesDrawing is newServices whose random draws all return draw:
// the queue service has one push-mode queue ("lambda").
func newServicesDrawing(t *testing.T, draw float64) (*lifecycle.Service, *queue.Service, *clock) {
	t.Helper()
	st, _ := testenv.Table(t)
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	q := queue.NewService(st, queue.Config{Now: c.Now, PushQueues: []string{"lambda"}})
	return lifecycle.New(st, lifecycle.Config{Now: c.Now, Rand: func() float64 { return draw }, Queues: q}), q, c
}

func code(err error) ojserr.Code { return ojserr.As(err).Code }

func TestPullLifecycleFetchAck(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"test.echo","args":["hello"],"options":{"queue":"pull-q"}}`))
	if err != nil || j.State != job.Available || j.Push {
		t.Fatalf("push: %+v %v", j, err)
	}
	if _, err := s.Ack(ctx, j.ID, nil, 0); code(err) != ojserr.Conflict || ojserr.As(err).Status() != 409 {
		t.Fatalf("ack of available job: %v", err)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"empty-q", "pull-q"}, Count: 5, WorkerID: "w1"})
	if err != nil || len(got) != 1 || got[0].ID != j.ID || got[0].Attempt != 1 || got[0].State != job.Active || got[0].StartedAt == nil {
		t.Fatalf("fetch: %+v %v", got, err)
	}
	again, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"pull-q"}})
	if len(again) != 0 {
		t.Fatalf("an active job was fetched twice")
	}
	done, err := s.Ack(ctx, j.ID, json.RawMessage(`["hello"]`), 0)
	if err != nil || done.State != job.Completed || string(done.Result) != `["hello"]` {
		t.Fatalf("ack: %+v %v", done, err)
	}
	if _, _, err := s.Cancel(ctx, j.ID); ojserr.As(err).Status() != 409 {
		t.Fatalf("cancel of completed job: %v", err)
	}
	if _, err := s.Info(ctx, "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"); code(err) != ojserr.NotFound {
		t.Fatalf("info of unknown job: %v", err)
	}
}

func TestNackRetriesWithBackoffThenDiscards(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	q := queue.NewService(st, queue.Config{Now: c.Now, PushQueues: []string{"lambda"}})
	s := lifecycle.New(st, lifecycle.Config{Now: c.Now, Rand: func() float64 { return 0.5 }, Queues: q})
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"test.fail_always","args":[],"options":{"queue":"retry-q",
		"retry":{"max_attempts":3,"initial_interval":"PT1S","backoff_coefficient":2,"jitter":false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	fail := lifecycle.ErrorInput{Code: "handler_error", Message: "boom"}
	wantDelays := []time.Duration{time.Second, 2 * time.Second}
	for attempt := 1; attempt <= 3; attempt++ {
		got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"retry-q"}})
		if err != nil || len(got) != 1 || got[0].Attempt != attempt {
			t.Fatalf("attempt %d fetch: %+v %v", attempt, got, err)
		}
		after, err := s.Nack(ctx, j.ID, fail, 0)
		if err != nil {
			t.Fatal(err)
		}
		if attempt < 3 {
			if after.State != job.Retryable || after.NextAttemptAt == nil || after.NextAttemptAt.Sub(c.Now()) != wantDelays[attempt-1] {
				t.Fatalf("attempt %d: %+v", attempt, after)
			}
			// Not yet due: nothing to fetch.
			if early, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"retry-q"}}); len(early) != 0 {
				t.Fatalf("retry fetched before its backoff elapsed")
			}
			c.Add(wantDelays[attempt-1])
		} else if after.State != job.Discarded || after.CompletedAt == nil || len(after.Errors) != 3 || after.Error.Type != "handler_error" {
			t.Fatalf("final: %+v", after)
		}
	}
	dead, _, err := deadletter.New(st, s, q, deadletter.Config{}).List(ctx, "retry-q", 10)
	if err != nil || len(dead) != 1 || dead[0].ID != j.ID {
		t.Fatalf("dead letter: %+v %v", dead, err)
	}
}

func TestNonRetryableAndHandlerCodes(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	for name, in := range map[string]lifecycle.ErrorInput{
		"matching type":   {Type: "auth.expired", Message: "x"},
		"error_class":     {Code: "handler_error", Details: json.RawMessage(`{"error_class":"auth.denied"}`)},
		"retryable false": {Code: "handler_error", Retryable: new(bool)},
		"DISCARD":         {Code: "DISCARD"},
	} {
		j, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"nr","retry":{"max_attempts":5,"non_retryable_errors":["auth.*"]}}}`))
		if got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"nr"}}); len(got) != 1 || got[0].ID != j.ID {
			t.Fatalf("%s: fetch", name)
		}
		after, err := s.Nack(ctx, j.ID, in, 0)
		if err != nil || after.State != job.Discarded || after.Attempt != 1 {
			t.Fatalf("%s: %+v %v", name, after, err)
		}
	}
}

func TestLeaseExpiryRequeuesAndHeartbeatExtends(t *testing.T) {
	t.Parallel()
	s, c := newService(t)
	ctx := context.Background()
	j, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"vis","visibility_timeout_ms":3000}}`))
	got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"vis"}, WorkerID: "w1"})
	if len(got) != 1 {
		t.Fatal("fetch")
	}
	c.Add(2 * time.Second)
	hb, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w1", JobIDs: []string{j.ID}})
	if err != nil || len(hb.Extended) != 1 || hb.State != "running" {
		t.Fatalf("heartbeat: %v %v", hb, err)
	}
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "someone-else", JobIDs: []string{j.ID}}); len(hb.Extended) != 0 {
		t.Fatal("another worker extended the lease")
	}
	c.Add(2 * time.Second) // 4 s after fetch, 2 s after the heartbeat: still leased
	if again, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"vis"}}); len(again) != 0 {
		t.Fatal("job requeued while its lease was extended")
	}
	c.Add(30 * time.Second)
	again, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"vis"}, WorkerID: "w2"})
	if err != nil || len(again) != 1 || again[0].Attempt != 2 || again[0].Error == nil || again[0].Error.Type != "visibility_timeout" {
		t.Fatalf("requeue after lease expiry: %+v %v", again, err)
	}
	if _, err := s.Ack(ctx, j.ID, nil, 0); err != nil {
		t.Fatal(err)
	}
}

func TestExecutionTimeoutBoundsHeartbeats(t *testing.T) {
	t.Parallel()
	s, c := newService(t)
	ctx := context.Background()
	j, _ := s.Push(ctx, []byte(`{"type":"test.slow","args":[],"options":{"queue":"tmo","timeout_ms":2000,"retry":{"max_attempts":2}}}`))
	_, _ = s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"tmo"}, WorkerID: "w"})
	c.Add(time.Second)
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w", JobIDs: []string{j.ID}, Visibility: time.Minute}); len(hb.Extended) != 1 {
		t.Fatal("heartbeat within the deadline must succeed")
	}
	c.Add(1500 * time.Millisecond)
	if _, _, _, err := s.ResolveDue(ctx, "tmo", 10, false); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Info(ctx, j.ID)
	if got.State != job.Available || got.Error == nil || got.Error.Type != "timeout" {
		t.Fatalf("after the execution timeout: %+v", got)
	}
}

func TestScheduledAndPendingAndCancel(t *testing.T) {
	t.Parallel()
	s, c := newService(t)
	ctx := context.Background()
	sch, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"sch","scheduled_at":"+PT5S"}}`))
	if sch.State != job.Scheduled {
		t.Fatal(sch.State)
	}
	if got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"sch"}}); len(got) != 0 {
		t.Fatal("scheduled job fetched early")
	}
	c.Add(5 * time.Second)
	if got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"sch"}}); len(got) != 1 || got[0].ID != sch.ID {
		t.Fatal("scheduled job not promoted when due")
	}
	p, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"sch","pending":true}}`))
	if p.State != job.Pending {
		t.Fatal(p.State)
	}
	if _, err := s.Activate(ctx, sch.ID); ojserr.As(err).Status() != 409 {
		t.Fatalf("activate of active job: %v", err)
	}
	a, err := s.Activate(ctx, p.ID)
	if err != nil || a.State != job.Available {
		t.Fatalf("activate: %+v %v", a, err)
	}
	cj, prev, err := s.Cancel(ctx, p.ID)
	if err != nil || cj.State != job.Cancelled || prev != job.Available || cj.CompletedAt != nil {
		t.Fatalf("cancel: %+v %s %v", cj, prev, err)
	}
	if _, _, err := s.Cancel(ctx, p.ID); ojserr.As(err).Status() != 409 {
		t.Fatalf("second cancel: %v", err)
	}
}

func TestBatchPushIsAllOrNothing(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	_, err := s.PushBatch(ctx, [][]byte{[]byte(`{"type":"a.b","args":[],"options":{"queue":"batch"}}`), []byte(`{"args":[]}`)})
	if e := ojserr.As(err); e.Code != ojserr.InvalidRequest || e.Details["index"] != 1 {
		t.Fatalf("batch validation: %+v", err)
	}
	if got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"batch"}}); len(got) != 0 {
		t.Fatal("a rejected batch enqueued a job")
	}
	jobs, err := s.PushBatch(ctx, [][]byte{[]byte(`{"type":"a.b","args":[1],"options":{"queue":"batch"}}`), []byte(`{"type":"a.b","args":[2],"options":{"queue":"batch"}}`)})
	if err != nil || len(jobs) != 2 {
		t.Fatal(err)
	}
	got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"batch"}, Count: 10})
	if len(got) != 2 {
		t.Fatalf("fetched %d", len(got))
	}
}

// Directives: an operator's quiet reaches the worker on its next
// heartbeat, terminate wins over quiet, and a worker is never told to go
// back to running.
func TestHeartbeatDirectives(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	id := "w-" + t.Name()
	if hb, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: id}); err != nil || hb.State != "running" {
		t.Fatalf("first beat: %+v %v", hb, err)
	}
	if _, err := s.SetWorkerDirective(ctx, id, "quiet"); err != nil {
		t.Fatal(err)
	}
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: id}); hb.State != "quiet" {
		t.Fatalf("after quiet: %+v", hb)
	}
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: id, State: "terminate"}); hb.State != "terminate" {
		t.Fatalf("a terminating worker told %q", hb.State)
	}
	if _, err := s.SetWorkerDirective(ctx, id, "terminate"); err != nil {
		t.Fatal(err)
	}
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: id}); hb.State != "terminate" {
		t.Fatalf("after terminate: %+v", hb)
	}
	ws, err := s.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range ws {
		found = found || (w.ID == id && w.Directive == "terminate" && w.LastHeartbeatAt != "")
	}
	if !found {
		t.Fatalf("worker %s not listed: %+v", id, ws)
	}
	// The conformance hook: an active job's meta.test_directive.
	j, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"meta":{"test_directive":"quiet"},"options":{"queue":"directive"}}`))
	if got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"directive"}, WorkerID: "w-meta"}); len(got) != 1 {
		t.Fatal("fetch")
	}
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w-meta", JobIDs: []string{j.ID}}); hb.State != "quiet" {
		t.Fatalf("test_directive: %+v", hb)
	}
	for _, bad := range []lifecycle.HeartbeatRequest{{}, {WorkerID: "w", State: "sleeping"}, {WorkerID: "w", JobIDs: []string{"nope"}}} {
		if _, err := s.Heartbeat(ctx, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := s.SetWorkerDirective(ctx, id, "running"); err == nil {
		t.Error("directive running accepted")
	}
}

// A lease is a condition of every write of the attempt it belongs to:
// once it ended, a heartbeat, ACK or FAIL of that attempt is refused
// (409), even before a sweep or a FETCH requeued the job. Leases default
// to 1800 s; a heartbeat renews the claim's own length, and the
// envelope's visibility_timeout (seconds) sets it.
func TestLeaseEndRefusesTheAttempt(t *testing.T) {
	t.Parallel()
	s, c := newService(t)
	ctx := context.Background()
	j, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"lease","visibility_timeout_ms":3000}}`))
	got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"lease"}, WorkerID: "w1"})
	if len(got) != 1 || !got[0].LeaseUntil.Equal(c.Now().Add(3*time.Second)) {
		t.Fatalf("fetch: %+v", got)
	}
	c.Add(2 * time.Second)
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w1", JobIDs: []string{j.ID}}); len(hb.Extended) != 1 {
		t.Fatal("heartbeat within the lease")
	}
	if cur, _ := s.Info(ctx, j.ID); !cur.LeaseUntil.Equal(c.Now().Add(3 * time.Second)) {
		t.Fatalf("a heartbeat renews the claim's own lease length (3 s): lease until %v at %v", cur.LeaseUntil, c.Now())
	}
	c.Add(3*time.Second + time.Millisecond) // the lease ended; nothing requeued the job yet
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w1", JobIDs: []string{j.ID}}); len(hb.Extended) != 0 {
		t.Fatal("a heartbeat after the lease's end revived it")
	}
	if _, err := s.AckOwned(ctx, j.ID, "w1", 0, []byte(`1`)); code(err) != ojserr.Conflict {
		t.Fatalf("ack after the lease's end: %v", err)
	}
	if _, err := s.Ack(ctx, j.ID, []byte(`1`), 0); code(err) != ojserr.Conflict {
		t.Fatalf("ack without a worker id after the lease's end: %v", err)
	}
	if _, err := s.NackOwned(ctx, j.ID, "w1", 0, lifecycle.ErrorInput{Message: "late"}); code(err) != ojserr.Conflict {
		t.Fatalf("fail after the lease's end: %v", err)
	}
	// The refused writes changed nothing: the read requeues the job with
	// the lease's end as the attempt's only error (not the late FAIL).
	if cur, _ := s.Info(ctx, j.ID); cur.State != job.Available || cur.Attempt != 1 || len(cur.Errors) != 1 || cur.Errors[0].Type != "visibility_timeout" {
		t.Fatalf("a refused write changed the job: %+v", cur)
	}
	again, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"lease"}, WorkerID: "w2"})
	if err != nil || len(again) != 1 || again[0].Attempt != 2 {
		t.Fatalf("requeued: %+v %v", again, err)
	}
	// Defaults: 1800 s, or the envelope's visibility_timeout in seconds.
	for body, want := range map[string]time.Duration{
		`{"type":"a.b","args":[],"options":{"queue":"lease-default"}}`:                      job.DefaultVisibilityTimeout,
		`{"type":"a.b","args":[],"visibility_timeout":600,"options":{"queue":"lease-env"}}`: 600 * time.Second,
	} {
		pushed, err := s.Push(ctx, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{pushed.Queue}})
		if len(got) != 1 || !got[0].LeaseUntil.Equal(c.Now().Add(want)) {
			t.Fatalf("%s: lease %+v, want %v", body, got, want)
		}
	}
	if job.DefaultVisibilityTimeout != 1800*time.Second {
		t.Fatal("the default lease is 1800 s (ojs-worker-protocol.md 5.2)")
	}
}

// A job is requeued at its lease's end, not at the next sweep: a read
// after the end shows it available with the attempt's visibility timeout
// recorded, and another worker fetches it (L1-VIS-001). A read before the
// end changes nothing.
func TestInfoAfterTheLeaseEndShowsTheJobRequeued(t *testing.T) {
	s, c := newService(t)
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"vis","visibility_timeout_ms":3000}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"vis"}, WorkerID: "w1"}); len(got) != 1 {
		t.Fatal("not fetched")
	}
	c.Add(2 * time.Second)
	if info, err := s.Info(ctx, j.ID); err != nil || info.State != job.Active {
		t.Fatalf("within the lease: %+v %v", info, err)
	}
	c.Add(2 * time.Second)
	info, err := s.Info(ctx, j.ID)
	if err != nil || info.State != job.Available || info.Attempt != 1 || len(info.Errors) != 1 || info.Errors[0].Type != "visibility_timeout" {
		t.Fatalf("after the lease: %+v %v", info, err)
	}
	again, _ := s.Info(ctx, j.ID)
	if again.State != job.Available || len(again.Errors) != 1 {
		t.Fatalf("a second read moved it again: %+v", again)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"vis"}, WorkerID: "w2"})
	if err != nil || len(got) != 1 || got[0].ID != j.ID || got[0].Attempt != 2 {
		t.Fatalf("refetch: %+v %v", got, err)
	}
}
