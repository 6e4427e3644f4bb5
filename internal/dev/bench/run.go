package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
	"github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

// Options configure a run.
type Options struct {
	// BinDir holds <function>/bootstrap built for this machine (make build-local).
	BinDir string
	// RootDir is the module root (for the linux/arm64 size builds).
	RootDir  string
	Settings Settings
	// PacedJobs and PacedRate: the latency phases push this many jobs
	// (and a tenth as many chains) at this rate per second.
	PacedJobs int
	PacedRate float64
	// Big runs the large batch: BigWorkflows batches of BigWidth jobs.
	Big          bool
	BigWorkflows int
	BigWidth     int
	// CreateWidth is the size of the group and the batch whose creation is
	// timed; 0 skips it.
	CreateWidth int
	// SkipArm64 skips the linux/arm64 size builds.
	SkipArm64 bool
	// Progress receives the progress bars (stderr); nil draws none.
	Progress io.Writer
	Logger   *slog.Logger
	// LogDir receives the functions' and emulators' logs.
	LogDir string
}

// Queues the benchmark uses: the push-mode queue of the topology, and one
// pull-mode queue per workload so that phases never see each other's jobs.
const (
	pushQueue = topology.DefaultQueueName
	echoType  = "test.echo"
)

type bencher struct {
	o       Options
	log     *slog.Logger
	rt      *localrt.Runtime
	env     topology.Env
	http    *http.Client
	base    string
	mon     *store.Store
	wfmon   *wfstore.Store
	db      *dynamodb.Client // uncounted, for the table's size
	table   string
	esm     *callstats.Recorder
	stats   string
	mu      sync.Mutex
	client  map[string]int
	empties atomic.Int64
	payload json.RawMessage // argsPayload(Settings.ArgsBytes), in every measured job
}

