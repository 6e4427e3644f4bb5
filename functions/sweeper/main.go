// Command sweeper is the scheduled repair function: due jobs, expired
// leases and unclaimed push-mode jobs.
package main

import (
	"context"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/ojs-aws/ojs-serverless/pkg/app"
	"github.com/ojs-aws/ojs-serverless/pkg/sweeper"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func main() {
	a, err := app.Load(context.Background())
	app.Must(err)
	tick, _ := time.ParseDuration(os.Getenv(topology.EnvSweepTick))
	s := &sweeper.Sweeper{Service: a.Service, Store: a.Store, Queues: a.Queues, Sender: a.Dispatcher(), PushQueues: a.PushQueues, Workflows: a.Workflows, Crons: a.Crons,
		DeadLetter: a.DeadLetter, Logger: a.Logger}
	lambda.Start(s.Handler(tick))
}
