package lifecycle_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// pushHarness is a service with one push-mode queue ("lambda") on a store
// whose requests are counted, and a clock the test moves.
type pushHarness struct {
	st  *store.Store
	svc *lifecycle.Service
	q   *queue.Service
	rec *callstats.Recorder
	clk *testenv.Clock
}

func newPushHarness(t *testing.T, redeliverAfter time.Duration) pushHarness {
	t.Helper()
	st, rec := testenv.CountedTable(t)
	clk := testenv.NewClock(time.Now().UTC().Truncate(time.Millisecond))
	q := queue.NewService(st, queue.Config{PushQueues: []string{"lambda"}, Now: clk.Now})
	svc := lifecycle.New(st, lifecycle.Config{Queues: q, Now: clk.Now, RedeliverAfter: redeliverAfter})
	return pushHarness{st: st, svc: svc, q: q, rec: rec, clk: clk}
}

// push pushes a job to the push-mode queue, with extra options (JSON
// members, "" for none).
func (h pushHarness) push(t *testing.T, extra string) *job.Job {
	t.Helper()
	opts := `"queue":"lambda"`
	if extra != "" {
		opts += "," + extra
	}
	j, err := h.svc.Push(context.Background(), []byte(`{"type":"t.run","args":[],"options":{`+opts+`}}`))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// setJob writes attributes of job id directly (SET update, values by
// placeholder), as an older writer or a concurrent one would have.
func (h pushHarness) setJob(t *testing.T, id, update string, values map[string]types.AttributeValue) {
	t.Helper()
	table := h.st.Table()
	if _, err := testenv.DynamoDB().UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &table,
		Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "JOB#" + id}, "sk": &types.AttributeValueMemberS{Value: "JOB"}},
		UpdateExpression: aws.String(update), ExpressionAttributeValues: values}); err != nil {
		t.Fatal(err)
	}
}

