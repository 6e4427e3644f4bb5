package engine

import (
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
)

// DeadLetterSubject is the subject of dead_letter.pruned events (they
// concern the dead letter queue as a whole, not one job).
const DeadLetterSubject = "dead-letter"

// prunedEvents reports a finished pruning run that removed jobs
// (ojs-dead-letter.md 8.1: one dead_letter.pruned with the count).
func prunedEvents(src string, old, cur *deadletter.PruneRun, at time.Time) []events.Event {
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
	return []events.Event{events.New(src, events.DeadLetterPruned, DeadLetterSubject, at, cur.LastRun, data, itoa(cur.LastRun))}
}

// workerEvents derives the worker events of ojs-events.md 4.3 from the
// worker registry item each heartbeat writes: worker.started on the first
// heartbeat, worker.heartbeat on every one, worker.quiet when the worker
// reports quiet and worker.stopped when it reports terminate (its final
// heartbeat, ojs-graceful-shutdown.md 5.3). An operator's directive alone
// is not an event: the worker reports its new state on its next heartbeat.
func workerEvents(src string, old, cur *queue.WorkerInfo, at time.Time) []events.Event {
	if cur.LastHeartbeatAt == "" || (old != nil && old.LastHeartbeatAt == cur.LastHeartbeatAt) {
		return nil
	}
	if t, err := time.Parse(time.RFC3339Nano, cur.LastHeartbeatAt); err == nil {
		at = t
	}
	queues := cur.Queues
	if queues == nil {
		queues = []string{}
	}
	var out []events.Event
	add := func(typ string, data map[string]any) {
		data["worker_id"] = cur.ID
		out = append(out, events.New(src, typ, cur.ID, at, int64(len(out)), data, cur.LastHeartbeatAt))
	}
	var concurrency any
	if cur.Concurrency > 0 {
		concurrency = cur.Concurrency
	}
	if old == nil || old.LastHeartbeatAt == "" {
		add(events.WorkerStarted, map[string]any{"queues": queues, "concurrency": concurrency})
	}
	add(events.WorkerHeartbeat, map[string]any{"active_jobs": cur.ActiveJobs, "queues": queues})
	prev := "running"
	if old != nil && old.State != "" {
		prev = old.State
	}
	switch {
	case cur.State == "quiet" && prev != "quiet" && prev != "terminate":
		add(events.WorkerQuiet, map[string]any{"active_jobs": cur.ActiveJobs})
	case cur.State == "terminate" && prev != "terminate":
		d := map[string]any{"reason": "shutdown"}
		if first, err := time.Parse(time.RFC3339Nano, cur.FirstSeenAt); err == nil && !at.Before(first) {
			d["uptime_ms"] = at.Sub(first).Milliseconds()
		}
		add(events.WorkerStopped, d)
	}
	return out
}
