package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// asyncBody is a batch of n jobs on queue q with an on_complete callback.
func asyncBody(id, q string, n int) string {
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = `{"type":"async.job","args":[` + jsonStr(i) + `],"options":{"queue":"` + q + `"}}`
	}
	return `{"id":"` + id + `","type":"batch","name":"big","jobs":[` + strings.Join(jobs, ",") +
		`],"callbacks":{"on_complete":{"type":"async.report","args":[],"options":{"queue":"` + q + `"}}}}`
}

func viewMap(t *testing.T, v *wfview.View) map[string]any {
	t.Helper()
	b, _ := json.Marshal(v)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// fetchAll claims every available job of q, in pages of 100.
func fetchAll(t *testing.T, svc *lifecycle.Service, q string) []*job.Job {
	t.Helper()
	var all []*job.Job
	for {
		got, err := svc.Fetch(context.Background(), lifecycle.FetchRequest{Queues: []string{q}, Count: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return all
		}
		all = append(all, got...)
	}
}

// fetchEachOnce fetches every job of queue q and fails unless there are n,
// each handed out once.
func fetchEachOnce(t *testing.T, svc *lifecycle.Service, q string, n int) {
	t.Helper()
	jobs := fetchAll(t, svc, q)
	seen := map[string]bool{}
	for _, j := range jobs {
		seen[j.ID] = true
	}
	if len(jobs) != n || len(seen) != n {
		t.Fatalf("%d jobs (%d distinct), want %d", len(jobs), len(seen), n)
	}
}

// jobStates counts the step jobs (not the handlers') of workflow id by
// state, read by key.
func jobStates(t *testing.T, st *store.Store, id string) map[job.State]int {
	t.Helper()
	ctx := context.Background()
	items, err := wfstore.New(st).WorkflowItems(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range items {
		if it := n.Base(); it.Kind == wfdef.KindJob && !strings.HasPrefix(it.Path, "/~") {
			ids = append(ids, wfdef.JobID(id, it.Path))
		}
	}
	jobs, err := st.BatchGetJobs(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	out := map[job.State]int{}
	for _, j := range jobs {
		out[j.State]++
	}
	return out
}

// A workflow past AsyncItems is accepted with only its root written (GET
// shows it pending with x_creating, no job exists, cancel answers 409,
// its id is taken); Resume, run twice at once as a duplicated stream
// record would, writes every node and each first job exactly once, drops
// the stored definition, and the workflow then runs to its end.
func TestAsyncCreationAnswersAtOnceAndResumeFinishesIt(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc, AsyncItems: 50, CreationSlice: time.Minute}) // one slice: slices have their own test
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7()).String()
	body := asyncBody(id, "asyncq", 150) // past 100 jobs: counted in shards

	v, err := eng.Create(ctx, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if !wfview.Creating(v) {
		t.Fatalf("a 150-job batch over AsyncItems 50 was created in the request: %v", viewMap(t, v))
	}
	m := viewMap(t, v)
	if m["id"] != id || m["state"] != "pending" || m["type"] != "batch" || m["name"] != "big" {
		t.Fatalf("accepted view: %v", m)
	}
	g, err := eng.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	gm := viewMap(t, g)
	if c, _ := gm["x_creating"].(map[string]any); gm["state"] != "pending" || c["phase"] != "nodes" || c["nodes_written"] != 0.0 || c["nodes_total"] != 151.0 {
		t.Fatalf("GET before Resume: %v", gm)
	}
	if jobs := fetchAll(t, svc, "asyncq"); len(jobs) != 0 {
		t.Fatalf("%d jobs exist before Resume", len(jobs))
	}
	if _, err := eng.Cancel(ctx, id); ojserr.As(err).Status() != http.StatusConflict {
		t.Fatalf("cancel while creating: %v", err)
	}
	if _, err := eng.Create(ctx, []byte(body)); ojserr.As(err).Code != ojserr.Duplicate {
		t.Fatalf("second create with the same id: %v", err)
	}

	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := eng.Resume(ctx, id); err != nil {
				t.Errorf("resume: %v", err)
			}
		}()
	}
	wg.Wait()
	root, err := wfstore.New(st).GetRoot(ctx, id)
	if err != nil || root.Creating || len(root.CDef) != 0 || root.CreateItems != 0 || root.State != wfstate.Running {
		t.Fatalf("root after Resume: %+v %v", root, err)
	}
	gm = viewMap(t, must(eng.Get(ctx, id)))
	if _, still := gm["x_creating"]; still || gm["state"] != "running" {
		t.Fatalf("GET after Resume: %v", gm)
	}
	if steps, _ := gm["jobs"].([]any); len(steps) != 150 {
		t.Fatalf("GET lists %d jobs, want 150: %v", len(steps), gm)
	}
	for k := range 2 {
		if sh, err := wfstore.New(st).GetShard(ctx, id, wfstore.RootPath, wfstore.ShardKey(k)); err != nil || sh.Expected != 75 {
			t.Fatalf("counter shard %d: %+v %v", k, sh, err)
		}
	}
	jobs := fetchAll(t, svc, "asyncq")
	seen := map[string]bool{}
	for _, j := range jobs {
		if j.WorkflowID != id || seen[j.ID] || j.Type != "async.job" {
			t.Fatalf("job %s of %s (%s), seen before: %v", j.ID, j.WorkflowID, j.Type, seen[j.ID])
		}
		seen[j.ID] = true
	}
	if len(jobs) != 150 {
		t.Fatalf("%d first jobs, want 150", len(jobs))
	}
	// Resume again (a record retried late): nothing more is written.
	if err := eng.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if more := fetchAll(t, svc, "asyncq"); len(more) != 0 {
		t.Fatalf("a late Resume wrote %d more jobs", len(more))
	}
	for _, j := range jobs {
		if _, err := svc.Ack(ctx, j.ID, []byte(`1`), 0); err != nil {
			t.Fatal(err)
		}
	}
	cb := fetchAll(t, svc, "asyncq")
	if len(cb) != 1 || cb[0].Type != "async.report" {
		t.Fatalf("callback jobs: %v", cb)
	}
	if _, err := svc.Ack(ctx, cb[0].ID, []byte(`"done"`), 0); err != nil {
		t.Fatal(err)
	}
	if s := viewMap(t, must(eng.Get(ctx, id)))["state"]; s != "completed" {
		t.Fatalf("state %v after every job and the callback", s)
	}
}

