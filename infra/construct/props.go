package ojsconstruct

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// DefaultAssetRoot is where `make build` puts the Lambda binaries, relative
// to the directory the CDK app runs in (the repository root).
const DefaultAssetRoot = "build/lambda"

// BootstrapName is the file name of each function's binary inside
// <AssetRoot>/<function>/ (the provided.al2023 runtime runs ./bootstrap).
const BootstrapName = "bootstrap"

// DefaultIteratorAgeAlarmThreshold is the stream iterator age above which
// the stream alarm fires when Props.IteratorAgeAlarmThreshold is zero.
const DefaultIteratorAgeAlarmThreshold = 5 * time.Minute

// DefaultLogLevel is the OJS_LOG_LEVEL the functions get when
// Props.LogLevel is empty (topology.DefaultLogLevel: warn). Context
// logLevel=info turns the lifecycle lines on.
const DefaultLogLevel = topology.DefaultLogLevel

// DefaultQueueAgeAlarmThreshold is the age of the oldest message of a push
// queue above which its alarm fires when Props.QueueAgeAlarmThreshold is
// zero. It is above SQS's 15-minute maximum delay, because the stack sends
// delayed messages for scheduled and retried jobs.
const DefaultQueueAgeAlarmThreshold = 20 * time.Minute

// DefaultAPILatencyAlarmThreshold is the API's p99 latency above which its
// alarm fires when Props.APILatencyAlarmThreshold is zero.
const DefaultAPILatencyAlarmThreshold = 5 * time.Second

// Props configures NewOJSServerless. The zero value of every optional field
// means the default stated in its comment.
type Props struct {
	// Env is the environment's topology, normally topology.ForEnv(name).
	// Required: queues, function sizing, mappings, schedule, retention and
	// table protection all come from it.
	Env topology.Env

	// AssetRoot is the directory holding one sub-directory per function
	// (api, worker, stream, sweeper), each containing an executable named
	// bootstrap. Default DefaultAssetRoot ("build/lambda"). LocalStack
	// deployments point it at host-architecture builds (build/lambda-host).
	AssetRoot string

	// Architecture of the functions and binaries. Default arm64
	// (awslambda.Architecture_ARM_64()).
	Architecture awslambda.Architecture

	// Frontend selects what serves the OJS HTTP binding. Default
	// FrontendHTTPAPI.
	Frontend Frontend

	// JWT, when set, protects the HTTP API with a JWT authorizer instead of
	// the default IAM (SigV4) authorization. Only with FrontendHTTPAPI.
	JWT *JWTAuth

	// AuthToken, when set, becomes the api function's OJS_AUTH_TOKEN: the
	// function then requires "Authorization: Bearer <AuthToken>" on every
	// route. Required with FrontendFunctionURL; default empty (API Gateway
	// authorizes). The value is stored in the template and the function
	// configuration in plain text: meant for LocalStack, not for secrets.
	AuthToken string

	// LogLevel is the OJS_LOG_LEVEL of every function: debug, info, warn or
	// error. Default DefaultLogLevel ("warn").
	LogLevel string

	// IteratorAgeAlarmThreshold is the DynamoDB Streams iterator age (how
	// far the stream function lags behind writes) that raises the stream
	// alarm. Default DefaultIteratorAgeAlarmThreshold (5 minutes).
	IteratorAgeAlarmThreshold time.Duration

	// QueueAgeAlarmThreshold is the age of the oldest message in a push
	// queue (jobs waiting for the worker function) that raises that
	// queue's alarm. Default DefaultQueueAgeAlarmThreshold (20 minutes).
	QueueAgeAlarmThreshold time.Duration

	// APILatencyAlarmThreshold is the HTTP API's p99 latency over five
	// minutes that raises the latency alarm. Default
	// DefaultAPILatencyAlarmThreshold (5 seconds) plus Env.FetchWait.
	APILatencyAlarmThreshold time.Duration

	// AlarmTopic receives the ALARM and OK notifications of every alarm
	// (an existing topic per environment, e.g. the one your on-call
	// tooling subscribes to). Default: the construct creates a topic
	// (OJSServerless.AlarmTopic; subscribe to it).
	AlarmTopic awssns.ITopic

	// AlarmEmail, when set, is subscribed (protocol email) to the alarm
	// topic, whichever it is; the address must confirm the subscription.
	AlarmEmail string

	// ResultTTL is the functions' OJS_RESULT_TTL: how long, in seconds, a
	// finished job that sets no result_ttl is kept (-1 for ever, 0 not
	// kept). Default job.DefaultResultTTL (7 days). QueueResultTTLs is
	// OJS_QUEUE_RESULT_TTL, the default by queue before it (default none).
	ResultTTL       *int64
	QueueResultTTLs map[string]int64
}

// Frontend is what serves the OJS HTTP binding to clients.
type Frontend string

const (
	// FrontendHTTPAPI is an API Gateway HTTP API (payload format 2.0) with
	// IAM (default) or JWT authorization: the production frontend.
	FrontendHTTPAPI Frontend = "http-api"
	// FrontendFunctionURL is a Lambda function URL on the api function,
	// with auth type NONE and bearer-token auth in the function
	// (Props.AuthToken). It exists for LocalStack's free image, which has
	// no API Gateway v2; function URLs deliver the same payload format 2.0
	// events, so the api function runs unchanged.
	FrontendFunctionURL Frontend = "function-url"
)

