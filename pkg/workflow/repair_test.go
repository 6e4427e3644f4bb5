package workflow_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/internal/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// TestRepairRecoversLostProgress loses both the inline advancement (the
// request died after its job write) and the stream records (a batch that
// exhausted its retries) of every step, and checks that the sweeper's
// repair finishes the workflow anyway, and leaves it alone afterwards.
func TestRepairRecoversLostProgress(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Now().UTC())
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now})
	eng := workflow.New(st, workflow.Config{Now: clk.Now, Jobs: svc})
	ctx := context.Background()
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"r.one","args":[],"options":{"queue":"rq"}},
		{"type":"group","jobs":[{"type":"r.two","args":[],"options":{"queue":"rq"}},{"type":"r.three","args":[],"options":{"queue":"rq"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := (*v)["id"].(string)
	if n, err := eng.Repair(ctx, 10); err != nil || n != 0 {
		t.Fatalf("repair before the check is due: %d %v", n, err)
	}
	for _, want := range []int{1, 2} {
		got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"rq"}, Count: 10})
		if err != nil || len(got) != want {
			t.Fatalf("fetched %v %v, want %d jobs", got, err, want)
		}
		for _, j := range got {
			if _, err := svc.Ack(ctx, j.ID, []byte(`"ok"`), 0); err != nil {
				t.Fatal(err)
			}
		}
		if more, _ := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"rq"}, Count: 10}); len(more) != 0 {
			t.Fatalf("advanced without the engine: %v", more)
		}
		clk.Add(workflow.CheckAfter)
		if n, err := eng.Repair(ctx, 10); err != nil || n != 1 {
			t.Fatalf("repair: %d %v", n, err)
		}
	}
	root, err := st.GetNode(ctx, id, store.RootPath)
	if err != nil || root.State != wfstate.Completed || root.DuePK != "" {
		t.Fatalf("after repairs: %+v %v", root, err)
	}
	clk.Add(workflow.CheckAfter)
	if n, _ := eng.Repair(ctx, 10); n != 0 {
		t.Fatal("a finished workflow is still checked")
	}
}

// TestRepairDeletesAWorkflowWhoseCreatorDied leaves the items of a large
// workflow whose creator died before it unmarked the root (no job
// exists yet) and checks that the sweeper deletes them after the grace
// period, and that a workflow whose creator died after it (root unmarked,
// first jobs missing) gets its first jobs instead.
func TestRepairDeletesAWorkflowWhoseCreatorDied(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	table := st.Table()
	clk := testenv.NewClock(time.Now().UTC())
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now})
	eng := workflow.New(st, workflow.Config{Now: clk.Now, Jobs: svc})
	ctx := context.Background()
	var jobs []string
	for i := 0; i < 150; i++ {
		jobs = append(jobs, `{"type":"big.job","args":[],"options":{"queue":"bq"}}`)
	}
	body := `{"type":"group","jobs":[` + strings.Join(jobs, ",") + `]}`
	db := testenv.DynamoDB()
	var ids []string
	for k := 0; k < 2; k++ {
		v, err := eng.Create(ctx, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		id := (*v)["id"].(string)
		ids = append(ids, id)
		// Undo what the creator did after its first stage: delete the jobs
		// and, for the first workflow, mark the root creating again.
		items, err := st.WorkflowItems(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range items {
			if n.Kind == workflow.KindJob {
				if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
					"pk": &types.AttributeValueMemberS{Value: "JOB#" + workflow.JobID(id, n.Path)}, "sk": &types.AttributeValueMemberS{Value: "JOB"}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if k == 0 {
			if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "WF#" + id}, "sk": &types.AttributeValueMemberS{Value: "N#/"}},
				UpdateExpression: aws.String("SET creating = :t"), ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	clk.Add(workflow.CheckAfter)
	if n, err := eng.Repair(ctx, 10); err != nil || n != 2 {
		t.Fatalf("repair: %d %v", n, err)
	}
	if items, err := st.WorkflowItems(ctx, ids[0]); err != nil || len(items) != 0 {
		t.Fatalf("half-created workflow left %d items (%v)", len(items), err)
	}
	got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"bq"}, Count: 100})
	if err != nil || len(got) != 100 {
		t.Fatalf("first jobs of the second workflow: %d %v", len(got), err)
	}
	for _, j := range got {
		if j.WorkflowID != ids[1] {
			t.Fatalf("job of %s", j.WorkflowID)
		}
	}
}
