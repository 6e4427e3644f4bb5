package workflow_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfevents"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// countingDB counts the DynamoDB requests the store makes, by operation.
type countingDB struct {
	*dynamodb.Client
	mu sync.Mutex
	n  map[string]int
}

func (c *countingDB) add(op string) {
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
}

func (c *countingDB) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.n {
		t += v
	}
	return t
}

func (c *countingDB) reset() { c.mu.Lock(); c.n = map[string]int{}; c.mu.Unlock() }

func (c *countingDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.add("GetItem")
	return c.Client.GetItem(ctx, in, o...)
}
func (c *countingDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.add("PutItem")
	return c.Client.PutItem(ctx, in, o...)
}
func (c *countingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.add("UpdateItem")
	return c.Client.UpdateItem(ctx, in, o...)
}
func (c *countingDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.add("Query")
	return c.Client.Query(ctx, in, o...)
}
func (c *countingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.add("TransactWriteItems")
	return c.Client.TransactWriteItems(ctx, in, o...)
}
func (c *countingDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	c.add("BatchGetItem")
	return c.Client.BatchGetItem(ctx, in, o...)
}
func (c *countingDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	c.add("BatchWriteItem")
	return c.Client.BatchWriteItem(ctx, in, o...)
}

// countedEngine is a workflow engine and job service over a fresh table
// whose DynamoDB requests db counts.
func countedEngine(t *testing.T) (*countingDB, *store.Store, *lifecycle.Service, *queue.Service, *workflow.Engine) {
	t.Helper()
	base, _ := testenv.Table(t)
	db := &countingDB{Client: testenv.DynamoDB(), n: map[string]int{}}
	st := store.New(db, base.Table())
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	return db, st, svc, qsvc, eng
}

