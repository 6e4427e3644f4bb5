package workflow

import (
	"context"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
)

// Get returns the workflow's state with every step and job.
func (e *Engine) Get(ctx context.Context, wfID string) (*wfview.View, error) {
	if err := validWorkflowID(wfID); err != nil {
		return nil, err
	}
	nodes, err := e.st.WorkflowItems(ctx, wfID)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	var root *wfstore.Root
	if len(nodes) > 0 {
		root, _ = nodes[0].(*wfstore.Root)
	}
	if root == nil || (root.Creating && len(root.CDef) == 0) {
		// Not there, or still being written by the request creating it.
		return nil, ojserr.NotFoundf("workflow", wfID)
	}
	if root.Creating || len(root.CDef) > 0 {
		// Accepted with 202 and still being written: progress only (the
		// full view, thousands of jobs read, waits until it is written).
		phase := "jobs"
		if root.Creating {
			phase = "nodes"
		}
		return wfview.CreatingView(root, phase, len(nodes)-1, root.CreateItems), nil
	}
	jobs, err := e.jobs.BatchGetJobs(ctx, allJobIDs(wfID, nodes))
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return wfview.Render(wfstore.NewTree(nodes), jobs), nil
}

// allJobIDs are the ids of the jobs of workflow wfID's nodes: its job
// steps' (handlers' too) and its compensation's.
func allJobIDs(wfID string, nodes []wfstore.Node) []string {
	var ids []string
	for _, node := range nodes {
		if n := node.Base(); n.Kind == wfdef.KindJob {
			ids = append(ids, wfdef.JobID(wfID, n.Path))
		}
		if n := wfstore.CompositeOf(node); n != nil && n.Path == wfdef.CompensatePath {
			for k := range n.Plan {
				ids = append(ids, wfdef.JobID(wfID, wfdef.ChildPath(wfdef.CompensatePath, wfdef.Segment(wfdef.KindChain, k))))
			}
		}
	}
	return ids
}
