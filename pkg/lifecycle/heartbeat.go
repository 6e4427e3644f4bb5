package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"golang.org/x/sync/errgroup"
)

// HeartbeatRequest is a worker's BEAT (ojs-worker-protocol.md 4.2).
type HeartbeatRequest struct {
	WorkerID string
	// State is what the worker reports: running, quiet or terminate.
	State    string
	JobIDs   []string
	Active   int
	Hostname string
	Queues   []string
	// Concurrency is the worker's concurrency setting (0: not reported).
	Concurrency int
	// Visibility is the new lease of each job (default 30 s).
	Visibility time.Duration
}

// HeartbeatResult is the answer: the jobs whose lease was extended, those
// cancelled meanwhile (ojs-core.md 7.6), and the state the worker must
// move to (running, quiet or terminate).
type HeartbeatResult struct {
	Extended  []string
	Cancelled []string
	State     string
}

// Worker states and directives.
const (
	WorkerRunning   = "running"
	WorkerQuiet     = "quiet"
	WorkerTerminate = "terminate"
)

// Heartbeat records the worker, extends the leases of its active jobs and
// returns its directive: one set by an operator (SetWorkerDirective), or
// the one an active job's meta.test_directive asks for (the OJS
// conformance suite's hook), else running. A directive never moves a
// worker backwards (terminate is never answered with quiet or running).
func (s *Service) Heartbeat(ctx context.Context, r HeartbeatRequest) (HeartbeatResult, error) {
	// The worker registry item holds the worker id, hostname and queues:
	// unbounded, they made it larger than DynamoDB's 400 KB and the
	// heartbeat a 500.
	switch {
	case r.WorkerID == "":
		return HeartbeatResult{}, ojserr.Invalid("worker_id", "The 'worker_id' field is required.")
	case len(r.WorkerID) > 256:
		return HeartbeatResult{}, ojserr.Invalid("worker_id", "The 'worker_id' is longer than 256 characters.")
	case len(r.Hostname) > 256:
		return HeartbeatResult{}, ojserr.Invalid("hostname", "The 'hostname' is longer than 256 characters.")
	case len(r.Queues) > MaxWorkerQueues:
		return HeartbeatResult{}, ojserr.Invalid("queues", "A heartbeat lists at most %d queues.", MaxWorkerQueues)
	}
	for _, q := range r.Queues {
		if err := job.ValidateQueue(q); err != nil {
			return HeartbeatResult{}, err
		}
	}
	switch {
	case !slices.Contains([]string{"", WorkerRunning, WorkerQuiet, WorkerTerminate}, r.State):
		return HeartbeatResult{}, ojserr.Invalid("state", "'state' must be running, quiet or terminate.")
	case len(r.JobIDs) > MaxFetch:
		return HeartbeatResult{}, ojserr.Invalid("active_jobs", "At most %d active jobs per heartbeat.", MaxFetch)
	}
	for _, id := range r.JobIDs {
		if err := job.CheckID(id); err != nil {
			return HeartbeatResult{}, err
		}
	}
	res := HeartbeatResult{Extended: []string{}, Cancelled: []string{}, State: WorkerRunning}
	now := s.Now()
	active := max(r.Active, len(r.JobIDs))
	w, err := s.qs.WorkerBeat(ctx, queue.WorkerInfo{ID: r.WorkerID, State: r.State, ActiveJobs: active, Hostname: r.Hostname, Queues: r.Queues,
		Concurrency: r.Concurrency}, now)
	if err != nil {
		return HeartbeatResult{}, ojserr.Backend(err)
	}
	directive := w.Directive
	if stopping(w.State) || stopping(directive) {
		s.workers.put(r.WorkerID, true)
	}
	var until time.Time // zero: each job's own lease length
	if r.Visibility > 0 {
		until = now.Add(r.Visibility)
	}
	// The jobs' extensions at once (up to writeParallel in flight), their
	// answers in the order the worker named them.
	type beat struct {
		j         *job.Job
		cancelled bool
		err       error
	}
	beats := make([]beat, len(r.JobIDs))
	var g errgroup.Group
	g.SetLimit(writeParallel)
	for i, id := range r.JobIDs {
		g.Go(func() error {
			beats[i].j, beats[i].cancelled, beats[i].err = s.extend(ctx, id, r.WorkerID, until, now)
			return nil
		})
	}
	_ = g.Wait()
	for i, b := range beats {
		if b.err != nil {
			return HeartbeatResult{}, ojserr.Backend(b.err)
		}
		if b.cancelled {
			res.Cancelled = append(res.Cancelled, r.JobIDs[i])
		}
		if b.j != nil {
			res.Extended = append(res.Extended, r.JobIDs[i])
			directive = stronger(directive, testDirective(b.j))
		}
	}
	res.State = stronger(stronger(WorkerRunning, r.State), directive)
	return res, nil
}

