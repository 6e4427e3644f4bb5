package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// recordAtRequeue delivers the stream's late record of a job's failure
// (the job as it was when it failed) at the worst moment of a retry:
// after the retry forgot the failure in every count, before it re-queues
// the job. It is the DynamoDB client of the harness (engine and job
// service): the record is delivered from inside the re-queue's request
// (the update moving a stale job from discarded to available), before
// the request is sent.
type recordAtRequeue struct {
	*dynamodb.Client
	stale  map[string]*job.Job // by id: the records that arrive late
	verify func(ctx context.Context, fs []workflow.Finished) error
	err    error
	fired  atomic.Bool // the late records were delivered
	// die, when set, fails the first re-queue instead (a retry that dies
	// with its marks set); dieClearing the first removal of a composite's
	// mark (one that dies after re-queueing).
	die, dieClearing atomic.Bool
}

func (s *recordAtRequeue) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	pk, sk := keyS(in.Key, "pk"), keyS(in.Key, "sk")
	switch {
	case strings.HasPrefix(pk, "WF#") && strings.HasPrefix(sk, "N#") && sk != "N#"+wfstore.RootPath &&
		removes(in.UpdateExpression, in.ExpressionAttributeNames, "reopening"):
		// A composite's mark removed (not the root's, not a shard's).
		if s.dieClearing.CompareAndSwap(true, false) {
			return nil, errDied
		}
	case strings.HasPrefix(pk, "JOB#") && s.stale[strings.TrimPrefix(pk, "JOB#")] != nil &&
		setsTo(in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, "state", string(job.Available)) &&
		hasValueS(in.ExpressionAttributeValues, string(job.Discarded)):
		// A stale job re-queued: moved to available from discarded.
		if s.die.CompareAndSwap(true, false) {
			return nil, errDied
		}
		if s.fired.CompareAndSwap(false, true) {
			var fs []workflow.Finished
			for _, j := range s.stale {
				fs = append(fs, workflow.Finished{Job: j})
			}
			s.err = s.verify(ctx, fs)
		}
	}
	return s.Client.UpdateItem(ctx, in, o...)
}

var errDied = errors.New("the retry's request died")

// newLateHarness is a clocked harness on late's client.
func newLateHarness(t *testing.T, late *recordAtRequeue) *clocked {
	return newClockedOn(t, func(db *dynamodb.Client) store.DynamoAPI { late.Client = db; return late })
}

