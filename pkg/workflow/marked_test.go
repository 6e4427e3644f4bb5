package workflow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// beforeNextJob calls hook once, just before the put of the job of the
// chain step at path (wfstore.Store.PutNext, after the ACK of the step
// before it; or the second write of wfstore.AdvanceMarked, after the
// root's mark, for a graph); the put is then made unless hook says the
// request died.
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

// fetchOne fetches the one available job of queue.
func fetchOne(t *testing.T, svc *lifecycle.Service, queue string) *job.Job {
	t.Helper()
	jobs, err := svc.Fetch(context.Background(), lifecycle.FetchRequest{Queues: []string{queue}, Count: 10})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("queue %s: %d jobs, %v; want one", queue, len(jobs), err)
	}
	return jobs[0]
}

// markedChain creates a 3-step chain on queue qname whose engine writes through
// db, runs its first step to completion (its ACK advancing the chain
// inline) and returns the workflow's id, the finished job and the id of
// the second step's job.
func markedChain(t *testing.T, st *store.Store, db store.DynamoAPI, qname string) (id string, first *job.Job, second string) {
	t.Helper()
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(store.New(db, st.Table()), workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"m.a","args":[1],"options":{"queue":"`+qname+`"}},
		{"type":"m.b","args":[2],"options":{"queue":"`+qname+`"}},{"type":"m.c","args":[3],"options":{"queue":"`+qname+`"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id = v.ID
	if first, err = svc.Ack(ctx, fetchOne(t, svc, qname).ID, []byte(`{"paid":true}`), 0); err != nil {
		t.Fatal(err)
	}
	return id, first, wfdef.JobID(id, "/s1")
}

// A workflow that is a chain advances by the next step's put alone (no
// write of the root). A cancel that comes between the ACK and that put
// finds the step completed and its next job missing, and puts the job as
// cancelled in its place (with the parent_results it would have had), so
// the advance's put fails: the cancelled workflow is left with nothing to
// run. A retry then runs that step from where it was, with the first
// step's result.
func TestACancelBetweenAChainsStepAndItsNextJobLeavesNothingToRun(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	canceller := workflow.New(st, workflow.Config{Admit: qsvc})
	var cancelErr error
	db := &beforeNextJob{Client: testenv.DynamoDB(), path: "/s1", hook: func(wf string) bool {
		root, err := wfstore.New(st).GetRoot(ctx, wf)
		if err != nil || root.Rev != 1 || root.Launching != "" || root.Done(0) {
			t.Errorf("root before the next job's put: %+v %v; want it as created (the step's record is the next job)", root, err)
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
	if err != nil || !wfstore.IsPlaceholder(j) || j.CancelledAt == nil {
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

// A cancel while a chain's step runs (a running job is not cancelled)
// puts a placeholder for the step after it: the step finishing after the
// cancel finds it, and starts nothing. A retry removes the placeholder
// (built before the step had a result) and starts the next step from the
// finished one, with its result.
func TestAChainStepFinishingAfterItsCancelStartsNothing(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"m.a","args":[],"options":{"queue":"lateq"}},{"type":"m.b","args":[],"options":{"queue":"lateq"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := v.ID
	running := fetchOne(t, svc, "lateq")
	if _, err := eng.Cancel(ctx, id); err != nil { // the running step runs on
		t.Fatal(err)
	}
	if _, err := svc.Ack(ctx, running.ID, []byte(`7`), 0); err != nil {
		t.Fatal(err)
	}
	if j, err := svc.Info(ctx, wfdef.JobID(id, "/s1")); err != nil || !wfstore.IsPlaceholder(j) {
		t.Fatalf("a step finishing after its workflow's cancel: next job %+v %v; want the cancel's placeholder", j, err)
	}
	if got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"lateq"}, Count: 10}); err != nil || len(got) != 0 {
		t.Fatalf("the cancelled workflow left %d jobs to run (%v)", len(got), err)
	}
	root, err := wfstore.New(st).GetRoot(ctx, id)
	if err != nil || root.State != wfstate.Cancelled || root.Launching != "" {
		t.Fatalf("root: %+v %v; want cancelled and unmarked", root, err)
	}
	if _, err := eng.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	next := fetchOne(t, svc, "lateq")
	if next.ID != wfdef.JobID(id, "/s1") || string(next.ParentResults) != `[7]` {
		t.Fatalf("after the retry: %s with parent_results %s; want the second step with the first one's result", next.WorkflowNode, next.ParentResults)
	}
}

// A retry while the step a cancel found running still runs removes the
// placeholder of the step after it: the step's own ACK then starts it.
func TestARetryWhileAChainStepRunsLetsItStartTheNext(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"m.a","args":[],"options":{"queue":"runq"}},{"type":"m.b","args":[],"options":{"queue":"runq"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	running := fetchOne(t, svc, "runq")
	if _, err := eng.Cancel(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Retry(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetItem(ctx, wfdef.JobID(v.ID, "/s1")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the next step's placeholder after the retry: %v; want it removed", err)
	}
	if _, err := svc.Ack(ctx, running.ID, []byte(`"r"`), 0); err != nil {
		t.Fatal(err)
	}
	next := fetchOne(t, svc, "runq")
	if next.ID != wfdef.JobID(v.ID, "/s1") || string(next.ParentResults) != `["r"]` {
		t.Fatalf("after the step: %s with parent_results %s; want the second step with its result", next.WorkflowNode, next.ParentResults)
	}
}

// A request that dies between a chain step's ACK and the next step's put
// leaves a running chain with nothing to run: the stream function's check
// of the finished step sees no next job and writes it, with the first
// step's result. Until then the workflow waits; nothing else would start
// the step.
func TestTheStreamWritesTheJobOfAChainStepWhoseRequestDiedBeforeIt(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	db := &beforeNextJob{Client: testenv.DynamoDB(), path: "/s1", hook: func(string) bool { return true }}
	id, first, second := markedChain(t, st, db, "gapq")
	if _, err := st.GetItem(ctx, second); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second step's job after the dead request: %v; want none", err)
	}
	root, err := wfstore.New(st).GetRoot(ctx, id)
	if err != nil || root.State != wfstate.Running || root.Rev != 1 {
		t.Fatalf("root after the dead request: %+v %v; want it running, as created", root, err)
	}
	it := verifyWritesOnce(t, st, first, second)
	if it.Job.State != job.Available || string(it.Job.ParentResults) != `[{"paid":true}]` {
		t.Fatalf("second step's job after the stream's check: %+v; want it available with the first step's result", it.Job)
	}
}

// verifyWritesOnce runs the stream function's check of finished and
// returns the job jobID as it then is (it must exist); the check run again
// (a duplicate record) must not write it again.
func verifyWritesOnce(t *testing.T, st *store.Store, finished *job.Job, jobID string) *store.Item {
	t.Helper()
	ctx := context.Background()
	stream := workflow.New(st, workflow.Config{Admit: queue.NewService(st, queue.Config{})})
	if err := stream.Verify(ctx, []workflow.Finished{{Job: finished}}); err != nil {
		t.Fatal(err)
	}
	it, err := st.GetItem(ctx, jobID)
	if err != nil {
		t.Fatalf("job %s after the stream's check: %v", jobID, err)
	}
	if err := stream.Verify(ctx, []workflow.Finished{{Job: finished}}); err != nil {
		t.Fatal(err)
	}
	if it2, err := st.GetItem(ctx, jobID); err != nil || it2.Version != it.Version {
		t.Fatalf("a second check wrote job %s again (%v)", jobID, err)
	}
	return &it
}

// Only a job step of the chain workflow itself is started by the marked
// writes: a step that is a composite (here a group of one job) keeps the
// transaction, since a cancel's placeholder and the stream's check look
// for the root's own next step.
func TestAChainStepThatIsAGroupStartsInATransaction(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"m.a","args":[],"options":{"queue":"grpq"}},
		{"type":"group","jobs":[{"type":"m.b","args":[],"options":{"queue":"grpq"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := v.ID
	if _, err := svc.Ack(ctx, fetchOne(t, svc, "grpq").ID, []byte(`1`), 0); err != nil {
		t.Fatal(err)
	}
	root, err := wfstore.New(st).GetRoot(ctx, id)
	if err != nil || !root.Done(0) || root.Launching != "" {
		t.Fatalf("root: %+v %v; want step 0 counted and no launch mark", root, err)
	}
	if j, err := svc.Info(ctx, wfdef.JobID(id, "/s1/j0")); err != nil || j.State != job.Available {
		t.Fatalf("the group's job: %+v %v", j, err)
	}
}

// smallChain is a 3-step chain on queue q, with id when it is not empty.
func smallChain(q, id string) string {
	idField := ""
	if id != "" {
		idField = `"id":"` + id + `",`
	}
	return `{` + idField + `"type":"chain","steps":[{"type":"c.a","args":[],"options":{"queue":"` + q + `"}},
		{"type":"c.b","args":[],"options":{"queue":"` + q + `"}},{"type":"c.c","args":[],"options":{"queue":"` + q + `"}}]}`
}

// A small workflow with a server-made id and one first job is created by
// two requests instead of a transaction, on a push-mode queue as on a
// pull-mode one: its root (marked cfirst) and nodes in one
// BatchWriteItem, then the first job's conditional put, at half the write
// units. A workflow whose id the client chose keeps the transaction (its
// duplicate check is a condition).
func TestAChainIsCreatedWithoutATransaction(t *testing.T) {
	t.Parallel()
	st, rec := testenv.CountedTable(t)
	qsvc := queue.NewService(st, queue.Config{PushQueues: []string{"cq"}})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	ctx := context.Background()
	create := func(body string) (string, callstats.Set) {
		t.Helper()
		before := rec.Set()
		v, err := eng.Create(ctx, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return v.ID, rec.Set().Sub(before)
	}
	for _, queue := range []string{"cq", "pullq"} {
		if err := qsvc.EnsureQueue(ctx, queue); err != nil {
			t.Fatal(err)
		}
		id, d := create(smallChain(queue, ""))
		bw, put, tx := d["DynamoDB BatchWriteItem"], d["DynamoDB PutItem"], d["DynamoDB TransactWriteItems"]
		if bw.Calls != 1 || put.Calls != 1 || tx.Calls != 0 || bw.WriteUnits+put.WriteUnits != 7 {
			t.Fatalf("creation on %s: %+v; want one BatchWriteItem and one PutItem, 7 units in all (the root, its check, three nodes; the job and its index entry)", queue, d)
		}
		root, err := wfstore.New(st).GetRoot(ctx, id)
		if err != nil || !root.Unguarded || root.State != wfstate.Running {
			t.Fatalf("root on %s: %+v %v; want running and marked cfirst", queue, root, err)
		}
		if j, err := svc.Info(ctx, wfdef.JobID(id, "/s0")); err != nil || j.State != job.Available {
			t.Fatalf("first job on %s: %+v %v", queue, j, err)
		}
	}

	chosen := "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d7"
	if _, d := create(smallChain("cq", chosen)); d["DynamoDB TransactWriteItems"].Calls != 1 || d["DynamoDB BatchWriteItem"].Calls != 0 {
		t.Fatalf("creation with the client's id: %+v; want one transaction", d)
	}
	if _, err := eng.Create(ctx, []byte(smallChain("cq", chosen))); err == nil {
		t.Fatal("a second creation with the same id was accepted")
	}
}

// A cancel between the creation's two requests finds the root's cfirst
// mark and puts the first job as cancelled in its place, so the
// creation's put fails: the cancelled workflow has nothing to run.
func TestACancelBetweenACreationsRequestsLeavesNothingToRun(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{PushQueues: []string{"ccq"}})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	canceller := workflow.New(st, workflow.Config{Admit: qsvc})
	var cancelErr error
	db := &beforeNextJob{Client: testenv.DynamoDB(), path: "/s0", hook: func(wf string) bool {
		_, cancelErr = canceller.Cancel(ctx, wf)
		return false
	}}
	eng := workflow.New(store.New(db, st.Table()), workflow.Config{Admit: qsvc})
	v, err := eng.Create(ctx, []byte(smallChain("ccq", "")))
	if err != nil || cancelErr != nil || !db.done.Load() {
		t.Fatalf("create: %v, cancel: %v, raced: %v", err, cancelErr, db.done.Load())
	}
	id := v.ID
	j, err := svc.Info(ctx, wfdef.JobID(id, "/s0"))
	if err != nil || j.State != job.Cancelled || j.EnqueuedAt != nil {
		t.Fatalf("first job: %+v %v; want the cancel's placeholder", j, err)
	}
}

// A creator that dies between the two requests leaves a running workflow
// without its first job; the root's progress check writes it.
func TestTheProgressCheckWritesTheFirstJobOfACreationThatDied(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{PushQueues: []string{"cdq"}})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	var id string
	db := &beforeNextJob{Client: testenv.DynamoDB(), path: "/s0", hook: func(wf string) bool { id = wf; return true }}
	eng := workflow.New(store.New(db, st.Table()), workflow.Config{Admit: qsvc})
	if _, err := eng.Create(ctx, []byte(smallChain("cdq", ""))); err == nil {
		t.Fatal("the creation whose job put failed answered success")
	}
	if _, err := st.GetItem(ctx, wfdef.JobID(id, "/s0")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("first job after the dead creation: %v; want none", err)
	}
	later := workflow.New(st, workflow.Config{Admit: qsvc, Now: func() time.Time { return time.Now().Add(workflow.CheckAfter + time.Minute) }})
	if _, err := later.Repair(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if j, err := svc.Info(ctx, wfdef.JobID(id, "/s0")); err != nil || j.State != job.Available {
		t.Fatalf("first job after the progress check: %+v %v; want it available", j, err)
	}
}
