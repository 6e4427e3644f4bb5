package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestEncodedArgsSurviveEveryStateChange: the encryption extension's
// server side. Encoded args and the codec meta (flat keys with dots, as
// clients write them) come back unchanged from PUSH, FETCH, a failed
// attempt (FAIL on /jobs/{id}/nack), the dead letter queue, its retry and
// the final ACK: the server never decodes or rewrites them.
func TestEncodedArgsSurviveEveryStateChange(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	args := []any{"ZW5jcnlwdGVkLXBheWxvYWQ="}
	meta := map[string]any{"ojs_encoded": true, "ojs.codec.encodings": []any{"zstd", "aes-256-gcm"}, "ojs.codec.key_id": "k-1",
		"ojs.codec.nonce": "bm9uY2U=", "tenant": map[string]any{"z": 1, "a": 2}}
	want, _ := json.Marshal(map[string]any{"args": args, "meta": meta})
	check := func(what string, j map[string]any) {
		t.Helper()
		if got, _ := json.Marshal(map[string]any{"args": j["args"], "meta": j["meta"]}); string(got) != string(want) {
			t.Fatalf("%s: args and meta %s, want %s", what, got, want)
		}
	}
	j := push(t, map[string]any{"type": "enc.t", "args": args, "meta": meta, "options": map[string]any{"queue": q, "retry": map[string]any{"max_attempts": 1}}})
	id := j["id"].(string)
	check("push", j)
	fetch := func(what string) {
		t.Helper()
		r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-enc"})
		jobs, _ := r.Body["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("%s: %s", what, r.Raw)
		}
		check(what, jobs[0].(map[string]any))
	}
	fetch("fetch")
	if r := do(t, http.MethodPost, "/ojs/v1/jobs/"+id+"/nack", map[string]any{"error": map[string]any{"code": "x", "message": "no"}}); r.Status != 200 || r.Body["state"] != "discarded" {
		t.Fatalf("nack: %d %s", r.Status, r.Raw)
	}
	check("dead letter", do(t, http.MethodGet, "/ojs/v1/dead-letter/"+id, nil).job(t))
	check("dead letter retry", do(t, http.MethodPost, "/ojs/v1/dead-letter/"+id+"/retry", map[string]any{}).job(t))
	fetch("fetch after the retry")
	if r := do(t, http.MethodPost, "/ojs/v1/jobs/"+id+"/ack", map[string]any{}); r.Status != 200 {
		t.Fatalf("ack: %d %s", r.Status, r.Raw)
	}
	check("completed", do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil).job(t))
}
