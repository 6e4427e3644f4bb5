package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/internal/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// TestRepairRecoversLostStreamRecords loses the root's insert record and
// then a job's completion record (as a stream batch that exhausted its
// retries would) and checks that the sweeper's repair finishes the
// workflow anyway, and leaves it alone afterwards.
func TestRepairRecoversLostStreamRecords(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Now().UTC())
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now})
	eng := workflow.New(st, workflow.Config{Now: clk.Now})
	ctx := context.Background()
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"r.one","args":[],"options":{"queue":"rq"}},{"type":"r.two","args":[],"options":{"queue":"rq"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := (*v)["id"].(string)
	// The root's stream record is lost: nothing starts.
	if n, err := eng.Repair(ctx, 10); err != nil || n != 0 {
		t.Fatalf("repair before the check is due: %d %v", n, err)
	}
	clk.Add(workflow.CheckAfter)
	if n, err := eng.Repair(ctx, 10); err != nil || n != 1 {
		t.Fatalf("repair: %d %v", n, err)
	}
	for step := 0; step < 2; step++ {
		got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"rq"}})
		if err != nil || len(got) != 1 {
			t.Fatalf("step %d: fetched %v %v", step, got, err)
		}
		// The completion's stream record is lost too.
		if _, err := svc.Ack(ctx, got[0].ID, []byte(`"ok"`), 0); err != nil {
			t.Fatal(err)
		}
		clk.Add(workflow.CheckAfter)
		if _, err := eng.Repair(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	root, err := st.GetNode(ctx, id, store.RootPath)
	if err != nil || root.State != workflow.StateCompleted || root.DuePK != "" {
		t.Fatalf("after repairs: %+v %v", root, err)
	}
	clk.Add(workflow.CheckAfter)
	if n, _ := eng.Repair(ctx, 10); n != 0 {
		t.Fatal("a finished workflow is still checked")
	}
}
