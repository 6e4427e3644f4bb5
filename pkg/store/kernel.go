package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// What the aggregates' packages (pkg/wfstore, pkg/cron, pkg/events,
// pkg/queue, pkg/deadletter) build on besides the client (DB) and the
// table's name.

// JobPut builds the conditional put of a new job with its initial index
// entries, set from its state: available jobs join the ready index
// (push-mode ones the due index instead, for redelivery); scheduled ones
// the due index.
func (s *Store) JobPut(j *job.Job, redeliverAfter time.Duration) (*types.Put, error) {
	r, err := toRecord(j)
	if err != nil {
		return nil, err
	}
	r.FetchBytes = FetchBytes(j)
	switch j.State {
	case job.Available:
		if j.Push {
			r.DuePK, r.DueAt = dueKey(j.Queue, j.ID), ms(j.EnqueuedAt.Add(redeliverAfter))
		} else {
			r.ReadyPK, r.ReadySK = readyKey(j.Queue, j.ID), readySortKey(j.Priority, *j.EnqueuedAt, j.ID)
		}
	case job.Scheduled:
		r.DuePK, r.DueAt = dueKey(j.Queue, j.ID), ms(*j.ScheduledAt)
	case job.Pending, job.Cancelled: // Cancelled: a cancel's placeholder (workflow.takeUnwritten)
	default:
		return nil, fmt.Errorf("create job %s in state %s", j.ID, j.State)
	}
	if r.DuePK != "" {
		s.due.wrote(r.DuePK, fromMS(r.DueAt))
	}
	av, err := attributevalue.MarshalMap(r)
	if err != nil {
		return nil, err
	}
	return &types.Put{TableName: &s.table, Item: av, ConditionExpression: aws.String("attribute_not_exists(pk)")}, nil
}

// JobID is the id of the job whose item has primary key (or item) av; ok
// is false for an item that is not a job.
func JobID(av map[string]types.AttributeValue) (id string, ok bool) {
	pk, _ := av[attrPK].(*types.AttributeValueMemberS)
	sk, _ := av[attrSK].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil || sk.Value != jobSK || !strings.HasPrefix(pk.Value, jobPrefix) {
		return "", false
	}
	return strings.TrimPrefix(pk.Value, jobPrefix), true
}

// NewGuard is a Guard (see ApplyAllIf) on the item whose primary key is
// key: condition cond, with its expression attribute names and values.
func NewGuard(key map[string]types.AttributeValue, cond string, names map[string]string, values map[string]types.AttributeValue) Guard {
	return Guard{key: key, cond: cond, names: names, values: values}
}

// ShardedKey is the partition of base, spread over n shards, that holds
// the entries of key (a hash of key picks the shard; shard 0 when n <= 1).
func ShardedKey(base, key string, n int) string { return shardKey(base, shardOf(key, n)) }

// BatchPut writes items to table 25 at a time, eight requests at once,
// each retrying its unprocessed items up to eight times (an error if some
// remain).
func BatchPut(ctx context.Context, db DynamoAPI, table string, items []map[string]types.AttributeValue) error {
	chunks := slices.Collect(slices.Chunk(items, 25))
	return Parallel(ctx, len(chunks), 8, func(ctx context.Context, c int) error {
		reqs := make([]types.WriteRequest, len(chunks[c]))
		for i, it := range chunks[c] {
			reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: it}}
		}
		for tries := 0; len(reqs) > 0; tries++ {
			if tries > 8 {
				return fmt.Errorf("batch write: %d items still unprocessed", len(reqs))
			}
			out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
			if err != nil {
				return err
			}
			reqs = out.UnprocessedItems[table]
			if len(reqs) > 0 {
				time.Sleep(time.Duration(tries+1) * 20 * time.Millisecond)
			}
		}
		return nil
	})
}

// BatchGetJobs reads jobs by id (up to 100 per call, strongly consistent);
// missing ids are absent from the result.
func (s *Store) BatchGetJobs(ctx context.Context, ids []string) (map[string]*job.Job, error) {
	keys := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		keys[i] = JobKey(id)
	}
	out := map[string]*job.Job{}
	var mu sync.Mutex
	return out, BatchGet(ctx, s.db, s.table, keys, "", func(av map[string]types.AttributeValue) error {
		j, err := decodeJob(av)
		if err == nil {
			mu.Lock()
			out[j.ID] = j
			mu.Unlock()
		}
		return err
	})
}

