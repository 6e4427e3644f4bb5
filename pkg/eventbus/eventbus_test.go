package eventbus

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// fakeBus speaks the EventBridge JSON protocol (PutEvents only), failing
// the first entry of the first request with a throttling error.
type fakeBus struct {
	mu       sync.Mutex
	requests [][]map[string]any
}

func (f *fakeBus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Amz-Target") != "AWSEvents.PutEvents" {
		http.Error(w, "unexpected target "+r.Header.Get("X-Amz-Target"), 400)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var in struct{ Entries []map[string]any }
	if err := json.Unmarshal(body, &in); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	f.mu.Lock()
	first := len(f.requests) == 0
	f.requests = append(f.requests, in.Entries)
	f.mu.Unlock()
	out := map[string]any{"FailedEntryCount": 0}
	var res []map[string]any
	for i := range in.Entries {
		if first && i == 0 {
			res = append(res, map[string]any{"ErrorCode": "ThrottlingException", "ErrorMessage": "slow down"})
			out["FailedEntryCount"] = 1
		} else {
			res = append(res, map[string]any{"EventId": "e"})
		}
	}
	out["Entries"] = res
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(out)
}

func TestPublishBatchesAndRetriesFailedEntries(t *testing.T) {
	bus := &fakeBus{}
	srv := httptest.NewServer(bus)
	defer srv.Close()
	client := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{}})
	p := &Publisher{Client: client, Bus: "ojs-test"}
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var evs []events.Event
	for i := range 23 {
		evs = append(evs, events.New("ojs://t/engine", events.JobCompleted, "job", at, int64(i), map[string]any{"queue": "q", "i": i}, "k"))
	}
	// One event too large for EventBridge goes out truncated.
	evs = append(evs, events.New("ojs://t/engine", events.JobCompleted, "big", at, 99,
		map[string]any{"queue": "q", "job_id": "big", "result": strings.Repeat("x", 300<<10)}, "big"))
	if err := p.Publish(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	sent := map[string]int{}
	for _, req := range bus.requests {
		if len(req) > 10 {
			t.Errorf("request with %d entries", len(req))
		}
		for _, e := range req {
			if e["Source"] != Source || e["EventBusName"] != "ojs-test" || e["DetailType"] != events.JobCompleted {
				t.Errorf("entry %v", e)
			}
			var env events.Event
			if err := json.Unmarshal([]byte(e["Detail"].(string)), &env); err != nil {
				t.Fatal(err)
			}
			if len(e["Detail"].(string)) > maxBytes {
				t.Errorf("detail of %d bytes", len(e["Detail"].(string)))
			}
			sent[env.ID]++
		}
	}
	// Every event arrived; the throttled one twice (once failed).
	for i, e := range evs {
		want := 1
		if i == 0 {
			want = 2
		}
		if sent[e.ID] != want {
			t.Errorf("event %d sent %d times, want %d", i, sent[e.ID], want)
		}
	}
}

// Only the configured types reach the bus: the default set publishes a
// job's end and a workflow's lifecycle, not its per-attempt events.
func TestPublishOnlyConfiguredTypes(t *testing.T) {
	bus := &fakeBus{}
	srv := httptest.NewServer(bus)
	defer srv.Close()
	client := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	all := []string{events.JobEnqueued, events.JobStarted, events.JobCompleted, events.WorkflowStepCompleted, events.WorkflowCompleted, events.JobRetrying, events.JobDiscarded}
	var evs []events.Event
	for i, typ := range all {
		evs = append(evs, events.New("ojs://t/engine", typ, "job", at, int64(i), map[string]any{"queue": "q"}, "k"))
	}
	def, err := events.ParsePublished("")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := events.ParsePublished(" job.* , workflow.completed")
	if err != nil {
		t.Fatal(err)
	}
	none, _ := events.ParsePublished("none")
	for _, c := range []struct {
		types []string
		want  string
	}{
		{def, "job.completed,workflow.completed,job.discarded"},
		{jobs, "job.enqueued,job.started,job.completed,workflow.completed,job.retrying,job.discarded"},
		{none, ""},
		{nil, strings.Join(all, ",")},
	} {
		bus.requests = [][]map[string]any{{}} // not the first request: nothing throttled
		p := &Publisher{Client: client, Bus: "b", Types: c.types}
		if err := p.Publish(context.Background(), evs); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, req := range bus.requests {
			for _, e := range req {
				got = append(got, e["DetailType"].(string))
			}
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("types %v published %v, want %s", c.types, got, c.want)
		}
	}
	for _, bad := range []string{"job.nope", "job*", "jobs.*x"} {
		if _, err := events.ParsePublished(bad); err == nil || !strings.Contains(err.Error(), "job") {
			t.Errorf("ParsePublished(%q) = %v, want an error naming it", bad, err)
		}
	}
}

