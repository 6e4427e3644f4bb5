package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// EnqueueMiddleware is one step of the server-side enqueue chain
// (ojs-middleware.md 3, ojs-core.md: enqueue middleware runs before a job
// is persisted): it runs on every job a PUSH or batch PUSH creates, in
// order, and may change the job (never its id) or refuse it with an error,
// which refuses the whole batch. The chain is PropagateRequestID, then
// Config.Middleware (DefaultMeta from OJS_ENQUEUE_META), then the schema
// registry's validation (docs/middleware.md).
type EnqueueMiddleware func(ctx context.Context, j *job.Job) error

type clientRequestID struct{}

// WithClientRequestID records the X-Request-ID a client sent with its
// request, for PropagateRequestID.
func WithClientRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, clientRequestID{}, id)
}

// RequestIDMetaKey is the meta key PropagateRequestID sets.
const RequestIDMetaKey = "request_id"

// PropagateRequestID sets meta.request_id to the X-Request-ID the client
// sent, when it sent one and the job's meta has none: the job can be
// traced to the request that created it.
func PropagateRequestID(ctx context.Context, j *job.Job) error {
	id, _ := ctx.Value(clientRequestID{}).(string)
	if id == "" {
		return nil
	}
	v, _ := json.Marshal(id)
	return addMeta(j, map[string]json.RawMessage{RequestIDMetaKey: v})
}

// DefaultMeta returns a step that adds the keys of meta a job's meta lacks
// (OJS_ENQUEUE_META: a deployment's environment or source, say).
func DefaultMeta(meta map[string]json.RawMessage) EnqueueMiddleware {
	return func(_ context.Context, j *job.Job) error { return addMeta(j, meta) }
}

// ParseDefaultMeta reads OJS_ENQUEUE_META: a JSON object ("" for none).
func ParseDefaultMeta(v string) (map[string]json.RawMessage, error) {
	if v == "" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &m); err != nil || m == nil {
		return nil, fmt.Errorf("OJS_ENQUEUE_META=%q: want a JSON object of meta keys and values", v)
	}
	return m, nil
}

// addMeta sets the keys of add that j's meta lacks.
func addMeta(j *job.Job, add map[string]json.RawMessage) error {
	if len(add) == 0 {
		return nil
	}
	meta := map[string]json.RawMessage{}
	if len(j.Meta) > 0 && string(j.Meta) != "null" {
		if err := json.Unmarshal(j.Meta, &meta); err != nil {
			return ojserr.Invalid("meta", "'meta' must be a JSON object.")
		}
	}
	changed := false
	for k, v := range add {
		if _, ok := meta[k]; !ok {
			meta[k], changed = v, true
		}
	}
	if !changed {
		return nil
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	j.Meta = b
	return nil
}

// runChain runs chain on jobs; an error names the job's index.
func runChain(ctx context.Context, chain []EnqueueMiddleware, jobs []*job.Job) error {
	for i, j := range jobs {
		id := j.ID
		for _, m := range chain {
			if err := m(ctx, j); err != nil {
				return ojserr.As(err).With("index", i)
			}
		}
		if j.ID != id {
			return ojserr.Backend(fmt.Errorf("enqueue middleware changed job id %s to %s", id, j.ID))
		}
	}
	return nil
}

// chainOf is the enqueue chain of a service with config c.
func chainOf(c Config) []EnqueueMiddleware {
	chain := append([]EnqueueMiddleware{PropagateRequestID}, c.Middleware...)
	if c.Schemas != nil {
		chain = append(chain, c.Schemas.Validate)
	}
	return chain
}
