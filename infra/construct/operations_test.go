package ojsconstruct

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/aws/jsii-runtime-go"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// TestStageThrottlingAndAccessLogs: the $default stage throttles every
// route at the topology's rate and burst and writes a JSON access line
// per request, naming the caller (IAM principal, JWT subject, authorizer
// principal), to its own log group with the environment's retention.
func TestStageThrottlingAndAccessLogs(t *testing.T) {
	for _, name := range []string{"dev", "prod"} {
		t.Run(name, func(t *testing.T) {
			e := mustEnv(t, name)
			s := synthEnv(t, name)
			stages := s.resources("AWS::ApiGatewayV2::Stage")
			if len(stages) != 1 {
				t.Fatalf("%d stages", len(stages))
			}
			st := props(stages[sortedKeys(stages)[0]])
			rs, _ := st["DefaultRouteSettings"].(map[string]any)
			if rs["ThrottlingRateLimit"] != e.API.ThrottleRate || rs["ThrottlingBurstLimit"] != float64(e.API.ThrottleBurst) || e.API.ThrottleRate <= 0 {
				t.Errorf("route settings %v, want rate %v burst %v", rs, e.API.ThrottleRate, e.API.ThrottleBurst)
			}
			als, _ := st["AccessLogSettings"].(map[string]any)
			lg := refID(als["DestinationArn"])
			group, ok := s.resources("AWS::Logs::LogGroup")[lg]
			if !ok {
				t.Fatalf("access logs go to %v, not a log group of the stack", als["DestinationArn"])
			}
			if props(group)["RetentionInDays"] != float64(e.LogRetentionDays) {
				t.Errorf("access log retention %v", props(group)["RetentionInDays"])
			}
			var format map[string]string
			if err := json.Unmarshal([]byte(als["Format"].(string)), &format); err != nil {
				t.Fatalf("access log format is not JSON: %v", err)
			}
			for key, v := range map[string]string{
				"request_id": "$context.requestId", "lambda_request_id": "$context.awsEndpointRequestId",
				"status": "$context.status", "ip": "$context.identity.sourceIp",
				"user_arn": "$context.identity.userArn", "account_id": "$context.identity.accountId", "caller": "$context.identity.caller",
				"jwt_sub": "$context.authorizer.claims.sub", "principal_id": "$context.authorizer.principalId",
				"path": "$context.path", "latency_ms": "$context.responseLatency", "integration_error": "$context.integrationErrorMessage",
			} {
				if format[key] != v {
					t.Errorf("access log field %s = %q, want %q", key, format[key], v)
				}
			}
			for k, v := range format {
				if strings.Contains(v, "querystring") || strings.Contains(v, "requestOverride") || strings.Contains(v, "header") {
					t.Errorf("access log field %s = %s could carry query strings or headers (tokens)", k, v)
				}
			}
		})
	}
}

// TestReservedConcurrency: only the functions the topology reserves
// capacity for (the stream function) have reserved concurrency.
func TestReservedConcurrency(t *testing.T) {
	for _, name := range []string{"dev", "prod"} {
		t.Run(name, func(t *testing.T) {
			e := mustEnv(t, name)
			s := synthEnv(t, name)
			if e.Functions[topology.FunctionStream].ReservedConcurrency < 1 {
				t.Fatalf("%s: the stream function has no reserved concurrency", name)
			}
			for _, fn := range topology.FunctionNames {
				id := s.byTag(t, "AWS::Lambda::Function", TagFunction, fn)
				got, set := props(s.resources("AWS::Lambda::Function")[id])["ReservedConcurrentExecutions"]
				want := e.Functions[fn].ReservedConcurrency
				if (want > 0) != set || (set && got != float64(want)) {
					t.Errorf("%s: reserved concurrency %v (set %v), want %d", fn, got, set, want)
				}
			}
		})
	}
}

// TestLiveAliases: each function has one "live" alias on a published
// version of itself, and nothing invokes $LATEST (mappings, integration,
// schedule: TestWorkerMappings, TestStreamMapping, TestHTTPAPIWithIAMAuth,
// TestSweeperSchedule).
func TestLiveAliases(t *testing.T) {
	s := synthEnv(t, "dev")
	s.template.ResourceCountIs(jsii.String("AWS::Lambda::Alias"), jsii.Number(len(topology.FunctionNames)))
	versions := s.resources("AWS::Lambda::Version")
	for _, fn := range topology.FunctionNames {
		fnID := s.byTag(t, "AWS::Lambda::Function", TagFunction, fn)
		alias := strings.Trim(s.aliasRefs(t, fn)[0], "<>")
		ap := props(s.resources("AWS::Lambda::Alias")[alias])
		v := flatten(ap["FunctionVersion"])
		ver := strings.TrimSuffix(strings.TrimPrefix(v, "<"), ".Version>")
		if vr, ok := versions[ver]; !ok || refID(props(vr)["FunctionName"]) != fnID {
			t.Errorf("%s alias points at %s, not a version of the function", fn, v)
		}
	}
	// All at once outside prod: no CodeDeploy, CloudFormation moves aliases.
	for _, typ := range []string{"AWS::CodeDeploy::Application", "AWS::CodeDeploy::DeploymentGroup"} {
		s.template.ResourceCountIs(jsii.String(typ), jsii.Number(0))
	}
}

