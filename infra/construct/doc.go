// Package ojsconstruct is the AWS CDK construct that deploys the OJS
// serverless backend: one DynamoDB table, one SQS queue (with dead-letter
// queue) per push-mode OJS queue, the four Go Lambda functions (api, worker,
// stream, sweeper), their event source mappings, an HTTP API, the sweeper
// schedule, an EventBridge bus for OJS events, alarms and a dashboard.
//
// Every setting that the offline local runtime also uses (batch sizes,
// visibility timeouts, redrive counts, concurrency caps, function sizing,
// stream retries, the sweeper interval, log retention, table protection) is
// read from a [topology.Env]; this package never restates those values. The
// package tests synthesise the stack for every environment and compare the
// template with the topology, which is what keeps the deployed stack and the
// local runtime in agreement.
//
// Teams embed the construct with [NewOJSServerless] in their own stacks, or
// use [NewStack] for a complete stack with outputs (what infra/app does).
//
// Least privilege: each function gets its own IAM role with no managed
// policies; permissions come only from Grant* methods on the resources it
// uses. The one statement with a "*" resource is AWS X-Ray's
// PutTraceSegments/PutTelemetryRecords, which X-Ray does not allow to be
// scoped; it is present only when the environment enables tracing.
package ojsconstruct
