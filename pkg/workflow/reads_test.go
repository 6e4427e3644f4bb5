package workflow_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/internal/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// countingStore counts node reads.
type countingStore struct {
	workflow.Store
	nodes atomic.Int64
}

func (c *countingStore) GetNode(ctx context.Context, wfID, path string) (*store.Node, error) {
	c.nodes.Add(1)
	return c.Store.GetNode(ctx, wfID, path)
}

// TestChainNodeReads pins the node reads a 3-step chain costs the stream
// function (make bench counts them as DynamoDB GetItems): starting reads
// the root and the first step; each finished step reads the root (also
// its parent here) and itself, and the next step it starts; the node that
// a call finishes is not read back. 18 reads before this was tightened.
func TestChainNodeReads(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	cs := &countingStore{Store: st}
	eng := workflow.New(cs, workflow.Config{})
	svc := lifecycle.New(st, lifecycle.Config{})
	ctx := context.Background()
	v, err := eng.Create(ctx, []byte(`{"type":"chain","name":"reads","steps":[
		{"type":"a","args":[],"options":{"queue":"r"}},{"type":"b","args":[],"options":{"queue":"r"}},{"type":"c","args":[],"options":{"queue":"r"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := (*v)["id"].(string)
	if err := eng.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	for step := 0; step < 3; step++ {
		jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"r"}, Count: 10})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("step %d: %d jobs, %v", step, len(jobs), err)
		}
		done, err := svc.Ack(ctx, jobs[0].ID, []byte(`1`), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.JobFinished(ctx, done); err != nil {
			t.Fatal(err)
		}
	}
	root, err := st.GetNode(ctx, id, store.RootPath)
	if err != nil || root.State != workflow.StateCompleted {
		t.Fatalf("root %+v %v", root, err)
	}
	if n := cs.nodes.Load(); n != 10 {
		t.Fatalf("a 3-step chain read %d nodes, want 10", n)
	}
}
