package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// The fuzz targets of the HTTP binding's request decoding. Each sends the
// fuzzed body (or request) through the real server over refusingDB and
// checks the contract of harness.checkOutcome. Seeds are the request
// examples of the OJS specification (testdata/seeds/<route>, named
// <spec file>-<section>-<n>.json; PUSH and workflow bodies are shared with
// pkg/job and pkg/wfdef) plus hand-written edge cases.

func seeds(f *testing.F, dir string, extra ...string) {
	f.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) == 0 {
		f.Fatalf("no seeds in %s", dir)
	}
	for _, fn := range files {
		b, err := os.ReadFile(fn)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range append(extra, commonBad...) {
		f.Add([]byte(s))
	}
}

// commonBad are malformed bodies every POST route must reject cleanly.
var commonBad = []string{
	``, ` `, `null`, `true`, `0`, `"s"`, `[]`, `[{}]`, `{`, `{"a":`, `{"a":1,}`, `{}`, `{"":null}`,
	"\xff\xfe{}", "{\"a\":\"\x00\"}", `{"a":"\ud800"}`, `{"a":1e999}`, `{"a":-0}`,
	// Past encoding/json's nesting limit (10,000), and deep but within it.
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"a":` + strings.Repeat(`{"a":`, 300) + `1` + strings.Repeat(`}`, 301),
}

const validID = "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"

var fuzzHarness = newHarness("", slog.LevelInfo)

func post(t *testing.T, path string, body []byte) (*harness, []string) {
	h := fuzzHarness
	rec := h.serve(http.MethodPost, path, body)
	return h, h.checkOutcome(t, "POST "+path, rec)
}

// decodeLoose reads a body the way a reviewer would, to check what the
// API accepted; nil when it is not a JSON object.
func decodeLoose(body []byte) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	return m
}

func FuzzPushHTTP(f *testing.F) {
	seeds(f, "../job/testdata/seeds",
		`{"type":"a.b","args":[]}`, `{"type":"a.b","args":[],"options":{"queue":"Q"}}`,
		`{"type":"a.b","args":[],"unique":{"keys":["type"]}}`, `{"type":"a.b","args":[],"meta":{"a":1},"options":{"metadata":[]}}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, calls := post(t, "/ojs/v1/jobs", body)
		if len(calls) > 0 {
			if _, err := job.ParseEnqueue(body, fixedNow); err != nil {
				t.Fatalf("the API stored a job ParseEnqueue rejects (%v): %q", err, body)
			}
		}
	})
}

func FuzzBatch(f *testing.F) {
	seeds(f, "testdata/seeds/batch",
		`{"jobs":[]}`, `{"jobs":null}`, `{"jobs":{}}`, `{"jobs":[1]}`, `{"jobs":[{"type":"a.b","args":[]},{"type":"a.b"}]}`,
		`{"jobs":[{"type":"a.b","args":[],"id":"`+validID+`"},{"type":"a.b","args":[],"id":"`+validID+`"}]}`,
		`{"jobs":[`+strings.Repeat(`{"type":"a.b","args":[]},`, 100)+`{"type":"a.b","args":[]}],"atomicity":"atomic"}`,
		`{"jobs":[`+strings.Repeat(`{"type":"a.b","args":[]},`, 1000)+`{"type":"a.b","args":[]}]}`, `{"jobs":[{"type":"a.b","args":[]}],"atomicity":"all"}`,
		`{"jobs":[{"type":"a.b","args":[]}],"extra":1}`, `{"JOBS":[{"type":"a.b","args":[]}]}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, calls := post(t, "/ojs/v1/jobs/batch", body)
		if len(calls) == 0 {
			return
		}
		var req struct {
			Jobs []json.RawMessage `json:"jobs"`
		}
		if json.Unmarshal(body, &req) != nil || len(req.Jobs) == 0 || len(req.Jobs) > lifecycle.MaxBulk {
			t.Fatalf("the API stored a batch of %d jobs: %q", len(req.Jobs), body)
		}
		for i, raw := range req.Jobs {
			if _, err := job.ParseEnqueue(raw, fixedNow); err != nil {
				t.Fatalf("the API stored a batch whose job %d is invalid (%v): %q", i, err, body)
			}
		}
	})
}

func FuzzWorkflowHTTP(f *testing.F) {
	seeds(f, "../wfdef/testdata/seeds",
		`{"type":"chain","steps":[{"type":"a.b","args":[]}]}`,
		`{"type":"group","name":"`+strings.Repeat("n", 1000)+`","jobs":[{"type":"a.b","args":[]}]}`,
		`{"type":"batch","jobs":[{"type":"a.b","args":[]}],"callbacks":{"on_complete":{"type":"c.d","args":[]}}}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		post(t, "/ojs/v1/workflows", body)
	})
}

