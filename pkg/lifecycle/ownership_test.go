package lifecycle_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// Found by the fault-injection soak's zombie workers: a pull worker whose
// lease expired while it stalled, and whose job was fetched again by
// another worker, could still ACK it and complete the other worker's
// attempt. With worker_id, only the reservation holder may ACK or FAIL
// (ojs-worker-protocol.md 5.6).
func TestOnlyTheReservationHolderMayAckOrFail(t *testing.T) {
	t.Parallel()
	s, c := newService(t)
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"own-q","retry":{"max_attempts":5}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"own-q"}, WorkerID: "zombie", Visibility: time.Second}); err != nil || len(got) != 1 {
		t.Fatalf("fetch by the zombie: %v %v", got, err)
	}
	c.Add(2 * time.Second) // the zombie stalls past its lease
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"own-q"}, WorkerID: "healthy", Visibility: time.Minute})
	if err != nil || len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("fetch by the healthy worker: %v %v", got, err)
	}
	if _, err := s.AckOwned(ctx, j.ID, "zombie", json.RawMessage(`"late"`)); code(err) != ojserr.Conflict {
		t.Fatalf("the zombie's late ACK: %v", err)
	}
	if _, err := s.NackOwned(ctx, j.ID, "zombie", lifecycle.ErrorInput{Message: "late"}); code(err) != ojserr.Conflict {
		t.Fatalf("the zombie's late FAIL: %v", err)
	}
	if cur, _ := s.Info(ctx, j.ID); cur.State != job.Active || cur.WorkerID != "healthy" || cur.Attempt != 2 {
		t.Fatalf("the late answers changed the job: %+v", cur)
	}
	done, err := s.AckOwned(ctx, j.ID, "healthy", json.RawMessage(`"ok"`))
	if err != nil || done.State != job.Completed || done.Attempt != 2 || string(done.Result) != `"ok"` {
		t.Fatalf("the holder's ACK: %+v %v", done, err)
	}
	// Without a worker id the binding's ACK is unchanged: any active attempt.
	k, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"own-q2"}}`))
	if _, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"own-q2"}, WorkerID: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AckOwned(ctx, k.ID, "", nil); err != nil {
		t.Fatalf("ACK without worker_id: %v", err)
	}
	// Fetched without a worker id, acknowledged with one: nobody else holds it.
	m, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"own-q3"}}`))
	if _, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"own-q3"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AckOwned(ctx, m.ID, "w-late-named", nil); err != nil {
		t.Fatalf("ACK with a worker_id of an anonymously fetched job: %v", err)
	}
}
