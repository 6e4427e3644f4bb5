// Package ojserr defines the one API error type of the product. Every error a
// client sees carries an OJS error code, maps to exactly one HTTP status (in
// Status) and is rendered in the OJS error envelope by pkg/httpapi.
package ojserr

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
)

// Code is a machine-readable OJS error code (ojs-http-binding.md section 16.3).
type Code string

// Standard codes used by this product.
const (
	InvalidRequest       Code = "invalid_request"
	InvalidPayload       Code = "invalid_payload"
	NotFound             Code = "not_found"
	Conflict             Code = "conflict"
	ValidationError      Code = "validation_error"
	SchemaValidation     Code = "schema_validation"
	InvalidWorkflow      Code = "invalid_workflow"
	Duplicate            Code = "duplicate"
	QueuePaused          Code = "queue_paused"
	Unsupported          Code = "unsupported"
	PayloadTooLarge      Code = "payload_too_large"
	UnsupportedMediaType Code = "unsupported_media_type"
	MethodNotAllowed     Code = "method_not_allowed"
	Unauthenticated      Code = "unauthenticated"
	PermissionDenied     Code = "permission_denied"
	RateLimited          Code = "rate_limited"
	// QueueFull is the backpressure extension's refusal, sent as
	// QUEUE_FULL (ojs-backpressure.md 7.1; see wire).
	QueueFull Code = "queue_full"
	// TenantLimitExceeded is the multi-tenancy extension's refusal of a
	// tenant's enqueue past its limits, sent as TENANT_LIMIT_EXCEEDED
	// (ojs-multi-tenancy.md 8.2).
	TenantLimitExceeded Code = "tenant_limit_exceeded"
	// AgentMaxDelegationDepth refuses an AI agent's task delegated past
	// its chain's maximum depth, sent as AGENT_MAX_DELEGATION_DEPTH
	// (ojs-ai-agents.md 3).
	AgentMaxDelegationDepth Code = "agent_max_delegation_depth"
	BackendError            Code = "backend_error"
)

// Error is an API error: a code, a message safe to show the client, optional
// structured details, and whether retrying the same request can succeed.
type Error struct {
	Code      Code
	Message   string
	Details   map[string]any
	Retryable bool
	// Type is an optional error type (e.g. "validation_error").
	Type string
	// Hint suggests a fix; shown to the client when set.
	Hint string
	// HTTPStatus overrides the status derived from Code when non-zero.
	HTTPStatus int
	// Cause is the underlying error, logged but never sent to the client.
	Cause error
	// Headers are response headers the error is sent with (Retry-After).
	Headers map[string]string
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// wire maps the codes outside the HTTP binding's table (16.3) to the code
// sent: one of the table's where one fits (the specific meaning goes in
// "type"), else x_-prefixed. conflict stays (docs/errors.md).
var wire = map[Code]Code{
	InvalidWorkflow:         InvalidRequest,
	ValidationError:         InvalidRequest,
	PayloadTooLarge:         InvalidRequest,
	UnsupportedMediaType:    InvalidRequest,
	MethodNotAllowed:        InvalidRequest,
	Unauthenticated:         "x_unauthenticated",
	PermissionDenied:        "x_permission_denied",
	QueueFull:               "QUEUE_FULL",
	TenantLimitExceeded:     "TENANT_LIMIT_EXCEEDED",
	AgentMaxDelegationDepth: "AGENT_MAX_DELEGATION_DEPTH",
}

// Wire returns the code and type the error is sent with (see wire), the
// specific kind as the type when the code was mapped.
func (e *Error) Wire() (Code, string) {
	w, ok := wire[e.Code]
	if !ok {
		return e.Code, e.Type
	}
	if e.Type != "" {
		return w, e.Type
	}
	return w, string(e.Code)
}

// Status is the HTTP status for the error's code.
func (e *Error) Status() int {
	return cmp.Or(e.HTTPStatus, statuses[e.Code], http.StatusInternalServerError)
}

var statuses = map[Code]int{
	InvalidRequest: http.StatusBadRequest, InvalidPayload: http.StatusBadRequest, InvalidWorkflow: http.StatusBadRequest,
	NotFound: http.StatusNotFound, Conflict: http.StatusConflict, Duplicate: http.StatusConflict,
	QueuePaused: http.StatusUnprocessableEntity, Unsupported: http.StatusUnprocessableEntity, ValidationError: http.StatusUnprocessableEntity,
	SchemaValidation: http.StatusUnprocessableEntity, AgentMaxDelegationDepth: http.StatusUnprocessableEntity,
	PayloadTooLarge: http.StatusRequestEntityTooLarge, UnsupportedMediaType: http.StatusUnsupportedMediaType,
	MethodNotAllowed: http.StatusMethodNotAllowed, Unauthenticated: http.StatusUnauthorized, PermissionDenied: http.StatusForbidden,
	RateLimited: http.StatusTooManyRequests, QueueFull: http.StatusTooManyRequests, TenantLimitExceeded: http.StatusTooManyRequests,
}

// New returns an error with the given code and message.
func New(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }

// Newf is New with a format.
func Newf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// With returns e with key set in its details.
func (e *Error) With(key string, value any) *Error {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = value
	return e
}

// Invalid is a 400 invalid_request naming the offending field.
func Invalid(field, format string, args ...any) *Error {
	return Newf(InvalidRequest, format, args...).With("field", field)
}

// NotFoundf is a 404 for a resource of the given kind.
func NotFoundf(kind, id string) *Error {
	e := Newf(NotFound, "%s '%s' not found.", titled(kind), id).With("resource_type", kind).With("resource_id", id)
	e.Hint = "Check the " + kind + " id; finished items may have expired from storage."
	return e
}

// StateConflict is a 409 for an operation the resource's current state does
// not allow. code is Conflict, or InvalidRequest where the HTTP binding's
// examples use it (cancel, activate).
func StateConflict(code Code, format string, args ...any) *Error {
	e := Newf(code, format, args...)
	e.HTTPStatus = http.StatusConflict
	return e
}

func titled(s string) string {
	if s != "" && 'a' <= s[0] && s[0] <= 'z' {
		return string(s[0]-32) + s[1:]
	}
	return s
}

// Backend wraps an infrastructure failure as a retryable 500 whose message
// does not leak internals.
func Backend(cause error) *Error {
	return &Error{Code: BackendError, Message: "The backend failed to process the request; retry later.", Retryable: true, Cause: cause}
}

// As returns err as an *Error, wrapping unknown errors as backend errors.
func As(err error) *Error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return Backend(err)
}

// Is reports whether err is an *Error with the given code.
func Is(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
