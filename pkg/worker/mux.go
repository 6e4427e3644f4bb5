// Package worker runs push-mode jobs inside the worker function: a handler
// registry in the shape of net/http's ServeMux, typed errors that steer
// retries, and the Processor that turns SQS deliveries into claimed,
// executed and recorded jobs through the same state machine as pull mode.
package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
)

// Job is what a handler sees of the job it runs.
type Job struct {
	ID          string
	Type        string
	Queue       string
	Args        json.RawMessage
	Meta        json.RawMessage
	Attempt     int
	MaxAttempts int
	// WorkflowID is set for jobs that belong to a workflow;
	// ParentResults then holds the upstream results keyed by index.
	WorkflowID    string
	ParentResults json.RawMessage
	// LastCheckpoint is the checkpoint an earlier attempt saved
	// (SaveCheckpoint), for a retry to resume from; nil on a first run.
	LastCheckpoint json.RawMessage

	progress func(context.Context, lifecycle.ProgressInput) error
}

// ReportProgress records how far the handler has come (a fraction from 0
// to 1, clamped) and a message: GET /ojs/v1/jobs/{id}/progress and the
// console show it, and a job.progress event carries it (ojs-progress.md).
// Reports are best-effort: a handler may ignore the error.
func (j *Job) ReportProgress(ctx context.Context, fraction float64, message string) error {
	if j.progress == nil {
		return fmt.Errorf("job %s: progress is reported only while the processor runs it", j.ID)
	}
	return j.progress(ctx, lifecycle.ProgressInput{Progress: &fraction, Message: message})
}

// SaveCheckpoint records what a retry of this job needs to resume (a JSON
// object of at most 4 KB, ojs-progress.md 6.4): the next attempt finds it
// in LastCheckpoint. Like ReportProgress it counts as a heartbeat.
func (j *Job) SaveCheckpoint(ctx context.Context, fraction float64, checkpoint any) error {
	if j.progress == nil {
		return fmt.Errorf("job %s: a checkpoint is saved only while the processor runs it", j.ID)
	}
	b, err := json.Marshal(checkpoint)
	if err != nil {
		return fmt.Errorf("job %s: checkpoint: %w", j.ID, err)
	}
	return j.progress(ctx, lifecycle.ProgressInput{Progress: &fraction, Checkpoint: b})
}

// Bind decodes the positional args into the given pointers, in order:
// job.Bind(&to, &subject). Extra args are ignored; missing ones leave the
// pointer untouched.
func (j *Job) Bind(dst ...any) error {
	var args []json.RawMessage
	if err := json.Unmarshal(j.Args, &args); err != nil {
		return fmt.Errorf("job %s: args: %w", j.ID, err)
	}
	for i, d := range dst[:min(len(dst), len(args))] {
		if err := json.Unmarshal(args[i], d); err != nil {
			return NonRetryable("invalid_args", fmt.Sprintf("arg %d: %v", i, err))
		}
	}
	return nil
}

// Handler runs one job. A nil error completes the job with the returned
// result (any JSON-encodable value, or nil); an error fails the attempt and
// the job's retry policy decides what happens next (see Error).
type Handler interface {
	Handle(ctx context.Context, j *Job) (any, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, j *Job) (any, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, j *Job) (any, error) { return f(ctx, j) }

// Middleware wraps a handler (logging, metrics, panics, tracing).
type Middleware func(Handler) Handler

// Mux routes jobs to handlers by exact job type.
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]Handler
	mw       []Middleware
}

// NewMux returns an empty registry.
func NewMux() *Mux { return &Mux{handlers: map[string]Handler{}} }

// Handle registers h for jobType. Registering a type twice is an error, so
// mistakes show at start-up.
func (m *Mux) Handle(jobType string, h Handler) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if jobType == "" || h == nil {
		return fmt.Errorf("worker: empty job type or nil handler")
	}
	if _, dup := m.handlers[jobType]; dup {
		return fmt.Errorf("worker: handler for %q registered twice", jobType)
	}
	m.handlers[jobType] = h
	return nil
}

// HandleFunc registers a function for jobType.
func (m *Mux) HandleFunc(jobType string, f func(ctx context.Context, j *Job) (any, error)) error {
	return m.Handle(jobType, HandlerFunc(f))
}

// Use appends middleware; the first added runs outermost.
func (m *Mux) Use(mw ...Middleware) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mw = append(m.mw, mw...)
}

// Handler returns the handler for jobType wrapped in the middleware, and
// whether one is registered.
func (m *Mux) Handler(jobType string) (Handler, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	h, ok := m.handlers[jobType]
	if !ok {
		return nil, false
	}
	for i := len(m.mw) - 1; i >= 0; i-- {
		h = m.mw[i](h)
	}
	return h, true
}

// Types lists the registered job types, sorted.
func (m *Mux) Types() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Sorted(maps.Keys(m.handlers))
}
