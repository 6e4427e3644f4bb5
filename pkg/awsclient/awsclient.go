// Package awsclient builds AWS SDK clients from the standard environment:
// region, credentials and the AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_<SERVICE>
// overrides, so one binary runs against the local emulators, LocalStack or
// AWS unchanged.
//
// It reads the environment itself instead of the SDK's config package:
// Lambda (and the local runtime, and LocalStack) give a function its
// credentials and region as environment variables, and the config
// package's shared-config, SSO, STS and IMDS machinery, which a function
// never uses, weighs about a megabyte in every function binary.
package awsclient

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// APIOptions are SDK middleware added to every configuration Load returns;
// empty (the default) in every binary built for AWS. Development builds of
// the functions (build tag ojsdev, internal/dev/callstats/autocount) add the
// benchmark's request counter here at start-up, before Load runs.
var APIOptions []func(*middleware.Stack) error

// Load returns the SDK configuration: region from AWS_REGION (or
// AWS_DEFAULT_REGION, else us-east-1), credentials from AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, endpoints from
// AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE>. When an endpoint
// override is set and no credentials are (the local stack), it uses static
// dummy credentials so nothing reaches for AWS; without either it fails.
// Every client built from it carries APIOptions.
func Load(_ context.Context) (aws.Config, error) {
	cfg := aws.Config{Region: firstEnv("AWS_REGION", "AWS_DEFAULT_REGION"), ConfigSources: []any{envEndpoints{}}}
	cfg.Region = cmp.Or(cfg.Region, "us-east-1")
	if u := os.Getenv("AWS_ENDPOINT_URL"); u != "" {
		cfg.BaseEndpoint = aws.String(u)
	}
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	switch {
	case key != "" && secret != "":
		cfg.Credentials = credentials.NewStaticCredentialsProvider(key, secret, os.Getenv("AWS_SESSION_TOKEN"))
	case local():
		cfg.Credentials = credentials.NewStaticCredentialsProvider("local", "local", "")
	default:
		return aws.Config{}, fmt.Errorf("load AWS config: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (Lambda sets them; set them, or an AWS_ENDPOINT_URL for the local stack)")
	}
	cfg.APIOptions = append([]func(*middleware.Stack) error(nil), APIOptions...)
	return cfg, nil
}

func local() bool {
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_ENDPOINT_URL") && !strings.HasSuffix(kv, "=") {
			return true
		}
	}
	return false
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// envEndpoints answers the SDK clients' question for a service-specific
// endpoint (AWS_ENDPOINT_URL_DYNAMODB for "DynamoDB", AWS_ENDPOINT_URL_SQS,
// AWS_ENDPOINT_URL_EVENTBRIDGE, AWS_ENDPOINT_URL_DYNAMODB_STREAMS ...), as
// the SDK's own environment source does.
type envEndpoints struct{}

// GetServiceBaseEndpoint implements the SDK's ServiceBaseEndpointProvider.
func (envEndpoints) GetServiceBaseEndpoint(_ context.Context, sdkID string) (string, bool, error) {
	v := os.Getenv("AWS_ENDPOINT_URL_" + strings.ToUpper(strings.ReplaceAll(sdkID, " ", "_")))
	return v, v != "", nil
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
