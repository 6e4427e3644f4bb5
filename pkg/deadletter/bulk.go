package deadletter

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/opaque"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// MaxBulk bounds the jobs one bulk dead-letter call retries or deletes;
// has_more tells the caller to call again.
const MaxBulk = 1000

// MaxScan bounds the dead letter jobs one bulk call reads looking for
// matches; has_more and next_cursor tell the caller where to go on.
const MaxScan = 10000

// Filter selects dead-letter jobs (ojs-dead-letter.md 6.2 and 9.1).
type Filter struct {
	Queue     string    `json:"queue,omitempty"`
	Type      string    `json:"type,omitempty"`
	ErrorType string    `json:"error_type,omitempty"`
	Since     time.Time `json:"-"`
	// Before, when set, selects jobs discarded before it (the Admin
	// API's older_than).
	Before time.Time `json:"-"`
	Limit  int       `json:"-"`
	// Scan bounds the jobs one call reads (MaxScan when zero).
	Scan int `json:"-"`
	// Cursor goes on where a previous call's NextCursor left off.
	Cursor string `json:"-"`
	// retry selects only jobs the dead letter retry can take: a
	// workflow's jobs are retried through their workflow.
	retry bool
}

func (f Filter) match(j *job.Job) bool {
	if f.retry && j.WorkflowID != "" {
		return false
	}
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

// ParseBulk reads a bulk dead-letter request: {"filter": {queue, type,
// error_type, since}, "confirm": true, "limit": n, "cursor": "…"}. confirm
// is required: a bulk retry or purge acts on every match. limit is 1 to
// MaxBulk (default MaxBulk). A bad body fails with invalid_request.
func ParseBulk(raw []byte) (Filter, error) {
	var body struct {
		Filter *struct {
			Queue     string `json:"queue"`
			Type      string `json:"type"`
			ErrorType string `json:"error_type"`
			Since     string `json:"since"`
		} `json:"filter"`
		Confirm bool   `json:"confirm"`
		Limit   *int   `json:"limit"`
		Cursor  string `json:"cursor"`
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return Filter{}, ojserr.Invalid("body", "The body must be {\"filter\": {\"queue\", \"type\", \"error_type\", \"since\"}, \"confirm\": true, \"limit\": n, \"cursor\": \"…\"}: %v.", err)
	}
	if !body.Confirm {
		return Filter{}, ojserr.Invalid("confirm", "Bulk dead-letter operations act on every matching job; send \"confirm\": true.")
	}
	f := Filter{Limit: MaxBulk, Cursor: body.Cursor}
	if body.Limit != nil {
		if *body.Limit < 1 || *body.Limit > MaxBulk {
			return f, ojserr.Invalid("limit", "'limit' must be from 1 to %d.", MaxBulk)
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
			var err error
			if f.Since, err = time.Parse(time.RFC3339Nano, fl.Since); err != nil {
				return f, ojserr.Invalid("filter.since", "'filter.since' must be an RFC 3339 timestamp.")
			}
		}
	}
	return f, nil
}

// BulkResult reports a bulk dead-letter operation.
type BulkResult struct {
	Matched   int       `json:"matched"`
	Succeeded int       `json:"succeeded"`
	JobIDs    []string  `json:"job_ids"`
	Failed    []Failure `json:"failed"`
	HasMore   bool      `json:"has_more"`
	// NextCursor, with HasMore, is where the next call goes on: send it
	// back as "cursor" to continue this pass.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Failure is one job a bulk call could not act on: its place in the
// call's selection, its id and the error.
type Failure struct {
	Index int           `json:"index"`
	JobID string        `json:"job_id"`
	Error *ojserr.Error `json:"error"`
}

// maxBulkBytes bounds the dead letter jobs one bulk call holds (by
// store.FetchBytes): a thousand jobs of 1 MiB would not fit the api
// function's memory. A call that reaches it stops there, with has_more.
var maxBulkBytes = 64 << 20

// matching lists up to f.Limit dead-letter jobs matching f, newest
// first (fewer when they pass maxBulkBytes), and whether more may match.
func (s *Service) matching(ctx context.Context, f Filter) ([]*job.Job, bool, error) {
	queues, err := s.queuesOf(ctx, f.Queue)
	if err != nil {
		return nil, false, err
	}
	var out []*job.Job
	bytes := 0
	for _, q := range queues {
		for cursor := ""; ; {
			page, err := s.tb.page(ctx, q, time.Time{}, time.Time{}, false, 200, cursor)
			if err != nil {
				return nil, false, ojserr.Backend(err)
			}
			for _, j := range page.Jobs {
				if !f.match(j) {
					continue
				}
				if bytes += store.FetchBytes(j); len(out) == f.Limit || (len(out) > 0 && bytes > maxBulkBytes) {
					return out, true, nil
				}
				out = append(out, j)
			}
			if cursor = page.Cursor; cursor == "" {
				break
			}
		}
	}
	return out, false, nil
}

// RetryMatching retries every dead-letter job matching f (at most
// f.Limit per call), oldest first, each as Retry does; the jobs it could
// not retry are in Failed. Jobs of workflows are not selected (Retry
// refuses them).
func (s *Service) RetryMatching(ctx context.Context, f Filter) (BulkResult, error) {
	f.retry = true
	return s.bulk(ctx, f, func(j *job.Job) error {
		_, err := s.Retry(ctx, j.ID, RetryOverride{})
		return err
	})
}

// Purge deletes every dead-letter job matching f (at most f.Limit per
// call), oldest first, each as Delete does; the jobs it could not delete
// are in Failed. A bad cursor fails with invalid_request.
func (s *Service) Purge(ctx context.Context, f Filter) (BulkResult, error) {
	return s.bulk(ctx, f, func(j *job.Job) error { return s.Delete(ctx, j.ID) })
}

// bulk applies op to the dead letter jobs f selects, oldest first.
//
// A pass (a first call and the calls that go on from its NextCursor)
// reads each queue's dead letter jobs once, in the order they were
// discarded, up to the time the first call started: a job this pass
// retried and that failed again since is not selected again, nor is one
// this pass could not act on (it is behind the cursor). A call reads at
// most f.Scan jobs; a call without a cursor starts a new pass.
func (s *Service) bulk(ctx context.Context, f Filter, op func(*job.Job) error) (BulkResult, error) {
	jobs, next, err := s.selectJobs(ctx, f)
	if err != nil {
		return BulkResult{}, err
	}
	res := BulkResult{Matched: len(jobs), HasMore: next != "", NextCursor: next, JobIDs: []string{}, Failed: []Failure{}}
	for i, j := range jobs {
		if err := op(j); err != nil {
			res.Failed = append(res.Failed, Failure{Index: i, JobID: j.ID, Error: ojserr.As(err)})
			continue
		}
		res.Succeeded++
		res.JobIDs = append(res.JobIDs, j.ID)
	}
	return res, nil
}

// deadCursor is where a pass of bulk is: the queue being read, the
// store's cursor within it, and the end of the pass (the first call's
// time).
type deadCursor struct {
	Queue string `json:"q"`
	Page  string `json:"p,omitempty"`
	End   int64  `json:"e"`
}

func (c deadCursor) encode() string { return opaque.Encode(c) }

func parseDeadCursor(s string) (deadCursor, error) {
	var c deadCursor
	if !opaque.Decode(s, &c) || c.Queue == "" || c.End <= 0 {
		return c, ojserr.Invalid("cursor", "'cursor' must be a next_cursor returned by a previous call.")
	}
	return c, nil
}

// selectJobs lists up to f.Limit dead-letter jobs matching f, oldest
// first (fewer when they pass maxBulkBytes), reading at most f.Scan; next
// is the cursor to go on from, empty when the pass has read everything.
func (s *Service) selectJobs(ctx context.Context, f Filter) (jobs []*job.Job, next string, err error) {
	cur := deadCursor{End: s.now().UnixMilli()}
	bytes := 0
	if f.Cursor != "" {
		if cur, err = parseDeadCursor(f.Cursor); err != nil {
			return nil, "", err
		}
	}
	queues, err := s.queuesOf(ctx, f.Queue)
	if err != nil {
		return nil, "", err
	}
	slices.Sort(queues)
	if f.Cursor != "" {
		// Go on at the cursor's queue (or the next one, if it went away).
		i, _ := slices.BinarySearch(queues, cur.Queue)
		if f.Queue != "" && f.Queue != cur.Queue {
			return nil, "", ojserr.Invalid("cursor", "'cursor' belongs to another filter.")
		}
		if i == len(queues) || queues[i] != cur.Queue {
			cur.Page = ""
		}
		queues = queues[i:]
	}
	before := time.UnixMilli(cur.End)
	if !f.Before.IsZero() && f.Before.Before(before) {
		before = f.Before
	}
	budget := cmp.Or(max(f.Scan, 0), MaxScan)
	for qi, q := range queues {
		page := ""
		if qi == 0 && q == cur.Queue {
			page = cur.Page
		}
		for {
			if budget == 0 {
				return jobs, deadCursor{Queue: q, Page: page, End: cur.End}.encode(), nil
			}
			p, err := s.tb.page(ctx, q, f.Since, before, true, min(200, budget), page)
			if err != nil {
				return nil, "", ojserr.Backend(err)
			}
			budget -= len(p.Jobs)
			for _, j := range p.Jobs {
				if !f.match(j) {
					continue
				}
				if bytes += store.FetchBytes(j); len(jobs) == f.Limit || (len(jobs) > 0 && bytes > maxBulkBytes) {
					// Go on at this job: the ones taken are behind it.
					return jobs, deadCursor{Queue: q, Page: pageCursor(jobs[len(jobs)-1]), End: cur.End}.encode(), nil
				}
				jobs = append(jobs, j)
			}
			if page = p.Cursor; page == "" {
				break
			}
		}
		if budget == 0 && qi+1 < len(queues) {
			return jobs, deadCursor{Queue: queues[qi+1], End: cur.End}.encode(), nil
		}
	}
	return jobs, "", nil
}

// Stats summarises the dead letter queue (ojs-dead-letter.md 10.1).
type Stats struct {
	Total       int            `json:"total"`
	ByQueue     map[string]int `json:"by_queue"`
	ByErrorType map[string]int `json:"by_error_type"`
	OldestAt    *string        `json:"oldest_at"`
	NewestAt    *string        `json:"newest_at"`
	// Truncated is set when the queue holds more than MaxStats jobs,
	// or more than maxBulkBytes of them: the figures then cover the
	// newest of each queue read.
	Truncated bool `json:"truncated"`
	// Retention is the retention policy and when it next prunes.
	Retention RetentionView `json:"retention"`
}

// MaxStats bounds the jobs Stats reads.
const MaxStats = 10000

// Stats counts the dead letter queue. It reads the dead-letter index (up
// to MaxStats jobs), so its cost grows with the queue's size.
func (s *Service) Stats(ctx context.Context) (Stats, error) {
	jobs, more, err := s.matching(ctx, Filter{Limit: MaxStats})
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Total: len(jobs), ByQueue: map[string]int{}, ByErrorType: map[string]int{}, Truncated: more}
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
