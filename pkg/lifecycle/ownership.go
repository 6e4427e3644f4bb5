package lifecycle

import (
	"context"
	"encoding/json"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// AckOwned is ACK by the worker that holds the job's reservation
// (ojs-worker-protocol.md 5.6): with workerID set, the completion is
// conditional on the job being active under that worker id (one write, no
// read), so a worker whose lease expired while its job was fetched again by
// another worker is refused (409) instead of completing the other
// worker's attempt. Without workerID (the HTTP binding's ACK does not
// require it) it is Ack of whatever attempt is active. attempt, when not
// 0, pins the ACK to that attempt (the FETCH answer's "attempt"): one
// worker id shared by a process's threads cannot tell its own attempts
// apart, so a thread whose lease ended could otherwise complete the
// attempt another thread fetched since.
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
