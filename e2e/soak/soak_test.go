// Package soak is the fault-injection soak: a thousand mixed workflows
// (chains, groups, batches with callbacks, three-level nesting; push mode,
// pull mode and both) run through the whole local stack — the four real
// bootstrap binaries behind the local Lambda runtime — while faults are
// injected at every named fault point (pkg/fault), pull workers die holding
// jobs, every stream batch is delivered twice, SQS messages are duplicated,
// two sweepers run at once and the SQS emulator is restarted mid-run. It
// ends with every job and workflow terminal and checks that nothing was
// lost and nothing done twice (see verify). docs/fault-injection.md.
//
// `make test` runs a short soak (SOAK_WORKFLOWS, default 150); `make soak`
// the full one (1,000). Knobs: SOAK_WORKFLOWS, SOAK_SEED, SOAK_FAULTS
// (an OJS_FAULTS spec replacing the default), SOAK_TIMEOUT, SOAK_INFLIGHT.
package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
	"github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// defaultFaults is the fault mix: crash (the process dies, its execution
// environment is replaced) and error (the step fails and is retried) at
// every point. Points hit once per record or job have small probabilities;
// rare ones (callbacks, sweeper re-sends) large ones.
const defaultFaults = "api.after_write:0.02:crash,api.after_write:0.02," +
	"engine.after_relay:0.03:crash,engine.after_relay:0.03," +
	"engine.after_events:0.02:crash,engine.after_events:0.02," +
	"engine.workflow_action:0.002:crash,engine.workflow_action:0.01," +
	"lifecycle.before_advance:0.02:crash,lifecycle.before_advance:0.05," +
	"workflow.after_record:0.002:crash,workflow.after_record:0.01," +
	"workflow.after_mark:0.05:crash,workflow.after_mark:0.1," +
	"workflow.after_fire:0.05:crash,workflow.after_fire:0.1," +
	"worker.after_claim:0.01:crash,worker.after_claim:0.01," +
	"worker.after_handler:0.02:crash,worker.after_handler:0.02," +
	"worker.after_ack:0.02:crash,worker.after_ack:0.02," +
	"sweeper.after_send:0.2:crash,sweeper.after_send:0.2," +
	"sweeper.after_resolve:0.01:crash,sweeper.after_resolve:0.01"

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestSoak(t *testing.T) {
	n := envInt("SOAK_WORKFLOWS", 150)
	seed := uint64(time.Now().UnixNano() % 1e9)
	if v, err := strconv.ParseUint(os.Getenv("SOAK_SEED"), 10, 64); err == nil {
		seed = v
	}
	faults := defaultFaults
	if v := os.Getenv("SOAK_FAULTS"); v != "" {
		faults = v
	}
	if v := os.Getenv("SOAK_FAULTS"); v == "none" {
		faults = ""
	}
	timeout := 20 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("SOAK_TIMEOUT")); err == nil {
		timeout = d
	}
	inflight := envInt("SOAK_INFLIGHT", 40)
	t.Logf("soak: %d workflows, seed %d (SOAK_SEED=%d reproduces the plan; fault timing varies)", n, seed, seed)

	// Own emulators: the SQS one is restarted mid-run.
	ctx := context.Background()
	work := t.TempDir()
	emLog, _ := os.Create(filepath.Join(work, "emulators.log"))
	em, err := emulator.Start(ctx, emulator.Options{Log: emLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(em.Stop)
	for _, kv := range em.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	cfg, err := awsclient.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "bin")
	for _, fn := range topology.FunctionNames {
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", filepath.Join(bin, fn, "bootstrap"), "../../functions/"+fn)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", fn, err, out)
		}
	}
	env, _ := topology.ForEnv("local")
	// Shorter than AWS's so that a crashed push-mode attempt's lease
	// (the invocation deadline) and a lost SQS message's redelivery come
	// round within the run.
	env.Functions[topology.FunctionWorker] = topology.Function{MemoryMB: 512, Timeout: 15 * time.Second}
	env.Queues[0].VisibilityTimeout = 30 * time.Second
	faultLog := filepath.Join(work, "faults.log")
	logDir := filepath.Join(work, "logs")
	_ = os.MkdirAll(logDir, 0o755)
	table := "soak"
	rt, err := localrt.Start(ctx, localrt.Config{Env: env, AWS: cfg, AWSEnv: em.Env(), BinDir: bin, APIAddr: "127.0.0.1:0", Table: table,
		LogDir: logDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ExtraEnv: []string{fault.EnvFaults + "=" + faults, fault.EnvSeed + "=" + strconv.FormatUint(seed, 10), fault.EnvLog + "=" + faultLog,
			topology.EnvRedeliverAfter + "=30s", topology.EnvLogLevel + "=warn"},
		DuplicateStreamRecords: true, DuplicateSQSMessages: 0.02, Sweepers: 2})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			rt.Stop()
		}
	}
	t.Cleanup(stop)
	t.Cleanup(func() {
		if t.Failed() {
			for _, fn := range topology.FunctionNames {
				b, _ := os.ReadFile(filepath.Join(logDir, fn+".log"))
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				t.Logf("--- tail of %s.log ---\n%s", fn, b)
			}
		}
	})

	count := &counters{}
	c := &client{base: rt.URL(), http: &http.Client{Timeout: 60 * time.Second}, count: count}
	plans := plan(n, seed)
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	pool := &pullPool{c: c, count: count, die: 0.03, runs: map[string]int{}, acks: map[string]int{}, acked: map[string][]int{}}
	poolCtx, stopPool := context.WithCancel(runCtx)
	poolDone := pool.run(poolCtx, 4, seed)

	// Submit with at most `inflight` workflows running; a monitor frees a
	// slot when one finishes. The SQS emulator is restarted at 40% (and
	// 75% of a long run) of the submissions.
	slots := make(chan struct{}, inflight)
	var mu sync.Mutex
	running := map[string]*wfPlan{}
	finished := map[string]map[string]any{}
	var submitErr atomic.Value
	restartAt := map[int]bool{n * 2 / 5: true}
	if n >= 500 {
		restartAt[n*3/4] = true
	}
	var restarts sync.WaitGroup
	go func() {
		for _, w := range plans {
			select {
			case slots <- struct{}{}:
			case <-runCtx.Done():
				return
			}
			if restartAt[w.index] {
				restarts.Add(1)
				go func() {
					defer restarts.Done()
					if err := em.RestartSQS(runCtx, 2*time.Second); err != nil {
						submitErr.Store(err)
						return
					}
					if _, _, err := localrt.Provision(runCtx, cfg, env, table); err != nil {
						submitErr.Store(err)
						return
					}
					count.add("SQS emulator restarted (queues and messages lost)", 1)
				}()
			}
			st, raw, _ := c.call(runCtx, "POST", "/ojs/v1/workflows", w.body())
			if st == 409 && strings.Contains(string(raw), "duplicate") {
				count.add("client: workflow create answered 409 after a lost answer (it had committed)", 1)
			} else if st != 201 {
				submitErr.Store(fmt.Errorf("create workflow %d: %d %s", w.index, st, raw))
				return
			}
			mu.Lock()
			running[w.id] = w
			mu.Unlock()
		}
	}()
	var views = finished
	lastProgress := time.Now()
	for {
		if err, _ := submitErr.Load().(error); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		ids := make([]string, 0, len(running))
		for id := range running {
			ids = append(ids, id)
		}
		mu.Unlock()
		for _, id := range ids {
			st, raw, _ := c.call(runCtx, "GET", "/ojs/v1/workflows/"+id, nil)
			var v struct {
				Workflow map[string]any `json:"workflow"`
			}
			if st != 200 || json.Unmarshal(raw, &v) != nil {
				continue
			}
			if s := v.Workflow["state"]; s == "completed" || s == "cancelled" || s == "failed" && compensationOver(v.Workflow) {
				mu.Lock()
				delete(running, id)
				finished[id] = v.Workflow
				mu.Unlock()
				<-slots
				lastProgress = time.Now()
			}
		}
		mu.Lock()
		done := len(finished)
		mu.Unlock()
		if done == n {
			break
		}
		if runCtx.Err() != nil {
			// Check anyway: the violations say what is stuck and where.
			t.Errorf("soak timed out after %v: %d of %d workflows finished; still running: %v", timeout, done, n, ids[:min(len(ids), 10)])
			for _, id := range ids {
				st, raw, _ := c.call(ctx, "GET", "/ojs/v1/workflows/"+id, nil)
				var v struct {
					Workflow map[string]any `json:"workflow"`
				}
				if st == 200 && json.Unmarshal(raw, &v) == nil {
					finished[id] = v.Workflow
				}
			}
			break
		}
		if time.Since(lastProgress) > 2*time.Minute {
			t.Logf("no workflow finished for 2 minutes; %d running", len(ids))
			lastProgress = time.Now()
		}
		sleep(runCtx, 500*time.Millisecond)
	}
	runFor := time.Since(start)
	restarts.Wait()
	stopPool()
	poolDone.Wait()

	// Everything is terminal; the stream may still be writing the last
	// events. Check, and re-check while anything is off, for a minute.
	db := dynamodb.NewFromConfig(cfg, awsclient.DynamoDBOptions)
	var bad []string
	var tl *tally
	var snap *snapshot
	settle := time.Minute
	if t.Failed() {
		settle = 0
	}
	for deadline := time.Now().Add(settle); ; {
		snap, err = scan(ctx, db, table)
		if err != nil {
			t.Fatal(err)
		}
		bad, tl = verify(plans, snap, views, pool)
		if len(bad) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Second)
	}
	invocations, restartsByFn := rt.Invocations(), rt.Restarts()
	stop()
	injected, err := fault.ReadLog(faultLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + report(n, seed, runFor, plans, snap, tl, injected, count, invocations, restartsByFn, len(bad)))
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("%d invariant violations:\n%s", len(bad), strings.Join(bad[:min(len(bad), 40)], "\n"))
	}
	if faults != "" && len(injected) == 0 {
		t.Error("no fault was injected: the soak proved nothing")
	}
}