// Job events (events.DefaultPacked) go packed, many to an entry of at most
// one 64 KB billing chunk; the others one an entry; a job event too large
// for a chunk goes alone.
func TestPublishPacksJobEvents(t *testing.T) {
	bus := &fakeBus{requests: [][]map[string]any{{}}} // nothing throttled
	srv := httptest.NewServer(bus)
	defer srv.Close()
	client := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
	packed, err := events.ParsePacked("")
	if err != nil {
		t.Fatal(err)
	}
	p := &Publisher{Client: client, Bus: "b", Packed: packed}
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	var evs []events.Event
	for i := range 400 {
		evs = append(evs, events.New("ojs://t/engine", events.JobCompleted, "job", at.Add(time.Duration(i)*time.Millisecond), int64(i),
			map[string]any{"queue": "q", "result": strings.Repeat("r", 300)}, "k"))
		if i == 200 {
			evs = append(evs, events.New("ojs://t/engine", events.WorkflowCompleted, "wf", at, 1000, map[string]any{"workflow_id": "w"}, "w"),
				events.New("ojs://t/engine", events.JobCompleted, "big", at, 1001, map[string]any{"queue": "q", "result": strings.Repeat("x", 100<<10)}, "big"))
		}
	}
	if err := p.Publish(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	packs, total := 0, 0
	for _, req := range bus.requests {
		for _, e := range req {
			detail := e["Detail"].(string)
			switch e["DetailType"] {
			case PackedDetailType:
				packs++
				var d struct{ Events []events.Event }
				if err := json.Unmarshal([]byte(detail), &d); err != nil {
					t.Fatal(err)
				}
				if n := 14 + len(Source) + len(PackedDetailType) + len(detail); n > chunkBytes {
					t.Errorf("packed entry of %d bytes, over one chunk", n)
				}
				for _, ev := range d.Events {
					if ev.Type != events.JobCompleted {
						t.Errorf("%s packed", ev.Type)
					}
					seen[ev.ID]++
					b, _ := ev.Marshal()
					total += len(b) + 1
				}
			default:
				var ev events.Event
				if err := json.Unmarshal([]byte(detail), &ev); err != nil {
					t.Fatal(err)
				}
				if ev.Type != e["DetailType"] || (ev.Type == events.JobCompleted && ev.Subject != "big") {
					t.Errorf("entry %s of %s (subject %s) sent alone", e["DetailType"], ev.Type, ev.Subject)
				}
				seen[ev.ID]++
			}
		}
	}
	for _, e := range evs {
		if seen[e.ID] != 1 {
			t.Errorf("event %s (%s) sent %d times", e.ID, e.Type, seen[e.ID])
		}
	}
	// Packs are full but for the last: as few as the bytes allow, plus one.
	if min := (total + chunkBytes - 1) / chunkBytes; packs > min+1 {
		t.Errorf("%d packs for %d bytes of events, want at most %d", packs, total, min+1)
	}
	if packs < 2 {
		t.Errorf("%d packs: the events should not fit one", packs)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(topology.EnvEventBus, "")
	if p, err := FromEnv(aws.Config{}); p != nil || err != nil {
		t.Fatalf("no bus: %v, %v; want nil, nil", p, err)
	}
	t.Setenv(topology.EnvEventBus, "ojs-test")
	t.Setenv(topology.EnvPublishEvents, "job.completed,workflow.*")
	t.Setenv(topology.EnvPublishPacked, "")
	p, err := FromEnv(aws.Config{Region: "us-east-1"})
	if err != nil || p == nil || p.Bus != "ojs-test" || p.Client == nil {
		t.Fatalf("FromEnv = %+v, %v", p, err)
	}
	if strings.Join(p.Types, ",") != "job.completed,workflow.*" {
		t.Errorf("types %q", p.Types)
	}
	t.Setenv(topology.EnvPublishEvents, "no.such.event")
	if _, err := FromEnv(aws.Config{}); err == nil {
		t.Error("an unknown event type is accepted")
	}
}
