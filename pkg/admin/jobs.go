package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/opaque"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// EventWindow is how far back a search for finished jobs reads the event
// log when it is given no since: the last day. Events are kept for
// OJS_EVENT_TTL (7 days by default), which bounds any search by event.
const EventWindow = 24 * time.Hour

// JobQuery is a job search (ojs-admin-api.md 7.1).
type JobQuery struct {
	// Queue restricts to one queue ("" all registered queues).
	Queue string
	// State restricts to one state ("" any). available, scheduled,
	// retryable, active and discarded are read from the indexes (every
	// such job, in index order); completed and cancelled, and a search
	// without state, from the event log within [Since, Until) (jobs
	// created, or finished, in that window, oldest first). pending jobs
	// are in neither and cannot be searched (look them up by id).
	State job.State
	// Type matches the job type exactly, or as a prefix when it ends in
	// "*".
	Type string
	// Since and Until bound the creation time (the finishing time for
	// completed and cancelled jobs). Zero: unset.
	Since, Until time.Time
	// PerPage is the page size (1..MaxPerPage, default DefaultPerPage).
	PerPage int
	// Cursor continues a previous search (JobPage.Cursor).
	Cursor string
}

// JobPage is a page of a job search.
type JobPage struct {
	Items      []map[string]any `json:"items"`
	Pagination Pagination       `json:"pagination"`
	// Source says where the jobs were read: "index" or "events".
	Source string `json:"source"`
	// Window is the time window an event-log search read.
	Window *Window `json:"window,omitempty"`
	jobs   []*job.Job
}

// Jobs returns the jobs of the page.
func (p *JobPage) Jobs() []*job.Job { return p.jobs }

// Window is a time range.
type Window struct {
	Since string `json:"since"`
	Until string `json:"until"`
}

// ParseJobQuery reads a search from query parameters: queue, state, type,
// since, until, per_page (or limit), cursor, and page (only 1: paging is
// by cursor).
func ParseJobQuery(v url.Values) (JobQuery, error) {
	q := JobQuery{PerPage: DefaultPerPage}
	if err := onlyParams(v, []string{"queue", "state", "type", "since", "until", "per_page", "cursor"}, "limit", "page", "sort", "order"); err != nil {
		return q, err
	}
	q.Queue, q.Type, q.Cursor = v.Get("queue"), v.Get("type"), v.Get("cursor")
	if q.Queue != "" {
		if err := job.ValidateQueue(q.Queue); err != nil {
			return q, err
		}
	}
	if len(q.Type) > 256 {
		return q, ojserr.Invalid("type", "'type' is at most 256 characters.")
	}
	if st := v.Get("state"); st != "" {
		q.State = job.State(st)
		if !q.State.Valid() {
			return q, ojserr.Invalid("state", "Unknown state '%s'.", st).With("allowed", job.States)
		}
	}
	if err := parseTimes(v, &q.Since, &q.Until); err != nil {
		return q, err
	}
	if pp := cmp.Or(v.Get("per_page"), v.Get("limit")); pp != "" {
		n, err := strconv.Atoi(pp)
		if err != nil || n < 1 || n > MaxPerPage {
			return q, ojserr.Invalid("per_page", "'per_page' must be an integer from 1 to %d.", MaxPerPage)
		}
		q.PerPage = n
	}
	if p := v.Get("page"); p != "" && p != "1" {
		return q, ojserr.Invalid("page", "Job listings are paged by cursor: pass the previous page's pagination.next_cursor as 'cursor'.")
	}
	return q, nil
}

// onlyParams refuses a query parameter that is not in allowed (listed in
// the error) or more.
func onlyParams(v url.Values, allowed []string, more ...string) error {
	for k := range v {
		if !slices.Contains(allowed, k) && !slices.Contains(more, k) {
			return ojserr.Invalid(k, "Unknown query parameter '%s'.", k).With("allowed", allowed)
		}
	}
	return nil
}

// parseTime reads the RFC 3339 timestamp s of field ("": the zero time).
func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, ojserr.Invalid(field, "'%s' must be an RFC 3339 timestamp.", field)
	}
	return t.UTC(), nil
}

