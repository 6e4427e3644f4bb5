package metrics_test

import (
	"os"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/engine"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/metrics"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// One stream batch that completed a job on queue "email" becomes one EMF
// line on stdout, which CloudWatch Logs turns into metrics.
func ExampleEmitter() {
	enq := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	start, done := enq.Add(40*time.Millisecond), enq.Add(240*time.Millisecond)
	active := &job.Job{ID: "j1", Queue: "email", State: job.Active, EnqueuedAt: &enq, StartedAt: &start}
	completed := *active
	completed.State, completed.CompletedAt = job.Completed, &done

	e := &metrics.Emitter{W: os.Stdout, Environment: "prod", Now: func() time.Time { return done }}
	_ = e.Emit([]engine.Change{{Old: &store.Item{Job: active}, New: &store.Item{Job: &completed}}})
	// Output:
	// {"Environment":"prod","JobDuration":[200],"JobLatency":[240],"JobsCompleted":1,"Queue":"email","_aws":{"CloudWatchMetrics":[{"Dimensions":[["Environment","Queue"],["Environment"]],"Metrics":[{"Name":"JobsCompleted","Unit":"Count"},{"Name":"JobDuration","Unit":"Milliseconds"},{"Name":"JobLatency","Unit":"Milliseconds"}],"Namespace":"OJS"}],"Timestamp":1782907200240},"level":"INFO","msg":"job metrics"}
}