// Run starts the emulators and the local runtime on free ports, runs every
// phase, and returns the result; everything it started is stopped.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.Logger = cmp.Or(o.Logger, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	res := &Result{StartedAt: time.Now().UTC(), Settings: o.Settings, Prices: USEast1.Table(),
		Machine: Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version()}}
	begin := time.Now()
	var err error
	if res.Binaries, err = Binaries(ctx, o.RootDir, o.BinDir, !o.SkipArm64); err != nil {
		return nil, err
	}
	statsDir, err := os.MkdirTemp("", "ojs-bench-stats-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(statsDir)
	bus := httptest.NewServer(http.HandlerFunc(putEvents))
	defer bus.Close()

	b := &bencher{o: o, log: o.Logger, esm: callstats.New("mapping"), stats: statsDir, client: map[string]int{}, payload: argsPayload(o.Settings.ArgsBytes), table: "bench"}
	b.env, _ = topology.ForEnv("local")
	// The sweeper as on AWS: once a minute, no ticking (nothing on the
	// happy path needs it; its cost is reported apart).
	b.env.Sweeper.Tick = 0
	b.env.Sweeper.Interval = time.Minute
	o.Logger.Info("starting the emulators and the local runtime", "bin", o.BinDir, "concurrency", o.Settings.Concurrency)
	// The api function keeps Concurrency environments (more were slower
	// here: the two cores are shared with the emulators), and grows by one
	// for each pull worker that may be waiting in a FETCH.
	apiMax := o.Settings.Concurrency
	if o.Settings.FetchWaitMS > 0 {
		apiMax += o.Settings.Workers
	}
	var em *emulator.Emulators
	b.rt, em, err = localrt.StartWithEmulators(ctx, localrt.Config{Env: b.env, AWS: aws.Config{APIOptions: []func(*middleware.Stack) error{b.esm.AddMiddleware}},
		BinDir: o.BinDir, APIAddr: "127.0.0.1:0", Table: b.table, Concurrency: o.Settings.Concurrency, APIMaxConcurrency: apiMax, LogDir: o.LogDir, Logger: o.Logger,
		ExtraEnv: []string{callstats.EnvDir + "=" + statsDir, topology.EnvLogLevel + "=" + topology.DefaultLogLevel, topology.EnvEventBus + "=ojs-bench", "AWS_ENDPOINT_URL_EVENTBRIDGE=" + bus.URL}}, "bench-emulators.log")
	if err != nil {
		return nil, err
	}
	defer b.rt.Stop()
	cfg, err := awsclient.Load(ctx) // uncounted: the benchmark's own reads
	if err != nil {
		return nil, err
	}
	b.base = b.rt.URL() + "/ojs/v1"
	b.http = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}
	b.db = dynamodb.NewFromConfig(cfg, awsclient.DynamoDBOptions)
	b.mon = store.New(b.db, b.table)
	b.wfmon = wfstore.New(b.mon)

	if err := b.warmUp(ctx); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	first, err := b.quiet(ctx)
	if err != nil {
		return nil, err
	}
	if res.EmptyFetch, err = b.calibrateEmptyFetch(ctx); err != nil {
		return nil, err
	}
	s := o.Settings
	for _, w := range []struct {
		kind, suffix string
		n            int
		rate         float64
	}{{"jobs", "", s.Jobs, 0}, {"chains", "", s.Chains, 0}, {"graphs", "", s.Graphs, 0}, {"batches", "", s.Batches, 0},
		{"jobs", " paced", o.PacedJobs, o.PacedRate}, {"chains", " paced", o.PacedJobs / 10, o.PacedRate / 10}} {
		for _, mode := range []string{"push", "pull"} {
			name := mode + " " + w.kind + w.suffix
			if w.n <= 0 {
				continue
			}
			p, err := b.runPhase(ctx, name, mode, w.kind, w.n, w.rate, res.EmptyFetch.DynamoDB)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			res.Phases = append(res.Phases, p)
		}
	}
	if s.Jobs > 0 {
		split, err := b.splitRun(ctx, s.Jobs, res.EmptyFetch.DynamoDB)
		if err != nil {
			return nil, fmt.Errorf("enqueue and fetch apart: %w", err)
		}
		res.Split = &split
	}
	if o.CreateWidth > 0 {
		res.Create = b.createRun(ctx, o.CreateWidth)
	}
	if o.Big {
		res.Big = b.bigRun(ctx, o.BigWorkflows, o.BigWidth)
	} else {
		res.Big = BigRun{Note: fmt.Sprintf("set BENCH_BIG=1 to run it: %d batches of %d jobs in push mode, each with a callback (a workflow holds at most %d jobs)",
			max(o.BigWorkflows, 1), o.BigWidth, wfdef.MaxJobs)}
	}
	last, err := b.quiet(ctx)
	if err != nil {
		return nil, err
	}
	res.Sweeper = sweeperCost(last.sub(first), b.env)
	res.Idle = IdleCost(res.Sweeper, b.env)
	res.InitUnderLoad, res.Init = map[string]Latency{}, map[string]Latency{}
	for fn, ds := range b.rt.InitTimes() {
		res.InitUnderLoad[fn] = Summarize(ds)
	}
	// Cold starts one at a time against a stub Runtime API, with the
	// environment the functions get from the local runtime.
	urls, _ := json.Marshal(b.rt.QueueURLs())
	initEnv := append(em.Env(), topology.EnvTable+"=bench", topology.EnvPushQueues+"="+string(urls))
	for _, fn := range topology.FunctionNames {
		ds, err := MeasureInit(ctx, filepath.Join(o.BinDir, fn, "bootstrap"), initEnv, 7)
		if err != nil {
			return nil, fmt.Errorf("init time of %s: %w", fn, err)
		}
		res.Init[fn] = Summarize(ds)
	}
	res.StepFunctions = USEast1.StepFunctionsCost(3, 0.1)
	res.Targets = Targets(res)
	res.Seconds = round(time.Since(begin).Seconds(), 1)
	return res, nil
}

// snap is the cumulative state of the counters at one moment.
type snap struct {
	fns  map[string]callstats.Set
	esm  callstats.Set
	inv  map[string]int
	busy map[string]time.Duration
}

func (b *bencher) snapshot() (snap, error) {
	files, err := callstats.ReadDir(b.stats)
	if err != nil {
		return snap{}, err
	}
	s := snap{fns: map[string]callstats.Set{}, esm: b.esm.Set(), inv: b.rt.Invocations(), busy: b.rt.InvocationTime()}
	for proc, set := range files {
		s.fns[strings.TrimPrefix(proc, b.env.Prefix+"-")] = set
	}
	return s, nil
}

func (s snap) sub(before snap) Delta {
	d := Delta{Functions: map[string]callstats.Set{}, ESM: s.esm.Sub(before.esm), Invocations: minus(s.inv, before.inv), Busy: minus(s.busy, before.busy)}
	for fn, set := range s.fns {
		d.Functions[fn] = set.Sub(before.fns[fn])
	}
	return d
}

// minus is now - then, key by key (the keys of now).
func minus[V int | int64 | time.Duration](now, then map[string]V) map[string]V {
	out := make(map[string]V, len(now))
	for k, v := range now {
		out[k] = v - then[k]
	}
	return out
}

