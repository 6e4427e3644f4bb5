package app

import (
	"context"
	"io"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Log keys the logger adds to every line written with a context that
// carries a Lambda invocation.
const (
	// LogKeyRequestID is the Lambda invocation's request id (the one in
	// the platform's START/END/REPORT lines), from lambdacontext.
	LogKeyRequestID = "aws_request_id"
	// LogKeyTraceID is the invocation's X-Ray trace header, when tracing
	// is on.
	LogKeyTraceID = "trace_id"
)

// traceIDKey is where aws-lambda-go keeps the invocation's trace header
// (lambda/invoke_loop.go); it exports no constant for it.
const traceIDKey = "x-amzn-trace-id"

// NewLogger returns a JSON slog logger writing to w at level (debug, info,
// warn, error; anything else is info). Lines logged with a context of a
// Lambda invocation (the *Context methods) carry LogKeyRequestID and, with
// tracing, LogKeyTraceID, so every line of one invocation can be found by
// its request id, whatever package wrote it.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(invocationHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})})
}

// invocationHandler adds the Lambda invocation's ids to each record.
type invocationHandler struct{ slog.Handler }

func (h invocationHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
			r.AddAttrs(slog.String(LogKeyRequestID, lc.AwsRequestID))
		}
		if tid, ok := ctx.Value(traceIDKey).(string); ok && tid != "" {
			r.AddAttrs(slog.String(LogKeyTraceID, tid))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h invocationHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return invocationHandler{h.Handler.WithAttrs(attrs)}
}

func (h invocationHandler) WithGroup(name string) slog.Handler {
	return invocationHandler{h.Handler.WithGroup(name)}
}
