package lifecycle

import "github.com/ojs-aws/ojs-serverless/pkg/awslimit"

// DefaultFetchBytes is the FETCH answer budget when FetchRequest.MaxBytes
// is zero: Lambda's response limit less 64 KiB for the response's status,
// headers and framing. An answer over Lambda's limit would fail after its
// jobs were claimed, burning their attempts with nobody holding them. Each
// job counts store.FetchBytes, recorded on it by every write that changes
// it, so FETCH sizes its answer from the ready index alone.
const DefaultFetchBytes = awslimit.LambdaResponseBytes - 64<<10
