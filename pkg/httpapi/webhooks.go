package httpapi

import (
	"context"
	"net/http"

	"github.com/ojs-aws/ojs-serverless/pkg/webhook"
)

// Webhooks are the webhook subscriptions (implemented by *webhook.Store).
type Webhooks interface {
	Create(ctx context.Context, raw []byte) (*webhook.Subscription, error)
	Get(ctx context.Context, id string) (*webhook.Subscription, error)
	List(ctx context.Context) ([]webhook.Subscription, error)
	Update(ctx context.Context, id string, raw []byte) (*webhook.Subscription, error)
	Delete(ctx context.Context, id string) error
	RotateSecret(ctx context.Context, id string) (*webhook.Subscription, error)
	Test(ctx context.Context, id string) (*webhook.TestResult, error)
}

var _ Webhooks = (*webhook.Store)(nil)

// addWebhooks serves the webhooks extension's subscriptions
// (docs/webhooks.md). Admin level: a subscription receives every event it
// names, args and results included.
func (s *Server) addWebhooks(wh Webhooks) {
	const p = "/ojs/v1/webhooks/subscriptions"
	s.add(LevelAdmin, http.MethodPost, p, withBody(func(r *http.Request, _ params, raw []byte) (any, error) {
		sub, err := wh.Create(r.Context(), raw)
		return created(true, "", map[string]any{"subscription": sub}), err
	}))
	s.add(LevelAdmin, http.MethodGet, p, ok(func(r *http.Request, _ params) (any, error) {
		list, err := wh.List(r.Context())
		return map[string]any{"subscriptions": list}, err
	}))
	s.add(LevelAdmin, http.MethodGet, p+"/{id}", byPath("subscription", "id", wh.Get))
	s.add(LevelAdmin, http.MethodPatch, p+"/{id}", withBody(func(r *http.Request, p params, raw []byte) (any, error) {
		sub, err := wh.Update(r.Context(), p("id"), raw)
		return map[string]any{"subscription": sub}, err
	}))
	s.add(LevelAdmin, http.MethodDelete, p+"/{id}", noContent(wh.Delete))
	s.add(LevelAdmin, http.MethodPost, p+"/{id}/rotate-secret", byPath("subscription", "id", wh.RotateSecret))
	s.add(LevelAdmin, http.MethodPost, p+"/{id}/test", byPath("", "id", wh.Test))
}
