package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
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
func send(method, path string, body any, headers ...string) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
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
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := response{Status: res.StatusCode, Header: res.Header, Raw: raw}
	_ = json.Unmarshal(raw, &out.Body)
	return out, nil
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
