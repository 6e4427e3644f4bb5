// Command app is the CDK app of the OJS serverless backend. The CDK CLI runs
// it from the repository root (see cdk.json), and it synthesises one stack,
// OjsServerless-<env>, for the environment chosen with `-c env=<name>`.
//
// Context keys (all optional, but see pinning below):
//
//	env          dev (default), staging, prod or local (LocalStack)
//	account      AWS account id; default $CDK_DEFAULT_ACCOUNT, else none
//	region       AWS region; default $CDK_DEFAULT_REGION, else none
//	alarmTopicArn an existing SNS topic every alarm notifies; default a
//	             topic the stack creates (output AlarmTopicArn)
//	alarmEmail   an address subscribed to the alarm topic; staging and
//	             prod need it or alarmTopicArn
//	arch         arm64 (default) or x86_64: the architecture of the binaries
//	assetDir     directory with <function>/bootstrap; default build/lambda
//	logLevel     OJS_LOG_LEVEL of the functions; default warn
//	jwtIssuer    with jwtAudience: protect the API with JWT instead of IAM
//	jwtAudience  comma-separated audiences (app client ids)
//	jwtTenantClaim with jwtIssuer: the JWT claim that binds a request to
//	             a tenant (OJS_TENANT_CLAIM; docs/multi-tenancy.md)
//	frontend     http-api (default) or function-url (LocalStack's free
//	             image has no API Gateway v2)
//	authToken    OJS_AUTH_TOKEN of the api function; required with
//	             frontend=function-url
//	fetchWait    OJS_FETCH_WAIT of the api function (a Go duration, at
//	             most 20s): the long poll of a FETCH that names no
//	             wait_ms; default 0, it answers at once
//	plainPayloads true: OJS_PLAIN_PAYLOADS on every function, payloads
//	             written uncompressed (the first deploy over a stack from
//	             before payload packing; docs/infrastructure.md)
//	tracing      true: X-Ray active tracing on every function (off by
//	             default: it is billed per trace)
//	resultTtl    OJS_RESULT_TTL of the functions (seconds; -1 for ever);
//	             default 604800 (7 days)
//	queueResultTtl OJS_QUEUE_RESULT_TTL: a JSON object, queue to seconds
//	publishEvents OJS_PUBLISH_EVENTS of the stream function: the event
//	             types published to EventBridge (default: the ends of
//	             jobs and workflows, events.DefaultPublished)
//	publishPacked OJS_PUBLISH_PACKED: the published types sent packed,
//	             several to an entry (default job.*; "none")
//	enqueueMeta  OJS_ENQUEUE_META of the api function: a JSON object of
//	             meta keys every pushed job gets unless it sets them
//	federationRegion OJS_FEDERATION_REGION of the api function: this
//	             deployment's region id in a federation (docs/federation.md)
//	capacity     on-demand (default), provisioned, or provisioned:W,R (the
//	             maximum write and read capacity units): a provisioned
//	             table whose capacity and indexes' capacity auto scale
//	             at 70% utilisation (topology.ParseCapacity)
//
// account, region, alarmTopicArn and alarmEmail may also be set per environment in
// cdk.json, under "context": {"environments": {"prod": {"account": ...,
// "region": ..., "alarmTopicArn": ...}}}; a -c value wins.
//
// prod and staging are pinned: their account and region must come from
// context (-c or cdk.json), never from the credentials in use, so a deploy
// with the wrong profile fails instead of creating a second production;
// synthesis stops with a message saying so. `make synth` passes placeholder
// values explicitly. dev and local fall back to the CLI's account and
// region and, without them, are environment-agnostic (no credentials, no
// lookups).
//
// The app runs cdk-nag's AwsSolutions checks on the stack (reports in the
// cloud assembly); an unjustified finding fails synthesis.
package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	ojsconstruct "github.com/ojs-aws/ojs-serverless/infra/construct"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
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
	Env           string
	Account       string
	Region        string
	AlarmTopicARN string
	AlarmEmail    string
	Arch          string
	AssetDir      string
	LogLevel      string
	Frontend      string
	AuthToken     string
	JWTIssuer     string
	JWTAudience   []string
	JWTTenant     string
	FetchWait     time.Duration
	PlainPayloads bool
	Tracing       bool
	Capacity      string
	PublishEvents string
	PublishPacked string
	EnqueueMeta   string
	FedRegion     string
	ResultTTL     *int64
	QueueTTLs     map[string]int64
}

