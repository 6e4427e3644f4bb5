package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

type response struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

func do(t *testing.T, method, path string, body any, headers ...string) response {
	t.Helper()
	r, err := send(method, path, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// send is do without a test: for requests made off the test's goroutine.
// A throttled request is sent again (see throttled).
func send(method, path string, body any, headers ...string) (response, error) {
	var payload []byte
	switch b := body.(type) {
	case nil:
	case string:
		payload = []byte(b)
	case []byte:
		payload = b
	default:
		payload, _ = json.Marshal(b)
	}
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(payload)
		}
		req, err := http.NewRequest(method, baseURL+path, rd)
		if err != nil {
			return response{}, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/openjobspec+json")
		}
		if authToken != "" {
			req.Header.Set("Authorization", "Bearer "+authToken)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		res, err := client.Do(req)
		if err != nil {
			return response{}, err
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		out := response{Status: res.StatusCode, Header: res.Header, Raw: raw}
		_ = json.Unmarshal(raw, &out.Body)
		if !out.throttled() || attempt == throttleRetries {
			return out, nil
		}
		time.Sleep(retryDelay(attempt, res.Header.Get("Retry-After")))
	}
}

// throttleRetries bounds how often send repeats a throttled request.
const throttleRetries = 6

// throttled reports a 429 that is not an OJS answer: API Gateway's stage
// limits or Lambda's concurrency refused the request before the function
// ran, so sending it again is safe, and a deployed stage may throttle a
// suite whose tests run in parallel. The local stack never throttles. An
// OJS error (rate_limited) reaches the test as it is.
func (r response) throttled() bool {
	return r.Status == http.StatusTooManyRequests && r.Body["error"] == nil
}

// retryDelay is the wait before sending a throttled request again:
// Retry-After when the answer has one (at most 30 s), else an exponential
// backoff from 250 ms up to 8 s with jitter (half fixed, half random).
func retryDelay(attempt int, retryAfter string) time.Duration {
	const maxWait = 30 * time.Second
	if s, err := strconv.Atoi(strings.TrimSpace(retryAfter)); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, maxWait)
	}
	if t, err := http.ParseTime(retryAfter); err == nil {
		return min(max(time.Until(t), 0), maxWait)
	}
	d := min(250*time.Millisecond<<attempt, 8*time.Second)
	return d/2 + rand.N(d/2+1)
}

func (r response) job(t *testing.T) map[string]any {
	t.Helper()
	j, ok := r.Body["job"].(map[string]any)
	if !ok {
		t.Fatalf("no job in response %d: %s", r.Status, r.Raw)
	}
	return j
}

// errCode is the error's specific kind: its code, or its type when the
// code is a mapped one (invalid_request with type invalid_workflow,
// x_unauthenticated with type unauthenticated; see docs/errors.md).
func (r response) errCode() string {
	e, _ := r.Body["error"].(map[string]any)
	s, _ := e["code"].(string)
	typ, _ := e["type"].(string)
	if (s == "invalid_request" || strings.HasPrefix(s, "x_")) && typ != "" {
		return typ
	}
	return s
}

// wireCode is the error's code as sent.
func (r response) wireCode() string {
	e, _ := r.Body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func push(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	r := do(t, http.MethodPost, "/ojs/v1/jobs", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("push: %d %s", r.Status, r.Raw)
	}
	return r.job(t)
}

// settle bounds every wait for something the stack does asynchronously
// (the stream poller, the sweeper, the worker function). It is generous on
// purpose: CI runs this suite beside the 10,000-job scale proof on two
// cores, where the stream poller can lag many seconds, and no test may fail
// because the machine was slow. A correct stack settles in well under a
// second when idle; a lost job or workflow still fails the test. OJS_E2E_SETTLE
// (a Go duration) overrides it.
var settle = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("OJS_E2E_SETTLE")); err == nil && d > 0 {
		return d
	}
	return 2 * time.Minute
}()

// waitState polls GET path until the object under key reaches one of
// states within the settle time, and returns it.
func waitState(t *testing.T, path, key string, states ...string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(settle)
	var last map[string]any
	for time.Now().Before(deadline) {
		r := do(t, http.MethodGet, path, nil)
		if obj, ok := r.Body[key].(map[string]any); r.Status == http.StatusOK && ok {
			last = obj
			for _, s := range states {
				if last["state"] == s {
					return last
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not reach %v within %v; last: %v", path, states, settle, last)
	return nil
}

// waitFor polls INFO until the job reaches one of states.
func waitFor(t *testing.T, id string, states ...string) map[string]any {
	t.Helper()
	return waitState(t, "/ojs/v1/jobs/"+id, "job", states...)
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

func uniqueQueue(t *testing.T) string {
	return fmt.Sprintf("e2e-%d-%d", time.Now().UnixNano()%1e9, len(t.Name()))
}

// TestThrottleRetry checks send's retry rule and its waits (no requests).
func TestThrottleRetry(t *testing.T) {
	t.Parallel()
	gateway := response{Status: http.StatusTooManyRequests, Body: map[string]any{"message": "Too Many Requests"}}
	ojs := response{Status: http.StatusTooManyRequests, Body: map[string]any{"error": map[string]any{"code": "rate_limited"}}}
	if !gateway.throttled() || ojs.throttled() || (response{Status: http.StatusServiceUnavailable}).throttled() {
		t.Error("only a 429 that is not an OJS error is retried")
	}
	if d := retryDelay(0, "3"); d != 3*time.Second {
		t.Errorf("Retry-After: 3 waits %v", d)
	}
	if d := retryDelay(0, "600"); d != 30*time.Second {
		t.Errorf("Retry-After: 600 waits %v, want the 30s cap", d)
	}
	if d := retryDelay(0, time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)); d != 0 {
		t.Errorf("a Retry-After date in the past waits %v", d)
	}
	total := time.Duration(0)
	for a := range throttleRetries {
		d := retryDelay(a, "")
		lo := min(250*time.Millisecond<<a, 8*time.Second) / 2
		if d < lo || d > 2*lo {
			t.Errorf("attempt %d waits %v, want %v to %v", a, d, lo, 2*lo)
		}
		total += d
	}
	if total > 20*time.Second {
		t.Errorf("the retries of one request wait %v in all", total)
	}
}
