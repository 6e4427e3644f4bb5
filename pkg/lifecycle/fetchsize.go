package lifecycle

import "github.com/ojs-aws/ojs-serverless/pkg/awslimit"

// DefaultFetchBytes is the FETCH answer budget when FetchRequest.MaxBytes
// is zero: Lambda's response limit less 64 KiB for status, headers and
// framing (an answer over it would fail after its jobs were claimed).
const DefaultFetchBytes = awslimit.LambdaResponseBytes - 64<<10
