package ojsconstruct

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/jsii-runtime-go"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// customEnv is dev with a second push queue whose name needs sanitising,
// to check everything that is per queue.
func customEnv(t *testing.T) topology.Env {
	t.Helper()
	e := mustEnv(t, "dev")
	q := e.Queues[0]
	q.Name = "email.bulk"
	q.BatchSize = 5
	q.MaxBatchingWindow = 2 * time.Second
	q.MaxConcurrency = 3
	e.Queues = append(e.Queues, q)
	e.FetchWait = 2 * time.Second
	e.PlainPayloads = true
	e.FederationRegion = "eu-west-1"
	return e
}

var (
	customOnce sync.Once
	customTpl  *synthesized
)

// synthCustom synthesises customEnv with every optional prop set.
func synthCustom(t *testing.T) *synthesized {
	t.Helper()
	customOnce.Do(func() {
		customTpl = synth(t, Props{
			Env:                       customEnv(t),
			Architecture:              awslambda.Architecture_X86_64(),
			JWT:                       &JWTAuth{Issuer: "https://issuer.example.com", Audience: []string{"ojs-client"}, TenantClaim: "ojs_tenant"},
			LogLevel:                  "debug",
			IteratorAgeAlarmThreshold: 90 * time.Second,
		})
	})
	if customTpl == nil {
		t.Fatal("custom synthesis failed in another test")
	}
	return customTpl
}

func TestTable(t *testing.T) {
	s := synthEnv(t, "dev")
	s.template.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(1))
	jt := topology.JobTable
	var gsis []any
	for _, ix := range jt.Indexes {
		proj := map[string]any{"ProjectionType": "ALL"}
		if ix.KeysOnly {
			proj = map[string]any{"ProjectionType": "KEYS_ONLY"}
		} else if len(ix.Include) > 0 {
			var attrs []any
			for _, a := range ix.Include {
				attrs = append(attrs, a)
			}
			proj = map[string]any{"ProjectionType": "INCLUDE", "NonKeyAttributes": attrs}
		}
		gsis = append(gsis, map[string]any{
			"IndexName": ix.Name,
			"KeySchema": []any{
				map[string]any{"AttributeName": ix.PartitionKey.Name, "KeyType": "HASH"},
				map[string]any{"AttributeName": ix.SortKey.Name, "KeyType": "RANGE"},
			},
			"Projection": proj,
		})
	}
	s.template.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
		"BillingMode":         "PAY_PER_REQUEST",
		"StreamSpecification": map[string]any{"StreamViewType": "NEW_AND_OLD_IMAGES"},
		"TimeToLiveSpecification": map[string]any{
			"AttributeName": jt.TTLAttribute,
			"Enabled":       true,
		},
		"KeySchema": []any{
			map[string]any{"AttributeName": jt.PartitionKey.Name, "KeyType": "HASH"},
			map[string]any{"AttributeName": jt.SortKey.Name, "KeyType": "RANGE"},
		},
		"GlobalSecondaryIndexes": gsis,
	})
	// Every key attribute is declared with the topology's type.
	for _, ix := range jt.Indexes {
		for _, k := range []topology.IndexKey{ix.PartitionKey, ix.SortKey} {
			s.template.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
				"AttributeDefinitions": assertions.Match_ArrayWith(&[]any{
					map[string]any{"AttributeName": k.Name, "AttributeType": k.Type},
				}),
			})
		}
	}
}

// TestProvisionedTable: with a Capacity the table and every index are
// provisioned at the minimum, and each of their read and write capacities
// auto scales between the bounds at the target utilisation.
func TestProvisionedTable(t *testing.T) {
	e := mustEnv(t, "dev")
	e.Capacity, _ = topology.ParseCapacity("provisioned:15000,3000")
	s := synth(t, Props{Env: e})
	min := map[string]any{"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
	s.template.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
		"ProvisionedThroughput":  min,
		"GlobalSecondaryIndexes": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{"ProvisionedThroughput": min})}),
	})
	targets := s.resources("AWS::ApplicationAutoScaling::ScalableTarget")
	if want := 2 * (1 + len(topology.JobTable.Indexes)); len(targets) != want {
		t.Fatalf("%d scalable targets, want %d (read and write of the table and each index)", len(targets), want)
	}
	for id, r := range targets {
		p := r["Properties"].(map[string]any)
		want := 15000.0
		if strings.HasSuffix(p["ScalableDimension"].(string), "ReadCapacityUnits") {
			want = 3000
		}
		if p["MinCapacity"] != 5.0 || p["MaxCapacity"] != want {
			t.Errorf("%s: capacity %v..%v, want 5..%v", id, p["MinCapacity"], p["MaxCapacity"], want)
		}
	}
	s.template.ResourceCountIs(jsii.String("AWS::ApplicationAutoScaling::ScalingPolicy"), jsii.Number(float64(len(targets))))
	s.template.AllResourcesProperties(jsii.String("AWS::ApplicationAutoScaling::ScalingPolicy"), map[string]any{
		"TargetTrackingScalingPolicyConfiguration": assertions.Match_ObjectLike(&map[string]any{"TargetValue": 70}),
	})
	// On demand by default.
	synthEnv(t, "prod").template.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{"BillingMode": "PAY_PER_REQUEST"})
}

