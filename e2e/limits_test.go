package e2e

// The tests of AWS limits move megabytes through DynamoDB Local, the
// stream and the functions. They run one at a time, before the parallel
// tests start, so that they never slow those past a function's timeout on a
// small shared machine.

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// padded returns body with its "pad" string grown so that the body's JSON
// is exactly size bytes.
func padded(t *testing.T, body map[string]any, size int) []byte {
	t.Helper()
	body["pad"] = ""
	raw, _ := json.Marshal(body)
	body["pad"] = strings.Repeat("p", size-len(raw))
	raw, _ = json.Marshal(body)
	if len(raw) != size {
		t.Fatalf("padded body is %d bytes, want %d", len(raw), size)
	}
	return raw
}

// TestPushModeJobAtTheEnvelopeLimitRuns: a push-mode job just under the
// 1 MiB envelope limit (ojs-json-format.md 8.1), its args stored
// compressed, goes through the stream relay, SQS (whose queue takes 256 KiB
// messages, as on AWS) and the worker function twice (it fails once and is
// retried), and completes. Its SQS messages carry the job's reference, not
// the job.
func TestPushModeJobAtTheEnvelopeLimitRuns(t *testing.T) {
	args := map[string]any{"type": "test.fail_once", "options": map[string]any{"queue": pushQueue,
		"retry": map[string]any{"max_attempts": 3, "initial_interval": "PT1S", "jitter": false}}}
	// The big part is args: a one-element array holding an object.
	inner := map[string]any{}
	raw := padded(t, inner, 1<<20-400)
	args["args"] = []json.RawMessage{raw}
	body, _ := json.Marshal(args)
	if len(body) < 1<<20-300 || len(body) > 1<<20 {
		t.Fatalf("envelope is %d bytes", len(body))
	}
	r := do(t, http.MethodPost, "/ojs/v1/jobs", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("push: %d %.300s", r.Status, r.Raw)
	}
	id := r.job(t)["id"].(string)
	done := waitQuiet(t, id, "completed", "discarded")
	if done["state"] != "completed" || num(done["attempt"]) != 2 {
		t.Fatalf("job at the envelope limit: state %v, attempt %v, error %v", done["state"], done["attempt"], done["error"])
	}
}

