// Package app wires the product's components from the environment once per
// cold start: AWS clients (honouring endpoint overrides), the job store, the
// queue and lifecycle services, the SQS dispatcher and a JSON slog logger. Each
// functions/<name>/main.go calls Load and starts its handler.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"github.com/ojs-aws/ojs-serverless/pkg/console"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/dispatch"
	"github.com/ojs-aws/ojs-serverless/pkg/engine"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/schema"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
	"github.com/ojs-aws/ojs-serverless/pkg/webhook"
	"github.com/ojs-aws/ojs-serverless/pkg/wfevents"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// App holds the wired components.
type App struct {
	// Admin is the Admin API service (/ojs/v1/admin and the web console).
	Admin *admin.Service
	// Console is the web console served by the API function.
	Console *console.Console
	Logger  *slog.Logger
	Store   *store.Store
	// Events is the event log in the same table, through Store's client.
	Events *events.Store
	// Queues reads and writes the queue registry and the worker items.
	Queues *queue.Store
	// QueueService admits jobs, and pauses, lists and counts queues.
	QueueService *queue.Service
	Service      *lifecycle.Service
	// DeadLetter is the dead letter queue: its API operations and, from
	// the sweeper, its retention.
	DeadLetter *deadletter.Service
	// PushQueues are the push-mode queue names.
	PushQueues []string
	// pushURLs are their SQS queues (Dispatcher sends to them).
	pushURLs map[string]string
	// Workflows creates, advances and reads workflows.
	Workflows *workflow.Engine
	// Crons registers cron schedules and fires them (from the sweeper).
	Crons *cron.Service
	// Schemas is the schema registry PUSH validates args against.
	Schemas *schema.Registry
	// Webhooks are the webhook subscriptions (the stream function's
	// Fanout reads them, the worker function's Deliverer signs with them).
	Webhooks *webhook.Store
	// EventTTL is OJS_EVENT_TTL (default 7 days).
	EventTTL time.Duration
	// AWS is the clients' configuration, for the clients only one
	// function needs (the stream function's EventBridge publisher), so
	// that no other binary links them.
	AWS aws.Config
	// Table is OJS_TABLE.
	Table string
	// AuthToken is OJS_AUTH_TOKEN (empty: no bearer auth in the function);
	// FetchWait is OJS_FETCH_WAIT.
	AuthToken string
	FetchWait time.Duration
	// Region is OJS_FEDERATION_REGION ("": none; docs/federation.md).
	Region string
}

// apiSettings reads the api function's OJS_FETCH_WAIT and
// OJS_FEDERATION_REGION.
func apiSettings() (wait time.Duration, region string, err error) {
	if v := os.Getenv(topology.EnvFetchWait); v != "" {
		if wait, err = topology.ParseFetchWait(v); err != nil {
			return 0, "", fmt.Errorf("%s: %w", topology.EnvFetchWait, err)
		}
	}
	if v := os.Getenv(topology.EnvFederationRegion); v != "" {
		if region, err = topology.ParseRegion(v); err != nil {
			return 0, "", fmt.Errorf("%s: %w", topology.EnvFederationRegion, err)
		}
	}
	return wait, region, nil
}

// Logger returns a JSON slog logger at the level named by OJS_LOG_LEVEL.
// Lines logged with an invocation's context carry its Lambda request id
// (see NewLogger).
func Logger() *slog.Logger {
	return NewLogger(os.Stdout, os.Getenv(topology.EnvLogLevel))
}