// TestChainStepRequests pins what a 3-step chain costs in DynamoDB
// requests besides FETCH: creation is two requests (its root and nodes in
// one BatchWriteItem, then its first job); each ACK is the job's write
// plus, inline, the next step's job, whose put is the record that the step
// finished (wfstore.Store.PutNext: no write of the root, where a marked
// root write and the put were two, and a transaction of both one at twice
// the write units), the next step's definition
// coming with the finished job (job.Job.WorkflowAhead: no read), or for
// the last step the chain's finish (its job says it is the last); the
// stream's verification of the three finished
// jobs is one batch read (their parents, and whether the next steps' jobs
// exist). Before
// inline advancement the stream function alone spent about 10 reads and
// 9 writes on such a chain.
func TestChainStepRequests(t *testing.T) {
	t.Parallel()
	db, st, svc, qsvc, eng := countedEngine(t)
	ctx := context.Background()
	// The queue registration is once per process: not a per-chain cost.
	if err := qsvc.EnsureQueue(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	db.reset()
	v, err := eng.Create(ctx, []byte(`{"type":"chain","name":"reads","steps":[
		{"type":"a","args":[],"options":{"queue":"r"}},{"type":"b","args":[],"options":{"queue":"r"}},{"type":"c","args":[],"options":{"queue":"r"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := db.total(); n != 2 || db.n["BatchWriteItem"] != 1 || db.n["PutItem"] != 1 {
		t.Fatalf("creating a 3-step chain made %d requests (%v), want 2 (its root and nodes, then its first job)", n, db.n)
	}
	id := v.ID
	var done []workflow.Finished
	acks, gets := 0, 0
	for step := 0; step < 3; step++ {
		jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"r"}, Count: 10})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("step %d: %d jobs, %v", step, len(jobs), err)
		}
		db.reset()
		j, err := svc.Ack(ctx, jobs[0].ID, []byte(`1`), 0)
		if err != nil {
			t.Fatal(err)
		}
		acks += db.total()
		gets += db.n["GetItem"]
		done = append(done, workflow.Finished{Job: j})
	}
	if acks != 6 || gets != 0 {
		t.Fatalf("three ACKs made %d requests (%d reads of a node), want 6 (job write and the next job, whose definition the finished job carries; the last: job write and finish)", acks, gets)
	}
	root, err := wfstore.New(st).GetRoot(ctx, id)
	if err != nil || root.State != wfstate.Completed {
		t.Fatalf("root %+v %v", root, err)
	}
	db.reset()
	if err := eng.Verify(ctx, done); err != nil {
		t.Fatal(err)
	}
	if n := db.total(); n != 1 {
		t.Fatalf("verifying three recorded steps made %d requests (%v), want 1", n, db.n)
	}
	// The stream's events of the three steps: no read in a stream function
	// that saw the workflow's creation record, one (the root, once per
	// process) in one that did not; the same events either way.
	for _, warm := range []bool{true, false} {
		stream := wfevents.New(st)
		var nodes []wfevents.NodeChange
		if warm {
			nodes = []wfevents.NodeChange{{New: root, At: time.Now()}}
		}
		var changes []wfevents.JobChange
		for _, f := range done {
			changes = append(changes, wfevents.JobChange{New: f.Job, Version: 3, At: time.Now()})
		}
		db.reset()
		evs, err := stream.Events(ctx, "test", nodes, changes)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if !warm {
			want = 1
		}
		if n := db.total(); n != want {
			t.Errorf("warm=%v: the step events made %d requests (%v), want %d", warm, n, db.n, want)
		}
		var steps []string
		for _, e := range evs {
			if e.Type == events.WorkflowStepCompleted {
				steps = append(steps, fmt.Sprintf("%v/%v/%v/%v", e.Data["step_id"] == e.Data["job_id"], e.Data["workflow_name"], e.Data["parent_type"], e.Data["remaining_steps"]))
			}
		}
		if got := strings.Join(steps, " "); got != "true/reads/chain/2 true/reads/chain/1 true/reads/chain/0" {
			t.Errorf("warm=%v: step events %s", warm, got)
		}
	}
	_ = job.Completed
}

// A chain step's job carries the definitions of the steps after it only
// where they cost no write unit (job.Job.WorkflowAhead): a chain of small
// steps runs each next step from what the finished job carries, one of
// large steps reads each next step's node. Both run the same steps with
// the same inputs.
func TestAChainStepCarriesTheNextStepsOnlyWhereTheyFit(t *testing.T) {
	t.Parallel()
	db, _, svc, qsvc, eng := countedEngine(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		pad   int
		reads int
	}{{"small", 10, 0}, {"large", 700, 2}} {
		queue := "ahead-" + c.name
		if err := qsvc.EnsureQueue(ctx, queue); err != nil {
			t.Fatal(err)
		}
		pad := strings.Repeat("p", c.pad)
		steps := make([]string, 3)
		for i := range steps {
			steps[i] = fmt.Sprintf(`{"type":"t%d","args":[%d,%q],"options":{"queue":%q}}`, i, i, pad, queue)
		}
		if _, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[`+strings.Join(steps, ",")+`]}`)); err != nil {
			t.Fatal(err)
		}
		reads := 0
		for step := 0; step < 3; step++ {
			jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{queue}, Count: 10})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("%s step %d: %d jobs, %v", c.name, step, len(jobs), err)
			}
			j := jobs[0]
			if j.Type != fmt.Sprintf("t%d", step) || string(j.Args) != fmt.Sprintf(`[%d,%q]`, step, pad) {
				t.Fatalf("%s step %d: job %s %s", c.name, step, j.Type, j.Args)
			}
			var want []string
			for k := 0; k < step; k++ {
				want = append(want, fmt.Sprintf(`{"step":%d}`, k))
			}
			if step > 0 && string(j.ParentResults) != "["+strings.Join(want, ",")+"]" {
				t.Fatalf("%s step %d: parent_results %s", c.name, step, j.ParentResults)
			}
			if c.reads == 0 && step < 2 && len(j.WorkflowAhead) == 0 {
				t.Fatalf("%s step %d carries nothing ahead", c.name, step)
			}
			if c.reads > 0 && len(j.WorkflowAhead) > 0 {
				t.Fatalf("%s step %d carries %s, which does not fit in its write unit", c.name, step, j.WorkflowAhead)
			}
			db.reset()
			if _, err := svc.Ack(ctx, j.ID, []byte(fmt.Sprintf(`{"step":%d}`, step)), 0); err != nil {
				t.Fatal(err)
			}
			reads += db.n["GetItem"]
		}
		if reads != c.reads {
			t.Fatalf("%s steps: the ACKs read %d nodes, want %d", c.name, reads, c.reads)
		}
	}
}

