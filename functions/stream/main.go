// Command stream is the DynamoDB Streams function: table changes -> SQS
// delivery of push-mode jobs, lifecycle events and workflow progress.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/ojs-aws/ojs-serverless/pkg/app"
	"github.com/ojs-aws/ojs-serverless/pkg/edge/streamevent"
)

func main() {
	a, err := app.Load(context.Background())
	app.Must(err)
	lambda.Start(streamevent.Handler(a.StreamEngine(), a.Logger))
}
