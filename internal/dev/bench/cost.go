package bench

import (
	"slices"

	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// Price is one list price with where it comes from.
type Price struct {
	Item   string  `json:"item"`
	USD    float64 `json:"usd"`
	Per    string  `json:"per"`
	Source string  `json:"source"`
}

// Prices are the on-demand list prices the cost model uses.
type Prices struct {
	// DynamoDB on-demand, per request unit (a write of up to 1 KB, a
	// strongly consistent read of up to 4 KB).
	DynamoDBWriteUnit float64 `json:"dynamodb_write_unit"`
	DynamoDBReadUnit  float64 `json:"dynamodb_read_unit"`
	// SQS standard queue, per request (per 64 KB chunk of payload).
	SQSRequest float64 `json:"sqs_request"`
	// Lambda, per request and per GB-second on arm64.
	LambdaRequest       float64 `json:"lambda_request"`
	LambdaGBSecondArm64 float64 `json:"lambda_gb_second_arm64"`
	// API Gateway HTTP API, per request (first 300 million a month).
	APIGatewayHTTPRequest float64 `json:"apigateway_http_request"`
	// EventBridge custom events, per event (64 KB chunk) put.
	EventBridgeEvent float64 `json:"eventbridge_event"`
	// Step Functions: Standard per state transition; Express per request
	// and GB-second.
	StepFunctionsStandardTransition float64 `json:"stepfunctions_standard_transition"`
	StepFunctionsExpressRequest     float64 `json:"stepfunctions_express_request"`
	StepFunctionsExpressGBSecond    float64 `json:"stepfunctions_express_gb_second"`
	// CloudWatch Logs ingestion per GB; X-Ray per trace recorded;
	// DynamoDB Standard storage per GB-month; provisioned capacity per
	// write and read capacity unit-hour.
	CloudWatchLogsGB       float64 `json:"cloudwatch_logs_gb"`
	XRayTrace              float64 `json:"xray_trace"`
	DynamoDBStorageGBMonth float64 `json:"dynamodb_storage_gb_month"`
	ProvisionedWCUHour     float64 `json:"dynamodb_provisioned_wcu_hour"`
	ProvisionedRCUHour     float64 `json:"dynamodb_provisioned_rcu_hour"`
}

// USEast1 are the us-east-1 list prices (checked June 2026; see
// docs/benchmark.md for the sources).
var USEast1 = Prices{
	DynamoDBWriteUnit:               0.625 / 1e6,
	DynamoDBReadUnit:                0.125 / 1e6,
	SQSRequest:                      0.40 / 1e6,
	LambdaRequest:                   0.20 / 1e6,
	LambdaGBSecondArm64:             0.0000133334,
	APIGatewayHTTPRequest:           1.00 / 1e6,
	EventBridgeEvent:                1.00 / 1e6,
	StepFunctionsStandardTransition: 25.0 / 1e6,
	StepFunctionsExpressRequest:     1.00 / 1e6,
	StepFunctionsExpressGBSecond:    0.00001667,
	CloudWatchLogsGB:                0.50,
	XRayTrace:                       5.00 / 1e6,
	DynamoDBStorageGBMonth:          0.25,
	ProvisionedWCUHour:              0.00065,
	ProvisionedRCUHour:              0.00013,
}

// Assumptions of the all-in price (docs/benchmark.md, "All-in").
const (
	// XRaySampling is the share of requests X-Ray's default sampling rule
	// records at load (1 a second, then 5%).
	XRaySampling = 0.05
	// ProvisionedRate and ProvisionedUtilization: the provisioned table is
	// priced for a steady ProvisionedRate units a second with auto scaling
	// holding utilisation at ProvisionedUtilization.
	ProvisionedRate        = 1000.0
	ProvisionedUtilization = 0.7
	// ItemOverheadBytes is what DynamoDB adds to each item's (and index
	// entry's) size for storage billing.
	ItemOverheadBytes = 100
)

// Table lists the prices with their sources, for the report.
func (p Prices) Table() []Price {
	return []Price{
		{"DynamoDB on-demand write request unit", p.DynamoDBWriteUnit * 1e6, "million WRU", "https://aws.amazon.com/dynamodb/pricing/on-demand/"},
		{"DynamoDB on-demand read request unit", p.DynamoDBReadUnit * 1e6, "million RRU", "https://aws.amazon.com/dynamodb/pricing/on-demand/"},
		{"DynamoDB Streams reads by a Lambda trigger", 0, "GetRecords", "https://aws.amazon.com/dynamodb/pricing/on-demand/ (\"GetRecords API calls invoked by AWS Lambda as part of DynamoDB triggers are free\")"},
		{"SQS standard request (per 64 KB chunk)", p.SQSRequest * 1e6, "million requests", "https://aws.amazon.com/sqs/pricing/"},
		{"Lambda request", p.LambdaRequest * 1e6, "million requests", "https://aws.amazon.com/lambda/pricing/"},
		{"Lambda duration, arm64", p.LambdaGBSecondArm64, "GB-second", "https://aws.amazon.com/lambda/pricing/"},
		{"API Gateway HTTP API request", p.APIGatewayHTTPRequest * 1e6, "million requests", "https://aws.amazon.com/api-gateway/pricing/"},
		{"EventBridge custom event (per 64 KB chunk)", p.EventBridgeEvent * 1e6, "million events", "https://aws.amazon.com/eventbridge/pricing/"},
		{"Step Functions Standard state transition", p.StepFunctionsStandardTransition * 1e6, "million transitions", "https://aws.amazon.com/step-functions/pricing/"},
		{"Step Functions Express request", p.StepFunctionsExpressRequest * 1e6, "million requests", "https://aws.amazon.com/step-functions/pricing/"},
		{"Step Functions Express duration (64 MB minimum)", p.StepFunctionsExpressGBSecond, "GB-second", "https://aws.amazon.com/step-functions/pricing/"},
		{"CloudWatch Logs ingestion (standard class)", p.CloudWatchLogsGB, "GB", "https://aws.amazon.com/cloudwatch/pricing/"},
		{"X-Ray trace recorded", p.XRayTrace * 1e6, "million traces", "https://aws.amazon.com/xray/pricing/"},
		{"DynamoDB Standard table storage", p.DynamoDBStorageGBMonth, "GB-month", "https://aws.amazon.com/dynamodb/pricing/on-demand/"},
		{"DynamoDB provisioned write capacity unit", p.ProvisionedWCUHour, "WCU-hour", "https://aws.amazon.com/dynamodb/pricing/provisioned/"},
		{"DynamoDB provisioned read capacity unit", p.ProvisionedRCUHour, "RCU-hour", "https://aws.amazon.com/dynamodb/pricing/provisioned/"},
	}
}

// Usage is what one unit of work (a job, a workflow step) uses on AWS.
type Usage struct {
	DynamoDBReadUnits  float64 `json:"dynamodb_read_units"`
	DynamoDBWriteUnits float64 `json:"dynamodb_write_units"`
	// SQSRequests are billable SQS requests (64 KB chunks) but idle receives.
	SQSRequests float64 `json:"sqs_requests"`
	// LambdaRequests are invocations; LambdaGBSeconds their duration times
	// memory (the benchmark's handlers do nothing: the engine's own time).
	LambdaRequests    float64 `json:"lambda_requests"`
	LambdaGBSeconds   float64 `json:"lambda_gb_seconds"`
	APIRequests       float64 `json:"api_requests"`
	EventBridgeEvents float64 `json:"eventbridge_events"`
	// LogBytes are CloudWatch Logs bytes: the engine functions' lines at
	// the deployed level (measured) and the API's access log line.
	LogBytes float64 `json:"log_bytes"`
	// Traces are X-Ray traces recorded where tracing is on.
	Traces float64 `json:"xray_traces"`
	// StoredBytes are the table's bytes (items and index entries with
	// their overhead) the unit leaves until it expires.
	StoredBytes float64 `json:"stored_bytes"`
}

// Cost is dollars per million units, by service.
type Cost struct {
	DynamoDB       float64 `json:"dynamodb"`
	SQS            float64 `json:"sqs"`
	LambdaRequests float64 `json:"lambda_requests"`
	LambdaCompute  float64 `json:"lambda_compute"`
	APIGateway     float64 `json:"api_gateway"`
	EventBridge    float64 `json:"eventbridge"`
	Logs           float64 `json:"cloudwatch_logs"`
	// Total is everything billed per unit, all in; NoCompute leaves out
	// Lambda duration, measured locally against the emulators (an upper
	// bound).
	Total     float64 `json:"total"`
	NoCompute float64 `json:"total_without_lambda_compute"`
	// Beside the total: X-Ray where an environment turns tracing on,
	// storage per month the units are kept, and the total with a
	// provisioned table at ProvisionedRate units a second.
	XRay         float64 `json:"xray_if_tracing"`
	StorageMonth float64 `json:"storage_per_month_kept"`
	Provisioned  float64 `json:"total_provisioned"`
}

// PerMillion prices a million units of u.
func (p Prices) PerMillion(u Usage) Cost {
	const m = 1e6
	c := Cost{
		DynamoDB:       m * (u.DynamoDBReadUnits*p.DynamoDBReadUnit + u.DynamoDBWriteUnits*p.DynamoDBWriteUnit),
		SQS:            m * u.SQSRequests * p.SQSRequest,
		LambdaRequests: m * u.LambdaRequests * p.LambdaRequest,
		LambdaCompute:  m * u.LambdaGBSeconds * p.LambdaGBSecondArm64,
		APIGateway:     m * u.APIRequests * p.APIGatewayHTTPRequest,
		EventBridge:    m * u.EventBridgeEvents * p.EventBridgeEvent,
		Logs:           m * u.LogBytes / 1e9 * p.CloudWatchLogsGB,
		XRay:           m * u.Traces * p.XRayTrace,
		StorageMonth:   m * u.StoredBytes / 1e9 * p.DynamoDBStorageGBMonth,
	}
	c.NoCompute = c.DynamoDB + c.SQS + c.LambdaRequests + c.APIGateway + c.EventBridge + c.Logs
	c.Total = c.NoCompute + c.LambdaCompute
	c.Provisioned = c.Total - c.DynamoDB + m*p.provisioned(u)
	for _, f := range []*float64{&c.DynamoDB, &c.SQS, &c.LambdaRequests, &c.LambdaCompute, &c.APIGateway, &c.EventBridge, &c.Logs,
		&c.NoCompute, &c.Total, &c.XRay, &c.StorageMonth, &c.Provisioned} {
		*f = round(*f, 3)
	}
	return c
}

// provisioned is what one unit's DynamoDB capacity costs on a provisioned
// table serving a steady rate at ProvisionedUtilization: r units a second
// need r times the unit's request units as capacity units, so per unit the
// rate cancels out (it matters for a partition's share, not the price).
func (p Prices) provisioned(u Usage) float64 {
	return (u.DynamoDBWriteUnits*p.ProvisionedWCUHour + u.DynamoDBReadUnits*p.ProvisionedRCUHour) / ProvisionedUtilization / 3600
}

// StepFunctions is what a million workflow steps cost in Step Functions, for
// comparison: Standard bills each state transition (one per step, the lower
// bound), Express each execution and its duration at 64 MB.
type StepFunctions struct {
	StandardPerMillionSteps float64 `json:"standard_per_million_steps"`
	ExpressPerMillionSteps  float64 `json:"express_per_million_steps"`
	// Assumptions: steps per workflow, and the time an Express execution
	// is billed for per step (its wall clock).
	StepsPerWorkflow float64 `json:"steps_per_workflow"`
	SecondsPerStep   float64 `json:"seconds_per_step"`
}

// StepFunctionsCost prices a million steps of workflows with
// stepsPerWorkflow steps taking secondsPerStep each.
func (p Prices) StepFunctionsCost(stepsPerWorkflow, secondsPerStep float64) StepFunctions {
	const m = 1e6
	const transitions = 1.0 // per step: its Task state
	express := p.StepFunctionsExpressRequest/stepsPerWorkflow + secondsPerStep*0.0625*p.StepFunctionsExpressGBSecond
	return StepFunctions{
		StandardPerMillionSteps: round(m*transitions*p.StepFunctionsStandardTransition, 3),
		ExpressPerMillionSteps:  round(m*express, 3),
		StepsPerWorkflow:        stepsPerWorkflow, SecondsPerStep: secondsPerStep,
	}
}

// Breakdown is where a phase's money goes: dollars per million units by item
// ("api DynamoDB UpdateItem", "Lambda requests worker", ...), from the
// phase's raw counts; the items add up to its Cost.Total.
func (pr Prices) Breakdown(p Phase) map[string]float64 {
	n := float64(max(p.Units, 1))
	out := map[string]float64{}
	add := func(item string, usd float64) {
		if usd > 0 {
			out[item] += 1e6 * usd / n
		}
	}
	for _, fn := range append(slices.Clone(EngineFunctions), "mapping") {
		for _, o := range p.Calls[fn] {
			item := fn + " " + o.Service + " " + o.Operation
			switch o.Service {
			case callstats.DynamoDB:
				add(item, o.WriteUnits*pr.DynamoDBWriteUnit+o.ReadUnits*pr.DynamoDBReadUnit)
			case callstats.SQS:
				billed := o.Chunks
				if fn == "mapping" {
					billed -= o.Empty // an idle queue's polling, not a unit's
				}
				add(item, float64(billed)*pr.SQSRequest)
			case callstats.EventBridge:
				add(item, float64(o.Items)*pr.EventBridgeEvent)
			}
		}
	}
	for _, fn := range EngineFunctions {
		add("Lambda requests "+fn, float64(p.Invocations[fn])*pr.LambdaRequest)
	}
	add("API Gateway requests", float64(p.Invocations[topology.FunctionAPI])*pr.APIGatewayHTTPRequest)
	if p.Cost.LambdaCompute > 0 {
		out["Lambda compute (local durations)"] = p.Cost.LambdaCompute
	}
	if p.Cost.Logs > 0 {
		out["CloudWatch Logs (access log, function lines)"] = p.Cost.Logs
	}
	for k, v := range out {
		out[k] = round(v, 3)
	}
	return out
}
