package httpapi

import (
	"context"
	"net/http"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
)

// RateLimits serves the rate-limiting extension (urn:ojs:ext:rate-limiting):
// a key's state and the X-RateLimit-* headers of an enqueue of keyed jobs
// (implemented by *queue.Service; the API uses Services.Queues when it
// implements it).
type RateLimits interface {
	KeyInfo(ctx context.Context, key string) (*ratelimit.Info, error)
	KeyHeaders(jobs ...*job.Job) map[string]string
}

var _ RateLimits = (*queue.Service)(nil)

// addRateLimits registers GET /ojs/v1/rate-limits/{key}
// (ojs-rate-limiting.md 10.1).
func (s *Server) addRateLimits(a *api) {
	if a.limits == nil {
		return
	}
	s.add(LevelProducer, http.MethodGet, "/ojs/v1/rate-limits/{key}", ok(func(r *http.Request, p params) (any, error) {
		return a.limits.KeyInfo(r.Context(), p("key"))
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
