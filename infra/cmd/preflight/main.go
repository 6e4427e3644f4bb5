// Command preflight checks the AWS account and region of a deployment
// before `make deploy` creates or updates the stack OjsServerless-<env>,
// so that a deploy which cannot succeed stops before it starts:
//
//   - The Lambda concurrency the stack reserves (topology.ForEnv: the
//     numbers the construct sets) must leave AWS's minimum of 100
//     unreserved concurrent executions in the region; otherwise
//     CloudFormation fails half-way through creating the functions.
//   - The CDK bootstrap stack (CDKToolkit) must exist at version 6 or
//     later (what the synthesised template's CheckBootstrapVersion rule
//     requires).
//
// Usage:
//
//	preflight <env> [cdk arguments...]
//
// The cdk arguments are make's CDK_ARGS: --profile and -c region=... are
// used, the rest ignored. Without -c region the region comes from
// cdk.json's context environments.<env>.region, else from the SDK's
// default chain (AWS_REGION, the profile). Exit status 0: ready; 3: ready
// once bootstrapped (make deploy then runs cdk bootstrap); 1: refused.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/smithy-go"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// minUnreserved is the concurrency AWS keeps unreserved in every account
// and region: a function's reservation may not take the rest below it.
const minUnreserved = 100

// minBootstrapVersion is the lowest CDKToolkit version the stack deploys on.
const minBootstrapVersion = 6

// exitBootstrap tells make deploy to run cdk bootstrap.
const exitBootstrap = 3

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: preflight <env> [cdk arguments...]")
		os.Exit(2)
	}
	bootstrap, err := run(context.Background(), os.Args[1], os.Args[2:])
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "preflight:", err)
		os.Exit(1)
	case bootstrap:
		fmt.Println("preflight: the account and region are not CDK-bootstrapped (or too old a version): bootstrapping")
		os.Exit(exitBootstrap)
	}
}

// reserved returns the concurrency e's functions reserve in total, and a
// description naming each reservation.
func reserved(e topology.Env) (int, string) {
	total, parts := 0, []string{}
	for _, name := range topology.FunctionNames {
		if n := e.Functions[name].ReservedConcurrency; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%s %d", name, n))
		}
	}
	return total, strings.Join(parts, ", ")
}

// checkConcurrency decides whether a stack that reserves want concurrent
// executions fits a region whose limit is limit and whose unreserved
// concurrency is unreserved, when the stack's functions already hold held
// of the reserved part (an update). It returns nil or the reason it does
// not fit and what to ask for.
func checkConcurrency(limit, unreserved, held, want int) error {
	left := unreserved + held - want
	if left >= minUnreserved {
		return nil
	}
	return fmt.Errorf("the stack reserves %d concurrent executions, which would leave %d unreserved in this region "+
		"(limit %d, %d unreserved now, %d held by the stack's functions); AWS keeps at least %d unreserved. "+
		"Ask for a higher \"Concurrent executions\" quota (Service Quotas, AWS Lambda) of at least %d, "+
		"or lower ReservedConcurrency in pkg/topology",
		want, left, limit, unreserved, held, minUnreserved, limit+minUnreserved-left)
}

// cdkOptions returns the --profile and -c region=... of cdk arguments.
func cdkOptions(args []string) (profile, region string) {
	for i, a := range args {
		next := ""
		if i+1 < len(args) {
			next = args[i+1]
		}
		switch {
		case a == "--profile":
			profile = next
		case strings.HasPrefix(a, "--profile="):
			profile = strings.TrimPrefix(a, "--profile=")
		case (a == "-c" || a == "--context") && strings.HasPrefix(next, "region="):
			region = strings.TrimPrefix(next, "region=")
		case strings.HasPrefix(a, "--context=region="):
			region = strings.TrimPrefix(a, "--context=region=")
		}
	}
	return profile, region
}