func TestProtectionOnlyWhereTopologySaysSo(t *testing.T) {
	for _, name := range topology.Environments {
		t.Run(name, func(t *testing.T) {
			e := mustEnv(t, name)
			s := synthEnv(t, name)
			policy := "Delete"
			if e.DeletionProtection {
				policy = "Retain"
			}
			s.template.HasResource(jsii.String("AWS::DynamoDB::Table"), map[string]any{
				"DeletionPolicy":      policy,
				"UpdateReplacePolicy": policy,
				"Properties": map[string]any{
					"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": e.PointInTimeRecovery},
					"DeletionProtectionEnabled":        e.DeletionProtection,
				},
			})
			for id, lg := range s.resources("AWS::Logs::LogGroup") {
				if lg["DeletionPolicy"] != policy {
					t.Errorf("log group %s: DeletionPolicy %v, want %s", id, lg["DeletionPolicy"], policy)
				}
			}
			// The product decision: only prod is protected.
			if want := name == "prod"; e.PointInTimeRecovery != want || e.DeletionProtection != want {
				t.Errorf("%s: PITR %v, deletion protection %v; want both %v", name, e.PointInTimeRecovery, e.DeletionProtection, want)
			}
		})
	}
}

func TestQueues(t *testing.T) {
	s := synthCustom(t)
	e := customEnv(t)
	// A push queue and a DLQ per OJS queue, plus the stream failure queue.
	s.template.ResourceCountIs(jsii.String("AWS::SQS::Queue"), jsii.Number(2*len(e.Queues)+1))
	for _, q := range e.Queues {
		dlq := s.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRoleDeadLetter)
		s.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRolePush)
		s.template.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{
			"SqsManagedSseEnabled": true,
			"RedrivePolicy": map[string]any{
				"deadLetterTargetArn": map[string]any{"Fn::GetAtt": []any{dlq, "Arn"}},
				"maxReceiveCount":     q.MaxReceiveCount,
			},
			"Tags": assertions.Match_ArrayWith(&[]any{map[string]any{"Key": TagQueue, "Value": q.Name}}),
		})
	}
	for id, q := range s.resources("AWS::SQS::Queue") {
		if props(q)["SqsManagedSseEnabled"] != true {
			t.Errorf("queue %s is not encrypted at rest", id)
		}
	}
	// EnforceSSL: every queue's policy denies requests without TLS.
	s.template.ResourceCountIs(jsii.String("AWS::SQS::QueuePolicy"), jsii.Number(2*len(e.Queues)+1))
	s.template.AllResourcesProperties(jsii.String("AWS::SQS::QueuePolicy"), map[string]any{
		"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{
			assertions.Match_ObjectLike(&map[string]any{
				"Effect":    "Deny",
				"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
			}),
		})},
	})
}

