package store

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// BatchPut writes items to table with db, which must be a BatchWriter (an
// error otherwise): BatchWriteItem requests of 25 items, eight at once,
// each retrying its unprocessed items up to eight times (an error if some
// remain). It is the kernel's batch write for the aggregates' packages
// (pkg/events writes its pages with it), the same requests as the
// store's own large writes.
func BatchPut(ctx context.Context, db DynamoAPI, table string, items []map[string]types.AttributeValue) error {
	return New(db, table).batchPut(ctx, items)
}
