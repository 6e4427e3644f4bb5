package topology

// DefaultLogLevel is the OJS_LOG_LEVEL the deployed functions get unless
// the stack is told otherwise: warn, so that no request writes a line
// unless something is wrong (CloudWatch Logs bills every byte; the API's
// access log has a line per request). Lambda's own START/END/REPORT lines
// are dropped by the functions' system log level, WARN. The benchmark runs
// the functions at this level to price their logs.
const DefaultLogLevel = "warn"

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