// parseTimes reads the query parameters since and until.
func parseTimes(v url.Values, since, until *time.Time) (err error) {
	if *since, err = parseTime("since", v.Get("since")); err == nil {
		*until, err = parseTime("until", v.Get("until"))
	}
	return err
}

// jobCursor is the decoded state of a search: which queue and index
// position (index mode), or which event (event mode).
type jobCursor struct {
	Mode  string `json:"m"`
	Queue string `json:"q,omitempty"`
	Key   string `json:"k,omitempty"`
	After string `json:"a,omitempty"`
	Since string `json:"s,omitempty"`
	Until string `json:"u,omitempty"`
}

func (c jobCursor) encode() string { return opaque.Encode(c) }

func decodeJobCursor(s string) (jobCursor, error) {
	var c jobCursor
	if !opaque.Decode(s, &c) || (c.Mode != "i" && c.Mode != "e") {
		return c, ojserr.Invalid("cursor", "'cursor' is not a cursor this server returned.")
	}
	return c, nil
}

// indexed maps a state to the index partition that lists it.
func indexed(st job.State) (store.Listing, bool) {
	switch st {
	case job.Available:
		return store.ListAvailable, true
	case job.Discarded:
		return store.ListDead, true
	case job.Scheduled, job.Retryable, job.Active:
		return store.ListWaiting, true
	}
	return 0, false
}

func (q JobQuery) matches(j *job.Job, byFinish bool) bool {
	if q.State != "" && j.State != q.State {
		return false
	}
	if q.Queue != "" && j.Queue != q.Queue {
		return false
	}
	if q.Type != "" {
		if p, ok := strings.CutSuffix(q.Type, "*"); ok {
			if !strings.HasPrefix(j.Type, p) {
				return false
			}
		} else if j.Type != q.Type {
			return false
		}
	}
	if !byFinish {
		if j.CreatedAt != nil && !q.Since.IsZero() && j.CreatedAt.Before(q.Since) {
			return false
		}
		if j.CreatedAt != nil && !q.Until.IsZero() && !j.CreatedAt.Before(q.Until) {
			return false
		}
	}
	return true
}

// SearchJobs runs a job search (see JobQuery for where each state is
// read). A page may hold fewer than PerPage jobs and still have more: the
// call stops after MaxQueryCalls queries.
func (s *Service) SearchJobs(ctx context.Context, q JobQuery) (*JobPage, error) {
	if q.PerPage <= 0 {
		q.PerPage = DefaultPerPage
	}
	if q.State == job.Pending {
		return nil, ojserr.Invalid("state", "Pending jobs are neither indexed nor logged until activated; look one up by id (GET /ojs/v1/admin/jobs/{id}).")
	}
	var cur jobCursor
	if q.Cursor != "" {
		c, err := decodeJobCursor(q.Cursor)
		if err != nil {
			return nil, err
		}
		cur = c
	}
	if _, ok := indexed(q.State); ok {
		return s.searchIndex(ctx, q, cur)
	}
	return s.searchEvents(ctx, q, cur)
}

func (s *Service) searchIndex(ctx context.Context, q JobQuery, cur jobCursor) (*JobPage, error) {
	l, _ := indexed(q.State)
	queues, err := s.queuesOf(ctx, q.Queue)
	if err != nil {
		return nil, err
	}
	page := &JobPage{Items: []map[string]any{}, Source: "index", Pagination: Pagination{Page: 1, PerPage: q.PerPage}}
	// Resume at the cursor's queue.
	start, key := 0, ""
	if cur.Mode == "i" {
		var found bool
		if start, found = slices.BinarySearch(queues, cur.Queue); found {
			key = cur.Key
		}
	}
	var states []job.State
	if l == store.ListWaiting {
		states = []job.State{q.State}
	}
	calls := 0
	for qi := start; qi < len(queues); qi++ {
		for {
			if len(page.jobs) >= q.PerPage || calls >= MaxQueryCalls {
				page.Pagination.HasMore = true
				page.Pagination.NextCursor = jobCursor{Mode: "i", Queue: queues[qi], Key: key}.encode()
				return page.finish(), nil
			}
			p, err := s.st.ListQueue(ctx, l, queues[qi], states, q.PerPage-len(page.jobs), key)
			calls++
			if errors.Is(err, store.ErrBadCursor) {
				return nil, ojserr.Invalid("cursor", "'cursor' is not a cursor this server returned.")
			}
			if err != nil {
				return nil, ojserr.Backend(err)
			}
			for _, it := range p.Items {
				if q.matches(it.Job, false) {
					page.jobs = append(page.jobs, it.Job)
				}
			}
			key = p.Cursor
			if key == "" {
				break
			}
		}
	}
	return page.finish(), nil
}

