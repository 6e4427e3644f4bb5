// Package localrt is the local runtime that plays AWS for the four
// functions on the offline stack: each function's bootstrap binary runs
// behind a local Lambda Runtime API, HTTP is served as API Gateway payload
// 2.0 events, SQS and DynamoDB Streams are polled into the worker and stream
// functions like Lambda's event source mappings, and the sweeper runs on its
// schedule. All settings come from pkg/topology.
package localrt

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/edge/apigw"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// DefaultAPIMaxConcurrency is the default Config.APIMaxConcurrency.
const DefaultAPIMaxConcurrency = 16

// Config configures a Runtime.
type Config struct {
	// Env is the topology to run (normally topology.ForEnv("local")).
	Env topology.Env
	// AWS is the SDK configuration pointing at the emulators; AWSEnv points
	// the functions at them (emulator.Emulators.Env()).
	AWS    aws.Config
	AWSEnv []string
	// BinDir holds <function>/bootstrap for each function.
	BinDir string
	// Table is the table name. Default Env.Prefix + "-jobs".
	Table string
	// APIAddr is the address the API listens on ("127.0.0.1:0": a free port).
	APIAddr string
	// Concurrency is the number of execution environments per function
	// (default 2). The api function may grow to APIMaxConcurrency when every
	// one is busy (default max(Concurrency, DefaultAPIMaxConcurrency)).
	Concurrency       int
	APIMaxConcurrency int
	// LogDir receives <function>.log. Default: discard.
	LogDir string
	// ExtraEnv is added to every function's environment.
	ExtraEnv []string
	// Logger receives the runtime's own logs. Default slog.Default().
	Logger *slog.Logger
	// DuplicateStreamRecords delivers every stream batch twice, as the
	// at-least-once Streams mapping may (the e2e suite).
	DuplicateStreamRecords bool
	// DuplicateSQSMessages is the probability (0..1) that the SQS mapping
	// puts a copy of a message it received back on its queue (the soak).
	DuplicateSQSMessages float64
	// Sweepers is the number of sweeper schedules running at once (default 1).
	Sweepers int
}

// Runtime is a running local stack.
type Runtime struct {
	cfg       Config
	log       *slog.Logger
	fns       map[string]*Function
	queueURLs map[string]string
	streamARN string
	api       *http.Server
	apiURL    string
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closers   []io.Closer // log files, the reset listener
	em        *emulator.Emulators

	statsMu sync.Mutex
	stats   map[string]int
	busy    map[string]time.Duration

	// lastRecord is when the stream last had records (Unix ns).
	lastRecord atomic.Int64
}

// Start provisions the table and queues, starts the functions and the
// event source mappings, and serves the API.
func Start(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 2
	}
	if cfg.APIMaxConcurrency <= 0 {
		cfg.APIMaxConcurrency = max(cfg.Concurrency, DefaultAPIMaxConcurrency)
	}
	cfg.Table = cmp.Or(cfg.Table, cfg.Env.Prefix+"-jobs")
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	rt := &Runtime{cfg: cfg, log: cfg.Logger, fns: map[string]*Function{}, stats: map[string]int{}, busy: map[string]time.Duration{}}
	if err := rt.start(ctx); err != nil {
		rt.Stop()
		return nil, err
	}
	return rt, nil
}

// StartWithEmulators starts the emulators (their output in
// cfg.LogDir/emulatorLog), points this process's AWS SDKs at them and starts
// the runtime on them; Stop stops both. Of cfg.AWS only its APIOptions are
// kept (added to the configuration loaded for the emulators).
func StartWithEmulators(ctx context.Context, cfg Config, emulatorLog string) (*Runtime, *emulator.Emulators, error) {
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, nil, err
	}
	logf, err := os.Create(filepath.Join(cfg.LogDir, emulatorLog))
	if err != nil {
		return nil, nil, err
	}
	em, err := emulator.Start(ctx, emulator.Options{Log: logf})
	if err == nil {
		em.SetEnv()
		opts := cfg.AWS.APIOptions
		if cfg.AWS, err = awsclient.Load(ctx); err == nil {
			cfg.AWS.APIOptions, cfg.AWSEnv = append(cfg.AWS.APIOptions, opts...), em.Env()
			var rt *Runtime
			if rt, err = Start(ctx, cfg); err == nil {
				rt.em, rt.closers = em, append(rt.closers, logf)
				return rt, em, nil
			}
		}
		em.Stop()
	}
	logf.Close()
	return nil, nil, err
}

