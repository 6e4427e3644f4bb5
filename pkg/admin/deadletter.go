package admin

import (
	"context"
	"encoding/json"

	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// DeadList is GET /admin/dead-letter: discarded jobs (ojs-admin-api.md
// 11.1), newest first per queue, queues by name, paged by cursor. total is
// the dead letter queue's size (counted from the index, which retention
// keeps at 10,000 jobs by default).
type DeadList struct {
	Items      []map[string]any `json:"items"`
	Pagination Pagination       `json:"pagination"`
	jobs       []*job.Job
}

// Jobs returns the jobs of the page.
func (d *DeadList) Jobs() []*job.Job { return d.jobs }

// DeadLetter lists dead letter jobs with the filters of a job search
// (queue, type, since, until; the state is discarded).
func (s *Service) DeadLetter(ctx context.Context, q JobQuery) (*DeadList, error) {
	if q.State != "" && q.State != job.Discarded {
		return nil, ojserr.Invalid("state", "The dead letter queue holds discarded jobs only.")
	}
	q.State = job.Discarded
	p, err := s.SearchJobs(ctx, q)
	if err != nil {
		return nil, err
	}
	queues, err := s.queuesOf(ctx, q.Queue)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, name := range queues {
		n, err := s.dead.Count(ctx, name)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		total += n
	}
	out := &DeadList{Items: make([]map[string]any, 0, len(p.jobs)), Pagination: p.Pagination, jobs: p.jobs}
	out.Pagination.Total = &total
	for _, j := range p.jobs {
		m := Summary(j)
		if j.Error != nil {
			m["error"] = j.Error
		}
		m["errors"] = j.Errors
		out.Items = append(out.Items, m)
	}
	return out, nil
}

// PurgeDead deletes dead letter jobs (ojs-admin-api.md 11.3): {"queue",
// "older_than", "confirm": true}, at most deadletter.MaxBulk per call;
// "cursor" goes on from a previous call's next_cursor.
func (s *Service) PurgeDead(ctx context.Context, raw []byte) (*deadletter.BulkResult, error) {
	var body struct {
		Queue     string `json:"queue"`
		OlderThan string `json:"older_than"`
		Confirm   bool   `json:"confirm"`
		Cursor    string `json:"cursor"`
	}
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, ojserr.New(ojserr.InvalidPayload, "The body must be {\"queue\", \"older_than\", \"confirm\": true, \"cursor\"}.").With("field", "body")
	}
	if !body.Confirm {
		return nil, needConfirm()
	}
	f := deadletter.Filter{Queue: body.Queue, Limit: deadletter.MaxBulk, Cursor: body.Cursor}
	if f.Queue != "" {
		if err := job.ValidateQueue(f.Queue); err != nil {
			return nil, err
		}
	}
	var err error
	if f.Before, err = parseTime("older_than", body.OlderThan); err != nil {
		return nil, err
	}
	res, err := s.dead.Purge(ctx, f)
	if err != nil {
		return nil, err
	}
	return &res, nil
}
