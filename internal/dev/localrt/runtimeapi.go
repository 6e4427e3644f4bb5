package localrt

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
)

// FunctionError is an error the function returned (the Runtime API /error
// call), as opposed to a failure of the runtime itself.
type FunctionError struct {
	Type    string `json:"errorType"`
	Message string `json:"errorMessage"`
}

func (e *FunctionError) Error() string { return e.Type + ": " + e.Message }

type invocation struct {
	id       string
	payload  []byte
	deadline time.Time
	done     chan result
}

type result struct {
	body []byte
	err  error
}

// instance is one running bootstrap process with its own Runtime API
// endpoint, handling one invocation at a time like a Lambda execution
// environment.
type instance struct {
	fn       *Function
	next     chan *invocation
	mu       sync.Mutex
	current  *invocation
	cmd      *exec.Cmd
	exited   chan struct{}
	listener net.Listener
	srv      *http.Server
	// spawned is when the process started; initDone is set at its first
	// "next" request.
	spawned  time.Time
	initDone bool
	// gen is the Function generation the environment was started in.
	gen int64
}

// Function is a pool of execution environments for one function binary.
type Function struct {
	Name    string
	Binary  string
	Env     []string
	Timeout time.Duration
	// Concurrency is the number of execution environments started with
	// the function.
	Concurrency int
	// MaxConcurrency, when above Concurrency, lets the pool grow: an
	// invocation that finds every environment busy starts a new one (a
	// cold start), as Lambda scales out, up to this many.
	MaxConcurrency int
	Log            io.Writer
	Logger         *slog.Logger

	idle   chan *instance
	all    []*instance
	mu     sync.Mutex
	closed bool
	inits  []time.Duration
	// restarts counts execution environments replaced after their
	// process exited or was killed.
	restarts atomic.Int64
	// gen is the current generation (see Recycle).
	gen atomic.Int64
}

// InitTimes returns the init duration of every execution environment
// started so far (restarts included): process start to its first Runtime
// API "next" request.
func (f *Function) InitTimes() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.inits)
}

// Start launches the execution environments.
func (f *Function) Start() error {
	if f.Concurrency <= 0 {
		f.Concurrency = 1
	}
	f.Log = cmp.Or(f.Log, io.Discard)
	f.MaxConcurrency = max(f.MaxConcurrency, f.Concurrency)
	f.idle = make(chan *instance, f.MaxConcurrency)
	for range f.Concurrency {
		inst, err := f.grow()
		if err != nil {
			f.Stop()
			return err
		}
		f.idle <- inst
	}
	return nil
}

// Invoke runs one invocation synchronously, like the Lambda Invoke API
// with RequestResponse. A function error is returned as *FunctionError.
func (f *Function) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	return f.invoke(ctx, payload, new(time.Duration))
}

// RequestTooLargeError is Lambda refusing an invocation whose payload passes
// awslimit.LambdaRequestBytes: the function never runs.
type RequestTooLargeError struct {
	Function string
	Bytes    int
}

func (e *RequestTooLargeError) Error() string {
	return fmt.Sprintf("%s: RequestEntityTooLargeException: Request must be smaller than %d bytes for the Invoke operation (got %d)",
		e.Function, awslimit.LambdaRequestBytes, e.Bytes)
}

// ResponseTooLarge is the FunctionError type of an invocation whose
// response passed awslimit.LambdaResponseBytes, as Lambda reports it.
const ResponseTooLarge = "Function.ResponseSizeTooLarge"

