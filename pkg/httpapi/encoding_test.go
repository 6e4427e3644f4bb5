package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
)

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A request body sent with Content-Encoding: gzip is decompressed before
// it is read (ojs-payload-limits.md 6.2); the 4 MiB body limit applies to
// what it expands to, so a small body of zeros is a 413, not 4 GB read;
// data that is not gzip is a 400, another encoding a 415.
func TestGzipRequestBodies(t *testing.T) {
	t.Parallel()
	bomb := gzipped(t, `{"queues":["a"],"pad":"`+strings.Repeat("0", httpapi.MaxBodyBytes)+`"}`)
	if len(bomb) > 64<<10 {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}
	for _, c := range []struct {
		name     string
		encoding string
		body     []byte
		code     int
		errCode  string
		count    int
	}{
		{"gzip", "gzip", gzipped(t, `{"queues":["a"],"count":7}`), 200, "", 7},
		{"x-gzip, any case", " X-GZIP", gzipped(t, `{"queues":["a"],"count":3}`), 200, "", 3},
		{"identity", "identity", []byte(`{"queues":["a"],"count":2}`), 200, "", 2},
		{"gzip of invalid JSON", "gzip", gzipped(t, `{"queues":`), 400, "invalid_payload", 0},
		{"not gzip", "gzip", []byte(`{"queues":["a"]}`), 400, "invalid_payload", 0},
		{"truncated gzip", "gzip", gzipped(t, `{"queues":["a"],"count":7}`)[:20], 400, "invalid_request", 0},
		{"expands past the body limit", "gzip", bomb, 413, "invalid_request", 0},
		{"br", "br", []byte(`{"queues":["a"]}`), 415, "invalid_request", 0},
	} {
		rec := &fetchRecorder{}
		srv := httpapi.New(httpapi.Services{Worker: rec}, nil, nil, httpapi.Config{Logger: slog.New(slog.DiscardHandler)})
		req := httptest.NewRequest("POST", "/ojs/v1/workers/fetch", bytes.NewReader(c.body))
		req.Header.Set("Content-Type", httpapi.ContentType)
		req.Header.Set("Content-Encoding", c.encoding)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != c.code || (c.errCode != "" && !strings.Contains(w.Body.String(), `"code":"`+c.errCode+`"`)) {
			t.Errorf("%s: %d %s, want %d %s", c.name, w.Code, w.Body, c.code, c.errCode)
			continue
		}
		if c.code == 200 && (len(rec.got) != 1 || rec.got[0].Count != c.count) {
			t.Errorf("%s: the FETCH asked for %+v, want count %d", c.name, rec.got, c.count)
		}
	}
}