func TestFunctions(t *testing.T) {
	s := synthEnv(t, "dev")
	s.template.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(len(topology.FunctionNames)))
	s.template.AllResourcesProperties(jsii.String("AWS::Lambda::Function"), map[string]any{
		"Runtime":       "provided.al2023",
		"Architectures": []any{"arm64"},
		"Handler":       BootstrapName,
	})
	table := refID(s.doc["Outputs"].(map[string]any)[OutputTableName].(map[string]any)["Value"])
	bus := refID(s.doc["Outputs"].(map[string]any)[OutputEventBusName].(map[string]any)["Value"])
	for _, name := range topology.FunctionNames {
		id := s.byTag(t, "AWS::Lambda::Function", TagFunction, name)
		fn := props(s.resources("AWS::Lambda::Function")[id])
		vars := fn["Environment"].(map[string]any)["Variables"].(map[string]any)
		want := []string{topology.EnvLogLevel, topology.EnvPushQueues, topology.EnvTable, topology.EnvResultTTL}
		if vars[topology.EnvResultTTL] != "604800" {
			t.Errorf("%s: %s = %v, want the default 604800", name, topology.EnvResultTTL, vars[topology.EnvResultTTL])
		}
		if name == topology.FunctionStream {
			want = append(want, topology.EnvEventBus, topology.EnvEventTTL, topology.EnvName)
			if vars[topology.EnvName] != "dev" {
				t.Errorf("stream: %s = %v, want the environment name", topology.EnvName, vars[topology.EnvName])
			}
		}
		if got := sortedKeys(vars); strings.Join(got, ",") != strings.Join(sortedStrings(want), ",") {
			t.Errorf("%s env vars %v, want %v", name, got, sortedStrings(want))
		}
		if got := refID(vars[topology.EnvTable]); got != table {
			t.Errorf("%s: %s refers to %q, want the table %q", name, topology.EnvTable, got, table)
		}
		if name == topology.FunctionStream && refID(vars[topology.EnvEventBus]) != bus {
			t.Errorf("stream: %s does not name the event bus", topology.EnvEventBus)
		}
		if vars[topology.EnvLogLevel] != DefaultLogLevel {
			t.Errorf("%s: log level %v", name, vars[topology.EnvLogLevel])
		}
		// Each function logs JSON to its own log group, Lambda's own lines
		// at WARN and the function's at its OJS_LOG_LEVEL (so an INFO line
		// is not billed at the default level).
		lc := fn["LoggingConfig"].(map[string]any)
		if lc["LogFormat"] != "JSON" || lc["SystemLogLevel"] != "WARN" || lc["ApplicationLogLevel"] != "WARN" {
			t.Errorf("%s: logging config %v, want JSON with system and application levels WARN", name, lc)
		}
		if _, traced := fn["TracingConfig"]; traced && fn["TracingConfig"].(map[string]any)["Mode"] == "Active" {
			t.Errorf("%s: X-Ray tracing on by default", name)
		}
		lg := refID(lc["LogGroup"])
		if _, ok := s.resources("AWS::Logs::LogGroup")[lg]; !ok {
			t.Errorf("%s logs to %q, which is not a log group of the stack", name, lg)
		}
	}
	// One per function and the API's access logs.
	s.template.ResourceCountIs(jsii.String("AWS::Logs::LogGroup"), jsii.Number(len(topology.FunctionNames)+1))
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func TestPushQueuesVariable(t *testing.T) {
	s := synthCustom(t)
	e := customEnv(t)
	want := map[string]string{}
	for _, q := range e.Queues {
		want[q.Name] = "<" + s.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRolePush) + ">"
	}
	for _, name := range topology.FunctionNames {
		id := s.byTag(t, "AWS::Lambda::Function", TagFunction, name)
		v := props(s.resources("AWS::Lambda::Function")[id])["Environment"].(map[string]any)["Variables"].(map[string]any)[topology.EnvPushQueues]
		var got map[string]string
		if err := json.Unmarshal([]byte(flatten(v)), &got); err != nil {
			t.Fatalf("%s: %s is not JSON once resolved: %v (%s)", name, topology.EnvPushQueues, err, flatten(v))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %s = %v, want %v", name, topology.EnvPushQueues, got, want)
		}
	}
}

func TestRolesHaveNoManagedPolicies(t *testing.T) {
	s := synthEnv(t, "dev")
	s.template.ResourceCountIs(jsii.String("AWS::IAM::Role"), jsii.Number(len(topology.FunctionNames)))
	for id, r := range s.resources("AWS::IAM::Role") {
		p := props(r)
		if _, ok := p["ManagedPolicyArns"]; ok {
			t.Errorf("role %s has managed policies %v", id, p["ManagedPolicyArns"])
		}
		if _, ok := p["Policies"]; ok {
			t.Errorf("role %s has inline policies", id)
		}
		doc, _ := json.Marshal(p["AssumeRolePolicyDocument"])
		if !strings.Contains(string(doc), `"lambda.amazonaws.com"`) || strings.Count(string(doc), `"Service"`) != 1 {
			t.Errorf("role %s trust policy %s: want lambda.amazonaws.com only", id, doc)
		}
	}
}

func TestWorkerMappings(t *testing.T) {
	s := synthCustom(t)
	e := customEnv(t)
	for _, q := range e.Queues {
		queue := s.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRolePush)
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
			"EventSourceArn":        map[string]any{"Fn::GetAtt": []any{queue, "Arn"}},
			"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
			"BatchSize":             q.BatchSize,
		})
		for _, m := range s.resources("AWS::Lambda::EventSourceMapping") {
			if refID(props(m)["EventSourceArn"]) == queue {
				s.invokesAlias(t, "mapping of queue "+q.Name, props(m)["FunctionName"], topology.FunctionWorker)
			}
		}
	}
	// One SQS mapping per push queue plus the stream mapping.
	s.template.ResourceCountIs(jsii.String("AWS::Lambda::EventSourceMapping"), jsii.Number(len(e.Queues)+1))
}

func TestStreamMapping(t *testing.T) {
	s := synthEnv(t, "dev")
	table := refID(s.doc["Outputs"].(map[string]any)[OutputTableName].(map[string]any)["Value"])
	failures := s.byTag(t, "AWS::SQS::Queue", TagQueueRole, QueueRoleStreamFailure)
	s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
		"EventSourceArn":             map[string]any{"Fn::GetAtt": []any{table, "StreamArn"}},
		"StartingPosition":           "TRIM_HORIZON",
		"BisectBatchOnFunctionError": true,
		"FunctionResponseTypes":      []any{"ReportBatchItemFailures"},
		"DestinationConfig": map[string]any{"OnFailure": map[string]any{
			"Destination": map[string]any{"Fn::GetAtt": []any{failures, "Arn"}},
		}},
	})
	for _, m := range s.resources("AWS::Lambda::EventSourceMapping") {
		if strings.HasSuffix(flatten(props(m)["EventSourceArn"]), ".StreamArn>") {
			s.invokesAlias(t, "stream mapping", props(m)["FunctionName"], topology.FunctionStream)
		}
	}
}

