// Package examplejobs holds the handlers the worker function registers for
// the demo and the end-to-end tests. Teams replace this package with their
// own handlers (see functions/worker/main.go).
package examplejobs

import (
	"context"
	"fmt"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/worker"
)

// Register adds the example handlers to mux:
//
//	demo.greet        args [name]  -> {"greeting": "Hello, <name>!"}
//	test.echo         returns its args as the result
//	test.fail_once    fails its first attempt, then succeeds
//	test.fail_always  always fails with a retryable error
//	test.sleep        args [milliseconds]: sleeps, honouring the timeout
func Register(mux *worker.Mux) error {
	for t, h := range map[string]worker.HandlerFunc{
		"demo.greet":       greet,
		"test.echo":        echo,
		"test.fail_once":   failOnce,
		"test.fail_always": failAlways,
		"test.sleep":       sleep,
	} {
		if err := mux.Handle(t, h); err != nil {
			return err
		}
	}
	return nil
}

func greet(_ context.Context, j *worker.Job) (any, error) {
	name := "world"
	if err := j.Bind(&name); err != nil {
		return nil, err
	}
	return map[string]any{"greeting": fmt.Sprintf("Hello, %s!", name), "attempt": j.Attempt}, nil
}

func echo(_ context.Context, j *worker.Job) (any, error) { return j.Args, nil }

func failOnce(_ context.Context, j *worker.Job) (any, error) {
	if j.Attempt == 1 {
		return nil, worker.Retry("test.transient", "first attempt fails on purpose")
	}
	return map[string]any{"recovered": true, "attempt": j.Attempt}, nil
}

func failAlways(_ context.Context, j *worker.Job) (any, error) {
	return nil, worker.Retry("test.always_fails", fmt.Sprintf("attempt %d fails on purpose", j.Attempt))
}

func sleep(ctx context.Context, j *worker.Job) (any, error) {
	var millis int
	if err := j.Bind(&millis); err != nil {
		return nil, err
	}
	select {
	case <-time.After(time.Duration(millis) * time.Millisecond):
		return map[string]any{"slept_ms": millis}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
