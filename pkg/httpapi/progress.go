package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/ojs-aws/ojs-serverless/pkg/checkpoint"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// Progress is the progress extension's write (urn:ojs:ext:progress;
// implemented by *lifecycle.Service). Reads go through Producer.Info.
type Progress interface {
	ReportProgress(ctx context.Context, id string, in lifecycle.ProgressInput) (*job.Job, error)
}

var _ Progress = (*lifecycle.Service)(nil)

// Checkpoints is the durable execution extension
// (urn:ojs:ext:durable-execution; implemented by *checkpoint.Service).
type Checkpoints interface {
	Save(ctx context.Context, id string, body []byte) (*checkpoint.Checkpoint, error)
	Get(ctx context.Context, id string) (*checkpoint.Checkpoint, error)
	Delete(ctx context.Context, id string) (*checkpoint.Deleted, error)
}

var _ Checkpoints = (*checkpoint.Service)(nil)

// addCheckpoints registers /ojs/v1/jobs/{id}/checkpoint: PUT (and POST,
// the specification's verb) saves (worker level), GET reads and DELETE
// clears (producer level)
// (ojs-durable-execution.md 7). A request scoped to a tenant reaches its
// tenant's jobs only.
func (s *Server) addCheckpoints(a *api, cp Checkpoints) {
	const path = "/ojs/v1/jobs/{id}/checkpoint"
	save := withBody(func(r *http.Request, p params, raw []byte) (any, error) {
		if err := a.owns(r, p("id")); err != nil {
			return nil, err
		}
		return cp.Save(r.Context(), p("id"), raw)
	})
	s.add(LevelWorker, http.MethodPut, path, save)
	s.add(LevelWorker, http.MethodPost, path, save)
	s.add(LevelProducer, http.MethodGet, path, owned(a, cp.Get))
	// Producer level, as DELETE /jobs/{id} is: an IAM policy's
	// DELETE .../jobs/* covers this path too.
	s.add(LevelProducer, http.MethodDelete, path, owned(a, cp.Delete))
}

func (s *Server) addProgress(a *api) {
	s.add(LevelWorker, http.MethodPut, "/ojs/v1/jobs/{id}/progress", ok(a.putProgress))
	s.add(LevelWorker, http.MethodPost, "/ojs/v1/workers/progress", ok(a.postProgress))
	s.add(LevelProducer, http.MethodGet, "/ojs/v1/jobs/{id}/progress", ok(func(r *http.Request, p params) (any, error) {
		return progressBody(scoped(r)(a.jobs.Info(r.Context(), p("id"))))
	}))
}

// putProgress serves PUT /jobs/{id}/progress (ojs-progress.md 6.1).
func (a *api) putProgress(r *http.Request, p params) (any, error) {
	var in lifecycle.ProgressInput
	if err := readObject(r, &in); err != nil {
		return nil, err
	}
	if err := a.owns(r, p("id")); err != nil {
		return nil, err
	}
	return progressBody(a.progress.ReportProgress(r.Context(), p("id"), in))
}

// postProgress serves POST /workers/progress, the shape the Go SDK's
// JobContext.ReportProgress sends: job_id and a percentage from 0 to 100.
func (a *api) postProgress(r *http.Request, _ params) (any, error) {
	var in struct {
		JobID      string          `json:"job_id"`
		Percentage *float64        `json:"percentage"`
		Message    string          `json:"message"`
		Data       json.RawMessage `json:"data"`
		TokensUsed *int64          `json:"ext_agent_tokens_used"`
	}
	if err := readObject(r, &in); err != nil {
		return nil, err
	}
	pi := lifecycle.ProgressInput{Message: in.Message, Data: in.Data, TokensUsed: in.TokensUsed}
	if in.Percentage != nil {
		pi.Progress = new(*in.Percentage / 100)
	}
	if err := a.owns(r, in.JobID); err != nil {
		return nil, err
	}
	return progressBody(a.progress.ReportProgress(r.Context(), in.JobID, pi))
}

// progressBody is a job's progress as the extension answers it: progress
// and data null when none was reported.
func progressBody(j *job.Job, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	b := map[string]any{"job_id": j.ID, "state": j.State, "progress": nil, "data": nil}
	if pr := j.ProgressShown(); pr != nil {
		b["progress"], b["message"], b["updated_at"] = pr.Value, pr.Message, pr.UpdatedAt
		if len(pr.Data) > 0 {
			b["data"] = pr.Data
		}
	}
	return b, nil
}