// cdkJSONRegion returns cdk.json's context environments.<env>.region, or "".
func cdkJSONRegion(env string) string {
	var c struct {
		Context struct {
			Environments map[string]struct{ Region string }
		}
	}
	raw, err := os.ReadFile("cdk.json")
	if err != nil || json.Unmarshal(raw, &c) != nil {
		return ""
	}
	return c.Context.Environments[env].Region
}

// run checks the account and reports whether it needs bootstrapping.
func run(ctx context.Context, envName string, args []string) (bool, error) {
	env, err := topology.ForEnv(envName)
	if err != nil {
		return false, err
	}
	profile, region := cdkOptions(args)
	var opts []func(*config.LoadOptions) error
	if profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(profile))
	}
	if region = cmp.Or(region, cdkJSONRegion(envName)); region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return false, err
	}
	if cfg.Region == "" {
		return false, errors.New("no AWS region: set AWS_REGION, a profile region, or -c region=... in CDK_ARGS")
	}
	lc, cf := lambda.NewFromConfig(cfg), cloudformation.NewFromConfig(cfg)
	acct, err := lc.GetAccountSettings(ctx, &lambda.GetAccountSettingsInput{})
	if err != nil {
		return false, fmt.Errorf("read the Lambda account settings in %s: %w", cfg.Region, err)
	}
	// The stack name is ojsconstruct.StackName's; importing that package
	// would start the CDK's jsii runtime.
	stack := "OjsServerless-" + envName
	held, err := heldConcurrency(ctx, cf, lc, stack)
	if err != nil {
		return false, err
	}
	want, which := reserved(env)
	limit, unreserved := int(acct.AccountLimit.ConcurrentExecutions), int(aws.ToInt32(acct.AccountLimit.UnreservedConcurrentExecutions))
	if err := checkConcurrency(limit, unreserved, held, want); err != nil {
		return false, fmt.Errorf("%s in %s: %w (%s)", stack, cfg.Region, err, which)
	}
	fmt.Printf("preflight: %s in %s reserves %d (%s); the region's limit is %d, %d unreserved\n",
		stack, cfg.Region, want, which, limit, unreserved)
	return bootstrapNeeded(ctx, cf)
}

// notFound reports whether err is CloudFormation's answer for a stack that
// does not exist.
func notFound(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationError" && strings.Contains(ae.ErrorMessage(), "does not exist")
}

// heldConcurrency is what the deployed stack's functions reserve now (0
// before the first deploy).
func heldConcurrency(ctx context.Context, cf *cloudformation.Client, lc *lambda.Client, stack string) (int, error) {
	res, err := cf.DescribeStackResources(ctx, &cloudformation.DescribeStackResourcesInput{StackName: aws.String(stack)})
	if notFound(err) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("describe stack %s: %w", stack, err)
	}
	held := 0
	for _, r := range res.StackResources {
		if aws.ToString(r.ResourceType) != "AWS::Lambda::Function" || r.PhysicalResourceId == nil {
			continue
		}
		c, err := lc.GetFunctionConcurrency(ctx, &lambda.GetFunctionConcurrencyInput{FunctionName: r.PhysicalResourceId})
		if err != nil {
			return 0, fmt.Errorf("read the reserved concurrency of %s: %w", *r.PhysicalResourceId, err)
		}
		held += int(aws.ToInt32(c.ReservedConcurrentExecutions))
	}
	return held, nil
}

// bootstrapNeeded reads the CDKToolkit stack's BootstrapVersion output.
func bootstrapNeeded(ctx context.Context, cf *cloudformation.Client) (bool, error) {
	out, err := cf.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String("CDKToolkit")})
	if notFound(err) {
		return true, nil
	} else if err != nil {
		return false, fmt.Errorf("describe stack CDKToolkit: %w", err)
	}
	for _, s := range out.Stacks {
		for _, o := range s.Outputs {
			if aws.ToString(o.OutputKey) == "BootstrapVersion" {
				v, err := strconv.Atoi(aws.ToString(o.OutputValue))
				return err != nil || v < minBootstrapVersion, nil
			}
		}
	}
	return true, nil
}
