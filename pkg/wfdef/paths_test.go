package wfdef_test

import (
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
)

func TestPaths(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ path, parent, last, parentKind string }{
		{"/s0", "/", "s0", wfdef.KindChain},
		{"/s2/j13", "/s2", "j13", wfdef.KindGroup},
		{"/j0/on_failure", "/j0", "on_failure", wfdef.KindBatch},
		{"/g4", "/", "g4", wfdef.KindGraph},
		{"/~compensate/s1", wfdef.CompensatePath, "s1", wfdef.KindChain},
	} {
		if p := wfdef.ParentPath(tc.path); p != tc.parent {
			t.Errorf("ParentPath(%s) = %s", tc.path, p)
		}
		if s := wfdef.LastSegment(tc.path); s != tc.last {
			t.Errorf("LastSegment(%s) = %s", tc.path, s)
		}
		if k := wfdef.ParentKind(tc.path); k != tc.parentKind {
			t.Errorf("ParentKind(%s) = %s", tc.path, k)
		}
		if c := wfdef.ChildPath(tc.parent, tc.last); c != tc.path {
			t.Errorf("ChildPath(%s, %s) = %s", tc.parent, tc.last, c)
		}
	}
	if wfdef.ParentPath("/") != "/" || wfdef.ChildPath("/", wfdef.Segment(wfdef.KindBatch, 3)) != "/j3" ||
		wfdef.Segment(wfdef.KindChain, 0) != "s0" || wfdef.Segment(wfdef.KindGraph, 7) != "g7" {
		t.Error("root and segments")
	}
	if name, ok := wfdef.CallbackName("/s1/on_complete"); !ok || name != "on_complete" || wfdef.IsCallback("/s1/j0") {
		t.Error("callback names")
	}
	if wfdef.HandlerPath(wfdef.HandlerOnCancel) != "/~on_cancel" {
		t.Error("handler path")
	}
}

// Job ids are UUIDv7 with the workflow's timestamp, ordered by the step's
// place among its siblings (callbacks after every job), the same for the
// same path.
func TestJobID(t *testing.T) {
	t.Parallel()
	wf := "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"
	ids := map[string]bool{}
	prev := ""
	for _, p := range []string{"/j0", "/j1", "/j2", "/j10", "/j4000", "/on_complete", "/on_success", "/on_failure"} {
		id := wfdef.JobID(wf, p)
		if job.ValidateID(id) != nil || id[:13] != wf[:13] || ids[id] || id != wfdef.JobID(wf, p) {
			t.Fatalf("JobID(%s) = %s", p, id)
		}
		if id[14:18] <= prev {
			t.Fatalf("JobID(%s) = %s sorts before the step it follows", p, id)
		}
		ids[id], prev = true, id[14:18]
	}
}
