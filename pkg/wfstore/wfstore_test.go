package wfstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// item reads the item at pk, sk as stored.
func item(t *testing.T, table, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := testenv.DynamoDB().GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func str(av types.AttributeValue) string {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

// A workflow's items live in its partition WF#<id> under the keys the
// data model names (N#<path> nodes, C#<path>#<k> counter shards), its
// first jobs as job items, written in one transaction; the root is listed
// for its progress check; reads, counts and a second creation answer as
// documented.
func TestAWorkflowsItemsKeepTheirKeysAndAttributes(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	table := st.Table()
	ws := wfstore.New(st)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	wfID := uuid.Must(uuid.NewV7()).String()
	root := &wfstore.Root{JobCount: 1, Composite: wfstore.Composite{Item: wfstore.Item{WorkflowID: wfID, Path: wfstore.RootPath, Kind: "group", State: wfstate.Running},
		Total: 1, Shards: 1}}
	wfstore.WorkflowCheckDue(root, now)
	leaf := &wfstore.Step{Item: wfstore.Item{WorkflowID: wfID, Path: "/j0", Kind: "job", PShard: wfstore.ShardKey(0), State: wfstate.Waiting}, JobType: "wf.test"}
	e, err := job.ParseEnqueue([]byte(`{"type":"wf.test","args":[],"options":{"queue":"wfstoreq"}}`), now)
	if err != nil {
		t.Fatal(err)
	}
	j := e.Job
	w := wfstore.NewWorkflow{Nodes: []wfstore.Node{root, leaf}, Shards: []wfstore.Shard{{Path: wfstore.RootPath, Key: wfstore.ShardKey(0), Expected: 1}},
		Jobs: []*job.Job{j}, RedeliverAfter: time.Minute}
	if err := ws.CreateWorkflow(ctx, w); err != nil {
		t.Fatal(err)
	}

	r := item(t, table, "WF#"+wfID, "N#/")
	if str(r["state"]) != "running" || str(r["kind"]) != "group" || str(r["nv"]) != "1" || str(r["wf_id"]) != wfID || str(r["path"]) != "/" {
		t.Fatalf("root as stored: %v", r)
	}
	if pk := str(r["due_pk"]); pk != "wfdue" && !strings.HasPrefix(pk, "wfdue#") {
		t.Fatalf("root's progress check in partition %q", pk)
	}
	if l := item(t, table, "WF#"+wfID, "N#/j0"); str(l["pshard"]) != "0" || str(l["job_type"]) != "wf.test" {
		t.Fatalf("leaf as stored: %v", l)
	}
	if sh := item(t, table, "WF#"+wfID, "C#/#0"); str(sh["expected"]) != "1" || str(sh["shard"]) != "0" || str(sh["wf_id"]) != wfID {
		t.Fatalf("counter shard as stored: %v", sh)
	}
	if ji := item(t, table, "JOB#"+j.ID, "JOB"); str(ji["state"]) != string(job.Available) {
		t.Fatalf("first job as stored: %v", ji)
	}

	if err := ws.CreateWorkflow(ctx, w); !errors.Is(err, wfstore.ErrWorkflowExists) {
		t.Fatalf("second creation: %v, want ErrWorkflowExists", err)
	}
	due, err := wfstore.NewChecks(ws).DueWorkflows(ctx, now.Add(time.Second), 100)
	if err != nil || !due[wfID].Equal(now) {
		t.Fatalf("due workflows %v, %v: want %s due at %v", due, err, wfID, now)
	}

	sh, err := ws.CountOnShard(ctx, wfID, wfstore.RootPath, wfstore.ShardKey(0), 0, true)
	if err != nil || !sh.Full() {
		t.Fatalf("count: %+v, %v", sh, err)
	}
	n, err := ws.RollUp(ctx, wfID, wfstore.RootPath, sh)
	if err != nil || !n.ShardRolled("0") {
		t.Fatalf("roll-up: %+v, %v", n, err)
	}
	if shards, ok, fail := n.RolledCounts(); shards != 1 || ok != 1 || fail != 0 {
		t.Fatalf("rolled counts %d %d %d", shards, ok, fail)
	}

	p, err := ws.ReadProgress(ctx, []wfstore.NodeKey{{WorkflowID: wfID, Path: wfstore.RootPath}},
		[]wfstore.ShardRef{{WorkflowID: wfID, Path: wfstore.RootPath, Key: "0"}}, []string{j.ID, uuid.Must(uuid.NewV7()).String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Nodes) != 1 || len(p.Shards) != 1 || len(p.Jobs) != 1 || !p.Jobs[j.ID] {
		t.Fatalf("progress read: %+v", p)
	}

	_, err = ws.Change(ctx, wfID, wfstore.RetryWorkflow(wfstate.Failed, now, now, time.Time{}))
	var nc *wfstore.ErrNodeConflict
	if !errors.As(err, &nc) || nc.State() != wfstate.Running || nc.Root() == nil {
		t.Fatalf("a write from a state the node is not in: %v", err)
	}
	done, err := ws.ChangeRoot(ctx, wfID, wfstore.Finish(wfstore.RootPath, true, now))
	if err != nil || done.State != wfstate.Completed || done.Version() != 2 || done.DuePK != "" {
		t.Fatalf("completed root: %+v, %v", done, err)
	}
	if _, err := ws.GetNode(ctx, wfID, "/missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing node: %v", err)
	}
	nodes, err := ws.WorkflowItems(ctx, wfID)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("workflow items: %v, %v", nodes, err)
	}
	if r, ok := nodes[0].(*wfstore.Root); !ok || r.JobCount != 1 {
		t.Fatalf("workflow items: %v, %v", nodes, err)
	}
	if s, ok := nodes[1].(*wfstore.Step); !ok || s.Path != "/j0" || s.JobType != "wf.test" {
		t.Fatalf("workflow items: %v, %v", nodes, err)
	}
}