// JWTAuth configures the optional JWT authorizer of the HTTP API.
type JWTAuth struct {
	// Issuer is the token issuer URL, e.g. a Cognito user pool
	// (https://cognito-idp.<region>.amazonaws.com/<pool id>). Required.
	Issuer string
	// Audience lists accepted "aud" values (or Cognito app client ids).
	// Required: at least one.
	Audience []string
	// TenantClaim, when set, names the claim that binds a request to a
	// tenant (the api function's OJS_TENANT_CLAIM): a token holding it
	// acts as that tenant only (docs/multi-tenancy.md).
	TenantClaim string
}

// Claim is the tenant claim of j ("" when j is nil or has none).
func (j *JWTAuth) Claim() string {
	if j == nil {
		return ""
	}
	return j.TenantClaim
}

var (
	queueNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)
	emailPattern     = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
	// logLevels maps the OJS_LOG_LEVELs to Lambda's application log levels.
	logLevels = map[string]awslambda.ApplicationLogLevel{"debug": awslambda.ApplicationLogLevel_DEBUG, "info": awslambda.ApplicationLogLevel_INFO,
		"warn": awslambda.ApplicationLogLevel_WARN, "error": awslambda.ApplicationLogLevel_ERROR}
)

// withDefaults returns a copy of p with defaults filled in, or an error
// naming the first invalid setting. It runs before any construct is
// created, so an invalid Props never leaves a half-built tree behind.
func (p Props) withDefaults() (Props, error) {
	p.AssetRoot = cmp.Or(p.AssetRoot, DefaultAssetRoot)
	if p.Architecture == nil {
		p.Architecture = awslambda.Architecture_ARM_64()
	}
	p.LogLevel = cmp.Or(p.LogLevel, DefaultLogLevel)
	if p.ResultTTL == nil {
		p.ResultTTL = new(int64(job.DefaultResultTTL))
	}
	p.Frontend = cmp.Or(p.Frontend, FrontendHTTPAPI)
	p.IteratorAgeAlarmThreshold = cmp.Or(p.IteratorAgeAlarmThreshold, DefaultIteratorAgeAlarmThreshold)
	p.QueueAgeAlarmThreshold = cmp.Or(p.QueueAgeAlarmThreshold, DefaultQueueAgeAlarmThreshold)
	if p.APILatencyAlarmThreshold == 0 {
		// A waiting FETCH answers after up to Env.FetchWait: it is not
		// slow, so the default threshold leaves it room.
		p.APILatencyAlarmThreshold = DefaultAPILatencyAlarmThreshold + p.Env.FetchWait
	}
	if err := p.validate(); err != nil {
		return Props{}, err
	}
	return p, nil
}