func TestHTTPAPIWithIAMAuth(t *testing.T) {
	s := synthEnv(t, "dev")
	s.template.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Api"), jsii.Number(1))
	s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Api"), map[string]any{"ProtocolType": "HTTP"})
	// The routes, one per route of the api function's table, and their
	// authorization: TestPermissionPoliciesPerLevel.
	s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), map[string]any{
		"RouteKey":          "ANY " + APIRoutePath,
		"AuthorizationType": "AWS_IAM",
	})
	// One integration serves every route.
	s.template.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Integration"), jsii.Number(1))
	s.template.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Authorizer"), jsii.Number(0))
	s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Integration"), map[string]any{
		"IntegrationType":      "AWS_PROXY",
		"PayloadFormatVersion": "2.0",
	})
	for _, in := range s.resources("AWS::ApiGatewayV2::Integration") {
		s.invokesAlias(t, "API integration", props(in)["IntegrationUri"], topology.FunctionAPI)
	}
	s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), map[string]any{
		"StageName":  "$default",
		"AutoDeploy": true,
	})
	s.invokedBy(t, topology.FunctionAPI, "apigateway.amazonaws.com")
}

// invokedBy checks that principal may invoke fn only through its live
// alias, and at least once.
func (s *synthesized) invokedBy(t *testing.T, fn, principal string) {
	t.Helper()
	n := 0
	for _, p := range s.resources("AWS::Lambda::Permission") {
		if pp := props(p); pp["Principal"] == principal {
			n++
			if pp["Action"] != "lambda:InvokeFunction" {
				t.Errorf("%s may %v", principal, pp["Action"])
			}
			s.invokesAlias(t, principal+" permission", pp["FunctionName"], fn)
		}
	}
	if n == 0 {
		t.Errorf("%s may not invoke %s", principal, fn)
	}
}

func TestHTTPAPIWithJWTAuth(t *testing.T) {
	s := synthCustom(t)
	s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), map[string]any{
		"AuthorizerType": "JWT",
		"JwtConfiguration": map[string]any{
			"Issuer":   "https://issuer.example.com",
			"Audience": []any{"ojs-client"},
		},
	})
	s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), map[string]any{
		"RouteKey":          "ANY " + APIRoutePath,
		"AuthorizationType": "JWT",
	})
	// The tenant claim reaches the api function only.
	for _, name := range topology.FunctionNames {
		id := s.byTag(t, "AWS::Lambda::Function", TagFunction, name)
		vars := props(s.resources("AWS::Lambda::Function")[id])["Environment"].(map[string]any)["Variables"].(map[string]any)
		if claim, ok := vars[topology.EnvTenantClaim]; (name == topology.FunctionAPI) != ok || (ok && claim != "ojs_tenant") {
			t.Errorf("%s: %s = %v (set %v)", name, topology.EnvTenantClaim, claim, ok)
		}
	}
}

func TestCustomPropsReachFunctions(t *testing.T) {
	s := synthCustom(t)
	s.template.AllResourcesProperties(jsii.String("AWS::Lambda::Function"), map[string]any{
		"Architectures": []any{"x86_64"},
		"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&map[string]any{
			topology.EnvLogLevel: "debug",
		})},
	})
	s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
		"MetricName": "IteratorAge",
		"Threshold":  90000,
	})
	// The environment's FETCH wait reaches the api function alone.
	s.template.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Function"), map[string]any{
		"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&map[string]any{
			topology.EnvFetchWait: "2s",
		})},
	}, jsii.Number(1))
	api := s.byTag(t, "AWS::Lambda::Function", TagFunction, topology.FunctionAPI)
	vars := props(s.resources("AWS::Lambda::Function")[api])["Environment"].(map[string]any)["Variables"].(map[string]any)
	if v := vars[topology.EnvFetchWait]; v != "2s" {
		t.Errorf("api function %s=%v, want 2s", topology.EnvFetchWait, v)
	}
	// So does the federation region (the api function checks requests).
	if v := vars[topology.EnvFederationRegion]; v != "eu-west-1" {
		t.Errorf("api function %s=%v, want eu-west-1", topology.EnvFederationRegion, v)
	}
	s.template.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Function"), map[string]any{
		"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&map[string]any{
			topology.EnvFederationRegion: "eu-west-1",
		})},
	}, jsii.Number(1))
	// Plain payloads reach every function (each writes jobs or nodes).
	s.template.AllResourcesProperties(jsii.String("AWS::Lambda::Function"), map[string]any{
		"Environment": map[string]any{"Variables": assertions.Match_ObjectLike(&map[string]any{
			topology.EnvPlainPayloads: "true",
		})},
	})
}

