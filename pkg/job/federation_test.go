package job_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// A deployment that names its region refuses a job geo-pinned to another
// (or pinned to none) with a 422 naming both regions, and takes every
// other job; a deployment that names none refuses nothing.
func TestCheckPin(t *testing.T) {
	pinned := func(region string) json.RawMessage {
		return json.RawMessage(`{"ojs.federation.region_affinity":"geo-pin","ojs.federation.region":"` + region + `","ojs.federation.source_region":"us-east-1"}`)
	}
	for _, c := range []struct {
		meta   json.RawMessage
		region string
		refuse bool
	}{
		{pinned("eu-west-1"), "eu-west-1", false},
		{pinned("eu-west-1"), "us-east-1", true},
		{pinned("eu-west-1"), "", false},
		{json.RawMessage(`{"ojs.federation.region_affinity":"geo-pin"}`), "us-east-1", true},
		{json.RawMessage(`{"ojs.federation.region_affinity":"affinity","ojs.federation.region":"eu-west-1"}`), "us-east-1", false},
		{json.RawMessage(`{"note":"geo-pin"}`), "us-east-1", false},
		{json.RawMessage(`{}`), "us-east-1", false},
	} {
		err := job.CheckPin(c.meta, c.region)
		if !c.refuse {
			if err != nil {
				t.Errorf("%s in %q: %v", c.meta, c.region, err)
			}
			continue
		}
		oe, ok := err.(*ojserr.Error)
		if !ok || oe.Status() != 422 || oe.Details["region"] != c.region {
			t.Errorf("%s in %q: %v, want a 422 naming the region", c.meta, c.region, err)
		}
	}
	// options.metadata counts as meta.
	if err := job.CheckPinRequest(json.RawMessage(`{"type":"t","args":[],"options":{"metadata":`+string(pinned("eu-west-1"))+`}}`), "us-east-1"); err == nil {
		t.Fatal("a job pinned through options.metadata was taken")
	}
	if got := job.RegionFrom(job.WithRegion(context.Background(), "eu-west-1")); got != "eu-west-1" {
		t.Fatalf("RegionFrom: %q", got)
	}
	if got := job.RegionFrom(context.Background()); got != "" {
		t.Fatalf("RegionFrom without one: %q", got)
	}
}
