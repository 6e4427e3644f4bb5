package bench

import (
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// Delta is what happened on AWS during one phase: the requests by function
// and by the event source mappings (ESM), invocations and their duration.
type Delta struct {
	Functions   map[string]callstats.Set `json:"-"`
	ESM         callstats.Set            `json:"-"`
	Invocations map[string]int           `json:"invocations"`
	Busy        map[string]time.Duration `json:"-"`
	// LogBytes are the bytes each engine function logged; StoredBytes
	// what the table grew by.
	LogBytes    map[string]int64 `json:"log_bytes"`
	StoredBytes int64            `json:"stored_bytes"`
}

// EngineFunctions are the functions whose requests a job or step costs;
// the sweeper's are a fixed cost per sweep, reported apart.
var EngineFunctions = []string{topology.FunctionAPI, topology.FunctionWorker, topology.FunctionStream}

// PerUnit is requests per unit of work (job or workflow step).
type PerUnit struct {
	// DynamoDB requests by the functions (retries included), and the same
	// by function and by "function Operation".
	DynamoDB            float64            `json:"dynamodb_requests"`
	DynamoDBByFunction  map[string]float64 `json:"dynamodb_by_function"`
	DynamoDBByOperation map[string]float64 `json:"dynamodb_by_operation"`
	// EmptyFetchDynamoDB is the part of DynamoDB spent on FETCH polls that
	// found nothing (pull mode; the benchmark's workers poll when idle).
	EmptyFetchDynamoDB float64 `json:"empty_fetch_dynamodb_requests,omitempty"`
	ReadUnits          float64 `json:"dynamodb_read_units"`
	WriteUnits         float64 `json:"dynamodb_write_units"`
	// SQS are billable SQS requests (64 KB chunks), the mapping's empty
	// receives excluded (SQSIdleReceives: a cost per hour, not per job).
	SQS             float64            `json:"sqs_requests"`
	SQSByOperation  map[string]float64 `json:"sqs_by_operation"`
	SQSIdleReceives float64            `json:"sqs_idle_receives"`
	// StreamReads are the Streams mapping's reads: free on AWS.
	StreamReads float64 `json:"stream_reads_free"`
	// Lambda invocations, by function.
	Lambda           float64            `json:"lambda_invocations"`
	LambdaByFunction map[string]float64 `json:"lambda_by_function"`
	// API is API Gateway requests (the api function's invocations).
	API float64 `json:"api_requests"`
	// EventBridgeEvents are events put (64 KB chunks) in PutEvents requests.
	EventBridgeEvents float64 `json:"eventbridge_events"`
	PutEvents         float64 `json:"putevents_requests"`
	// LogBytes are the functions' log bytes at the deployed level, by
	// function, and AccessLogBytes the API's access log lines.
	LogBytes       map[string]float64 `json:"log_bytes_by_function"`
	AccessLogBytes float64            `json:"access_log_bytes"`
}

// Account turns a phase's delta into requests and usage per unit. Empty
// FETCHes cost emptyFetchDynamoDB DynamoDB requests each (calibrated).
func Account(d Delta, units int, env topology.Env, emptyFetches int, emptyFetchDynamoDB float64) (PerUnit, Usage) {
	n := float64(max(units, 1))
	p := PerUnit{DynamoDBByFunction: map[string]float64{}, DynamoDBByOperation: map[string]float64{},
		SQSByOperation: map[string]float64{}, LambdaByFunction: map[string]float64{}, LogBytes: map[string]float64{}}
	var gbs, logs float64
	for _, fn := range EngineFunctions {
		set := d.Functions[fn]
		for _, o := range set {
			switch o.Service {
			case callstats.DynamoDB:
				p.DynamoDB += float64(o.Attempts)
				p.DynamoDBByFunction[fn] += float64(o.Attempts)
				p.DynamoDBByOperation[fn+" "+o.Operation] += float64(o.Attempts)
				p.ReadUnits += o.ReadUnits
				p.WriteUnits += o.WriteUnits
			case callstats.SQS:
				p.SQS += float64(o.Chunks)
				p.SQSByOperation[fn+" "+o.Operation] += float64(o.Chunks)
			case callstats.EventBridge:
				p.EventBridgeEvents += float64(o.Items)
				p.PutEvents += float64(o.Attempts)
			}
		}
		p.LogBytes[fn] = float64(d.LogBytes[fn])
		logs += float64(d.LogBytes[fn])
		inv := float64(d.Invocations[fn])
		p.Lambda += inv
		p.LambdaByFunction[fn] += inv
		gbs += d.Busy[fn].Seconds() * float64(env.Functions[fn].MemoryMB) / 1024
	}
	for _, o := range d.ESM {
		switch o.Service {
		case callstats.SQS:
			billed := float64(o.Chunks - o.Empty)
			p.SQS += billed
			p.SQSByOperation["mapping "+o.Operation] += billed
			p.SQSIdleReceives += float64(o.Empty)
		case callstats.DynamoDBStreams:
			p.StreamReads += float64(o.Attempts)
		}
	}
	p.API = float64(d.Invocations[topology.FunctionAPI])
	p.AccessLogBytes = p.API * float64(AccessLogLineBytes())
	p.EmptyFetchDynamoDB = float64(emptyFetches) * emptyFetchDynamoDB
	// Traced: the API's requests and the functions' invocations by an
	// event source mapping, each sampled.
	traces := XRaySampling * (p.API + float64(d.Invocations[topology.FunctionWorker]+d.Invocations[topology.FunctionStream]))
	logs += p.AccessLogBytes
	for _, m := range []map[string]float64{p.DynamoDBByFunction, p.DynamoDBByOperation, p.SQSByOperation, p.LambdaByFunction, p.LogBytes} {
		for k, v := range m {
			m[k] = round(v/n, 3)
		}
	}
	for _, f := range []*float64{&p.DynamoDB, &p.EmptyFetchDynamoDB, &p.ReadUnits, &p.WriteUnits, &p.SQS, &p.SQSIdleReceives,
		&p.StreamReads, &p.Lambda, &p.API, &p.EventBridgeEvents, &p.PutEvents, &p.AccessLogBytes} {
		*f = round(*f/n, 3)
	}
	return p, Usage{DynamoDBReadUnits: p.ReadUnits, DynamoDBWriteUnits: p.WriteUnits, SQSRequests: p.SQS, LambdaRequests: p.Lambda,
		LambdaGBSeconds: gbs / n, APIRequests: p.API, EventBridgeEvents: p.EventBridgeEvents,
		LogBytes: round(logs/n, 1), Traces: round(traces/n, 4), StoredBytes: round(float64(d.StoredBytes)/n, 1)}
}
