package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/webhook"
	"github.com/ojs-aws/ojs-serverless/pkg/worker"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func status(err error) int {
	if err == nil {
		return 200
	}
	return ojserr.As(err).Status()
}

// Subscriptions are created (id and secret generated, the secret answered
// once), read and listed without their secret, updated in part and
// deleted; bad input is a 400 naming the field, an unknown id a 404.
func TestSubscriptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := testenv.Table(t)
	s := webhook.NewStore(st.DB(), st.Table())
	sub, err := s.Create(ctx, []byte(`{"url":"https://example.com/hook","events":["job.completed","job.failed"]}`))
	if err != nil || webhook.ValidateID(sub.ID) != nil || !sub.Active || len(sub.Secret) < 40 || len(sub.Events) != 2 || sub.MaxAttempts != webhook.DefaultMaxAttempts {
		t.Fatalf("create: %+v, %v", sub, err)
	}
	got, err := s.Get(ctx, sub.ID)
	if err != nil || got.URL != sub.URL || got.Secret != "" || got.CreatedAt == "" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != sub.ID || list[0].Secret != "" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	up, err := s.Update(ctx, sub.ID, []byte(`{"events":["job.*"],"active":false}`))
	if err != nil || up.Active || len(up.Events) != 1 || up.URL != sub.URL || up.Secret != "" {
		t.Fatalf("update: %+v, %v", up, err)
	}
	if up, err = s.Update(ctx, sub.ID, []byte(`{"secret":"a-new-secret-of-some-length"}`)); err != nil || up.Secret != "a-new-secret-of-some-length" {
		t.Fatalf("a new secret is answered: %+v, %v", up, err)
	}
	for body, field := range map[string]string{
		`{"url":"ftp://x","events":["job.completed"]}`:                      "url",
		`{"url":"https://u:p@x.example","events":["job.completed"]}`:        "url",
		`{"url":"https://x.example","events":["job.nope"]}`:                 "events",
		`{"url":"https://x.example","events":[]}`:                           "events",
		`{"url":"https://x.example"}`:                                       "events",
		`{"events":["job.completed"]}`:                                      "url",
		`{"url":"https://x.example","events":["job.*"],"secret":"short"}`:   "secret",
		`{"url":"https://x.example","events":["job.*"],"timeout_ms":60000}`: "timeout_ms",
		`{"url":"https://x.example","events":["job.*"],"max_attempts":0}`:   "max_attempts",
		`{"url":"https://x.example","events":["job.*"],"colour":"blue"}`:    "body",
	} {
		_, err := s.Create(ctx, []byte(body))
		if oe := ojserr.As(err); err == nil || oe.Status() != 400 || oe.Details["field"] != field {
			t.Errorf("%s: %v (want a 400 on %s)", body, err, field)
		}
	}
	if _, err := s.Get(ctx, "whk_000000000000000000000000"); status(err) != 404 {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := s.Update(ctx, "nonsense", []byte(`{}`)); status(err) != 404 {
		t.Errorf("malformed id: %v", err)
	}
	if err := s.Delete(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, sub.ID); status(err) != 404 {
		t.Errorf("deleted twice: %v", err)
	}
}

func event(id, typ, q string) events.Event {
	return events.Event{SpecVersion: "1.0", ID: id, Type: typ, Source: "ojs://test", Time: "2026-11-29T10:00:00Z", Subject: "job",
		Data: map[string]any{"queue": q, "job_type": "a.b"}}
}

