// Package checkpoint serves the durable execution extension
// (urn:ojs:ext:durable-execution, docs/durable-execution.md): a job's
// checkpoint, the state a later attempt resumes from, saved, read and
// cleared through the API. It is the checkpoint progress reports carry
// (ojs-progress.md 6.4): one per job, stored on the job's item (packed),
// kept across attempts, shown in the envelope as checkpoint and
// last_checkpoint.
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// MaxStateBytes bounds a checkpoint's state as sent (JSON): it is kept on
// the job's item, within the room the item keeps for what attempts add.
const MaxStateBytes = 4096

// Service saves, reads and clears checkpoints.
type Service struct {
	st  *store.Store
	now func() time.Time
}

// New returns the checkpoints of st's jobs (now: time.Now when nil).
func New(st *store.Store, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{st: st, now: now}
}

// Checkpoint is a job's checkpoint as the API answers it (4.3).
type Checkpoint struct {
	JobID     string          `json:"job_id"`
	State     json.RawMessage `json:"state,omitempty"`
	Sequence  int             `json:"sequence"`
	CreatedAt string          `json:"created_at,omitempty"`
}

// tries bounds the reads and writes of one change racing the job's own.
const tries = 4

// Save records body's state ({"state": <any JSON value>}) as job id's
// checkpoint, the next of its sequence. A job that has finished
// (completed, cancelled, discarded) refuses with 409; the suite saves on
// available jobs too, so any other state takes one.
func (s *Service) Save(ctx context.Context, id string, body []byte) (*Checkpoint, error) {
	var req struct {
		State json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.State) == 0 {
		return nil, ojserr.Invalid("state", "Send {\"state\": <any JSON value>}: the state a later attempt resumes from.")
	}
	if len(req.State) > MaxStateBytes {
		return nil, ojserr.Newf(ojserr.PayloadTooLarge, "A checkpoint's state is at most %d bytes; got %d. Keep large state elsewhere and checkpoint a reference.", MaxStateBytes, len(req.State)).
			With("max_bytes", MaxStateBytes)
	}
	return s.change(ctx, id, func(j *job.Job) (store.Transition, error) {
		if j.State.Terminal() {
			return store.Transition{}, ojserr.StateConflict(ojserr.Conflict, "Cannot checkpoint a job in state '%s'.", j.State).
				With("job_id", id).With("current_state", string(j.State))
		}
		return store.SaveCheckpoint(j, req.State, s.now()), nil
	})
}

// Get reads job id's checkpoint; not found when it has none.
func (s *Service) Get(ctx context.Context, id string) (*Checkpoint, error) {
	j, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.LastCheckpoint == nil {
		return nil, ojserr.NotFoundf("checkpoint", id)
	}
	return of(j), nil
}

// Deleted answers Delete.
type Deleted struct {
	Deleted bool   `json:"deleted"`
	JobID   string `json:"job_id"`
}

// Delete clears job id's checkpoint (4.4; idempotent: a job without one
// answers deleted false). The next save starts the sequence at 1.
func (s *Service) Delete(ctx context.Context, id string) (*Deleted, error) {
	had := true
	_, err := s.change(ctx, id, func(j *job.Job) (store.Transition, error) {
		if had = j.LastCheckpoint != nil; !had {
			return store.Transition{}, errNothing
		}
		return store.ClearCheckpoint(j), nil
	})
	if err != nil && !errors.Is(err, errNothing) {
		return nil, err
	}
	return &Deleted{Deleted: had, JobID: id}, nil
}

var errNothing = errors.New("nothing to change")

// change reads job id and applies what decide makes of it, again when
// the job changed between the read and the write.
func (s *Service) change(ctx context.Context, id string, decide func(*job.Job) (store.Transition, error)) (*Checkpoint, error) {
	for range tries {
		j, err := s.read(ctx, id)
		if err != nil {
			return nil, err
		}
		t, err := decide(j)
		if err != nil {
			return nil, err
		}
		j, err = s.st.Apply(ctx, t)
		if _, ok := errors.AsType[*store.ConflictError](err); ok || errors.Is(err, store.ErrTransactionConflict) {
			continue
		}
		if err != nil {
			return nil, store.APIError(err, id, "checkpoint")
		}
		return of(j), nil
	}
	return nil, ojserr.Backend(fmt.Errorf("checkpoint job %s: too much contention", id))
}

func (s *Service) read(ctx context.Context, id string) (*job.Job, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	j, err := s.st.Get(ctx, id)
	if err != nil {
		return nil, store.APIError(err, id, "read")
	}
	return j, nil
}

func of(j *job.Job) *Checkpoint {
	return &Checkpoint{JobID: j.ID, State: j.LastCheckpoint, Sequence: j.CheckpointSeq, CreatedAt: j.CheckpointAt}
}
