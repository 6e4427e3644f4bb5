package wfview

import (
	"cmp"

	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

// CreatingView is what GET shows of a workflow still being created: state
// pending, the phase (nodes, then first jobs) and how many nodes exist.
func CreatingView(root *wfstore.Root, phase string, written, total int) *View {
	state := "pending" // no job exists yet
	if phase != "nodes" {
		state = string(root.State)
	}
	return &View{
		ViewNode: ViewNode{ID: root.WorkflowID, Type: root.Kind, Name: cmp.Or(root.Name, root.Kind), State: state}, CreatedAt: root.CreatedAt,
		Metadata: ViewMetadata{CreatedAt: root.CreatedAt, JobCount: root.JobCount},
		Creating: &ViewCreating{Phase: phase, NodesWritten: written, NodesTotal: total},
	}
}

// Creating reports whether v is the view of a workflow still being created
// asynchronously (the API answers its creation 202).
func Creating(v *View) bool { return v.Creating != nil }
