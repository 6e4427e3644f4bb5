// Command worker is the push-mode worker function: SQS -> job handlers.
// Register your own handlers here in place of (or beside) the examples.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/ojs-aws/ojs-serverless/pkg/app"
	"github.com/ojs-aws/ojs-serverless/pkg/edge/sqsevent"
	"github.com/ojs-aws/ojs-serverless/pkg/examplejobs"
	"github.com/ojs-aws/ojs-serverless/pkg/webhook"
	"github.com/ojs-aws/ojs-serverless/pkg/worker"
)

func main() {
	a, err := app.Load(context.Background())
	app.Must(err)
	mux := worker.NewMux()
	app.Must(examplejobs.Register(mux))
	// Webhook deliveries (queue ojs.webhooks): keep this in a worker
	// function of your own.
	app.Must((&webhook.Deliverer{Subs: a.Webhooks}).Register(mux))
	p := &worker.Processor{Service: a.Service, Items: a.Store, Mux: mux, Sender: a.Dispatcher(), Logger: a.Logger}
	lambda.Start(sqsevent.Handler(p))
}
