package wfstore

import (
	"context"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
)

// sleepCtx waits d, or returns ctx's error as soon as it is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if !ctxsleep.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}
