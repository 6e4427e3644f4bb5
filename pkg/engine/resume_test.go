package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// resumeRecorder is the workflow engine as far as creation goes: it
// records which workflows Process resumed and answers with err.
type resumeRecorder struct {
	resumed []string
	err     error
}

func (r *resumeRecorder) Resume(_ context.Context, id string) error {
	r.resumed = append(r.resumed, id)
	return r.err
}
func (r *resumeRecorder) Verify(context.Context, []workflow.Finished) error { return nil }

// The stream function writes an asynchronously created workflow a slice
// at a time, from the root's changes that leave it holding the definition
// and no lease: its insert and each slice giving the lease back; not from
// the change that takes the lease, not from one without the definition
// (finished) and not from other nodes; and from a cancelled root marked
// cancelling (its cancel request ran out of time), not once the mark is
// removed. A slice that stops unfinished does
// not fail the batch (its own change runs the next one); any other error
// does, at the first record.
func TestResumeRunsFromTheRootsChangesWithoutLease(t *testing.T) {
	def := []byte{1}
	root := func(id string, def []byte, lease int64) *wfstore.Root {
		return &wfstore.Root{Composite: wfstore.Composite{Item: wfstore.Item{WorkflowID: id, Path: wfstore.RootPath}},
			Creation: wfstore.Creation{CDef: def, CreateLease: lease}}
	}
	cancelling := func(id string, on bool) *wfstore.Root {
		r := root(id, nil, 0)
		r.Cancelling = on
		return r
	}
	changes := []Change{
		{NewNode: root("inserted", def, 0)},
		{OldNode: root("leased", def, 0), NewNode: root("leased", def, 1795594126694)},
		{OldNode: root("given-back", def, 1795594126694), NewNode: root("given-back", def, 0)},
		{OldNode: root("finished", def, 1795594126694), NewNode: root("finished", nil, 0)},
		{NewNode: &wfstore.Composite{Item: wfstore.Item{WorkflowID: "child", Path: "/0"}}},
		{OldNode: root("deleted", def, 0)},
		{NewNode: cancelling("cancelling", true)},
		{OldNode: cancelling("cancelled", true), NewNode: cancelling("cancelled", false)},
	}
	rec := &resumeRecorder{err: fmt.Errorf("slice over: %w", wfstore.ErrCreationUnfinished)}
	e := &Engine{Workflows: rec}
	if i, err := e.Process(context.Background(), changes); i != -1 || err != nil {
		t.Fatalf("Process with unfinished slices: %d, %v", i, err)
	}
	if want := []string{"inserted", "given-back", "cancelling"}; !slices.Equal(rec.resumed, want) {
		t.Fatalf("resumed %v, want %v", rec.resumed, want)
	}
	failing := &resumeRecorder{err: errors.New("table gone")}
	e.Workflows = failing
	if i, err := e.Process(context.Background(), changes); i != 0 || err == nil {
		t.Fatalf("Process with a failing Resume: %d, %v; want the batch retried from its first record", i, err)
	}
}
