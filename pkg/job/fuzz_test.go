package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// fuzzNow is the fixed clock of the fuzz targets (relative times and the
// scheduled/available decision depend on it).
var fuzzNow = time.Date(2026, 3, 15, 9, 30, 0, 0, time.UTC)

// addSeeds adds every JSON file of dir (request bodies taken from the
// examples of the OJS specification, named <spec file>-<section>-<n>.json)
// to the corpus of f.
func addSeeds(f *testing.F, dir string) {
	f.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds in %s: %v", dir, err)
	}
	for _, fn := range files {
		b, err := os.ReadFile(fn)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// checkRejection fails unless err is an *ojserr.Error a client caused: a
// 4xx status with a message.
func checkRejection(t *testing.T, err error) *ojserr.Error {
	t.Helper()
	var oe *ojserr.Error
	if !errors.As(err, &oe) {
		t.Fatalf("rejection is not an *ojserr.Error: %T %v", err, err)
	}
	if s := oe.Status(); s < 400 || s > 499 {
		t.Fatalf("rejection has status %d (want 4xx): %v", s, err)
	}
	if oe.Message == "" || oe.Retryable {
		t.Fatalf("rejection without message or retryable: %+v", oe)
	}
	return oe
}

// FuzzParseEnqueue fuzzes the PUSH body: any input is either a job or a
// 4xx OJS error, never a panic; an accepted job is well formed and its
// rendering (the envelope clients and workers read) pushed again gives the
// same job.
func FuzzParseEnqueue(f *testing.F) {
	addSeeds(f, "testdata/seeds")
	for _, s := range []string{
		``, ` `, `null`, `[]`, `"x"`, `{`, `{"type":`, `{}`,
		`{"type":"a.b","args":[]}`,
		`{"type":"a.b","args":[1,"two",{"three":[3]}],"meta":{"k":"v"},"options":{"queue":"q-1.x","priority":-100,"timeout_ms":1,"tags":["a"],"pending":true}}`,
		`{"type":"a.b","args":[],"priority":100,"timeout":43200,"scheduled_at":"+PT30S","expires_at":"2030-01-01T00:00:00+02:00"}`,
		`{"type":"a.b","args":[],"options":{"delay_until":"2020-01-01T00:00:00Z","visibility_timeout":"PT1M","retry_policy":{"max_attempts":1}}}`,
		`{"type":"a.b","args":[],"options":{"visibility_timeout":30,"metadata":{"a":1}},"meta":{"a":2}}`,
		`{"type":"a.b","args":[],"retry":{"max_attempts":5,"initial_interval":"PT1S","backoff_coefficient":2,"max_interval":"PT1M","jitter":false,"non_retryable_errors":["x"]}}`,
		`{"type":"a.b","args":[],"id":"019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6","x_custom":{"a":[1]},"specversion":"1.0"}`,
		`{"type":"a.b","args":[],"state":"completed","attempt":9,"result":1,"errors":[]}`,
		`{"type":"a.b","args":[],"options":{"unique":{"key":"k"}}}`,
		`{"type":"a.b","args":"x"}`, `{"type":1,"args":[]}`, `{"type":"a.b","args":[],"options":[]}`,
		`{"type":"a.b","args":[],"priority":1.5}`, `{"type":"a.b","args":[],"priority":1e400}`,
		`{"type":"a.b","args":[],"tags":[1]}`, `{"type":"a.b","args":[],"meta":[]}`,
		"{\"type\":\"a.b\",\"args\":[\"\x00\xff\"]}", "{\"type\":\"a.b\",\"args\":[\"\\u0000\\ud800\"]}",
		`{"type":"a.b","args":[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]}`,
		`{"type":"a.b","args":[],"type":"c.d"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := ParseEnqueue(raw, fuzzNow)
		if err != nil {
			checkRejection(t, err)
			return
		}
		checkJob(t, e)
		// Round trip: the rendered envelope (system attributes included,
		// which a PUSH ignores) is itself a valid PUSH of the same job.
		out, err := json.Marshal(e.Job)
		if err != nil {
			t.Fatalf("render accepted job: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("rendered job is not JSON: %s", out)
		}
		if len(out) > MaxEnvelopeBytes {
			return // system attributes can push a maximal envelope over the limit
		}
		e2, err := ParseEnqueue(out, fuzzNow)
		if err != nil {
			t.Fatalf("rendered job %s is rejected: %v", out, err)
		}
		a, b := e.Job, e2.Job
		same := func(what string, x, y any) {
			if !reflect.DeepEqual(x, y) {
				t.Fatalf("%s changed in the round trip: %#v -> %#v\ninput: %q\nrendered: %s", what, x, y, raw, out)
			}
		}
		same("id", a.ID, b.ID)
		same("type", a.Type, b.Type)
		same("queue", a.Queue, b.Queue)
		same("args", jsonValue(a.Args), jsonValue(b.Args))
		same("meta", jsonValue(a.Meta), jsonValue(b.Meta))
		same("priority", a.Priority, b.Priority)
		same("tags", append([]string{}, a.Tags...), append([]string{}, b.Tags...))
		same("schema", a.Schema, b.Schema)
		same("retry", a.Retry, b.Retry)
		same("scheduled_at", a.ScheduledAt, b.ScheduledAt)
		same("expires_at", a.ExpiresAt, b.ExpiresAt)
		same("extra", compactAll(a.Extra), compactAll(b.Extra))
	})
}

func checkJob(t *testing.T, e *Enqueue) {
	t.Helper()
	j := e.Job
	if j == nil {
		t.Fatal("accepted without a job")
	}
	if ValidateID(j.ID) != nil {
		t.Fatalf("accepted job has id %q", j.ID)
	}
	if !typePattern.MatchString(j.Type) || len(j.Type) > MaxTypeLength {
		t.Fatalf("accepted job has type %q", j.Type)
	}
	if ValidateQueue(j.Queue) != nil {
		t.Fatalf("accepted job has queue %q", j.Queue)
	}
	if !json.Valid(j.Args) || !bytes.HasPrefix(j.Args, []byte("[")) {
		t.Fatalf("accepted job has args %q", j.Args)
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(j.Meta, &meta) != nil || meta == nil {
		t.Fatalf("accepted job has meta %q", j.Meta)
	}
	if j.Priority < MinPriority || j.Priority > MaxPriority {
		t.Fatalf("accepted job has priority %d", j.Priority)
	}
	if j.Timeout <= 0 || j.Timeout > MaxTimeout || j.Visibility < 0 || j.Visibility > MaxTimeout {
		t.Fatalf("accepted job has timeout %v, visibility %v", j.Timeout, j.Visibility)
	}
	if len(j.Tags) > 50 {
		t.Fatalf("accepted job has %d tags", len(j.Tags))
	}
	switch j.State {
	case Available, Scheduled, Pending:
	default:
		t.Fatalf("accepted job starts in state %q", j.State)
	}
	if e.Pending != (j.State == Pending) {
		t.Fatalf("pending %v but state %s", e.Pending, j.State)
	}
	for k := range j.Extra {
		if known[k] {
			t.Fatalf("defined attribute %q kept as an extra", k)
		}
	}
}

// compactAll decodes the values of m, so that equal JSON compares equal
// however it is written (json.Marshal escapes '&', '<' and '>').
func compactAll(m map[string]json.RawMessage) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = jsonValue(v)
	}
	return out
}

func jsonValue(b json.RawMessage) any {
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		return "invalid: " + string(b)
	}
	return x
}
