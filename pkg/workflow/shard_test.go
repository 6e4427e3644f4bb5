package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// Running workflows' progress checks are spread over the wfdue shards by
// workflow id, and the sweeper's repair finds every one of them.
func TestDueWorkflowsAreSpreadOverShards(t *testing.T) {
	t.Parallel()
	n := topology.JobTable.Shards.WorkflowDue
	if n < 2 {
		t.Fatalf("due workflows not sharded: %+v", topology.JobTable.Shards)
	}
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Now().UTC())
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	eng := workflow.New(st, workflow.Config{Now: clk.Now, Admit: qsvc})
	ctx := context.Background()
	const workflows = 16
	for i := range workflows {
		if _, err := eng.Create(ctx, []byte(fmt.Sprintf(`{"type":"chain","steps":[{"type":"s.a","args":[%d],"options":{"queue":"wfq"}}]}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	db := testenv.DynamoDB()
	total, used := 0, 0
	for i := range n {
		pk := "wfdue"
		if i > 0 {
			pk = fmt.Sprintf("wfdue#%d", i)
		}
		out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(st.Table()), IndexName: aws.String(topology.IndexDue),
			KeyConditionExpression:    aws.String("due_pk = :k"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": &types.AttributeValueMemberS{Value: pk}},
			Select:                    types.SelectCount})
		if err != nil {
			t.Fatal(err)
		}
		if out.Count > 0 {
			used++
		}
		total += int(out.Count)
	}
	// 16 random ids over n shards: some shard may well be empty (4% for
	// 4), all in one has odds of about 1e-9.
	if used < 2 {
		t.Fatalf("every progress check is in one shard: the partition is not spread")
	}
	if total != workflows {
		t.Fatalf("%d progress checks listed, want %d", total, workflows)
	}
	if got, err := eng.Repair(ctx, 100); err != nil || got != 0 {
		t.Fatalf("repair before any check is due: %d %v", got, err)
	}
	clk.Add(workflow.CheckAfter)
	if got, err := eng.Repair(ctx, 100); err != nil || got != workflows {
		t.Fatalf("repair checked %d workflows, want every one (%d): %v", got, workflows, err)
	}
}