// waitQuiet is waitFor for big jobs: on failure it reports the job's state
// and attempt, not the whole job.
func waitQuiet(t *testing.T, id string, states ...string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(settle)
	var last map[string]any
	for time.Now().Before(deadline) {
		r := do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil)
		if obj, ok := r.Body["job"].(map[string]any); r.Status == http.StatusOK && ok {
			last = obj
			if slices.Contains(states, obj["state"].(string)) {
				return obj
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("job %s did not reach %v within %v; last state %v, attempt %v, error %v", id, states, settle, last["state"], last["attempt"], last["error"])
	return nil
}

// TestFetchAnswerStaysUnderLambdasResponseLimit: four jobs of 250 KiB
// of '<' (each 1.5 MB in the answer's JSON, where encoding/json
// writes '<' as \u003c) would make a 7 MB answer: the FETCH claims and
// returns only what fits Lambda's 6 MB response; the jobs it left are still
// available, their attempts untouched, and the next FETCH gets them.
func TestFetchAnswerStaysUnderLambdasResponseLimit(t *testing.T) {
	q := uniqueQueue(t)
	var ids []string
	for i := 0; i < 4; i++ {
		// Written by hand: json.Marshal would escape the '<' on the way in.
		body := `{"type":"big.job","args":["` + strings.Repeat("<", 250<<10) + `"],"options":{"queue":"` + q + `"}}`
		r := do(t, http.MethodPost, "/ojs/v1/jobs", body)
		if r.Status != http.StatusCreated {
			t.Fatalf("push: %d %.300s", r.Status, r.Raw)
		}
		ids = append(ids, r.job(t)["id"].(string))
	}
	fetch := func() []string {
		r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": len(ids), "worker_id": "big-" + q})
		if r.Status != http.StatusOK {
			t.Fatalf("fetch: %d %.300s", r.Status, r.Raw)
		}
		var got []string
		jobs, _ := r.Body["jobs"].([]any)
		for _, j := range jobs {
			got = append(got, j.(map[string]any)["id"].(string))
		}
		return got
	}
	got := fetch()
	if len(got) == 0 || len(got) >= len(ids) {
		t.Fatalf("fetched %d of %d jobs", len(got), len(ids))
	}
	var left []string
	for _, id := range ids {
		if slices.Contains(got, id) {
			continue
		}
		left = append(left, id)
		j := do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil).job(t)
		if j["state"] != "available" || num(j["attempt"]) != 0 {
			t.Fatalf("job %s left by the FETCH: state %v attempt %v", id, j["state"], j["attempt"])
		}
	}
	for len(left) > 0 {
		more := fetch()
		if len(more) == 0 {
			t.Fatalf("%d jobs left and the FETCH returned none", len(left))
		}
		left = slices.DeleteFunc(left, func(id string) bool { return slices.Contains(more, id) })
	}
}

// TestLargestFailuresOfALargeJobAreStored: a pull-mode job near the
// stored size limit (300 KiB of random base64, which compresses to about
// three quarters) fails three times with the largest error FAIL accepts
// (64 KiB of details, 50 frames of 1 KiB). Every FAIL is answered 200 and
// stored with its error cut to the history's byte budget, never a 500 from
// an item over DynamoDB's 400 KB.
func TestLargestFailuresOfALargeJobAreStored(t *testing.T) {
	q := uniqueQueue(t)
	j := push(t, map[string]any{"type": "big.fail", "args": []any{randomText(300<<10, 1)}, "options": map[string]any{"queue": q,
		"retry": map[string]any{"max_attempts": 3, "initial_interval": "PT1S", "backoff_coefficient": 1, "jitter": false}}})
	id := j["id"].(string)
	frames := make([]string, 50)
	for i := range frames {
		frames[i] = strings.Repeat("f", 1024)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		deadline := time.Now().Add(settle)
		for {
			r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-" + q})
			if jobs, _ := r.Body["jobs"].([]any); len(jobs) == 1 {
				break
			}
			if r.Status != http.StatusOK || time.Now().After(deadline) {
				t.Fatalf("fetch of attempt %d: %d %.300s", attempt, r.Status, r.Raw)
			}
			time.Sleep(100 * time.Millisecond)
		}
		r := do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id, "worker_id": "w-" + q, "error": map[string]any{
			"type": "big.error", "message": strings.Repeat("m", 60<<10), "backtrace": frames,
			"details": map[string]any{"dump": strings.Repeat("d", 60<<10)}}})
		if r.Status != http.StatusOK {
			t.Fatalf("fail %d: %d %.300s", attempt, r.Status, r.Raw)
		}
	}
	done := waitQuiet(t, id, "discarded")
	errs, _ := done["errors"].([]any)
	raw, _ := json.Marshal(errs)
	if len(errs) != 3 || len(raw) > 48<<10 {
		t.Fatalf("history of %d errors, %d bytes", len(errs), len(raw))
	}
	last := errs[2].(map[string]any)
	if d, _ := last["details"].(map[string]any); d["truncated"] != true {
		t.Fatalf("details not marked truncated: %.200v", last["details"])
	}
}

// TestALargeBatchIsWrittenWithItsArgsCompressed: 100 jobs of 41 KB of
// random base64 fill the 4 MiB request body; as stored (args compressed
// to about three quarters) they fit DynamoDB's transactions (4 MB of items
// each, which DynamoDB Local enforces too; written uncompressed, the batch
// was refused with 413), so every job is created, its args read back as
// sent. (pkg/store tests the transaction limit itself.)
func TestALargeBatchIsWrittenWithItsArgsCompressed(t *testing.T) {
	q := uniqueQueue(t)
	var jobs []map[string]any
	for i := 0; i < 100; i++ {
		jobs = append(jobs, map[string]any{"id": uuid.Must(uuid.NewV7()).String(), "type": "big.batch",
			"args": []any{randomText(41_500, uint64(i))}, "options": map[string]any{"queue": q}})
	}
	body, _ := json.Marshal(map[string]any{"jobs": jobs})
	if len(body) > 4<<20 || len(body) < 4_100_000 {
		t.Fatalf("body of %d bytes", len(body))
	}
	r := do(t, http.MethodPost, "/ojs/v1/jobs/batch", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("batch: %d %.400s", r.Status, r.Raw)
	}
	for _, i := range []int{0, 50, 99} {
		g := do(t, http.MethodGet, "/ojs/v1/jobs/"+jobs[i]["id"].(string), nil)
		args, _ := g.job(t)["args"].([]any)
		if len(args) != 1 || args[0] != jobs[i]["args"].([]any)[0] {
			t.Fatalf("job %d of the batch: args differ", i)
		}
	}
}

