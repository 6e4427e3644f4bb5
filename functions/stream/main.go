// Command stream is the DynamoDB Streams function: table changes -> SQS
// delivery of push-mode jobs, lifecycle events and workflow progress. It
// also writes the lifecycle metrics of each batch as EMF log lines.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/ojs-aws/ojs-serverless/pkg/app"
	"github.com/ojs-aws/ojs-serverless/pkg/edge/streamevent"
	"github.com/ojs-aws/ojs-serverless/pkg/eventbus"
	"github.com/ojs-aws/ojs-serverless/pkg/metrics"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func main() {
	a, err := app.Load(context.Background())
	app.Must(err)
	pub, err := eventbus.FromEnv(a.AWS)
	app.Must(err)
	e := a.StreamEngine()
	if pub != nil {
		e.Publisher = pub
	}
	emf := &metrics.Emitter{W: os.Stdout, Environment: os.Getenv(topology.EnvName)}
	lambda.Start(streamevent.Handler(metrics.Wrap(e, emf), a.Logger))
}