// A workflow at or under AsyncItems, or with AsyncItems 0, is created in
// the request as before.
func TestSmallWorkflowsAreCreatedInTheRequest(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	qsvc := queue.NewService(st, queue.Config{})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	ctx := context.Background()
	for _, async := range []int{0, 200} {
		eng := workflow.New(st, workflow.Config{Admit: qsvc, AsyncItems: async})
		v, err := eng.Create(ctx, []byte(asyncBody(uuid.Must(uuid.NewV7()).String(), "syncq", 60)))
		if err != nil {
			t.Fatal(err)
		}
		if wfview.Creating(v) || viewMap(t, v)["state"] != "running" {
			t.Fatalf("AsyncItems %d: %v", async, viewMap(t, v))
		}
	}
	if jobs := fetchAll(t, svc, "syncq"); len(jobs) != 120 {
		t.Fatalf("%d jobs, want 120", len(jobs))
	}
}

// The writer of an asynchronous creation dies (the stream function's
// Resume fails, and its retries too): while its nodes are half written,
// and after the root was unmarked but before its first jobs, holding its
// lease. A Resume under that lease writes nothing; the sweeper's repair
// leaves it alone within the grace period, then finishes it: every node,
// each first job once.
func TestRepairFinishesAnAsyncCreationWhoseWriterDied(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	table := st.Table()
	clk := testenv.NewClock(time.Now().UTC())
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc})
	eng := workflow.New(st, workflow.Config{Now: clk.Now, Admit: qsvc, AsyncItems: 50, CreationSlice: time.Minute})
	ctx := context.Background()
	db := testenv.DynamoDB()
	for k, stage := range []string{"nodes", "jobs"} {
		q := "repairq-" + stage
		id := uuid.Must(uuid.NewV7()).String()
		if _, err := eng.Create(ctx, []byte(asyncBody(id, q, 70))); err != nil {
			t.Fatal(err)
		}
		root, err := wfstore.New(st).GetRoot(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		def := root.CDef
		if err := eng.Resume(ctx, id); err != nil {
			t.Fatal(err)
		}
		// Take the workflow back to where the writer died.
		items, err := wfstore.New(st).WorkflowItems(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for i, node := range items {
			n := node.Base()
			if n.Kind == wfdef.KindJob {
				del(t, db, table, "JOB#"+wfdef.JobID(id, n.Path), "JOB")
			}
			if stage == "nodes" && i > 0 && i%2 == 0 {
				del(t, db, table, "WF#"+id, "N#"+n.Path)
			}
		}
		set := "SET cdef = :d"
		vals := map[string]types.AttributeValue{":d": &types.AttributeValueMemberB{Value: def}}
		if stage == "nodes" {
			set += ", creating = :t"
			vals[":t"] = &types.AttributeValueMemberBOOL{Value: true}
		} else {
			// The writer died holding its lease.
			set += ", clease = :l"
			vals[":l"] = &types.AttributeValueMemberN{Value: fmt.Sprint(clk.Now().Add(wfstore.CreationLease).UnixMilli())}
		}
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table),
			Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "WF#" + id}, "sk": &types.AttributeValueMemberS{Value: "N#/"}},
			UpdateExpression: aws.String(set), ExpressionAttributeValues: vals}); err != nil {
			t.Fatal(err)
		}
		gm := viewMap(t, must(eng.Get(ctx, id)))
		if c, _ := gm["x_creating"].(map[string]any); c["phase"] != stage {
			t.Fatalf("%s: GET of the interrupted creation: %v", stage, gm)
		}
		if n, err := eng.Repair(ctx, 10); err != nil || n != 0 {
			t.Fatalf("%s: repair before the check is due: %d %v", stage, n, err)
		}
		if stage == "jobs" {
			// A retried record while the dead writer's lease runs: it
			// leaves the creation alone.
			if err := eng.Resume(ctx, id); err != nil {
				t.Fatal(err)
			}
			if jobs := fetchAll(t, svc, q); len(jobs) != 0 {
				t.Fatalf("a Resume wrote %d jobs under another writer's lease", len(jobs))
			}
		}
		clk.Add(workflow.CheckAfter)
		// (The workflow of the first stage is checked again too.)
		if n, err := eng.Repair(ctx, 10); err != nil || n != k+1 {
			t.Fatalf("%s: repair: %d %v", stage, n, err)
		}
		root, err = wfstore.New(st).GetRoot(ctx, id)
		if err != nil || root.Creating || len(root.CDef) != 0 {
			t.Fatalf("%s: root after the repair: %+v %v", stage, root, err)
		}
		items, err = wfstore.New(st).WorkflowItems(ctx, id)
		if err != nil || len(items) != 72 {
			t.Fatalf("%s: %d nodes after the repair, want 72 (%v)", stage, len(items), err)
		}
		jobs := fetchAll(t, svc, q)
		seen := map[string]bool{}
		for _, j := range jobs {
			seen[j.ID] = true
		}
		if len(jobs) != 70 || len(seen) != 70 {
			t.Fatalf("%s: %d first jobs (%d distinct), want 70", stage, len(jobs), len(seen))
		}
	}
}

