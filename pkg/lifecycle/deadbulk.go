package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// MaxDeadBulk bounds the jobs one bulk dead-letter call retries or
// deletes; has_more tells the caller to call again.
const MaxDeadBulk = 1000

// DeadFilter selects dead-letter jobs (ojs-dead-letter.md 6.2 and 9.1).
type DeadFilter struct {
	Queue     string    `json:"queue,omitempty"`
	Type      string    `json:"type,omitempty"`
	ErrorType string    `json:"error_type,omitempty"`
	Since     time.Time `json:"-"`
	// Before, when set, selects jobs discarded before it (the Admin
	// API's older_than).
	Before time.Time `json:"-"`
	Limit  int       `json:"-"`
}

func (f DeadFilter) match(j *job.Job) bool {
	if f.Type != "" && j.Type != f.Type {
		return false
	}
	if f.ErrorType != "" && (j.Error == nil || (j.Error.Type != f.ErrorType && j.Error.Code != f.ErrorType)) {
		return false
	}
	if !f.Since.IsZero() && (j.DiscardedAt == nil || j.DiscardedAt.Before(f.Since)) {
		return false
	}
	if !f.Before.IsZero() && (j.DiscardedAt == nil || !j.DiscardedAt.Before(f.Before)) {
		return false
	}
	return true
}

// ParseDeadBulk reads a bulk dead-letter request: {"filter": {queue,
// type, error_type, since}, "confirm": true, "limit": n}. confirm is
// required: a bulk retry or purge acts on every match.
func ParseDeadBulk(raw []byte) (DeadFilter, error) {
	var body struct {
		Filter *struct {
			Queue     string `json:"queue"`
			Type      string `json:"type"`
			ErrorType string `json:"error_type"`
			Since     string `json:"since"`
		} `json:"filter"`
		Confirm bool `json:"confirm"`
		Limit   *int `json:"limit"`
	}
	dec := json.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return DeadFilter{}, ojserr.Invalid("body", "The body must be {\"filter\": {\"queue\", \"type\", \"error_type\", \"since\"}, \"confirm\": true, \"limit\": n}: %v.", err)
	}
	if !body.Confirm {
		return DeadFilter{}, ojserr.Invalid("confirm", "Bulk dead-letter operations act on every matching job; send \"confirm\": true.")
	}
	f := DeadFilter{Limit: MaxDeadBulk}
	if body.Limit != nil {
		if *body.Limit < 1 || *body.Limit > MaxDeadBulk {
			return f, ojserr.Invalid("limit", "'limit' must be from 1 to %d.", MaxDeadBulk)
		}
		f.Limit = *body.Limit
	}
	if fl := body.Filter; fl != nil {
		f.Queue, f.Type, f.ErrorType = fl.Queue, fl.Type, fl.ErrorType
		if f.Queue != "" {
			if err := job.ValidateQueue(f.Queue); err != nil {
				return f, err
			}
		}
		if fl.Since != "" {
			t, err := time.Parse(time.RFC3339Nano, fl.Since)
			if err != nil {
				return f, ojserr.Invalid("filter.since", "'filter.since' must be an RFC 3339 timestamp.")
			}
			f.Since = t
		}
	}
	return f, nil
}

// BulkResult reports a bulk dead-letter operation.
type BulkResult struct {
	Matched   int            `json:"matched"`
	Succeeded int            `json:"succeeded"`
	JobIDs    []string       `json:"job_ids"`
	Failed    []BatchFailure `json:"failed"`
	HasMore   bool           `json:"has_more"`
}

// deadMatching lists up to f.Limit dead-letter jobs matching f, newest
// first, and whether more may match.
func (s *Service) deadMatching(ctx context.Context, f DeadFilter) ([]*job.Job, bool, error) {
	queues := []string{f.Queue}
	if f.Queue == "" {
		var err error
		if queues, err = s.st.Queues(ctx); err != nil {
			return nil, false, ojserr.Backend(err)
		}
	}
	var out []*job.Job
	for _, q := range queues {
		cursor := ""
		for {
			page, err := s.st.Dead(ctx, q, 200, cursor)
			if err != nil {
				return nil, false, ojserr.Backend(err)
			}
			for _, j := range page.Jobs {
				if !f.match(j) {
					continue
				}
				if len(out) == f.Limit {
					return out, true, nil
				}
				out = append(out, j)
			}
			if page.Cursor == "" {
				break
			}
			cursor = page.Cursor
		}
	}
	return out, false, nil
}