// invoke is Invoke, also reporting in *took how long the invocation ran once
// an environment took it. Like Lambda, it refuses a payload over
// LambdaRequestBytes and fails a response over LambdaResponseBytes.
func (f *Function) invoke(ctx context.Context, payload []byte, took *time.Duration) ([]byte, error) {
	if len(payload) > awslimit.LambdaRequestBytes {
		return nil, &RequestTooLargeError{Function: f.Name, Bytes: len(payload)}
	}
	var inst *instance
	select {
	case inst = <-f.idle:
	default:
		var err error
		if inst, err = f.grow(); err != nil {
			return nil, err
		}
		if inst == nil {
			select {
			case inst = <-f.idle:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	release := true // the environment is free again when invoke returns
	defer func() {
		if release {
			f.idle <- inst
		}
	}()
	if g := f.gen.Load(); inst.gen != g {
		// A stale environment (see Recycle): replace it first.
		inst.kill()
		inst.restart()
		inst.gen = g
	}
	begin := time.Now()
	defer func() { *took = time.Since(begin) }()
	inv := &invocation{id: uuid.NewString(), payload: payload, deadline: time.Now().Add(f.Timeout), done: make(chan result, 1)}
	// An environment whose process died while idle is replaced and the
	// invocation goes to the fresh one (a cold start), as on Lambda.
	for tries := 0; ; tries++ {
		// Known dead: never offer it to a "next" request the dead process left.
		next := inst.nextCh()
		select {
		case <-inst.exitedCh():
			next = nil
		default:
		}
		select {
		case next <- inv:
		case <-inst.exitedCh():
			inst.restart()
			if tries < 3 {
				continue
			}
			return nil, fmt.Errorf("%s: execution environment exited before the invocation", f.Name)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		break
	}
	var body []byte
	var err error
	settled := make(chan struct{})
	go func() {
		body, err = f.settle(inst, inv)
		close(settled)
	}()
	select {
	case <-settled:
		return body, err
	case <-ctx.Done():
		// The caller left; the invocation goes on, as on Lambda, and its
		// environment stays busy until it ends.
		release = false
		go func() {
			<-settled
			f.idle <- inst
		}()
		return nil, ctx.Err()
	}
}

// settle waits for the end of invocation inv in inst: its answer, its
// process's exit, or its timeout (the environment is then replaced).
func (f *Function) settle(inst *instance, inv *invocation) ([]byte, error) {
	timer := time.NewTimer(f.Timeout)
	defer timer.Stop()
	select {
	case r := <-inv.done:
		return r.body, r.err
	case <-inst.exitedCh():
		inst.restart()
		return nil, &FunctionError{Type: "Runtime.ExitError", Message: f.Name + ": the function process exited during the invocation"}
	case <-timer.C:
		f.Logger.Warn("function timed out; restarting its execution environment", "function", f.Name, "timeout", f.Timeout.String())
		inst.kill()
		inst.restart()
		return nil, &FunctionError{Type: "Sandbox.Timedout", Message: fmt.Sprintf("%s timed out after %v", f.Name, f.Timeout)}
	}
}

// grow starts one more execution environment for an invocation that found
// every one busy; nil when the pool is at MaxConcurrency (or stopped).
func (f *Function) grow() (*instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || len(f.all) >= f.MaxConcurrency {
		return nil, nil
	}
	inst := &instance{fn: f, next: make(chan *invocation), gen: f.gen.Load()}
	if err := inst.start(); err != nil {
		return nil, fmt.Errorf("%s: starting an execution environment: %w", f.Name, err)
	}
	f.all = append(f.all, inst)
	return inst, nil
}

// Recycle marks every execution environment stale: each is replaced by a
// fresh one before its next invocation, as after a new deployment.
func (f *Function) Recycle() { f.gen.Add(1) }

// Stop kills every execution environment.
func (f *Function) Stop() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	for _, inst := range f.all {
		inst.kill()
		if inst.srv != nil {
			_ = inst.srv.Close()
		}
	}
}

func (in *instance) start() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	in.listener = l
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", in.handleNext)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", in.handleResult(false))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", in.handleResult(true))
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		in.fn.Logger.Error("function init error", "function", in.fn.Name, "error", string(b))
		w.WriteHeader(http.StatusAccepted)
	})
	in.srv = &http.Server{Handler: mux}
	go func() { _ = in.srv.Serve(l) }()
	return in.spawn()
}

