package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"golang.org/x/sync/errgroup"
)

// Push validates and creates one job.
func (s *Service) Push(ctx context.Context, raw []byte) (*job.Job, error) {
	jobs, err := s.PushBatch(ctx, [][]byte{raw})
	if err != nil {
		if oe, ok := errors.AsType[*ojserr.Error](err); ok {
			delete(oe.Details, "index")
		}
		return nil, err
	}
	return jobs[0], nil
}

// MaxBulk is the most jobs one batch PUSH holds (ojs-bulk-operations.md
// section 7: at least 1,000).
const MaxBulk = 1000

// PushBatch validates every job (one invalid job rejects the batch; the
// error names its index), then creates them in transactions of up to
// store.MaxBatch jobs, each all or none. When one fails, the jobs created
// are returned with a *PartialError naming every job that was not.
func (s *Service) PushBatch(ctx context.Context, raws [][]byte) ([]*job.Job, error) {
	if len(raws) == 0 {
		return nil, ojserr.Invalid("jobs", "The 'jobs' array must hold at least one job.")
	}
	if len(raws) > MaxBulk {
		return nil, ojserr.Invalid("jobs", "A batch holds at most %d jobs; got %d.", MaxBulk, len(raws)).With("max_batch_size", MaxBulk)
	}
	now := s.Now()
	jobs := make([]*job.Job, len(raws))
	seen := map[string]int{}
	for i, raw := range raws {
		e, err := job.ParseEnqueue(raw, now)
		if err != nil {
			oe := ojserr.As(err)
			if len(raws) > 1 {
				oe.Message = fmt.Sprintf("Batch validation failed: job at index %d: %s", i, oe.Message)
			}
			return nil, oe.With("index", i)
		}
		if err := job.AssignTenant(e.Job, job.TenantFrom(ctx)); err != nil {
			return nil, ojserr.As(err).With("index", i)
		}
		if err := job.CheckPin(e.Job.Meta, job.RegionFrom(ctx)); err != nil {
			return nil, ojserr.As(err).With("index", i)
		}
		if prev, dup := seen[e.Job.ID]; dup {
			return nil, ojserr.Invalid("id", "Jobs at index %d and %d have the same id.", prev, i).With("index", i)
		}
		seen[e.Job.ID] = i
		jobs[i] = e.Job
	}
	if i := slices.IndexFunc(jobs, func(j *job.Job) bool { return j.Unique != nil }); i >= 0 && len(jobs) > 1 {
		return nil, ojserr.Invalid("unique", "Unique policies are honoured on single PUSH only; job at index %d has one. Enqueue it with POST /ojs/v1/jobs.", i).With("index", i)
	}
	if err := delegate(ctx, s.st, jobs); err != nil {
		return nil, err
	}
	if err := runChain(ctx, s.chain, jobs); err != nil {
		return nil, err
	}
	// A bounded queue refuses what would pass its bound (backpressure).
	if err := s.queues.CheckBounds(ctx, jobs); err != nil {
		return nil, err
	}
	// Admit first: it sets push mode, which the item sizes count.
	if err := s.queues.Admit(ctx, jobs); err != nil {
		return nil, err
	}
	sizes, err := s.itemSizes(jobs)
	if err != nil {
		return nil, err
	}
	if jobs[0].Unique != nil {
		j, err := s.pushUnique(ctx, jobs[0])
		if err != nil {
			return nil, err
		}
		if !j.Deduplicated {
			s.log.InfoContext(ctx, "job pushed", "job_id", j.ID, "type", j.Type, "queue", j.Queue, "state", string(j.State), "push_mode", j.Push, "unique", true)
		}
		return []*job.Job{j}, nil
	}
	if len(jobs) > store.MaxBatch {
		return s.createChunked(ctx, jobs, sizes)
	}
	if err := s.st.Create(ctx, jobs, s.redel); err != nil {
		return nil, createChunkError(err, 0)
	}
	for _, j := range jobs {
		s.log.InfoContext(ctx, "job pushed", "job_id", j.ID, "type", j.Type, "queue", j.Queue, "state", string(j.State), "push_mode", j.Push)
	}
	return jobs, nil
}

func createChunkError(err error, offset int) *ojserr.Error {
	if oe, ok := asTooLarge(err); ok {
		return oe
	}
	if dup, ok := errors.AsType[*store.DuplicateError](err); ok {
		return ojserr.Newf(ojserr.Duplicate, "A job with id '%s' already exists.", dup.ID).With("existing_job_id", dup.ID).With("index", offset+dup.Index)
	}
	return ojserr.Backend(err)
}

// PartialError reports a large batch of which some chunks were created
// and some were not.
type PartialError struct {
	// Failed lists the jobs not created, by index in the request.
	Failed []BatchFailure
}

// BatchFailure is one job of a batch that was not created.
type BatchFailure struct {
	Index int           `json:"index"`
	JobID string        `json:"job_id"`
	Error *ojserr.Error `json:"error"`
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("%d jobs of the batch were not created", len(e.Failed))
}

