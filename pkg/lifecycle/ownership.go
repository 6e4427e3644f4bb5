package lifecycle

import (
	"context"
	"encoding/json"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// AckOwned is ACK by the worker that holds the job's reservation
// (ojs-worker-protocol.md 5.6): with workerID set, the job must be active
// under that worker id, and the completion is pinned to the attempt read,
// so a worker whose lease expired while its job was fetched again by
// another worker is refused (409) instead of completing the other
// worker's attempt. Without workerID (the HTTP binding's ACK does not
// require it) it is Ack of whatever attempt is active.
func (s *Service) AckOwned(ctx context.Context, id, workerID string, result json.RawMessage) (*job.Job, error) {
	if workerID == "" {
		return s.Ack(ctx, id, result, 0)
	}
	cur, err := s.owned(ctx, id, workerID, "acknowledge")
	if err != nil {
		return nil, err
	}
	return s.Ack(ctx, id, result, cur.Attempt)
}

// NackOwned is FAIL by the worker that holds the reservation (see
// AckOwned).
func (s *Service) NackOwned(ctx context.Context, id, workerID string, in ErrorInput) (*job.Job, error) {
	if workerID == "" {
		return s.Nack(ctx, id, in, 0)
	}
	cur, err := s.owned(ctx, id, workerID, "fail")
	if err != nil {
		return nil, err
	}
	return s.Nack(ctx, id, in, cur.Attempt)
}

func (s *Service) owned(ctx context.Context, id, workerID, op string) (*job.Job, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	cur, err := s.st.Get(ctx, id)
	if err != nil {
		return nil, apiError(err, id, op)
	}
	if cur.State != job.Active {
		return nil, ojserr.StateConflict(ojserr.Conflict, "Cannot %s job not in 'active' state. Current state: '%s'.", op, cur.State).
			With("job_id", id).With("current_state", string(cur.State)).With("expected_state", "active")
	}
	if cur.WorkerID != workerID {
		return nil, ojserr.StateConflict(ojserr.Conflict, "Cannot %s job %s: worker '%s' does not hold its reservation (its lease expired and the job was fetched again).", op, id, workerID).
			With("job_id", id).With("current_state", string(cur.State)).With("worker_id", workerID)
	}
	return cur, nil
}
