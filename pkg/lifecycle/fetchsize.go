package lifecycle

import (
	"encoding/json"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// DefaultFetchBytes is the FETCH answer budget when FetchRequest.MaxBytes
// is zero: Lambda's response limit less 64 KiB for the response's status,
// headers and framing. An answer over Lambda's limit would fail after its
// jobs were claimed, burning their attempts with nobody holding them.
const DefaultFetchBytes = awslimit.LambdaResponseBytes - 64<<10

// claimSlack covers what a claim adds to a job as read before it (state,
// attempt, started_at).
const claimSlack = 256

// FetchedBytes is what job j, once claimed, adds to the api function's
// response: its OJS JSON as encoding/json writes it, carried as a JSON
// string inside the Lambda response (so every quote, backslash and
// HTML-escaped character counts as it will). A FETCH claims a job only if
// it fits its budget.
func FetchedBytes(j *job.Job) int {
	b, err := json.Marshal(j)
	if err != nil {
		return 0
	}
	return awslimit.JSONStringLen(b) + claimSlack
}
