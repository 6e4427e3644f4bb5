package ojsconstruct

import (
	"fmt"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// settings flattens deployable settings into "what" -> value, so the
// topology side and the template side can be compared key by key.
type settings map[string]any

func secs(d time.Duration) float64 { return d.Seconds() }

func rate(d time.Duration) string {
	n := int(d / time.Minute)
	if n == 1 {
		return "rate(1 minute)"
	}
	return fmt.Sprintf("rate(%d minutes)", n)
}

// fromTopology lists what the local runtime reads from pkg/topology and
// the stack must therefore deploy identically.
func fromTopology(e topology.Env) settings {
	s := settings{}
	for _, q := range e.Queues {
		p := "queue " + q.Name + " "
		s[p+"visibility timeout (s)"] = secs(q.VisibilityTimeout)
		s[p+"maximum message size"] = float64(awslimit.SQSMessageBytes)
		s[p+"maxReceiveCount"] = float64(q.MaxReceiveCount)
		s[p+"DLQ retention (s)"] = secs(q.DLQRetention)
		s[p+"batch size"] = float64(q.BatchSize)
		s[p+"batching window (s)"] = secs(q.MaxBatchingWindow)
		s[p+"max concurrency"] = float64(q.MaxConcurrency)
	}
	for _, fn := range topology.FunctionNames {
		f := e.Functions[fn]
		s["function "+fn+" memory (MB)"] = float64(f.MemoryMB)
		s["function "+fn+" timeout (s)"] = secs(f.Timeout)
		s["function "+fn+" tracing"] = e.Tracing
		s["function "+fn+" log retention (days)"] = float64(e.LogRetentionDays)
		s["function "+fn+" reserved concurrency"] = float64(f.ReservedConcurrency)
	}
	// Deployed only (the local runtime does not throttle).
	s["API throttle rate (/s)"] = e.API.ThrottleRate
	s["API throttle burst"] = float64(e.API.ThrottleBurst)
	s["stream batch size"] = float64(e.Stream.BatchSize)
	s["stream batching window (s)"] = secs(e.Stream.MaxBatchingWindow)
	s["stream max retries"] = float64(e.Stream.MaxRetries)
	s["stream bisect on error"] = e.Stream.BisectOnError
	s["stream max record age (s)"] = secs(e.Stream.MaxRecordAge)
	s["stream filter pattern"] = e.Stream.Filter.Pattern()
	s["stream event TTL"] = e.EventTTL.String()
	s["sweeper schedule"] = rate(e.Sweeper.Interval)
	s["sweeper tick"] = ""
	if e.Sweeper.Tick > 0 {
		s["sweeper tick"] = e.Sweeper.Tick.String()
	}
	s["table point-in-time recovery"] = e.PointInTimeRecovery
	s["table deletion protection"] = e.DeletionProtection
	s["table TTL attribute"] = topology.JobTable.TTLAttribute
	return s
}

// fromTemplate reads the same settings back out of the synthesised stack.
func fromTemplate(t *testing.T, st *synthesized, e topology.Env) settings {
	t.Helper()
	s := settings{}
	queues := st.resources("AWS::SQS::Queue")
	mappings := st.resources("AWS::Lambda::EventSourceMapping")
	for _, q := range e.Queues {
		p := "queue " + q.Name + " "
		push := st.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRolePush)
		dlq := st.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRoleDeadLetter)
		qp := props(queues[push])
		s[p+"visibility timeout (s)"] = qp["VisibilityTimeout"]
		s[p+"maximum message size"] = qp["MaximumMessageSize"]
		if rp, ok := qp["RedrivePolicy"].(map[string]any); ok {
			s[p+"maxReceiveCount"] = rp["maxReceiveCount"]
		}
		s[p+"DLQ retention (s)"] = props(queues[dlq])["MessageRetentionPeriod"]
		for _, m := range mappings {
			mp := props(m)
			if refID(mp["EventSourceArn"]) != push {
				continue
			}
			s[p+"batch size"] = mp["BatchSize"]
			s[p+"batching window (s)"] = mp["MaximumBatchingWindowInSeconds"]
			if sc, ok := mp["ScalingConfig"].(map[string]any); ok {
				s[p+"max concurrency"] = sc["MaximumConcurrency"]
			}
		}
	}
	functions := st.resources("AWS::Lambda::Function")
	groups := st.resources("AWS::Logs::LogGroup")
	for _, fn := range topology.FunctionNames {
		fp := props(functions[st.byTag(t, "AWS::Lambda::Function", TagFunction, fn)])
		s["function "+fn+" memory (MB)"] = fp["MemorySize"]
		s["function "+fn+" timeout (s)"] = fp["Timeout"]
		tc, _ := fp["TracingConfig"].(map[string]any)
		s["function "+fn+" tracing"] = tc["Mode"] == "Active"
		if fn == topology.FunctionSweeper {
			vars, _ := fp["Environment"].(map[string]any)["Variables"].(map[string]any)
			tick, _ := vars[topology.EnvSweepTick].(string)
			s["sweeper tick"] = tick
		}
		if fn == topology.FunctionStream {
			vars, _ := fp["Environment"].(map[string]any)["Variables"].(map[string]any)
			s["stream event TTL"] = vars[topology.EnvEventTTL]
		}
		rc, _ := fp["ReservedConcurrentExecutions"].(float64)
		s["function "+fn+" reserved concurrency"] = rc
		lg := refID(fp["LoggingConfig"].(map[string]any)["LogGroup"])
		s["function "+fn+" log retention (days)"] = props(groups[lg])["RetentionInDays"]
	}
	table := refID(st.doc["Outputs"].(map[string]any)[OutputTableName].(map[string]any)["Value"])
	for _, m := range mappings {
		mp := props(m)
		ga, _ := mp["EventSourceArn"].(map[string]any)["Fn::GetAtt"].([]any)
		if len(ga) != 2 || ga[0] != table || ga[1] != "StreamArn" {
			continue
		}
		s["stream batch size"] = mp["BatchSize"]
		s["stream batching window (s)"] = mp["MaximumBatchingWindowInSeconds"]
		s["stream max retries"] = mp["MaximumRetryAttempts"]
		s["stream bisect on error"] = mp["BisectBatchOnFunctionError"]
		s["stream max record age (s)"] = mp["MaximumRecordAgeInSeconds"]
		if fc, ok := mp["FilterCriteria"].(map[string]any); ok {
			if fs, ok := fc["Filters"].([]any); ok && len(fs) == 1 {
				s["stream filter pattern"] = fs[0].(map[string]any)["Pattern"]
			}
		}
	}
	for _, sg := range st.resources("AWS::ApiGatewayV2::Stage") {
		if rs, ok := props(sg)["DefaultRouteSettings"].(map[string]any); ok {
			s["API throttle rate (/s)"] = rs["ThrottlingRateLimit"]
			s["API throttle burst"] = rs["ThrottlingBurstLimit"]
		}
	}
	for _, r := range st.resources("AWS::Events::Rule") {
		s["sweeper schedule"] = props(r)["ScheduleExpression"]
	}
	tp := props(st.resources("AWS::DynamoDB::Table")[table])
	pitr, _ := tp["PointInTimeRecoverySpecification"].(map[string]any)
	s["table point-in-time recovery"] = pitr["PointInTimeRecoveryEnabled"] == true
	s["table deletion protection"] = tp["DeletionProtectionEnabled"] == true
	s["table TTL attribute"] = tp["TimeToLiveSpecification"].(map[string]any)["AttributeName"]
	return s
}