// createChunked writes a large batch in transactions of up to
// store.MaxBatch jobs that each fit DynamoDB's transaction size (txChunks),
// four at a time, keeping request order in the result.
func (s *Service) createChunked(ctx context.Context, jobs []*job.Job, sizes []int) ([]*job.Job, error) {
	starts := txChunks(sizes)
	n := len(starts) - 1
	errs := make([]error, n)
	var g errgroup.Group
	g.SetLimit(4)
	for c := range n {
		g.Go(func() error {
			errs[c] = s.st.Create(ctx, jobs[starts[c]:starts[c+1]], s.redel)
			return nil
		})
	}
	_ = g.Wait()
	var created []*job.Job
	var pe PartialError
	for c, err := range errs {
		chunk := jobs[starts[c]:starts[c+1]]
		if err == nil {
			created = append(created, chunk...)
			continue
		}
		ce := createChunkError(err, starts[c])
		for i, j := range chunk {
			pe.Failed = append(pe.Failed, BatchFailure{Index: starts[c] + i, JobID: j.ID, Error: ce})
		}
	}
	s.log.InfoContext(ctx, "batch pushed", "jobs", len(jobs), "created", len(created), "failed", len(pe.Failed), "chunks", n)
	if len(pe.Failed) > 0 {
		return created, &pe
	}
	return created, nil
}

// delegate bounds the jobs an AI agent delegated (ext_agent_parent_id) by
// their parents' delegation chain (job.Delegate): one batch read of the
// parents, none for jobs that name none. A parent not found (never
// written, or expired) leaves the job's own values.
func delegate(ctx context.Context, st *store.Store, jobs []*job.Job) error {
	var ids []string
	for _, j := range jobs {
		if p := job.AgentParent(j); p != "" {
			ids = append(ids, p)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	parents, err := st.BatchGetJobs(ctx, slices.Compact(slices.Sorted(slices.Values(ids))))
	if err != nil {
		return ojserr.Backend(err)
	}
	for i, j := range jobs {
		if p := parents[job.AgentParent(j)]; p != nil {
			if err := job.Delegate(j, p); err != nil {
				return ojserr.As(err).With("index", i)
			}
		}
	}
	return nil
}

// itemSizes returns the size of each job's item as DynamoDB counts it, or
// a 413 for an item over store.MaxJobItemBytes or a batch of one
// transaction whose items pass the transaction limit.
func (s *Service) itemSizes(jobs []*job.Job) ([]int, error) {
	sizes := make([]int, len(jobs))
	total := 0
	for i, j := range jobs {
		n, err := store.CheckJobItem(j, s.redel)
		if tl := (*store.TooLargeError)(nil); errors.As(err, &tl) {
			tl.Index = i
			return nil, tooLarge(tl)
		}
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		sizes[i] = n
		total += n
	}
	if len(jobs) > 1 && len(jobs) <= store.MaxBatch && total > awslimit.DynamoTxBytes {
		return nil, tooLarge(&store.TooLargeError{What: "transaction", Bytes: total, Max: awslimit.DynamoTxBytes})
	}
	return sizes, nil
}

// tooLarge maps a write refused for its size to 413 payload_too_large.
func tooLarge(e *store.TooLargeError) *ojserr.Error {
	switch e.What {
	case "job":
		oe := ojserr.Newf(ojserr.PayloadTooLarge, "Job at index %d takes %d bytes as stored (its args and meta compressed); a job is stored in at most %d, which leaves room for its result and errors in a DynamoDB item of 400 KB.", e.Index, e.Bytes, e.Max).
			With("index", e.Index).With("stored_bytes", e.Bytes).With("max_stored_bytes", e.Max).With("field", "args")
		oe.Hint = "Its args do not compress enough to fit: store the data elsewhere (an S3 object, say) and pass its reference in args (ojs-payload-limits.md section 5)."
		return oe
	case "item":
		return ojserr.Newf(ojserr.PayloadTooLarge, "Job at index %d takes %d bytes as stored; a DynamoDB item holds at most %d.", e.Index, e.Bytes, e.Max).
			With("index", e.Index).With("actual_bytes", e.Bytes).With("max_bytes", e.Max)
	}
	oe := ojserr.Newf(ojserr.PayloadTooLarge, "The batch's jobs take %d bytes as stored; a batch of up to %d jobs is written in one DynamoDB transaction, which holds at most %d bytes.",
		e.Bytes, store.MaxBatch, e.Max).With("actual_bytes", e.Bytes).With("max_bytes", e.Max)
	oe.Hint = "Send the jobs in smaller batches."
	return oe
}

// asTooLarge reports a *store.TooLargeError in err as a 413.
func asTooLarge(err error) (*ojserr.Error, bool) {
	if tl, ok := errors.AsType[*store.TooLargeError](err); ok {
		return tooLarge(tl), true
	}
	return nil, false
}

// txChunks splits a large batch, in order, into chunks of one transaction
// each (store.MaxBatch jobs, awslimit.DynamoTxBytes): each chunk's first
// index, and len(sizes) last.
func txChunks(sizes []int) []int {
	starts := []int{0}
	n, bytes := 0, 0
	for i, sz := range sizes {
		if n == store.MaxBatch || (n > 0 && bytes+sz > awslimit.DynamoTxBytes) {
			starts = append(starts, i)
			n, bytes = 0, 0
		}
		n++
		bytes += sz
	}
	return append(starts, len(sizes))
}