func (p *JobPage) finish() *JobPage {
	for _, j := range p.jobs {
		p.Items = append(p.Items, Summary(j))
	}
	return p
}

// Summary is the short form of a job in a listing.
func Summary(j *job.Job) map[string]any {
	m := map[string]any{"id": j.ID, "type": j.Type, "queue": j.Queue, "state": j.State, "priority": j.Priority, "attempt": j.Attempt}
	for k, t := range map[string]*time.Time{"created_at": j.CreatedAt, "enqueued_at": j.EnqueuedAt, "started_at": j.StartedAt,
		"completed_at": j.CompletedAt, "cancelled_at": j.CancelledAt, "discarded_at": j.DiscardedAt, "scheduled_at": j.ScheduledAt,
		"next_attempt_at": j.NextAttemptAt} {
		if t != nil {
			m[k] = job.Timestamp(*t)
		}
	}
	if j.WorkflowID != "" {
		m["workflow_id"] = j.WorkflowID
	}
	if j.Error != nil {
		m["error"] = map[string]any{"type": j.Error.Type, "message": j.Error.Message}
	}
	return m
}

// searchEvents finds jobs through the event log: completed or cancelled
// jobs by their finishing event, other searches by the event that created
// the job (job.enqueued or job.scheduled at the job's creation time).
func (s *Service) searchEvents(ctx context.Context, q JobQuery, cur jobCursor) (*JobPage, error) {
	now := s.now()
	since, until := q.Since, q.Until
	if cur.Mode == "e" {
		since, _ = time.Parse(time.RFC3339Nano, cur.Since)
		until, _ = time.Parse(time.RFC3339Nano, cur.Until)
	}
	if until.IsZero() || until.After(now) {
		until = now
	}
	if since.IsZero() {
		since = until.Add(-EventWindow)
	}
	if since.Before(until.Add(-events.MaxWindow)) {
		since = until.Add(-events.MaxWindow)
	}
	f := events.Filter{Since: since, Until: until, Limit: 200}
	byFinish := true
	switch q.State {
	case job.Completed:
		f.Types = []string{events.JobCompleted}
	case job.Cancelled:
		f.Types = []string{events.JobCancelled}
	default:
		f.Types = []string{events.JobEnqueued, events.JobScheduled}
		byFinish = false
	}
	if q.Queue != "" {
		f.Queues = []string{q.Queue}
	}
	if q.Type != "" && !strings.HasSuffix(q.Type, "*") {
		f.JobTypes = []string{q.Type}
	}
	if cur.Mode == "e" {
		f.After = cur.After
	}
	page := &JobPage{Items: []map[string]any{}, Source: "events", Pagination: Pagination{Page: 1, PerPage: q.PerPage},
		Window: &Window{Since: job.Timestamp(since), Until: job.Timestamp(until)}}
	seen := map[string]bool{}
pages:
	for calls := 0; ; calls++ {
		if calls >= MaxQueryCalls {
			page.Pagination.HasMore = true
			break
		}
		f.Limit = min(200, 2*(q.PerPage-len(page.jobs))+10)
		p, err := s.queryEvents(ctx, f, now)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		var ids []string
		for _, e := range p.Events {
			if id, _ := e.Data["job_id"].(string); id != "" && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		jobs, err := s.st.BatchGetJobs(ctx, ids)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		for _, e := range p.Events {
			id, _ := e.Data["job_id"].(string)
			j := jobs[id]
			f.After = e.ID
			if j == nil || !q.matches(j, byFinish) {
				continue
			}
			// A job is listed once: by the event of its creation (a later
			// job.enqueued is a retry or a promotion).
			if !byFinish && (j.CreatedAt == nil || !e.At().Equal(j.CreatedAt.Truncate(time.Millisecond))) {
				continue
			}
			delete(jobs, id)
			page.jobs = append(page.jobs, j)
			if len(page.jobs) >= q.PerPage {
				page.Pagination.HasMore = true
				break pages
			}
		}
		if !p.HasMore {
			break
		}
		f.After = p.Cursor
	}
	if page.Pagination.HasMore {
		page.Pagination.NextCursor = jobCursor{Mode: "e", After: f.After, Since: job.Timestamp(since), Until: job.Timestamp(until)}.encode()
	}
	return page.finish(), nil
}

// collect gathers up to max jobs of a search that keep accepts, and
// whether more may match.
func (s *Service) collect(ctx context.Context, q JobQuery, max int, keep func(*job.Job) bool) ([]*job.Job, bool, error) {
	var out []*job.Job
	for {
		p, err := s.SearchJobs(ctx, q)
		if err != nil {
			return nil, false, err
		}
		for _, j := range p.jobs {
			if keep != nil && !keep(j) {
				continue
			}
			if len(out) == max {
				return out, true, nil
			}
			out = append(out, j)
		}
		if !p.Pagination.HasMore {
			return out, false, nil
		}
		q.Cursor = p.Pagination.NextCursor
	}
}

// JobDetail is a job as ojs-admin-api.md 7.2 shows it: the whole envelope
// at the top level, its retry policy, error history and timestamps.
func (s *Service) JobDetail(ctx context.Context, id string) (map[string]any, *job.Job, error) {
	j, err := s.getJob(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return nil, nil, ojserr.Backend(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, ojserr.Backend(err)
	}
	m["retry_policy"] = m["retry"]
	if _, ok := m["errors"]; !ok {
		m["errors"] = []any{}
	}
	if _, ok := m["result"]; !ok {
		m["result"] = nil
	}
	meta := map[string]any{}
	for _, k := range []string{"created_at", "enqueued_at", "started_at", "scheduled_at", "completed_at", "cancelled_at", "discarded_at"} {
		meta[k] = m[k]
	}
	m["metadata"] = meta
	return m, j, nil
}

// getJob reads job id (404 when there is none).
func (s *Service) getJob(ctx context.Context, id string) (*job.Job, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	j, err := s.st.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ojserr.NotFoundf("job", id)
	}
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return j, nil
}

// JobEvents lists a job's events, oldest first (at most limit).
func (s *Service) JobEvents(ctx context.Context, id string, limit int) ([]events.Event, error) {
	p, err := s.queryEvents(ctx, events.Filter{SubjectCategory: "job", SubjectID: id, Limit: limit}, s.now())
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return p.Events, nil
}

// CancelJob cancels a job (the data plane's CANCEL).
func (s *Service) CancelJob(ctx context.Context, id string) (*job.Job, job.State, error) {
	return s.jobs.Cancel(ctx, id)
}

// RetryJob re-enqueues a discarded job with its attempts reset (as the
// dead letter retry does). A cancelled job cannot be retried: the OJS core
// state machine has no way out of cancelled (ojs-core.md), which this
// backend enforces on every write; push a new job instead.
func (s *Service) RetryJob(ctx context.Context, id string) (*job.Job, error) {
	j, err := s.getJob(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.State != job.Discarded {
		return nil, ojserr.StateConflict(ojserr.Conflict, "Job '%s' is %s; only discarded jobs can be retried (cancelled is final in the OJS state machine).", id, j.State).
			With("current_state", string(j.State))
	}
	return s.dead.Retry(ctx, id, deadletter.RetryOverride{})
}

// BulkFailure is one job a bulk operation could not act on.
type BulkFailure struct {
	JobID string `json:"job_id"`
	Code  string `json:"code"`
	Error string `json:"error"`
}

func failure(id string, err error) BulkFailure {
	e := ojserr.As(err)
	msg := e.Message
	if e.Status() >= 500 {
		msg = "The backend failed; try again."
	}
	return BulkFailure{JobID: id, Code: string(e.Code), Error: msg}
}

// BulkResult is the answer to a bulk operation (ojs-admin-api.md 8).
type BulkResult struct {
	Action    string        `json:"action"`
	Matched   int           `json:"matched"`
	Succeeded int           `json:"succeeded"`
	Failed    int           `json:"failed"`
	Errors    []BulkFailure `json:"errors"`
	JobIDs    []string      `json:"job_ids"`
	HasMore   bool          `json:"has_more"`
}

// Bulk actions.
const (
	BulkRetry  = "retry"
	BulkCancel = "cancel"
	BulkDelete = "delete"
)

// Bulk runs a bulk retry, cancel or delete: {"filter": {queue, state,
// type, since, until}, "confirm": true}, on at most MaxBulk jobs per call.
// A filter without state means every state the action applies to.
func (s *Service) Bulk(ctx context.Context, action string, raw []byte) (*BulkResult, error) {
	var body struct {
		Filter *struct {
			Queue string `json:"queue"`
			State string `json:"state"`
			Type  string `json:"type"`
			Since string `json:"since"`
			Until string `json:"until"`
		} `json:"filter"`
		Confirm bool `json:"confirm"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return nil, ojserr.New(ojserr.InvalidPayload, "The body must be {\"filter\": {\"queue\", \"state\", \"type\", \"since\", \"until\"}, \"confirm\": true}.").With("field", "body")
	}
	if !body.Confirm {
		return nil, needConfirm()
	}
	v := url.Values{}
	if f := body.Filter; f != nil {
		for k, val := range map[string]string{"queue": f.Queue, "state": f.State, "type": f.Type, "since": f.Since, "until": f.Until} {
			if val != "" {
				v.Set(k, val)
			}
		}
	}
	q, err := ParseJobQuery(v)
	if err != nil {
		if oe := ojserr.As(err); oe.Details != nil {
			if fld, ok := oe.Details["field"].(string); ok {
				oe.Details["field"] = "filter." + fld
			}
		}
		return nil, err
	}
	var states []job.State
	var op func(*job.Job) error
	switch action {
	case BulkRetry:
		states = []job.State{job.Discarded}
		op = func(j *job.Job) error { _, err := s.dead.Retry(ctx, j.ID, deadletter.RetryOverride{}); return err }
	case BulkCancel:
		states = []job.State{job.Available, job.Scheduled, job.Retryable, job.Active}
		op = func(j *job.Job) error { _, _, err := s.jobs.Cancel(ctx, j.ID); return err }
	case BulkDelete:
		states = []job.State{job.Completed, job.Cancelled, job.Discarded}
		op = func(j *job.Job) error { return s.deleteJob(ctx, j) }
	default:
		return nil, ojserr.NotFoundf("bulk action", action)
	}
	if q.State != "" {
		if !slices.Contains(states, q.State) {
			return nil, ojserr.Invalid("filter.state", "Bulk %s applies to jobs in states %v, not %s.", action, states, q.State)
		}
		states = []job.State{q.State}
	}
	res, err := s.act(ctx, q, states, nil, op)
	if err != nil {
		return nil, err
	}
	res.Action = action
	s.cfg.Logger.InfoContext(ctx, "bulk operation", "action", action, "matched", res.Matched, "succeeded", res.Succeeded, "failed", res.Failed)
	return res, nil
}

// act runs op on the jobs q finds in each of states that keep (nil: all)
// accepts, at most MaxBulk in all.
func (s *Service) act(ctx context.Context, q JobQuery, states []job.State, keep func(*job.Job) bool, op func(*job.Job) error) (*BulkResult, error) {
	res := &BulkResult{Errors: []BulkFailure{}, JobIDs: []string{}}
	for _, st := range states {
		left := MaxBulk - res.Matched
		if left <= 0 {
			res.HasMore = true
			break
		}
		q.State, q.Cursor, q.PerPage = st, "", MaxPerPage
		js, more, err := s.collect(ctx, q, left, keep)
		if err != nil {
			return nil, err
		}
		res.HasMore = res.HasMore || more
		for _, j := range js {
			res.Matched++
			if err := op(j); err != nil {
				res.Failed++
				res.Errors = append(res.Errors, failure(j.ID, err))
				continue
			}
			res.Succeeded++
			res.JobIDs = append(res.JobIDs, j.ID)
		}
	}
	return res, nil
}
