package ojsconstruct

import (
	"encoding/json"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"
)

// AccessLogFormat is the HTTP API stage's access log line: one JSON object
// per request with who called (IAM: the signing principal's ARN, account,
// caller and user ids; JWT: the token's sub and client_id claims; Lambda
// authorizers: the principal id), from where, what (method, path without
// the query string, route), how it ended (status, API Gateway and
// integration errors, authorizer errors) and how long it took. request_id
// is API Gateway's request id; lambda_request_id is the request id of the
// AWS endpoint API Gateway called (the x-amzn-RequestId of Lambda's Invoke
// answer: the api function's invocation id, the aws_request_id of every
// line the function logged for the request; not verified on AWS here).
// Fields a request has no value for are "-".
var AccessLogFormat = map[string]string{
	"request_id":             "$context.requestId",
	"lambda_request_id":      "$context.awsEndpointRequestId",
	"time":                   "$context.requestTime",
	"ip":                     "$context.identity.sourceIp",
	"user_agent":             "$context.identity.userAgent",
	"method":                 "$context.httpMethod",
	"path":                   "$context.path",
	"route":                  "$context.routeKey",
	"protocol":               "$context.protocol",
	"status":                 "$context.status",
	"response_length":        "$context.responseLength",
	"latency_ms":             "$context.responseLatency",
	"integration_status":     "$context.integrationStatus",
	"integration_latency_ms": "$context.integrationLatency",
	"integration_error":      "$context.integrationErrorMessage",
	"error":                  "$context.error.message",
	"authorizer_error":       "$context.authorizer.error",
	"user_arn":               "$context.identity.userArn",
	"account_id":             "$context.identity.accountId",
	"caller":                 "$context.identity.caller",
	"user":                   "$context.identity.user",
	"jwt_sub":                "$context.authorizer.claims.sub",
	"jwt_client_id":          "$context.authorizer.claims.client_id",
	"principal_id":           "$context.authorizer.principalId",
}

// configureStage gives the HTTP API's $default stage its throttling
// (topology.Env.API) and access logs. The L2 HttpApi creates the stage;
// its CfnStage is adjusted here because the L2 access log settings take a
// jsii interface a Go struct cannot implement.
func (o *OJSServerless) configureStage() {
	retention, _ := retentionDays(o.Env.LogRetentionDays) // checked in validate
	o.AccessLogs = awslogs.NewLogGroup(o.Construct, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     retention,
		RemovalPolicy: o.removalPolicy(),
	})
	format, _ := json.Marshal(AccessLogFormat) // a map of strings
	stage := o.HTTPAPI.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	stage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: o.AccessLogs.LogGroupArn(),
		Format:         jsii.String(string(format)),
	})
	if api := o.Env.API; api.ThrottleRate > 0 || api.ThrottleBurst > 0 {
		stage.SetDefaultRouteSettings(&awsapigatewayv2.CfnStage_RouteSettingsProperty{
			ThrottlingRateLimit:  jsii.Number(api.ThrottleRate),
			ThrottlingBurstLimit: jsii.Number(api.ThrottleBurst),
		})
	}
}
