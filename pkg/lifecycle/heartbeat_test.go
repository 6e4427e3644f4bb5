package lifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// A heartbeat moves a lease only by at least a tenth of its length: a
// worker beating every 5 s (the SDKs' interval) under a 100 s lease
// writes the job once every 10 s, not at every beat; each beat is still
// answered as extended, and the lease never ends less than nine tenths
// of its length after a beat.
func TestAHeartbeatMovesALeaseOnlyByATenthOfItsLength(t *testing.T) {
	t.Parallel()
	s, c := newService(t)
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"long.job","args":[],"options":{"queue":"beat","visibility_timeout_ms":100000}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"beat"}, WorkerID: "w"}); err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	lease := func() time.Time {
		t.Helper()
		cur, err := s.Info(ctx, j.ID)
		if err != nil || cur.LeaseUntil == nil {
			t.Fatalf("info: %+v %v", cur, err)
		}
		return *cur.LeaseUntil
	}
	moves := 0
	last := lease()
	for beat := 1; beat <= 6; beat++ {
		c.Add(5 * time.Second)
		hb, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w", JobIDs: []string{j.ID}})
		if err != nil || len(hb.Extended) != 1 {
			t.Fatalf("beat %d: %+v %v, want the job extended", beat, hb, err)
		}
		now := lease()
		if now != last {
			moves++
			if want := c.Now().Add(100 * time.Second); !now.Equal(want) {
				t.Fatalf("beat %d moved the lease to %v, want %v (the full length from now)", beat, now, want)
			}
		}
		if left := now.Sub(c.Now()); left < 90*time.Second {
			t.Fatalf("beat %d left the lease %v, under nine tenths of its length", beat, left)
		}
		last = now
	}
	if moves != 3 { // at 10, 20 and 30 s
		t.Fatalf("the lease moved %d times in 30 s of beats every 5 s, want 3", moves)
	}
	// A heartbeat asking for a longer lease moves it at once; one asking
	// for about the lease it has does not.
	before := lease()
	if hb, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w", JobIDs: []string{j.ID}, Visibility: 100 * time.Second}); err != nil || len(hb.Extended) != 1 {
		t.Fatalf("beat with the same visibility: %+v %v", hb, err)
	}
	if lease() != before {
		t.Fatalf("a beat for the lease it has moved it")
	}
	if hb, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w", JobIDs: []string{j.ID}, Visibility: 500 * time.Second}); err != nil || len(hb.Extended) != 1 {
		t.Fatalf("beat with a longer visibility: %+v %v", hb, err)
	}
	if want := c.Now().Add(500 * time.Second); !lease().Equal(want) {
		t.Fatalf("lease after a longer visibility: %v, want %v", lease(), want)
	}
	// Another worker's beat is still refused, and an attempt over stays over.
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "other", JobIDs: []string{j.ID}}); len(hb.Extended) != 0 {
		t.Fatal("another worker's heartbeat was answered extended")
	}
	c.Add(501 * time.Second)
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w", JobIDs: []string{j.ID}}); len(hb.Extended) != 0 {
		t.Fatal("a heartbeat after the lease ended was answered extended")
	}
}

// A heartbeat naming many jobs extends them at once and answers them in
// the order the worker named them, the cancelled ones named apart.
func TestAHeartbeatAnswersItsJobsInOrder(t *testing.T) {
	t.Parallel()
	s, c := newService(t)
	ctx := context.Background()
	for i := range 25 {
		if _, err := s.Push(ctx, []byte(fmt.Sprintf(`{"type":"beat.job","args":[%d],"options":{"queue":"beats","timeout_ms":7200000}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"beats"}, Count: 25, WorkerID: "w"})
	if err != nil || len(got) != 25 {
		t.Fatalf("fetch: %d %v", len(got), err)
	}
	var ids []string
	for i := len(got) - 1; i >= 0; i-- {
		ids = append(ids, got[i].ID)
	}
	if _, _, err := s.Cancel(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	c.Add(10 * time.Minute) // past a tenth of the 30 min lease: every lease moves
	hb, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w", JobIDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]string{}, ids[:3]...), ids[4:]...)
	if !slices.Equal(hb.Extended, want) || !slices.Equal(hb.Cancelled, []string{ids[3]}) {
		t.Fatalf("heartbeat: extended %v cancelled %v; want %v and %v", hb.Extended, hb.Cancelled, want, ids[3:4])
	}
	for _, id := range want {
		if j, _ := s.Info(ctx, id); j.LeaseUntil == nil || !j.LeaseUntil.Equal(c.Now().Add(30*time.Minute)) {
			t.Fatalf("job %s lease %v, want the full length from the beat", id, j.LeaseUntil)
		}
	}
}

// A lease that ends at the attempt's deadline (a 30 min lease under the
// default 30 min timeout) cannot go further: a heartbeat leaves it with
// one refused write (not a write and a clamp back to the deadline), and
// answers the job extended, until the lease's end.
func TestAHeartbeatLeavesALeaseAtTheDeadline(t *testing.T) {
	t.Parallel()
	s, db, c := newCountedService(t)
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"beat.job","args":[],"options":{"queue":"deadline-beat"}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"deadline-beat"}, WorkerID: "w"})
	if err != nil || len(got) != 1 || got[0].LeaseUntil == nil || got[0].Deadline == nil || !got[0].LeaseUntil.Equal(*got[0].Deadline) {
		t.Fatalf("fetch: %+v %v, want a lease ending at the deadline", got, err)
	}
	end := *got[0].LeaseUntil
	for _, after := range []time.Duration{5 * time.Minute, 20 * time.Minute} {
		c.Add(after)
		before := db.n.Load()
		hb, err := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w", JobIDs: []string{j.ID}})
		if err != nil || len(hb.Extended) != 1 {
			t.Fatalf("beat: %+v %v", hb, err)
		}
		if n := db.n.Load() - before; n != 2 {
			t.Fatalf("a beat made %d DynamoDB requests, want 2 (the worker's item, the job's refused extension)", n)
		}
		if cur, _ := s.Info(ctx, j.ID); cur.LeaseUntil == nil || !cur.LeaseUntil.Equal(end) {
			t.Fatalf("lease after a beat: %v, want it at the deadline %v", cur.LeaseUntil, end)
		}
	}
	c.Add(6 * time.Minute) // past the deadline
	if hb, _ := s.Heartbeat(ctx, lifecycle.HeartbeatRequest{WorkerID: "w", JobIDs: []string{j.ID}}); len(hb.Extended) != 0 {
		t.Fatal("a heartbeat after the deadline was answered extended")
	}
}
