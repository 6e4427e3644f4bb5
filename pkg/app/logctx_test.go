package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

func TestLoggerAddsInvocationIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := NewLogger(&buf, "info").With("job_id", "j1")
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-123"})
	ctx = context.WithValue(ctx, traceIDKey, "Root=1-abc-def;Sampled=1") //nolint:staticcheck // aws-lambda-go's own string key
	log.InfoContext(ctx, "job completed")
	log.Info("no invocation")
	log.DebugContext(ctx, "below the level")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %s", len(lines), buf.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first[LogKeyRequestID] != "req-123" || first[LogKeyTraceID] != "Root=1-abc-def;Sampled=1" || first["job_id"] != "j1" {
		t.Errorf("line with an invocation context: %v", first)
	}
	if _, ok := second[LogKeyRequestID]; ok {
		t.Errorf("line without an invocation context has a request id: %v", second)
	}
}
