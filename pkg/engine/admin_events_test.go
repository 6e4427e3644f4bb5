package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
)

func eventTypes(evs []events.Event) string {
	var ts []string
	for _, e := range evs {
		ts = append(ts, e.Type)
	}
	return strings.Join(ts, ",")
}

// A worker's heartbeats become worker.started (first), worker.heartbeat
// (each), worker.quiet and worker.stopped (on the reported state changes);
// a directive written without a heartbeat, or a duplicated record, adds
// nothing new.
func TestWorkerEvents(t *testing.T) {
	at := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	first := &queue.WorkerInfo{ID: "w1", State: "running", Queues: []string{"email"}, ActiveJobs: 0, Concurrency: 10,
		FirstSeenAt: "2026-11-21T09:00:00Z", LastHeartbeatAt: "2026-11-21T09:00:00Z"}
	beat := *first
	beat.ActiveJobs, beat.LastHeartbeatAt = 3, "2026-11-21T09:00:05Z"
	directive := beat
	directive.Directive = "quiet"
	quiet := directive
	quiet.State, quiet.LastHeartbeatAt = "quiet", "2026-11-21T09:00:10Z"
	stopped := quiet
	stopped.State, stopped.ActiveJobs, stopped.LastHeartbeatAt = "terminate", 0, "2026-11-21T09:01:40Z"
	for _, c := range []struct {
		name     string
		old, cur *queue.WorkerInfo
		want     string
	}{
		{"first heartbeat", nil, first, "worker.started,worker.heartbeat"},
		{"heartbeat", first, &beat, "worker.heartbeat"},
		{"directive only", &beat, &directive, ""},
		{"duplicate record", &beat, &beat, ""},
		{"reports quiet", &directive, &quiet, "worker.heartbeat,worker.quiet"},
		{"final heartbeat", &quiet, &stopped, "worker.heartbeat,worker.stopped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			evs := workerEvents("ojs://test", c.old, c.cur, at)
			if got := eventTypes(evs); got != c.want {
				t.Fatalf("events %q, want %q", got, c.want)
			}
			for _, e := range evs {
				if e.Subject != "w1" || e.Data["worker_id"] != "w1" || e.Time != c.cur.LastHeartbeatAt[:19]+".000Z" {
					t.Errorf("envelope %+v", e)
				}
				switch e.Type {
				case events.WorkerStarted:
					if e.Data["concurrency"] != 10 || len(e.Data["queues"].([]string)) != 1 {
						t.Errorf("started %v", e.Data)
					}
				case events.WorkerHeartbeat:
					if e.Data["active_jobs"] != c.cur.ActiveJobs {
						t.Errorf("heartbeat %v", e.Data)
					}
				case events.WorkerQuiet:
					if e.Data["active_jobs"] != 3 {
						t.Errorf("quiet %v", e.Data)
					}
				case events.WorkerStopped:
					if e.Data["reason"] != "shutdown" || e.Data["uptime_ms"] != int64(100000) {
						t.Errorf("stopped %v", e.Data)
					}
				}
			}
			if again := workerEvents("ojs://test", c.old, c.cur, at); len(evs) > 0 && again[len(again)-1].ID != evs[len(evs)-1].ID {
				t.Error("the same change derived different ids")
			}
		})
	}
}

// A finished pruning run that removed jobs is one dead_letter.pruned; a
// claim (run started, not finished), an empty run or a duplicate is none.
func TestPrunedEvents(t *testing.T) {
	at := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	started := &deadletter.PruneRun{Run: 4, LastRun: 3, Pruned: 2}
	done := &deadletter.PruneRun{Run: 4, LastRun: 4, Pruned: 5, ByAge: 1, ByCount: 4, ByQueue: map[string]int{"a": 5},
		FinishedAt: at.Add(time.Second).UnixMilli()}
	empty := &deadletter.PruneRun{Run: 5, LastRun: 5}
	if evs := prunedEvents("ojs://test", &deadletter.PruneRun{Run: 3, LastRun: 3, Pruned: 2}, started, at); len(evs) != 0 {
		t.Fatalf("claim: %v", evs)
	}
	evs := prunedEvents("ojs://test", started, done, at)
	if len(evs) != 1 || evs[0].Type != events.DeadLetterPruned || evs[0].Data["count"] != 5 || evs[0].Data["by_count"] != 4 ||
		evs[0].Subject != DeadLetterSubject || evs[0].Time != "2026-11-21T09:00:01.000Z" {
		t.Fatalf("done: %+v", evs)
	}
	if evs := prunedEvents("ojs://test", done, done, at); len(evs) != 0 {
		t.Fatalf("duplicate: %v", evs)
	}
	if evs := prunedEvents("ojs://test", done, empty, at); len(evs) != 0 {
		t.Fatalf("empty run: %v", evs)
	}
}
