package workflow

import "github.com/ojs-aws/ojs-serverless/pkg/wfstore"

// CreatingViewForTest is creatingView, for the golden views of a
// workflow still being created.
func CreatingViewForTest(root *wfstore.Root, phase string, written, total int) *View {
	return creatingView(root, phase, written, total)
}
