package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"
)

// counters are the soak's own tallies (faults it injects itself, retries).
type counters struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counters) add(k string, n int) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k] += n
	c.mu.Unlock()
}

func (c *counters) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *counters) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// client calls the API the way a careful client does: an answer lost to a
// crash or a 5xx is retried (the soak's fault points make both common).
type client struct {
	base  string
	http  *http.Client
	count *counters
}

// once sends one request.
func (c *client) once(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case []byte:
			rd = bytes.NewReader(b)
		default:
			raw, _ := json.Marshal(b)
			rd = bytes.NewReader(raw)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/openjobspec+json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res.StatusCode, raw, err
}

// call retries transport errors and 5xx answers (up to 8 tries). retried
// reports whether an earlier try may have taken effect.
func (c *client) call(ctx context.Context, method, path string, body any) (status int, raw []byte, retried bool) {
	for try := 0; ; try++ {
		st, b, err := c.once(ctx, method, path, body)
		if err == nil && st < 500 {
			return st, b, try > 0
		}
		if ctx.Err() != nil || try >= 7 {
			return st, b, try > 0
		}
		c.count.add("client: retried a lost or failed answer", 1)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(100*(try+1)) * time.Millisecond):
		}
	}
}
