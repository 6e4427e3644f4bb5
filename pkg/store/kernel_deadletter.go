package store

import (
	"context"
	"time"
)

// The table kernel's part for pkg/deadletter, which owns the dead letter
// queue's persistence: a discarded job stays a job item (its dead letter
// entry is its ready index entry, written by the Discard and Expire
// transitions), so the dead letter package names jobs and their index
// entries with these.

// DeadIndexPK is the ready index partition key of queue's discarded jobs.
func DeadIndexPK(queue string) string { return deadPrefix + queue }

// DeadSortKey is the ready index sort key of a job id discarded at at:
// the discard time in milliseconds, zero-padded, then the id, so that
// keys compare by discard time as strings. With id empty it is the bound
// of the jobs discarded before at.
func DeadSortKey(at time.Time, id string) string { return deadSortKey(at, id) }

// WholeJobs replaces index items (which do not project the payloads) by
// the jobs read by key, in the same order (BatchGetItem, 100 keys a
// request, when the client has it; else one GetItem a job); a job deleted
// since the index was read is left out.
func (s *Store) WholeJobs(ctx context.Context, items []Item) ([]Item, error) {
	return s.whole(ctx, items)
}

// TrimToBytes keeps items from the start while their FetchBytes stay
// within budget (the first always); trimmed reports whether it cut.
func TrimToBytes(items []Item, budget int) (kept []Item, trimmed bool) {
	return trimToBytes(items, budget)
}
