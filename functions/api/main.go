// Command api is the API function: API Gateway HTTP API -> the OJS HTTP
// binding.
package main

import (
	"context"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/ojs-aws/ojs-serverless/pkg/app"
	"github.com/ojs-aws/ojs-serverless/pkg/checkpoint"
	"github.com/ojs-aws/ojs-serverless/pkg/edge/apigw"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func main() {
	a, err := app.Load(context.Background())
	app.Must(err)
	tokens, err := httpapi.ParseTokens(os.Getenv(topology.EnvAuthTokens))
	app.Must(err)
	srv := httpapi.New(httpapi.Services{Producer: a.Service, Worker: a.Service, Queues: a.QueueService, Progress: a.Service}, a.Store, a.Workflows, httpapi.Config{AuthToken: a.AuthToken, Tokens: tokens, Logger: a.Logger, Crons: a.Crons, Admin: a.Admin, Console: a.Console, FetchWait: a.FetchWait, Region: a.Region,
		Events: a.Events, DeadLetter: a.DeadLetter, Schemas: a.Schemas, Webhooks: a.Webhooks, Tenants: a.QueueService.Tenants(),
		Checkpoints: checkpoint.New(a.Store, nil)})
	h := apigw.Handler(srv, os.Getenv(topology.EnvTenantClaim))
	lambda.Start(func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		res, err := h(ctx, ev)
		if err == nil && res.StatusCode < 500 && ev.RequestContext.HTTP.Method != http.MethodGet {
			// The write committed; the answer is lost (fault injection only).
			if ferr := fault.Hit(fault.APIAfterWrite); ferr != nil {
				return events.APIGatewayV2HTTPResponse{}, ferr
			}
		}
		return res, err
	})
}