func (in *instance) spawn() error {
	f := in.fn
	cmd := exec.Command(f.Binary)
	cmd.Env = append(append(os.Environ(), f.Env...),
		"AWS_LAMBDA_RUNTIME_API="+in.listener.Addr().String(),
		"AWS_LAMBDA_FUNCTION_NAME="+f.Name,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/"+f.Name,
		"_HANDLER=bootstrap",
	)
	cmd.Stdout, cmd.Stderr = f.Log, f.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in.mu.Lock()
	in.spawned, in.initDone = time.Now(), false
	in.next = make(chan *invocation)
	in.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s (%s): %w", f.Name, f.Binary, err)
	}
	exited := make(chan struct{})
	in.mu.Lock()
	in.cmd, in.exited = cmd, exited
	in.mu.Unlock()
	go func() { _ = cmd.Wait(); close(exited) }()
	return nil
}

// nextCh is the channel invocations reach the current process's "next"
// request on. Every process gets its own, so a request a killed process
// left waiting never takes an invocation meant for its replacement.
func (in *instance) nextCh() chan *invocation {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.next
}

func (in *instance) exitedCh() chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.exited
}

func (in *instance) kill() {
	in.mu.Lock()
	cmd := in.cmd
	in.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (in *instance) restart() {
	in.fn.mu.Lock()
	closed := in.fn.closed
	in.fn.mu.Unlock()
	if closed {
		return
	}
	<-in.exitedCh()
	in.mu.Lock()
	in.current = nil
	in.mu.Unlock()
	in.fn.restarts.Add(1)
	if err := in.spawn(); err != nil {
		in.fn.Logger.Error("restart execution environment", "function", in.fn.Name, "error", err.Error())
	}
}

func (in *instance) handleNext(w http.ResponseWriter, r *http.Request) {
	in.mu.Lock()
	first := !in.initDone
	in.initDone = true
	initTook := time.Since(in.spawned)
	in.mu.Unlock()
	if first {
		in.fn.mu.Lock()
		in.fn.inits = append(in.fn.inits, initTook)
		in.fn.mu.Unlock()
	}
	var inv *invocation
	select {
	case inv = <-in.nextCh():
	case <-r.Context().Done():
		return
	}
	in.mu.Lock()
	in.current = inv
	in.mu.Unlock()
	h := w.Header()
	h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
	h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
	h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:"+in.fn.Name)
	h.Set("Lambda-Runtime-Trace-Id", "Root=1-"+strings.ReplaceAll(inv.id[:8], "-", "")+"-"+strings.ReplaceAll(inv.id, "-", "")[:24])
	h.Set("Content-Type", "application/json")
	_, _ = w.Write(inv.payload)
}

func (in *instance) handleResult(isErr bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		in.mu.Lock()
		inv := in.current
		if inv != nil && inv.id == r.PathValue("id") {
			in.current = nil
		} else {
			inv = nil
		}
		in.mu.Unlock()
		if inv == nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		res := result{body: body}
		if !isErr && len(body) > awslimit.LambdaResponseBytes {
			// Lambda accepts the response from the runtime and fails the
			// invocation for the caller.
			res = result{err: &FunctionError{Type: ResponseTooLarge,
				Message: fmt.Sprintf("Response payload size exceeded maximum allowed payload size (%d bytes).", awslimit.LambdaResponseBytes)}}
		} else if isErr {
			fe := &FunctionError{}
			if json.Unmarshal(body, fe) != nil || fe.Message == "" {
				fe = &FunctionError{Type: "Unknown", Message: string(bytes.TrimSpace(body))}
			}
			res = result{err: fe}
		}
		inv.done <- res
		w.WriteHeader(http.StatusAccepted)
	}
}

// IsFunctionError reports whether err came from the function itself.
func IsFunctionError(err error) bool {
	_, ok := errors.AsType[*FunctionError](err)
	return ok
}