// TestAMiBEnvelopeThatDoesNotCompressIsRefused: args of 600 KiB of random
// base64 make an envelope under 1 MiB that, stored, would still pass what
// a job item may take (store.MaxJobItemBytes, room left for its result and
// errors in 400 KB): 413 payload_too_large naming the stored size, nothing
// written. The same data in a workflow step is a 400 naming the step.
func TestAMiBEnvelopeThatDoesNotCompressIsRefused(t *testing.T) {
	q := uniqueQueue(t)
	id := uuid.Must(uuid.NewV7()).String()
	blob := randomText(600<<10, 42)
	r := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"id": id, "type": "blob.put", "args": []any{blob}, "options": map[string]any{"queue": q}})
	details, _ := r.Body["error"].(map[string]any)["details"].(map[string]any)
	if r.Status != http.StatusRequestEntityTooLarge || r.errCode() != "payload_too_large" ||
		num(details["stored_bytes"]) <= num(details["max_stored_bytes"]) || details["field"] != "args" {
		t.Fatalf("push: %d %.400s", r.Status, r.Raw)
	}
	if g := do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil); g.Status != http.StatusNotFound {
		t.Fatalf("the refused job: %d", g.Status)
	}
	w := do(t, http.MethodPost, "/ojs/v1/workflows", map[string]any{"type": "chain", "steps": []any{
		map[string]any{"type": "small.step", "args": []any{1}, "options": map[string]any{"queue": q}},
		map[string]any{"type": "blob.put", "args": []any{blob}, "options": map[string]any{"queue": q}}}})
	if w.Status != http.StatusBadRequest || !strings.Contains(string(w.Raw), "steps[1].args") || !strings.Contains(string(w.Raw), "as stored") {
		t.Fatalf("workflow: %d %.600s", w.Status, w.Raw)
	}
}