func del(t *testing.T, db *dynamodb.Client, table, pk, sk string) {
	t.Helper()
	if _, err := db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}}); err != nil {
		t.Fatal(err)
	}
}

func must(v *wfview.View, err error) *wfview.View {
	if err != nil {
		panic(errors.Join(errors.New("get"), err))
	}
	return v
}

// stallingDB is DynamoDB whose TransactWriteItems calls past the first
// allowTx block until their context ends (a writer running out of its
// invocation's time); every batch write and transaction takes at least
// delay (a slow table); it counts the job puts and node writes that land.
type stallingDB struct {
	*dynamodb.Client
	delay    time.Duration
	mu       sync.Mutex
	allowTx  int    // -1: never stall
	onStall  func() // called when a transaction starts to stall
	txCalls  int
	jobPuts  int
	nodePuts int
	jobReads int // job keys read in batches
	// dropGiveBack fails the write that gives a creation's lease back,
	// as if its writer died just before it.
	dropGiveBack bool
}

func (d *stallingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	d.mu.Lock()
	drop := d.dropGiveBack && strings.Contains(aws.ToString(in.UpdateExpression), "REMOVE clease")
	d.mu.Unlock()
	if drop {
		return nil, errors.New("the writer died")
	}
	return d.Client.UpdateItem(ctx, in, opts...)
}

