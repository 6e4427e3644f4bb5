// Package ctxsleep waits for a duration unless a context ends first.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d and reports true, or reports false as soon as ctx is done.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Wait waits d and returns nil, or returns ctx's error as soon as ctx is
// done.
func Wait(ctx context.Context, d time.Duration) error {
	if !Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}
