package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
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
// 256 KiB envelope limit goes through the stream relay, SQS (whose queue
// takes 256 KiB messages, as on AWS) and the worker function twice (it
// fails once and is retried), and completes. Its SQS messages carry the
// job's reference, not the job.
func TestPushModeJobAtTheEnvelopeLimitRuns(t *testing.T) {
	t.Parallel()
	args := map[string]any{"type": "test.fail_once", "options": map[string]any{"queue": pushQueue,
		"retry": map[string]any{"max_attempts": 3, "initial_interval": "PT1S", "jitter": false}}}
	// The big part is args: a one-element array holding an object.
	inner := map[string]any{}
	raw := padded(t, inner, 256<<10-400)
	args["args"] = []json.RawMessage{raw}
	body, _ := json.Marshal(args)
	if len(body) < 256<<10-300 || len(body) > 256<<10 {
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