// extend renews the lease of job id for a heartbeat of workerID (to until,
// or when that is zero by the claim's lease length, see store.Extend): it
// returns the job when its lease is held, whether it was cancelled
// meanwhile, and an error other than the attempt being over.
func (s *Service) extend(ctx context.Context, id, workerID string, until, now time.Time) (*job.Job, bool, error) {
	j, err := s.st.Apply(ctx, store.Extend(id, workerID, until, now))
	var ce *store.ConflictError
	if errors.As(err, &ce) && heldBy(ce.Current, workerID, now) {
		if cur := ce.Current; !until.IsZero() && cur.Deadline != nil && until.After(*cur.Deadline) && cur.Deadline.After(now) {
			// The extension would pass the execution deadline: extend to it.
			j, err = s.st.Apply(ctx, store.Extend(id, workerID, *cur.Deadline, now))
			if errors.As(err, &ce) && heldBy(ce.Current, workerID, now) {
				j, err = ce.Current, nil // it ends at the deadline already
			}
		} else {
			// Held, and renewed less than a tenth of its length ago
			// (store.Extend): it stays as it is, no write.
			j, err = cur, nil
		}
	}
	if err == nil && j.Deadline != nil && j.LeaseUntil != nil && j.LeaseUntil.After(*j.Deadline) {
		// The claim's lease length passes the deadline: clamp it.
		if clamped, cerr := s.st.Apply(ctx, store.Clamp(id, *j.Deadline)); cerr == nil {
			j = clamped
		}
	}
	if errors.As(err, &ce) {
		return nil, ce.Current != nil && ce.Current.State == job.Cancelled, nil
	}
	if err != nil {
		return nil, false, ignoreConflict(err) // gone: nil
	}
	return j, false, nil
}

// heldBy reports whether j is active under a lease that has not ended,
// claimed by workerID or by a FETCH without a worker id.
func heldBy(j *job.Job, workerID string, now time.Time) bool {
	return j != nil && j.State == job.Active && j.LeaseUntil != nil && j.LeaseUntil.After(now) &&
		(j.WorkerID == "" || j.WorkerID == workerID)
}

// stronger is the later of two worker states (running < quiet < terminate).
func stronger(a, b string) string {
	rank := map[string]int{WorkerRunning: 1, WorkerQuiet: 2, WorkerTerminate: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func testDirective(j *job.Job) string {
	if j == nil || len(j.Meta) == 0 {
		return ""
	}
	var m struct {
		D string `json:"test_directive"`
	}
	_ = json.Unmarshal(j.Meta, &m)
	if m.D == WorkerQuiet || m.D == WorkerTerminate {
		return m.D
	}
	return ""
}

// SetWorkerDirective tells a worker, through its next heartbeat, to go
// quiet or terminate (ojs-admin-api.md 9.3).
func (s *Service) SetWorkerDirective(ctx context.Context, id, directive string) (*queue.WorkerInfo, error) {
	if id == "" || len(id) > 256 {
		return nil, ojserr.Invalid("id", "A worker id is 1 to 256 characters.")
	}
	if directive != WorkerQuiet && directive != WorkerTerminate {
		return nil, ojserr.Invalid("directive", "The directive must be quiet or terminate.")
	}
	w, err := s.qs.SetWorkerDirective(ctx, id, directive, s.Now())
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return w, nil
}

// Workers lists the workers seen in the last day, latest heartbeat first.
func (s *Service) Workers(ctx context.Context) ([]queue.WorkerInfo, error) {
	ws, err := s.qs.Workers(ctx, 1000)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return ws, nil
}