func (p Props) validate() error {
	e := p.Env
	if e.Name == "" {
		return errors.New("ojsconstruct: Props.Env is required (use topology.ForEnv)")
	}
	if _, ok := logLevels[p.LogLevel]; !ok {
		return fmt.Errorf("ojsconstruct: log level %q: want debug, info, warn or error", p.LogLevel)
	}
	if p.IteratorAgeAlarmThreshold < 0 || p.QueueAgeAlarmThreshold < 0 || p.APILatencyAlarmThreshold < 0 {
		return errors.New("ojsconstruct: alarm thresholds must not be negative")
	}
	if e.API.ThrottleRate < 0 || e.API.ThrottleBurst < 0 {
		return fmt.Errorf("ojsconstruct: API throttling %+v must not be negative", e.API)
	}
	if _, ok := deploymentConfigs[e.TrafficShift]; !ok && e.TrafficShift != topology.ShiftAllAtOnce {
		return fmt.Errorf("ojsconstruct: traffic shift %q: want one of %v", e.TrafficShift, sortedShifts())
	}
	for q, v := range p.QueueResultTTLs {
		if v < job.PermanentResultTTL || v > job.MaxResultTTL {
			return fmt.Errorf("ojsconstruct: result TTL %d of queue %q: want -1, 0 or up to %d seconds", v, q, job.MaxResultTTL)
		}
	}
	if r := p.ResultTTL; r != nil && (*r < job.PermanentResultTTL || *r > job.MaxResultTTL) {
		return fmt.Errorf("ojsconstruct: result TTL %d: want -1, 0 or up to %d seconds", *r, job.MaxResultTTL)
	}
	if p.AlarmEmail != "" && !emailPattern.MatchString(p.AlarmEmail) {
		return fmt.Errorf("ojsconstruct: alarm email %q is not an email address", p.AlarmEmail)
	}
	if p.JWT != nil && (p.JWT.Issuer == "" || len(p.JWT.Audience) == 0) {
		return errors.New("ojsconstruct: JWT auth needs an issuer and at least one audience")
	}
	switch p.Frontend {
	case FrontendHTTPAPI:
	case FrontendFunctionURL:
		if p.JWT != nil {
			return errors.New("ojsconstruct: JWT auth needs the HTTP API frontend")
		}
		if p.AuthToken == "" {
			return errors.New("ojsconstruct: the function URL frontend has no authorizer and needs an AuthToken")
		}
	default:
		return fmt.Errorf("ojsconstruct: frontend %q: want %q or %q", p.Frontend, FrontendHTTPAPI, FrontendFunctionURL)
	}
	if err := validateTable(topology.JobTable); err != nil {
		return err
	}
	if len(e.Queues) == 0 {
		return fmt.Errorf("ojsconstruct: environment %s has no push-mode queues", e.Name)
	}
	if _, err := retentionDays(e.LogRetentionDays); err != nil {
		return err
	}
	seen := map[string]string{}
	for _, q := range e.Queues {
		if !queueNamePattern.MatchString(q.Name) {
			return fmt.Errorf("ojsconstruct: queue name %q does not match %s", q.Name, queueNamePattern)
		}
		id := pascal(q.Name)
		if other, dup := seen[id]; dup {
			return fmt.Errorf("ojsconstruct: queue names %q and %q map to the same output name %q", other, q.Name, id)
		}
		seen[id] = q.Name
		if err := validateQueue(q, e.Functions[topology.FunctionWorker]); err != nil {
			return err
		}
	}
	for _, name := range topology.FunctionNames {
		f, ok := e.Functions[name]
		if !ok {
			return fmt.Errorf("ojsconstruct: environment %s has no sizing for function %s", e.Name, name)
		}
		if f.MemoryMB < 128 || f.MemoryMB > 10240 {
			return fmt.Errorf("ojsconstruct: function %s memory %d MB outside 128..10240", name, f.MemoryMB)
		}
		if err := wholeSeconds("function "+name+" timeout", f.Timeout, time.Second, 15*time.Minute); err != nil {
			return err
		}
		if f.ReservedConcurrency < 0 {
			return fmt.Errorf("ojsconstruct: function %s reserved concurrency %d is negative", name, f.ReservedConcurrency)
		}
		bin := filepath.Join(p.AssetRoot, name, BootstrapName)
		if st, err := os.Stat(bin); err != nil || st.IsDir() {
			return fmt.Errorf("ojsconstruct: Lambda binary %s is missing: build it first (make build)", bin)
		}
	}
	s := e.Stream
	if err := cmp.Or(within("stream batch size", s.BatchSize, 1, 10000), within("stream max retries", s.MaxRetries, 0, 10000),
		wholeSeconds("stream batching window", s.MaxBatchingWindow, 0, 300*time.Second),
		wholeSeconds("stream max record age", s.MaxRecordAge, 60*time.Second, 7*24*time.Hour)); err != nil {
		return err
	}
	iv := e.Sweeper.Interval
	if iv < time.Minute || iv%time.Minute != 0 {
		return fmt.Errorf("ojsconstruct: sweeper interval %v: EventBridge rates need whole minutes, at least one", iv)
	}
	return nil
}

func validateQueue(q topology.Queue, worker topology.Function) error {
	name := "queue " + q.Name
	// Larger SQS batches need a batching window of at least 1 s; the
	// topology keeps 1..10 so both runtimes behave alike.
	if err := cmp.Or(within(name+" batch size", q.BatchSize, 1, 10),
		wholeSeconds(name+" batching window", q.MaxBatchingWindow, 0, 300*time.Second),
		wholeSeconds(name+" visibility timeout", q.VisibilityTimeout, 0, 12*time.Hour)); err != nil {
		return err
	}
	if q.VisibilityTimeout < worker.Timeout {
		return fmt.Errorf("ojsconstruct: queue %s visibility timeout %v is below the worker timeout %v (Lambda rejects the mapping)",
			q.Name, q.VisibilityTimeout, worker.Timeout)
	}
	return cmp.Or(within(name+" maxReceiveCount", q.MaxReceiveCount, 1, 1000), within(name+" max concurrency", q.MaxConcurrency, 2, 1000),
		wholeSeconds(name+" DLQ retention", q.DLQRetention, time.Minute, 14*24*time.Hour))
}

// within checks that v is within [lo, hi].
func within(what string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("ojsconstruct: %s %d outside %d..%d", what, v, lo, hi)
	}
	return nil
}

// wholeSeconds checks that d is a whole number of seconds within [lo, hi]:
// CloudFormation takes these settings as integer seconds.
func wholeSeconds(what string, d, lo, hi time.Duration) error {
	if d%time.Second != 0 || d < lo || d > hi {
		return fmt.Errorf("ojsconstruct: %s %v must be whole seconds within %v..%v", what, d, lo, hi)
	}
	return nil
}

func validateTable(t topology.Table) error {
	keys := []topology.IndexKey{t.PartitionKey, t.SortKey}
	for _, ix := range t.Indexes {
		keys = append(keys, ix.PartitionKey, ix.SortKey)
	}
	for _, k := range keys {
		if _, ok := attributeTypes[k.Type]; !ok || k.Name == "" {
			return fmt.Errorf("ojsconstruct: table key %+v needs a name and type S, N or B", k)
		}
	}
	return nil
}
