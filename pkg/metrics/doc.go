// Package metrics turns the job changes the stream function already
// processes into CloudWatch metrics, written as log lines in the embedded
// metric format (EMF): CloudWatch Logs extracts the metrics from the
// function's log group, so no request path changes and no PutMetricData
// call is made.
//
// Metrics, all in namespace Namespace with the dimension sets
// {Environment, Queue} and {Environment}:
//
//	JobsEnqueued   Count         jobs created (PUSH, batch, workflow steps, cron), in any first state
//	JobsStarted    Count         attempts started (available -> active)
//	JobsCompleted  Count         jobs completed
//	JobsFailed     Count         attempts failed (active -> retryable, discarded, or available after a lost lease)
//	JobsDiscarded  Count         jobs discarded (the dead letter queue), whatever the cause
//	JobWaitTime    Milliseconds  per started attempt: started_at - enqueued_at (time waiting in the queue)
//	JobDuration    Milliseconds  per completed job: completed_at - started_at (the last attempt's run time)
//	JobLatency     Milliseconds  per completed job: completed_at - enqueued_at (the step latency: ready to done, last attempt)
//
// Counts are as exact as the stream's delivery: DynamoDB Streams delivers
// each record once unless a batch is retried; the local runtime's
// duplicate-delivery mode counts twice.
package metrics
