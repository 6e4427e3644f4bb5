package httpapi

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/tenant"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
)

// Tenancy (docs/multi-tenancy.md): a request with the X-OJS-Tenant
// header (validated in dispatch, carried by its context) is scoped to
// that tenant: the jobs it creates are the tenant's, its FETCH takes only
// the tenant's jobs, and it sees or changes by id only the tenant's jobs
// (another tenant's answer 404, as a job that does not exist). A request
// without the header is not scoped.

// requestTenant is the tenant a request to route pattern (of level lv) is
// scoped to ("": none): its credential's, when the credential is bound to
// one (a JWT claim: a header naming another tenant is refused, and so are
// the operator's routes that are not scoped to a tenant: they show or
// change every tenant's), else its X-OJS-Tenant header's (validated).
func requestTenant(r *http.Request, pattern string, lv Level) (string, error) {
	t := r.Header.Get(job.TenantHeader)
	if t != "" {
		if err := job.ValidateTenant(t); err != nil {
			return "", err
		}
	}
	bound := job.CredentialTenant(r.Context())
	if bound == "" {
		return t, nil
	}
	if t != "" && t != bound {
		return "", ojserr.Newf(ojserr.PermissionDenied, "This credential is bound to tenant '%s'; the X-OJS-Tenant header names '%s'.", bound, t).
			With("tenant_id", bound)
	}
	if lv == LevelAdmin && !tenantScoped[pattern] && !strings.Contains(pattern, " /ojs/v1/dead-letter") {
		return "", ojserr.Newf(ojserr.PermissionDenied, "This credential is bound to tenant '%s'; this operator's route shows or changes every tenant's jobs.", bound).
			With("tenant_id", bound)
	}
	return bound, nil
}

// tenantScoped are the admin-level routes besides the dead letter's that
// a request scoped to a tenant sees its tenant's part of (docs/
// multi-tenancy.md); the dead letter's bulk operations refuse scoped
// requests themselves (unscoped).
var tenantScoped = map[string]bool{"GET /ojs/v1/queues/{name}": true, "GET /ojs/v1/queues/{name}/stats": true, "GET /ojs/v1/events": true}

// tenantOf is the tenant r is scoped to ("": none).
func tenantOf(r *http.Request) string { return job.TenantFrom(r.Context()) }

// scoped returns what r may see of a job read (j, err): another
// tenant's job is not found, for a request scoped to a tenant.
func scoped(r *http.Request) func(j *job.Job, err error) (*job.Job, error) {
	return func(j *job.Job, err error) (*job.Job, error) {
		if err != nil {
			return nil, err
		}
		if t := tenantOf(r); t != "" && j.Tenant != t {
			return nil, ojserr.NotFoundf("job", j.ID)
		}
		return j, nil
	}
}

// unscoped refuses what a request scoped to a tenant cannot be answered
// for its tenant alone (what is named: bulk operations, statistics over
// every tenant's jobs).
func unscoped(r *http.Request, what string) error {
	if t := tenantOf(r); t != "" {
		return ojserr.Invalid("X-OJS-Tenant", "%s are not tenant-scoped on this backend; send the request without %s.", what, job.TenantHeader).
			With("tenant_id", t)
	}
	return nil
}

// owns checks, for a request scoped to a tenant, that job id is the
// tenant's before the request changes it (one read; none unscoped).
func (a *api) owns(r *http.Request, id string) error {
	if tenantOf(r) == "" {
		return nil
	}
	_, err := scoped(r)(a.jobs.Info(r.Context(), id))
	return err
}

// owned serves op on the job of the path value id, which a request scoped
// to a tenant reaches only when it is the tenant's (owns).
func owned[T any](a *api, op func(context.Context, string) (T, error)) handlerFunc {
	return ok(func(r *http.Request, p params) (any, error) {
		if err := a.owns(r, p("id")); err != nil {
			return nil, err
		}
		return op(r.Context(), p("id"))
	})
}