// report renders the table of faults and outcomes.
func report(n int, seed uint64, d time.Duration, plans []*wfPlan, snap *snapshot, tl *tally, injected map[string]int,
	count *counters, inv, restarts map[string]int, violations int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "== soak: %d workflows, seed %d, %v ==\n\n", n, seed, d.Round(time.Second))
	fmt.Fprintf(&b, "%-68s %8s\n", "fault injected (point/mode)", "count")
	keys := make([]string, 0, len(injected))
	total := 0
	for k, v := range injected {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%-68s %8d\n", k, injected[k])
	}
	fmt.Fprintf(&b, "%-68s %8d\n", "total at fault points", total)
	for _, k := range count.keys() {
		fmt.Fprintf(&b, "%-68s %8d\n", k, count.get(k))
	}
	fmt.Fprintf(&b, "%-68s %8d\n", "SQS messages duplicated by the mapping", inv["sqs.duplicated"])
	fmt.Fprintf(&b, "%-68s %8d\n", "stream batches (each delivered twice)", inv[topology.FunctionStream]/2)
	for _, fn := range topology.FunctionNames {
		fmt.Fprintf(&b, "%-68s %8d\n", "execution environments replaced: "+fn, restarts[fn])
	}
	fmt.Fprintf(&b, "%-68s %8d\n", "sweepers running at once", 2)
	fmt.Fprintf(&b, "\n%-68s %8s\n", "workflows (kind/mode/state)", "count")
	wk := make([]string, 0, len(tl.wfState))
	for k := range tl.wfState {
		wk = append(wk, k)
	}
	sort.Strings(wk)
	for _, k := range wk {
		fmt.Fprintf(&b, "%-68s %8d\n", k, tl.wfState[k])
	}
	nested, deepest := 0, 0
	for _, w := range plans {
		if w.kind == "nested" {
			nested++
		}
		deepest = max(deepest, w.depth())
	}
	fmt.Fprintf(&b, "%-68s %8d\n", "deepest nesting (composite levels)", deepest-1)
	fmt.Fprintf(&b, "\n%-68s %8s\n", "jobs", "count")
	jk := make([]string, 0, len(tl.jobs))
	jobs := 0
	for k, v := range tl.jobs {
		jk = append(jk, k)
		jobs += v
	}
	sort.Strings(jk)
	for _, k := range jk {
		fmt.Fprintf(&b, "%-68s %8d\n", "jobs "+k, tl.jobs[k])
	}
	fmt.Fprintf(&b, "%-68s %8d\n", "jobs total", jobs)
	fmt.Fprintf(&b, "%-68s %8d\n", "batch callbacks fired (each exactly once)", tl.callbacks)
	fmt.Fprintf(&b, "%-68s %8d\n", "attempts", tl.attempts)
	fmt.Fprintf(&b, "%-68s %8d\n", "attempts the plan needs (first runs + planned retries)", tl.planned)
	fmt.Fprintf(&b, "%-68s %8d\n", "attempts lost to faults (lease expired)", tl.faultExtra)
	fmt.Fprintf(&b, "%-68s %8d\n", "jobs failed only because faults used up their attempts", tl.deviations)
	events := 0
	for _, e := range snap.events {
		events += len(e)
	}
	fmt.Fprintf(&b, "%-68s %8d\n", "job events checked", events)
	fmt.Fprintf(&b, "%-68s %8.1f\n", "jobs per second (end to end)", float64(jobs)/d.Seconds())
	fmt.Fprintf(&b, "%-68s %8d\n", "invariant violations", violations)
	return b.String()
}

// compensationOver reports whether a failed workflow's compensation, if
// it has one, has ended: a saga's compensation runs after the workflow
// failed (later still when it waits for a step that was running), and the
// worker pool must not stop before it has run.
func compensationOver(wf map[string]any) bool {
	c, _ := wf["compensation"].(map[string]any)
	if c == nil {
		return true
	}
	s := c["state"]
	return s == "completed" || s == "failed" || s == "none"
}