func TestSweeperSchedule(t *testing.T) {
	s := synthEnv(t, "dev")
	sweeper := s.byTag(t, "AWS::Lambda::Function", TagFunction, topology.FunctionSweeper)
	s.template.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(1))
	s.template.HasResourceProperties(jsii.String("AWS::Events::Rule"), map[string]any{
		"ScheduleExpression": "rate(1 minute)",
		"State":              "ENABLED",
	})
	for _, r := range s.resources("AWS::Events::Rule") {
		targets := props(r)["Targets"].([]any)
		if len(targets) != 1 {
			t.Fatalf("rule targets %v", targets)
		}
		s.invokesAlias(t, "schedule", targets[0].(map[string]any)["Arn"], topology.FunctionSweeper)
	}
	s.invokedBy(t, topology.FunctionSweeper, "events.amazonaws.com")
	// No asynchronous retries, for the alias the schedule invokes and for
	// the unqualified function.
	alias := strings.Trim(s.aliasRefs(t, topology.FunctionSweeper)[0], "<>")
	aliasConfigs := 0
	for _, c := range s.resources("AWS::Lambda::EventInvokeConfig") {
		if q := flatten(props(c)["Qualifier"]); strings.Contains(q, `{"Ref":"`+alias+`"}`) {
			aliasConfigs++
			if refID(props(c)["FunctionName"]) != sweeper || props(c)["MaximumRetryAttempts"] != 0.0 {
				t.Errorf("alias invoke config %v", props(c))
			}
		}
	}
	if aliasConfigs != 1 {
		t.Errorf("%d invoke configs for the sweeper's alias, want 1", aliasConfigs)
	}
	s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventInvokeConfig"), map[string]any{
		"FunctionName":         map[string]any{"Ref": sweeper},
		"Qualifier":            "$LATEST",
		"MaximumRetryAttempts": 0,
	})
}

func TestEventBus(t *testing.T) {
	s := synthEnv(t, "dev")
	s.template.ResourceCountIs(jsii.String("AWS::Events::EventBus"), jsii.Number(1))
}

func TestAlarms(t *testing.T) {
	s := synthCustom(t)
	e := customEnv(t)
	// Per push queue its DLQ depth and oldest message; stream failures,
	// iterator age; errors and throttles per function; DynamoDB throttles
	// of the table and each index; API 5xx and p99 latency.
	want := 2*len(e.Queues) + 2 + 2*len(topology.FunctionNames) + 1 + len(topology.JobTable.Indexes) + 2
	s.template.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(want))
	for _, q := range e.Queues {
		push := s.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRolePush)
		s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"Namespace":          "AWS/SQS",
			"MetricName":         "ApproximateAgeOfOldestMessage",
			"Dimensions":         []any{map[string]any{"Name": "QueueName", "Value": map[string]any{"Fn::GetAtt": []any{push, "QueueName"}}}},
			"ComparisonOperator": "GreaterThanThreshold",
			"Threshold":          DefaultQueueAgeAlarmThreshold.Seconds(),
		})
		dlq := s.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRoleDeadLetter)
		s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"Namespace":          "AWS/SQS",
			"MetricName":         "ApproximateNumberOfMessagesVisible",
			"Dimensions":         []any{map[string]any{"Name": "QueueName", "Value": map[string]any{"Fn::GetAtt": []any{dlq, "QueueName"}}}},
			"ComparisonOperator": "GreaterThanThreshold",
			"Threshold":          0,
		})
	}
	failures := s.byTag(t, "AWS::SQS::Queue", TagQueueRole, QueueRoleStreamFailure)
	s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
		"MetricName": "ApproximateNumberOfMessagesVisible",
		"Dimensions": []any{map[string]any{"Name": "QueueName", "Value": map[string]any{"Fn::GetAtt": []any{failures, "QueueName"}}}},
	})
	stream := s.byTag(t, "AWS::Lambda::Function", TagFunction, topology.FunctionStream)
	s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
		"Namespace":  "AWS/Lambda",
		"MetricName": "IteratorAge",
		"Dimensions": []any{map[string]any{"Name": "FunctionName", "Value": map[string]any{"Ref": stream}}},
	})
	for _, name := range topology.FunctionNames {
		fn := s.byTag(t, "AWS::Lambda::Function", TagFunction, name)
		for _, metric := range []string{"Errors", "Throttles"} {
			s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
				"Namespace":          "AWS/Lambda",
				"MetricName":         metric,
				"Dimensions":         []any{map[string]any{"Name": "FunctionName", "Value": map[string]any{"Ref": fn}}},
				"ComparisonOperator": "GreaterThanOrEqualToThreshold",
				"Threshold":          1,
			})
		}
	}
	s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
		"Namespace":  "AWS/ApiGateway",
		"MetricName": "5xx",
	})
	s.template.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
		"Namespace":          "AWS/ApiGateway",
		"MetricName":         "Latency",
		"ExtendedStatistic":  "p99",
		"ComparisonOperator": "GreaterThanThreshold",
		"Threshold":          float64((DefaultAPILatencyAlarmThreshold + e.FetchWait).Milliseconds()),
	})
	// DynamoDB: read + write throttle events of the table, and of each
	// index with its GlobalSecondaryIndexName dimension.
	table := refID(s.doc["Outputs"].(map[string]any)[OutputTableName].(map[string]any)["Value"])
	scopes := map[string]bool{}
	for _, a := range s.resources("AWS::CloudWatch::Alarm") {
		ms, _ := props(a)["Metrics"].([]any)
		seen := map[string]string{}
		for _, m := range ms {
			stat, ok := m.(map[string]any)["MetricStat"].(map[string]any)
			if !ok {
				continue
			}
			metric := stat["Metric"].(map[string]any)
			if metric["Namespace"] != "AWS/DynamoDB" {
				continue
			}
			scope := ""
			for _, d := range metric["Dimensions"].([]any) {
				d := d.(map[string]any)
				switch d["Name"] {
				case "TableName":
					if refID(d["Value"]) != table {
						t.Errorf("throttle alarm on table %v", d["Value"])
					}
				case "GlobalSecondaryIndexName":
					scope = d["Value"].(string)
				}
			}
			seen[metric["MetricName"].(string)] = scope
		}
		if len(seen) == 0 {
			continue
		}
		if len(seen) != 2 || seen["ReadThrottleEvents"] != seen["WriteThrottleEvents"] {
			t.Errorf("throttle alarm metrics %v, want read and write of one scope", seen)
		}
		scopes[seen["ReadThrottleEvents"]] = true
	}
	wantScopes := map[string]bool{"": true}
	for _, ix := range topology.JobTable.Indexes {
		wantScopes[ix.Name] = true
	}
	if !reflect.DeepEqual(scopes, wantScopes) {
		t.Errorf("throttle alarms for %v, want the table (\"\") and every index %v", sortedKeys(scopes), sortedKeys(wantScopes))
	}
	s.template.ResourceCountIs(jsii.String("AWS::CloudWatch::Dashboard"), jsii.Number(1))
}

