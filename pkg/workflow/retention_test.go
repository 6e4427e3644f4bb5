package workflow_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// Every item of a workflow and each of its jobs carry one ttl: creation
// plus the longest retention of its jobs (result_ttl, queue default,
// environment default) plus workflow.RunGrace, which finishing a job
// keeps; -1 keeps the workflow for ever (no ttl). A workflow running
// close to it, or ending later than its retention before it, has every
// item extended (DynamoDB Local does not delete by TTL; the values are
// read back).
func TestWorkflowsExpireTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Now().UTC().Truncate(time.Second))
	qttl := map[string]int64{"ret-q": 1800}
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now, ResultTTLs: qttl})
	eng := workflow.New(st, workflow.Config{Admit: qsvc, Now: clk.Now, ResultTTL: aws.Int64(600), QueueResultTTLs: qttl})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc, Workflows: eng, ResultTTL: aws.Int64(600)})
	h := &clocked{harness: &harness{t: t, st: st, svc: svc, eng: eng, ran: map[string]int{}}, clk: clk}
	wfs := wfstore.New(st)
	grace := int64(workflow.RunGrace / time.Second)

	// ttls reads the ttl (and a job's wf_ttl) of every item of workflow
	// id's partition and of its jobs, keyed by sort key or job id.
	ttls := func(id string) map[string][2]*int64 {
		t.Helper()
		out := map[string][2]*int64{}
		var got struct {
			SK    string `dynamodbav:"sk"`
			TTL   *int64 `dynamodbav:"ttl"`
			WFTTL *int64 `dynamodbav:"wf_ttl"`
		}
		q, err := testenv.DynamoDB().Query(ctx, &dynamodb.QueryInput{TableName: aws.String(st.Table()), KeyConditionExpression: aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "WF#" + id}}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		nodes, err := wfs.WorkflowItems(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range q.Items {
			got.TTL = nil
			_ = attributevalue.UnmarshalMap(it, &got)
			out[got.SK] = [2]*int64{got.TTL}
		}
		for _, n := range nodes {
			if n.Base().Kind != wfdef.KindJob {
				continue
			}
			jid := wfdef.JobID(id, n.Base().Path)
			it, err := testenv.DynamoDB().GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.Table()), Key: store.JobKey(jid), ConsistentRead: aws.Bool(true)})
			if err != nil || len(it.Item) == 0 {
				t.Fatalf("job %s: %v", jid, err)
			}
			got.TTL, got.WFTTL = nil, nil
			_ = attributevalue.UnmarshalMap(it.Item, &got)
			out[jid] = [2]*int64{got.TTL, got.WFTTL}
		}
		return out
	}
	expect := func(id string, want int64, items int) {
		t.Helper()
		got := ttls(id)
		if len(got) != items {
			t.Errorf("workflow %s: %d items and jobs, want %d", id, len(got), items)
		}
		for k, v := range got {
			if v[0] == nil || *v[0] != want || (v[1] != nil && *v[1] != want) {
				t.Errorf("workflow %s item %s: ttl, wf_ttl %s, want %d", id, k, jsonStr(v), want)
			}
		}
	}
	rootEnds := func(id string) {
		t.Helper()
		root, err := wfs.GetRoot(ctx, id)
		if err != nil || !root.State.Terminal() {
			t.Fatalf("root %v: %v", root, err)
		}
		if err := eng.Verify(ctx, []workflow.Finished{{Node: root}}); err != nil { // the stream's record of its end
			t.Fatal(err)
		}
	}
	runAll := func(q string) {
		t.Helper()
		for _, j := range h.fetch(q) {
			h.ack(j, `{"ok":true}`)
		}
	}

	// The longest retention wins: 7200 over 3600, the queue's 1800 and
	// the environment's 600. A finished job keeps the workflow's ttl, and
	// its result is read until then.
	created := clk.Now().Unix()
	id := h.create(`{"type":"chain","steps":[
		{"type":"a","args":[],"options":{"queue":"ret"},"result_ttl":3600},
		{"type":"b","args":[],"options":{"queue":"ret-q"}},
		{"type":"c","args":[],"options":{"queue":"ret"},"result_ttl":7200},
		{"type":"d","args":[],"options":{"queue":"ret"},"result_ttl":0}]}`)
	for range 4 {
		runAll("ret")
		runAll("ret-q")
	}
	rootEnds(id)
	expect(id, created+7200+grace, 9)
	d, err := svc.Info(ctx, wfdef.JobID(id, "/s3"))
	if err != nil || d.State != job.Completed || string(d.Result) != `{"ok":true}` || d.ResultExpiresAt == nil || d.ResultExpiresAt.Unix() != created+7200+grace {
		t.Fatalf("job of the workflow: %s %v", jsonStr(d), err)
	}

	// -1 anywhere: kept for ever, no ttl on its items.
	perm := h.create(`{"type":"group","jobs":[
		{"type":"p","args":[],"options":{"queue":"perm"},"result_ttl":-1},
		{"type":"q","args":[],"options":{"queue":"perm"},"result_ttl":60}]}`)
	for range 2 {
		runAll("perm")
	}
	rootEnds(perm)
	for k, v := range ttls(perm) {
		if (v[0] != nil && strings.Contains(k, "#")) || v[1] != nil {
			t.Errorf("permanent workflow item %s: ttl, wf_ttl %s", k, jsonStr(v))
		}
	}

	// A long run: its progress check extends everything within half the
	// grace of its expiry; its end extends it to its retention after it.
	created = clk.Now().Unix()
	long := h.create(`{"type":"chain","steps":[
		{"type":"x","args":[],"options":{"queue":"long"},"result_ttl":86400},
		{"type":"y","args":[],"options":{"queue":"long"},"result_ttl":60}]}`)
	runAll("long")
	expect(long, created+86400+grace, 5)
	clk.Add(time.Duration(86400+grace/2+60) * time.Second)
	if _, err := eng.Repair(ctx, 10); err != nil {
		t.Fatal(err)
	}
	ext := clk.Now().Unix() + 86400 + grace
	expect(long, ext, 5)
	// A job written with the expiry of a node read before the extension
	// is found by the next check.
	y := wfdef.JobID(long, "/s1")
	if _, err := testenv.DynamoDB().UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(st.Table()), Key: store.JobKey(y),
		UpdateExpression:          aws.String("SET #t = :t, wf_ttl = :t"),
		ExpressionAttributeNames:  map[string]string{"#t": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberN{Value: "1000"}}}); err != nil {
		t.Fatal(err)
	}
	clk.Add(workflow.CheckAfter + time.Second)
	if _, err := eng.Repair(ctx, 10); err != nil {
		t.Fatal(err)
	}
	expect(long, ext, 5)
	clk.Add(workflow.RunGrace + time.Hour)
	runAll("long")
	rootEnds(long)
	expect(long, clk.Now().Unix()+86400, 5)
	rootEnds(long) // repeated: changes nothing
	expect(long, clk.Now().Unix()+86400, 5)
}