func FuzzFetch(f *testing.F) {
	seeds(f, "testdata/seeds/fetch",
		`{"queues":["default"]}`, `{"queues":[]}`, `{"queues":"default"}`, `{"queues":["Bad"]}`, `{"queues":[""]}`,
		`{"queues":["a"],"count":0}`, `{"queues":["a"],"count":101}`, `{"queues":["a"],"count":1.5}`, `{"queues":["a"],"count":"1"}`,
		`{"queues":["a"],"visibility_timeout_ms":0}`, `{"queues":["a"],"visibility_timeout_ms":43200001}`,
		`{"queues":["a"],"worker_id":"`+strings.Repeat("w", 257)+`"}`, `{"queues":[null]}`,
		`{"queues":["a"],"wait_ms":-1}`, `{"queues":["a"],"wait_ms":20001}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, calls := post(t, "/ojs/v1/workers/fetch", body)
		if len(calls) == 0 {
			return
		}
		var req struct {
			Queues []string `json:"queues"`
		}
		_ = json.Unmarshal(body, &req)
		if len(req.Queues) == 0 {
			t.Fatalf("the API fetched without queues: %q", body)
		}
		for _, q := range req.Queues {
			if job.ValidateQueue(q) != nil {
				t.Fatalf("the API fetched from queue %q: %q", q, body)
			}
		}
	})
}

// checkJobID fails unless the body names a valid job id: an ACK or FAIL
// that reached storage must have had one.
func checkJobID(t *testing.T, body []byte) {
	t.Helper()
	var id string
	if m := decodeLoose(body); m == nil || json.Unmarshal(m["job_id"], &id) != nil || job.ValidateID(id) != nil {
		t.Fatalf("the API used job_id %q: %q", id, body)
	}
}

func FuzzAck(f *testing.F) {
	seeds(f, "testdata/seeds/ack",
		`{"job_id":"`+validID+`"}`, `{"job_id":"`+validID+`","result":null}`, `{"job_id":"`+validID+`","result":[1,{"a":"b"}]}`,
		`{"job_id":"`+validID+`","result":"`+strings.Repeat("r", 70000)+`"}`, `{"job_id":"not-a-uuid"}`, `{"job_id":""}`,
		`{"job_id":"`+strings.ToUpper(validID)+`"}`, `{"job_id":7}`, `{"job_id":"`+validID+`","result":}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, calls := post(t, "/ojs/v1/workers/ack", body)
		if len(calls) > 0 {
			checkJobID(t, body)
		}
	})
}

func FuzzNack(f *testing.F) {
	seeds(f, "testdata/seeds/nack",
		`{"job_id":"`+validID+`","error":{"message":"m"}}`, `{"job_id":"`+validID+`"}`, `{"job_id":"`+validID+`","error":"boom"}`,
		`{"job_id":"`+validID+`","error":{"code":"DISCARD","retryable":false,"backtrace":["a","b"],"details":{"k":1}},"requeue":true}`,
		`{"job_id":"`+validID+`","error":{"message":"`+strings.Repeat("m", 70000)+`"}}`,
		`{"job_id":"`+validID+`","error":{"backtrace":["`+strings.Repeat("b", 70000)+`"]}}`,
		`{"job_id":"`+validID+`","error":{"retryable":"yes"}}`, `{"job_id":"x","error":{}}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, calls := post(t, "/ojs/v1/workers/nack", body)
		if len(calls) > 0 {
			checkJobID(t, body)
		}
	})
}

func FuzzHeartbeat(f *testing.F) {
	seeds(f, "testdata/seeds/heartbeat",
		`{"worker_id":"w"}`, `{}`, `{"worker_id":""}`, `{"worker_id":"w","state":"sleeping"}`, `{"worker_id":"w","active_jobs":-1}`,
		`{"worker_id":"w","active_jobs":["nope"]}`, `{"worker_id":"w","active_jobs":{"a":1}}`, `{"worker_id":"w","active_jobs":1.5}`,
		`{"worker_id":"w","job_id":"`+validID+`","visibility_timeout_ms":-5}`,
		`{"worker_id":"w","hostname":"`+strings.Repeat("h", 1000)+`","queues":["a","b"]}`,
		`{"worker_id":"w","active_job_ids":[`+strings.Repeat(`"`+validID+`",`, 100)+`"`+validID+`"]}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, calls := post(t, "/ojs/v1/workers/heartbeat", body)
		if len(calls) > 0 {
			var w struct {
				WorkerID string `json:"worker_id"`
			}
			if json.Unmarshal(body, &w) != nil || w.WorkerID == "" || len(w.WorkerID) > 256 {
				t.Fatalf("the API recorded worker %q: %q", w.WorkerID, body)
			}
		}
	})
}

