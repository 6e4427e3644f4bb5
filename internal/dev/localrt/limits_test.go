package localrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func startTestFunction(t *testing.T) *Function {
	t.Helper()
	return startCrashfn(t, &Function{Name: "testfn", Timeout: time.Minute, Concurrency: 1})
}

// startCrashfn builds testdata/crashfn and starts f with it (stopped when
// the test ends).
func startCrashfn(t *testing.T, f *Function) *Function {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bin, "./testdata/crashfn")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	f.Binary, f.Logger = bin, slog.Default()
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// pidOf invokes crashfn with payload and returns the process id it
// answers with.
func pidOf(ctx context.Context, f *Function, payload string) (int, error) {
	out, err := f.Invoke(ctx, []byte(payload))
	if err != nil {
		return 0, err
	}
	var v struct{ PID int }
	_ = json.Unmarshal(out, &v)
	return v.PID, nil
}

// event returns a JSON object of exactly n bytes.
func event(n int) []byte {
	return []byte(`{"x":"` + strings.Repeat("a", n-len(`{"x":""}`)) + `"}`)
}

// TestInvokeEnforcesLambdaPayloadLimits: a request over 6 MB is refused
// before the function runs; a response over 6 MB fails the invocation;
// both limits are exact, and the environment keeps working.
func TestInvokeEnforcesLambdaPayloadLimits(t *testing.T) {
	t.Parallel()
	f := startTestFunction(t)
	ctx := context.Background()
	if _, err := f.Invoke(ctx, event(awslimit.LambdaRequestBytes)); err != nil {
		t.Fatalf("a request of exactly the limit: %v", err)
	}
	var rtl *RequestTooLargeError
	if _, err := f.Invoke(ctx, event(awslimit.LambdaRequestBytes+1)); !errors.As(err, &rtl) || IsFunctionError(err) {
		t.Fatalf("a request over the limit: %v", err)
	}
	reply := func(n int) error {
		out, err := f.Invoke(ctx, []byte(fmt.Sprintf(`{"reply_bytes":%d}`, n)))
		if err == nil && len(out) != n {
			t.Fatalf("reply of %d bytes, want %d", len(out), n)
		}
		return err
	}
	if err := reply(awslimit.LambdaResponseBytes); err != nil {
		t.Fatalf("a response of exactly the limit: %v", err)
	}
	var fe *FunctionError
	if err := reply(awslimit.LambdaResponseBytes + 1); !errors.As(err, &fe) || fe.Type != ResponseTooLarge {
		t.Fatalf("a response over the limit: %v", err)
	}
	if err := reply(100); err != nil {
		t.Fatalf("after the failed invocation: %v", err)
	}
}

// TestAPIGatewayAnswersLambdaLimitsLikeAWS: through the local API Gateway,
// a request whose event passes 6 MB is a 413 and a response over 6 MB a
// 500, although API Gateway itself takes 10 MB.
func TestAPIGatewayAnswersLambdaLimitsLikeAWS(t *testing.T) {
	t.Parallel()
	rt := &Runtime{fns: map[string]*Function{topology.FunctionAPI: startTestFunction(t)}, log: slog.Default(),
		stats: map[string]int{}, busy: map[string]time.Duration{}}
	srv := httptest.NewServer(http.HandlerFunc(rt.serveHTTP))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name   string
		body   int
		reply  int
		status int
	}{
		{"body under the limit", 5 << 20, 10, http.StatusOK},
		// The body travels as a JSON string inside the event: 6 MiB of
		// body is more than 6 MiB of event.
		{"body at the limit", awslimit.LambdaRequestBytes, 10, http.StatusRequestEntityTooLarge},
		{"body over API Gateway's own limit", 11 << 20, 10, http.StatusRequestEntityTooLarge},
		{"response under the limit", 0, 6 << 20, http.StatusOK},
		{"response over the limit", 0, awslimit.LambdaResponseBytes, http.StatusInternalServerError},
	} {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/x?reply_bytes=%d", srv.URL, tc.reply), strings.NewReader(strings.Repeat("b", tc.body)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, res.StatusCode, tc.status)
		}
	}
}

// TestStreamBatchesStayWithinTheLambdaPayload: the local Streams mapping
// cuts a batch of large records (items near 400 KB, new and old images)
// where its event would pass 6 MB, as the real mapping does.
func TestStreamBatchesStayWithinTheLambdaPayload(t *testing.T) {
	t.Parallel()
	var recs []types.Record
	for i := 0; i < 30; i++ {
		img := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: fmt.Sprint("JOB#", i)},
			"args": &types.AttributeValueMemberS{Value: strings.Repeat("a", 390<<10)}}
		recs = append(recs, types.Record{EventID: aws.String(fmt.Sprint(i)), EventName: types.OperationTypeModify,
			Dynamodb: &types.StreamRecord{Keys: img, NewImage: img, OldImage: img, SequenceNumber: aws.String(fmt.Sprint(i))}})
	}
	batches := 0
	for rest := recs; len(rest) > 0; batches++ {
		enc := encodeRecords(rest, "arn:x")
		n := fitRecords(enc, awslimit.LambdaRequestBytes)
		payload, _ := json.Marshal(map[string]any{"Records": lambdaRecords(rest[:n], "arn:x")})
		if string(payload) != string(streamEvent(enc[:n])) {
			t.Fatal("the event built from encoded records differs from the records encoded together")
		}
		if len(payload) > awslimit.LambdaRequestBytes {
			t.Fatalf("a batch of %d records is %d bytes", n, len(payload))
		}
		if n < len(rest) {
			if more := streamEvent(enc[:n+1]); len(more) <= awslimit.LambdaRequestBytes {
				t.Fatalf("the batch of %d records could have taken one more (%d bytes)", n, len(more))
			}
		}
		rest = rest[n:]
	}
	if batches < 4 {
		t.Fatalf("%d batches for 30 records of about 1.2 MB", batches)
	}
}
