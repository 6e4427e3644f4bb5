package store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// The table kernel's part that pkg/queue (queue and worker items) builds
// on: the queue registry's sharded partitions, the fan-out over shards,
// paged queries and the retry pause.

// queuesPK is the base of the queue registry's partitions (QUEUES,
// QUEUES#1, ...), sharded by queue name.
const queuesPK = "QUEUES"

// RegistryPK is the partition holding a queue's registry and rate limiter
// items (the shard of the queue registry its name hashes to).
func RegistryPK(queue string) string { return registryPK(queue) }

// RegistryPKs lists every partition of the queue registry, shard 0
// first (topology.JobTable.Shards.Registry of them, at least one).
func RegistryPKs() []string { return shardKeys(queuesPK, shards().Registry) }

// EachShard runs read for every partition key at once (one call when
// there is one key) and returns the answers in key order; the first error
// cancels the others' context.
func EachShard[T any](ctx context.Context, keys []string, read func(ctx context.Context, pk string) (T, error)) ([]T, error) {
	return eachShard(ctx, keys, read)
}

// QueryAll runs a query page by page (in.ExclusiveStartKey advances) and
// decodes every item as a T.
func QueryAll[T any](ctx context.Context, db DynamoAPI, in *dynamodb.QueryInput) ([]T, error) {
	return queryAll[T](ctx, db, in)
}

// ConflictBackoff is the pause before try n+1 of a request DynamoDB left
// unprocessed or cancelled on a conflict: full jitter over 20 ms doubling
// up to 640 ms (plus 1 ms).
func ConflictBackoff(n int) time.Duration { return conflictBackoff(n) }