// TestAWorkflowStepOfAMiBRuns: a chain whose second step carries 1 MiB of
// JSON args, and a compensation as large (stored compressed, in the step's
// node and then its job), runs to its end, the step receiving its args as
// sent.
func TestAWorkflowStepOfAMiBRuns(t *testing.T) {
	q := uniqueQueue(t)
	var b strings.Builder
	for i := 0; b.Len() < 1<<20-4096; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"entry":%d,"amount":"%d.%02d"}`, i, i%9000, i%100)
	}
	rows := json.RawMessage("[" + b.String() + "]")
	body, _ := json.Marshal(map[string]any{"type": "chain", "steps": []any{
		map[string]any{"type": "small.step", "args": []any{1}, "options": map[string]any{"queue": q}},
		map[string]any{"type": "ledger.import", "args": []any{rows}, "options": map[string]any{"queue": q},
			"compensate": map[string]any{"type": "ledger.revert", "args": []any{rows}, "options": map[string]any{"queue": q}}}}})
	if len(body) > 2<<20+1024 {
		t.Fatalf("workflow body of %d bytes", len(body))
	}
	wf := createWorkflow(t, string(body))
	got := map[string]int{}
	work(t, q, wf["id"].(string), func(j map[string]any) (any, string) {
		raw, _ := json.Marshal(j["args"])
		got[j["type"].(string)] = len(raw)
		return "ok", ""
	})
	if want := len(rows) + 2; got["ledger.import"] != want || got["small.step"] == 0 {
		t.Fatalf("steps ran with args of %v bytes, want %d for ledger.import", got, want)
	}
}

// randomText is n characters of random base64: JSON text that compresses
// to about three quarters, the least of any JSON a client is likely to send.
func randomText(n int, seed uint64) string {
	raw := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)[:n]
}

// TestDeadLetterListsOfLargeJobsFitLambdasResponse: four dead jobs of
// 250 KiB of '<' (about 1.8 MB each in the answer's JSON, where
// encoding/json writes '<' as \u003c) would make a 7 MB list, over
// Lambda's 6 MB response. GET /ojs/v1/dead-letter answers fewer with
// has_more. The Admin API's list, whose items leave args out, lists every
// job once.
func TestDeadLetterListsOfLargeJobsFitLambdasResponse(t *testing.T) {
	q := uniqueQueue(t)
	var ids []string
	for i := 0; i < 4; i++ {
		// Written by hand: json.Marshal would escape the '<' on the way in.
		body := `{"type":"big.dead","args":["` + strings.Repeat("<", 250<<10) + `"],"options":{"queue":"` + q + `","retry":{"max_attempts":1}}}`
		r := do(t, http.MethodPost, "/ojs/v1/jobs", body)
		if r.Status != http.StatusCreated {
			t.Fatalf("push: %d %.300s", r.Status, r.Raw)
		}
		id := r.job(t)["id"].(string)
		ids = append(ids, id)
		f := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-" + q})
		if jobs, _ := f.Body["jobs"].([]any); f.Status != http.StatusOK || len(jobs) != 1 {
			t.Fatalf("fetch: %d %.200s", f.Status, f.Raw)
		}
		if n := do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id, "worker_id": "w-" + q, "error": map[string]any{"message": "boom"}}); n.Status != http.StatusOK {
			t.Fatalf("nack: %d %.200s", n.Status, n.Raw)
		}
	}
	r := do(t, http.MethodGet, "/ojs/v1/dead-letter?queue="+q, nil)
	jobs, _ := r.Body["jobs"].([]any)
	page, _ := r.Body["pagination"].(map[string]any)
	if r.Status != http.StatusOK || len(jobs) == 0 || len(jobs) >= len(ids) || page["has_more"] != true {
		t.Fatalf("dead letter list: %d, %d jobs, pagination %v", r.Status, len(jobs), page)
	}
	seen := map[string]int{}
	cursor := ""
	for pages := 0; pages < len(ids); pages++ {
		path := "/ojs/v1/admin/dead-letter?queue=" + q
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := do(t, http.MethodGet, path, nil)
		items, _ := r.Body["items"].([]any)
		if r.Status != http.StatusOK || len(items) == 0 {
			t.Fatalf("admin page %d: %d, %d items", pages, r.Status, len(items))
		}
		for _, it := range items {
			raw, _ := json.Marshal(it)
			for _, id := range ids {
				if strings.Contains(string(raw), id) {
					seen[id]++
				}
			}
		}
		pg, _ := r.Body["pagination"].(map[string]any)
		if cursor, _ = pg["next_cursor"].(string); cursor == "" || pg["has_more"] != true {
			break
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("admin pages listed job %s %d times (all: %v)", id, seen[id], seen)
		}
	}
}

// TestAGzipPushOfAMiBEnvelope: a 1 MiB envelope sent gzip-compressed
// (Content-Encoding: gzip, ojs-payload-limits.md 6) crosses API Gateway as
// a base64 body and is created whole; a body that would expand past the
// 4 MiB request limit is a 413.
func TestAGzipPushOfAMiBEnvelope(t *testing.T) {
	q := uniqueQueue(t)
	var b strings.Builder
	b.WriteString(`{"type":"ledger.import","options":{"queue":"` + q + `"},"args":[[`)
	for i := 0; b.Len() < 1<<20-1024; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"entry":%d,"amount":"%d.%02d"}`, i, i%9000, i%100)
	}
	b.WriteString(`]]}`)
	zipped := func(s string) []byte {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return z.Bytes()
	}
	body := zipped(b.String())
	r := do(t, http.MethodPost, "/ojs/v1/jobs", body, "Content-Encoding", "gzip")
	if r.Status != http.StatusCreated {
		t.Fatalf("gzip push: %d %.300s", r.Status, r.Raw)
	}
	got := do(t, http.MethodGet, "/ojs/v1/jobs/"+r.job(t)["id"].(string), nil).job(t)
	args, _ := json.Marshal(got["args"])
	var sent map[string]json.RawMessage
	_ = json.Unmarshal([]byte(b.String()), &sent)
	var want any
	_ = json.Unmarshal(sent["args"], &want)
	wantRaw, _ := json.Marshal(want)
	if string(args) != string(wantRaw) {
		t.Fatalf("args read back: %d bytes, want %d", len(args), len(wantRaw))
	}
	bomb := zipped(`{"type":"a.b","args":["` + strings.Repeat("0", 5<<20) + `"]}`)
	if r := do(t, http.MethodPost, "/ojs/v1/jobs", bomb, "Content-Encoding", "gzip"); r.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body expanding to 5 MiB: %d %.300s", r.Status, r.Raw)
	}
}