// The fan-out enqueues one push-mode delivery per event and subscription
// that wants it, the same job again when a batch is retried, none for
// inactive subscriptions and none about the deliveries' own queue.
func TestFanout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := testenv.Table(t)
	subs := webhook.NewStore(st.DB(), st.Table())
	all, err := subs.Create(ctx, []byte(`{"url":"https://a.example/","events":["job.*"],"max_attempts":3}`))
	if err != nil {
		t.Fatal(err)
	}
	done, err := subs.Create(ctx, []byte(`{"url":"https://b.example/","events":["job.completed"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subs.Create(ctx, []byte(`{"url":"https://c.example/","events":["*"],"active":false}`)); err != nil {
		t.Fatal(err)
	}
	qs := queue.NewService(st, queue.Config{PushQueues: []string{job.WebhookQueue}, Store: queue.NewStore(st.DB(), st.Table())})
	f := &webhook.Fanout{Subs: subs, Admit: qs, Jobs: st, RedeliverAfter: time.Minute}
	evs := []events.Event{event("evt_1", events.JobCompleted, "default"), event("evt_2", events.JobStarted, "default"),
		event("evt_3", events.JobCompleted, job.WebhookQueue)}
	if err := f.Publish(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := f.Publish(ctx, evs); err != nil {
		t.Fatalf("the batch retried: %v", err)
	}
	want := map[string]string{"evt_1/" + all.ID: "", "evt_1/" + done.ID: "", "evt_2/" + all.ID: ""}
	for key := range want {
		var e events.Event
		var sid string
		for _, ev := range evs {
			if key == ev.ID+"/"+all.ID || key == ev.ID+"/"+done.ID {
				e, sid = ev, key[len(ev.ID)+1:]
			}
		}
		sub := map[string]*webhook.Subscription{all.ID: all, done.ID: done}[sid]
		d, err := webhook.Delivery(sub, &e, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		j, err := st.Get(ctx, d.ID)
		if err != nil {
			t.Fatalf("delivery %s: %v", key, err)
		}
		var args []webhook.Args
		var sent events.Event
		if err := json.Unmarshal(j.Args, &args); err != nil || len(args) != 1 || args[0].SubscriptionID != sid || json.Unmarshal(args[0].Event, &sent) != nil || sent.ID != e.ID {
			t.Errorf("delivery %s args: %s, %v", key, j.Args, err)
		}
		if j.Queue != job.WebhookQueue || j.Type != webhook.JobType || !j.Push || j.State != job.Available || j.Retry.MaxAttempts != sub.MaxAttempts {
			t.Errorf("delivery %s: queue %s type %s push %v state %s attempts %d", key, j.Queue, j.Type, j.Push, j.State, j.Retry.MaxAttempts)
		}
	}
	// None about a delivery (evt_3 is on the webhook queue), none for the
	// inactive subscription or a type it does not want.
	for _, sub := range []*webhook.Subscription{all, done} {
		for _, e := range []events.Event{evs[2], evs[1]} {
			if sub == all && e.ID == "evt_2" {
				continue
			}
			d, _ := webhook.Delivery(sub, &e, time.Now())
			if j, err := st.Get(ctx, d.ID); err == nil {
				t.Errorf("an unwanted delivery of %s to %s: %+v", e.ID, sub.URL, j)
			}
		}
	}
}

// An event past MaxEventBytes (a large result) is delivered as a note
// pointing at the events API, never as a job too large to enqueue.
func TestDeliveryOfALargeEvent(t *testing.T) {
	e := event("evt_big", events.JobCompleted, "default")
	e.Data["result"] = strings.Repeat("x", 2*webhook.MaxEventBytes)
	e.Data["job_id"] = "0195"
	d, err := webhook.Delivery(&webhook.Subscription{ID: "whk_1", MaxAttempts: 3}, &e, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var args []webhook.Args
	var sent events.Event
	if err := json.Unmarshal(d.Args, &args); err != nil || json.Unmarshal(args[0].Event, &sent) != nil {
		t.Fatalf("args %.200s: %v", d.Args, err)
	}
	if len(args[0].Event) > webhook.MaxEventBytes || sent.ID != "evt_big" || sent.Data["truncated"] != true || sent.Data["job_id"] != "0195" {
		t.Errorf("a large event's delivery: %d bytes, %v", len(args[0].Event), sent.Data)
	}
}

func runDelivery(t *testing.T, d *webhook.Deliverer, sub *webhook.Subscription, e events.Event, attempt int) (any, error) {
	t.Helper()
	dj, err := webhook.Delivery(sub, &e, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return d.Handle(context.Background(), &worker.Job{ID: dj.ID, Type: dj.Type, Queue: dj.Queue, Args: dj.Args, Attempt: attempt})
}

// A delivery POSTs the event signed with the subscription's secret; a
// receiver's 5xx or silence is a retryable failure, a 4xx goes to the dead
// letter queue at once, and a deleted or paused subscription receives
// nothing.
func TestDeliverer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := testenv.Table(t)
	subs := webhook.NewStore(st.DB(), st.Table())
	var got atomic.Pointer[http.Request]
	var body atomic.Value
	answer := atomic.Int32{}
	answer.Store(200)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(r)
		body.Store(b)
		if answer.Load() == 0 {
			<-r.Context().Done() // never answers
			return
		}
		w.WriteHeader(int(answer.Load()))
	}))
	defer recv.Close()
	sub, err := subs.Create(ctx, []byte(`{"url":"`+recv.URL+`/hook","events":["job.*"],"secret":"s3cret-s3cret-s3cret","timeout_ms":300}`))
	if err != nil {
		t.Fatal(err)
	}
	d := &webhook.Deliverer{Subs: subs}
	e := event("evt_42", events.JobCompleted, "default")
	res, err := runDelivery(t, d, sub, e, 1)
	if r, ok := res.(webhook.Result); err != nil || !ok || r.Status != 200 {
		t.Fatalf("delivery: %+v, %v", res, err)
	}
	r, b := got.Load(), body.Load().([]byte)
	if !webhook.Verify("s3cret-s3cret-s3cret", r.Header.Get(webhook.HeaderSignature), r.Header.Get(webhook.HeaderTimestamp), b, time.Now(), 5*time.Minute) {
		t.Errorf("the signature %q does not verify", r.Header.Get(webhook.HeaderSignature))
	}
	if webhook.Verify("another-secret-entirely", r.Header.Get(webhook.HeaderSignature), r.Header.Get(webhook.HeaderTimestamp), b, time.Now(), 5*time.Minute) {
		t.Error("the signature verifies with another secret")
	}
	var sent events.Event
	if err := json.Unmarshal(b, &sent); err != nil || sent.ID != "evt_42" || sent.Type != events.JobCompleted || r.Header.Get(webhook.HeaderEventID) != "evt_42" ||
		r.Header.Get("Content-Type") != "application/json" || r.URL.Path != "/hook" {
		t.Errorf("sent %s with headers %v (%v)", b, r.Header, err)
	}
	for code, want := range map[int32]string{503: "RETRY", 429: "RETRY", 0: "RETRY", 400: "DEAD_LETTER", 410: "DEAD_LETTER"} {
		answer.Store(code)
		_, err := runDelivery(t, d, sub, e, 2)
		we, ok := errors.AsType[*worker.Error](err)
		if !ok || we.Code != want {
			t.Errorf("receiver answering %d: %v, want code %s", code, err, want)
		}
		if code == 0 && we != nil && we.Type != "webhook.timeout" {
			t.Errorf("a receiver that never answers: %s", we.Type)
		}
	}
	answer.Store(200)
	if _, err := subs.Update(ctx, sub.ID, []byte(`{"active":false}`)); err != nil {
		t.Fatal(err)
	}
	if res, err := runDelivery(t, d, sub, e, 1); err != nil || res.(webhook.Result).Skipped == "" {
		t.Errorf("inactive subscription: %+v, %v", res, err)
	}
	if err := subs.Delete(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := runDelivery(t, d, sub, e, 1); err != nil || res.(webhook.Result).Skipped == "" {
		t.Errorf("deleted subscription: %+v, %v", res, err)
	}
}

// A filter narrows a subscription to queues and job types (both must
// match; an event without a queue matches only a filter without queues);
// metadata is kept as sent; PATCH replaces or clears both; bad filters
// are a 400 naming the field.
func TestFilterAndMetadata(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := testenv.Table(t)
	s := webhook.NewStore(st.DB(), st.Table())
	sub, err := s.Create(ctx, []byte(`{"url":"https://example.com/h","events":["job.*","workflow.*"],
		"filter":{"queues":["payments","billing","payments"],"job_types":["a.b"]},"metadata":{"owner":"platform","n":3}}`))
	if err != nil || sub.Filter == nil || len(sub.Filter.Queues) != 2 || sub.Metadata["owner"] != "platform" {
		t.Fatalf("create: %+v, %v", sub, err)
	}
	got, err := s.Get(ctx, sub.ID)
	if err != nil || got.Filter == nil || got.Filter.JobTypes[0] != "a.b" || got.Metadata["n"] != 3.0 {
		t.Fatalf("read back: %+v, %v", got, err)
	}
	wf := events.Event{Type: events.WorkflowCompleted, Data: map[string]any{"workflow_id": "wf"}}
	for _, c := range []struct {
		e    events.Event
		want bool
	}{
		{event("1", events.JobCompleted, "payments"), true},
		{event("2", events.JobCompleted, "billing"), true},
		{event("3", events.JobCompleted, "default"), false},
		{events.Event{Type: events.JobCompleted, Data: map[string]any{"queue": "payments", "job_type": "c.d"}}, false},
		{wf, false},
	} {
		if got.Wants(&c.e) != c.want {
			t.Errorf("%s on %v: wanted %v", c.e.Type, c.e.Data, c.want)
		}
	}
	up, err := s.Update(ctx, sub.ID, []byte(`{"filter":{"job_types":["a.b"]},"metadata":null}`))
	if err != nil || up.Filter == nil || len(up.Filter.Queues) != 0 || up.Metadata != nil {
		t.Fatalf("update: %+v, %v", up, err)
	}
	if e := event("4", events.JobCompleted, "default"); !up.Wants(&e) {
		t.Error("a job-type filter alone lets any queue through")
	}
	if up, err = s.Update(ctx, sub.ID, []byte(`{"filter":null}`)); err != nil || up.Filter != nil || !up.Wants(&wf) {
		t.Errorf("filter cleared: %+v, %v", up, err)
	}
	for body, field := range map[string]string{
		`{"url":"https://x.example","events":["job.*"],"filter":{"queues":[""]}}`:                                                  "filter.queues",
		`{"url":"https://x.example","events":["job.*"],"filter":{"job_types":[1]}}`:                                                "filter",
		`{"url":"https://x.example","events":["job.*"],"filter":{"tenants":["a"]}}`:                                                "filter",
		`{"url":"https://x.example","events":["job.*"],"metadata":["not","an","object"]}`:                                          "metadata",
		`{"url":"https://x.example","events":["job.*"],"metadata":{"big":"` + strings.Repeat("x", webhook.MaxMetadataSize) + `"}}`: "metadata",
	} {
		_, err := s.Create(ctx, []byte(body))
		if oe := ojserr.As(err); err == nil || oe.Status() != 400 || oe.Details["field"] != field {
			t.Errorf("%.80s: %v (want a 400 on %s)", body, err, field)
		}
	}
}

// A rotated secret is answered once; deliveries are then signed with both
// the new and the old secret, each verifying, until the overlap ends. A
// test delivery POSTs a signed webhook.test event and reports the answer.
func TestRotateSecretAndTest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := testenv.Table(t)
	s := webhook.NewStore(st.DB(), st.Table())
	var got atomic.Pointer[http.Request]
	var body atomic.Value
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(r)
		body.Store(b)
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("thanks"))
	}))
	defer recv.Close()
	sub, err := s.Create(ctx, []byte(`{"url":"`+recv.URL+`/hook","events":["job.*"],"secret":"the-first-secret-0001"}`))
	if err != nil {
		t.Fatal(err)
	}
	rot, err := s.RotateSecret(ctx, sub.ID)
	if err != nil || rot.Secret == "" || rot.Secret == sub.Secret {
		t.Fatalf("rotate: %+v, %v", rot, err)
	}
	if g, _ := s.Get(ctx, sub.ID); g.Secret != "" {
		t.Error("a read answers the rotated secret")
	}
	res, err := runDelivery(t, &webhook.Deliverer{Subs: s}, sub, event("evt_7", events.JobCompleted, "default"), 1)
	if r, ok := res.(webhook.Result); err != nil || !ok || r.Status != http.StatusAccepted {
		t.Fatalf("delivery after a rotation: %+v, %v", res, err)
	}
	r, b := got.Load(), body.Load().([]byte)
	sig, ts := r.Header.Get(webhook.HeaderSignature), r.Header.Get(webhook.HeaderTimestamp)
	if strings.Count(sig, "sha256=") != 2 || r.Header.Get(webhook.HeaderSub) != sub.ID {
		t.Errorf("during the overlap: signature %q, subscription header %q", sig, r.Header.Get(webhook.HeaderSub))
	}
	for _, secret := range []string{rot.Secret, "the-first-secret-0001"} {
		if !webhook.Verify(secret, sig, ts, b, time.Now(), 5*time.Minute) {
			t.Errorf("%s does not verify during the overlap", secret)
		}
	}
	later := *rot
	if s := later.Signature(1, b, time.Now().Add(webhook.SecretOverlap+time.Minute)); strings.Count(s, "sha256=") != 1 || s != webhook.Sign(rot.Secret, 1, b) {
		t.Errorf("after the overlap: %q", s)
	}

	tr, err := s.Test(ctx, sub.ID)
	if err != nil || !tr.Success || tr.StatusCode != http.StatusAccepted || tr.ResponseBody != "thanks" {
		t.Fatalf("test: %+v, %v", tr, err)
	}
	var sent events.Event
	r, b = got.Load(), body.Load().([]byte)
	if json.Unmarshal(b, &sent) != nil || sent.Type != webhook.EventTest || sent.Subject != sub.ID || r.Header.Get(webhook.HeaderEventType) != webhook.EventTest ||
		!webhook.Verify(rot.Secret, r.Header.Get(webhook.HeaderSignature), r.Header.Get(webhook.HeaderTimestamp), b, time.Now(), time.Minute) {
		t.Errorf("the test event: %s, headers %v", b, r.Header)
	}
	recv.Close()
	if tr, err := s.Test(ctx, sub.ID); err != nil || tr.Success || tr.Error == "" {
		t.Errorf("a test of a receiver that is gone: %+v, %v", tr, err)
	}
	if _, err := s.Test(ctx, "whk_000000000000000000000000"); status(err) != 404 {
		t.Errorf("a test of an unknown subscription: %v", err)
	}
	if _, err := s.RotateSecret(ctx, "whk_000000000000000000000000"); status(err) != 404 {
		t.Errorf("rotating an unknown subscription: %v", err)
	}
}
