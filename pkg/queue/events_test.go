package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
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
	first := &WorkerInfo{ID: "w1", State: "running", Queues: []string{"email"}, ActiveJobs: 0, Concurrency: 10,
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
		old, cur *WorkerInfo
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
			evs := WorkerEvents("ojs://test", c.old, c.cur, at)
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
			if again := WorkerEvents("ojs://test", c.old, c.cur, at); len(evs) > 0 && again[len(again)-1].ID != evs[len(evs)-1].ID {
				t.Error("the same change derived different ids")
			}
		})
	}
}
