package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/webhook"
)

// receiver is a local HTTP endpoint that records the deliveries it gets.
type receiver struct {
	*httptest.Server
	secret string
	mu     sync.Mutex
	got    []delivery
	// answer decides the status of a delivery (0: never answer).
	answer func(d delivery, seen int) int
}

type delivery struct {
	EventID, EventType, Subject, DeliveryID, Attempt string
	// Verified: with the secret the receiver was made with.
	Verified bool
	sig, ts  string
	body     []byte
}

// verify checks d's signature with the receiver's secret as it is now.
func (rc *receiver) verify(d delivery) bool {
	return webhook.Verify(rc.secret, d.sig, d.ts, d.body, time.Now(), 5*time.Minute)
}

func newReceiver(t *testing.T, secret string, answer func(d delivery, seen int) int) *receiver {
	rc := &receiver{secret: secret, answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev struct {
			Subject string `json:"subject"`
		}
		_ = json.Unmarshal(body, &ev)
		d := delivery{EventID: r.Header.Get(webhook.HeaderEventID), EventType: r.Header.Get(webhook.HeaderEventType), Subject: ev.Subject,
			DeliveryID: r.Header.Get(webhook.HeaderDelivery), Attempt: r.Header.Get(webhook.HeaderAttempt),
			Verified: webhook.Verify(secret, r.Header.Get(webhook.HeaderSignature), r.Header.Get(webhook.HeaderTimestamp), body, time.Now(), 5*time.Minute),
			sig:      r.Header.Get(webhook.HeaderSignature), ts: r.Header.Get(webhook.HeaderTimestamp), body: body}
		rc.mu.Lock()
		seen := 0
		for _, g := range rc.got {
			if g.EventID == d.EventID {
				seen++
			}
		}
		rc.got = append(rc.got, d)
		rc.mu.Unlock()
		code := rc.answer(d, seen)
		if code == 0 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// of returns the deliveries about subject (a job id).
func (rc *receiver) of(subject string) []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []delivery
	for _, d := range rc.got {
		if d.Subject == subject {
			out = append(out, d)
		}
	}
	return out
}

func (rc *receiver) subscribe(t *testing.T, events []string, extra map[string]any) string {
	t.Helper()
	body := map[string]any{"url": rc.URL + "/hook", "events": events, "secret": rc.secret}
	for k, v := range extra {
		body[k] = v
	}
	r := do(t, http.MethodPost, "/ojs/v1/webhooks/subscriptions", body)
	sub, _ := r.Body["subscription"].(map[string]any)
	if r.Status != http.StatusCreated || sub["id"] == nil {
		t.Fatalf("subscribe: %d %s", r.Status, r.Raw)
	}
	id := sub["id"].(string)
	t.Cleanup(func() { do(t, http.MethodDelete, "/ojs/v1/webhooks/subscriptions/"+id, nil) })
	return id
}

func waitDeliveries(t *testing.T, rc *receiver, subject string, n int) []delivery {
	t.Helper()
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) {
		if ds := rc.of(subject); len(ds) >= n {
			return ds
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %d deliveries about %s within %v, want %d", rc.URL, len(rc.of(subject)), subject, settle, n)
	return nil
}

// Webhooks end to end, through the stream function's fan-out and the
// worker function's signed POSTs: a job's completion reaches a receiver;
// a receiver that fails first gets the same delivery again; one that never
// answers ends in the dead letter queue, from where a redrive delivers it.
func TestWebhookDeliveries(t *testing.T) {
	t.Parallel()
	ok := newReceiver(t, "ok-receiver-secret-1", func(delivery, int) int { return http.StatusNoContent })
	flaky := newReceiver(t, "flaky-receiver-secret", func(_ delivery, seen int) int {
		if seen == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	var wake atomic.Bool
	silent := newReceiver(t, "silent-receiver-secret", func(delivery, int) int {
		if wake.Load() {
			return http.StatusOK
		}
		return 0
	})
	// The ok receiver filters on the queue of its job (the suite's other
	// tests complete many jobs elsewhere meanwhile).
	okID := ok.subscribe(t, []string{"job.completed"}, map[string]any{"filter": map[string]any{"queues": []string{"lambda"}}})
	flaky.subscribe(t, []string{"job.cancelled"}, nil)
	silent.subscribe(t, []string{"job.cancelled"}, map[string]any{"timeout_ms": 300, "max_attempts": 2})
	time.Sleep(1500 * time.Millisecond) // the stream function's subscription refresh (local: 1 s)

	// A completion, delivered once and signed.
	j := push(t, map[string]any{"type": "test.echo", "args": []any{"hook"}, "options": map[string]any{"queue": "lambda"}})
	id := j["id"].(string)
	waitFor(t, id, "completed")
	ds := waitDeliveries(t, ok, id, 1)
	if d := ds[0]; d.EventType != "job.completed" || !d.Verified || d.Attempt != "1" || d.DeliveryID == "" {
		t.Errorf("delivery to the ok receiver: %+v", d)
	}

	// A test delivery, answered in the request; a rotated secret, after
	// which a delivery is signed with the old secret and the new one.
	r := do(t, http.MethodPost, "/ojs/v1/webhooks/subscriptions/"+okID+"/test", nil)
	if r.Status != http.StatusOK || r.Body["success"] != true || num(r.Body["status_code"]) != http.StatusNoContent {
		t.Errorf("test delivery: %d %s", r.Status, r.Raw)
	}
	if ds := ok.of(okID); len(ds) != 1 || ds[0].EventType != "webhook.test" || !ds[0].Verified {
		t.Errorf("the test event at the receiver: %+v", ds)
	}
	r = do(t, http.MethodPost, "/ojs/v1/webhooks/subscriptions/"+okID+"/rotate-secret", nil)
	sub, _ := r.Body["subscription"].(map[string]any)
	if r.Status != http.StatusOK || sub["secret"] == nil || sub["secret"] == ok.secret {
		t.Fatalf("rotate-secret: %d %s", r.Status, r.Raw)
	}
	j2 := push(t, map[string]any{"type": "test.echo", "args": []any{"hook 2"}, "options": map[string]any{"queue": "lambda"}})
	waitFor(t, j2["id"].(string), "completed")
	if d := waitDeliveries(t, ok, j2["id"].(string), 1)[0]; !d.Verified {
		t.Errorf("a delivery after the rotation does not verify with the old secret: %+v", d)
	}
	ok.secret = sub["secret"].(string)
	if d := ok.of(j2["id"].(string))[0]; !ok.verify(d) {
		t.Errorf("a delivery after the rotation does not verify with the new secret: %+v", d)
	}

	// A cancellation: the flaky receiver gets it twice (503, then 200),
	// the same event and delivery; the silent one twice, then nothing.
	c := push(t, map[string]any{"type": "test.echo", "args": []any{}, "options": map[string]any{"queue": uniqueQueue(t)},
		"scheduled_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	cid := c["id"].(string)
	if r := do(t, http.MethodDelete, "/ojs/v1/jobs/"+cid, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	fd := waitDeliveries(t, flaky, cid, 2)
	if fd[0].EventID != fd[1].EventID || fd[0].DeliveryID != fd[1].DeliveryID || fd[0].Attempt != "1" || fd[1].Attempt != "2" || !fd[1].Verified {
		t.Errorf("the flaky receiver's deliveries: %+v", fd)
	}
	sd := waitDeliveries(t, silent, cid, 2)
	dlq := waitState(t, "/ojs/v1/dead-letter/"+sd[0].DeliveryID, "job", "discarded")
	if dlq["queue"] != "ojs.webhooks" || num(dlq["attempt"]) != 2 {
		t.Errorf("the silent receiver's delivery in the dead letter queue: %v", dlq)
	}
	if n := len(flaky.of(cid)); n != 2 {
		t.Errorf("the flaky receiver got %d deliveries, want 2 (none after its 200)", n)
	}

	// Redriven once the receiver answers.
	wake.Store(true)
	if r := do(t, http.MethodPost, "/ojs/v1/dead-letter/"+sd[0].DeliveryID+"/retry", map[string]any{}); r.Status != http.StatusOK {
		t.Fatalf("redrive: %d %s", r.Status, r.Raw)
	}
	waitFor(t, sd[0].DeliveryID, "completed")
	if ds := silent.of(cid); len(ds) != 3 || ds[2].EventID != sd[0].EventID || !ds[2].Verified {
		t.Errorf("after the redrive the silent receiver has %+v", ds)
	}

	// The console lists the subscriptions and links the failed deliveries.
	if r := do(t, http.MethodGet, "/ojs/admin/webhooks", nil); r.Status != http.StatusOK || !strings.Contains(string(r.Raw), silent.URL+"/hook") ||
		!strings.Contains(string(r.Raw), "/ojs/admin/dead-letter?queue=ojs.webhooks") {
		t.Errorf("console webhooks page: %d %.300s", r.Status, r.Raw)
	}

	// A client cannot enqueue on the deliveries' queue.
	r = do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "ojs.webhook.deliver", "args": []any{}, "options": map[string]any{"queue": "ojs.webhooks"}})
	if r.Status != http.StatusBadRequest {
		t.Errorf("a push to ojs.webhooks: %d %s", r.Status, r.Raw)
	}
}