// TestTrafficShifting: with a gradual shift (staging, prod), CodeDeploy
// moves each alias (the alias's UpdatePolicy hands the update to it) with
// the topology's deployment config and rolls back when the new version's
// errors alarm fires: Errors per minute under the alias (Resource) and the
// version it points at (ExecutedVersion), so the alarm sees the canary's
// own errors while it runs; one service role serves the four groups.
func TestTrafficShifting(t *testing.T) {
	for _, env := range []string{"staging", "prod"} {
		t.Run(env, func(t *testing.T) { testTrafficShifting(t, env) })
	}
}

func testTrafficShifting(t *testing.T, env string) {
	if e := mustEnv(t, env); e.TrafficShift != topology.ShiftCanary10Percent5Minutes {
		t.Fatalf("%s shifts %q", env, e.TrafficShift)
	}
	s := synthEnv(t, env)
	s.template.ResourceCountIs(jsii.String("AWS::CodeDeploy::Application"), jsii.Number(1))
	s.template.HasResourceProperties(jsii.String("AWS::CodeDeploy::Application"), map[string]any{"ComputePlatform": "Lambda"})
	groups := s.resources("AWS::CodeDeploy::DeploymentGroup")
	if len(groups) != len(topology.FunctionNames) {
		t.Fatalf("%d deployment groups", len(groups))
	}
	roles := map[string]bool{}
	alarms := s.resources("AWS::CloudWatch::Alarm")
	for id, g := range groups {
		p := props(g)
		if p["DeploymentConfigName"] != "CodeDeployDefault.LambdaCanary10Percent5Minutes" {
			t.Errorf("%s: config %v", id, p["DeploymentConfigName"])
		}
		roles[flatten(p["ServiceRoleArn"])] = true
		ac := p["AlarmConfiguration"].(map[string]any)
		as := ac["Alarms"].([]any)
		if ac["Enabled"] != true || len(as) != 1 {
			t.Fatalf("%s: alarm configuration %v", id, ac)
		}
		alarm := props(alarms[refID(as[0].(map[string]any)["Name"])])
		dims := map[string]string{}
		for _, d := range alarm["Dimensions"].([]any) {
			dims[d.(map[string]any)["Name"].(string)] = flatten(d.(map[string]any)["Value"])
		}
		fn := ""
		for _, name := range topology.FunctionNames {
			if dims["FunctionName"] == "<"+s.byTag(t, "AWS::Lambda::Function", TagFunction, name)+">" {
				fn = name
			}
		}
		if fn == "" || alarm["MetricName"] != "Errors" || alarm["Period"] != 60.0 || alarm["EvaluationPeriods"] != 1.0 {
			t.Fatalf("%s rolls back on %v, want a function's Errors per minute", id, alarm)
		}
		aliasID := strings.Trim(s.aliasRefs(t, fn)[0], "<>")
		version := flatten(props(s.resources("AWS::Lambda::Alias")[aliasID])["FunctionVersion"])
		if dims["Resource"] != dims["FunctionName"]+":"+AliasName || dims["ExecutedVersion"] != version {
			t.Errorf("%s rollback alarm dimensions %v, want Resource <fn>:%s and ExecutedVersion %s", fn, dims, AliasName, version)
		}
		if dep := strList(s.resources("AWS::Lambda::Alias")[aliasID]["DependsOn"]); !slices.Contains(dep, refID(as[0].(map[string]any)["Name"])) {
			t.Errorf("%s alias does not wait for its rollback alarm (DependsOn %v)", fn, dep)
		}
		ev := strings.Join(strList(p["AutoRollbackConfiguration"].(map[string]any)["Events"]), ",")
		for _, want := range []string{"DEPLOYMENT_FAILURE", "DEPLOYMENT_STOP_ON_ALARM", "DEPLOYMENT_STOP_ON_REQUEST"} {
			if !strings.Contains(ev, want) {
				t.Errorf("%s: rollback events %s lack %s", id, ev, want)
			}
		}
	}
	if len(roles) != 1 {
		t.Errorf("deployment groups use roles %v, want one", roles)
	}
	for _, fn := range topology.FunctionNames {
		alias := strings.Trim(s.aliasRefs(t, fn)[0], "<>")
		up, _ := s.resources("AWS::Lambda::Alias")[alias]["UpdatePolicy"].(map[string]any)
		cd, _ := up["CodeDeployLambdaAliasUpdate"].(map[string]any)
		if cd == nil || groups[refID(cd["DeploymentGroupName"])] == nil {
			t.Errorf("%s alias update policy %v, want one naming its deployment group", fn, up)
		}
	}
	// The CodeDeploy role: assumable by CodeDeploy only, its one managed
	// policy the documented one for Lambda deployments.
	role := s.resources("AWS::IAM::Role")[strings.TrimSuffix(strings.TrimPrefix(sortedKeys(roles)[0], "<"), ".Arn>")]
	if role == nil {
		t.Fatalf("deployment role %v not found", roles)
	}
	doc, _ := json.Marshal(props(role)["AssumeRolePolicyDocument"])
	mp := strList(props(role)["ManagedPolicyArns"])
	if !strings.Contains(string(doc), `"codedeploy.amazonaws.com"`) || strings.Count(string(doc), `"Service"`) != 1 ||
		len(mp) != 1 || !strings.HasSuffix(mp[0], ":iam::aws:policy/"+DeploymentManagedPolicy) {
		t.Errorf("deployment role: trust %s, managed policies %v", doc, mp)
	}
}
