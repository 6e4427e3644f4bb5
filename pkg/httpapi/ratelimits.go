package httpapi

import (
	"context"
	"net/http"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
)

// RateLimits serves the rate-limiting extension (urn:ojs:ext:rate-limiting):
// a key's state, an operator's override of its limits, the listing of
// keys and the X-RateLimit-* headers of an enqueue of keyed jobs
// (implemented by *queue.Service; the API uses Services.Queues when it
// implements it).
type RateLimits interface {
	KeyInfo(ctx context.Context, key string) (*ratelimit.Info, error)
	OverrideKey(ctx context.Context, key string, body []byte) (*ratelimit.Info, error)
	ListKeys(ctx context.Context, page, perPage int) (*queue.KeyPage, error)
	KeyHeaders(jobs ...*job.Job) map[string]string
}

var _ RateLimits = (*queue.Service)(nil)

// addRateLimits registers the rate limit keys' routes
// (ojs-rate-limiting.md 10.1-10.3): GET /ojs/v1/rate-limits[/{key}], and
// PUT and DELETE /ojs/v1/rate-limits/{key} (an operator's override, admin
// level).
func (s *Server) addRateLimits(a *api) {
	if a.limits == nil {
		return
	}
	const p = "/ojs/v1/rate-limits"
	s.add(LevelProducer, http.MethodGet, p, paged(func(r *http.Request, page, per int) (any, error) {
		return a.limits.ListKeys(r.Context(), page, per)
	}))
	s.add(LevelProducer, http.MethodGet, p+"/{key}", byPath("", "key", a.limits.KeyInfo))
	s.add(LevelAdmin, http.MethodPut, p+"/{key}", withBody(func(r *http.Request, p params, raw []byte) (any, error) {
		return a.limits.OverrideKey(r.Context(), p("key"), raw)
	}))
	s.add(LevelAdmin, http.MethodDelete, p+"/{key}", ok(func(r *http.Request, p params) (any, error) {
		return a.limits.OverrideKey(r.Context(), p("key"), nil)
	}))
}

// keyHeaders adds the X-RateLimit-* headers of the keyed jobs enqueued.
func (a *api) keyHeaders(w http.ResponseWriter, jobs ...*job.Job) {
	if a.limits == nil {
		return
	}
	for k, v := range a.limits.KeyHeaders(jobs...) {
		w.Header().Set(k, v)
	}
}
