package deadletter

import (
	"strconv"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
)

// Subject is the subject of dead_letter.pruned events (they concern the
// dead letter queue as a whole, not one job).
const Subject = "dead-letter"

// PrunedEvents derives, from a change of the pruning state item, the event
// of a finished pruning run that removed jobs (ojs-dead-letter.md 8.1: one
// dead_letter.pruned with the count).
func PrunedEvents(src string, old, cur *PruneRun, at time.Time) []events.Event {
	if cur.LastRun == 0 || cur.Pruned == 0 || (old != nil && old.LastRun == cur.LastRun) {
		return nil
	}
	if cur.FinishedAt > 0 {
		at = time.UnixMilli(cur.FinishedAt).UTC()
	}
	byQueue := cur.ByQueue
	if byQueue == nil {
		byQueue = map[string]int{}
	}
	data := map[string]any{"count": cur.Pruned, "by_age": cur.ByAge, "by_count": cur.ByCount, "by_queue": byQueue, "run": cur.LastRun}
	return []events.Event{events.New(src, events.DeadLetterPruned, Subject, at, cur.LastRun, data, strconv.FormatInt(cur.LastRun, 10))}
}