// Load builds the components from the environment: OJS_TABLE (required),
// the other OJS_* variables of pkg/topology and the AWS SDK's.
func Load(ctx context.Context) (*App, error) {
	log := Logger()
	slog.SetDefault(log)
	table := os.Getenv(topology.EnvTable)
	if table == "" {
		return nil, fmt.Errorf("%s is not set", topology.EnvTable)
	}
	urls, err := dispatch.ParseQueueURLs(os.Getenv(topology.EnvPushQueues))
	if err != nil {
		return nil, err
	}
	cfg, err := awsclient.Load(ctx)
	if err != nil {
		return nil, err
	}
	ttl := 7 * 24 * time.Hour
	if v := os.Getenv(topology.EnvEventTTL); v != "" {
		if ttl, err = time.ParseDuration(v); err != nil || ttl <= 0 {
			return nil, fmt.Errorf("%s=%q is not a positive duration", topology.EnvEventTTL, v)
		}
	}
	resultTTL, queueTTLs, err := resultTTLs()
	if err != nil {
		return nil, err
	}
	var redeliver time.Duration
	if v := os.Getenv(topology.EnvRedeliverAfter); v != "" {
		if redeliver, err = time.ParseDuration(v); err != nil || redeliver <= 0 {
			return nil, fmt.Errorf("%s=%q is not a positive duration", topology.EnvRedeliverAfter, v)
		}
	}
	wait, region, err := apiSettings()
	if err != nil {
		return nil, err
	}
	if v := os.Getenv(topology.EnvPlainPayloads); v != "" {
		plain, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q is not a boolean", topology.EnvPlainPayloads, v)
		}
		store.SetPlainWrites(plain)
	}
	refresh := webhook.DefaultRefresh
	if v := os.Getenv(topology.EnvWebhookRefresh); v != "" {
		if refresh, err = time.ParseDuration(v); err != nil || refresh <= 0 {
			return nil, fmt.Errorf("%s=%q is not a positive duration", topology.EnvWebhookRefresh, v)
		}
	}
	async := workflow.DefaultAsyncItems
	if v := os.Getenv(topology.EnvAsyncCreateItems); v != "" {
		if async, err = strconv.Atoi(v); err != nil || async < 0 {
			return nil, fmt.Errorf("%s=%q is not a count", topology.EnvAsyncCreateItems, v)
		}
	}
	ret, err := deadletter.ParseRetention(os.Getenv(topology.EnvDeadMaxAge), os.Getenv(topology.EnvDeadMaxCount), os.Getenv(topology.EnvDeadPruneInterval))
	if err != nil {
		return nil, fmt.Errorf("dead letter retention: %w", err)
	}
	st := store.New(dynamodb.NewFromConfig(cfg, awsclient.DynamoDBOptions), table)
	whs := webhook.NewStore(st.DB(), st.Table())
	whs.Refresh = refresh
	evs := events.NewStore(st.DB(), st.Table())
	push := slices.Collect(maps.Keys(urls))
	qs := queue.NewStore(st.DB(), st.Table())
	qsvc := queue.NewService(st, queue.Config{PushQueues: push, Store: qs, Events: evs, Logger: log, ResultTTLs: queueTTLs})
	// Workflow jobs are admitted like every job, and a request that
	// finishes a workflow job advances its workflow before it answers.
	wfs := workflow.New(st, workflow.Config{Admit: qsvc, PushQueues: push, Logger: log, RedeliverAfter: redeliver, AsyncItems: async,
		ResultTTL: resultTTL, QueueResultTTLs: queueTTLs})
	schemas := schema.New(st.DB(), st.Table(), nil)
	defMeta, err := lifecycle.ParseDefaultMeta(os.Getenv(topology.EnvEnqueueMeta))
	if err != nil {
		return nil, err
	}
	var chain []lifecycle.EnqueueMiddleware
	if defMeta != nil {
		chain = append(chain, lifecycle.DefaultMeta(defMeta))
	}
	svc := lifecycle.New(st, lifecycle.Config{Logger: log, RedeliverAfter: redeliver, Workflows: wfs, Queues: qsvc, ResultTTL: resultTTL, Schemas: schemas,
		Middleware: chain})
	dead := deadletter.New(st, svc, qsvc, deadletter.Config{Retention: ret, Logger: log})
	a := &App{
		Admin:  admin.New(st, qs, svc, qsvc, dead, admin.Config{Logger: log, Events: evs}),
		Logger: log, Store: st, Events: evs, Queues: qs, QueueService: qsvc, PushQueues: push, pushURLs: urls, EventTTL: ttl, AWS: cfg, Table: table,
		Service: svc, DeadLetter: dead, Schemas: schemas, Workflows: wfs, Webhooks: whs, AuthToken: os.Getenv(topology.EnvAuthToken), FetchWait: wait, Region: region,
		Crons: &cron.Service{Store: cron.NewStore(st), Jobs: svc, Queues: qsvc, Logger: log},
	}
	a.Console, err = console.New(console.Config{Admin: a.Admin, Workflows: a.Workflows, Crons: a.Crons, AuthToken: a.AuthToken,
		IsPush: qsvc.IsPush, Webhooks: whs, RateLimits: qsvc, Tenants: qsvc.Tenants(), TenantEvents: evs, Logger: log})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Dispatcher sends push-mode jobs to their SQS queues (the stream,
// worker and sweeper functions; the API function sends nothing to SQS,
// so its binary links no SQS client).
func (a *App) Dispatcher() *dispatch.Dispatcher {
	return dispatch.New(sqs.NewFromConfig(a.AWS), a.pushURLs)
}

// StreamEngine is the stream function's engine: SQS relay, stored events,
// their webhook deliveries and workflow advancement; the stream function
// sets its Publisher when a bus is configured (eventbus.FromEnv).
func (a *App) StreamEngine() *engine.Engine {
	return &engine.Engine{Sender: a.Dispatcher(), Workflows: a.Workflows, WorkflowEvents: wfevents.New(a.Store), Logger: a.Logger, Events: a.Events,
		EventTTL: a.EventTTL, Source: "ojs://" + a.Table + "/engine",
		Webhooks: &webhook.Fanout{Subs: a.Webhooks, Admit: a.QueueService, Jobs: a.Store, RedeliverAfter: a.Service.RedeliverAfter(), Logger: a.Logger},
		Keys:     a.QueueService.Keys()}
}

// Must exits the process with a JSON log line when err is not nil: used
// only at cold start, never in a request path.
func Must(err error) {
	if err != nil {
		slog.Error("cold start failed", "error", err.Error())
		os.Exit(1)
	}
}

// resultTTLs reads OJS_RESULT_TTL (seconds; nil when unset) and
// OJS_QUEUE_RESULT_TTL (a JSON object: queue name to seconds), each -1, 0
// or up to job.MaxResultTTL.
func resultTTLs() (*int64, map[string]int64, error) {
	bad := func(n int64) bool { return n < job.PermanentResultTTL || n > job.MaxResultTTL }
	var def *int64
	if v := os.Getenv(topology.EnvResultTTL); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || bad(n) {
			return nil, nil, fmt.Errorf("%s=%q must be -1, 0 or a number of seconds up to %d", topology.EnvResultTTL, v, job.MaxResultTTL)
		}
		def = &n
	}
	var perQueue map[string]int64
	if v := os.Getenv(topology.EnvQueueResultTTL); v != "" {
		err := json.Unmarshal([]byte(v), &perQueue)
		for _, n := range perQueue {
			if bad(n) {
				err = errors.New("out of range")
			}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s=%q must be a JSON object of queue names to -1, 0 or a number of seconds up to %d", topology.EnvQueueResultTTL, v, job.MaxResultTTL)
		}
	}
	return def, perQueue, nil
}