// message is the SQS message the stream function sends for job id as it
// is stored now (an available job's carries its claim hint).
func (h pushHarness) message(t *testing.T, id string) dispatch.Message {
	t.Helper()
	it, err := h.st.GetItem(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return dispatch.NewMessage(dispatch.Delivery{Job: it.Job, Check: it.DueAt})
}

// claim claims j as the push-mode worker does on its message, with a lease
// of a minute, and returns the claim's write units and the job's due entry
// after it.
func (h pushHarness) claim(t *testing.T, id string) (float64, time.Time) {
	t.Helper()
	ctx := context.Background()
	m := h.message(t, id)
	before := h.rec.Set()
	d, err := h.svc.ClaimDelivered(ctx, h.st, m, "w", time.Minute)
	if err != nil || d.Job == nil || d.Job.State != job.Active {
		t.Fatalf("claim: %+v, %v", d, err)
	}
	units := h.rec.Set().Sub(before)["DynamoDB UpdateItem"].WriteUnits
	it, err := h.st.GetItem(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return units, it.DueAt
}

// A push-mode claim whose lease ends before the job's redelivery check
// keeps the check as the job's due entry: 2 write units (the item and the
// due entry rewritten in place, as it projects the state) instead of 3
// (moving the entry is a delete and a put), and an attempt whose worker
// died is still found, at the check's time. (A push-mode job is in no
// other index: SQS holds its place in line.)
func TestAPushClaimKeepsTheRedeliveryCheck(t *testing.T) {
	t.Parallel()
	h := newPushHarness(t, 5*time.Minute)
	ctx := context.Background()
	j := h.push(t, "")
	check := h.clk.Now().Add(5 * time.Minute)
	units, due := h.claim(t, j.ID)
	if units != 2 || !due.Equal(check) {
		t.Fatalf("the claim wrote %g units and left the due entry at %v; want 2 units and the redelivery check at %v", units, due, check)
	}

	// Its worker dies. Past the lease's end the entry is not due yet...
	h.clk.Add(2 * time.Minute)
	if _, _, _, err := h.svc.ResolveDue(ctx, "lambda", 100, false); err != nil {
		t.Fatal(err)
	}
	// (read by key: a GET would make the move itself)
	if it, err := h.st.GetItem(ctx, j.ID); err != nil || it.Job.State != job.Active {
		t.Fatalf("before the check: %+v, %v; want active", it.Job, err)
	}
	// ...and at the check the attempt is over, recorded as a lost lease.
	h.clk.Add(3 * time.Minute)
	if _, _, _, err := h.svc.ResolveDue(ctx, "lambda", 100, false); err != nil {
		t.Fatal(err)
	}
	it, err := h.st.GetItem(ctx, j.ID)
	if got := it.Job; err != nil || got.State == job.Active || got.Attempt != 1 || len(got.Errors) != 1 || got.Errors[0].Type != "visibility_timeout" {
		t.Fatalf("after the check: %+v, %v; want the attempt over with a visibility_timeout error", it.Job, err)
	}
}

// When the redelivery check falls before the lease's end, the claim moves
// the due entry to the lease's end (a delete and a put in the index).
func TestAPushClaimMovesACheckThatFallsBeforeTheLeaseEnds(t *testing.T) {
	t.Parallel()
	h := newPushHarness(t, 30*time.Second)
	j := h.push(t, "")
	units, due := h.claim(t, j.ID)
	if lease := h.clk.Now().Add(time.Minute); units != 3 || !due.Equal(lease) {
		t.Fatalf("the claim wrote %g units and left the due entry at %v; want 3 units and the lease's end %v", units, due, lease)
	}
}

// A claimer that read the check before it moved (to before the lease's
// end) still claims the job, with the due entry at the lease's end: the
// kept check is a condition of the write, not an assumption.
func TestAPushClaimOfAStaleCheckMovesTheEntry(t *testing.T) {
	t.Parallel()
	h := newPushHarness(t, 5*time.Minute)
	ctx := context.Background()
	j := h.push(t, "")
	read := h.clk.Now().Add(5 * time.Minute)
	soon := h.clk.Now().Add(10 * time.Second)
	h.setJob(t, j.ID, "SET due_at = :d", map[string]types.AttributeValue{":d": &types.AttributeValueMemberN{Value: strconv.FormatInt(soon.UnixMilli(), 10)}})
	claimed, err := h.svc.Claim(ctx, j, "w", time.Minute, read)
	if err != nil || claimed == nil {
		t.Fatalf("claim with a stale check: %v, %v", claimed, err)
	}
	it, err := h.st.GetItem(ctx, j.ID)
	if lease := h.clk.Now().Add(time.Minute); err != nil || !it.DueAt.Equal(lease) {
		t.Fatalf("due entry %v (%v), want the lease's end %v", it.DueAt, err, lease)
	}
}

// A push-mode job is in the due index only (its redelivery check), not in
// ready: its PUSH writes 2 units instead of 3. It is still counted and
// listed as available, and a FETCH of its queue still finds it; one
// written while push-mode jobs were also in ready is counted and listed
// once.
func TestAPushModeJobIsInTheDueIndexOnly(t *testing.T) {
	t.Parallel()
	h := newPushHarness(t, 5*time.Minute)
	ctx := context.Background()
	// The first PUSH also registers the queue.
	old := h.push(t, "")
	before := h.rec.Set()
	j := h.push(t, "")
	if d := h.rec.Set().Sub(before); d["DynamoDB PutItem"].Calls != 1 || d["DynamoDB PutItem"].WriteUnits != 2 {
		t.Fatalf("the PUSH: %+v, want one PutItem of 2 units (the item and its redelivery check)", d)
	}
	if ready, err := h.st.ReadyOf(ctx, "", "lambda", "", 10); err != nil || len(ready) != 0 {
		t.Fatalf("ready index: %d entries (%v), want none", len(ready), err)
	}
	// Make the first one a job written with a ready entry as well.
	h.setJob(t, old.ID, "SET ready_pk = :p, ready_sk = :s", map[string]types.AttributeValue{
		":p": &types.AttributeValueMemberS{Value: "avail#lambda"}, ":s": &types.AttributeValueMemberS{Value: "x#" + old.ID}})
	if ready, err := h.st.ReadyOf(ctx, "", "lambda", "", 10); err != nil || len(ready) != 1 {
		t.Fatalf("ready index: %d entries (%v), want the old job's", len(ready), err)
	}
	c, err := h.st.CountQueue(ctx, "lambda")
	if err != nil || c.Available != 2 {
		t.Fatalf("counts %+v (%v), want 2 available", c, err)
	}
	p, err := h.st.ListQueue(ctx, store.ListAvailable, "lambda", nil, 10, "")
	if err != nil || len(p.Items) != 2 || p.Items[0].Job.ID == p.Items[1].Job.ID {
		t.Fatalf("available listing: %+v (%v), want each job once", p.Items, err)
	}
	jobs, err := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"lambda"}, Count: 10})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("FETCH of the push-mode queue: %d jobs (%v), want both", len(jobs), err)
	}
	ids := map[string]bool{jobs[0].ID: true, jobs[1].ID: true}
	if !ids[j.ID] || !ids[old.ID] {
		t.Fatalf("FETCH answered %v, want %s and %s", ids, j.ID, old.ID)
	}
}

