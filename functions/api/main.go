// Command api is the API function: API Gateway HTTP API -> the OJS HTTP
// binding.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/ojs-aws/ojs-serverless/pkg/app"
	"github.com/ojs-aws/ojs-serverless/pkg/edge/apigw"
	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
)

func main() {
	a, err := app.Load(context.Background())
	app.Must(err)
	srv := httpapi.New(a.Service, a.Store, a.Workflows, httpapi.Config{AuthToken: a.AuthToken, Logger: a.Logger, Crons: a.Crons})
	lambda.Start(apigw.Handler(srv))
}
