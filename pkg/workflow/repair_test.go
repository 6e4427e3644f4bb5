package workflow_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
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

// TestRepairRecoversLostProgress loses both the inline advancement (the
// request died after its job write) and the stream records (a batch that
// exhausted its retries) of every step, and checks that the sweeper's
// repair finishes the workflow anyway, and leaves it alone afterwards.
func TestRepairRecoversLostProgress(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Now().UTC())
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc})
	eng := workflow.New(st, workflow.Config{Now: clk.Now, Admit: qsvc})
	ctx := context.Background()
	v, err := eng.Create(ctx, []byte(`{"type":"chain","steps":[{"type":"r.one","args":[],"options":{"queue":"rq"}},
		{"type":"group","jobs":[{"type":"r.two","args":[],"options":{"queue":"rq"}},{"type":"r.three","args":[],"options":{"queue":"rq"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := v.ID
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
	root, err := wfstore.New(st).GetRoot(ctx, id)
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
// marked cfirst, first jobs missing) gets its first jobs instead, and
// loses the cfirst mark.
func TestRepairDeletesAWorkflowWhoseCreatorDied(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	table := st.Table()
	clk := testenv.NewClock(time.Now().UTC())
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc})
	eng := workflow.New(st, workflow.Config{Now: clk.Now, Admit: qsvc})
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
		id := v.ID
		ids = append(ids, id)
		// Undo what the creator did after its first stage: delete the jobs
		// and, for the first workflow, mark the root creating again.
		items, err := wfstore.New(st).WorkflowItems(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, node := range items {
			if n := node.Base(); n.Kind == wfdef.KindJob {
				if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
					"pk": &types.AttributeValueMemberS{Value: "JOB#" + wfdef.JobID(id, n.Path)}, "sk": &types.AttributeValueMemberS{Value: "JOB"}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The first dies before its nodes are all written (the root still
		// marked creating), the second while it writes the first jobs (the
		// root marked cfirst).
		mark := "cfirst"
		if k == 0 {
			mark = "creating"
		}
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "WF#" + id}, "sk": &types.AttributeValueMemberS{Value: "N#/"}},
			UpdateExpression: aws.String("SET " + mark + " = :t"), ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}}}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(workflow.CheckAfter)
	if n, err := eng.Repair(ctx, 10); err != nil || n != 2 {
		t.Fatalf("repair: %d %v", n, err)
	}
	if items, err := wfstore.New(st).WorkflowItems(ctx, ids[0]); err != nil || len(items) != 0 {
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
	if root, err := wfstore.New(st).GetRoot(ctx, ids[1]); err != nil || root.Unguarded {
		t.Fatalf("the repaired root keeps cfirst (%v): a cancel would look for unwritten first jobs again", err)
	}
}

// applyFailing fails, while fail is set, every transaction that updates
// jobs (the job store's ApplyAll and ApplyAllIf, a cancel's cancelling of
// its jobs): a cancelling request that died after it cancelled the root,
// before its jobs.
type applyFailing struct {
	*dynamodb.Client
	fail atomic.Bool
}

func (a *applyFailing) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if a.fail.Load() {
		for _, it := range in.TransactItems {
			if it.Update != nil && strings.HasPrefix(keyS(it.Update.Key, "pk"), "JOB#") {
				return nil, errors.New("the request died")
			}
		}
	}
	return a.Client.TransactWriteItems(ctx, in, o...)
}

// TestRepairCancelsWhatACancelLeft: a cancel whose request died after it
// cancelled the root (and before its jobs; no stream record carries the
// rest) is finished by the sweeper's check of the cancelled root, which
// then drops the workflow from its checks; a cancel that finished is
// checked once and changes nothing.
func TestRepairCancelsWhatACancelLeft(t *testing.T) {
	t.Parallel()
	base, _ := testenv.Table(t)
	wst := &applyFailing{Client: testenv.DynamoDB()}
	st := store.New(wst, base.Table())
	clk := testenv.NewClock(time.Now().UTC())
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	eng := workflow.New(st, workflow.Config{Now: clk.Now, Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc, Workflows: eng})
	ctx := context.Background()
	died, finished := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	for _, id := range []string{died, finished} {
		// Each with an on_cancel handler, which the died request never
		// started.
		body := strings.TrimSuffix(asyncBody(id, "rcq", 30), "}") +
			`,"on_cancel":{"type":"rc.clean","args":[],"options":{"queue":"rcq-h"}}}`
		if _, err := eng.Create(ctx, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	wst.fail.Store(true)
	if _, err := eng.Cancel(ctx, died); err == nil {
		t.Fatal("the cancel's jobs failed, and it answered no error")
	}
	wst.fail.Store(false)
	if _, err := eng.Cancel(ctx, finished); err != nil {
		t.Fatal(err)
	}
	if got := jobStates(t, st, died); got[job.Available] != 30 {
		t.Fatalf("jobs of the died cancel before the check: %v", got)
	}
	if got := jobStates(t, st, finished); got[job.Cancelled] != 30 {
		t.Fatalf("jobs of the finished cancel: %v", got)
	}
	if n, err := eng.Repair(ctx, 10); err != nil || n != 0 {
		t.Fatalf("repair before the check is due: %d %v", n, err)
	}
	clk.Add(workflow.CheckAfter)
	if n, err := eng.Repair(ctx, 10); err != nil || n != 2 {
		t.Fatalf("repair: %d %v", n, err)
	}
	for _, id := range []string{died, finished} {
		if got := jobStates(t, st, id); got[job.Cancelled] != 30 {
			t.Fatalf("jobs of %s after the check: %v", id, got)
		}
		root, err := wfstore.New(st).GetRoot(ctx, id)
		if err != nil || root.State != wfstate.Cancelled || root.DuePK != "" || root.Cancelling {
			t.Fatalf("root after the check: %+v %v", root, err)
		}
	}
	if jobs := fetchAll(t, svc, "rcq"); len(jobs) != 0 {
		t.Fatalf("%d jobs of the cancelled workflows fetched", len(jobs))
	}
	// One on_cancel handler each: the died one started by the check, the
	// other by its request (and not again by the check).
	if jobs := fetchAll(t, svc, "rcq-h"); len(jobs) != 2 || jobs[0].WorkflowID == jobs[1].WorkflowID {
		t.Fatalf("on_cancel handlers: %d jobs", len(jobs))
	}
	clk.Add(workflow.CheckAfter)
	if n, _ := eng.Repair(ctx, 10); n != 0 {
		t.Fatal("a cancelled workflow is still checked after its jobs are")
	}
}

// cancelMidway cancels the workflow whose first job put it sees third,
// before that put lands: a cancel racing the creation's unguarded writes
// of a large workflow's first jobs.
type cancelMidway struct {
	*dynamodb.Client
	cancel func(wfID string)
	puts   atomic.Int64
}

func (c *cancelMidway) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if sk, _ := in.Item["sk"].(*types.AttributeValueMemberS); sk != nil && sk.Value == "JOB" && c.puts.Add(1) == 3 {
		c.cancel(in.Item["wf_id"].(*types.AttributeValueMemberS).Value)
	}
	return c.Client.PutItem(ctx, in, o...)
}

// createCancelledMidway creates a group of 150 jobs on queue and calls
// cancel with its id from inside the creation's third job put (its first
// jobs are being written unguarded), and returns the workflow's id and its
// first jobs' ids.
func createCancelledMidway(t *testing.T, st *store.Store, admit workflow.Admitter, queue string, cancel func(id string)) (string, []string) {
	t.Helper()
	db := &cancelMidway{Client: testenv.DynamoDB(), cancel: cancel}
	eng := workflow.New(store.New(db, st.Table()), workflow.Config{Admit: admit})
	jobs := make([]string, 150)
	for i := range jobs {
		jobs[i] = `{"type":"race.job","args":[],"options":{"queue":"` + queue + `"}}`
	}
	v, err := eng.Create(context.Background(), []byte(`{"type":"group","jobs":[`+strings.Join(jobs, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	id := v.ID
	ids := make([]string, len(jobs))
	for i := range ids {
		ids[i] = wfdef.JobID(id, "/j"+strconv.Itoa(i))
	}
	return id, ids
}

// A large workflow's first jobs are written by plain conditional puts (a
// transaction with a check of the root would cost twice the units). A
// cancel that comes while they are written puts each one not written yet
// as cancelled, so the creation's puts after it fail: the cancelled
// workflow is left with no job to run, every first job cancelled.
func TestACancelRacingTheFirstJobsLeavesNoneToRun(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	qsvc := queue.NewService(st, queue.Config{})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	canceller := workflow.New(st, workflow.Config{Admit: qsvc})
	ctx := context.Background()
	var cancelErr error
	id, ids := createCancelledMidway(t, st, qsvc, "raceq", func(id string) { _, cancelErr = canceller.Cancel(ctx, id) })
	if cancelErr != nil {
		t.Fatalf("the cancel during the creation: %v", cancelErr)
	}
	root, err := wfstore.New(st).GetRoot(ctx, id)
	if err != nil || root.State != wfstate.Cancelled || root.Unguarded {
		t.Fatalf("root after the creation: %+v %v", root, err)
	}
	if got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"raceq"}, Count: 100}); err != nil || len(got) != 0 {
		t.Fatalf("a cancelled workflow left %d jobs to run (%v)", len(got), err)
	}
	have, err := st.BatchGetJobs(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	unwritten := 0
	for _, jid := range ids {
		j := have[jid]
		if j == nil || j.State != job.Cancelled {
			t.Fatalf("first job %s: %+v", jid, j)
		}
		if j.EnqueuedAt == nil {
			unwritten++ // put as cancelled by the cancel
			if j.CancelledAt == nil {
				t.Fatalf("first job %s put as cancelled has no cancelled_at", jid)
			}
		}
	}
	if unwritten == 0 || unwritten == 150 {
		t.Fatalf("%d of the 150 first jobs were put by the cancel: the race did not happen", unwritten)
	}
}

// reopenBeforePlaceholders re-opens a workflow (sets its root running, as
// a retry would) just before the first transaction that puts cancelled
// jobs: the cancel read the root stopped, and the workflow runs again by
// the time its placeholders are written.
type reopenBeforePlaceholders struct {
	*dynamodb.Client
	table    string
	reopened atomic.Bool
}

func (c *reopenBeforePlaceholders) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		if it.Put == nil {
			continue
		}
		sk, _ := it.Put.Item["sk"].(*types.AttributeValueMemberS)
		state, _ := it.Put.Item["state"].(*types.AttributeValueMemberS)
		if sk == nil || sk.Value != "JOB" || state == nil || state.Value != "cancelled" || !c.reopened.CompareAndSwap(false, true) {
			continue
		}
		wf := it.Put.Item["wf_id"].(*types.AttributeValueMemberS).Value
		if _, err := c.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &c.table,
			Key:                      map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "WF#" + wf}, "sk": &types.AttributeValueMemberS{Value: "N#/"}},
			UpdateExpression:         aws.String("SET #s = :r"),
			ExpressionAttributeNames: map[string]string{"#s": "state"}, ExpressionAttributeValues: map[string]types.AttributeValue{":r": &types.AttributeValueMemberS{Value: "running"}}}); err != nil {
			return nil, err
		}
		break
	}
	return c.Client.TransactWriteItems(ctx, in, o...)
}

// The cancel's placeholders check, in their own transaction, that the
// workflow is still stopped: one re-opened since the cancel read its root
// (a retry) gets no cancelled placeholder among its first jobs; its
// creation writes them.
func TestACancelsPlaceholdersDoNotLandInAReopenedWorkflow(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	qsvc := queue.NewService(st, queue.Config{})
	reopen := &reopenBeforePlaceholders{Client: testenv.DynamoDB(), table: st.Table()}
	canceller := workflow.New(store.New(reopen, st.Table()), workflow.Config{Admit: qsvc})
	ctx := context.Background()
	_, ids := createCancelledMidway(t, st, qsvc, "reopenq", func(id string) { _, _ = canceller.Cancel(ctx, id) })
	if !reopen.reopened.Load() {
		t.Fatal("the cancel wrote no placeholder: the race did not happen")
	}
	have, err := st.BatchGetJobs(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, jid := range ids {
		if j := have[jid]; j == nil || (j.State == job.Cancelled && j.EnqueuedAt == nil) {
			t.Fatalf("first job %s of the re-opened workflow: %+v (missing, or a cancel's placeholder)", jid, j)
		}
	}
}
