package queue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// QueueInfo is a registered queue and its pause state.
type QueueInfo struct {
	Name     string `dynamodbav:"name"`
	Paused   bool   `dynamodbav:"paused,omitempty"`
	PausedAt string `dynamodbav:"paused_at,omitempty"`
	// Redeliver is set by a resume: the sweeper re-sends the queue's
	// available push-mode jobs (dropped while paused) and clears it.
	Redeliver string `dynamodbav:"redeliver,omitempty"`
	Version   int64  `dynamodbav:"version,omitempty"`
	// RateLimit is the most jobs per second FETCH hands out (0: none).
	RateLimit float64 `dynamodbav:"rate_limit,omitempty"`
	// CreatedAt is when the queue was first registered.
	CreatedAt string `dynamodbav:"created_at,omitempty"`
	// MaxDepth and Warning are the queue's backpressure bound (0: none)
	// and the share of it above which enqueues are warned (bound.go).
	MaxDepth int     `dynamodbav:"bp_max,omitempty"`
	Warning  float64 `dynamodbav:"bp_warn,omitempty"`
	// Rejected counts the enqueues refused for the bound, RejectedDepth
	// the depth last seen refusing one (recorded at most once a second
	// per API process; the stream derives backpressure.rejected).
	Rejected      int64 `dynamodbav:"bp_rejected,omitempty"`
	RejectedDepth int   `dynamodbav:"bp_depth,omitempty"`
	// Tenants are the tenants whose jobs went to the queue (admission);
	// TenantFairness, when set, is how an unscoped FETCH shares the
	// queue among them (StrategyRoundRobin or StrategyWeighted, by each
	// tenant's fairness_weight; docs/multi-tenancy.md).
	Tenants        []string `dynamodbav:"tenants,stringset,omitempty"`
	TenantFairness string   `dynamodbav:"tenant_fair,omitempty"`
}

const (
	queuePrefix = "Q#"
	// ratePrefix keys a queue's rate limiter state (sk RL#<name>): apart
	// from the registry item so that taking tokens, a write per FETCH,
	// stays out of the stream (topology.StreamFilter).
	ratePrefix = "RL#"
)

func queueKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: store.AttrS(store.RegistryPK(name)), attrSK: store.AttrS(queuePrefix + name)}
}

// withAttrs adds attrs to key (an item to put).
func withAttrs(key, attrs map[string]types.AttributeValue) map[string]types.AttributeValue {
	maps.Copy(key, attrs)
	return key
}

