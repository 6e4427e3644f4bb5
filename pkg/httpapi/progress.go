package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// Progress is the progress extension's write (urn:ojs:ext:progress;
// implemented by *lifecycle.Service). Reads go through Producer.Info.
type Progress interface {
	ReportProgress(ctx context.Context, id string, in lifecycle.ProgressInput) (*job.Job, error)
}

var _ Progress = (*lifecycle.Service)(nil)

func (s *Server) addProgress(a *api) {
	s.add(LevelWorker, http.MethodPut, "/ojs/v1/jobs/{id}/progress", a.putProgress)
	s.add(LevelWorker, http.MethodPost, "/ojs/v1/workers/progress", a.postProgress)
	s.add(LevelProducer, http.MethodGet, "/ojs/v1/jobs/{id}/progress", a.getProgress)
}

// putProgress serves PUT /jobs/{id}/progress (ojs-progress.md 6.1).
func (a *api) putProgress(w http.ResponseWriter, r *http.Request, p params) error {
	var in lifecycle.ProgressInput
	if err := readObject(r, &in); err != nil {
		return err
	}
	j, err := a.progress.ReportProgress(r.Context(), p["id"], in)
	return reply(w, progressBody(j), err)
}

// postProgress serves POST /workers/progress, the shape the Go SDK's
// JobContext.ReportProgress sends: job_id and a percentage from 0 to 100.
func (a *api) postProgress(w http.ResponseWriter, r *http.Request, _ params) error {
	var in struct {
		JobID      string          `json:"job_id"`
		Percentage *float64        `json:"percentage"`
		Message    string          `json:"message"`
		Data       json.RawMessage `json:"data"`
	}
	if err := readObject(r, &in); err != nil {
		return err
	}
	pi := lifecycle.ProgressInput{Message: in.Message, Data: in.Data}
	if in.Percentage != nil {
		f := *in.Percentage / 100
		pi.Progress = &f
	}
	j, err := a.progress.ReportProgress(r.Context(), in.JobID, pi)
	return reply(w, progressBody(j), err)
}

// getProgress serves GET /jobs/{id}/progress (ojs-progress.md 7.1).
func (a *api) getProgress(w http.ResponseWriter, r *http.Request, p params) error {
	j, err := a.jobs.Info(r.Context(), p["id"])
	return reply(w, progressBody(j), err)
}

// progressBody is a job's progress as the extension answers it: progress
// and data null when none was reported.
func progressBody(j *job.Job) map[string]any {
	if j == nil {
		return nil
	}
	b := map[string]any{"job_id": j.ID, "state": j.State, "progress": nil, "data": nil}
	if pr := j.ProgressShown(); pr != nil {
		b["progress"], b["message"], b["updated_at"] = pr.Value, pr.Message, pr.UpdatedAt
		if len(pr.Data) > 0 {
			b["data"] = pr.Data
		}
	}
	return b
}
