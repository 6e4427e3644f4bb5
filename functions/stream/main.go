// Command stream is the DynamoDB Streams function: table changes -> SQS
// delivery of push-mode jobs (and, later, workflow steps and events).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/ojs-aws/ojs-serverless/pkg/app"
	"github.com/ojs-aws/ojs-serverless/pkg/edge/streamevent"
	"github.com/ojs-aws/ojs-serverless/pkg/engine"
)

func main() {
	a, err := app.Load(context.Background())
	app.Must(err)
	e := &engine.Engine{Sender: a.Dispatcher, Workflows: a.Workflows, Logger: a.Logger}
	lambda.Start(streamevent.Handler(e, a.Logger))
}
