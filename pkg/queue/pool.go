package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Fair scheduling (urn:ojs:ext:fair-scheduling, docs/fair-scheduling.md): a
// pool names queues and how a FETCH shares its jobs among them. A FETCH
// that names a pool (or a strategy) takes its queues' jobs round-robin or
// by weight; a FETCH of a plain queue list keeps the core's left-to-right
// order (ojs-core.md: FETCH MUST check queues in the order given).

// Pool strategies.
const (
	StrategyStrict     = "strict"
	StrategyRoundRobin = "round-robin"
	StrategyWeighted   = "weighted"
)

// Pool is a named set of queues with a sharing strategy and, for
// StrategyWeighted, a positive weight per queue.
type Pool struct {
	Name      string         `json:"name" dynamodbav:"name"`
	Queues    []string       `json:"queues" dynamodbav:"queues"`
	Strategy  string         `json:"strategy" dynamodbav:"strategy"`
	Weights   map[string]int `json:"weights,omitempty" dynamodbav:"weights,omitempty"`
	UpdatedAt string         `json:"updated_at,omitempty" dynamodbav:"updated_at"`
}

// MaxPoolQueues bounds a pool's queues (a FETCH names at most as many).
const MaxPoolQueues = 20

// ParsePool reads a pool's definition: "queues" as a list (with "weights")
// or as an object of queue to {"weight": n} (the form the suite sends);
// "strategy" strict, round-robin (default) or weighted.
func ParsePool(name string, raw []byte) (*Pool, error) {
	if err := ValidatePoolName(name); err != nil {
		return nil, err
	}
	var in struct {
		Name     string          `json:"name"`
		Queues   json.RawMessage `json:"queues"`
		Strategy string          `json:"strategy"`
		Weights  map[string]int  `json:"weights"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, ojserr.New(ojserr.InvalidPayload, "The request body must be a pool: {\"queues\": [...], \"strategy\": \"weighted\", \"weights\": {...}}.").With("field", "body")
	}
	if in.Name != "" && in.Name != name {
		return nil, ojserr.Invalid("name", "The body's 'name' may only repeat the path's ('%s').", name)
	}
	p := &Pool{Name: name, Strategy: in.Strategy, Weights: in.Weights}
	var list []string
	var byQueue map[string]struct {
		Weight int `json:"weight"`
	}
	switch {
	case json.Unmarshal(in.Queues, &list) == nil && list != nil:
		p.Queues = list
	case json.Unmarshal(in.Queues, &byQueue) == nil && byQueue != nil:
		p.Weights = map[string]int{}
		for q, w := range byQueue {
			p.Queues = append(p.Queues, q)
			p.Weights[q] = w.Weight
		}
		// Heaviest first: the order a strict pool and ties follow.
		sort.SliceStable(p.Queues, func(a, b int) bool {
			return p.Weights[p.Queues[a]] > p.Weights[p.Queues[b]] || (p.Weights[p.Queues[a]] == p.Weights[p.Queues[b]] && p.Queues[a] < p.Queues[b])
		})
	default:
		return nil, ojserr.Invalid("queues", "'queues' must list the pool's queues, or map each to {\"weight\": n}.")
	}
	return p, p.validate()
}

// ValidatePoolName checks a pool name (a queue name's form).
func ValidatePoolName(name string) error {
	if err := job.ValidateQueue(name); err != nil {
		return ojserr.Invalid("name", "A pool name must match [a-z0-9][a-z0-9.-]* and be at most %d characters.", job.MaxQueueLength)
	}
	return nil
}

// ValidatePool checks a pool (or a FETCH's strategy and weights) and sets
// its default strategy.
func ValidatePool(p *Pool) error { return p.validate() }

// validate checks a pool's queues, strategy and weights.
func (p *Pool) validate() error {
	if len(p.Queues) == 0 || len(p.Queues) > MaxPoolQueues {
		return ojserr.Invalid("queues", "A pool holds 1 to %d queues.", MaxPoolQueues)
	}
	for i, q := range p.Queues {
		if err := job.ValidateQueue(q); err != nil {
			return err
		}
		if slices.Contains(p.Queues[:i], q) {
			return ojserr.Invalid("queues", "Queue '%s' is listed twice.", q)
		}
	}
	switch p.Strategy {
	case "", "round_robin":
		p.Strategy = StrategyRoundRobin
	case StrategyStrict, StrategyRoundRobin, StrategyWeighted:
	default:
		return ojserr.Newf(ojserr.ValidationError, "Strategy '%s' is not supported; use strict, round-robin or weighted (least-loaded would need every worker's active count at each FETCH).", p.Strategy).
			With("field", "strategy").With("supported", []string{StrategyStrict, StrategyRoundRobin, StrategyWeighted})
	}
	for q, w := range p.Weights {
		if !slices.Contains(p.Queues, q) {
			return ojserr.Invalid("weights", "Weight for '%s', which is not one of the pool's queues.", q)
		}
		if w <= 0 || w > 1000 {
			return ojserr.Invalid("weights", "The weight of '%s' must be from 1 to 1000.", q)
		}
	}
	if p.Strategy == StrategyWeighted {
		for _, q := range p.Queues {
			if p.Weights[q] == 0 {
				return ojserr.Invalid("weights", "A weighted pool needs a weight for every queue; '%s' has none.", q)
			}
		}
	}
	return nil
}

// weight is q's share weight under p's strategy.
func (p *Pool) weight(q string) int {
	if p.Strategy == StrategyWeighted {
		return p.Weights[q]
	}
	return 1
}

const poolsPK = "POOLS"

func poolKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: store.AttrS(poolsPK), attrSK: store.AttrS("POOL#" + name)}
}

// PutPool creates or replaces a pool.
func (s *Store) PutPool(ctx context.Context, p *Pool, now time.Time) error {
	p.UpdatedAt = job.Timestamp(now)
	item, err := attributevalue.MarshalMap(p)
	if err != nil {
		return err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: withAttrs(poolKey(p.Name), item)}); err != nil {
		return fmt.Errorf("put pool %s: %w", p.Name, err)
	}
	return nil
}

// Pool reads a pool (nil: none of that name).
func (s *Store) Pool(ctx context.Context, name string) (*Pool, error) {
	return get[Pool](ctx, s, &dynamodb.GetItemInput{}, poolKey(name), "pool "+name)
}

// Pools lists the pools by name.
func (s *Store) Pools(ctx context.Context) ([]Pool, error) {
	return store.QueryAll[Pool](ctx, s.db, &dynamodb.QueryInput{TableName: &s.table, KeyConditionExpression: aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": store.AttrS(poolsPK)}})
}

// DeletePool removes a pool; false when there was none.
func (s *Store) DeletePool(ctx context.Context, name string) (bool, error) {
	out, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: poolKey(name), ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		return false, fmt.Errorf("delete pool %s: %w", name, err)
	}
	return out.Attributes != nil, nil
}

// PoolRefresh is how long a process trusts a pool it read for FETCH.
const PoolRefresh = 5 * time.Second

// poolCache holds the pools FETCH read, and each pool's smooth weighted
// round-robin state (per process).
type poolCache struct {
	mu    sync.Mutex
	pools map[string]poolRead
	turns map[string]map[string]int
}

type poolRead struct {
	at   time.Time
	pool *Pool
}

// FetchPool is the pool a FETCH names, read at most once per PoolRefresh
// per process; 404 when there is none.
func (s *Service) FetchPool(ctx context.Context, name string) (*Pool, error) {
	if err := ValidatePoolName(name); err != nil {
		return nil, err
	}
	c := &s.poolc
	c.mu.Lock()
	r, ok := c.pools[name]
	c.mu.Unlock()
	now := s.clock()
	if !ok || now.Sub(r.at) >= PoolRefresh {
		p, err := s.qs.Pool(ctx, name)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		r = poolRead{at: now, pool: p}
		c.mu.Lock()
		if c.pools == nil {
			c.pools = map[string]poolRead{}
		}
		c.pools[name] = r
		c.mu.Unlock()
	}
	if r.pool == nil {
		return nil, ojserr.NotFoundf("pool", name)
	}
	return r.pool, nil
}

// Shares splits a FETCH of count jobs over p's queues: strict gives every
// queue the whole count in order (nil); round-robin and weighted deal the
// count one job at a time by smooth weighted round-robin, whose state this
// process keeps per pool, so that successive FETCHes of one job each also
// take turns. A queue with fewer jobs than its share leaves the rest to
// the others (the FETCH's second pass).
func (s *Service) Shares(p *Pool, count int) map[string]int {
	if p == nil || p.Strategy == StrategyStrict {
		return nil
	}
	c := &s.poolc
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.turns == nil {
		c.turns = map[string]map[string]int{}
	}
	key := p.Name + "|" + strings.Join(p.Queues, ",")
	cur := c.turns[key]
	if cur == nil {
		cur = map[string]int{}
		c.turns[key] = cur
	}
	total := 0
	for _, q := range p.Queues {
		total += p.weight(q)
	}
	shares := map[string]int{}
	for range count {
		best := ""
		for _, q := range p.Queues {
			cur[q] += p.weight(q)
			if best == "" || cur[q] > cur[best] {
				best = q
			}
		}
		cur[best] -= total
		shares[best]++
	}
	return shares
}