func (rt *Runtime) start(ctx context.Context) error {
	cfg := rt.cfg
	var err error
	if rt.streamARN, rt.queueURLs, err = Provision(ctx, cfg.AWS, cfg.Env, cfg.Table); err != nil {
		return err
	}
	urls, _ := json.Marshal(rt.queueURLs)
	baseEnv := slices.Concat(cfg.AWSEnv, []string{topology.EnvTable + "=" + cfg.Table, topology.EnvPushQueues + "=" + string(urls)}, cfg.ExtraEnv)
	for _, name := range topology.FunctionNames {
		env := slices.Clone(baseEnv)
		conc := cfg.Concurrency
		switch name {
		case topology.FunctionSweeper:
			if cfg.Env.Sweeper.Tick > 0 {
				env = append(env, topology.EnvSweepTick+"="+cfg.Env.Sweeper.Tick.String())
			}
			conc = max(1, cfg.Sweepers) // one sweep at a time, unless Sweepers
		case topology.FunctionStream:
			env = append(env, topology.EnvEventTTL+"="+cfg.Env.EventTTL.String(), topology.EnvName+"="+cfg.Env.Name)
			if cfg.Env.WebhookRefresh > 0 {
				env = append(env, topology.EnvWebhookRefresh+"="+cfg.Env.WebhookRefresh.String())
			}
			conc = 1 // the stream mapping invokes serially per shard
		case topology.FunctionAPI:
			if cfg.Env.FetchWait > 0 {
				env = append(env, topology.EnvFetchWait+"="+cfg.Env.FetchWait.String())
			}
		}
		var logw io.Writer = io.Discard
		if cfg.LogDir != "" {
			f, err := os.OpenFile(filepath.Join(cfg.LogDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return err
			}
			rt.closers = append(rt.closers, f)
			logw = f
		}
		fn := &Function{Name: cfg.Env.Prefix + "-" + name, Binary: filepath.Join(cfg.BinDir, name, "bootstrap"), Env: env,
			Timeout: cfg.Env.Functions[name].Timeout, Concurrency: conc, Log: logw, Logger: rt.log}
		if name == topology.FunctionAPI {
			fn.MaxConcurrency = cfg.APIMaxConcurrency
		}
		if _, err := os.Stat(fn.Binary); err != nil {
			return fmt.Errorf("function %s: %w (build it with make build-local)", name, err)
		}
		if err := fn.Start(); err != nil {
			return err
		}
		rt.fns[name] = fn
	}
	runCtx, cancel := context.WithCancel(context.Background())
	rt.cancel = cancel
	addr := cmp.Or(cfg.APIAddr, "127.0.0.1:8080")
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	rt.apiURL = "http://" + l.Addr().String()
	rt.api = &http.Server{Handler: http.HandlerFunc(rt.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = rt.api.Serve(l) }()
	for _, q := range cfg.Env.Queues {
		for range min(cfg.Concurrency, q.MaxConcurrency) {
			rt.wg.Go(func() { rt.pollSQS(runCtx, q) })
		}
	}
	rt.wg.Go(func() { rt.pollStream(runCtx) })
	for range max(1, cfg.Sweepers) {
		rt.wg.Go(func() { rt.schedule(runCtx) })
	}
	return nil
}

func (rt *Runtime) count(key string) {
	rt.statsMu.Lock()
	rt.stats[key]++
	rt.statsMu.Unlock()
}

// URL is the API's base URL (http://host:port).
func (rt *Runtime) URL() string { return rt.apiURL }

// Table is the job table's name.
func (rt *Runtime) Table() string { return rt.cfg.Table }

// QueueURLs maps push-mode OJS queues to their SQS URLs.
func (rt *Runtime) QueueURLs() map[string]string { return rt.queueURLs }

// Invocations returns how many times each function was invoked, and how
// many SQS messages the mapping duplicated ("sqs.duplicated").
func (rt *Runtime) Invocations() map[string]int {
	rt.statsMu.Lock()
	defer rt.statsMu.Unlock()
	return maps.Clone(rt.stats)
}

// Restarts returns how many execution environments of each function were
// replaced after their process exited or timed out (a crash).
func (rt *Runtime) Restarts() map[string]int {
	return perFunction(rt.fns, func(fn *Function) int { return int(fn.restarts.Load()) })
}

// InvocationTime returns, per function, the total time its invocations
// took (from the invoke until the function's response, as Lambda bills
// duration; waiting for a free execution environment is not included).
func (rt *Runtime) InvocationTime() map[string]time.Duration {
	rt.statsMu.Lock()
	defer rt.statsMu.Unlock()
	return maps.Clone(rt.busy)
}

// InitTimes returns, per function, the init duration (process start to its
// first Runtime API "next") of each execution environment started so far.
func (rt *Runtime) InitTimes() map[string][]time.Duration {
	return perFunction(rt.fns, (*Function).InitTimes)
}

func perFunction[V any](fns map[string]*Function, f func(*Function) V) map[string]V {
	out := make(map[string]V, len(fns))
	for name, fn := range fns {
		out[name] = f(fn)
	}
	return out
}

// Invoke calls a function directly (tests use it to run the sweeper now).
func (rt *Runtime) Invoke(ctx context.Context, name string, payload []byte) ([]byte, error) {
	fn, ok := rt.fns[name]
	if !ok {
		return nil, fmt.Errorf("no function %q", name)
	}
	rt.count(name)
	var took time.Duration
	out, err := fn.invoke(ctx, payload, &took)
	rt.statsMu.Lock()
	rt.busy[name] += took
	rt.statsMu.Unlock()
	return out, err
}

// Stop stops the API, the pollers and the functions (and the emulators of
// StartWithEmulators).
func (rt *Runtime) Stop() {
	if rt.cancel != nil {
		rt.cancel()
	}
	if rt.api != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = rt.api.Shutdown(ctx)
		cancel()
	}
	rt.wg.Wait()
	for _, fn := range rt.fns {
		fn.Stop()
	}
	for _, c := range rt.closers {
		_ = c.Close()
	}
	if rt.em != nil {
		rt.em.Stop()
	}
}

// Provision creates, idempotently, what the CDK stack creates on AWS from the
// same topology: the job table with its stream and, per push-mode queue, an
// SQS queue with its redrive policy to a dead-letter queue. It returns the
// stream ARN and the push-mode queue URLs.
func Provision(ctx context.Context, cfg aws.Config, env topology.Env, table string) (string, map[string]string, error) {
	arn, err := emulator.EnsureTable(ctx, dynamodb.NewFromConfig(cfg, awsclient.DynamoDBOptions), table)
	if err != nil {
		return "", nil, err
	}
	client := sqs.NewFromConfig(cfg)
	urls := map[string]string{}
	for _, q := range env.Queues {
		dlq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q.DLQName(env.Prefix)),
			Attributes: map[string]string{"MessageRetentionPeriod": strconv.Itoa(int(q.DLQRetention.Seconds()))}})
		if err != nil {
			return "", nil, fmt.Errorf("create DLQ for %s: %w", q.Name, err)
		}
		attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			return "", nil, err
		}
		redrive, _ := json.Marshal(map[string]any{"deadLetterTargetArn": attrs.Attributes["QueueArn"], "maxReceiveCount": strconv.Itoa(q.MaxReceiveCount)})
		main, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q.SQSName(env.Prefix)), Attributes: map[string]string{
			"VisibilityTimeout": strconv.Itoa(int(q.VisibilityTimeout.Seconds())), "RedrivePolicy": string(redrive),
			// SQS (and the emulator) default to 1 MiB; the stack sets the
			// portable 256 KiB, and so does the local stack.
			"MaximumMessageSize": strconv.Itoa(awslimit.SQSMessageBytes)}})
		if err != nil {
			return "", nil, fmt.Errorf("create queue %s: %w", q.Name, err)
		}
		urls[q.Name] = aws.ToString(main.QueueUrl)
	}
	return arn, urls, nil
}

