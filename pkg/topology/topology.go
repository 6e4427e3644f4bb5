// Package topology is the one definition of the product's deployed shape: the
// push-mode queues with their SQS and event-source-mapping settings, the four
// functions, the DynamoDB Streams mapping and the sweeper schedule, per
// environment. The CDK stack (infra/) and the offline local runtime
// (localstack/) both read it, so the two cannot drift apart; a test compares
// the synthesised template with these values.
package topology

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Environment variable names shared by the stack, the local runtime and the
// functions. Functions read them at cold start.
const (
	// EnvTable names the DynamoDB table holding jobs, workflows and events.
	EnvTable = "OJS_TABLE"
	// EnvPushQueues holds a JSON object mapping each push-mode OJS queue name
	// to its SQS queue URL, e.g. {"lambda":"https://sqs.../ojs-lambda"}.
	EnvPushQueues = "OJS_PUSH_QUEUES"
	// EnvLogLevel sets the slog level: debug, info (default), warn, error.
	EnvLogLevel = "OJS_LOG_LEVEL"
	// EnvEventBus names the EventBridge bus OJS events are published to;
	// empty disables publishing (the local stack).
	EnvEventBus = "OJS_EVENT_BUS"
	// EnvPublishEvents chooses the event types published to the bus:
	// types or patterns ("job.*", "*"), "none", or empty for
	// events.DefaultPublished. Every event is stored whatever it says.
	EnvPublishEvents = "OJS_PUBLISH_EVENTS"
	// EnvPublishPacked chooses the published types sent packed, several
	// events to an EventBridge entry: types or patterns, "none", or empty
	// for events.DefaultPacked (the job events).
	EnvPublishPacked = "OJS_PUBLISH_PACKED"
	// EnvEnqueueMeta is a JSON object of meta keys every pushed job gets
	// unless it sets them (the enqueue middleware's DefaultMeta).
	EnvEnqueueMeta = "OJS_ENQUEUE_META"
	// EnvAuthToken, when set, is the bearer token every route requires
	// (the local stack's stand-in for IAM/JWT auth).
	EnvAuthToken = "OJS_AUTH_TOKEN"
	// EnvAuthTokens are bearer tokens that each hold one permission level,
	// "level:token,..." (httpapi.ParseTokens; the stand-in for JWT scopes).
	EnvAuthTokens = "OJS_AUTH_TOKENS"
	// EnvTenantClaim names the JWT claim that binds a request to a tenant
	// (multi-tenancy; empty: none binds, the X-OJS-Tenant header is taken
	// as sent).
	EnvTenantClaim = "OJS_TENANT_CLAIM"
	// EnvEventTTL is a Go duration: how long event items are kept (168h).
	EnvEventTTL = "OJS_EVENT_TTL"
	// EnvResultTTL is result_ttl in seconds for jobs that set none: -1, 0
	// or up to job.MaxResultTTL (default job.DefaultResultTTL).
	EnvResultTTL = "OJS_RESULT_TTL"
	// EnvQueueResultTTL is a JSON object, queue name to result_ttl in
	// seconds: the default of that queue's jobs, before EnvResultTTL.
	EnvQueueResultTTL = "OJS_QUEUE_RESULT_TTL"
	// EnvSweepTick is a Go duration ("1s"): the sweeper sweeps that often
	// within one scheduled invocation (Sweeper.Tick). Empty sweeps once.
	EnvSweepTick = "OJS_SWEEP_TICK"
	// EnvDeadMaxAge, EnvDeadMaxCount and EnvDeadPruneInterval set the dead
	// letter retention (ojs-dead-letter.md 5): a duration (default P180D), a
	// count over every queue (10000) and the pruning interval (PT5M).
	EnvDeadMaxAge        = "OJS_DLQ_MAX_AGE"
	EnvDeadMaxCount      = "OJS_DLQ_MAX_COUNT"
	EnvDeadPruneInterval = "OJS_DLQ_PRUNE_INTERVAL"
	// EnvRedeliverAfter is a Go duration: how long an available push-mode
	// job may wait unclaimed before the sweeper sends it to SQS again (5m).
	EnvRedeliverAfter = "OJS_REDELIVER_AFTER"
	// EnvWebhookRefresh is a Go duration: how long the stream function
	// trusts the webhook subscriptions it read (webhook.DefaultRefresh).
	EnvWebhookRefresh = "OJS_WEBHOOK_REFRESH"
	// EnvAsyncCreateItems is the size past which POST /workflows answers
	// 202 (default workflow.DefaultAsyncItems; 0 turns it off).
	EnvAsyncCreateItems = "OJS_ASYNC_CREATE_ITEMS"
	// EnvFetchWait is a Go duration: the long poll of a FETCH that names no
	// wait_ms (Env.FetchWait; default 0, at most MaxFetchWait).
	EnvFetchWait = "OJS_FETCH_WAIT"
	// EnvFederationRegion is the api function's federation region (CDK
	// context federationRegion; docs/federation.md): named in the health
	// answer; jobs geo-pinned to another region are refused. Empty: none.
	EnvFederationRegion = "OJS_FEDERATION_REGION"
	// EnvPlainPayloads, when true, makes a function write payloads
	// uncompressed (store.SetPlainWrites; Env.PlainPayloads).
	EnvPlainPayloads = "OJS_PLAIN_PAYLOADS"
	// EnvName is the environment's name (Env.Name), the Environment
	// dimension of the lifecycle metrics. Default "default".
	EnvName = "OJS_ENV"
)

