package deadletter

import (
	"context"
	"time"
)

// SetMaxBulkBytes sets the bytes of dead letter jobs one bulk call holds
// until the returned func restores it.
func SetMaxBulkBytes(n int) func() {
	old := maxBulkBytes
	maxBulkBytes = n
	return func() { maxBulkBytes = old }
}

// Ref locates one job in a queue's dead letter index.
type Ref = ref

// OldestRefs returns up to limit of a queue's dead letter jobs, oldest
// first, as the pruner reads them.
func (s *Service) OldestRefs(ctx context.Context, queue string, before *time.Time, limit int) ([]Ref, error) {
	var until time.Time
	if before != nil {
		until = *before
	}
	return s.tb.oldest(ctx, queue, until, limit)
}

// PruneRef removes one dead letter job as the pruner does.
func (s *Service) PruneRef(ctx context.Context, r Ref, now time.Time) (bool, error) {
	return s.tb.prune(ctx, r, now)
}