// readConfig reads the context keys documented on the package through get
// (which returns "" for unset keys) and falls back to getenv for the
// account and region the CDK CLI exports.
func readConfig(get, getenv func(string) string) (config, error) {
	c := config{
		Env:       cmp.Or(get("env"), "dev"),
		Arch:      cmp.Or(get("arch"), "arm64"),
		AssetDir:  get("assetDir"),
		LogLevel:  get("logLevel"),
		Frontend:  get("frontend"),
		AuthToken: get("authToken"),
	}
	// -c key=value, else environments.<env>.<key> from cdk.json.
	perEnv := func(key string) string {
		if v := get(key); v != "" {
			return v
		}
		return get("environments." + c.Env + "." + key)
	}
	c.Account, c.Region, c.AlarmTopicARN, c.AlarmEmail = perEnv("account"), perEnv("region"), perEnv("alarmTopicArn"), perEnv("alarmEmail")
	if pinnedEnvs[c.Env] {
		if c.Account == "" || c.Region == "" {
			return config{}, fmt.Errorf("environment %s must be pinned to an AWS account and region: pass -c account=<12 digits> -c region=<region> "+
				"(make deploy ENV=%s CDK_ARGS=\"-c account=... -c region=...\"), or set them in cdk.json under "+
				"\"context\": {\"environments\": {\"%s\": {\"account\": \"...\", \"region\": \"...\"}}}; "+
				"the credentials' own account and region are not used for %s", c.Env, c.Env, c.Env, c.Env)
		}
	} else {
		c.Account = cmp.Or(c.Account, getenv("CDK_DEFAULT_ACCOUNT"))
		c.Region = cmp.Or(c.Region, getenv("CDK_DEFAULT_REGION"))
	}
	if pinnedEnvs[c.Env] && c.AlarmTopicARN == "" && c.AlarmEmail == "" {
		return config{}, fmt.Errorf("environment %s needs an alarm destination, or its alarms notify nobody: pass -c alarmEmail=<address> "+
			"(subscribed to the alarm topic the stack creates) or -c alarmTopicArn=<existing SNS topic ARN>, or set one in cdk.json "+
			"under \"context\": {\"environments\": {\"%s\": {...}}}", c.Env, c.Env)
	}
	if c.Account != "" && !accountPattern.MatchString(c.Account) {
		return config{}, fmt.Errorf("account %q: want a 12-digit AWS account id", c.Account)
	}
	if c.Region != "" && !regionPattern.MatchString(c.Region) {
		return config{}, fmt.Errorf("region %q is not an AWS region name (like eu-west-1)", c.Region)
	}
	if c.Arch != "arm64" && c.Arch != "x86_64" {
		return config{}, fmt.Errorf("context arch=%q: want arm64 or x86_64", c.Arch)
	}
	if err := c.readJWT(get); err != nil {
		return config{}, err
	}
	if v := get("fetchWait"); v != "" {
		d, err := topology.ParseFetchWait(v)
		if err != nil {
			return config{}, fmt.Errorf("context fetchWait %w", err)
		}
		c.FetchWait = d
	}
	if v := perEnv("resultTtl"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return config{}, fmt.Errorf("context resultTtl=%q: want seconds", v)
		}
		c.ResultTTL = &n
	}
	// The settings checked by the parser the functions use.
	for _, st := range []struct {
		key   string
		dst   *string
		check func(string) error
	}{
		{"publishEvents", &c.PublishEvents, func(v string) error { _, err := events.ParsePublished(v); return err }},
		{"publishPacked", &c.PublishPacked, func(v string) error { _, err := events.ParsePacked(v); return err }},
		{"enqueueMeta", &c.EnqueueMeta, func(v string) error { _, err := lifecycle.ParseDefaultMeta(v); return err }},
		{"federationRegion", &c.FedRegion, func(v string) error { _, err := topology.ParseRegion(v); return err }},
		{"capacity", &c.Capacity, func(v string) error { _, err := topology.ParseCapacity(v); return err }},
	} {
		if *st.dst = perEnv(st.key); *st.dst != "" {
			if err := st.check(*st.dst); err != nil {
				return config{}, fmt.Errorf("context %s: %w", st.key, err)
			}
		}
	}
	if v := perEnv("queueResultTtl"); v != "" {
		if err := json.Unmarshal([]byte(v), &c.QueueTTLs); err != nil {
			return config{}, fmt.Errorf("context queueResultTtl=%q: want a JSON object of queue names to seconds", v)
		}
	}
	for key, dst := range map[string]*bool{"plainPayloads": &c.PlainPayloads, "tracing": &c.Tracing} {
		if v := perEnv(key); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return config{}, fmt.Errorf("context %s=%q: want true or false", key, v)
			}
			*dst = b
		}
	}
	return c, nil
}