// TestAlarmsNotifyATopic: without Props.AlarmTopic the construct creates
// one (TLS only) and every alarm notifies it of ALARM and OK.
func TestAlarmsNotifyATopic(t *testing.T) {
	s := synthEnv(t, "dev")
	s.template.ResourceCountIs(jsii.String("AWS::SNS::Topic"), jsii.Number(1))
	topic := sortedKeys(s.resources("AWS::SNS::Topic"))[0]
	ref := map[string]any{"Ref": topic}
	s.template.AllResourcesProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
		"AlarmActions": []any{ref},
		"OKActions":    []any{ref},
	})
	s.template.HasResourceProperties(jsii.String("AWS::SNS::TopicPolicy"), map[string]any{
		"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{
			assertions.Match_ObjectLike(&map[string]any{
				"Effect":    "Deny",
				"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
			}),
		})},
	})
	if got := s.doc["Outputs"].(map[string]any)[OutputAlarmTopicARN].(map[string]any)["Value"]; refID(got) != topic {
		t.Errorf("%s output %v", OutputAlarmTopicARN, got)
	}
}

func TestAlarmTopic(t *testing.T) {
	app := awscdk.NewApp(nil)
	stack := awscdk.NewStack(app, jsii.String("Embedded"), nil)
	topic := awssns.NewTopic(stack, jsii.String("Alarms"), nil)
	p := &Props{Env: mustEnv(t, "staging"), AssetRoot: assetRoot, AlarmTopic: topic, AlarmEmail: "oncall@example.com"}
	if _, err := NewOJSServerless(stack, "Ojs", p); err != nil {
		t.Fatal(err)
	}
	tpl := assertions.Template_FromStack(stack, nil)
	tpl.ResourceCountIs(jsii.String("AWS::SNS::Topic"), jsii.Number(1)) // the given one only
	topicRef := map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^Alarms"))}
	tpl.AllResourcesProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
		"AlarmActions": []any{topicRef},
		"OKActions":    []any{topicRef},
	})
	// AlarmEmail subscribes to the given topic too.
	tpl.ResourcePropertiesCountIs(jsii.String("AWS::SNS::Subscription"),
		map[string]any{"Protocol": "email", "Endpoint": p.AlarmEmail, "TopicArn": topicRef}, jsii.Number(1))
}