// workflowFor reads workflow id as r may see it: another tenant's is not
// found, for a request scoped to a tenant.
func (a *api) workflowFor(r *http.Request, id string) (*wfview.View, error) {
	v, err := a.wfs.Get(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if t := tenantOf(r); t != "" && v.TenantID != t {
		return nil, ojserr.NotFoundf("workflow", id)
	}
	return v, nil
}

// Tenants is the tenant registry (implemented by *tenant.Registry).
type Tenants interface {
	List(ctx context.Context) ([]tenant.Info, error)
	Get(ctx context.Context, id string) (*tenant.Info, error)
	Stats(ctx context.Context, ev tenant.EventLog, id string, now time.Time) (*tenant.Stats, error)
	Available(ctx context.Context, id, queue string) (int, error)
}

var _ Tenants = (*tenant.Registry)(nil)

// TenantLimits sets a tenant's limits (implemented by *queue.Service; the
// API uses Services.Queues when it implements it).
type TenantLimits interface {
	SetTenantLimits(ctx context.Context, id string, l tenant.Limits) (*tenant.Info, error)
}

var _ TenantLimits = (*queue.Service)(nil)

// addTenants registers the tenant routes (ojs-multi-tenancy.md 10): the
// registry and a tenant's stats (admin level), and GET /queues/{name},
// which a request scoped to a tenant reads as the tenant's part of it.
func (s *Server) addTenants(a *api, ts Tenants) {
	a.tenants = ts
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/admin/tenants", ok(func(r *http.Request, _ params) (any, error) {
		list, err := ts.List(r.Context())
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		if list == nil {
			list = []tenant.Info{}
		}
		return map[string]any{"tenants": list, "count": len(list)}, nil
	}))
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/admin/tenants/{id}", ok(func(r *http.Request, p params) (any, error) {
		if err := job.ValidateTenant(p("id")); err != nil {
			return nil, err
		}
		in, err := ts.Get(r.Context(), p("id"))
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		if in == nil {
			return nil, ojserr.NotFoundf("tenant", p("id"))
		}
		return map[string]any{"tenant": in}, nil
	}))
	if tl, ok2 := a.queueSvc.(TenantLimits); ok2 {
		s.add(LevelAdmin, http.MethodPut, "/ojs/v1/admin/tenants/{id}/limits", withBody(func(r *http.Request, p params, raw []byte) (any, error) {
			l, err := tenant.ParseLimits(raw)
			if err != nil {
				return nil, err
			}
			in, err := tl.SetTenantLimits(r.Context(), p("id"), l)
			if err != nil {
				return nil, err
			}
			return map[string]any{"tenant": in}, nil
		}))
	}
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/admin/tenants/{id}/stats", ok(func(r *http.Request, p params) (any, error) {
		if err := job.ValidateTenant(p("id")); err != nil {
			return nil, err
		}
		return ts.Stats(r.Context(), s.cfg.Events, p("id"), s.cfg.Now())
	}))
	s.add(LevelAdmin, http.MethodGet, "/ojs/v1/queues/{name}", ok(a.queueStats))
}

// tenantQueue is a queue's stats as a request scoped to tenant t sees
// them: the tenant's own available jobs (the tenant index), not the
// queue's other counts, which are every tenant's.
func (a *api) tenantQueue(r *http.Request, name, t string) (any, error) {
	if err := job.ValidateQueue(name); err != nil {
		return nil, err
	}
	if a.tenants == nil {
		return nil, ojserr.Newf(ojserr.ValidationError, "This server keeps no tenant registry; queue stats are not tenant-scoped.")
	}
	n, err := a.tenants.Available(r.Context(), t, name)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	q := map[string]any{"name": name, "tenant_id": t, "available": n}
	return map[string]any{"queue": q, "stats": q, "computed_at": job.Timestamp(a.s.cfg.Now())}, nil
}
