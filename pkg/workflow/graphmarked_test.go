package workflow_test

import (
	"context"
	"errors"
	"testing"

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

// diamond is a graph workflow on queue q: a; b and c after a; d after b
// and c (paths /g0 to /g3).
func diamond(q string) string {
	return `{"name":"diamond","options":{"queue":"` + q + `"},"steps":[{"id":"a","type":"d.a","args":[],"depends_on":[]},
		{"id":"b","type":"d.b","args":[],"depends_on":["a"]},{"id":"c","type":"d.c","args":[],"depends_on":["a"]},
		{"id":"d","type":"d.d","args":[],"depends_on":["b","c"]}]}`
}

// markedGraph creates a diamond on queue qname whose engine writes through db,
// runs its first step to completion (its ACK advancing the graph inline)
// and returns the workflow's id and the finished job.
func markedGraph(t *testing.T, st *store.Store, db store.DynamoAPI, qname string) (string, *job.Job) {
	t.Helper()
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(store.New(db, st.Table()), workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	v, err := eng.Create(ctx, []byte(diamond(qname)))
	if err != nil {
		t.Fatal(err)
	}
	first, err := svc.Ack(ctx, fetchOne(t, svc, qname).ID, []byte(`{"a":1}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	return v.ID, first
}

// A workflow that is a graph starts the steps a finished step makes ready
// by two writes instead of a transaction (wfstore.AdvanceMarked): the
// root's record of the step, conditional on the decisions about the other
// steps still holding and marked, then the jobs' conditional puts. Two
// steps finishing at once still start their common dependent once, with
// both results.
func TestAGraphStartsItsStepsWithoutATransaction(t *testing.T) {
	t.Parallel()
	st, rec := testenv.CountedTable(t)
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	for round := 0; round < 3; round++ {
		v, err := eng.Create(ctx, []byte(diamond("gq")))
		if err != nil {
			t.Fatal(err)
		}
		id := v.ID
		before := rec.Set()
		if _, err := svc.Ack(ctx, fetchOne(t, svc, "gq").ID, []byte(`"A"`), 0); err != nil {
			t.Fatal(err)
		}
		jobs, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"gq"}, Count: 10})
		if err != nil || len(jobs) != 2 {
			t.Fatalf("after a: %d jobs, %v; want b and c", len(jobs), err)
		}
		errs := make(chan error, 2)
		for _, j := range jobs {
			go func() {
				_, err := svc.Ack(ctx, j.ID, []byte(`"`+j.Type+`"`), 0)
				errs <- err
			}()
		}
		for range jobs {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		d := fetchOne(t, svc, "gq")
		if d.Type != "d.d" || string(d.ParentResults) != `{"b":"d.b","c":"d.c"}` {
			t.Fatalf("round %d: %s with parent_results %s; want d.d with both results", round, d.Type, d.ParentResults)
		}
		if _, err := svc.Ack(ctx, d.ID, []byte(`1`), 0); err != nil {
			t.Fatal(err)
		}
		if n := rec.Set().Sub(before)["DynamoDB TransactWriteItems"].Calls; n != 0 {
			t.Fatalf("round %d: the graph's steps made %d transactions, want none", round, n)
		}
		root, err := wfstore.New(st).GetRoot(ctx, id)
		if err != nil || root.State != wfstate.Completed || root.Launching != "" {
			t.Fatalf("round %d: root %+v %v; want completed, its mark removed", round, root, err)
		}
	}
}

// A cancel between a graph step's record and its dependents' puts finds
// the mark and puts every job the root's progress says should exist and
// does not yet as cancelled, with the results it would have had: the
// cancelled workflow has nothing to run, and a retry runs those steps.
func TestACancelBetweenAGraphsMarkAndItsJobsLeavesNothingToRun(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	canceller := workflow.New(st, workflow.Config{Admit: qsvc})
	var cancelErr error
	db := &beforeNextJob{Client: testenv.DynamoDB(), path: "/g1", hook: func(wf string) bool {
		root, err := wfstore.New(st).GetRoot(ctx, wf)
		if err != nil || root.Launching != wfstore.RootPath || !root.Done(0) {
			t.Errorf("root before the dependents' puts: %+v %v; want a counted and the graph marked", root, err)
		}
		_, cancelErr = canceller.Cancel(ctx, wf)
		return false
	}}
	id, _ := markedGraph(t, st, db, "gcq")
	if cancelErr != nil || !db.done.Load() {
		t.Fatalf("the cancel between the writes: %v (raced: %v)", cancelErr, db.done.Load())
	}
	if got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"gcq"}, Count: 10}); err != nil || len(got) != 0 {
		t.Fatalf("the cancelled workflow left %d jobs to run (%v)", len(got), err)
	}
	b, err := svc.Info(ctx, wfdef.JobID(id, "/g1"))
	if err != nil || b.State != job.Cancelled || b.EnqueuedAt != nil || string(b.ParentResults) != `{"a":{"a":1}}` {
		t.Fatalf("b: %+v %v; want the cancel's placeholder with a's result", b, err)
	}
	if c, err := svc.Info(ctx, wfdef.JobID(id, "/g2")); err != nil || c.State != job.Cancelled {
		t.Fatalf("c: %+v %v; want cancelled", c, err)
	}
	if _, err := svc.Info(ctx, wfdef.JobID(id, "/g3")); err == nil {
		t.Fatal("d, whose dependencies never completed, has a job")
	}
	if _, err := canceller.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"gcq"}, Count: 10})
	if err != nil || len(got) != 2 || string(got[0].ParentResults) != `{"a":{"a":1}}` || string(got[1].ParentResults) != `{"a":{"a":1}}` {
		t.Fatalf("after the retry: %+v %v; want b and c with a's result", got, err)
	}
}

// A request that dies between a graph step's record and its dependents'
// puts leaves them counted ready without jobs: the stream function's
// check of the finished step writes the missing ones, once.
func TestTheStreamWritesTheJobsOfAGraphStepWhoseRequestDiedAfterTheMark(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	db := &beforeNextJob{Client: testenv.DynamoDB(), path: "/g1", hook: func(string) bool { return true }}
	id, first := markedGraph(t, st, db, "ggq")
	b := wfdef.JobID(id, "/g1")
	if _, err := st.GetItem(ctx, b); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b's job after the dead request: %v; want none", err)
	}
	if it := verifyWritesOnce(t, st, first, b); it.Job.State != job.Available || string(it.Job.ParentResults) != `{"a":{"a":1}}` {
		t.Fatalf("b's job after the stream's check: %+v; want it available with a's result", it.Job)
	}
	if _, err := st.GetItem(ctx, wfdef.JobID(id, "/g3")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("d has a job before b and c completed: %v", err)
	}
}
