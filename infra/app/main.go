// Command app is the CDK app of the OJS serverless backend. The CDK CLI runs
// it from the repository root (see cdk.json), and it synthesises one stack,
// OjsServerless-<env>, for the environment chosen with `-c env=<name>`.
//
// Context keys (all optional):
//
//	env          dev (default), staging, prod or local (LocalStack)
//	account      AWS account id; default $CDK_DEFAULT_ACCOUNT, else none
//	region       AWS region; default $CDK_DEFAULT_REGION, else none
//	arch         arm64 (default) or x86_64: the architecture of the binaries
//	assetDir     directory with <function>/bootstrap; default build/lambda
//	logLevel     OJS_LOG_LEVEL of the functions; default info
//	jwtIssuer    with jwtAudience: protect the API with JWT instead of IAM
//	jwtAudience  comma-separated audiences (app client ids)
//	frontend     http-api (default) or function-url (LocalStack's free
//	             image has no API Gateway v2)
//	authToken    OJS_AUTH_TOKEN of the api function; required with
//	             frontend=function-url
//
// Without account and region the stack is environment-agnostic; synthesis
// then needs no AWS credentials and performs no lookups.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	ojsconstruct "github.com/ojs-aws/ojs-serverless/infra/construct"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func main() {
	app := awscdk.NewApp(nil)
	err := build(app, os.Getenv)
	if err == nil {
		app.Synth(nil)
	}
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ojs cdk app:", err)
		os.Exit(1)
	}
}

// config is what the app reads from CDK context and the environment.
type config struct {
	Env         string
	Account     string
	Region      string
	Arch        string
	AssetDir    string
	LogLevel    string
	Frontend    string
	AuthToken   string
	JWTIssuer   string
	JWTAudience []string
}

// readConfig reads the context keys documented on the package through get
// (which returns "" for unset keys) and falls back to getenv for the
// account and region the CDK CLI exports.
func readConfig(get, getenv func(string) string) (config, error) {
	c := config{
		Env:       get("env"),
		Account:   get("account"),
		Region:    get("region"),
		Arch:      get("arch"),
		AssetDir:  get("assetDir"),
		LogLevel:  get("logLevel"),
		Frontend:  get("frontend"),
		AuthToken: get("authToken"),
		JWTIssuer: get("jwtIssuer"),
	}
	if c.Env == "" {
		c.Env = "dev"
	}
	if c.Account == "" {
		c.Account = getenv("CDK_DEFAULT_ACCOUNT")
	}
	if c.Region == "" {
		c.Region = getenv("CDK_DEFAULT_REGION")
	}
	if c.Arch == "" {
		c.Arch = "arm64"
	}
	if c.Arch != "arm64" && c.Arch != "x86_64" {
		return config{}, fmt.Errorf("context arch=%q: want arm64 or x86_64", c.Arch)
	}
	for _, a := range strings.Split(get("jwtAudience"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.JWTAudience = append(c.JWTAudience, a)
		}
	}
	if (c.JWTIssuer == "") != (len(c.JWTAudience) == 0) {
		return config{}, fmt.Errorf("context jwtIssuer and jwtAudience go together")
	}
	return c, nil
}

// contextString returns a context value as a string ("" when unset).
func contextString(app awscdk.App) func(string) string {
	return func(key string) string {
		v := app.Node().TryGetContext(jsii.String(key))
		if v == nil {
			return ""
		}
		return strings.TrimSpace(fmt.Sprint(v))
	}
}

// build adds the stack of the chosen environment to app.
func build(app awscdk.App, getenv func(string) string) error {
	c, err := readConfig(contextString(app), getenv)
	if err != nil {
		return err
	}
	env, err := topology.ForEnv(c.Env)
	if err != nil {
		return err
	}
	props := &ojsconstruct.StackProps{
		OJS: ojsconstruct.Props{
			Env:       env,
			AssetRoot: c.AssetDir,
			LogLevel:  c.LogLevel,
			Frontend:  ojsconstruct.Frontend(c.Frontend),
			AuthToken: c.AuthToken,
		},
	}
	if c.Account != "" || c.Region != "" {
		props.Env = &awscdk.Environment{}
		if c.Account != "" {
			props.Env.Account = jsii.String(c.Account)
		}
		if c.Region != "" {
			props.Env.Region = jsii.String(c.Region)
		}
	}
	if c.Arch == "x86_64" {
		props.OJS.Architecture = awslambda.Architecture_X86_64()
	}
	if c.JWTIssuer != "" {
		props.OJS.JWT = &ojsconstruct.JWTAuth{Issuer: c.JWTIssuer, Audience: c.JWTAudience}
	}
	_, _, err = ojsconstruct.NewStack(app, ojsconstruct.StackName(env.Name), props)
	return err
}