// TestGraphStepRequests pins what a step of a dependency graph costs: the
// job's write, one read (the graph's progress with the steps the job names
// as its dependents) and, for a workflow that is a graph, the root's
// record and the started steps' puts (two writes where a transaction was
// one, for half the write units), or the record alone, or the graph's
// finish.
func TestGraphStepRequests(t *testing.T) {
	t.Parallel()
	db, st, svc, qsvc, eng := countedEngine(t)
	ctx := context.Background()
	if err := qsvc.EnsureQueue(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	v, err := eng.Create(ctx, []byte(`{"options":{"queue":"g"},"steps":[{"id":"a","type":"a","args":[],"depends_on":[]},
		{"id":"b","type":"b","args":[],"depends_on":["a"]},{"id":"c","type":"c","args":[],"depends_on":["b"]},
		{"id":"x","type":"x","args":[],"depends_on":[]},{"id":"y","type":"y","args":[],"depends_on":["c","x"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if v.Type != "graph" {
		t.Fatalf("parsed as %v", v.Type)
	}
	active := map[string]*job.Job{}
	for _, want := range []struct {
		typ  string
		reqs int
	}{{"a", 4}, {"x", 3}, {"b", 4}, {"c", 5}, {"y", 3}} {
		jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"g"}, Count: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range jobs {
			active[c.Type] = c
		}
		j := active[want.typ]
		delete(active, want.typ)
		if j == nil {
			t.Fatalf("step %s not fetchable", want.typ)
		}
		db.reset()
		if _, err := svc.Ack(ctx, j.ID, []byte(`1`), 0); err != nil {
			t.Fatal(err)
		}
		// a, b and c start a step: the root's record, then the job's put
		// (wfstore.AdvanceMarked); x starts none (its record), y finishes
		// the graph. c completes y's dependencies: the results of x are
		// read for y.
		if n := db.total(); n != want.reqs {
			t.Fatalf("ACK of graph step %s made %d requests (%v), want %d", want.typ, n, db.n, want.reqs)
		}
	}
	root, err := wfstore.New(st).GetRoot(ctx, v.ID)
	if err != nil || root.State != wfstate.Completed {
		t.Fatalf("root %+v %v", root, err)
	}
}

// Long chains and graphs count their steps on their own node, never in
// shards (only wide groups and batches shard): the stream's verification
// of a step the request recorded is one read.
func TestLongChainAndGraphVerifyInOneRead(t *testing.T) {
	t.Parallel()
	db, st, svc, _, eng := countedEngine(t)
	ctx := context.Background()
	for _, form := range []string{"chain", "graph"} {
		var steps []string
		for i := 0; i < 150; i++ {
			switch {
			case form == "chain":
				steps = append(steps, `{"type":"l.step","args":[],"options":{"queue":"long-`+form+`"}}`)
			case i == 0:
				steps = append(steps, `{"id":"s0","type":"l.step","args":[],"depends_on":[],"options":{"queue":"long-graph"}}`)
			case i == 1:
				steps = append(steps, `{"id":"s1","type":"l.step","args":[],"depends_on":[],"options":{"queue":"long-graph"}}`)
			default:
				steps = append(steps, fmt.Sprintf(`{"id":"s%d","type":"l.step","args":[],"depends_on":["s%d","s%d"],"options":{"queue":"long-graph"}}`, i, i-1, i-2))
			}
		}
		body := `{"type":"chain","steps":[` + strings.Join(steps, ",") + `]}`
		if form == "graph" {
			body = `{"steps":[` + strings.Join(steps, ",") + `]}`
		}
		v, err := eng.Create(ctx, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wfstore.New(st).GetShard(ctx, v.ID, wfstore.RootPath, "0"); err != store.ErrNotFound {
			t.Fatalf("%s: a counter shard exists: %v", form, err)
		}
		jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"long-" + form}, Count: 1})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("%s: %d jobs %v", form, len(jobs), err)
		}
		done, err := svc.Ack(ctx, jobs[0].ID, []byte(`1`), 0)
		if err != nil {
			t.Fatal(err)
		}
		db.reset()
		if err := eng.Verify(ctx, []workflow.Finished{{Job: done}}); err != nil {
			t.Fatal(err)
		}
		if n := db.total(); n != 1 {
			t.Fatalf("%s: verifying a recorded step made %d requests (%v)", form, n, db.n)
		}
	}
}

// TestChainStepWriteUnits pins what a chain step's writes cost in DynamoDB
// write units, as DynamoDB Local reports them (index entries included; a
// transaction counts twice). Pull mode, every item under 1 KB. Each ACK:
// the job's completion, 3 (the item, leaving "due", entering "done"); then
// for the first two steps the put of the next step's job, 2 (the item and
// its "ready" entry), which is the step's record (wfstore.Store.PutNext):
// 3 in updates and 2 in puts, where a record of the step on the root
// added 1 and a transaction of the two writes was 2 × 3; for the last,
// the root's finish, an update too (the item, leaving the due index), 2:
// 5 in updates.
func TestChainStepWriteUnits(t *testing.T) {
	t.Parallel()
	st, rec := testenv.CountedTable(t)
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	ctx := context.Background()
	if _, err := eng.Create(ctx, []byte(`{"type":"chain","name":"units","steps":[
		{"type":"a","args":[],"options":{"queue":"u"}},{"type":"b","args":[],"options":{"queue":"u"}},{"type":"c","args":[],"options":{"queue":"u"}}]}`)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for step := 0; step < 3; step++ {
		jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"u"}, Count: 10})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("step %d: %d jobs, %v", step, len(jobs), err)
		}
		before := rec.Set()
		if _, err := svc.Ack(ctx, jobs[0].ID, []byte(`1`), 0); err != nil {
			t.Fatal(err)
		}
		d := rec.Set().Sub(before)
		got = append(got, fmt.Sprintf("%g+%g+%g", d["DynamoDB UpdateItem"].WriteUnits, d["DynamoDB PutItem"].WriteUnits, d["DynamoDB TransactWriteItems"].WriteUnits))
	}
	if s := strings.Join(got, " "); s != "3+2+0 3+2+0 5+0+0" {
		t.Fatalf("write units of the three ACKs (updates + puts + transactions): %s, want 3+2+0 3+2+0 5+0+0", s)
	}
}

// A node written before nodes counted their writes in "nv" (not projected
// by the due index) holds its count in "version": its next write goes on
// from that count, so the ids of the events derived from its writes
// never repeat.
func TestANodeWrittenBeforeNVGoesOnCountingFromItsVersion(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	st, svc, eng := h.st, h.svc, h.eng
	ctx := context.Background()
	v, err := eng.Create(ctx, []byte(`{"type":"chain","name":"old","steps":[
		{"type":"a","args":[],"options":{"queue":"o"}},{"type":"b","args":[],"options":{"queue":"o"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := v.ID
	table := st.Table()
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "WF#" + id}, "sk": &types.AttributeValueMemberS{Value: "N#/"}}
	if _, err := testenv.DynamoDB().UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: key,
		UpdateExpression: aws.String("SET version = :v REMOVE nv"), ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "5"}}}); err != nil {
		t.Fatal(err)
	}
	old, err := wfstore.New(st).GetRoot(ctx, id)
	if err != nil || old.Version() != 5 {
		t.Fatalf("the old root reads as version %d (%v), want 5", old.Version(), err)
	}
	for step := 0; step < 2; step++ { // the first step's record is its next job; the last finishes the root
		jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"o"}, Count: 10})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("%d jobs, %v", len(jobs), err)
		}
		if _, err := svc.Ack(ctx, jobs[0].ID, []byte(`1`), 0); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := wfstore.New(st).GetRoot(ctx, id)
	if err != nil || cur.Version() != 6 || cur.Rev != 6 || !cur.Done(1) {
		t.Fatalf("after the last step the root is at version %d (nv %d, step counted %v): %v; want 6", cur.Version(), cur.Rev, cur.Done(1), err)
	}
}
