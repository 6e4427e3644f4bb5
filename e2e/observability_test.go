package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/metrics"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// logLines returns the JSON lines of a function's log.
func logLines(t *testing.T, fn string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(logDir, fn+".log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// findLine returns the first line of fn's log for which match holds,
// waiting up to the settle time for it to be written.
func findLine(t *testing.T, fn, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		for _, l := range logLines(t, fn) {
			if match(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s.log has no line with %s within %v", fn, what, settle)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLogsCarryRequestAndJobIDs: every function line about a job names the
// job and the Lambda invocation, so one request can be followed from the
// API through the worker. The API's access line is DEBUG (a server
// error's WARN): API Gateway's access log has one per request.
func TestLogsCarryRequestAndJobIDs(t *testing.T) {
	if logDir == "" {
		t.Skip("the function logs of a remote deployment are not readable here")
	}
	t.Parallel()
	id := push(t, map[string]any{"type": "test.echo", "args": []any{"ids"}, "options": map[string]any{"queue": pushQueue}})["id"].(string)
	waitFor(t, id, "completed")

	pushed := findLine(t, topology.FunctionAPI, "job pushed "+id, func(l map[string]any) bool {
		return l["msg"] == "job pushed" && l["job_id"] == id
	})
	rid, _ := pushed["aws_request_id"].(string)
	if rid == "" {
		t.Fatalf("api line without aws_request_id: %v", pushed)
	}
	// The access line is DEBUG (API Gateway's access log has one per
	// request): none at the local stack's INFO level.
	for _, l := range logLines(t, topology.FunctionAPI) {
		if l["msg"] == "http request" && l["level"] != "WARN" {
			t.Fatalf("the api function wrote an access line below WARN: %v", l)
		}
	}
	ran := findLine(t, topology.FunctionWorker, "handler outcome of "+id, func(l map[string]any) bool {
		return l["msg"] == "job handler succeeded" && l["job_id"] == id
	})
	if wrid, _ := ran["aws_request_id"].(string); wrid == "" || wrid == rid {
		t.Errorf("worker line has aws_request_id %q; want its own invocation's (the api's was %q)", wrid, rid)
	}
}

// TestLifecycleMetricsAreEmitted: the stream function writes the job
// lifecycle as CloudWatch embedded-metric-format lines per queue. A job on
// a queue of its own is pushed, fetched and acknowledged; the stream log
// then holds EMF documents for that queue with the job enqueued, started
// and completed and its latencies.
func TestLifecycleMetricsAreEmitted(t *testing.T) {
	if logDir == "" {
		t.Skip("the function logs of a remote deployment are not readable here")
	}
	t.Parallel()
	q := uniqueQueue(t) + "-metrics"
	id := push(t, map[string]any{"type": "metrics.job", "args": []any{}, "options": map[string]any{"queue": q}})["id"].(string)
	f := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w-metrics"})
	if jobs, _ := f.Body["jobs"].([]any); f.Status != http.StatusOK || len(jobs) != 1 {
		t.Fatalf("fetch: %d %s", f.Status, f.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": id, "result": map[string]any{"ok": true}}); r.Status != http.StatusOK {
		t.Fatalf("ack: %d %s", r.Status, r.Raw)
	}
	waitFor(t, id, "completed")

	seen := map[string]bool{}
	findLine(t, topology.FunctionStream, "EMF documents for queue "+q, func(l map[string]any) bool {
		if l[metrics.DimensionQueue] != q || l["_aws"] == nil {
			return false
		}
		if l[metrics.DimensionEnvironment] != "local" {
			t.Fatalf("EMF document with environment %v, want local: %v", l[metrics.DimensionEnvironment], l)
		}
		aws := l["_aws"].(map[string]any)
		cw := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
		if cw["Namespace"] != metrics.Namespace {
			t.Fatalf("namespace %v", cw["Namespace"])
		}
		for _, m := range cw["Metrics"].([]any) {
			name := m.(map[string]any)["Name"].(string)
			if _, ok := l[name]; !ok {
				t.Fatalf("metric %s declared but absent: %v", name, l)
			}
			seen[name] = true
		}
		// Lines are read again on every poll; the last poll sees them all.
		return seen[metrics.JobsEnqueued] && seen[metrics.JobsStarted] && seen[metrics.JobsCompleted] &&
			seen[metrics.JobWaitTime] && seen[metrics.JobDuration] && seen[metrics.JobLatency]
	})
}
