package wfstore

import (
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// Placeholder is j put as a stopped workflow's cancel puts it where j may
// still be written by a writer that does not check the workflow (a
// chain's next job, a graph's marked steps, a creation's first jobs):
// cancelled at now, never enqueued, so the writer's conditional put fails.
func Placeholder(j *job.Job, now time.Time) *job.Job {
	c := *j
	c.State, c.CancelledAt, c.EnqueuedAt, c.ScheduledAt = job.Cancelled, &now, nil, nil
	return &c
}

// IsPlaceholder reports whether j is a cancel's placeholder (Placeholder):
// cancelled without ever being enqueued, scheduled or attempted. A view
// shows its step as having no job; a retry removes it rather than running
// it.
func IsPlaceholder(j *job.Job) bool {
	return j.State == job.Cancelled && j.Attempt == 0 && j.EnqueuedAt == nil && j.ScheduledAt == nil
}
