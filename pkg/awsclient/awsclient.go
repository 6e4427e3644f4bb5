// Package awsclient builds AWS SDK clients from the standard environment:
// region, credentials and the AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_DYNAMODB /
// AWS_ENDPOINT_URL_SQS overrides, so one binary runs against the local
// emulators, LocalStack or AWS unchanged.
package awsclient

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	"github.com/ojs-aws/ojs-serverless/pkg/callstats"
)

// Load returns the SDK configuration. When an endpoint override is set and
// no credentials are configured (the local stack), it uses static dummy
// credentials and region us-east-1 so nothing reaches for AWS. With
// OJS_CALL_STATS_DIR set, every client built from it counts its requests
// (package callstats).
func Load(ctx context.Context, opts ...func(*config.LoadOptions) error) (aws.Config, error) {
	local := os.Getenv("AWS_ENDPOINT_URL") != "" || os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" || os.Getenv("AWS_ENDPOINT_URL_SQS") != ""
	if local && os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		opts = append(opts, config.WithRegion("us-east-1"))
	}
	if rec := callstats.FromEnv(); rec != nil {
		// Opt-in request counting for the benchmark (OJS_CALL_STATS_DIR);
		// without it no middleware is added.
		opts = append(opts, config.WithAPIOptions([]func(*middleware.Stack) error{rec.AddMiddleware}))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS config: %w", err)
	}
	return cfg, nil
}

// DynamoDBOptions adjusts the DynamoDB client for local emulators: DynamoDB
// Local's CRC32 response checksums do not always match what the SDK
// computes, which only produces warnings, so validation is skipped when an
// endpoint override is set. On AWS the checksums are validated.
func DynamoDBOptions(o *dynamodb.Options) {
	if os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" || os.Getenv("AWS_ENDPOINT_URL") != "" {
		o.DisableValidateResponseChecksum = true
	}
}
