package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	ojsconstruct "github.com/ojs-aws/ojs-serverless/infra/construct"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func lookup(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestReadConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		ctx     map[string]string
		env     map[string]string
		want    config
		wantErr string
	}{
		{
			name: "defaults",
			want: config{Env: "dev", Arch: "arm64"},
		},
		{
			name: "cli environment",
			env:  map[string]string{"CDK_DEFAULT_ACCOUNT": "111111111111", "CDK_DEFAULT_REGION": "eu-west-1"},
			want: config{Env: "dev", Arch: "arm64", Account: "111111111111", Region: "eu-west-1"},
		},
		{
			name: "context wins",
			ctx: map[string]string{"env": "local", "account": "222222222222", "region": "us-east-1", "arch": "x86_64",
				"assetDir": "build/lambda-host", "logLevel": "debug", "frontend": "function-url", "authToken": "tok"},
			env: map[string]string{"CDK_DEFAULT_ACCOUNT": "111111111111", "CDK_DEFAULT_REGION": "eu-west-1"},
			want: config{Env: "local", Account: "222222222222", Region: "us-east-1", Arch: "x86_64", AssetDir: "build/lambda-host",
				LogLevel: "debug", Frontend: "function-url", AuthToken: "tok"},
		},
		{
			name: "jwt",
			ctx:  map[string]string{"jwtIssuer": "https://issuer", "jwtAudience": "a, b,"},
			want: config{Env: "dev", Arch: "arm64", JWTIssuer: "https://issuer", JWTAudience: []string{"a", "b"}},
		},
		{
			name: "prod pinned with -c",
			ctx:  map[string]string{"env": "prod", "account": "333333333333", "region": "eu-central-1", "alarmTopicArn": "arn:aws:sns:eu-central-1:333333333333:oncall"},
			env:  map[string]string{"CDK_DEFAULT_ACCOUNT": "111111111111", "CDK_DEFAULT_REGION": "eu-west-1"},
			want: config{Env: "prod", Arch: "arm64", Account: "333333333333", Region: "eu-central-1", AlarmTopicARN: "arn:aws:sns:eu-central-1:333333333333:oncall"},
		},
		{
			name: "staging pinned in cdk.json",
			ctx: map[string]string{"env": "staging", "environments.staging.account": "444444444444", "environments.staging.region": "us-west-2",
				"environments.staging.alarmTopicArn": "arn:aws:sns:us-west-2:444444444444:staging", "environments.prod.account": "555555555555"},
			want: config{Env: "staging", Arch: "arm64", Account: "444444444444", Region: "us-west-2", AlarmTopicARN: "arn:aws:sns:us-west-2:444444444444:staging"},
		},
		{
			name: "-c wins over cdk.json",
			ctx: map[string]string{"env": "prod", "account": "123456789012", "region": "us-east-1", "environments.prod.account": "555555555555",
				"environments.prod.alarmEmail": "oncall@example.com"},
			want: config{Env: "prod", Arch: "arm64", Account: "123456789012", Region: "us-east-1", AlarmEmail: "oncall@example.com"},
		},
		{
			name: "dev in cdk.json",
			ctx:  map[string]string{"environments.dev.account": "666666666666"},
			env:  map[string]string{"CDK_DEFAULT_ACCOUNT": "111111111111", "CDK_DEFAULT_REGION": "eu-west-1"},
			want: config{Env: "dev", Arch: "arm64", Account: "666666666666", Region: "eu-west-1"},
		},
		// prod and staging never take the credentials' account and region.
		{name: "prod from credentials", ctx: map[string]string{"env": "prod"},
			env: map[string]string{"CDK_DEFAULT_ACCOUNT": "111111111111", "CDK_DEFAULT_REGION": "eu-west-1"}, wantErr: "must be pinned"},
		{name: "staging without region", ctx: map[string]string{"env": "staging", "account": "111111111111"},
			env: map[string]string{"CDK_DEFAULT_REGION": "eu-west-1"}, wantErr: "must be pinned"},
		{name: "staging without alarm destination", ctx: map[string]string{"env": "staging", "account": "111111111111", "region": "eu-west-1"},
			wantErr: "needs an alarm destination"},
		{name: "bad account", ctx: map[string]string{"account": "12345"}, wantErr: "12-digit"},
		{name: "bad region", ctx: map[string]string{"region": "Europe"}, wantErr: "region"},
		{name: "bad arch", ctx: map[string]string{"arch": "ppc64"}, wantErr: "arch"},
		{name: "issuer alone", ctx: map[string]string{"jwtIssuer": "https://issuer"}, wantErr: "jwtIssuer"},
		{name: "audience alone", ctx: map[string]string{"jwtAudience": "a"}, wantErr: "jwtIssuer"},
		{name: "tenant claim without jwt", ctx: map[string]string{"jwtTenantClaim": "ojs_tenant"}, wantErr: "jwtIssuer"},
		{name: "tenant claim", ctx: map[string]string{"jwtIssuer": "https://issuer", "jwtAudience": "a", "jwtTenantClaim": "ojs_tenant"},
			want: config{Env: "dev", Arch: "arm64", JWTIssuer: "https://issuer", JWTAudience: []string{"a"}, JWTTenant: "ojs_tenant"}},
		{name: "fetch wait", ctx: map[string]string{"fetchWait": "2s"}, want: config{Env: "dev", Arch: "arm64", FetchWait: 2 * time.Second}},
		{name: "fetch wait too long", ctx: map[string]string{"fetchWait": "21s"}, wantErr: "fetchWait"},
		{name: "fetch wait not a duration", ctx: map[string]string{"fetchWait": "2000"}, wantErr: "fetchWait"},
		{name: "plain payloads", ctx: map[string]string{"plainPayloads": "true"}, want: config{Env: "dev", Arch: "arm64", PlainPayloads: true}},
		{name: "plain payloads not a boolean", ctx: map[string]string{"plainPayloads": "yes please"}, wantErr: "plainPayloads"},
		{name: "tracing", ctx: map[string]string{"tracing": "true"}, want: config{Env: "dev", Arch: "arm64", Tracing: true}},
		{name: "tracing per environment", ctx: map[string]string{"environments.dev.tracing": "true"}, want: config{Env: "dev", Arch: "arm64", Tracing: true}},
		{name: "tracing not a boolean", ctx: map[string]string{"tracing": "on"}, wantErr: "tracing"},
		{name: "result retention", ctx: map[string]string{"resultTtl": "-1", "queueResultTtl": `{"reports":60}`},
			want: config{Env: "dev", Arch: "arm64", ResultTTL: new(int64(-1)), QueueTTLs: map[string]int64{"reports": 60}}},
		{name: "provisioned capacity", ctx: map[string]string{"environments.dev.capacity": "provisioned:15000,3000"},
			want: config{Env: "dev", Arch: "arm64", Capacity: "provisioned:15000,3000"}},
		{name: "published and packed events", ctx: map[string]string{"publishEvents": "job.*,workflow.completed", "environments.dev.publishPacked": "none"},
			want: config{Env: "dev", Arch: "arm64", PublishEvents: "job.*,workflow.completed", PublishPacked: "none"}},
		{name: "published events unknown", ctx: map[string]string{"publishEvents": "job.nope"}, wantErr: "publishEvents"},
		{name: "packed events unknown", ctx: map[string]string{"publishPacked": "job.nope"}, wantErr: "publishPacked"},
		{name: "enqueue meta", ctx: map[string]string{"enqueueMeta": `{"environment":"dev"}`},
			want: config{Env: "dev", Arch: "arm64", EnqueueMeta: `{"environment":"dev"}`}},
		{name: "enqueue meta not an object", ctx: map[string]string{"enqueueMeta": `[1]`}, wantErr: "enqueueMeta"},
		{name: "capacity not a mode", ctx: map[string]string{"capacity": "reserved"}, wantErr: "capacity"},
		{name: "federation region", ctx: map[string]string{"environments.dev.federationRegion": "eu-west-1"},
			want: config{Env: "dev", Arch: "arm64", FedRegion: "eu-west-1"}},
		{name: "federation region not an id", ctx: map[string]string{"federationRegion": "EU West"}, wantErr: "federationRegion"},
		{name: "result retention not seconds", ctx: map[string]string{"resultTtl": "7d"}, wantErr: "resultTtl"},
		{name: "queue result retention not JSON", ctx: map[string]string{"queueResultTtl": "reports=60"}, wantErr: "queueResultTtl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := readConfig(lookup(tc.ctx), lookup(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("readConfig = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestBuild synthesises the app as `cdk synth -c env=prod -c arch=x86_64`
// would. It does not run in parallel: the jsii runtime is not goroutine-safe.
func TestBuild(t *testing.T) {
	assets := t.TempDir()
	for _, fn := range topology.FunctionNames {
		if err := os.MkdirAll(filepath.Join(assets, fn), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(assets, fn, ojsconstruct.BootstrapName), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	app := awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{
		"env": "prod", "arch": "x86_64", "assetDir": assets,
		"account": "123456789012", "region": "eu-central-1", "alarmEmail": "oncall@example.com",
	}})
	if err := build(app, lookup(nil)); err != nil {
		t.Fatal(err)
	}
	stacks := *app.Node().Children()
	if len(stacks) != 1 {
		t.Fatalf("app has %d children, want one stack", len(stacks))
	}
	stack, ok := stacks[0].(awscdk.Stack)
	if !ok {
		t.Fatalf("child %T is not a stack", stacks[0])
	}
	if got := *stack.StackName(); got != "OjsServerless-prod" {
		t.Errorf("stack name %s", got)
	}
	if got := *stack.Region(); got != "eu-central-1" {
		t.Errorf("region %s", got)
	}
	tpl := assertions.Template_FromStack(stack, nil)
	tpl.AllResourcesProperties(jsii.String("AWS::Lambda::Function"), map[string]any{"Architectures": []any{"x86_64"}})
	tpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{"DeletionProtectionEnabled": true})
	// alarmEmail: subscribed to the created topic, which every alarm notifies.
	topicRef := map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("AlarmTopic"))}
	tpl.ResourceCountIs(jsii.String("AWS::SNS::Topic"), jsii.Number(1))
	tpl.ResourcePropertiesCountIs(jsii.String("AWS::SNS::Subscription"),
		map[string]any{"Protocol": "email", "Endpoint": "oncall@example.com", "TopicArn": topicRef}, jsii.Number(1))
	tpl.AllResourcesProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{"AlarmActions": []any{topicRef}, "OKActions": []any{topicRef}})
	// The app runs cdk-nag: nothing unjustified.
	nag := assertions.Annotations_FromStack(stack)
	if errs := *nag.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))); len(errs) > 0 {
		t.Errorf("%d cdk-nag errors, first %v", len(errs), errs[0].Entry.Data)
	}

	// staging pinned in cdk.json's nested context, alarms to its topic.
	topic := "arn:aws:sns:us-west-2:444444444444:ojs-staging-oncall"
	app = awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{
		"env": "staging", "assetDir": assets,
		"environments": map[string]any{"staging": map[string]any{"account": "444444444444", "region": "us-west-2", "alarmTopicArn": topic}},
	}})
	if err := build(app, lookup(map[string]string{"CDK_DEFAULT_ACCOUNT": "111111111111", "CDK_DEFAULT_REGION": "eu-west-1"})); err != nil {
		t.Fatal(err)
	}
	stack = (*app.Node().Children())[0].(awscdk.Stack)
	if *stack.Account() != "444444444444" || *stack.Region() != "us-west-2" {
		t.Errorf("staging in %s/%s, want the pinned 444444444444/us-west-2", *stack.Account(), *stack.Region())
	}
	tpl = assertions.Template_FromStack(stack, nil)
	tpl.ResourceCountIs(jsii.String("AWS::SNS::Topic"), jsii.Number(0))
	tpl.AllResourcesProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{"AlarmActions": []any{topic}, "OKActions": []any{topic}})

	for _, bad := range []struct {
		ctx  map[string]any
		want string
	}{
		{map[string]any{"env": "qa", "assetDir": assets}, "unknown environment"},
		{map[string]any{"env": "local", "assetDir": assets, "frontend": "function-url"}, "AuthToken"},
		{map[string]any{"env": "dev", "assetDir": t.TempDir()}, "make build"},
		{map[string]any{"env": "prod", "assetDir": assets}, "must be pinned"},
		{map[string]any{"env": "prod", "assetDir": assets, "account": "123456789012", "region": "eu-west-1"}, "prod needs an alarm destination"},
		{map[string]any{"env": "staging", "assetDir": assets, "account": "123456789012", "region": "eu-west-1"}, "staging needs an alarm destination"},
		{map[string]any{"env": "dev", "assetDir": assets, "alarmEmail": "oncall"}, "not an email address"},
		{map[string]any{"env": "dev", "assetDir": assets, "alarmTopicArn": "oncall"}, "not an SNS topic ARN"},
	} {
		app := awscdk.NewApp(&awscdk.AppProps{Context: &bad.ctx})
		if err := build(app, lookup(nil)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("context %v: err = %v, want one containing %q", bad.ctx, err, bad.want)
		}
	}
}
