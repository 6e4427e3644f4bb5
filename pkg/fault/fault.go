// Package fault holds the named fault points the fault-injection soak
// (e2e/soak) switches on in the function processes, to show that nothing
// is lost and nothing is done twice when a function dies or fails at the
// worst moment: between a write and what must follow it.
//
// A point is inert unless the process was started with OJS_FAULTS set:
//
//	OJS_FAULTS=engine.after_relay:0.05:crash,worker.after_handler:0.02
//	OJS_FAULT_SEED=42          (optional; mixed with the process id)
//	OJS_FAULT_LOG=/tmp/f.log   (optional; one JSON line per injected fault)
//
// Each entry is point:probability[:mode]; mode "error" (the default) makes
// Hit return an *Injected error that the caller handles like any failure
// of the step it guards, "crash" ends the process at once with exit code
// ExitCode, as a Lambda execution environment that runs out of memory or is
// killed would. Production never sets OJS_FAULTS: the stack does not pass
// it, and with it unset Hit is a load of one package-level bool.
package fault

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Point names a place in the code where a fault can be injected.
type Point string

// The fault points. Each guards a gap between two effects that must both
// happen (or be safely repeated) for a job to be neither lost nor doubled;
// docs/fault-injection.md says which gap each one models.
const (
	// APIAfterWrite: the API function committed its write and dies or fails
	// before answering (the client retries).
	APIAfterWrite Point = "api.after_write"
	// EngineAfterRelay: the stream function sent the batch's push-mode jobs
	// to SQS, the batch is not checkpointed (it comes again).
	EngineAfterRelay Point = "engine.after_relay"
	// EngineAfterEvents: events stored, workflow actions not yet run.
	EngineAfterEvents Point = "engine.after_events"
	// EngineWorkflowAction: the stream function stops part-way through a
	// batch's workflow actions (a partial batch failure).
	EngineWorkflowAction Point = "engine.workflow_action"
	// LifecycleBeforeAdvance: a workflow job finished, the request stops
	// before it advances the workflow (the stream function must).
	LifecycleBeforeAdvance Point = "lifecycle.before_advance"
	// WorkflowAfterRecord: a finished step is counted in its parent, nothing
	// after it is done yet.
	WorkflowAfterRecord Point = "workflow.after_record"
	// WorkflowAfterItems: a workflow's creation without a transaction wrote
	// its root and nodes, not its first job.
	WorkflowAfterItems Point = "workflow.after_items"
	// WorkflowAfterMark: a graph's advance without a transaction counted the
	// finished step and marked the root, not the jobs of the steps it starts.
	WorkflowAfterMark Point = "workflow.after_mark"
	// WorkflowAfterFire: a batch's callbacks are recorded as fired, their
	// jobs are not created yet.
	WorkflowAfterFire Point = "workflow.after_fire"
	// WorkerAfterClaim: the worker function claimed a job, not run it.
	WorkerAfterClaim Point = "worker.after_claim"
	// WorkerAfterHandler: the handler succeeded, its result is not written.
	WorkerAfterHandler Point = "worker.after_handler"
	// WorkerAfterAck: the result is written, the SQS message is not
	// deleted: it is delivered again.
	WorkerAfterAck Point = "worker.after_ack"
	// SweeperAfterSend: the sweeper re-sent unclaimed push-mode jobs, not
	// pushed their next check back.
	SweeperAfterSend Point = "sweeper.after_send"
	// SweeperAfterResolve: the sweeper resolved a queue's due jobs, not the
	// rest of the sweep.
	SweeperAfterResolve Point = "sweeper.after_resolve"
)

// Points lists every fault point.
var Points = []Point{APIAfterWrite, EngineAfterRelay, EngineAfterEvents, EngineWorkflowAction, LifecycleBeforeAdvance, WorkflowAfterRecord, WorkflowAfterItems, WorkflowAfterMark, WorkflowAfterFire,
	WorkerAfterClaim, WorkerAfterHandler, WorkerAfterAck, SweeperAfterSend, SweeperAfterResolve}