func (d *stallingDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	d.mu.Lock()
	for _, ka := range in.RequestItems {
		for _, k := range ka.Keys {
			if strings.HasPrefix(k["pk"].(*types.AttributeValueMemberS).Value, "JOB#") {
				d.jobReads++
			}
		}
	}
	d.mu.Unlock()
	return d.Client.BatchGetItem(ctx, in, opts...)
}

func (d *stallingDB) reset(allowTx int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.allowTx, d.txCalls, d.jobPuts, d.nodePuts, d.jobReads = allowTx, 0, 0, 0, 0
}

func (d *stallingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	d.mu.Lock()
	d.txCalls++
	stall := d.allowTx >= 0 && d.txCalls > d.allowTx
	onStall := d.onStall
	d.mu.Unlock()
	if stall {
		if onStall != nil {
			onStall()
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := d.slow(ctx); err != nil {
		return nil, err
	}
	out, err := d.Client.TransactWriteItems(ctx, in, opts...)
	if err == nil {
		d.mu.Lock()
		for _, it := range in.TransactItems {
			if it.Put != nil && strings.HasPrefix(it.Put.Item["pk"].(*types.AttributeValueMemberS).Value, "JOB#") {
				d.jobPuts++
			}
		}
		d.mu.Unlock()
	}
	return out, err
}

func (d *stallingDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if err := d.slow(ctx); err != nil {
		return nil, err
	}
	out, err := d.Client.BatchWriteItem(ctx, in, opts...)
	if err == nil {
		d.mu.Lock()
		for _, reqs := range in.RequestItems {
			d.nodePuts += len(reqs)
		}
		d.mu.Unlock()
	}
	return out, err
}

// A Resume that runs out of its invocation's time (a stream function
// under load) stops before the deadline with ErrCreationUnfinished and
// gives its lease back, so the retry starts at once; the retry writes
// only what does not exist yet, so every try gets further, and each job
// is created once.
func TestResumeOutOfTimeGoesOnFromWhatExists(t *testing.T) {
	t.Parallel()
	st0, _ := testenv.Table(t)
	db := &stallingDB{Client: testenv.DynamoDB(), allowTx: -1}
	st := store.New(db, st0.Table())
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc, AsyncItems: 50, CreationSlice: time.Minute})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	id := uuid.Must(uuid.NewV7()).String()
	const n = 300
	if v, err := eng.Create(context.Background(), []byte(asyncBody(id, "slowq", n))); err != nil || !wfview.Creating(v) {
		t.Fatalf("create: %v", err)
	}

	// The first writer writes the nodes and one transaction of jobs, then
	// its next transaction hangs until the invocation's time runs out,
	// which the hang itself brings about (cancelling the invocation's
	// context), so the test does not depend on how long the nodes take;
	// the deadline only gives Resume an invocation to fit in.
	db.reset(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	db.mu.Lock()
	db.onStall = cancel
	db.mu.Unlock()
	err := eng.Resume(ctx, id)
	cancel()
	db.mu.Lock()
	db.onStall = nil
	db.mu.Unlock()
	if !errors.Is(err, wfstore.ErrCreationUnfinished) {
		t.Fatalf("resume out of time: %v, want ErrCreationUnfinished", err)
	}
	first := db.jobPuts
	if first == 0 || first >= n || db.nodePuts == 0 {
		t.Fatalf("first writer: %d job puts, %d node puts", first, db.nodePuts)
	}
	root, err := wfstore.New(st).GetRoot(context.Background(), id)
	if err != nil || len(root.CDef) == 0 || root.Creating || root.CreateTries != 1 {
		t.Fatalf("root after the first writer: %+v %v", root, err)
	}
	if c, _ := viewMap(t, must(eng.Get(context.Background(), id)))["x_creating"].(map[string]any); c == nil {
		t.Fatal("GET no longer shows the unfinished creation")
	}

	// The retry comes at once (the lease was given back) and writes only
	// the rest.
	db.reset(-1)
	if err := eng.Resume(context.Background(), id); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if db.nodePuts != 0 || db.jobPuts != n-first {
		t.Fatalf("retry wrote %d nodes and %d jobs, want 0 and %d", db.nodePuts, db.jobPuts, n-first)
	}
	root, err = wfstore.New(st).GetRoot(context.Background(), id)
	if err != nil || len(root.CDef) != 0 || root.CreateTries != 0 || root.State != wfstate.Running {
		t.Fatalf("root after the retry: %+v %v", root, err)
	}
	fetchEachOnce(t, svc, "slowq", n)
}

func (d *stallingDB) slow(ctx context.Context) error {
	if d.delay <= 0 {
		return nil
	}
	select {
	case <-time.After(d.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// On a slow table a creation takes several slices (CreationSlice, here
// barely more than one request, which a slice always makes): each
// Resume writes for its slice, stops with ErrCreationUnfinished and leaves
// the root holding the definition and no lease (the change the stream
// function runs the next slice from); GET shows x_creating throughout;
// the slices together write every job once, and the last one ends the
// creation.
func TestCreationIsWrittenOneSliceAtATime(t *testing.T) {
	t.Parallel()
	st0, _ := testenv.Table(t)
	db := &stallingDB{Client: testenv.DynamoDB(), allowTx: -1, delay: 40 * time.Millisecond}
	st := store.New(db, st0.Table())
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc, AsyncItems: 50, CreationSlice: 60 * time.Millisecond})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	id := uuid.Must(uuid.NewV7()).String()
	const n = 400
	if v, err := eng.Create(context.Background(), []byte(asyncBody(id, "sliceq", n))); err != nil || !wfview.Creating(v) {
		t.Fatalf("create: %v", err)
	}
	slices, recorded := 0, 0
	for {
		slices++
		if slices > 100 {
			t.Fatal("no end after 100 slices")
		}
		err := eng.Resume(context.Background(), id)
		if err == nil {
			break
		}
		if !errors.Is(err, wfstore.ErrCreationUnfinished) {
			t.Fatalf("slice %d: %v", slices, err)
		}
		root, err := wfstore.New(st).GetRoot(context.Background(), id)
		if err != nil || len(root.CDef) == 0 || root.CreateLease != 0 || root.CreateTries != slices {
			t.Fatalf("root after slice %d: lease %d, tries %d, definition %d bytes, %v", slices, root.CreateLease, root.CreateTries, len(root.CDef), err)
		}
		// Each slice gave the lease back with how far it got, so the
		// next one writes on from there without reading what exists.
		if root.CreateClean != slices || root.CreateJobs < recorded || root.CreateJobs >= n {
			t.Fatalf("root after slice %d: clean try %d, %d jobs recorded (before: %d)", slices, root.CreateClean, root.CreateJobs, recorded)
		}
		recorded = root.CreateJobs
		if c, _ := viewMap(t, must(eng.Get(context.Background(), id)))["x_creating"].(map[string]any); c == nil {
			t.Fatalf("GET after slice %d no longer shows the unfinished creation", slices)
		}
	}
	if slices < 3 {
		t.Fatalf("created in %d slices; a slow table should take several", slices)
	}
	root, err := wfstore.New(st).GetRoot(context.Background(), id)
	if err != nil || len(root.CDef) != 0 || root.CreateLease != 0 || root.CreateTries != 0 || root.State != wfstate.Running {
		t.Fatalf("root after the last slice: %+v %v", root, err)
	}
	if db.jobReads != 0 || db.jobPuts != n {
		t.Fatalf("the slices read %d job keys and put %d jobs; want 0 and %d", db.jobReads, db.jobPuts, n)
	}
	fetchEachOnce(t, svc, "sliceq", n)
	t.Logf("created in %d slices", slices)
}

// After a writer that died without giving its lease back (so without
// recording how far it got), the next one reads which first jobs exist,
// but only from where the last clean slice recorded, and writes only the
// missing ones: every job exists once.
func TestCreationAfterAWriterThatDiedReadsOnlyPastTheRecord(t *testing.T) {
	t.Parallel()
	st0, _ := testenv.Table(t)
	clk := testenv.NewClock(time.Now().UTC())
	db := &stallingDB{Client: testenv.DynamoDB(), allowTx: -1, delay: 40 * time.Millisecond}
	st := store.New(db, st0.Table())
	qsvc := queue.NewService(st, queue.Config{Now: clk.Now})
	eng := workflow.New(st, workflow.Config{Admit: qsvc, Now: clk.Now, AsyncItems: 50, CreationSlice: 60 * time.Millisecond})
	svc := lifecycle.New(st, lifecycle.Config{Now: clk.Now, Queues: qsvc, Workflows: eng})
	bg := context.Background()
	id := uuid.Must(uuid.NewV7()).String()
	const n = 400
	if v, err := eng.Create(bg, []byte(asyncBody(id, "diedq", n))); err != nil || !wfview.Creating(v) {
		t.Fatalf("create: %v", err)
	}
	// Clean slices (the nodes first) until one wrote jobs.
	var root *wfstore.Root
	for try := 1; root == nil || root.CreateJobs == 0; try++ {
		if err := eng.Resume(bg, id); !errors.Is(err, wfstore.ErrCreationUnfinished) {
			t.Fatalf("slice %d: %v", try, err)
		}
		var err error
		if root, err = wfstore.New(st).GetRoot(bg, id); err != nil || root.CreateClean != try || root.CreateJobs >= n {
			t.Fatalf("after clean slice %d: clean try %d, %d jobs recorded, %v", try, root.CreateClean, root.CreateJobs, err)
		}
	}
	recorded, tries := root.CreateJobs, root.CreateTries
	// The second writer writes, then dies before giving the lease back.
	db.reset(-1)
	db.mu.Lock()
	db.dropGiveBack = true
	db.mu.Unlock()
	if err := eng.Resume(bg, id); !errors.Is(err, wfstore.ErrCreationUnfinished) {
		t.Fatalf("second slice: %v", err)
	}
	db.mu.Lock()
	db.dropGiveBack = false
	died := db.jobPuts
	db.mu.Unlock()
	root, err := wfstore.New(st).GetRoot(bg, id)
	if err != nil || died == 0 || root.CreateLease == 0 || root.CreateJobs != recorded || root.CreateClean != tries || root.CreateTries != tries+1 {
		t.Fatalf("after the writer died: %d jobs put, lease %d, %d recorded, clean try %d, tries %d, %v",
			died, root.CreateLease, root.CreateJobs, root.CreateClean, root.CreateTries, err)
	}
	// Its lease holds the creation until it ends.
	db.reset(-1)
	if err := eng.Resume(bg, id); err != nil || db.jobPuts != 0 {
		t.Fatalf("while the dead writer's lease runs: %v, %d jobs put", err, db.jobPuts)
	}
	clk.Add(wfstore.CreationLease + time.Second)
	for slices := 0; ; slices++ {
		if slices > 100 {
			t.Fatal("no end after 100 slices")
		}
		err := eng.Resume(bg, id)
		if err == nil {
			break
		}
		if !errors.Is(err, wfstore.ErrCreationUnfinished) {
			t.Fatalf("slice: %v", err)
		}
	}
	if db.jobReads != n-recorded || db.jobPuts != n-recorded-died {
		t.Fatalf("after the death: %d job keys read, %d jobs put; want %d and %d", db.jobReads, db.jobPuts, n-recorded, n-recorded-died)
	}
	fetchEachOnce(t, svc, "diedq", n)
}

// A cancel that runs out of the API's time (its budget ends 8 s and
// twice its reads' time before the request's deadline) cancels what it
// got to (a first transaction of 99 jobs at least: the 100th item checks
// that the root is still cancelled), marks the root
// cancelling and says how many jobs are left; Resume (the stream
// function, from that mark, a slice at a time) cancels the rest and
// removes the mark.
func TestCancelOutOfTimeLeavesTheRestToTheStream(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	bg := context.Background()
	id := uuid.Must(uuid.NewV7()).String()
	const n = 450
	if _, err := eng.Create(bg, []byte(asyncBody(id, "cancelq", n))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 8*time.Second) // no time for more than the first transaction
	v, err := eng.Cancel(ctx, id)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	m := viewMap(t, v)
	xc, _ := m["x_cancelling"].(map[string]any)
	if m["state"] != "cancelled" || xc == nil || xc["jobs_left"] != float64(n-99) {
		t.Fatalf("cancel out of time: state %v, x_cancelling %v", m["state"], m["x_cancelling"])
	}
	root, err := wfstore.New(st).GetRoot(bg, id)
	if err != nil || !root.Cancelling || root.State != wfstate.Cancelled {
		t.Fatalf("root after the cancel: %+v %v", root, err)
	}
	if got := jobStates(t, st, id); got[job.Cancelled] != 99 || got[job.Available] != n-99 {
		t.Fatalf("jobs after the cancel: %v", got)
	}
	// Each pass runs for its slice (5 s) at most; on a loaded machine
	// 351 jobs may take more than one.
	for pass := 1; root.Cancelling; pass++ {
		if pass > 4 {
			t.Fatalf("root after %d passes of Resume: %+v", pass-1, root)
		}
		if err := eng.Resume(bg, id); err != nil {
			t.Fatal(err)
		}
		if root, err = wfstore.New(st).GetRoot(bg, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := jobStates(t, st, id); got[job.Cancelled] != n {
		t.Fatalf("jobs after Resume: %v", got)
	}
	if jobs := fetchAll(t, svc, "cancelq"); len(jobs) != 0 {
		t.Fatalf("%d jobs of the cancelled workflow fetched", len(jobs))
	}
}

// A pass that finishes a cancel stops at its slice and leaves the rest,
// with the root's mark and check, to the next pass (recorded on the root,
// whose stream record runs it): the stream function's
// batch (and the records behind it in its shard) does not wait for a large
// cancel, nor outlast the function's timeout doing it. Each pass makes one
// transaction (99 jobs) at least.
func TestFinishingACancelGoesOnInSlices(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc, CancelSlice: time.Nanosecond})
	bg := context.Background()
	id := uuid.Must(uuid.NewV7()).String()
	const n = 300
	if _, err := eng.Create(bg, []byte(asyncBody(id, "sliceq", n))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 8*time.Second) // the API's cancel: its first transaction only
	if _, err := eng.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	cancel()
	for pass := 1; ; pass++ {
		if err := eng.Resume(bg, id); err != nil {
			t.Fatal(err)
		}
		root, err := wfstore.New(st).GetRoot(bg, id)
		if err != nil {
			t.Fatal(err)
		}
		got := jobStates(t, st, id)
		want := min(n, 99*(pass+1))
		if got[job.Cancelled] != want {
			t.Fatalf("pass %d: %d jobs cancelled, want %d (one transaction a pass)", pass, got[job.Cancelled], want)
		}
		if want < n {
			if !root.Cancelling || root.DuePK == "" {
				t.Fatalf("pass %d left %d jobs but cleared the mark (%v) or the check (%q)", pass, n-want, root.Cancelling, root.DuePK)
			}
			// The pass is a change of the root: the stream function's
			// record of it runs the next.
			if root.CancelPass != int64(pass) {
				t.Fatalf("pass %d recorded as %d", pass, root.CancelPass)
			}
			continue
		}
		if root.Cancelling || root.DuePK != "" {
			t.Fatalf("the last pass left the mark (%v) or the check (%q)", root.Cancelling, root.DuePK)
		}
		break
	}
}
