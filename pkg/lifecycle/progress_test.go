package lifecycle_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// A progress report (ojs-progress.md) is kept on an active job: clamped to
// [0, 1], never going down within an attempt, counted as a heartbeat,
// ignored on a job that is not active, kept when the attempt fails,
// cleared when the next attempt starts, and shown as 1 once completed.
func TestProgressReports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := newService(t)
	f := func(v float64) *float64 { return &v }
	report := func(id string, in lifecycle.ProgressInput) *job.Job {
		t.Helper()
		j, err := s.ReportProgress(ctx, id, in)
		if err != nil {
			t.Fatalf("report %+v: %v", in, err)
		}
		return j
	}
	value := func(j *job.Job) float64 {
		t.Helper()
		p := j.ProgressShown()
		if p == nil || p.Value == nil {
			t.Fatalf("job %s (%s) shows no progress", j.ID, j.State)
		}
		return *p.Value
	}
	j, err := s.Push(ctx, []byte(`{"type":"t.p","args":[],"queue":"prog"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := report(j.ID, lifecycle.ProgressInput{Progress: f(0.5)}); got.State != job.Available || got.Progress != nil {
		t.Fatalf("a report on an available job changed it: %s %+v", got.State, got.Progress)
	}
	claimed, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"prog"}, WorkerID: "w", Visibility: 30 * time.Second})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("fetch: %v %v", claimed, err)
	}
	lease := *claimed[0].LeaseUntil
	if v := value(report(j.ID, lifecycle.ProgressInput{Progress: f(0.5), Message: "half", Data: json.RawMessage(`{"rows":5}`),
		Checkpoint: json.RawMessage(`{"last_row":5}`)})); v != 0.5 {
		t.Errorf("progress %v, want 0.5", v)
	}
	clk.Add(20 * time.Second)
	got := report(j.ID, lifecycle.ProgressInput{Progress: f(0.25), Message: "lower"})
	if v := value(got); v != 0.5 || got.Progress.Message != "lower" || got.Progress.Data != nil {
		t.Errorf("a lower report: %v %+v; want 0.5 kept, the new message", v, got.Progress)
	}
	if info, _ := s.Info(ctx, j.ID); !info.LeaseUntil.After(lease) {
		t.Errorf("a report did not extend the lease (%v, claimed until %v)", info.LeaseUntil, lease)
	}
	if v := value(report(j.ID, lifecycle.ProgressInput{Progress: f(1.5)})); v != 1 {
		t.Errorf("1.5 kept as %v, want clamped to 1", v)
	}
	for _, in := range []lifecycle.ProgressInput{{}, {Data: json.RawMessage(`[1]`)}, {Data: json.RawMessage(`{"x":"` + string(make([]byte, 5000)) + `"}`)},
		{Progress: f(0.9), Checkpoint: json.RawMessage(`"row 9"`)}} {
		if _, err := s.ReportProgress(ctx, j.ID, in); ojserr.As(err).Status() != 400 {
			t.Errorf("report %+v: %v, want 400", in, err)
		}
	}
	if _, err := s.ReportProgress(ctx, "019539a4-b68c-7def-8000-1a2b3c4d5e6f", lifecycle.ProgressInput{Progress: f(0.1)}); ojserr.As(err).Status() != 404 {
		t.Errorf("report on a missing job: %v, want 404", err)
	}
	failed, err := s.Nack(ctx, j.ID, lifecycle.ErrorInput{Message: "boom"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v := value(failed); v != 1 {
		t.Errorf("the failed attempt's progress %v, want kept at 1", v)
	}
	clk.Add(time.Hour) // past the retry's backoff
	again, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"prog"}, WorkerID: "w"})
	if err != nil || len(again) != 1 || again[0].Progress != nil {
		t.Fatalf("the next attempt: %v %v, want it claimed with no progress", again, err)
	}
	// The retry resumes from the first attempt's checkpoint (6.4).
	if b, _ := json.Marshal(again[0]); string(again[0].LastCheckpoint) != `{"last_row":5}` || !json.Valid(b) ||
		!strings.Contains(string(b), `"last_checkpoint":{"last_row":5}`) {
		t.Errorf("the retry's last_checkpoint: %s (envelope %s)", again[0].LastCheckpoint, b)
	}
	report(j.ID, lifecycle.ProgressInput{Progress: f(0.2)})
	done, err := s.Ack(ctx, j.ID, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v := value(done); v != 1 {
		t.Errorf("a completed job shows %v, want 1", v)
	}
	if got := report(j.ID, lifecycle.ProgressInput{Progress: f(0.3)}); got.State != job.Completed {
		t.Errorf("a report on a completed job answered %s", got.State)
	}
}
