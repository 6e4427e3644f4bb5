package job

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

func TestTransitionsMatchSpec(t *testing.T) {
	t.Parallel()
	// L0-LC-002 plus the transitions ojs-core section 6.3 adds: lease expiry
	// (active -> available), expiry (-> discarded) and manual retry; and a
	// workflow retry re-running a cancelled step (cancelled -> available).
	valid := map[[2]State]bool{
		{Scheduled, Available}: true, {Scheduled, Cancelled}: true, {Scheduled, Discarded}: true,
		{Available, Active}: true, {Available, Cancelled}: true, {Available, Discarded}: true,
		{Pending, Available}: true, {Pending, Cancelled}: true,
		{Active, Completed}: true, {Active, Retryable}: true, {Active, Cancelled}: true, {Active, Discarded}: true, {Active, Available}: true,
		{Retryable, Available}: true, {Retryable, Cancelled}: true, {Retryable, Discarded}: true,
		{Discarded, Available}: true, {Cancelled, Available}: true,
	}
	for _, from := range States {
		for _, to := range States {
			if got := CanTransition(from, to); got != valid[[2]State{from, to}] {
				t.Errorf("%s -> %s: %v", from, to, got)
			}
		}
	}
	for _, s := range []State{Completed} {
		for _, to := range States {
			if CanTransition(s, to) {
				t.Errorf("terminal %s has an outgoing transition to %s", s, to)
			}
		}
	}
	if State("running").Valid() || !Completed.Valid() {
		t.Fatal("Valid is wrong")
	}
}

var now = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func parse(t *testing.T, body string) (*Enqueue, error) {
	t.Helper()
	return ParseEnqueue([]byte(body), now)
}

func TestParseEnqueueDefaults(t *testing.T) {
	t.Parallel()
	e, err := parse(t, `{"type":"test.echo","args":["hello"],"x_custom":{"a":1}}`)
	if err != nil {
		t.Fatal(err)
	}
	j := e.Job
	if j.Queue != "default" || j.State != Available || j.Priority != 0 || j.Retry.MaxAttempts != 3 || j.Timeout != DefaultTimeout {
		t.Fatalf("defaults: %+v", j)
	}
	if ValidateID(j.ID) != nil {
		t.Fatalf("generated id %q is not a UUIDv7", j.ID)
	}
	if j.EnqueuedAt == nil || !j.EnqueuedAt.Equal(now) || !j.CreatedAt.Equal(now) {
		t.Fatal("timestamps not set")
	}
	out, _ := json.Marshal(j)
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	if m["x_custom"] == nil || m["specversion"] != "1.0" || m["state"] != "available" || m["enqueued_at"] != "2026-11-21T10:00:00.000Z" {
		t.Fatalf("wire form: %s", out)
	}
}

func TestParseEnqueueOptionsAndEnvelopeStyles(t *testing.T) {
	t.Parallel()
	id := "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"
	e, err := parse(t, `{"id":"`+id+`","type":"email.send","args":[],"options":{"queue":"email","priority":10,"timeout_ms":5000,
		"retry":{"max_attempts":5,"initial_interval":"PT2S"},"tags":["a"],"delay_until":"2026-11-21T11:00:00+01:00","visibility_timeout":2}}`)
	if err != nil {
		t.Fatal(err)
	}
	j := e.Job
	if j.ID != id || j.Queue != "email" || j.Priority != 10 || j.Timeout != 5*time.Second || j.Retry.MaxAttempts != 5 ||
		j.Retry.InitialInterval != 2*time.Second || len(j.Tags) != 1 || j.Visibility != 2*time.Second {
		t.Fatalf("options: %+v", j)
	}
	// 11:00+01:00 is 10:00Z == now: not in the future, so available.
	if j.State != Available {
		t.Fatalf("state %s", j.State)
	}
	e, err = parse(t, `{"type":"a.b","args":[],"queue":"q1","scheduled_at":"2026-11-21T10:05:00Z","timeout":60}`)
	if err != nil || e.Job.State != Scheduled || e.Job.EnqueuedAt != nil || e.Job.Queue != "q1" || e.Job.Timeout != time.Minute {
		t.Fatalf("envelope style: %+v %v", e, err)
	}
	e, err = parse(t, `{"type":"a.b","args":[],"options":{"pending":true}}`)
	if err != nil || e.Job.State != Pending || !e.Pending {
		t.Fatalf("pending: %+v %v", e, err)
	}
	// System-managed attributes from the client are ignored.
	e, err = parse(t, `{"type":"a.b","args":[],"state":"completed","attempt":9,"result":1}`)
	if err != nil || e.Job.State != Available || e.Job.Attempt != 0 || e.Job.Result != nil || len(e.Job.Extra) != 0 {
		t.Fatalf("system attrs: %+v %v", e.Job, err)
	}
}

func TestParseEnqueueRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body, field string
		code              ojserr.Code
	}{
		{"missing type", `{"args":["hello"]}`, "type", ojserr.InvalidRequest},
		{"empty type", `{"type":"","args":[]}`, "type", ojserr.InvalidRequest},
		{"bad type", `{"type":"9bad..x","args":[]}`, "type", ojserr.InvalidRequest},
		{"type not string", `{"type":5,"args":[]}`, "type", ojserr.InvalidRequest},
		{"missing args", `{"type":"a.b"}`, "args", ojserr.InvalidRequest},
		{"args object", `{"type":"a.b","args":{"a":1}}`, "args", ojserr.InvalidRequest},
		{"args null", `{"type":"a.b","args":null}`, "args", ojserr.InvalidRequest},
		{"meta array", `{"type":"a.b","args":[],"meta":[1]}`, "meta", ojserr.InvalidRequest},
		{"bad queue", `{"type":"a.b","args":[],"options":{"queue":"Bad Queue"}}`, "queue", ojserr.InvalidRequest},
		{"long queue", `{"type":"a.b","args":[],"queue":"` + strings.Repeat("q", 129) + `"}`, "queue", ojserr.InvalidRequest},
		{"bad id", `{"id":"not-a-uuid","type":"a.b","args":[]}`, "id", ojserr.InvalidRequest},
		{"uuid v4 id", `{"id":"3b241101-e2bb-4255-8caf-4136c566a962","type":"a.b","args":[]}`, "id", ojserr.InvalidRequest},
		{"reserved webhook queue", `{"type":"a.b","args":[],"queue":"ojs.webhooks"}`, "queue", ojserr.InvalidRequest},
		{"uppercase id", `{"id":"019414D4-8B2E-7C3A-B5D1-F0E2A3B4C5D6","type":"a.b","args":[]}`, "id", ojserr.InvalidRequest},
		{"fractional priority", `{"type":"a.b","args":[],"priority":1.5}`, "priority", ojserr.InvalidRequest},
		{"string priority", `{"type":"a.b","args":[],"options":{"priority":"urgent"}}`, "priority", ojserr.InvalidRequest},
		{"zero timeout_ms", `{"type":"a.b","args":[],"options":{"timeout_ms":0}}`, "options.timeout_ms", ojserr.InvalidRequest},
		{"no tz", `{"type":"a.b","args":[],"scheduled_at":"2026-03-15T09:30:00"}`, "scheduled_at", ojserr.InvalidRequest},
		{"bad expires", `{"type":"a.b","args":[],"options":{"expires_at":"tomorrow"}}`, "expires_at", ojserr.InvalidRequest},
		{"bad retry", `{"type":"a.b","args":[],"retry":{"backoff_coefficient":0.1}}`, "retry.backoff_coefficient", ojserr.ValidationError},
		{"negative attempts", `{"type":"a.b","args":[],"options":{"retry":{"max_attempts":-1}}}`, "retry.max_attempts", ojserr.ValidationError},
		{"priority too high", `{"type":"a.b","args":[],"options":{"priority":101}}`, "priority", ojserr.InvalidRequest},
		{"empty body", ``, "body", ojserr.InvalidPayload},
		{"retry not object", `{"type":"a.b","args":[],"retry":3}`, "retry", ojserr.InvalidRequest},
		{"specversion", `{"specversion":"2.0","type":"a.b","args":[]}`, "specversion", ojserr.InvalidRequest},
		{"not object", `["a"]`, "body", ojserr.InvalidRequest},
		{"truncated", `{"type":"a.b","args":[`, "body", ojserr.InvalidPayload},
		{"malformed", `{ invalid json }`, "body", ojserr.InvalidPayload},
		{"unique bad key", `{"type":"a.b","args":[],"unique":{"keys":["argz"]}}`, "unique.keys", ojserr.InvalidRequest},
		{"unique meta no keys", `{"type":"a.b","args":[],"unique":{"keys":["meta"]}}`, "unique.meta_keys", ojserr.InvalidRequest},
		{"unique missing args key", `{"type":"a.b","args":[{"x":1}],"unique":{"keys":["args"],"args_keys":["user_id"]}}`, "unique.args_keys", ojserr.InvalidRequest},
		{"unique bad state", `{"type":"a.b","args":[],"options":{"unique":{"states":["done"]}}}`, "unique.states", ojserr.InvalidRequest},
		{"unique bad period", `{"type":"a.b","args":[],"unique":{"period":"1 hour"}}`, "unique.period", ojserr.InvalidRequest},
		{"unique bad strategy", `{"type":"a.b","args":[],"unique":{"on_conflict":"merge"}}`, "unique.on_conflict", ojserr.InvalidRequest},
		{"unique unknown field", `{"type":"a.b","args":[],"unique":{"key":["type"]}}`, "unique", ojserr.InvalidRequest},
		{"huge meta", `{"type":"a.b","args":[],"meta":{"k":"` + strings.Repeat("m", MaxMetaBytes) + `"}}`, "meta", ojserr.PayloadTooLarge},
		{"huge envelope", `{"type":"a.b","args":["` + strings.Repeat("a", MaxEnvelopeBytes) + `"]}`, "envelope", ojserr.PayloadTooLarge},
	}
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := parse(t, c.body)
			e, ok := err.(*ojserr.Error)
			if !ok {
				t.Fatalf("want *ojserr.Error, got %v", err)
			}
			if e.Code != c.code || e.Details["field"] != c.field {
				t.Fatalf("got %s field=%v (%s); want %s field=%s", e.Code, e.Details["field"], e.Message, c.code, c.field)
			}
		})
	}
}

