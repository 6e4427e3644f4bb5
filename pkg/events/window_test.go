package events

import (
	"net/url"
	"testing"
	"time"
)

// A query by time reads at most MaxWindow back, whatever its since or
// cursor; a query of one job or workflow is not bounded.
func TestStartIsBoundedByMaxWindow(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	floor := LowerBound(now.Add(-MaxWindow))
	recent := ID(now.Add(-time.Hour), 1, JobCompleted, "j")
	for q, want := range map[string]string{
		"since=1970-01-01T00:00:00Z":                     floor,
		"since=0001-01-02T00:00:00Z":                     floor,
		"after=evt_00000000-0000-7000-8000-000000000000": floor,
		"":                                    LowerBound(now.Add(-DefaultWindow)),
		"since=2026-11-20T10:00:00Z":          LowerBound(now.Add(-24 * time.Hour)),
		"after=" + recent:                     recent,
		"job_id=j&since=1970-01-01T00:00:00Z": LowerBound(time.Unix(0, 0)),
		"job_id=j":                            "",
		"workflow_id=w&after=" + LowerBound(time.Unix(0, 0)): LowerBound(time.Unix(0, 0)),
	} {
		v, _ := url.ParseQuery(q)
		f, err := ParseQuery(v)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if got := f.Start(now); got != want {
			t.Errorf("%s: start %s, want %s", q, got, want)
		}
	}
}
