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
// require it) it is Ack of whatever attempt is active.
func (s *Service) AckOwned(ctx context.Context, id, workerID string, result json.RawMessage) (*job.Job, error) {
	return s.ack(ctx, id, result, 0, workerID)
}

// NackOwned is FAIL by the worker that holds the reservation (see
// AckOwned).
func (s *Service) NackOwned(ctx context.Context, id, workerID string, in ErrorInput) (*job.Job, error) {
	return s.nack(ctx, id, in, 0, workerID)
}

func notHolder(op, id, workerID string) error {
	return ojserr.StateConflict(ojserr.Conflict, "Cannot %s job %s: worker '%s' does not hold its reservation (its lease expired and the job was fetched again).", op, id, workerID).
		With("job_id", id).With("current_state", string(job.Active)).With("worker_id", workerID)
}
