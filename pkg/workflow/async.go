package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
)

// A workflow too large to write within API Gateway's 29 s is created in
// two parts. The request writes only its root, marked creating and
// holding the gzipped definition, and answers 202 with x_creating set.
// The stream function reads the root's insert record and calls Resume,
// which derives the same items the request would have written (build is
// deterministic for a definition, id and creation time) and writes them:
// nodes and counter shards while the root is still marked (no job exists
// yet), then the mark removed, then the first jobs, then the definition
// dropped. Each part is idempotent and one writer at a time holds the
// creation (a lease on the root), so a stream retry, or the sweeper's
// repair of a root still holding its definition after creatingGrace,
// finishes what a dead writer left.

// begin writes the root of an asynchronously created workflow and returns
// its creating view. wfstore.ErrTooLargeToDefer means the root cannot hold
// the definition: the caller creates it in the request.
func (e *Engine) begin(ctx context.Context, raw []byte, b *built) (*wfview.View, error) {
	root := b.root
	err := e.st.BeginWorkflow(ctx, *root, raw, len(b.nodes)-1)
	if errors.Is(err, wfstore.ErrTooLargeToDefer) {
		return nil, err
	}
	if errors.Is(err, wfstore.ErrWorkflowExists) {
		return nil, workflowExists(root.WorkflowID)
	}
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	e.log.InfoContext(ctx, "workflow accepted; creating it asynchronously", "workflow_id", root.WorkflowID, "type", root.Kind,
		"jobs", root.JobCount, "items", len(b.nodes)+len(b.shards)+len(b.jobs))
	return wfview.CreatingView(root, "nodes", 0, len(b.nodes)-1), nil
}

// Resume finishes what a request left to the stream function: the
// creation of a workflow Create accepted asynchronously (its root holds
// the definition), or the cancel of the jobs a Cancel did not get to
// within the API's time (its root marked cancelling). For any other
// workflow it does nothing. It is idempotent; beside another Resume of the same
// workflow it leaves the work to whichever took the creation's lease
// first (wfstore.ResumeWorkflow). It writes for one slice
// (Config.CreationSlice) and never past shortly before ctx's deadline;
// stopped there it returns an error wrapping wfstore.ErrCreationUnfinished,
// having given the lease back: that change of the root is a stream record
// on which the stream function runs the next slice, and running it again
// goes on from what exists.
func (e *Engine) Resume(ctx context.Context, wfID string) error {
	root, err := found(e.st.GetRoot(ctx, wfID))
	if err != nil || root == nil {
		return err
	}
	if root.Cancelling && root.State == wfstate.Cancelled {
		return (stopper{e}).finishCancel(ctx, root, nil)
	}
	raw, err := root.Definition()
	if err != nil {
		return fmt.Errorf("workflow %s: stored definition: %w", wfID, err)
	}
	if raw == nil {
		return nil
	}
	created, err := time.Parse(time.RFC3339Nano, root.CreatedAt)
	if err != nil {
		return fmt.Errorf("workflow %s: created_at: %w", wfID, err)
	}
	parsed, err := wfdef.Parse(raw, created)
	if err == nil {
		err = parsed.AssignTenant(root.Tenant)
	}
	if err != nil {
		return fmt.Errorf("workflow %s: stored definition no longer valid: %w", wfID, err)
	}
	b, err := e.build(ctx, parsed, wfID, created)
	if err != nil {
		return fmt.Errorf("workflow %s: %w", wfID, err)
	}
	began := time.Now()
	err = e.st.ResumeWorkflow(ctx, wfstore.NewWorkflow{Nodes: b.nodes, Shards: b.shards, Jobs: b.jobs, RedeliverAfter: e.redel}, e.now(), e.slice)
	if errors.Is(err, wfstore.ErrCreationBusy) {
		// Another writer holds it; the sweeper resumes it if that one died.
		e.log.InfoContext(ctx, "workflow creation already being written elsewhere", "workflow_id", wfID)
		return nil
	}
	if errors.Is(err, wfstore.ErrCreationUnfinished) {
		// Its slice is over: the lease is given back and the next slice
		// (the stream function, from that change of the root, or the next
		// sweep) continues from what exists.
		e.log.InfoContext(ctx, "workflow creation continues in its next slice", "workflow_id", wfID,
			"took_ms", time.Since(began).Milliseconds())
		return err
	}
	if err != nil {
		return fmt.Errorf("workflow %s: %w", wfID, err)
	}
	e.log.InfoContext(ctx, "workflow created", "workflow_id", wfID, "type", parsed.Root.Kind, "jobs", parsed.Jobs,
		"started_jobs", len(b.jobs), "async", true, "took_ms", time.Since(began).Milliseconds())
	return nil
}
