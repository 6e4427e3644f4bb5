package job

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// Federation meta keys (ojs-federation.md 9.1). Federation routes jobs
// across regional deployments on the client side; a deployment keeps the
// keys as sent and, when it knows its region, refuses a job geo-pinned to
// another (docs/federation.md).
const (
	MetaFederationRegion   = "ojs.federation.region"
	MetaFederationAffinity = "ojs.federation.region_affinity"
	// AffinityGeoPin is the strategy whose jobs run in the region they
	// name or nowhere (ojs-federation.md 5.5).
	AffinityGeoPin = "geo-pin"
)

type regionKey struct{}

// WithRegion returns ctx carrying the deployment's federation region (the
// api function's OJS_FEDERATION_REGION): the jobs a request creates are
// checked against it (CheckPin).
func WithRegion(ctx context.Context, region string) context.Context {
	if region == "" {
		return ctx
	}
	return context.WithValue(ctx, regionKey{}, region)
}

// RegionFrom is the region WithRegion set ("": the deployment names none,
// and no job is refused for its region).
func RegionFrom(ctx context.Context) string {
	r, _ := ctx.Value(regionKey{}).(string)
	return r
}

// CheckPin refuses a job geo-pinned to a region other than region, this
// deployment's (a VALIDATION_ERROR naming both): a geo-pinned job must
// fail rather than run in another region, whatever routed it here
// (ojs-federation.md 5.5 and 11). meta is the job's meta; region ""
// refuses nothing.
func CheckPin(meta json.RawMessage, region string) error {
	if region == "" || !bytes.Contains(meta, []byte(AffinityGeoPin)) {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(meta, &m) != nil {
		return nil // not an object: refused where meta is parsed
	}
	var affinity, pinned string
	_ = json.Unmarshal(m[MetaFederationAffinity], &affinity)
	if affinity != AffinityGeoPin {
		return nil
	}
	_ = json.Unmarshal(m[MetaFederationRegion], &pinned)
	if pinned == region {
		return nil
	}
	msg := "The job is geo-pinned to region %q, and this deployment is region %q: a geo-pinned job runs in its region or not at all. Enqueue it in %[1]q's deployment."
	if pinned == "" {
		msg = "The job is geo-pinned (meta %[3]q is \"geo-pin\") but names no region in meta %[4]q; this deployment is region %[2]q."
	}
	return ojserr.Newf(ojserr.ValidationError, msg, pinned, region, MetaFederationAffinity, MetaFederationRegion).
		With("field", "meta."+MetaFederationRegion).With("pinned_region", pinned).With("region", region)
}

// CheckPinRequest is CheckPin for a job request as sent (a PUSH body, a
// workflow step's or a cron template): its meta and its
// options.metadata, which enqueue merges into meta.
func CheckPinRequest(raw json.RawMessage, region string) error {
	if region == "" || !bytes.Contains(raw, []byte(AffinityGeoPin)) {
		return nil
	}
	var r struct {
		Meta    json.RawMessage `json:"meta"`
		Options struct {
			Metadata json.RawMessage `json:"metadata"`
		} `json:"options"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return nil
	}
	if err := CheckPin(r.Meta, region); err != nil {
		return err
	}
	return CheckPin(r.Options.Metadata, region)
}