// readJWT reads the JWT stage's context: issuer and audiences go
// together, and a tenant claim needs them.
func (c *config) readJWT(get func(string) string) error {
	c.JWTIssuer, c.JWTTenant = get("jwtIssuer"), get("jwtTenantClaim")
	for _, a := range strings.Split(get("jwtAudience"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.JWTAudience = append(c.JWTAudience, a)
		}
	}
	if (c.JWTIssuer == "") != (len(c.JWTAudience) == 0) {
		return fmt.Errorf("context jwtIssuer and jwtAudience go together")
	}
	if c.JWTTenant != "" && c.JWTIssuer == "" {
		return fmt.Errorf("context jwtTenantClaim needs jwtIssuer: only a JWT stage verifies the claim")
	}
	return nil
}

// pinnedEnvs must name their account, region and alarm destination in
// context.
var pinnedEnvs = map[string]bool{"prod": true, "staging": true}

var (
	accountPattern = regexp.MustCompile(`^\d{12}$`)
	regionPattern  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-\d+$`)
)

// contextString returns a context value as a string ("" when unset). A
// dotted key ("environments.prod.account") that is not a context key of
// its own is looked up in the nested objects of cdk.json's context.
func contextString(app awscdk.App) func(string) string {
	return func(key string) string {
		v := app.Node().TryGetContext(jsii.String(key))
		if v == nil {
			parts := strings.Split(key, ".")
			v = app.Node().TryGetContext(jsii.String(parts[0]))
			for _, p := range parts[1:] {
				m, _ := v.(map[string]any) // nil (m[p] nil) when v is not an object
				v = m[p]
			}
		}
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
	env.PlainPayloads, env.Tracing = c.PlainPayloads, c.Tracing
	env.Capacity, _ = topology.ParseCapacity(c.Capacity) // checked by readConfig
	env.PublishEvents, env.PublishPacked, env.EnqueueMeta, env.FederationRegion = c.PublishEvents, c.PublishPacked, c.EnqueueMeta, c.FedRegion
	if c.FetchWait > 0 {
		env.FetchWait = c.FetchWait
	}
	props := &ojsconstruct.StackProps{
		AlarmTopicARN: c.AlarmTopicARN,
		OJS: ojsconstruct.Props{
			Env:             env,
			AssetRoot:       c.AssetDir,
			LogLevel:        c.LogLevel,
			Frontend:        ojsconstruct.Frontend(c.Frontend),
			AuthToken:       c.AuthToken,
			AlarmEmail:      c.AlarmEmail,
			ResultTTL:       c.ResultTTL,
			QueueResultTTLs: c.QueueTTLs,
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
		props.OJS.JWT = &ojsconstruct.JWTAuth{Issuer: c.JWTIssuer, Audience: c.JWTAudience, TenantClaim: c.JWTTenant}
	}
	stack, _, err := ojsconstruct.NewStack(app, ojsconstruct.StackName(env.Name), props)
	if err != nil {
		return err
	}
	awscdk.Aspects_Of(stack).Add(ojsconstruct.NagChecks(true), nil)
	return nil
}
