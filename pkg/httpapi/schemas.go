package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/ojs-aws/ojs-serverless/pkg/schema"
)

// Schemas is the schema registry (urn:ojs:ext:schema-registry;
// implemented by *schema.Registry).
type Schemas interface {
	Register(ctx context.Context, typ, version string, s json.RawMessage) (schema.Version, bool, error)
	Get(ctx context.Context, typ, version string) (schema.Version, error)
	Versions(ctx context.Context, typ string) ([]schema.Version, error)
	Delete(ctx context.Context, typ, version string) error
}

var _ Schemas = (*schema.Registry)(nil)

func (s *Server) addSchemas(sc Schemas) {
	s.add(LevelAdmin, http.MethodPut, "/ojs/v1/admin/schemas/{type}/{version}", ok(func(r *http.Request, p params) (any, error) {
		var req struct {
			Schema json.RawMessage `json:"schema"`
		}
		if err := readObject(r, &req); err != nil {
			return nil, err
		}
		v, isNew, err := sc.Register(r.Context(), p("type"), p("version"), req.Schema)
		return created(isNew, "", v), err
	}))
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/admin/schemas/{type}", ok(func(r *http.Request, p params) (any, error) {
		return sc.Get(r.Context(), p("type"), "")
	}))
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/admin/schemas/{type}/{version}", ok(func(r *http.Request, p params) (any, error) {
		return sc.Get(r.Context(), p("type"), p("version"))
	}))
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/admin/schemas/{type}/versions", ok(func(r *http.Request, p params) (any, error) {
		vs, err := sc.Versions(r.Context(), p("type"))
		return map[string]any{"type": p("type"), "versions": append([]schema.Version{}, vs...)}, err
	}))
	s.add(LevelAdmin, http.MethodDelete, "/ojs/v1/admin/schemas/{type}/{version}", ok(func(r *http.Request, p params) (any, error) {
		return map[string]any{"type": p("type"), "version": p("version"), "deleted": true}, sc.Delete(r.Context(), p("type"), p("version"))
	}))
}
