// Command crashfn is a test function for the local runtime: it answers
// with its process id, exits when asked to crash, pads its answer to
// {"reply_bytes": n} bytes, and answers an API Gateway event with a 200
// whose body is the reply_bytes query parameter's number of bytes; it
// sleeps {"sleep_ms": n} first when asked.
package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(_ context.Context, in map[string]any) (map[string]any, error) {
		if ms, ok := in["sleep_ms"].(float64); ok {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		if in["crash"] == true {
			os.Exit(86)
		}
		if _, ok := in["rawPath"]; ok {
			q, _ := in["queryStringParameters"].(map[string]any)
			s, _ := q["reply_bytes"].(string)
			n, _ := strconv.Atoi(s)
			return map[string]any{"statusCode": 200, "body": strings.Repeat("a", n)}, nil
		}
		if n, ok := in["reply_bytes"].(float64); ok {
			// {"pad":"…"} of exactly n bytes
			return map[string]any{"pad": strings.Repeat("a", int(n)-len(`{"pad":""}`))}, nil
		}
		return map[string]any{"pid": os.Getpid()}, nil
	})
}
