package checkpoint_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/checkpoint"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func code(err error) ojserr.Code { return ojserr.As(err).Code }

// A checkpoint saved on a waiting or active job is read back with its
// sequence, kept across a failed attempt and shown in the next FETCH's
// envelope; cleared, the sequence starts again; a finished job refuses a
// save with 409; a save derives job.checkpointed.
func TestCheckpointLifecycle(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	ctx := context.Background()
	qsvc := queue.NewService(st, queue.Config{})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc})
	cps := checkpoint.New(st, nil)
	j, err := svc.Push(ctx, []byte(`{"type":"t.durable","args":[],"options":{"queue":"cp","retry":{"max_attempts":3,"initial_interval":"PT0.001S"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cps.Get(ctx, j.ID); code(err) != ojserr.NotFound {
		t.Fatalf("no checkpoint yet: %v", err)
	}
	if _, err := cps.Save(ctx, j.ID, []byte(`{"state":{"rows":10}}`)); err != nil {
		t.Fatalf("save on an available job: %v", err)
	}
	got, _ := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"cp"}, WorkerID: "w"})
	if len(got) != 1 {
		t.Fatal("nothing fetched")
	}
	before, _ := svc.Info(ctx, j.ID)
	c, err := cps.Save(ctx, j.ID, []byte(`{"state":{"rows":750,"cursor":"abc"}}`))
	if err != nil || c.Sequence != 2 || c.JobID != j.ID || c.CreatedAt == "" {
		t.Fatalf("second save: %+v %v", c, err)
	}
	after, _ := svc.Info(ctx, j.ID)
	if evs := events.FromJob("src", before, after, 7, time.Now()); len(evs) != 1 || evs[0].Type != events.JobCheckpointed || evs[0].Data["sequence"] != 2 {
		t.Fatalf("events of a save: %+v", evs)
	}
	if _, err := svc.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "transient", Message: "again"}, 0); err != nil {
		t.Fatal(err)
	}
	var next []*job.Job
	for range 20 {
		if next, _ = svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"cp"}, WorkerID: "w2"}); len(next) == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(next) != 1 || next[0].Attempt != 2 {
		t.Fatalf("the retry: %d jobs", len(next))
	}
	env, _ := next[0].MarshalJSON()
	if !strings.Contains(string(env), `"checkpoint":{"state":{"cursor":"abc","rows":750},"sequence":2}`) &&
		!strings.Contains(string(env), `"checkpoint":{"state":{"rows":750,"cursor":"abc"},"sequence":2}`) {
		t.Fatalf("the retry's envelope lacks its checkpoint: %s", env)
	}
	if d, err := cps.Delete(ctx, j.ID); err != nil || !d.Deleted {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if d, err := cps.Delete(ctx, j.ID); err != nil || d.Deleted {
		t.Fatalf("delete again: %+v %v", d, err)
	}
	if c, err := cps.Save(ctx, j.ID, []byte(`{"state":"restart"}`)); err != nil || c.Sequence != 1 || string(c.State) != `"restart"` {
		t.Fatalf("a save after the delete: %+v %v", c, err)
	}
	if _, err := svc.Ack(ctx, j.ID, nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cps.Save(ctx, j.ID, []byte(`{"state":{}}`)); code(err) != ojserr.Conflict {
		t.Fatalf("a save on a completed job: %v", err)
	}
	if c, err := cps.Get(ctx, j.ID); err != nil || string(c.State) != `"restart"` {
		t.Fatalf("the checkpoint of a completed job: %+v %v", c, err)
	}
	for body, want := range map[string]ojserr.Code{`{}`: ojserr.InvalidRequest, `[1]`: ojserr.InvalidRequest,
		`{"state":"` + strings.Repeat("x", checkpoint.MaxStateBytes) + `"}`: ojserr.PayloadTooLarge} {
		if _, err := cps.Save(ctx, j.ID, []byte(body)); code(err) != want {
			t.Errorf("%.40s: %v, want %s", body, err, want)
		}
	}
	if _, err := cps.Save(ctx, "019b0000-0000-7000-8000-000000000000", []byte(`{"state":1}`)); code(err) != ojserr.NotFound {
		t.Fatalf("an unknown job: %v", err)
	}
}