// TestSynthesisedSettingsMatchTopology is the proof that the deployed stack
// and the local runtime agree: both take these values from pkg/topology,
// and here the synthesised template of every environment is read back and
// compared with it setting by setting.
func TestSynthesisedSettingsMatchTopology(t *testing.T) {
	for _, name := range topology.Environments {
		t.Run(name, func(t *testing.T) {
			e := mustEnv(t, name)
			want := fromTopology(e)
			got := fromTemplate(t, synthEnv(t, name), e)
			for _, k := range sortedKeys(want) {
				if fmt.Sprint(got[k]) != fmt.Sprint(want[k]) {
					t.Errorf("%s: template %v, topology %v", k, got[k], want[k])
				}
			}
			for _, k := range sortedKeys(got) {
				if _, ok := want[k]; !ok {
					t.Errorf("unexpected setting %s in template", k)
				}
			}
		})
	}
	// The same comparison for a second queue with non-default settings.
	t.Run("two queues", func(t *testing.T) {
		e := customEnv(t)
		want := fromTopology(e)
		got := fromTemplate(t, synthCustom(t), e)
		for _, k := range sortedKeys(want) {
			if fmt.Sprint(got[k]) != fmt.Sprint(want[k]) {
				t.Errorf("%s: template %v, topology %v", k, got[k], want[k])
			}
		}
	})
}