// MaxFetchWait bounds a FETCH's long poll (OJS_FETCH_WAIT, wait_ms): the
// api function's timeout is 29 s (ojs-security.md, SEC-017).
const MaxFetchWait = 20 * time.Second

// ParseFetchWait reads an OJS_FETCH_WAIT value (the CDK context fetchWait
// too): a Go duration from 0 to MaxFetchWait.
func ParseFetchWait(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxFetchWait {
		return 0, fmt.Errorf("%q: want a duration between 0 and %v, like 2s", v, MaxFetchWait)
	}
	return d, nil
}

// ParseRegion reads an OJS_FEDERATION_REGION value (the CDK context
// federationRegion too): a region id like eu-west-1, 1 to 64 lowercase
// letters, digits and '-'.
func ParseRegion(v string) (string, error) {
	if !regionPattern.MatchString(v) {
		return "", fmt.Errorf("%q: want a region id of 1 to 64 lowercase letters, digits and '-', like eu-west-1", v)
	}
	return v, nil
}

var regionPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// Function names, used as construct ids, local process names and the
// functions/<name> directories.
const (
	FunctionAPI     = "api"
	FunctionWorker  = "worker"
	FunctionStream  = "stream"
	FunctionSweeper = "sweeper"
)

// FunctionNames lists the four functions in build order.
var FunctionNames = []string{FunctionAPI, FunctionWorker, FunctionStream, FunctionSweeper}

// Queue is one push-mode OJS queue: jobs pushed to it are delivered through
// its SQS queue to the worker function. Every other OJS queue is pull-mode
// (served to external workers through /ojs/v1/workers/fetch).
type Queue struct {
	// Name is the OJS queue name ([a-z0-9][a-z0-9.-]*).
	Name string
	// BatchSize (1..10) and MaxBatchingWindow (0: deliver at once) shape
	// the SQS event source mapping's batches.
	BatchSize         int
	MaxBatchingWindow time.Duration
	// VisibilityTimeout is the SQS visibility timeout (AWS recommends six
	// times the worker function's timeout).
	VisibilityTimeout time.Duration
	// MaxReceiveCount is how many receives SQS allows before it moves a
	// message to the queue's dead-letter queue, which keeps it DLQRetention.
	MaxReceiveCount int
	// MaxConcurrency caps concurrent worker invocations (AWS minimum 2).
	MaxConcurrency int
	DLQRetention   time.Duration
}

// SQSName is the physical SQS queue name for q within the given stack
// prefix. SQS names allow no dots, so an OJS queue name's dots become
// underscores (which OJS queue names do not use: no two collide).
func (q Queue) SQSName(prefix string) string {
	return prefix + "-" + strings.ReplaceAll(q.Name, ".", "_")
}

// DLQName is the physical name of q's dead-letter queue.
func (q Queue) DLQName(prefix string) string { return q.SQSName(prefix) + "-dlq" }

// Function holds the sizing of one Lambda function.
type Function struct {
	MemoryMB int
	Timeout  time.Duration
	// ReservedConcurrency, when above zero, reserves (and caps) that many
	// concurrent executions for the function. Not applied locally.
	ReservedConcurrency int
}

// API configures the HTTP API stage in front of the api function.
type API struct {
	// ThrottleRate (requests a second; 0: the account's limit) and
	// ThrottleBurst are the stage's throttling over all routes.
	ThrottleRate  float64
	ThrottleBurst int
}

// TrafficShift names how a deployment moves each function's "live" alias
// to the new version (CodeDeploy predefined Lambda deployment configs).
type TrafficShift string