// TestEventsOfLargeResultsFitLambdasResponse: 100 jobs completed with
// results of 64 KiB (the largest a result may be) make 6.5 MB of
// job.completed events, past Lambda's 6 MB response: GET /ojs/v1/events
// answers a page under 4 MiB with has_more, and the pages after its cursor
// hold the rest, each event once.
func TestEventsOfLargeResultsFitLambdasResponse(t *testing.T) {
	q := uniqueQueue(t)
	const n = 100
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	result := strings.Repeat("0123456789abcdef", (64<<10-2)/16)
	ids := map[string]bool{}
	for i := 0; i < n; i++ {
		ids[push(t, map[string]any{"type": "big.result", "args": []any{i}, "options": map[string]any{"queue": q}})["id"].(string)] = true
	}
	for acked := 0; acked < n; {
		r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 10, "worker_id": "w-" + q})
		jobs, _ := r.Body["jobs"].([]any)
		if r.Status != http.StatusOK || len(jobs) == 0 {
			t.Fatalf("fetch after %d acks: %d %.200s", acked, r.Status, r.Raw)
		}
		for _, j := range jobs {
			if a := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": j.(map[string]any)["id"], "result": result}); a.Status != http.StatusOK {
				t.Fatalf("ack: %d %.200s", a.Status, a.Raw)
			}
			acked++
		}
	}
	// Wait until more than a page's bytes of events are stored (they trail
	// their jobs by the stream's delay): the first page then ends early.
	first := "/ojs/v1/events?types=job.completed&queues=" + q + "&limit=100&since=" + since
	deadline := time.Now().Add(settle)
	var r response
	for {
		r = do(t, http.MethodGet, first, nil)
		if r.Status != http.StatusOK || len(r.Raw) > 4<<20+64<<10 {
			t.Fatalf("events: %d, %d bytes", r.Status, len(r.Raw))
		}
		if r.Body["has_more"] == true || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if evs, _ := r.Body["events"].([]any); len(evs) >= n || r.Body["has_more"] != true {
		t.Fatalf("first page: %d events, has_more %v", len(evs), r.Body["has_more"])
	}
	byEvent := map[string]string{} // event id -> job id (a cursor may repeat events stored late)
	for {
		evs, _ := r.Body["events"].([]any)
		for _, e := range evs {
			m := e.(map[string]any)
			byEvent[m["id"].(string)], _ = m["data"].(map[string]any)["job_id"].(string)
		}
		cursor, _ := r.Body["cursor"].(string)
		if len(byEvent) >= n || time.Now().After(deadline) || cursor == "" {
			break
		}
		if len(evs) == 0 {
			time.Sleep(200 * time.Millisecond)
		}
		r = do(t, http.MethodGet, "/ojs/v1/events?types=job.completed&queues="+q+"&limit=100&after="+cursor, nil)
		if r.Status != http.StatusOK || len(r.Raw) > 4<<20+64<<10 {
			t.Fatalf("events after a cursor: %d, %d bytes", r.Status, len(r.Raw))
		}
	}
	perJob := map[string]int{}
	for _, id := range byEvent {
		perJob[id]++
	}
	for id := range ids {
		if perJob[id] != 1 {
			t.Fatalf("job %s: %d job.completed events over the pages (%d events read)", id, perJob[id], len(byEvent))
		}
	}
}