// upsert applies u to queue name's registry item, registering the queue
// (name, created_at) if need be; what says what failed, in an error.
func (s *Store) upsert(ctx context.Context, name, what string, now time.Time, u expression.UpdateBuilder, rv types.ReturnValue) (map[string]types.AttributeValue, error) {
	u = u.Set(expression.Name("name"), expression.Value(name)).
		Set(expression.Name("created_at"), expression.IfNotExists(expression.Name("created_at"), expression.Value(job.Timestamp(now))))
	av, err := s.update(ctx, queueKey(name), u, nil, rv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return av, nil
}

// SetQueuePaused pauses or resumes a queue (registering it if needed) and
// returns its state. Resuming marks the queue for redelivery by the
// sweeper.
func (s *Store) SetQueuePaused(ctx context.Context, name string, paused bool, now time.Time) (*QueueInfo, error) {
	u := expression.Add(expression.Name(attrVersion), expression.Value(1))
	if paused {
		u = u.Set(expression.Name("paused"), expression.Value(true)).
			Set(expression.Name("paused_at"), expression.IfNotExists(expression.Name("paused_at"), expression.Value(job.Timestamp(now))))
	} else {
		u = u.Remove(expression.Name("paused")).Remove(expression.Name("paused_at")).
			Set(expression.Name("redeliver"), expression.Value(job.Timestamp(now)))
	}
	av, err := s.upsert(ctx, name, fmt.Sprintf("set queue %s paused=%v", name, paused), now, u, types.ReturnValueAllNew)
	if err != nil {
		return nil, err
	}
	return store.Unmarshal[QueueInfo](av)
}

// SetQueueRate sets a queue's FETCH rate limit (jobs per second).
func (s *Store) SetQueueRate(ctx context.Context, name string, perSecond float64, now time.Time) error {
	_, err := s.upsert(ctx, name, "set queue "+name+" rate limit", now, expression.Set(expression.Name("rate_limit"), expression.Value(perSecond)), types.ReturnValueNone)
	return err
}

// AddQueueTenant records that tenant has jobs on queue (registering the
// queue if need be).
func (s *Store) AddQueueTenant(ctx context.Context, name, tenant string, now time.Time) error {
	_, err := s.upsert(ctx, name, "add tenant "+tenant+" to queue "+name, now, expression.Add(expression.Name("tenants"), expression.Value(store.StringSet{tenant})), types.ReturnValueNone)
	return err
}

// SetTenantFairness sets how an unscoped FETCH shares a queue among its
// tenants ("": not at all, in the queue's order).
func (s *Store) SetTenantFairness(ctx context.Context, name, strategy string, now time.Time) error {
	u := expression.Set(expression.Name("tenant_fair"), expression.Value(strategy))
	if strategy == "" {
		u = expression.Remove(expression.Name("tenant_fair"))
	}
	_, err := s.upsert(ctx, name, "set tenant fairness of queue "+name, now, u, types.ReturnValueNone)
	return err
}

// FetchQueueState is what FETCH needs of a queue's registry item: whether
// it is paused, its rate limit (jobs per second; 0: none), and its
// tenants and how an unscoped FETCH shares it among them.
type FetchQueueState struct {
	Paused         bool
	Rate           float64
	Tenants        []string
	TenantFairness string
}

// FetchState is what a FETCH reads before it claims: each queue's state
// (an unknown queue is neither paused nor limited) and, when asked, the
// worker's state and directive (nil for an unknown worker).
type FetchState struct {
	Queues map[string]FetchQueueState
	Worker *WorkerInfo
}

// FetchState reads, consistently and in one BatchGetItem, the registry
// items of queues and the worker workerID ("": none).
func (s *Store) FetchState(ctx context.Context, queues []string, workerID string) (FetchState, error) {
	fs := FetchState{Queues: make(map[string]FetchQueueState, len(queues))}
	var keys []map[string]types.AttributeValue
	seen := map[string]bool{}
	for _, q := range queues {
		if !seen[q] {
			seen[q] = true
			keys = append(keys, queueKey(q))
		}
	}
	if workerID != "" {
		keys = append(keys, workerKey(workerID))
	}
	for tries := 0; len(keys) > 0; tries++ {
		if tries == 8 {
			return fs, fmt.Errorf("read fetch state: items left unprocessed")
		}
		out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{s.table: {
			Keys: keys, ConsistentRead: aws.Bool(true),
			ProjectionExpression:     aws.String("sk, #n, paused, rate_limit, worker_id, #s, directive, tenants, tenant_fair"),
			ExpressionAttributeNames: map[string]string{"#n": "name", "#s": "state"},
		}}})
		if err != nil {
			return fs, fmt.Errorf("read fetch state: %w", err)
		}
		for _, av := range out.Responses[s.table] {
			sk, _ := av[attrSK].(*types.AttributeValueMemberS)
			if sk != nil && sk.Value == workerSK {
				var w WorkerInfo
				if err := attributevalue.UnmarshalMap(av, &w); err != nil {
					return fs, err
				}
				fs.Worker = &w
				continue
			}
			var q QueueInfo
			if err := attributevalue.UnmarshalMap(av, &q); err != nil {
				return fs, err
			}
			if sk != nil {
				q.Name = strings.TrimPrefix(sk.Value, queuePrefix)
			}
			fs.Queues[q.Name] = FetchQueueState{Paused: q.Paused, Rate: q.RateLimit, Tenants: q.Tenants, TenantFairness: q.TenantFairness}
		}
		keys = out.UnprocessedKeys[s.table].Keys
		if len(keys) > 0 {
			time.Sleep(store.ConflictBackoff(tries))
		}
	}
	return fs, nil
}