// The traffic shifts the stack supports.
const (
	// ShiftAllAtOnce points the alias at the new version at once, through
	// CloudFormation, with no CodeDeploy resources.
	ShiftAllAtOnce TrafficShift = ""
	// ShiftCanary10Percent5Minutes sends 10% of invocations to the new
	// version for 5 minutes, then all; CodeDeploy rolls back if one of the
	// function's alarms fires meanwhile.
	ShiftCanary10Percent5Minutes TrafficShift = "canary-10-percent-5-minutes"
	// ShiftLinear10PercentEveryMinute adds 10% every minute.
	ShiftLinear10PercentEveryMinute TrafficShift = "linear-10-percent-every-1-minute"
)

// Stream configures the DynamoDB Streams event source mapping into the
// stream function.
type Stream struct {
	// BatchSize is the number of records per invocation.
	BatchSize int
	// MaxBatchingWindow gathers records before invoking; 0 invokes at once.
	MaxBatchingWindow time.Duration
	// MaxRetries bounds retries of a failing batch; the sweeper repairs
	// what records that still fail would have done.
	MaxRetries int
	// BisectOnError splits a failing batch to isolate the bad record.
	BisectOnError bool
	// MaxRecordAge drops records older than this after failures.
	MaxRecordAge time.Duration
	// PollInterval is how often the local runtime polls each shard.
	PollInterval time.Duration
	// Filter selects the records the function receives: the mapping's
	// filter criteria on AWS, applied by the poller locally.
	Filter KeyFilter
}

// KeyFilter keeps stream records whose sort key equals one of Equals or
// starts with one of Prefixes.
type KeyFilter struct {
	Attribute string
	Equals    []string
	Prefixes  []string
}

// StreamFilter keeps job items, workflow nodes, queue items, cron
// schedules, worker registry items, rate limit keys (pkg/ratelimit: their
// rate_limit.* events) and the dead letter pruner's record, and drops what
// the stream function never acts on (events, queue rate limiters,
// uniqueness locks, workflow counter shards).
var StreamFilter = KeyFilter{Attribute: "sk", Equals: []string{"JOB", "WORKER", "RLK"}, Prefixes: []string{"N#", "Q#", "CRON#", "DLQ#"}}

// Keep reports whether a record with sort key sk passes the filter.
func (f KeyFilter) Keep(sk string) bool {
	return slices.Contains(f.Equals, sk) || slices.ContainsFunc(f.Prefixes, func(p string) bool { return strings.HasPrefix(sk, p) })
}

// Pattern is the filter as a Lambda event filtering pattern (JSON).
func (f KeyFilter) Pattern() string {
	var match []any
	for _, e := range f.Equals {
		match = append(match, e)
	}
	for _, p := range f.Prefixes {
		match = append(match, map[string]string{"prefix": p})
	}
	b, _ := json.Marshal(map[string]any{"dynamodb": map[string]any{"Keys": map[string]any{f.Attribute: map[string]any{"S": match}}}})
	return string(b)
}

// Sweeper configures the periodic repair function.
type Sweeper struct {
	// Interval between sweeps (EventBridge schedule rate on AWS).
	Interval time.Duration
	// Tick, when set, makes each invocation sweep every Tick until the next
	// scheduled one is due. 0 sweeps once.
	Tick time.Duration
}

// Env is the complete settings of one environment.
type Env struct {
	// Name is dev, staging, prod or local.
	Name string
	// Prefix names the stack and the local runtime's resources.
	Prefix string
	// Queues are the push-mode queues, sorted by name.
	Queues []Queue
	// Functions holds the sizing per function name.
	Functions map[string]Function
	Stream    Stream
	Sweeper   Sweeper
	// EventTTL is how long lifecycle event items are kept.
	EventTTL time.Duration
	// WebhookRefresh is the stream function's OJS_WEBHOOK_REFRESH (0:
	// the default, 10 s).
	WebhookRefresh time.Duration
	// PublishEvents is the OJS_PUBLISH_EVENTS setting of the stream
	// function (empty: the default set).
	PublishEvents string
	// PublishPacked is the OJS_PUBLISH_PACKED setting of the stream
	// function (empty: events.DefaultPacked).
	PublishPacked string
	// EnqueueMeta is the api function's OJS_ENQUEUE_META (CDK context
	// enqueueMeta): meta keys every pushed job gets unless it sets them.
	EnqueueMeta string
	// FederationRegion is the api function's OJS_FEDERATION_REGION (CDK
	// context federationRegion; docs/federation.md).
	FederationRegion string
	// FetchWait is the api function's OJS_FETCH_WAIT (0 everywhere: a
	// waiting FETCH bills its duration).
	FetchWait time.Duration
	// PlainPayloads sets OJS_PLAIN_PAYLOADS on every function (CDK context
	// plainPayloads=true; docs/infrastructure.md).
	PlainPayloads bool
	// LogRetentionDays is the CloudWatch Logs retention.
	LogRetentionDays int
	// PointInTimeRecovery and DeletionProtection protect the table (prod).
	PointInTimeRecovery bool
	DeletionProtection  bool
	// Tracing turns on X-Ray active tracing (CDK context "tracing").
	Tracing bool
	// Capacity, when set, makes the table provisioned with auto scaling
	// (CDK context "capacity"); nil is on-demand.
	Capacity *Capacity
	// API is the HTTP API stage's throttling (not applied locally).
	API API
	// TrafficShift is how deployments move the functions' aliases to a
	// new version. Default ShiftAllAtOnce.
	TrafficShift TrafficShift
}

