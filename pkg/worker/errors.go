package worker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Error is a handler failure with an OJS error type (matched against
// non_retryable_errors) and an optional response code overriding the retry
// policy: "RETRY" (default), "DISCARD", "DEAD_LETTER" or "FAIL".
type Error struct {
	Type    string
	Message string
	Code    string
	Details map[string]any
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

// NonRetryable returns an error that ends the job at once (code FAIL).
func NonRetryable(errType, msg string) error {
	return &Error{Type: errType, Message: msg, Code: "FAIL"}
}

// Discard returns an error that discards the job without retry.
func Discard(errType, msg string) error { return &Error{Type: errType, Message: msg, Code: "DISCARD"} }

// Retry returns a retryable error with an explicit type.
func Retry(errType, msg string) error { return &Error{Type: errType, Message: msg, Code: "RETRY"} }

// RateLimited returns a retryable error (type RateLimitExceeded) that
// holds the job's rate limit key until until: no job of the key starts
// before then (ojs-rate-limiting.md 9.1; a downstream API answered 429).
func RateLimited(msg string, until time.Time) error {
	return &Error{Type: "RateLimitExceeded", Message: msg, Code: "RETRY",
		Details: map[string]any{"rate_limit_until": until.UTC().Format(time.RFC3339Nano)}}
}

// describe turns any handler error into a type, code and message.
func describe(err error) (typ, code, msg string, details map[string]any) {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Type, e.Code, e.Message, e.Details
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout", "", "The handler did not finish before its timeout.", nil
	}
	inner := err
	for errors.Unwrap(inner) != nil {
		inner = errors.Unwrap(inner)
	}
	return "handler_error", "", err.Error(), map[string]any{"error_class": fmt.Sprintf("%T", inner)}
}