// Environment variables read at process start.
const (
	EnvFaults = "OJS_FAULTS"
	EnvSeed   = "OJS_FAULT_SEED"
	EnvLog    = "OJS_FAULT_LOG"
)

// ExitCode is the exit status of a process killed by a "crash" fault.
const ExitCode = 86

// Modes.
const (
	ModeError = "error"
	ModeCrash = "crash"
)

// Injected is the error a fault point in "error" mode returns.
type Injected struct{ Point Point }

func (e *Injected) Error() string { return "fault injected at " + string(e.Point) }

// Record is one line of the fault log (OJS_FAULT_LOG).
type Record struct {
	Point Point  `json:"point"`
	Mode  string `json:"mode"`
	PID   int    `json:"pid"`
	At    string `json:"at"`
}

type rule struct {
	p    float64
	mode string
}

var (
	// enabled is the only thing Hit reads when no fault is configured.
	enabled bool
	mu      sync.Mutex
	rules   map[Point][]rule
	rng     *rand.Rand
	logPath string
	exit    = os.Exit
)

func init() {
	spec := os.Getenv(EnvFaults)
	if spec == "" {
		return
	}
	seed, _ := strconv.ParseInt(os.Getenv(EnvSeed), 10, 64)
	if err := Configure(spec, seed^int64(os.Getpid())<<20, os.Getenv(EnvLog)); err != nil {
		slog.Error("ignoring invalid "+EnvFaults, "error", err.Error())
	}
}

// parse reads a fault specification (see the package comment).
func parse(spec string) (map[Point][]rule, error) {
	out := map[Point][]rule{}
	for _, e := range strings.Split(spec, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		parts := strings.Split(e, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("fault %q: want point:probability[:mode]", e)
		}
		p := Point(parts[0])
		if !slices.Contains(Points, p) {
			return nil, fmt.Errorf("fault %q: unknown point %q", e, p)
		}
		prob, err := strconv.ParseFloat(parts[1], 64)
		if err != nil || prob < 0 || prob > 1 {
			return nil, fmt.Errorf("fault %q: probability must be in [0,1]", e)
		}
		mode := ModeError
		if len(parts) == 3 {
			mode = parts[2]
		}
		if mode != ModeError && mode != ModeCrash {
			return nil, fmt.Errorf("fault %q: mode must be %s or %s", e, ModeError, ModeCrash)
		}
		out[p] = append(out[p], rule{p: prob, mode: mode})
	}
	return out, nil
}

// Configure switches faults on in this process (tests; processes read
// OJS_FAULTS at start). An empty spec switches them off.
func Configure(spec string, seed int64, log string) error {
	r, err := parse(spec)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	rules, logPath = r, log
	rng = rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15))
	enabled = len(r) > 0
	return nil
}

// Hit is a fault point: nil unless faults are configured and this call is
// chosen; then an *Injected error, or the process ends (crash mode).
func Hit(p Point) error {
	if !enabled {
		return nil
	}
	return hit(p)
}

func hit(p Point) error {
	mu.Lock()
	var mode string
	for _, r := range rules[p] {
		if rng.Float64() < r.p {
			mode = r.mode
			break
		}
	}
	path := logPath
	mu.Unlock()
	if mode == "" {
		return nil
	}
	rec := Record{Point: p, Mode: mode, PID: os.Getpid(), At: time.Now().UTC().Format(time.RFC3339Nano)}
	if path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			b, _ := json.Marshal(rec)
			_, _ = f.Write(append(b, '\n')) // one small O_APPEND write: lines never interleave
			_ = f.Close()
		}
	}
	slog.Warn("fault injected", "point", string(p), "mode", mode)
	if mode == ModeCrash {
		exit(ExitCode)
	}
	return &Injected{Point: p}
}

// ReadLog counts the faults recorded in a fault log, per point and mode
// ("engine.after_relay/crash").
func ReadLog(path string) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		var r Record
		if l == "" || json.Unmarshal([]byte(l), &r) != nil {
			continue
		}
		out[string(r.Point)+"/"+r.Mode]++
	}
	return out, nil
}
