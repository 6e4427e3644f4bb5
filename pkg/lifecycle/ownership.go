package lifecycle

import (
	"context"
	"encoding/json"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// AckOwned is ACK by the worker that holds the job's reservation
// (ojs-worker-protocol.md 5.6): with workerID set, the completion is
// conditional on the job being active under that worker id, so a worker
// whose job was fetched again by another is refused (409). attempt, when
// not 0, pins the ACK to that attempt (the FETCH answer's "attempt").
func (s *Service) AckOwned(ctx context.Context, id, workerID string, attempt int, result json.RawMessage) (*job.Job, error) {
	return s.ack(ctx, id, result, attempt, workerID)
}

// NackOwned is FAIL by the worker that holds the reservation, pinned to
// attempt when it is not 0 (see AckOwned).
func (s *Service) NackOwned(ctx context.Context, id, workerID string, attempt int, in ErrorInput) (*job.Job, error) {
	return s.nack(ctx, id, in, attempt, workerID)
}

// attemptOver is the answer to an ACK or FAIL pinned to an attempt that is
// no longer the job's.
func attemptOver(op string, j *job.Job, attempt int) error {
	return ojserr.StateConflict(ojserr.Conflict, "Cannot %s job %s: attempt %d is over; the job is in attempt %d (state '%s').", op, j.ID, attempt, j.Attempt, j.State).
		With("job_id", j.ID).With("current_state", string(j.State)).With("attempt", j.Attempt).With("requested_attempt", attempt)
}

func notHolder(op, id, workerID string) error {
	return ojserr.StateConflict(ojserr.Conflict, "Cannot %s job %s: worker '%s' does not hold its reservation (its lease expired and the job was fetched again).", op, id, workerID).
		With("job_id", id).With("current_state", string(job.Active)).With("worker_id", workerID)
}
