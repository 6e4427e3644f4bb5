package workflow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/internal/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// beforeNextJob calls hook once, just before the put of the job of the
// chain step at path (the second write of store.AdvanceMarked, after the
// root's mark); the put is then made unless hook says the request died.
type beforeNextJob struct {
	*dynamodb.Client
	path string
	hook func(wfID string) (died bool)
	done atomic.Bool
}

func (c *beforeNextJob) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	node, _ := in.Item["wf_node"].(*types.AttributeValueMemberS)
	if node != nil && node.Value == c.path && c.done.CompareAndSwap(false, true) {
		if c.hook(in.Item["wf_id"].(*types.AttributeValueMemberS).Value) {
			return nil, errors.New("the request died before the put")
		}
	}
	return c.Client.PutItem(ctx, in, o...)
}

// markedChain creates a 3-step chain on queue whose engine writes through
// db, runs its first step to completion (its ACK advancing the chain
// inline) and returns the workflow's id, the finished job and the id of
// the second step's job.
func markedChain(t *testing.T, st *store.Store, db store.DynamoAPI, queue string) (id string, first *job.Job, second string) {
	t.Helper()
	ctx := context.Background()
	svc := lifecycle.New(st, lifecycle.Config{})
	eng := workflow.New(store.New(db, st.Table()), workflow.Config{Jobs: svc})
	svc.SetWorkflows(eng)
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"m.a","args":[1],"options":{"queue":"`+queue+`"}},
		{"type":"m.b","args":[2],"options":{"queue":"`+queue+`"}},{"type":"m.c","args":[3],"options":{"queue":"`+queue+`"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id = (*v)["id"].(string)
	jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{queue}, Count: 10})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("first step: %d jobs, %v", len(jobs), err)
	}
	if first, err = svc.Ack(ctx, jobs[0].ID, []byte(`{"paid":true}`), 0); err != nil {
		t.Fatal(err)
	}
	return id, first, workflow.JobID(id, "/s1")
}

// A chain advances by two writes instead of a transaction: the root's
// record of the step, marked with the next step (Node.Launching), then the
// next step's job. A cancel that comes between them finds the mark and
// puts the job as cancelled in its place (with the parent_results it would
// have had), so the advance's put fails: the cancelled workflow is left
// with nothing to run, as when the transaction's check of the root made
// the advance fail. A retry then runs that step from where it was.
func TestACancelBetweenAChainsMarkAndItsJobLeavesNothingToRun(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	svc := lifecycle.New(st, lifecycle.Config{})
	canceller := workflow.New(st, workflow.Config{Jobs: svc})
	var cancelErr error
	db := &beforeNextJob{Client: testenv.DynamoDB(), path: "/s1", hook: func(wf string) bool {
		root, err := st.GetNode(ctx, wf, store.RootPath)
		if err != nil || root.Launching != "/s1" || !root.Done(0) {
			t.Errorf("root before the next job's put: %+v %v; want step 0 counted and /s1 marked", root, err)
		}
		_, cancelErr = canceller.Cancel(ctx, wf)
		return false
	}}
	id, _, second := markedChain(t, st, db, "markq")
	if cancelErr != nil {
		t.Fatalf("the cancel between the writes: %v", cancelErr)
	}
	if !db.done.Load() {
		t.Fatal("the advance put no job: the race did not happen")
	}
	if got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"markq"}, Count: 10}); err != nil || len(got) != 0 {
		t.Fatalf("the cancelled workflow left %d jobs to run (%v)", len(got), err)
	}
	j, err := svc.Info(ctx, second)
	if err != nil || j.State != job.Cancelled || j.EnqueuedAt != nil || j.CancelledAt == nil {
		t.Fatalf("second step's job: %+v %v; want the cancel's placeholder", j, err)
	}
	if string(j.ParentResults) != `[{"paid":true}]` || string(j.Args) != `[2]` {
		t.Fatalf("placeholder's args %s and parent_results %s; want [2] and the first step's result", j.Args, j.ParentResults)
	}

	// The retry runs the second step with the first one's result.
	if _, err := canceller.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"markq"}, Count: 10})
	if err != nil || len(got) != 1 || got[0].ID != second || string(got[0].ParentResults) != `[{"paid":true}]` {
		t.Fatalf("after the retry: %+v %v; want the second step with the first one's result", got, err)
	}
}

