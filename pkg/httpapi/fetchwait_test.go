package httpapi_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// fetchRecorder is a worker service that records the FETCH the API asks
// of it (every other method is the nil interface's: unused here).
type fetchRecorder struct {
	httpapi.Worker
	got []lifecycle.FetchRequest
}

func (f *fetchRecorder) Fetch(_ context.Context, r lifecycle.FetchRequest) ([]*job.Job, error) {
	f.got = append(f.got, r)
	return []*job.Job{}, nil
}

// A FETCH's wait_ms is its long poll; without it the server's FetchWait
// applies; an explicit 0 answers at once even on a server that waits; a
// wait outside 0..20000 ms is a 400 naming the field.
func TestFetchWaitMS(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		server time.Duration
		body   string
		code   int
		wait   time.Duration
	}{
		{0, `{"queues":["a"]}`, 200, 0},
		{2 * time.Second, `{"queues":["a"]}`, 200, 2 * time.Second},
		{2 * time.Second, `{"queues":["a"],"wait_ms":0}`, 200, 0},
		{2 * time.Second, `{"queues":["a"],"wait_ms":null}`, 200, 2 * time.Second},
		{0, `{"queues":["a"],"wait_ms":1500}`, 200, 1500 * time.Millisecond},
		{0, `{"queues":["a"],"wait_ms":20000}`, 200, 20 * time.Second},
		{0, `{"queues":["a"],"wait_ms":20001}`, 400, 0},
		{0, `{"queues":["a"],"wait_ms":-1}`, 400, 0},
		{0, `{"queues":["a"],"wait_ms":"5"}`, 400, 0},
		{0, `{"queues":["a"],"wait_ms":2.5}`, 400, 0},
	} {
		rec := &fetchRecorder{}
		srv := httpapi.New(httpapi.Services{Worker: rec}, nil, nil, httpapi.Config{Logger: slog.New(slog.DiscardHandler), FetchWait: c.server})
		req := httptest.NewRequest("POST", "/ojs/v1/workers/fetch", strings.NewReader(c.body))
		req.Header.Set("Content-Type", httpapi.ContentType)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != c.code {
			t.Errorf("server wait %v, %s: %d %s, want %d", c.server, c.body, w.Code, w.Body, c.code)
			continue
		}
		if c.code != 200 {
			if len(rec.got) != 0 || !strings.Contains(w.Body.String(), "wait_ms") {
				t.Errorf("%s: fetched %v; answer %s", c.body, rec.got, w.Body)
			}
			continue
		}
		if len(rec.got) != 1 || rec.got[0].Wait != c.wait {
			t.Errorf("server wait %v, %s: fetched %+v, want wait %v", c.server, c.body, rec.got, c.wait)
		}
	}
}

// A FETCH's capabilities and labels reach the worker service as the
// worker's Capabilities (the ML resources extension); a FETCH without them
// states none; capabilities of the wrong shape are a 400.
func TestFetchCapabilities(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body string
		code int
		gpus int
		zone string
	}{
		{`{"queues":["a"]}`, 200, -1, ""},
		{`{"queues":["a"],"capabilities":{"gpu":{"count":4,"type":"nvidia-a100"}},"labels":["zone:b"]}`, 200, 4, "b"},
		{`{"queues":["a"],"labels":{"zone":"c"}}`, 200, 0, "c"},
		{`{"queues":["a"],"capabilities":{"gpu":{"count":"4"}}}`, 400, 0, ""},
		{`{"queues":["a"],"labels":"zone"}`, 400, 0, ""},
	} {
		rec := &fetchRecorder{}
		srv := httpapi.New(httpapi.Services{Worker: rec}, nil, nil, httpapi.Config{Logger: slog.New(slog.DiscardHandler)})
		req := httptest.NewRequest("POST", "/ojs/v1/workers/fetch", strings.NewReader(c.body))
		req.Header.Set("Content-Type", httpapi.ContentType)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != c.code {
			t.Errorf("%s: %d %s, want %d", c.body, w.Code, w.Body, c.code)
			continue
		}
		if c.code != 200 {
			continue
		}
		got := rec.got[0].Worker
		switch {
		case c.gpus < 0 && got != nil:
			t.Errorf("%s: capabilities %+v, want none", c.body, got)
		case c.gpus >= 0 && (got == nil || got.GPU.Count != c.gpus || got.Labels["zone"] != c.zone):
			t.Errorf("%s: capabilities %+v", c.body, got)
		}
	}
}