func TestOutputs(t *testing.T) {
	s := synthCustom(t)
	e := customEnv(t)
	want := []string{OutputAPIURL, OutputAPIV1URL, OutputTableName, OutputEventBusName, OutputPushQueues,
		OutputStreamFailureQueueURL, OutputDashboardName, OutputAlarmTopicARN}
	for _, q := range e.Queues {
		want = append(want, QueueURLOutput(q.Name), DeadLetterQueueURLOutput(q.Name))
	}
	outputs := s.doc["Outputs"].(map[string]any)
	if got := sortedKeys(outputs); strings.Join(got, ",") != strings.Join(sortedStrings(want), ",") {
		t.Errorf("outputs %v, want %v", got, sortedStrings(want))
	}
	if got := QueueURLOutput("email.bulk"); got != "EmailBulkQueueUrl" {
		t.Errorf("QueueURLOutput(email.bulk) = %s", got)
	}
	value := func(k string) string { return flatten(outputs[k].(map[string]any)["Value"]) }
	api := s.resources("AWS::ApiGatewayV2::Api")
	if len(api) != 1 {
		t.Fatalf("want one HTTP API, found %d", len(api))
	}
	apiID := sortedKeys(api)[0]
	if got := value(OutputAPIURL); got != "<"+apiID+".ApiEndpoint>" {
		t.Errorf("ApiUrl = %s", got)
	}
	if got := value(OutputAPIV1URL); got != "<"+apiID+".ApiEndpoint>/ojs/v1" {
		t.Errorf("ApiV1Url = %s", got)
	}
	for _, q := range e.Queues {
		push := s.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRolePush)
		if got := value(QueueURLOutput(q.Name)); got != "<"+push+">" {
			t.Errorf("%s = %s, want <%s>", QueueURLOutput(q.Name), got, push)
		}
	}
	s.template.HasOutput(jsii.String(OutputPushQueues), map[string]any{"Value": map[string]any{"Fn::Join": assertions.Match_AnyValue()}})
}

func TestStackName(t *testing.T) {
	t.Parallel()
	if got := StackName("prod"); got != "OjsServerless-prod" {
		t.Errorf("StackName(prod) = %s", got)
	}
}

func TestInvalidProps(t *testing.T) {
	emptyAssets := t.TempDir()
	cases := []struct {
		name   string
		mutate func(*Props)
		want   string
	}{
		{"no env", func(p *Props) { p.Env = topology.Env{} }, "Props.Env is required"},
		{"missing binary", func(p *Props) { p.AssetRoot = emptyAssets }, "make build"},
		{"log level", func(p *Props) { p.LogLevel = "verbose" }, "log level"},
		{"jwt without audience", func(p *Props) { p.JWT = &JWTAuth{Issuer: "https://x"} }, "audience"},
		{"no queues", func(p *Props) { p.Env.Queues = nil }, "no push-mode queues"},
		{"bad queue name", func(p *Props) { p.Env.Queues[0].Name = "Bad_Name" }, "does not match"},
		{"colliding queue names", func(p *Props) {
			a, b := p.Env.Queues[0], p.Env.Queues[0]
			a.Name, b.Name = "a-b", "a.b"
			p.Env.Queues = []topology.Queue{a, b}
		}, "same output name"},
		{"batch size", func(p *Props) { p.Env.Queues[0].BatchSize = 11 }, "batch size"},
		{"visibility below worker timeout", func(p *Props) { p.Env.Queues[0].VisibilityTimeout = 30 * time.Second }, "below the worker timeout"},
		{"fractional visibility", func(p *Props) { p.Env.Queues[0].VisibilityTimeout = 360500 * time.Millisecond }, "whole seconds"},
		{"concurrency", func(p *Props) { p.Env.Queues[0].MaxConcurrency = 1 }, "max concurrency"},
		{"dlq retention", func(p *Props) { p.Env.Queues[0].DLQRetention = 15 * 24 * time.Hour }, "DLQ retention"},
		{"sweeper interval", func(p *Props) { p.Env.Sweeper.Interval = 90 * time.Second }, "whole minutes"},
		{"log retention", func(p *Props) { p.Env.LogRetentionDays = 13 }, "retention"},
		{"record age", func(p *Props) { p.Env.Stream.MaxRecordAge = 30 * time.Second }, "max record age"},
		{"unknown frontend", func(p *Props) { p.Frontend = "alb" }, "frontend"},
		{"function url without token", func(p *Props) { p.Frontend = FrontendFunctionURL }, "AuthToken"},
		{"function url with jwt", func(p *Props) {
			p.Frontend, p.AuthToken = FrontendFunctionURL, "t"
			p.JWT = &JWTAuth{Issuer: "https://x", Audience: []string{"a"}}
		}, "HTTP API frontend"},
		{"missing function", func(p *Props) {
			p.Env.Functions = map[string]topology.Function{topology.FunctionAPI: p.Env.Functions[topology.FunctionAPI]}
		}, "no sizing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Props{Env: freshEnv(t), AssetRoot: assetRoot}
			tc.mutate(&p)
			app := awscdk.NewApp(nil)
			_, _, err := NewStack(app, "Invalid", &StackProps{OJS: p})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewStack error = %v, want one containing %q", err, tc.want)
			}
			if n := len(*app.Node().Children()); n != 0 {
				t.Errorf("invalid props left %d constructs in the app", n)
			}
		})
	}
	if _, err := NewOJSServerless(awscdk.NewApp(nil), "Nil", nil); err == nil {
		t.Error("NewOJSServerless accepted nil props")
	}
}

// freshEnv returns dev's topology with its own slices and maps, so a test
// can modify it.
func freshEnv(t *testing.T) topology.Env {
	t.Helper()
	e := mustEnv(t, "dev")
	e.Queues = append([]topology.Queue(nil), e.Queues...)
	fns := map[string]topology.Function{}
	for k, v := range e.Functions {
		fns[k] = v
	}
	e.Functions = fns
	return e
}