func TestParseEnqueueTimesAndAliases(t *testing.T) {
	t.Parallel()
	e, err := parse(t, `{"type":"a.b","args":[],"options":{"expires_at":"2099-12-31T23:59:59Z","scheduled_at":"+PT5S",
		"retry_policy":{"max_attempts":7},"metadata":{"test_directive":"quiet"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	j := e.Job
	if j.State != Scheduled || !j.ScheduledAt.Equal(now.Add(5*time.Second)) || j.Retry.MaxAttempts != 7 {
		t.Fatalf("%+v", j)
	}
	out, _ := json.Marshal(j)
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	if m["expires_at"] != "2099-12-31T23:59:59Z" {
		t.Fatalf("expires_at not echoed verbatim: %v", m["expires_at"])
	}
	if meta, _ := m["meta"].(map[string]any); meta["test_directive"] != "quiet" {
		t.Fatalf("options.metadata not merged into meta: %s", out)
	}
}

func TestUniqueKey(t *testing.T) {
	t.Parallel()
	key := func(body string) string {
		t.Helper()
		j, err := parse(t, body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return j.Job.Unique.Key
	}
	a := key(`{"type":"email.send","args":[{"user_id":42,"template":"welcome"}],"options":{"queue":"n","unique":{"keys":["type","queue","args"],"args_keys":["user_id"]}}}`)
	b := key(`{"type":"email.send","args":[{"template":"other","user_id":42}],"options":{"queue":"n","unique":{"keys":["queue","args"],"args_keys":["user_id"]}}}`)
	c := key(`{"type":"email.send","args":[{"user_id":43}],"options":{"queue":"n","unique":{"keys":["queue","args"],"args_keys":["user_id"]}}}`)
	d := key(`{"type":"email.send","args":[{"user_id":42}],"options":{"queue":"m","unique":{"keys":["queue","args"],"args_keys":["user_id"]}}}`)
	if a != b || a == c || a == d || len(a) != 64 {
		t.Fatalf("keys: same args_keys %s %s, other user %s, other queue %s", a, b, c, d)
	}
	// Key order, whitespace and Unicode normalisation do not matter; type
	// is always part of the key.
	e1 := key(`{"type":"x.y","args":[{"a":1,"b":"caf\u00e9"}],"unique":{"keys":["args"]}}`)
	e2 := key(`{"type":"x.y","args":[ { "b":"cafe\u0301", "a":1 } ],"unique":{"keys":["args"]}}`)
	e3 := key(`{"type":"x.z","args":[{"a":1,"b":"caf\u00e9"}],"unique":{"keys":["args"]}}`)
	if e1 != e2 || e1 == e3 {
		t.Fatalf("canonical form: %s %s %s", e1, e2, e3)
	}
	m1 := key(`{"type":"x.y","args":[],"meta":{"tenant":"acme","trace":"1"},"unique":{"keys":["meta"],"meta_keys":["tenant"]}}`)
	m2 := key(`{"type":"x.y","args":[],"meta":{"tenant":"acme","trace":"2"},"unique":{"keys":["meta"],"meta_keys":["tenant"]}}`)
	if m1 != m2 {
		t.Fatal("meta keys outside meta_keys changed the key")
	}
	j, _ := parse(t, `{"type":"x.y","args":[],"unique":{}}`)
	if u := j.Job.Unique; u.OnConflict != UniqueReject || len(u.States) != 5 || u.States[Completed] || u.Period != 0 {
		t.Fatalf("defaults: %+v", j.Job.Unique)
	}
}

func TestNamedPriorities(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]int{"HIGH": 3, "normal": 2, "Low": 1} {
		e, err := parse(t, `{"type":"a.b","args":[],"options":{"priority":"`+name+`"}}`)
		if err != nil || e.Job.Priority != want {
			t.Fatalf("%s: %v %v", name, e, err)
		}
	}
}

// result_ttl is -1 (kept for ever), 0 (not kept) or a number of seconds up
// to MaxResultTTL, echoed on the wire; anything else is a 400 naming it.
func TestResultTTL(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, v := range []string{"-1", "0", "3600", "315360000"} {
		e, err := ParseEnqueue([]byte(`{"type":"a.b","args":[],"result_ttl":`+v+`}`), now)
		if err != nil || fmt.Sprint(*e.Job.ResultTTL) != v {
			t.Fatalf("result_ttl %s: %v", v, err)
		}
		if b, _ := json.Marshal(e.Job); !strings.Contains(string(b), `"result_ttl":`+v) {
			t.Fatalf("result_ttl %s not echoed: %s", v, b)
		}
	}
	for _, v := range []string{"-2", "1.5", `"7d"`, "315360001", "{}"} {
		_, err := ParseEnqueue([]byte(`{"type":"a.b","args":[],"result_ttl":`+v+`}`), now)
		if e := ojserr.As(err); e == nil || e.Code != ojserr.InvalidRequest || e.Status() != 400 || !strings.Contains(e.Message, "'result_ttl'") {
			t.Fatalf("result_ttl %s: %v", v, err)
		}
	}
}