// Environments lists the names ForEnv accepts.
var Environments = []string{"dev", "staging", "prod", "local"}

// DefaultQueueName is the push-mode queue every environment has: jobs
// pushed to queue "lambda" run in the worker function.
const DefaultQueueName = "lambda"

// WebhookQueueName is the reserved push-mode queue every environment has
// for webhook deliveries (pkg/webhook): the worker function runs them.
const WebhookQueueName = "ojs.webhooks"

func baseEnv(name string) Env {
	worker := Function{MemoryMB: 512, Timeout: 60 * time.Second}
	return Env{
		Name:   name,
		Prefix: "ojs-" + name,
		Queues: []Queue{{Name: DefaultQueueName, BatchSize: 10, VisibilityTimeout: 6 * worker.Timeout, MaxReceiveCount: 5,
			MaxConcurrency: 50, DLQRetention: 14 * 24 * time.Hour},
			// Deliveries wait on receivers: at most 20 at once, so a slow
			// receiver cannot take the worker function's concurrency.
			{Name: WebhookQueueName, BatchSize: 10, VisibilityTimeout: 6 * worker.Timeout, MaxReceiveCount: 5,
				MaxConcurrency: 20, DLQRetention: 14 * 24 * time.Hour}},
		Functions: map[string]Function{
			FunctionAPI:    {MemoryMB: 512, Timeout: 29 * time.Second},
			FunctionWorker: worker,
			// Reserved so that API and worker bursts cannot starve the
			// stream function (it relays push jobs and advances workflows):
			// one concurrent invocation per stream shard is needed.
			FunctionStream:  {MemoryMB: 512, Timeout: 60 * time.Second, ReservedConcurrency: 10},
			FunctionSweeper: {MemoryMB: 256, Timeout: 120 * time.Second},
		},
		Stream: Stream{BatchSize: 100, MaxRetries: 10, BisectOnError: true, MaxRecordAge: 24 * time.Hour,
			PollInterval: 250 * time.Millisecond, Filter: StreamFilter},
		Sweeper:          Sweeper{Interval: time.Minute},
		API:              API{ThrottleRate: 200, ThrottleBurst: 400},
		EventTTL:         7 * 24 * time.Hour,
		LogRetentionDays: 14,
	}
}

// ForEnv returns the settings of the named environment. This function is
// the one documented place where environments differ.
func ForEnv(name string) (Env, error) {
	e := baseEnv(name)
	switch name {
	case "dev":
	case "local":
		// The offline stack is dev with a sweep every second, so that
		// time-driven moves happen within a second (the conformance suite).
		e.Sweeper.Tick = time.Second
		e.WebhookRefresh = time.Second
	case "staging":
		e.LogRetentionDays = 30
		// Rehearses prod's deployment: a broken release rolls back here.
		e.TrafficShift = ShiftCanary10Percent5Minutes
	case "prod":
		e.LogRetentionDays, e.PointInTimeRecovery, e.DeletionProtection = 90, true, true
		e.EventTTL = 30 * 24 * time.Hour
		e.Queues[0].MaxConcurrency = 200 // lambda (sorted below)
		e.API = API{ThrottleRate: 2000, ThrottleBurst: 4000}
		stream := e.Functions[FunctionStream]
		stream.ReservedConcurrency = 50
		e.Functions[FunctionStream] = stream
		e.TrafficShift = ShiftCanary10Percent5Minutes
	default:
		return Env{}, fmt.Errorf("topology: unknown environment %q (want one of %v)", name, Environments)
	}
	sort.Slice(e.Queues, func(i, j int) bool { return e.Queues[i].Name < e.Queues[j].Name })
	return e, nil
}
