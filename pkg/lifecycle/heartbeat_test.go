package lifecycle_test

import (
	"context"
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
	plain := s
	ctx := context.Background()
	j, err := plain.Push(ctx, []byte(`{"type":"long.job","args":[],"options":{"queue":"beat","visibility_timeout_ms":100000}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := plain.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"beat"}, WorkerID: "w"}); err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	lease := func() time.Time {
		t.Helper()
		cur, err := plain.Info(ctx, j.ID)
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
