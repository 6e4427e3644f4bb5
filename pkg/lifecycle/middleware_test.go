package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// The enqueue chain runs on every pushed job before it is written: the
// client's X-Request-ID and the deployment's default meta go into meta
// (never over what the job set), a step may change the job, and a step's
// error refuses the whole batch with the job's index, writing nothing.
func TestEnqueueMiddleware(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Table(t)
	defaults, err := lifecycle.ParseDefaultMeta(`{"environment":"prod","source":"api"}`)
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(_ context.Context, j *job.Job) error {
		if j.Type == "refused.job" {
			return ojserr.Invalid("type", "refused by policy")
		}
		j.Priority = 7
		return nil
	}
	s := lifecycle.New(st, lifecycle.Config{Middleware: []lifecycle.EnqueueMiddleware{lifecycle.DefaultMeta(defaults), refuse}})
	ctx := lifecycle.WithClientRequestID(context.Background(), "req-mw-1")
	jobs, err := s.PushBatch(ctx, [][]byte{[]byte(`{"type":"a.job","args":[]}`), []byte(`{"type":"b.job","args":[],"meta":{"source":"cli","k":1}}`)})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []map[string]any{
		{"request_id": "req-mw-1", "environment": "prod", "source": "api"},
		{"request_id": "req-mw-1", "environment": "prod", "source": "cli", "k": float64(1)},
	} {
		got, err := s.Info(context.Background(), jobs[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		var meta map[string]any
		if err := json.Unmarshal(got.Meta, &meta); err != nil || len(meta) != len(want) || got.Priority != 7 {
			t.Fatalf("job %d: meta %s, priority %d", i, got.Meta, got.Priority)
		}
		for k, v := range want {
			if meta[k] != v {
				t.Errorf("job %d: meta.%s = %v, want %v", i, k, meta[k], v)
			}
		}
	}
	// Without a client request id, no request_id.
	j, err := s.Push(context.Background(), []byte(`{"type":"c.job","args":[]}`))
	if err != nil || string(j.Meta) != `{"environment":"prod","source":"api"}` {
		t.Fatalf("no request id: %s %v", j.Meta, err)
	}
	_, err = s.PushBatch(ctx, [][]byte{[]byte(`{"id":"019abc00-0000-7000-8000-00000000aaaa","type":"d.job","args":[]}`), []byte(`{"type":"refused.job","args":[]}`)})
	if e := ojserr.As(err); e.Status() != 400 || e.Details["index"] != 1 {
		t.Fatalf("a refusal: %v (details %v)", err, e.Details)
	}
	if _, err := s.Info(context.Background(), "019abc00-0000-7000-8000-00000000aaaa"); !errors.Is(err, nil) && ojserr.As(err).Status() != 404 {
		t.Fatalf("the refused batch's first job: %v, want not found", err)
	} else if err == nil {
		t.Fatal("the refused batch's first job was written")
	}
	if _, err := lifecycle.ParseDefaultMeta(`["x"]`); err == nil {
		t.Error("a default meta that is not an object was accepted")
	}
}
