package lifecycle

import (
	"errors"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// itemSizes returns the size of each job's item as DynamoDB counts it, or
// a 413 for an item over store.MaxJobItemBytes or a batch of one
// transaction whose items pass the transaction limit.
func (s *Service) itemSizes(jobs []*job.Job) ([]int, error) {
	sizes := make([]int, len(jobs))
	total := 0
	for i, j := range jobs {
		n, err := store.CheckJobItem(j, s.redel)
		if tl := (*store.TooLargeError)(nil); errors.As(err, &tl) {
			tl.Index = i
			return nil, tooLarge(tl)
		}
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		sizes[i] = n
		total += n
	}
	if len(jobs) > 1 && len(jobs) <= store.MaxBatch && total > awslimit.DynamoTxBytes {
		return nil, tooLarge(&store.TooLargeError{What: "transaction", Bytes: total, Max: awslimit.DynamoTxBytes})
	}
	return sizes, nil
}

// tooLarge maps a write refused for its size to 413 payload_too_large.
func tooLarge(e *store.TooLargeError) *ojserr.Error {
	switch e.What {
	case "job":
		oe := ojserr.Newf(ojserr.PayloadTooLarge, "Job at index %d takes %d bytes as stored (its args and meta compressed); a job is stored in at most %d, which leaves room for its result and errors in a DynamoDB item of 400 KB.", e.Index, e.Bytes, e.Max).
			With("index", e.Index).With("stored_bytes", e.Bytes).With("max_stored_bytes", e.Max).With("field", "args")
		oe.Hint = "Its args do not compress enough to fit: store the data elsewhere (an S3 object, say) and pass its reference in args (ojs-payload-limits.md section 5)."
		return oe
	case "item":
		return ojserr.Newf(ojserr.PayloadTooLarge, "Job at index %d takes %d bytes as stored; a DynamoDB item holds at most %d.", e.Index, e.Bytes, e.Max).
			With("index", e.Index).With("actual_bytes", e.Bytes).With("max_bytes", e.Max)
	}
	oe := ojserr.Newf(ojserr.PayloadTooLarge, "The batch's jobs take %d bytes as stored; a batch of up to %d jobs is written in one DynamoDB transaction, which holds at most %d bytes.",
		e.Bytes, store.MaxBatch, e.Max).With("actual_bytes", e.Bytes).With("max_bytes", e.Max)
	oe.Hint = "Send the jobs in smaller batches."
	return oe
}

// asTooLarge reports a *store.TooLargeError in err as a 413.
func asTooLarge(err error) (*ojserr.Error, bool) {
	if tl, ok := errors.AsType[*store.TooLargeError](err); ok {
		return tooLarge(tl), true
	}
	return nil, false
}

// txChunks splits a large batch, in order, into chunks of one transaction
// each (store.MaxBatch jobs, awslimit.DynamoTxBytes): each chunk's first
// index, and len(sizes) last.
func txChunks(sizes []int) []int {
	starts := []int{0}
	n, bytes := 0, 0
	for i, sz := range sizes {
		if n == store.MaxBatch || (n > 0 && bytes+sz > awslimit.DynamoTxBytes) {
			starts = append(starts, i)
			n, bytes = 0, 0
		}
		n++
		bytes += sz
	}
	return append(starts, len(sizes))
}
