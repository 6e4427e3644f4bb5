package cron

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// Events derives, from a change of a schedule's item, the event of its
// firing (cron.triggered) or skipping an occurrence (cron.skipped), as the
// sweeper recorded it on the schedule.
func Events(src string, old, cur *Info, at time.Time) []events.Event {
	ev := cur.Event
	if ev == nil || (old != nil && old.Event != nil && old.Event.Seq >= ev.Seq) {
		return nil
	}
	if t, err := time.Parse(time.RFC3339Nano, ev.ActualTime); err == nil {
		at = t
	}
	data := map[string]any{"cron_name": cur.Name, "cron_expression": cur.Expression, "timezone": cur.Timezone,
		"scheduled_time": ev.ScheduledTime}
	typ := events.CronTriggered
	if ev.Type == "skipped" {
		typ = events.CronSkipped
		data["reason"] = ev.Reason
		if ev.ActiveJobID != "" {
			data["active_job_id"] = ev.ActiveJobID
		}
	} else {
		data["job_id"], data["run_count"], data["actual_time"] = ev.JobID, cur.RunCount, ev.ActualTime
		var t struct {
			Type    string `json:"type"`
			Options struct {
				Queue string `json:"queue"`
			} `json:"options"`
		}
		if json.Unmarshal([]byte(cur.Template), &t) == nil {
			data["job_type"] = t.Type
			data["queue"] = t.Options.Queue
			if t.Options.Queue == "" {
				data["queue"] = job.DefaultQueue
			}
		}
	}
	return []events.Event{events.New(src, typ, cur.Name, at, ev.Seq, data, cur.CreatedAt, strconv.FormatInt(ev.Seq, 10))}
}