// QueueFetchState reads, consistently, whether a queue is paused and its
// rate limit (an unknown queue is neither).
func (s *Store) QueueFetchState(ctx context.Context, name string) (paused bool, rate float64, err error) {
	q, err := get[QueueInfo](ctx, s, &dynamodb.GetItemInput{ProjectionExpression: aws.String("paused, rate_limit")}, queueKey(name), "queue "+name)
	if err != nil || q == nil {
		return false, 0, err
	}
	return q.Paused, q.RateLimit, nil
}

// TakeRateTokens reserves n jobs of a rate-limited queue at now: it
// succeeds when the queue's previous reservation has run out, and then
// holds the queue for n jobs' worth of time (n / perSecond). The
// reservation is one conditional write, so concurrent fetchers never
// exceed the rate together.
func (s *Store) TakeRateTokens(ctx context.Context, name string, n int, perSecond float64, now time.Time) (bool, error) {
	// Microseconds, rounded up: in milliseconds a hold under 1 ms (a rate
	// above 1,000 a second) rounded to nothing, and every FETCH in the same
	// millisecond passed. (next_ms, the millisecond attribute of before,
	// is ignored: it held for a second at most.)
	hold := int64(math.Ceil(float64(n) / perSecond * 1e6))
	at := now.UnixMicro()
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table,
		Key:                       map[string]types.AttributeValue{attrPK: store.AttrS(store.RegistryPK(name)), attrSK: store.AttrS(ratePrefix + name)},
		UpdateExpression:          aws.String("SET next_us = :next"),
		ConditionExpression:       aws.String("attribute_not_exists(next_us) OR next_us <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":next": store.AttrN(at + hold), ":now": store.AttrN(at)}})
	if store.ConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("rate limit of queue %s: %w", name, err)
	}
	return true, nil
}

// QueueInfos lists the registered queues with their pause state.
func (s *Store) QueueInfos(ctx context.Context) ([]QueueInfo, error) {
	parts, err := store.EachShard(ctx, store.RegistryPKs(), func(ctx context.Context, pk string) ([]QueueInfo, error) {
		return store.QueryAll[QueueInfo](ctx, s.db, &dynamodb.QueryInput{TableName: &s.table, ConsistentRead: aws.Bool(true),
			KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :p)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS(pk), ":p": store.AttrS(queuePrefix)}})
	})
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	var qs []QueueInfo
	for _, p := range parts {
		qs = append(qs, p...)
	}
	slices.SortFunc(qs, func(a, b QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return qs, nil
}

// ClearRedeliver removes a queue's redelivery mark if it is still token
// (a resume in between sets a new one).
func (s *Store) ClearRedeliver(ctx context.Context, name, token string) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: queueKey(name),
		UpdateExpression: aws.String("REMOVE redeliver"), ConditionExpression: aws.String("redeliver = :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": store.AttrS(token)}})
	if _, ok := errors.AsType[*types.ConditionalCheckFailedException](err); err != nil && !ok {
		return fmt.Errorf("clear redelivery of queue %s: %w", name, err)
	}
	return nil
}

// DecodeQueue turns a stream image into a queue item; ok is false for
// other items.
func DecodeQueue(av map[string]types.AttributeValue) (*QueueInfo, bool, error) {
	return store.DecodeIf[QueueInfo](av, store.Prefixed(queuePrefix), "queue item")
}

// EnsureQueue records a queue name in the queue registry (idempotent).
func (s *Store) EnsureQueue(ctx context.Context, name string, now time.Time) error {
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           &s.table,
		Item:                withAttrs(queueKey(name), map[string]types.AttributeValue{"name": store.AttrS(name), "created_at": store.AttrS(job.Timestamp(now))}),
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if _, ok := errors.AsType[*types.ConditionalCheckFailedException](err); err != nil && !ok {
		return fmt.Errorf("register queue %s: %w", name, err)
	}
	return nil
}

// Queues lists the registered queue names.
func (s *Store) Queues(ctx context.Context) ([]string, error) {
	infos, err := s.QueueInfos(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(infos))
	for i, q := range infos {
		names[i] = q.Name
	}
	return names, nil
}
