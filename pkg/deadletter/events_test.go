package deadletter

import (
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
)

// A finished pruning run that removed jobs is one dead_letter.pruned; a
// claim (run started, not finished), an empty run or a duplicate is none.
func TestPrunedEvents(t *testing.T) {
	at := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	started := &PruneRun{Run: 4, LastRun: 3, Pruned: 2}
	done := &PruneRun{Run: 4, LastRun: 4, Pruned: 5, ByAge: 1, ByCount: 4, ByQueue: map[string]int{"a": 5},
		FinishedAt: at.Add(time.Second).UnixMilli()}
	empty := &PruneRun{Run: 5, LastRun: 5}
	if evs := PrunedEvents("ojs://test", &PruneRun{Run: 3, LastRun: 3, Pruned: 2}, started, at); len(evs) != 0 {
		t.Fatalf("claim: %v", evs)
	}
	evs := PrunedEvents("ojs://test", started, done, at)
	if len(evs) != 1 || evs[0].Type != events.DeadLetterPruned || evs[0].Data["count"] != 5 || evs[0].Data["by_count"] != 4 ||
		evs[0].Subject != Subject || evs[0].Time != "2026-11-21T09:00:01.000Z" {
		t.Fatalf("done: %+v", evs)
	}
	if evs := PrunedEvents("ojs://test", done, done, at); len(evs) != 0 {
		t.Fatalf("duplicate: %v", evs)
	}
	if evs := PrunedEvents("ojs://test", done, empty, at); len(evs) != 0 {
		t.Fatalf("empty run: %v", evs)
	}
}