// BatchGet reads the items of table at keys (strongly consistent, 100 a
// call, eight calls at once; only the attributes of projection unless
// empty) and hands each found to each, from several goroutines at once.
func BatchGet(ctx context.Context, db DynamoAPI, table string, keys []map[string]types.AttributeValue, projection string, each func(map[string]types.AttributeValue) error) error {
	var proj *string
	if projection != "" {
		proj = &projection
	}
	chunks := slices.Collect(slices.Chunk(keys, 100))
	return Parallel(ctx, len(chunks), 8, func(ctx context.Context, c int) error {
		keys := chunks[c]
		for tries := 0; len(keys) > 0; tries++ {
			if tries == 8 {
				return fmt.Errorf("batch get: %d keys still unprocessed", len(keys))
			}
			if tries > 0 {
				if err := ctxsleep.Wait(ctx, time.Duration(tries)*20*time.Millisecond); err != nil {
					return err
				}
			}
			res, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{table: {
				Keys: keys, ConsistentRead: aws.Bool(true), ProjectionExpression: proj}}})
			if err != nil {
				return fmt.Errorf("batch get: %w", err)
			}
			for _, av := range res.Responses[table] {
				if err := each(av); err != nil {
					return err
				}
			}
			keys = res.UnprocessedKeys[table].Keys
		}
		return nil
	})
}

// Parallel runs f for 0..n-1, at most conc at once, and returns the first
// error.
func Parallel(ctx context.Context, n, conc int, f func(context.Context, int) error) error {
	if n == 0 {
		return nil
	}
	if n == 1 {
		return f(ctx, 0)
	}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		first = cmp.Or(first, err)
		mu.Unlock()
	}
	for i := range n {
		sem <- struct{}{}
		if i > 0 {
			if err := SliceOver(ctx); err != nil {
				<-sem
				fail(err)
				break
			}
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(ctx, i); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	return first
}

// ErrSliceOver ends a ResumeWorkflow's writing once its slice is used.
var ErrSliceOver = errors.New("creation slice over")

// sliceKey carries, in a ResumeWorkflow's context, whether its slice is
// over (a func() bool), checked between requests, never during one.
type sliceKey struct{}

// WithSlice returns ctx whose batch writers (Parallel, ApplyAll, a
// workflow's creation) start no request once over reports true, though
// the requests under way finish. WithBudget is WithSlice ending at a time.
func WithSlice(ctx context.Context, over func() bool) context.Context {
	return context.WithValue(ctx, sliceKey{}, over)
}

// SliceOver is ErrSliceOver once ctx's slice is over.
func SliceOver(ctx context.Context) error {
	if over, _ := ctx.Value(sliceKey{}).(func() bool); over != nil && over() {
		return ErrSliceOver
	}
	return nil
}

// ConflictTries is how many times a transaction cancelled by a
// TransactionConflict is tried again; ConflictBackoff the pause before try
// n+1 (full jitter over 20 ms doubling up to 640 ms).
const ConflictTries = 8

func ConflictBackoff(n int) time.Duration {
	ceiling := 20 * time.Millisecond << min(n, 5)
	return time.Duration(rand.Int64N(int64(ceiling))) + time.Millisecond
}

// JobFinishedCheck is the transaction ConditionCheck that job id is
// finished (completed, cancelled or discarded) or gone.
func (s *Store) JobFinishedCheck(id string) *types.ConditionCheck {
	return &types.ConditionCheck{TableName: &s.table, Key: JobKey(id),
		ConditionExpression:      aws.String("attribute_not_exists(pk) OR #s IN (:c, :x, :d)"),
		ExpressionAttributeNames: map[string]string{"#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": AttrS(string(job.Completed)), ":x": AttrS(string(job.Cancelled)),
			":d": AttrS(string(job.Discarded))}}
}

// AttrS and AttrN are the string and number attribute values of v, for
// the hand-written expressions of the aggregates' packages.
func AttrS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func AttrN(v int64) types.AttributeValue { return &types.AttributeValueMemberN{Value: itoa(v)} }

// StringSet marshals as a DynamoDB string set (ADD of expression.Value).
type StringSet []string

func (v StringSet) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	return &types.AttributeValueMemberSS{Value: v}, nil
}

// queuesPK is the base of the queue registry's partitions (QUEUES,
// QUEUES#1, ...), sharded by queue name.
const queuesPK = "QUEUES"

// RegistryPKs lists every partition of the queue registry, shard 0
// first (topology.JobTable.Shards.Registry of them, at least one).
func RegistryPKs() []string { return ShardKeys(queuesPK, shards().Registry) }

// DeadIndexPK is the ready index partition key of queue's discarded jobs.
func DeadIndexPK(queue string) string { return deadPrefix + queue }