func TestDefaultAssetRootIsRelative(t *testing.T) {
	if filepath.IsAbs(DefaultAssetRoot) {
		t.Fatalf("DefaultAssetRoot %q must be relative to the app directory", DefaultAssetRoot)
	}
	if _, err := os.Stat(filepath.Join(assetRoot, topology.FunctionAPI, BootstrapName)); err != nil {
		t.Fatal(err)
	}
}

var (
	functionURLOnce sync.Once
	functionURLTpl  *synthesized
)

// synthFunctionURL synthesises the LocalStack shape once.
func synthFunctionURL(t *testing.T) *synthesized {
	t.Helper()
	functionURLOnce.Do(func() {
		functionURLTpl = synth(t, Props{Env: mustEnv(t, "local"), Frontend: FrontendFunctionURL, AuthToken: "secret-token"})
	})
	if functionURLTpl == nil {
		t.Fatal("function URL synthesis failed in another test")
	}
	return functionURLTpl
}

// TestFunctionURLFrontend is the LocalStack shape: no API Gateway v2, a
// function URL with bearer-token auth in the api function.
func TestFunctionURLFrontend(t *testing.T) {
	s := synthFunctionURL(t)
	api := s.byTag(t, "AWS::Lambda::Function", TagFunction, topology.FunctionAPI)
	for _, typ := range []string{"AWS::ApiGatewayV2::Api", "AWS::ApiGatewayV2::Route", "AWS::ApiGatewayV2::Integration", "AWS::ApiGatewayV2::Stage"} {
		s.template.ResourceCountIs(jsii.String(typ), jsii.Number(0))
	}
	s.template.ResourceCountIs(jsii.String("AWS::Lambda::Url"), jsii.Number(1))
	s.template.HasResourceProperties(jsii.String("AWS::Lambda::Url"), map[string]any{
		"AuthType":          "NONE",
		"TargetFunctionArn": map[string]any{"Fn::GetAtt": []any{api, "Arn"}},
		"Qualifier":         AliasName,
	})
	// Only the api function gets the token.
	for _, name := range topology.FunctionNames {
		id := s.byTag(t, "AWS::Lambda::Function", TagFunction, name)
		vars := props(s.resources("AWS::Lambda::Function")[id])["Environment"].(map[string]any)["Variables"].(map[string]any)
		tok, ok := vars[topology.EnvAuthToken]
		if (name == topology.FunctionAPI) != ok || (ok && tok != "secret-token") {
			t.Errorf("%s: %s = %v (set %v)", name, topology.EnvAuthToken, tok, ok)
		}
	}
	url := s.resources("AWS::Lambda::Url")
	urlID := sortedKeys(url)[0]
	outputs := s.doc["Outputs"].(map[string]any)
	for url, want := range map[string]string{
		"https://abc123.lambda-url.eu-west-1.on.aws/":                         "https://abc123.lambda-url.eu-west-1.on.aws",
		"http://abc123.lambda-url.us-east-1.localhost.localstack.cloud:4566/": "http://abc123.lambda-url.us-east-1.localhost.localstack.cloud:4566",
	} {
		attrs := map[string]string{urlID + ".FunctionUrl": url}
		if got := evaluate(t, outputs[OutputAPIURL].(map[string]any)["Value"], attrs); got != want {
			t.Errorf("ApiUrl for function URL %s = %v, want %s", url, got, want)
		}
		if got := evaluate(t, outputs[OutputAPIV1URL].(map[string]any)["Value"], attrs); got != want+"/ojs/v1" {
			t.Errorf("ApiV1Url for function URL %s = %v", url, got)
		}
	}
	// No API Gateway, so no 5xx or latency alarm and no access logs;
	// everything else is unchanged.
	want := 2*len(mustEnv(t, "local").Queues) + 2 + 2*len(topology.FunctionNames) + 1 + len(topology.JobTable.Indexes)
	s.template.ResourceCountIs(jsii.String("AWS::Logs::LogGroup"), jsii.Number(len(topology.FunctionNames)))
	s.template.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(want))
	s.template.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), map[string]any{
		"Action":              "lambda:InvokeFunctionUrl",
		"FunctionUrlAuthType": "NONE",
		"Principal":           "*",
	})
}

// TestCdkNagAwsSolutions: every environment's stack (and the two-queue,
// JWT and function-URL variants) passes cdk-nag's AwsSolutions rules, each
// exception suppressed with its reason in the construct (nag.go).
func TestCdkNagAwsSolutions(t *testing.T) {
	cases := map[string]func(*testing.T) *synthesized{
		"custom":       synthCustom,
		"function-url": synthFunctionURL,
	}
	for _, name := range topology.Environments {
		cases[name] = func(t *testing.T) *synthesized { return synthEnv(t, name) }
	}
	for _, name := range sortedKeys(cases) {
		t.Run(name, func(t *testing.T) {
			if f := cases[name](t).nag; len(f) > 0 {
				t.Errorf("%d unsuppressed cdk-nag findings:\n%s", len(f), strings.Join(f, "\n"))
			}
		})
	}
}