// A scheduled push-mode job the worker promotes when its message comes
// keeps the redelivery check the promotion listed as its lease's entry
// too: the promotion (3 units: the item, its due entry moved) and the
// claim (2) instead of 3 and 3.
func TestAPromotedPushJobsClaimKeepsTheCheckItsPromotionListed(t *testing.T) {
	t.Parallel()
	h := newPushHarness(t, 5*time.Minute)
	at := h.clk.Now().Add(10 * time.Second)
	j := h.push(t, `"scheduled_at":"`+job.Timestamp(at)+`"`)
	if j.State != job.Scheduled {
		t.Fatalf("push: %+v", j)
	}
	h.clk.Add(11 * time.Second)
	units, due := h.claim(t, j.ID)
	if check := h.clk.Now().Add(5 * time.Minute); units != 5 || !due.Equal(check) {
		t.Fatalf("promotion and claim wrote %g units and left the due entry at %v; want 5 and the check %v", units, due, check)
	}
}

// The message the stream function sends as a push-mode job becomes
// available says what the claim needs: the worker claims the job with one
// UpdateItem and no read. A message gone stale meanwhile (the job claimed
// by a duplicate, its attempt's lease over, cancelled, retrying, deleted)
// is handled from the item the refused write returns, as a read would
// have: still without a GetItem.
func TestADeliveredJobIsClaimedWithoutARead(t *testing.T) {
	t.Parallel()
	h := newPushHarness(t, 5*time.Minute)
	ctx := context.Background()
	deliver := func(m dispatch.Message) (lifecycle.Delivered, callstats.Set) {
		t.Helper()
		before := h.rec.Set()
		d, err := h.svc.ClaimDelivered(ctx, h.st, m, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return d, h.rec.Set().Sub(before)
	}
	noRead := func(what string, calls callstats.Set) {
		t.Helper()
		// The job is read with GetItem; a BatchGetItem is the queue's
		// pause state (its registry item alone, read at most once a
		// second), never a listing of the registry.
		if c := calls["DynamoDB GetItem"]; c.Calls > 0 {
			t.Fatalf("%s: %d GetItem requests, want no read of the job (%+v)", what, c.Calls, calls)
		}
		if c := calls["DynamoDB BatchGetItem"]; c.Calls > 1 || c.Items > 1 {
			t.Fatalf("%s: %+v, want at most the queue's own registry item", what, c)
		}
		if c := calls["DynamoDB Query"]; c.Calls > 0 {
			t.Fatalf("%s: %d Query requests, want none (the pause state is the queue's item)", what, c.Calls)
		}
	}

	// Fresh: one UpdateItem of 2 units, the job active, the check kept.
	j := h.push(t, "")
	m := h.message(t, j.ID)
	if m.Claim == nil || m.Claim.TimeoutMS != job.DefaultTimeout.Milliseconds() || m.Claim.CheckMS != h.clk.Now().Add(5*time.Minute).UnixMilli() {
		t.Fatalf("message %+v: want a claim hint with the default timeout and the redelivery check", m)
	}
	d, calls := deliver(m)
	if d.Job == nil || d.Job.State != job.Active || d.Job.Attempt != 1 || d.Job.Type != "t.run" || string(d.Job.Args) != "[]" {
		t.Fatalf("claim: %+v, want the whole job active in attempt 1", d.Job)
	}
	if c := calls["DynamoDB UpdateItem"]; c.Calls != 1 || c.WriteUnits != 2 {
		t.Fatalf("claim: %+v, want one UpdateItem of 2 units", calls)
	}
	noRead("claim", calls)

	// A duplicate while the attempt runs: nothing, one refused write.
	if d, calls = deliver(m); d.Job != nil || d.RetryIn != 0 {
		t.Fatalf("duplicate: %+v, want nothing (running elsewhere)", d)
	}
	noRead("duplicate", calls)

	// The same message after the lease ended (SQS's redelivery after its
	// worker died): the attempt is over and the job claimed again.
	h.clk.Add(2 * time.Minute)
	d, calls = deliver(m)
	if d.Job == nil || d.Job.State != job.Active || d.Job.Attempt != 2 || len(d.Job.Errors) != 1 {
		t.Fatalf("after the lease: %+v, want attempt 2 with the lost attempt's error", d.Job)
	}
	noRead("after the lease", calls)

	// Failed since: retryable, its message re-sent with the backoff's delay.
	if _, err := h.svc.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "boom", Message: "x"}, 2); err != nil {
		t.Fatal(err)
	}
	if d, calls = deliver(m); d.Job != nil || d.RetryIn <= 0 {
		t.Fatalf("retryable: %+v, want a re-send after the backoff", d)
	}
	noRead("retryable", calls)

	// Cancelled since, or never there: nothing.
	c := h.push(t, "")
	mc := h.message(t, c.ID)
	if _, _, err := h.svc.Cancel(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if d, _ = deliver(mc); d.Job != nil || d.RetryIn != 0 {
		t.Fatalf("cancelled: %+v, want nothing", d)
	}
	unknown := mc
	unknown.ID = "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"
	if d, _ = deliver(unknown); d.Job != nil || d.RetryIn != 0 {
		t.Fatalf("unknown job: %+v, want nothing", d)
	}
	if got, err := h.svc.Info(ctx, c.ID); err != nil || got.State != job.Cancelled {
		t.Fatalf("cancelled job after its message: %+v, %v", got, err)
	}

	// A paused queue's job is left where it is.
	pj := h.push(t, "")
	if _, err := h.q.SetPaused(ctx, "lambda", true); err != nil {
		t.Fatal(err)
	}
	if d, _ = deliver(h.message(t, pj.ID)); d.Job != nil {
		t.Fatalf("paused queue: %+v, want nothing", d)
	}
	if got, err := h.svc.Info(ctx, pj.ID); err != nil || got.State != job.Available {
		t.Fatalf("a paused queue's job after its message: %+v, %v; want available", got, err)
	}
	if _, err := h.q.SetPaused(ctx, "lambda", false); err != nil {
		t.Fatal(err)
	}

	// A message without the hint (the sweeper's re-sends, messages sent
	// before hints) reads the job first, as before.
	o := h.push(t, "")
	before := h.rec.Set()
	legacy := dispatch.NewMessage(dispatch.Delivery{Job: o})
	if legacy.Claim != nil {
		t.Fatalf("a delivery without its check got a hint: %+v", legacy)
	}
	if d, err := h.svc.ClaimDelivered(ctx, h.st, legacy, "w", time.Minute); err != nil || d.Job == nil || d.Job.State != job.Active {
		t.Fatalf("claim without a hint: %+v, %v", d, err)
	}
	if got := h.rec.Set().Sub(before)["DynamoDB GetItem"].Calls; got != 1 {
		t.Fatalf("claim without a hint read the job %d times, want once", got)
	}
}

// A FETCH of a push-mode queue reads its available jobs from the due
// index, where jobs waiting for a time can come first: it reads page after
// page until it has its count, not one page (here 450 scheduled jobs'
// entries, more than a page of 100 a shard, come before 3 available ones).
func TestAFetchOfAPushModeQueueReadsPastItsWaitingJobs(t *testing.T) {
	t.Parallel()
	h := newPushHarness(t, 5*time.Minute)
	ctx := context.Background()
	at := job.Timestamp(h.clk.Now().Add(time.Minute))
	for i := 0; i < 450; i++ {
		h.push(t, `"scheduled_at":"`+at+`"`)
	}
	want := map[string]bool{}
	for i := 0; i < 3; i++ {
		want[h.push(t, "").ID] = true
	}
	jobs, err := h.svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"lambda"}, Count: 3})
	if err != nil || len(jobs) != 3 {
		t.Fatalf("FETCH of 3: %d jobs (%v), want the 3 available ones", len(jobs), err)
	}
	for _, j := range jobs {
		if !want[j.ID] {
			t.Fatalf("FETCH answered %s, not one of the available jobs", j.ID)
		}
	}
}
