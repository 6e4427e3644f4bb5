package store

import (
	"testing"
	"time"
)

// The pause before another try of a conflicted transaction is jittered
// (tries do not collide again in lockstep), grows with the tries, and
// stays bounded so a request's retries end in about 2.5 s at most.
func TestConflictBackoff(t *testing.T) {
	var total time.Duration
	for n := 0; n < ConflictTries; n++ {
		ceiling := 20 * time.Millisecond << min(n, 5)
		seen := map[time.Duration]bool{}
		for range 200 {
			d := ConflictBackoff(n)
			if d <= 0 || d > ceiling+time.Millisecond {
				t.Fatalf("try %d: pause %v outside (0, %v]", n, d, ceiling+time.Millisecond)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Fatalf("try %d: only %d distinct pauses in 200: not jittered", n, len(seen))
		}
		total += ceiling + time.Millisecond
	}
	if total > 3*time.Second {
		t.Fatalf("worst case of all retries %v, want at most 3 s", total)
	}
}