func FuzzRetryDeadLetter(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"override":null}`, `{"override":{}}`, `{"override":{"queue":"other"}}`, `{"override":{"queue":"Bad"}}`,
		`{"override":{"meta":{"a":1}}}`, `{"override":{"meta":[]}}`, `{"override":{"priority":1}}`, `{"other":1}`, `{"override":[]}`,
		`{"override":{"queue":1}}`, `{"override":{"meta":null}}`, `{"override":{"meta":{"a":"` + strings.Repeat("m", 70000) + `"}}}`,
	} {
		f.Add([]byte(s), validID)
		f.Add([]byte(s), "not-an-id")
	}
	for _, s := range commonBad {
		f.Add([]byte(s), validID)
	}
	f.Fuzz(func(t *testing.T, body []byte, id string) {
		h := fuzzHarness
		rec := h.serve(http.MethodPost, "/ojs/v1/dead-letter/"+id+"/retry", body)
		if rec == nil {
			return
		}
		calls := h.checkOutcome(t, "retry dead letter", rec)
		if len(calls) > 0 && job.ValidateID(id) != nil {
			t.Fatalf("the API looked up dead letter job %q", id)
		}
	})
}

// FuzzRequest fuzzes whole requests: method, path with query and body, for
// routing, path ids and query parameters (events, dead letter, stats).
func FuzzRequest(f *testing.F) {
	for _, s := range []struct{ method, target, body string }{
		{"GET", "/ojs/manifest", ""}, {"GET", "/ojs/v1/health", ""}, {"GET", "/ojs/v1/jobs/" + validID, ""},
		{"GET", "/ojs/v1/jobs/not-a-uuid", ""}, {"DELETE", "/ojs/v1/jobs/" + validID, ""}, {"POST", "/ojs/v1/jobs/" + validID + "/activate", "{}"},
		{"GET", "/ojs/v1/events?queues=a,b&types=job.*&limit=5", ""}, {"GET", "/ojs/v1/events?since=1970-01-01T00:00:00Z&until=1970-01-02T00:00:00Z", ""},
		{"GET", "/ojs/v1/events?after=evt_019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6", ""}, {"GET", "/ojs/v1/events?job_id=" + validID + "&workflow_id=x", ""},
		{"GET", "/ojs/v1/events?limit=0", ""}, {"GET", "/ojs/v1/events?bogus=1", ""}, {"GET", "/ojs/v1/events?types=job.nothing", ""},
		{"GET", "/ojs/v1/dead-letter?queue=a&limit=10", ""}, {"GET", "/ojs/v1/dead-letter?limit=abc", ""}, {"GET", "/ojs/v1/dead-letter?queue=BAD", ""},
		{"GET", "/ojs/v1/dead-letter/" + validID, ""}, {"DELETE", "/ojs/v1/dead-letter/x", ""},
		{"GET", "/ojs/v1/queues", ""}, {"GET", "/ojs/v1/queues/default/stats", ""}, {"GET", "/ojs/v1/queues/Bad%20Q/stats", ""},
		{"POST", "/ojs/v1/queues/default/pause", ""}, {"POST", "/ojs/v1/queues/%ff/resume", ""},
		{"GET", "/ojs/v1/admin/workers", ""}, {"POST", "/ojs/v1/admin/workers/w-1/quiet", ""}, {"POST", "/ojs/v1/admin/workers/%00/terminate", ""},
		{"GET", "/ojs/v1/workflows/" + validID, ""}, {"DELETE", "/ojs/v1/workflows/nope", ""},
		{"PUT", "/ojs/v1/jobs", "{}"}, {"PATCH", "/ojs/v1/jobs/" + validID, "{}"}, {"GET", "/ojs/v2/jobs", ""}, {"GET", "//ojs//v1//health", ""},
		{"GET", "/ojs/v1/jobs/" + validID + "/", ""}, {"OPTIONS", "/ojs/v1/jobs", ""}, {"HEAD", "/ojs/v1/health", ""},
	} {
		f.Add(s.method, s.target, []byte(s.body))
	}
	methods := map[string]bool{"GET": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "HEAD": true, "OPTIONS": true}
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		if !methods[method] {
			return // net/http refuses other methods before the handler
		}
		h := fuzzHarness
		rec := h.serve(method, target, body)
		if rec == nil {
			return
		}
		// The console and /metrics answer HTML and text, not OJS JSON;
		// they must not panic.
		if u, err := url.Parse(target); err == nil && (strings.HasPrefix(u.Path, httpapi.ConsolePrefix) || u.Path == "/ojs/admin" || u.Path == "/metrics") {
			h.db.reset()
			if logs := h.log.take(); strings.Contains(logs, "panic serving request") {
				t.Fatalf("%s %s: panic: %s", method, target, logs)
			}
			return
		}
		// The manifest needs no storage, nor an events query whose time
		// range is empty; health reports storage unreachable.
		calls := h.checkOutcome(t, method+" "+target, rec, http.StatusOK, http.StatusServiceUnavailable)
		switch b := rec.Body.Bytes(); rec.Code {
		case http.StatusOK:
			if !bytes.Contains(b, []byte(`"specversion"`)) && !bytes.HasPrefix(b, []byte(`{"events":[],`)) {
				t.Fatalf("%s %s: 200 without storage: %s (calls %v)", method, target, b, calls)
			}
		case http.StatusServiceUnavailable:
			if !bytes.Contains(b, []byte(`"degraded"`)) {
				t.Fatalf("%s %s: 503 other than the health check: %s", method, target, b)
			}
		}
	})
}
