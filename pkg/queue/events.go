package queue

import (
	"strconv"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
)

// The events of the queue and worker items, derived from their changes in
// the table's stream (the stream function's engine calls these).

// Events derives, from a change of a queue's registry item, the events of
// a queue being paused or resumed and of enqueues its bound refused.
func Events(src string, old, cur *QueueInfo, at time.Time) []events.Event {
	var out []events.Event
	if refused := cur.Rejected - old.rejected(); refused > 0 {
		data := map[string]any{"queue": cur.Name, "depth": cur.RejectedDepth, "rejected": refused}
		if b := cur.Bound(); b != nil {
			data["bound"] = b.MaxDepth
		}
		out = append(out, events.New(src, events.BackpressureRejected, cur.Name, at, cur.Version, data, "bp"+strconv.FormatInt(cur.Version, 10)))
	}
	was := old != nil && old.Paused
	if was == cur.Paused {
		return out
	}
	typ, data := events.QueueResumed, map[string]any{"queue": cur.Name, "resumed_by": "api"}
	if cur.Paused {
		typ, data = events.QueuePaused, map[string]any{"queue": cur.Name, "paused_by": "api"}
		if t, err := time.Parse(time.RFC3339Nano, cur.PausedAt); err == nil {
			at = t
		}
	} else if t, err := time.Parse(time.RFC3339Nano, cur.Redeliver); err == nil {
		at = t // the resume time
	}
	return append(out, events.New(src, typ, cur.Name, at, cur.Version, data, strconv.FormatInt(cur.Version, 10)))
}

// rejected is the refusals an item (nil: none) had counted.
func (i *QueueInfo) rejected() int64 {
	if i == nil {
		return 0
	}
	return i.Rejected
}

// WorkerEvents derives the worker events of ojs-events.md 4.3 from the
// worker registry item each heartbeat writes: worker.started on the first
// heartbeat, worker.heartbeat on every one, worker.quiet when the worker
// reports quiet and worker.stopped when it reports terminate (its final
// heartbeat, ojs-graceful-shutdown.md 5.3). An operator's directive alone
// is not an event: the worker reports its new state on its next heartbeat.
func WorkerEvents(src string, old, cur *WorkerInfo, at time.Time) []events.Event {
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