// activity is what must stop changing for the stack to be quiet: the
// engine functions' requests and invocations (the sweeper and the pollers'
// idle requests go on regardless).
func (s snap) activity() string {
	var sb strings.Builder
	for _, fn := range EngineFunctions {
		fmt.Fprintf(&sb, "%s:%d;", fn, s.inv[fn])
		for _, o := range s.fns[fn].Ops() {
			fmt.Fprintf(&sb, "%s=%d;", o.Key(), o.Attempts)
		}
	}
	return sb.String()
}

// quiet waits until nothing changed for 1.5 s (the functions flush their
// counts every 200 ms) and returns the snapshot.
func (b *bencher) quiet(ctx context.Context) (snap, error) {
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	stable := 0
	for {
		s, err := b.snapshot()
		if err != nil {
			return snap{}, err
		}
		if a := s.activity(); a == last {
			stable++
			if stable >= 6 {
				return s, nil
			}
		} else {
			last, stable = a, 0
		}
		if time.Now().After(deadline) {
			b.log.Warn("the stack did not go quiet within 2 minutes; counting anyway")
			return s, nil
		}
		if !ctxsleep.Sleep(ctx, 250*time.Millisecond) {
			return snap{}, ctx.Err()
		}
	}
}

// measure runs f between two quiet moments, the client requests and empty
// FETCHes counted afresh, and returns what happened on AWS meanwhile.
func (b *bencher) measure(ctx context.Context, f func() error) (Delta, error) {
	before, err := b.quiet(ctx)
	if err != nil {
		return Delta{}, err
	}
	b.takeClientCounts()
	b.empties.Store(0)
	kept, err := b.footprint(ctx)
	if err != nil {
		return Delta{}, err
	}
	if err := f(); err != nil {
		return Delta{}, err
	}
	after, err := b.quiet(ctx)
	if err != nil {
		return Delta{}, err
	}
	now, err := b.footprint(ctx)
	if err != nil {
		return Delta{}, err
	}
	d := after.sub(before)
	d.LogBytes, d.StoredBytes = minus(now.logs, kept.logs), now.stored-kept.stored
	return d, nil
}

// do sends one API request, counting it under label.
func (b *bencher) do(ctx context.Context, label, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	b.mu.Lock()
	b.client[label]++
	b.mu.Unlock()
	resp, err := b.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(raw, out)
	}
	return resp.StatusCode, nil
}

func (b *bencher) takeClientCounts() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.client
	b.client = map[string]int{}
	return out
}

// jobBody is an echo job on queue whose args are idx (and the payload).
func jobBody(queue string, payload json.RawMessage, idx ...int) map[string]any {
	args := make([]any, 0, len(idx)+1)
	for _, i := range idx {
		args = append(args, i)
	}
	if len(payload) > 0 {
		args = append(args, payload)
	}
	return map[string]any{"type": echoType, "args": args, "options": map[string]any{"queue": queue}}
}

