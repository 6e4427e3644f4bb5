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
	if _, err := s.AckOwned(ctx, j.ID, "zombie", 0, json.RawMessage(`"late"`)); code(err) != ojserr.Conflict {
		t.Fatalf("the zombie's late ACK: %v", err)
	}
	if _, err := s.NackOwned(ctx, j.ID, "zombie", 0, lifecycle.ErrorInput{Message: "late"}); code(err) != ojserr.Conflict {
		t.Fatalf("the zombie's late FAIL: %v", err)
	}
	if cur, _ := s.Info(ctx, j.ID); cur.State != job.Active || cur.WorkerID != "healthy" || cur.Attempt != 2 {
		t.Fatalf("the late answers changed the job: %+v", cur)
	}
	done, err := s.AckOwned(ctx, j.ID, "healthy", 0, json.RawMessage(`"ok"`))
	if err != nil || done.State != job.Completed || done.Attempt != 2 || string(done.Result) != `"ok"` {
		t.Fatalf("the holder's ACK: %+v %v", done, err)
	}
	// Without a worker id the binding's ACK is unchanged: any active attempt.
	k, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"own-q2"}}`))
	if _, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"own-q2"}, WorkerID: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AckOwned(ctx, k.ID, "", 0, nil); err != nil {
		t.Fatalf("ACK without worker_id: %v", err)
	}
	// Fetched without a worker id, acknowledged with one: nobody else holds it.
	m, _ := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"own-q3"}}`))
	if _, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"own-q3"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AckOwned(ctx, m.ID, "w-late-named", 0, nil); err != nil {
		t.Fatalf("ACK with a worker_id of an anonymously fetched job: %v", err)
	}
}

// One worker id shared by a process's threads cannot tell its attempts
// apart: an ACK or FAIL that names its attempt (the FETCH answer's) is
// refused once that attempt is over, even by the same worker id, and
// leaves the next attempt alone.
func TestAnAckPinnedToItsAttemptCannotFinishTheNext(t *testing.T) {
	t.Parallel()
	s, c := newService(t)
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"pin-q","retry":{"max_attempts":5}}}`))
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"pin-q"}, WorkerID: "proc-1", Visibility: time.Second})
	if err != nil || len(first) != 1 || first[0].Attempt != 1 {
		t.Fatalf("first fetch: %v %v", first, err)
	}
	c.Add(2 * time.Second) // thread 1 stalls past its lease; thread 2 fetches the job again
	second, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"pin-q"}, WorkerID: "proc-1", Visibility: time.Minute})
	if err != nil || len(second) != 1 || second[0].Attempt != 2 {
		t.Fatalf("second fetch: %v %v", second, err)
	}
	if _, err := s.AckOwned(ctx, j.ID, "proc-1", 1, json.RawMessage(`"late"`)); code(err) != ojserr.Conflict {
		t.Fatalf("attempt 1's late ACK: %v", err)
	}
	if _, err := s.NackOwned(ctx, j.ID, "proc-1", 1, lifecycle.ErrorInput{Message: "late"}); code(err) != ojserr.Conflict {
		t.Fatalf("attempt 1's late FAIL: %v", err)
	}
	if cur, _ := s.Info(ctx, j.ID); cur.State != job.Active || cur.Attempt != 2 || len(cur.Errors) != 1 {
		t.Fatalf("the late answers changed attempt 2: %+v", cur)
	}
	done, err := s.AckOwned(ctx, j.ID, "proc-1", 2, json.RawMessage(`"ok"`))
	if err != nil || done.State != job.Completed || string(done.Result) != `"ok"` {
		t.Fatalf("attempt 2's ACK: %+v %v", done, err)
	}
}

// A job cancelled while a worker runs it (ojs-core.md 7.6: active ->
// cancelled) is named in that worker's next heartbeat answer, so that it
// can stop it; its lease is not extended.
func TestHeartbeatNamesTheWorkersJobsCancelledMeanwhile(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	var ids []string
	for range 2 {
		j, err := s.Push(ctx, []byte(`{"type":"a.b","args":[],"options":{"queue":"hbc-q"}}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"hbc-q"}, WorkerID: "w", Count: 2}); err != nil || len(got) != 2 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	if _, _, err := s.Cancel(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	hb, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w", JobIDs: ids})
	if err != nil || len(hb.Extended) != 1 || hb.Extended[0] != ids[0] || len(hb.Cancelled) != 1 || hb.Cancelled[0] != ids[1] {
		t.Fatalf("heartbeat: %+v %v, want %s extended and %s cancelled", hb, err, ids[0], ids[1])
	}
}
