package job

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// TenantHeader names the request's tenant (ojs-multi-tenancy.md 5.3).
const TenantHeader = "X-OJS-Tenant"

// MaxTenantLength bounds a tenant id (bytes).
const MaxTenantLength = 128

// ValidateTenant checks a tenant id (ojs-multi-tenancy.md 5.2).
func ValidateTenant(id string) error {
	if len(id) > MaxTenantLength || !keyPattern.MatchString(id) {
		return ojserr.Invalid("tenant_id", "A tenant id must match ^[a-zA-Z0-9][a-zA-Z0-9._:-]*$ and be at most %d bytes; got %q.", MaxTenantLength, id).
			With("header", TenantHeader)
	}
	return nil
}

type tenantKey struct{}

// WithTenant returns ctx carrying the request's tenant (the header's,
// validated by the caller).
func WithTenant(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, tenantKey{}, id)
}

type credentialKey struct{}

// WithCredentialTenant returns ctx carrying the tenant the request's
// credential is bound to (a JWT claim, docs/multi-tenancy.md): the
// request is that tenant's whatever its header says.
func WithCredentialTenant(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, credentialKey{}, id)
}

// CredentialTenant is the tenant ctx's credential is bound to ("": none).
func CredentialTenant(ctx context.Context) string {
	id, _ := ctx.Value(credentialKey{}).(string)
	return id
}

// TenantFrom is the tenant ctx carries ("": none).
func TenantFrom(ctx context.Context) string {
	id, _ := ctx.Value(tenantKey{}).(string)
	return id
}

// tenantOf is meta.tenant_id when it is a valid tenant id ("" otherwise:
// a job whose meta names no valid tenant belongs to none).
func tenantOf(meta json.RawMessage) string {
	var m struct {
		TenantID *string `json:"tenant_id"`
	}
	if json.Unmarshal(meta, &m) != nil || m.TenantID == nil || ValidateTenant(*m.TenantID) != nil {
		return ""
	}
	return *m.TenantID
}

// AssignTenant gives j the request's tenant t: meta.tenant_id is set to
// it when absent (the rest of meta kept as it is); a meta that names
// another tenant is refused (ojs-multi-tenancy.md 5.3).
func AssignTenant(j *Job, t string) error {
	if t == "" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(j.Meta, &m); err != nil {
		return ojserr.Invalid("meta", "The 'meta' field must be a JSON object.")
	}
	if raw, ok := m["tenant_id"]; ok {
		var cur string
		if json.Unmarshal(raw, &cur) != nil || cur != t {
			return ojserr.Invalid("meta.tenant_id", "meta.tenant_id %s differs from the %s header %q.", string(raw), TenantHeader, t).
				With("header_tenant", t)
		}
		j.Tenant = t
		return nil
	}
	id, _ := json.Marshal(t)
	body := bytes.TrimSpace(j.Meta)
	rest := bytes.TrimSpace(body[1:])
	sep := ","
	if len(rest) > 0 && rest[0] == '}' {
		sep = ""
	}
	j.Meta = append(append(append([]byte(`{"tenant_id":`), id...), sep...), rest...)
	j.Tenant = t
	return nil
}

// TenantRequest is a job request (a PUSH body, a workflow step's) given
// the tenant t as AssignTenant gives a job: meta.tenant_id set when absent,
// refused when another. Its other members are kept as sent.
func TenantRequest(raw json.RawMessage, t string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, ojserr.Invalid("job", "A job request must be a JSON object.")
	}
	j := &Job{Meta: json.RawMessage("{}")}
	if meta, ok := m["meta"]; ok && !isNull(meta) {
		j.Meta = compact(meta)
	}
	if err := AssignTenant(j, t); err != nil {
		return nil, err
	}
	m["meta"] = j.Meta
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(buf.Bytes()), nil
}