// argsPayload is about n bytes of JSON a job might carry (Settings.ArgsBytes):
// ledger rows, which compress as business JSON does; nil for 0.
func argsPayload(n int) json.RawMessage {
	if n <= 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("[")
	for i := 0; b.Len() < n-60; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"entry":%d,"account":"DE%020d","amount":"%d.%02d"}`, i, i*7919, (i*37)%5000, i%100)
	}
	b.WriteString("]")
	return json.RawMessage(b.String())
}

// push enqueues one job and returns its id.
func (b *bencher) push(ctx context.Context, queue string, i int) (string, error) {
	id, _, err := b.create(ctx, "/jobs", jobBody(queue, b.payload, i))
	return id, err
}

// create POSTs body to /jobs or /workflows and returns the id of the job or
// workflow created, and the status.
func (b *bencher) create(ctx context.Context, path string, body any) (string, int, error) {
	var out struct{ Job, Workflow struct{ ID string } }
	status, err := b.do(ctx, "POST "+path, http.MethodPost, path, body, &out)
	id := cmp.Or(out.Job.ID, out.Workflow.ID)
	if err == nil && id == "" {
		err = fmt.Errorf("POST %s: no %s id in the response", path, strings.TrimSuffix(path[1:], "s"))
	}
	return id, status, err
}

// workflowBody is a 3-step chain, a 4-step diamond graph (a; b and c
// after a; d after both) or a batch of width jobs with an on_complete
// callback.
func workflowBody(kind, queue string, i, width int, payload json.RawMessage) map[string]any {
	switch kind {
	case "graphs":
		step := func(id string, s int, deps ...string) map[string]any {
			j := jobBody(queue, payload, i, s)
			delete(j, "options")
			j["id"], j["depends_on"] = id, append([]string{}, deps...)
			return j
		}
		return map[string]any{"name": "bench-graph", "options": map[string]any{"queue": queue},
			"steps": []any{step("a", 0), step("b", 1, "a"), step("c", 2, "a"), step("d", 3, "b", "c")}}
	case "chains":
		return map[string]any{"type": "chain", "name": "bench-chain",
			"steps": []any{jobBody(queue, payload, i, 0), jobBody(queue, payload, i, 1), jobBody(queue, payload, i, 2)}}
	}
	jobs := make([]any, width)
	for j := range jobs {
		jobs[j] = jobBody(queue, payload, i, j)
	}
	return map[string]any{"type": "batch", "name": "bench-batch", "jobs": jobs,
		"callbacks": map[string]any{"on_complete": jobBody(queue, payload, i)}}
}

// enqueue runs create(i) for i in [0, n) on the given number of clients;
// with rate > 0 item i is sent no earlier than i/rate seconds after start.
func enqueue(ctx context.Context, n, clients int, rate float64, create func(context.Context, int) error) error {
	var next atomic.Int64
	start := time.Now()
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if rate > 0 {
					if !ctxsleep.Sleep(ctx, time.Until(start.Add(time.Duration(float64(i)/rate*float64(time.Second))))) {
						return
					}
				}
				if err := create(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// pullWorkers fetch from queue, up to count jobs a FETCH, and acknowledge
// until want jobs were acknowledged, backing off (5 ms doubling up to
// Settings.FetchBackoffMS) after an empty FETCH unless it waited
// (Settings.FetchWaitMS). It returns the time of the last acknowledgement.
func (b *bencher) pullWorkers(ctx context.Context, queue string, want, count int, prog *Progress) (time.Time, error) {
	var acked atomic.Int64
	var lastAck atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for w := range b.o.Settings.Workers {
		wg.Go(func() {
			backoff := 5 * time.Millisecond
			maxBackoff := time.Duration(cmp.Or(max(b.o.Settings.FetchBackoffMS, 0), 50)) * time.Millisecond
			for ctx.Err() == nil && acked.Load() < int64(want) {
				var out struct{ Jobs []struct{ ID string } }
				req := map[string]any{"queues": []string{queue}, "count": count, "worker_id": fmt.Sprintf("bench-%d", w)}
				if wait := b.o.Settings.FetchWaitMS; wait > 0 {
					req["wait_ms"] = wait
				}
				if _, err := b.do(ctx, "POST /workers/fetch", http.MethodPost, "/workers/fetch", req, &out); err != nil {
					cancel(err) // a no-op once cancelled: the first cause stays
					return
				}
				if len(out.Jobs) == 0 {
					b.empties.Add(1)
					if b.o.Settings.FetchWaitMS <= 0 { // else the FETCH waited
						ctxsleep.Sleep(ctx, backoff)
						backoff = min(2*backoff, maxBackoff)
					}
					continue
				}
				backoff = 5 * time.Millisecond
				for _, j := range out.Jobs {
					if _, err := b.do(ctx, "POST /workers/ack", http.MethodPost, "/workers/ack", map[string]any{"job_id": j.ID, "result": map[string]any{"ok": true}}, nil); err != nil {
						cancel(err)
						return
					}
					lastAck.Store(time.Now().UnixNano())
					n := acked.Add(1)
					prog.Set(int(n))
					if n >= int64(want) {
						cancel(nil) // ends the other workers' waiting FETCHes
					}
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && acked.Load() < int64(want) {
		return time.Time{}, err
	}
	return time.Unix(0, lastAck.Load()), nil
}

// splitQueue is the pull-mode queue of splitRun's backlog drained count
// jobs a FETCH.
func splitQueue(count int) string { return fmt.Sprintf("bench-split-%d", count) }

// splitRun measures enqueueing and fetching apart (SplitRun); an empty FETCH
// costs emptyFetchCost DynamoDB requests, left out of the requests per job.
func (b *bencher) splitRun(ctx context.Context, n int, emptyFetchCost float64) (SplitRun, error) {
	r := SplitRun{Jobs: n, FetchCount: b.o.Settings.FetchCount}
	// measured runs f, its progress bar labelled label, between two quiet
	// moments and returns n jobs over the time f reports, and the DynamoDB
	// requests per job it made (empty FETCH polls left out).
	measured := func(label string, f func(*Progress) (time.Duration, error)) (rate, perJob float64, err error) {
		prog := NewProgress(b.o.Progress, label, n)
		defer prog.Done()
		var took time.Duration
		d, err := b.measure(ctx, func() (err error) {
			took, err = f(prog)
			return err
		})
		if err != nil {
			return 0, 0, err
		}
		per, _ := Account(d, n, b.env, int(b.empties.Load()), emptyFetchCost)
		return round(float64(n)/took.Seconds(), 1), round(per.DynamoDB-per.EmptyFetchDynamoDB, 2), nil
	}
	counts := []int{1}
	if r.FetchCount > 1 {
		counts = append(counts, r.FetchCount)
	}
	for i, count := range counts {
		queue := splitQueue(count)
		var mu sync.Mutex
		var lat []time.Duration
		rate, perJob, err := measured(fmt.Sprintf("enqueue (%d)", i+1), func(prog *Progress) (time.Duration, error) {
			start := time.Now()
			err := enqueue(ctx, n, b.o.Settings.Clients, 0, func(ctx context.Context, i int) error {
				t := time.Now()
				_, err := b.push(ctx, queue, i)
				mu.Lock()
				lat = append(lat, time.Since(t))
				prog.Set(len(lat))
				mu.Unlock()
				return err
			})
			return time.Since(start), err
		})
		if err != nil {
			return r, err
		}
		if i == 0 {
			r.EnqueuePerSecond, r.EnqueueLatency, r.EnqueueDynamoDB = rate, Summarize(lat), perJob
		}
		if rate, perJob, err = measured(fmt.Sprintf("fetch %d + ack", count), func(prog *Progress) (time.Duration, error) {
			start := time.Now()
			end, err := b.pullWorkers(ctx, queue, n, count, prog)
			return end.Sub(start), err
		}); err != nil {
			return r, err
		}
		if count == 1 {
			r.FetchAck1PerSecond, r.FetchAck1DynamoDB = rate, perJob
		} else {
			r.FetchAckNPerSecond, r.FetchAckNDynamoDB = rate, perJob
		}
	}
	return r, nil
}

// warmUp starts every execution environment's clients and registers the
// queues, so that the phases measure the steady state.
func (b *bencher) warmUp(ctx context.Context) error {
	ids := make([]string, 20)
	if err := enqueue(ctx, len(ids), 4, 0, func(ctx context.Context, i int) (err error) {
		ids[i], err = b.push(ctx, pushQueue, i)
		return err
	}); err != nil {
		return err
	}
	for _, q := range []string{"bench-jobs", "bench-chains", "bench-batches", splitQueue(1), splitQueue(b.o.Settings.FetchCount)} {
		if err := enqueue(ctx, 8, 4, 0, func(ctx context.Context, i int) error { _, err := b.push(ctx, q, i); return err }); err != nil {
			return err
		}
		if _, err := b.pullWorkers(ctx, q, 8, b.o.Settings.FetchCount, nil); err != nil {
			return err
		}
	}
	return b.wait(ctx, "jobs", ids, 1, nil, 10*time.Minute)
}

// wait polls until every one of ids, "jobs" (their items, through the
// benchmark's own DynamoDB client, not the API) or "workflows" (their root
// nodes), finished, counting perItem units each on prog (may be nil).
func (b *bencher) wait(ctx context.Context, kind string, ids []string, perItem int, prog *Progress, timeout time.Duration) error {
	pending, done := slices.Clone(ids), 0
	deadline := time.Now().Add(timeout)
	for len(pending) > 0 {
		var head, rest []string
		if kind == "jobs" {
			head = pending[:min(100, len(pending))]
			got, err := b.mon.BatchGetJobs(ctx, head)
			if err != nil {
				return err
			}
			for _, id := range head {
				if j := got[id]; j == nil || !j.State.Terminal() {
					rest = append(rest, id)
				}
			}
		} else {
			head = pending[:min(20, len(pending))]
			for _, id := range head {
				n, err := b.wfmon.GetRoot(ctx, id)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				if n == nil || !n.State.Terminal() {
					rest = append(rest, id)
				}
			}
		}
		done += len(head) - len(rest)
		prog.Set(done * perItem)
		pending = append(rest, pending[len(head):]...)
		if len(rest) == len(head) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d %s not finished after %v", len(pending), kind, timeout)
			}
			if !ctxsleep.Sleep(ctx, 200*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// calibrateEmptyFetch measures what a FETCH of an empty queue costs, polling
// as fast and as often as the phases' idle workers do (an empty FETCH reads
// its queue's due shards at most once a second per API instance).
func (b *bencher) calibrateEmptyFetch(ctx context.Context) (EmptyFetch, error) {
	const n = 100
	d, err := b.measure(ctx, func() error {
		for range n {
			if _, err := b.do(ctx, "POST /workers/fetch", http.MethodPost, "/workers/fetch", map[string]any{"queues": []string{"bench-empty"}, "count": b.o.Settings.FetchCount, "worker_id": "bench-cal"}, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return EmptyFetch{}, err
	}
	p, _ := Account(d, n, b.env, 0, 0)
	return EmptyFetch{Fetches: n, DynamoDB: p.DynamoDB, ByOperation: p.DynamoDBByOperation, ReadUnitsEach: p.ReadUnits,
		APIRequestsEach: p.API, LambdaInvocation: p.Lambda}, nil
}

// runPhase runs one workload of n jobs, chains, graphs or batches in push
// or pull mode and accounts for it.
func (b *bencher) runPhase(ctx context.Context, name, mode, kind string, n int, rate, emptyFetchCost float64) (Phase, error) {
	width := b.o.Settings.BatchWidth
	units := n * max(1, len(steps(kind, width)))
	p := Phase{Name: name, Mode: mode, Kind: kind, Unit: "job", Units: units}
	if kind != "jobs" {
		p.Unit, p.Workflows = "step", n
	}
	ids := make([]string, n)
	var start, pullEnd time.Time
	d, err := b.measure(ctx, func() (err error) {
		start = time.Now()
		pullEnd, err = b.load(ctx, name, mode, kind, ids, units, rate)
		return err
	})
	if err != nil {
		return p, err
	}
	p.ClientRequests = b.takeClientCounts()
	p.EmptyFetches = int(b.empties.Load())

	// Latencies and the end time from the jobs' own timestamps (read
	// after the counters, so these reads are not counted).
	jobIDs, groups := jobIDsOf(kind, ids, width)
	jobs, err := b.mon.BatchGetJobs(ctx, jobIDs)
	if err != nil {
		return p, err
	}
	var e2s []time.Duration
	end := pullEnd
	for _, id := range jobIDs {
		j := jobs[id]
		if j == nil {
			p.Errors = append(p.Errors, "job "+id+" not found")
			continue
		}
		if j.State != job.Completed {
			p.Errors = append(p.Errors, fmt.Sprintf("job %s is %s", id, j.State))
		}
		if j.StartedAt != nil && j.EnqueuedAt != nil {
			e2s = append(e2s, j.StartedAt.Sub(*j.EnqueuedAt))
		}
		if j.CompletedAt != nil && j.CompletedAt.After(end) {
			end = *j.CompletedAt
		}
	}
	p.EnqueueToStart = Summarize(e2s)
	if kind != "jobs" {
		s2s := stepToStep(kind, groups, jobs)
		p.StepToStep = &s2s
	}
	p.Seconds = round(end.Sub(start).Seconds(), 2)
	if p.Seconds > 0 {
		p.UnitsPerSecond = round(float64(units)/p.Seconds, 1)
		if p.Workflows > 0 {
			p.WorkflowsPerSecond = round(float64(n)/p.Seconds, 1)
		}
	}
	p.PerUnit, p.Usage = Account(d, units, b.env, p.EmptyFetches, emptyFetchCost)
	p.Cost = USEast1.PerMillion(p.Usage)
	p.Invocations = d.Invocations
	p.Calls = map[string][]callstats.Op{"mapping": d.ESM.Ops()}
	for fn, set := range d.Functions {
		p.Calls[fn] = set.Ops()
	}
	if len(p.Errors) > 5 {
		p.Errors = append(p.Errors[:5], fmt.Sprintf("... %d more", len(p.Errors)-5))
	}
	b.log.Info("phase done", "phase", name, "units", units, "seconds", p.Seconds, "units_per_second", p.UnitsPerSecond,
		"dynamodb_per_unit", p.PerUnit.DynamoDB, "sqs_per_unit", p.PerUnit.SQS)
	return p, nil
}

// load creates the phase's jobs or workflows (their ids in ids) and waits
// until its units ran, drawing its progress bar; in pull mode it returns
// the pull workers' last acknowledgement.
func (b *bencher) load(ctx context.Context, name, mode, kind string, ids []string, units int, rate float64) (time.Time, error) {
	prog := NewProgress(b.o.Progress, name, units)
	defer prog.Done()
	queue := pushQueue
	if mode == "pull" {
		queue = "bench-" + kind
	}
	var pullEnd time.Time
	pulled := make(chan error, 1)
	if mode == "pull" {
		go func() {
			var err error
			pullEnd, err = b.pullWorkers(ctx, queue, units, b.o.Settings.FetchCount, prog)
			pulled <- err
		}()
	}
	clients := b.o.Settings.Clients
	if kind == "batches" {
		clients = min(clients, 4) // each request is large
	}
	err := enqueue(ctx, len(ids), clients, rate, func(ctx context.Context, i int) (err error) {
		if kind == "jobs" {
			ids[i], err = b.push(ctx, queue, i)
		} else {
			ids[i], _, err = b.create(ctx, "/workflows", workflowBody(kind, queue, i, b.o.Settings.BatchWidth, b.payload))
		}
		return err
	})
	switch {
	case err != nil:
		return time.Time{}, err
	case mode == "pull":
		err = <-pulled
	case kind == "jobs":
		err = b.wait(ctx, "jobs", ids, 1, prog, 10*time.Minute)
	default:
		err = b.wait(ctx, "workflows", ids, units/len(ids), prog, 15*time.Minute)
	}
	return pullEnd, err
}

// steps are the job id suffixes of a workflow's steps (chains: /s0../s2;
// graphs: /g0../g3; batches: /j0.. then the on_complete callback); none for
// jobs.
func steps(kind string, width int) []string {
	prefix, n := map[string]string{"chains": "/s", "graphs": "/g", "batches": "/j"}[kind], map[string]int{"chains": 3, "graphs": 4, "batches": width}[kind]
	var out []string
	for s := range n {
		out = append(out, fmt.Sprintf("%s%d", prefix, s))
	}
	if kind == "batches" {
		out = append(out, "/on_complete")
	}
	return out
}

// jobIDsOf lists the job ids of the phase's items: the jobs themselves,
// or each workflow's steps, grouped per workflow.
func jobIDsOf(kind string, ids []string, width int) ([]string, [][]string) {
	if kind == "jobs" {
		return ids, nil
	}
	var all []string
	groups := make([][]string, len(ids))
	for i, wf := range ids {
		for _, s := range steps(kind, width) {
			groups[i] = append(groups[i], wfdef.JobID(wf, s))
		}
		all = append(all, groups[i]...)
	}
	return all, groups
}

// diamondDeps are the dependencies of the bench's graph steps (a, b, c, d).
var diamondDeps = [][]int{nil, {0}, {0}, {1, 2}}

// stepToStep is each step's start minus its last dependency's completion:
// for chains the previous step, for graphs diamondDeps, for batches' callback
// every job.
func stepToStep(kind string, groups [][]string, jobs map[string]*job.Job) Latency {
	var ds []time.Duration
	for _, g := range groups {
		deps := diamondDeps
		if kind != "graphs" {
			deps = make([][]int, len(g))
			for s := 1; s < len(g); s++ {
				if kind == "chains" {
					deps[s] = []int{s - 1}
				} else {
					deps[len(g)-1] = append(deps[len(g)-1], s-1)
				}
			}
		}
		for s, before := range deps {
			cur := jobs[g[s]]
			var last time.Time
			for _, d := range before {
				if j := jobs[g[d]]; j != nil && j.CompletedAt != nil && j.CompletedAt.After(last) {
					last = *j.CompletedAt
				}
			}
			if len(before) > 0 && cur != nil && cur.StartedAt != nil && !last.IsZero() {
				ds = append(ds, cur.StartedAt.Sub(last))
			}
		}
	}
	return Summarize(ds)
}

// createRun times one POST of a group and one of a batch of width jobs on a
// pull queue no worker reads: the answer (well inside API Gateway's 29 s),
// and the time until the workflow is written (GET shows no x_creating).
func (b *bencher) createRun(ctx context.Context, width int) CreateRun {
	r := CreateRun{Width: width}
	for _, kind := range []string{"group", "batch"} {
		body := workflowBody("batches", "bench-create", 0, width, nil)
		if kind == "group" {
			body = map[string]any{"type": "group", "name": "bench-create", "jobs": body["jobs"]}
		}
		start := time.Now()
		id, status, err := b.create(ctx, "/workflows", body)
		if err != nil {
			r.Note = fmt.Sprintf("the %s was refused (%d): %v", kind, status, err)
			r.GroupAnswerSeconds, r.BatchAnswerSeconds = 0, 0
			return r
		}
		answer := round(time.Since(start).Seconds(), 1)
		r.Status = status
		for {
			var out struct {
				Workflow map[string]any `json:"workflow"`
			}
			if _, err := b.do(ctx, "GET /workflows", http.MethodGet, "/workflows/"+id, nil, &out); err != nil {
				r.Note = fmt.Sprintf("the %s: %v", kind, err)
				return r
			}
			if _, creating := out.Workflow["x_creating"]; !creating {
				break
			}
			if time.Since(start) > 10*time.Minute {
				r.Note = fmt.Sprintf("the %s was still being created after 10 minutes", kind)
				return r
			}
			if !ctxsleep.Sleep(ctx, 250*time.Millisecond) {
				return r
			}
		}
		written := round(time.Since(start).Seconds(), 1)
		if kind == "group" {
			r.GroupAnswerSeconds, r.GroupSeconds = answer, written
		} else {
			r.BatchAnswerSeconds, r.BatchSeconds = answer, written
		}
	}
	return r
}

// bigRun pushes workflows batches of width jobs in push mode and checks
// that every one completed with its callback fired exactly once.
func (b *bencher) bigRun(ctx context.Context, workflows, width int) BigRun {
	r := BigRun{Run: true, Workflows: workflows, Jobs: workflows * width}
	prog := NewProgress(b.o.Progress, "big batches", workflows*(width+1))
	defer prog.Done()
	ids := make([]string, workflows)
	start := time.Now()
	// One batch at a time: creating a 10,000-job workflow can outlast the
	// API's 29 s deadline on a busy DynamoDB Local (a 500, retried).
	for i := range ids {
		var err error
		for try := 0; try < 3; try++ {
			var status int
			if ids[i], status, err = b.create(ctx, "/workflows", workflowBody("batches", pushQueue, i, width, nil)); err == nil || status < 500 {
				break
			}
			r.Retries++
			ctxsleep.Sleep(ctx, 5*time.Second)
		}
		if err == nil {
			err = b.wait(ctx, "workflows", ids[i:i+1], width+1, nil, time.Hour)
		}
		if err != nil {
			r.Note = fmt.Sprintf("failed at batch %d: %v", i+1, err)
			return r
		}
		prog.Set((i + 1) * (width + 1))
	}
	r.Seconds = round(time.Since(start).Seconds(), 1)
	r.JobsPerSecond = round(float64(r.Jobs)/r.Seconds, 1)
	once := true
	for _, id := range ids {
		var out struct{ Events []json.RawMessage }
		if _, err := b.do(ctx, "GET /events", http.MethodGet, "/events?workflow_id="+id+"&types=workflow.callback_fired&limit=100", nil, &out); err != nil {
			r.Note = "failed: " + err.Error()
			return r
		}
		cb, err := b.mon.BatchGetJobs(ctx, []string{wfdef.JobID(id, "/on_complete")})
		if err != nil {
			r.Note = "failed: " + err.Error()
			return r
		}
		j := cb[wfdef.JobID(id, "/on_complete")]
		if len(out.Events) != 1 || j == nil || j.State != job.Completed || j.Attempt != 1 {
			once = false
		}
	}
	r.CallbacksFiredOnce = once
	r.Note = fmt.Sprintf("%d batch(es) of %d jobs (%d jobs) in push mode, one after another, finished in %.0f s (%.0f jobs/s); callbacks fired once each: %v; workflow creations retried after a 500: %d",
		workflows, width, r.Jobs, r.Seconds, r.JobsPerSecond, once, r.Retries)
	return r
}

// sweeperCost is the sweeper's cost per sweep over the run, and per month
// at one sweep a minute (the AWS schedule).
func sweeperCost(d Delta, env topology.Env) Sweeper {
	s := Sweeper{Invocations: d.Invocations[topology.FunctionSweeper], DynamoDBByOperation: map[string]float64{},
		Note: "A fixed cost per sweep, whatever the load: it reads the queue registry and the due index of each queue."}
	if s.Invocations == 0 {
		return s
	}
	n := float64(s.Invocations)
	var rru, wru float64
	for _, o := range d.Functions[topology.FunctionSweeper] {
		if o.Service == callstats.DynamoDB {
			s.DynamoDBPerSweep += float64(o.Attempts) / n
			s.DynamoDBByOperation[o.Operation] = round(float64(o.Attempts)/n, 2)
			rru += o.ReadUnits / n
			wru += o.WriteUnits / n
		}
	}
	s.DynamoDBPerSweep = round(s.DynamoDBPerSweep, 2)
	s.ReadUnitsPerSweep = round(rru, 2)
	gbs := d.Busy[topology.FunctionSweeper].Seconds() / n * float64(env.Functions[topology.FunctionSweeper].MemoryMB) / 1024
	perSweep := rru*USEast1.DynamoDBReadUnit + wru*USEast1.DynamoDBWriteUnit + USEast1.LambdaRequest + gbs*USEast1.LambdaGBSecondArm64
	s.USDPerMonthOnAWS = round(perSweep*60*24*30, 3)
	return s
}

// putEvents answers EventBridge PutEvents with success for every entry, so
// that the stream function publishes as on AWS and its requests are counted.
func putEvents(w http.ResponseWriter, r *http.Request) {
	var in struct{ Entries []json.RawMessage }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	entries := make([]map[string]string, len(in.Entries))
	for i := range entries {
		entries[i] = map[string]string{"EventId": fmt.Sprintf("bench-%d", i)}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(map[string]any{"FailedEntryCount": 0, "Entries": entries})
}
