package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// What an operator and a handler change on a key (ojs-rate-limiting.md
// 9.1, 10.2), and the listing of keys (10.3).

// SetOverride makes p the key's limits in place of its jobs' until
// expires (zero: until ClearOverride), creating the key's item if no job
// was admitted with it yet, and returns the key's state. Claims decided
// on the key before it are refused by Take's condition and decide again.
func (k *Keys) SetOverride(ctx context.Context, p *job.KeyLimit, expires, now time.Time) (*State, error) {
	u := expression.Set(expression.Name(attrKey), expression.Value(p.Key)).
		Set(expression.Name(attrOverride), expression.Value(job.MarshalKeyLimit(p))).
		Set(expression.Name(attrSlots), expression.IfNotExists(expression.Name(attrSlots), expression.Value(map[string]int{}))).
		Set(expression.Name(attrAt), expression.Value(job.Timestamp(now)))
	if expires.IsZero() {
		u = u.Remove(expression.Name(attrOverrideUntil))
	} else {
		u = u.Set(expression.Name(attrOverrideUntil), expression.Value(expires.UnixMilli()))
	}
	st, err := k.change(ctx, p.Key, u, nil)
	if err == nil {
		err = k.list(ctx, p.Key)
	}
	return st, err
}

// ClearOverride removes the key's override; ErrNotFound for an unknown
// key.
func (k *Keys) ClearOverride(ctx context.Context, key string, now time.Time) (*State, error) {
	u := expression.Remove(expression.Name(attrOverride)).Remove(expression.Name(attrOverrideUntil)).
		Set(expression.Name(attrAt), expression.Value(job.Timestamp(now)))
	c := expression.AttributeExists(expression.Name("pk"))
	return k.change(ctx, key, u, &c)
}

// PauseUntil holds every start of the key until until (a handler's
// rate_limit_until), unless a later hold is there; the stream derives
// rate_limit.dynamic_adjusted from it. An unknown key is left alone.
func (k *Keys) PauseUntil(ctx context.Context, key string, until time.Time, reason string, now time.Time) error {
	u := expression.Set(expression.Name(attrUntil), expression.Value(until.UnixMilli())).
		Set(expression.Name(attrUntilWhy), expression.Value(cmp.Or(reason, "handler reported rate_limit_until"))).
		Set(expression.Name(attrAt), expression.Value(job.Timestamp(now)))
	c := expression.AttributeExists(expression.Name("pk")).And(expression.Or(expression.AttributeNotExists(expression.Name(attrUntil)),
		expression.Name(attrUntil).LessThan(expression.Value(until.UnixMilli()))))
	_, err := k.change(ctx, key, u, &c)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// change updates key's item (under c when set; its failure is
// ErrNotFound) and returns it as written.
func (k *Keys) change(ctx context.Context, key string, u expression.UpdateBuilder, c *expression.ConditionBuilder) (*State, error) {
	out, err := k.write(ctx, key, u, c, types.ReturnValueAllNew)
	if store.ConditionFailed(err) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("change rate limit key %s: %w", key, err)
	}
	return Decode(out.Attributes)
}

// The key registry: pk RLKEYS#<shard>, sk K#<key>, one item per key ever
// admitted or overridden, written once per process and key.
const (
	registryBase   = "RLKEYS"
	registryPrefix = "K#"
	registryShards = 4
)

// list registers key (once per process).
func (k *Keys) list(ctx context.Context, key string) error {
	if _, ok := k.listed.Load(key); ok {
		return nil
	}
	_, err := k.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &k.table, Item: map[string]types.AttributeValue{
		"pk": store.AttrS(store.ShardedKey(registryBase, key, registryShards)), "sk": store.AttrS(registryPrefix + key), attrKey: store.AttrS(key)}})
	if err != nil {
		return fmt.Errorf("register rate limit key %s: %w", key, err)
	}
	k.listed.Store(key, true)
	return nil
}

// Names lists every key admitted or overridden, sorted.
func (k *Keys) Names(ctx context.Context) ([]string, error) {
	type entry struct {
		Key string `dynamodbav:"key"`
	}
	parts, err := store.EachShard(ctx, store.ShardKeys(registryBase, registryShards), func(ctx context.Context, pk string) ([]entry, error) {
		return store.QueryAll[entry](ctx, k.db, &dynamodb.QueryInput{TableName: &k.table, KeyConditionExpression: aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS(pk)}})
	})
	if err != nil {
		return nil, fmt.Errorf("list rate limit keys: %w", err)
	}
	var out []string
	for _, p := range parts {
		for _, it := range p {
			out = append(out, it.Key)
		}
	}
	slices.Sort(out)
	return out, nil
}

// States reads the keys named (absent ones are left out), in order.
func (k *Keys) States(ctx context.Context, keys []string) ([]*State, error) {
	avs := make([]map[string]types.AttributeValue, len(keys))
	for i, key := range keys {
		avs[i] = itemKey(key)
	}
	var mu sync.Mutex
	var out []*State
	err := store.BatchGet(ctx, k.db, k.table, avs, "", func(av map[string]types.AttributeValue) error {
		st, err := Decode(av)
		if err == nil {
			mu.Lock()
			out = append(out, st)
			mu.Unlock()
		}
		return err
	})
	slices.SortFunc(out, func(a, b *State) int { return strings.Compare(a.Key, b.Key) })
	return out, err
}