// RetryDeadMatching retries every dead-letter job matching f (at most
// f.Limit per call), each as RetryDead does.
func (s *Service) RetryDeadMatching(ctx context.Context, f DeadFilter) (BulkResult, error) {
	return s.deadBulk(ctx, f, func(j *job.Job) error {
		_, err := s.RetryDead(ctx, j.ID, RetryOverride{})
		return err
	})
}

// PurgeDead deletes every dead-letter job matching f (at most f.Limit per
// call).
func (s *Service) PurgeDead(ctx context.Context, f DeadFilter) (BulkResult, error) {
	return s.deadBulk(ctx, f, func(j *job.Job) error { return s.DeleteDead(ctx, j.ID) })
}

func (s *Service) deadBulk(ctx context.Context, f DeadFilter, op func(*job.Job) error) (BulkResult, error) {
	jobs, more, err := s.deadMatching(ctx, f)
	if err != nil {
		return BulkResult{}, err
	}
	res := BulkResult{Matched: len(jobs), HasMore: more, JobIDs: []string{}, Failed: []BatchFailure{}}
	for i, j := range jobs {
		if err := op(j); err != nil {
			var oe *ojserr.Error
			if !errors.As(err, &oe) {
				oe = ojserr.Backend(err)
			}
			res.Failed = append(res.Failed, BatchFailure{Index: i, JobID: j.ID, Error: oe})
			continue
		}
		res.Succeeded++
		res.JobIDs = append(res.JobIDs, j.ID)
	}
	return res, nil
}

// DeadStats summarises the dead letter queue (ojs-dead-letter.md 10.1).
type DeadStats struct {
	Total       int            `json:"total"`
	ByQueue     map[string]int `json:"by_queue"`
	ByErrorType map[string]int `json:"by_error_type"`
	OldestAt    *string        `json:"oldest_at"`
	NewestAt    *string        `json:"newest_at"`
	// Truncated is set when the queue holds more than MaxDeadStats jobs:
	// the figures then cover the newest MaxDeadStats of each queue read.
	Truncated bool `json:"truncated"`
	// Retention is the retention policy and when it next prunes.
	Retention RetentionView `json:"retention"`
}

// MaxDeadStats bounds the jobs DeadStats reads.
const MaxDeadStats = 10000

// DeadStats counts the dead letter queue. It reads the dead-letter index
// (up to MaxDeadStats jobs), so its cost grows with the queue's size.
func (s *Service) DeadStats(ctx context.Context) (DeadStats, error) {
	jobs, more, err := s.deadMatching(ctx, DeadFilter{Limit: MaxDeadStats})
	if err != nil {
		return DeadStats{}, err
	}
	st := DeadStats{Total: len(jobs), ByQueue: map[string]int{}, ByErrorType: map[string]int{}, Truncated: more}
	var oldest, newest *time.Time
	for _, j := range jobs {
		st.ByQueue[j.Queue]++
		et := "Unknown"
		if j.Error != nil && j.Error.Type != "" {
			et = j.Error.Type
		}
		st.ByErrorType[et]++
		if t := j.DiscardedAt; t != nil {
			if oldest == nil || t.Before(*oldest) {
				oldest = t
			}
			if newest == nil || t.After(*newest) {
				newest = t
			}
		}
	}
	if oldest != nil {
		o, n := job.Timestamp(*oldest), job.Timestamp(*newest)
		st.OldestAt, st.NewestAt = &o, &n
	}
	if st.Retention, err = s.retentionView(ctx); err != nil {
		return st, ojserr.Backend(err)
	}
	return st, nil
}

func bytesReader(b []byte) *bytes.Reader {
	if len(bytes.TrimSpace(b)) == 0 {
		return bytes.NewReader([]byte("{}"))
	}
	return bytes.NewReader(b)
}
