// Command crashfn is a test function for the local runtime: it answers
// with its process id, or exits when asked to crash.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(_ context.Context, in map[string]any) (map[string]any, error) {
		if in["crash"] == true {
			os.Exit(86)
		}
		return map[string]any{"pid": os.Getpid()}, nil
	})
}