// A retry re-queues a failed step's job after forgetting its failure in
// the counts of every composite above it. The stream's record of that
// failure, arriving in between, finds the step uncounted and its job
// still discarded; counting it then would leave the failure counted on a
// step that runs again (a group would fail once its member completes) or
// fail a nested composite the retry re-opened (its chain would never go
// on). The retried workflow must complete, whatever the record does.
func TestALateFailureRecordDuringARetryIsNotCounted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, def string }{
		{"group", `{"type":"group","jobs":[{"type":"l.a","args":[],"options":{"queue":"lq"}},{"type":"l.b","args":[],"options":{"queue":"lq"}}]}`},
		{"group in a chain", `{"type":"chain","steps":[{"type":"group","jobs":[{"type":"l.a","args":[],"options":{"queue":"lq"}},{"type":"l.b","args":[],"options":{"queue":"lq"}}]},{"type":"l.c","args":[],"options":{"queue":"lq"}}]}`},
		{"wide group", wideGroup()},
		{"batch in a chain", `{"type":"chain","steps":[{"type":"batch","jobs":[{"type":"l.a","args":[],"options":{"queue":"lq"}},{"type":"l.b","args":[],"options":{"queue":"lq"}}],"callbacks":{"on_failure":{"type":"l.b","args":[],"options":{"queue":"lq"}}}},{"type":"l.c","args":[],"options":{"queue":"lq"}}]}`},
		{"chain in a group", `{"type":"group","jobs":[{"type":"l.a","args":[],"options":{"queue":"lq"}},{"type":"chain","steps":[{"type":"l.b","args":[],"options":{"queue":"lq"}},{"type":"l.c","args":[],"options":{"queue":"lq"}}]}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			late := &recordAtRequeue{stale: map[string]*job.Job{}}
			h := newLateHarness(t, late)
			late.verify = h.eng.Verify
			ctx := context.Background()
			id := h.create(c.def)
			var failed string
			for round := 0; round < 3; round++ { // the members, then a batch's callback
				for _, j := range fetchAll(t, h.svc, "lq") {
					if j.Type == "l.b" { // a member, and in the batch its on_failure callback
						h.fail(j)
						if failed == "" {
							failed = j.ID
						}
					} else {
						h.ack(j, `"a"`)
					}
				}
			}
			if v := h.view(id); v["state"] != "failed" {
				t.Fatalf("first run: %s, want failed", v["state"])
			}
			b, err := h.st.BatchGetJobs(ctx, []string{failed})
			if err != nil || b[failed].State != job.Discarded {
				t.Fatalf("the failed job: %+v %v", b, err)
			}
			late.stale = b
			if _, err := h.eng.Retry(ctx, id); err != nil {
				t.Fatal(err)
			}
			if late.err != nil || !late.fired.Load() {
				t.Fatalf("the late record: delivered %v, %v", late.fired.Load(), late.err)
			}
			if v := h.view(id); v["state"] != "running" {
				t.Fatalf("after the retry and the late record: %s, want running", v["state"])
			}
			again := 0 // l.b jobs run in the second run
			for left := 0; left < 5; left++ {
				got := fetchAll(t, h.svc, "lq")
				if len(got) == 0 {
					break
				}
				for _, j := range got {
					if j.Type == "l.a" {
						t.Fatalf("the completed step ran again")
					}
					if j.Type == "l.b" {
						again++
					}
					h.ack(j, `"ok"`)
				}
			}
			if again != 1 {
				// Only the failed member runs again; a batch whose members
				// all complete does not fire on_failure.
				t.Fatalf("%d l.b jobs ran in the second run, want the failed member alone", again)
			}
			if v := h.view(id); v["state"] != "completed" {
				t.Fatalf("the retried workflow: %s, want completed", v["state"])
			}
		})
	}
}

// wideGroup is a group wide enough to count its members in counter
// shards: every member l.a but one l.b.
func wideGroup() string {
	jobs := make([]string, workflow.ShardSize+1)
	for i := range jobs {
		jobs[i] = `{"type":"l.a","args":[],"options":{"queue":"lq"}}`
	}
	jobs[workflow.ShardSize/2] = `{"type":"l.b","args":[],"options":{"queue":"lq"}}`
	return `{"type":"group","jobs":[` + strings.Join(jobs, ",") + `]}`
}

// A retry that dies after marking what it re-opens leaves the marks; the
// sweeper's repair finishes the retry: re-queues the failed job and
// removes every mark, and the workflow then completes. Whether it died
// before re-queueing the job or after.
func TestARetryThatDiesWithItsMarksIsFinishedByTheRepair(t *testing.T) {
	t.Parallel()
	for _, requeued := range []bool{false, true} {
		t.Run(map[bool]string{false: "before re-queueing", true: "after re-queueing"}[requeued], func(t *testing.T) {
			t.Parallel()
			late := &recordAtRequeue{stale: map[string]*job.Job{}}
			h := newLateHarness(t, late)
			late.verify = func(context.Context, []workflow.Finished) error { return nil }
			ctx := context.Background()
			id := h.create(`{"type":"chain","steps":[{"type":"group","jobs":[{"type":"d.a","args":[],"options":{"queue":"dq"}},{"type":"d.b","args":[],"options":{"queue":"dq"}}]},{"type":"d.d","args":[],"options":{"queue":"dq"}}]}`)
			first := h.fetch("dq")
			h.ack(first["d.a"], `"a"`)
			h.fail(first["d.b"])
			b, err := h.st.BatchGetJobs(ctx, []string{first["d.b"].ID})
			if err != nil {
				t.Fatal(err)
			}
			late.stale = b
			late.die.Store(!requeued)
			late.dieClearing.Store(requeued)
			if _, err := h.eng.Retry(ctx, id); err != nil {
				t.Fatal(err)
			}
			g, err := wfstore.New(h.st).GetComposite(ctx, id, "/s0")
			if err != nil || g.Reopening == "" || g.State != "waiting" {
				t.Fatalf("the group after the retry died: %+v %v, want it waiting and marked", g, err)
			}
			var again map[string]*job.Job
			if requeued {
				// The job runs again meanwhile; its completion is not
				// counted on the marked group.
				again = h.fetch("dq")
				h.ack(again["d.b"], `"b"`)
				if g, _ := wfstore.New(h.st).GetComposite(ctx, id, "/s0"); len(g.OK) != 1 {
					t.Fatalf("counted on a marked group: %v", g.OK)
				}
			} else if got := h.fetch("dq"); len(got) != 0 {
				t.Fatalf("ran before the retry re-queued it: %s", keys(got))
			}
			h.clk.Add(workflow.CheckAfter + time.Second)
			if _, err := h.eng.Repair(ctx, 10); err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{"/", "/s0"} {
				if n, err := wfstore.New(h.st).GetComposite(ctx, id, path); err != nil || n.Reopening != "" {
					t.Fatalf("%s after the repair: %+v %v, want no mark", path, n, err)
				}
			}
			if !requeued {
				again = h.fetch("dq")
				if keys(again) != "d.b" {
					t.Fatalf("after the repair: %s, want d.b again", keys(again))
				}
				h.ack(again["d.b"], `"b"`)
			}
			h.ack(h.fetch("dq")["d.d"], `"d"`)
			if v := h.view(id); v["state"] != "completed" {
				t.Fatalf("the retried workflow: %s, want completed", v["state"])
			}
		})
	}
}

// A full counter shard found not rolled up while a retry re-opens its
// composite (a member that completed in a shard the retry did not touch,
// its roll-up refused by the composite's mark): the stream function's
// check leaves it to the retry instead of failing its batch, and the
// retry's repair rolls it up once the marks are gone.
func TestARollUpRefusedByARetrysMarkIsLeftToTheRetry(t *testing.T) {
	t.Parallel()
	late := &recordAtRequeue{stale: map[string]*job.Job{}}
	h := newLateHarness(t, late)
	late.verify = func(context.Context, []workflow.Finished) error { return nil }
	ctx := context.Background()
	id := h.create(wideGroup())
	var failed string
	var other *job.Job // a completed member counted in the other shard
	for _, j := range fetchAll(t, h.svc, "lq") {
		if j.Type == "l.b" {
			h.fail(j)
			failed = j.ID
		} else {
			h.ack(j, `"a"`)
		}
	}
	root, err := wfstore.New(h.st).GetRoot(ctx, id)
	if err != nil || root.State != "failed" || len(root.Rolled) != root.Shards {
		t.Fatalf("first run: %+v %v", root, err)
	}
	items, err := wfstore.New(h.st).WorkflowItems(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	shardOf := map[string]string{}
	for _, n := range items {
		shardOf[wfdef.JobID(id, n.Base().Path)] = n.Base().PShard
	}
	b, err := h.st.BatchGetJobs(ctx, []string{failed})
	if err != nil {
		t.Fatal(err)
	}
	late.stale = b
	late.die.Store(true) // the retry dies with its marks set
	if _, err := h.eng.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	var key string
	for _, node := range items {
		if n := node.Base(); n.PShard != "" && n.PShard != shardOf[failed] {
			key = n.PShard
			jobs, err := h.st.BatchGetJobs(ctx, []string{wfdef.JobID(id, n.Path)})
			if err != nil {
				t.Fatal(err)
			}
			other = jobs[wfdef.JobID(id, n.Path)]
			break
		}
	}
	// The other shard full but not rolled up, as a refused roll-up leaves it.
	root, _ = wfstore.New(h.st).GetRoot(ctx, id)
	var drop []string
	for _, r := range root.Rolled {
		if strings.HasPrefix(r, key+":") {
			drop = append(drop, r)
		}
	}
	if len(drop) != 1 || root.Reopening == "" {
		t.Fatalf("root after the retry died: rolled %v, mark %q", root.Rolled, root.Reopening)
	}
	if _, err := wfstore.New(h.st).Change(ctx, id, wfstore.Reopen(wfstore.RootPath, wfstore.Reopening{Rolled: drop})); err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Verify(ctx, []workflow.Finished{{Job: other}}); err != nil {
		t.Fatalf("the stream's check of a member whose shard's roll-up the mark refuses: %v", err)
	}
	h.clk.Add(workflow.CheckAfter + time.Second)
	if _, err := h.eng.Repair(ctx, 10); err != nil {
		t.Fatal(err)
	}
	again := fetchAll(t, h.svc, "lq")
	if len(again) != 1 || again[0].ID != failed {
		t.Fatalf("after the repair: %d jobs, want the failed one again", len(again))
	}
	h.ack(again[0], `"b"`)
	if v := h.view(id); v["state"] != "completed" {
		t.Fatalf("the retried workflow: %s, want completed", v["state"])
	}
}