// serveHTTP plays API Gateway: the request becomes a payload 2.0 event, the
// api function's response the HTTP response; an event over Lambda's 6 MB is
// a 413, a response over it a 500.
func (rt *Runtime) serveHTTP(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 10<<20) // API Gateway's payload limit
	ev, err := apigw.Event(r, uuid.NewString(), time.Now())
	if err != nil {
		http.Error(w, `{"message":"Request Entity Too Large"}`, http.StatusRequestEntityTooLarge)
		return
	}
	payload, _ := json.Marshal(ev)
	out, err := rt.Invoke(r.Context(), topology.FunctionAPI, payload)
	if tooLarge, ok := errors.AsType[*RequestTooLargeError](err); ok {
		rt.log.Warn("api request too large for Lambda", "event_bytes", tooLarge.Bytes)
		writeMessage(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
		return
	}
	if err != nil {
		rt.log.Error("api invocation failed", "error", err.Error())
		writeMessage(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	var res events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &res); err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	_ = apigw.WriteResponse(w, res)
}

func writeMessage(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"message":%q}`, msg)
}

// sqsIdleAfter is how many empty short polls in a row put a poller into
// long polls (sqsLongPoll).
const sqsIdleAfter = 5

// sqsLongPoll is the wait of an idle poller's receive: it asks for one
// message, which the emulator answers as soon as one arrives (it answers a
// long poll for more only once it holds them all, or at the end of the
// wait). An idle queue's pollers then cost a request every 20 s each, as
// AWS's long-polling mapping does, and the first message after an idle
// spell is received at once.
const sqsLongPoll = 20 * time.Second

// sqsIdlePause is how long a busy poller waits after its n-th empty
// receive in a row (n < sqsIdleAfter): 20 ms, doubling.
func sqsIdlePause(n int) time.Duration {
	return 10 * time.Millisecond << min(n, sqsIdleAfter)
}

// pollSQS is one poller of the SQS event source mapping of queue q. While
// messages come it short-polls for full batches, pausing briefly after an
// empty answer (sqsIdlePause); after sqsIdleAfter empty answers in a row
// it long-polls for one message (sqsLongPoll) until one comes.
func (rt *Runtime) pollSQS(ctx context.Context, q topology.Queue) {
	client := sqs.NewFromConfig(rt.cfg.AWS)
	url := rt.queueURLs[q.Name]
	arn := "arn:aws:sqs:us-east-1:000000000000:" + q.SQSName(rt.cfg.Env.Prefix)
	for empty := 0; ctx.Err() == nil; {
		in := &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: int32(q.BatchSize), WaitTimeSeconds: 0,
			VisibilityTimeout:           int32(q.VisibilityTimeout.Seconds()),
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		}
		if empty >= sqsIdleAfter {
			in.MaxNumberOfMessages, in.WaitTimeSeconds = 1, int32(sqsLongPoll.Seconds())
		}
		out, err := client.ReceiveMessage(ctx, in)
		if err != nil {
			if ctx.Err() == nil {
				rt.log.Warn("sqs receive failed", "queue", q.Name, "error", err.Error())
				ctxsleep.Sleep(ctx, time.Second)
			}
			continue
		}
		if len(out.Messages) == 0 {
			if empty++; empty < sqsIdleAfter {
				ctxsleep.Sleep(ctx, sqsIdlePause(empty))
			}
			continue
		}
		empty = 0
		if p := rt.cfg.DuplicateSQSMessages; p > 0 {
			for _, m := range out.Messages {
				if rand.Float64() < p {
					if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: m.Body}); err == nil {
						rt.count("sqs.duplicated")
					}
				}
			}
		}
		ev := events.SQSEvent{Records: make([]events.SQSMessage, len(out.Messages))}
		for i, m := range out.Messages {
			rec := events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
				Body: aws.ToString(m.Body), Md5OfBody: aws.ToString(m.MD5OfBody), Attributes: m.Attributes,
				MessageAttributes: map[string]events.SQSMessageAttribute{}, EventSource: "aws:sqs", EventSourceARN: arn, AWSRegion: "us-east-1"}
			for k, v := range m.MessageAttributes {
				rec.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
			}
			ev.Records[i] = rec
		}
		payload, _ := json.Marshal(ev)
		res, err := rt.Invoke(ctx, topology.FunctionWorker, payload)
		if err != nil {
			rt.log.Warn("worker invocation failed; the batch will be redelivered", "queue", q.Name, "error", err.Error())
			continue
		}
		var resp events.SQSEventResponse
		_ = json.Unmarshal(res, &resp)
		var del []sqstypes.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			if !slices.ContainsFunc(resp.BatchItemFailures, func(f events.SQSBatchItemFailure) bool { return f.ItemIdentifier == aws.ToString(m.MessageId) }) {
				del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
		}
		if len(del) > 0 {
			if _, err := client.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del}); err != nil {
				rt.log.Warn("sqs delete failed", "queue", q.Name, "error", err.Error())
			}
		}
	}
}

// schedule invokes the sweeper every Sweeper.Interval, skipping a tick
// while the previous sweep still runs (as a rate schedule with reserved
// concurrency 1 would).
func (rt *Runtime) schedule(ctx context.Context) {
	interval := rt.cfg.Env.Sweeper.Interval
	for {
		start := time.Now()
		ev := map[string]any{"version": "0", "id": uuid.NewString(), "detail-type": "Scheduled Event", "source": "aws.events",
			"account": "000000000000", "time": time.Now().UTC().Format(time.RFC3339), "region": "us-east-1", "resources": []string{}, "detail": map[string]any{}}
		payload, _ := json.Marshal(ev)
		if _, err := rt.Invoke(ctx, topology.FunctionSweeper, payload); err != nil && ctx.Err() == nil {
			rt.log.Warn("sweeper invocation failed", "error", err.Error())
		}
		if !ctxsleep.Sleep(ctx, time.Until(start.Add(interval))) {
			return
		}
	}
}