// A cancel that comes before the root's record makes the advance fail
// and writes no job: the record is conditional on the workflow running.
func TestAChainStepFinishingAfterItsCancelStartsNothing(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	svc := lifecycle.New(st, lifecycle.Config{})
	eng := workflow.New(st, workflow.Config{Jobs: svc})
	svc.SetWorkflows(eng)
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"m.a","args":[],"options":{"queue":"lateq"}},{"type":"m.b","args":[],"options":{"queue":"lateq"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := (*v)["id"].(string)
	jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"lateq"}, Count: 10})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("first step: %d jobs, %v", len(jobs), err)
	}
	if _, err := eng.Cancel(ctx, id); err != nil { // the running step runs on
		t.Fatal(err)
	}
	if _, err := svc.Ack(ctx, jobs[0].ID, []byte(`1`), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Info(ctx, workflow.JobID(id, "/s1")); err == nil {
		t.Fatal("a step finishing after its workflow's cancel started the next one")
	}
	root, err := st.GetNode(ctx, id, store.RootPath)
	if err != nil || root.State != wfstate.Cancelled || root.Launching != "" {
		t.Fatalf("root: %+v %v; want cancelled and unmarked", root, err)
	}
}

// A request that dies between the root's record (and mark) and the next
// step's job leaves a running chain with nothing to run: the stream
// function's check of the finished step sees the mark without the job and
// writes it, with the first step's result. Until then the workflow
// waits; nothing else would start the step.
func TestTheStreamWritesTheJobOfAChainStepWhoseRequestDiedAfterTheMark(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	db := &beforeNextJob{Client: testenv.DynamoDB(), path: "/s1", hook: func(string) bool { return true }}
	id, first, second := markedChain(t, st, db, "gapq")
	if _, err := st.GetItem(ctx, second); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second step's job after the dead request: %v; want none", err)
	}
	root, err := st.GetNode(ctx, id, store.RootPath)
	if err != nil || root.State != wfstate.Running || root.Launching != "/s1" || !root.Done(0) {
		t.Fatalf("root after the dead request: %+v %v", root, err)
	}
	stream := workflow.New(st, workflow.Config{Jobs: lifecycle.New(st, lifecycle.Config{})})
	if err := stream.Verify(ctx, []workflow.Finished{{Job: first}}); err != nil {
		t.Fatal(err)
	}
	it, err := st.GetItem(ctx, second)
	if err != nil || it.Job.State != job.Available || string(it.Job.ParentResults) != `[{"paid":true}]` {
		t.Fatalf("second step's job after the stream's check: %+v %v; want it available with the first step's result", it.Job, err)
	}
	// Checked again (a duplicate record): nothing more.
	if err := stream.Verify(ctx, []workflow.Finished{{Job: first}}); err != nil {
		t.Fatal(err)
	}
	if it2, err := st.GetItem(ctx, second); err != nil || it2.Version != it.Version {
		t.Fatalf("a second check wrote the job again: version %d -> %d (%v)", it.Version, it2.Version, err)
	}
}

// Only a job step of the chain workflow itself is started by the marked
// writes: a step that is a composite (here a group of one job) keeps the
// transaction, since a cancel's placeholder and the stream's check look
// for the root's own next step.
func TestAChainStepThatIsAGroupStartsInATransaction(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	svc := lifecycle.New(st, lifecycle.Config{})
	eng := workflow.New(st, workflow.Config{Jobs: svc})
	svc.SetWorkflows(eng)
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"m.a","args":[],"options":{"queue":"grpq"}},
		{"type":"group","jobs":[{"type":"m.b","args":[],"options":{"queue":"grpq"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := (*v)["id"].(string)
	jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"grpq"}, Count: 10})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("first step: %d jobs, %v", len(jobs), err)
	}
	if _, err := svc.Ack(ctx, jobs[0].ID, []byte(`1`), 0); err != nil {
		t.Fatal(err)
	}
	root, err := st.GetNode(ctx, id, store.RootPath)
	if err != nil || !root.Done(0) || root.Launching != "" {
		t.Fatalf("root: %+v %v; want step 0 counted and no launch mark", root, err)
	}
	if j, err := svc.Info(ctx, workflow.JobID(id, "/s1/j0")); err != nil || j.State != job.Available {
		t.Fatalf("the group's job: %+v %v", j, err)
	}
}
