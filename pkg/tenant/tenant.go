// Package tenant owns the tenant registry of the multi-tenancy extension
// (docs/multi-tenancy.md): one item per tenant that ever had a job, with
// the queues its jobs went to, written at admission (once per process and
// tenant and queue). A tenant's jobs are tagged (job.Job.Tenant), listed
// in the tenant index while available (pkg/store), and their events paged
// per tenant (pkg/events); Stats reads those.
package tenant

import (
	"context"
	"encoding/json"
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
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Registry items: pk TENANTS#<shard> (by tenant), sk T#<tenant>.
const (
	registryBase = "TENANTS"
	itemPrefix   = "T#"
	// registryShards spreads the registry (written once per process per
	// tenant and queue, read by the listing).
	registryShards = 4
)

// Info is a tenant as registered.
type Info struct {
	ID        string   `dynamodbav:"tenant" json:"tenant_id"`
	Queues    []string `dynamodbav:"queues,stringset,omitempty" json:"queues"`
	FirstSeen string   `dynamodbav:"first_seen" json:"first_seen_at"`
	// Limits are the tenant's limits (SetLimits).
	Limits Limits `dynamodbav:"limits" json:"limits"`
}

// Limits are a tenant's limits (ojs-multi-tenancy.md 8.1).
type Limits struct {
	// MaxConcurrency bounds the tenant's active jobs across its queues
	// (nil: none): its jobs are admitted under the rate limit key
	// ConcurrencyKey(tenant), whose slots count them.
	MaxConcurrency *int `dynamodbav:"max_concurrency,omitempty" json:"max_concurrency,omitempty"`
	// FairnessWeight is the tenant's weight where a queue shares an
	// unscoped FETCH among its tenants by weight (nil: 1).
	FairnessWeight *int `dynamodbav:"fairness_weight,omitempty" json:"fairness_weight,omitempty"`
	// MaxEnqueueRate bounds the jobs the tenant's PUSHes and batches
	// enqueue per fixed window (nil: none; AdmitEnqueue).
	MaxEnqueueRate *job.Window `dynamodbav:"max_enqueue_rate,omitempty" json:"max_enqueue_rate,omitempty"`
	// PriorityBoost is added to the priority of the tenant's jobs as they
	// are admitted (clamped to the priority range; nil: 0).
	PriorityBoost *int `dynamodbav:"priority_boost,omitempty" json:"priority_boost,omitempty"`
}

// Boost is p raised by l's priority boost, within the priority range.
func (l Limits) Boost(p int) int {
	if l.PriorityBoost == nil {
		return p
	}
	return min(max(p+*l.PriorityBoost, job.MinPriority), job.MaxPriority)
}

// MaxFairnessWeight bounds a tenant's fairness_weight.
const MaxFairnessWeight = 1000

// ParseLimits reads PUT /admin/tenants/{id}/limits's body
// (ojs-multi-tenancy.md 8.1): max_concurrency (0 to
// job.MaxKeyConcurrency), fairness_weight (1 to MaxFairnessWeight),
// max_enqueue_rate ({"limit": n, "period": "PT1M"}), priority_boost
// (added to the tenant's jobs' priority), each null or absent for none
// (Validate). max_queue_depth and max_scheduled are refused: no index
// counts a tenant's scheduled jobs (docs/multi-tenancy.md).
func ParseLimits(raw []byte) (Limits, error) {
	var body struct {
		MaxConcurrency json.RawMessage `json:"max_concurrency"`
		FairnessWeight json.RawMessage `json:"fairness_weight"`
		MaxEnqueueRate json.RawMessage `json:"max_enqueue_rate"`
		PriorityBoost  json.RawMessage `json:"priority_boost"`
		MaxQueueDepth  json.RawMessage `json:"max_queue_depth"`
		MaxScheduled   json.RawMessage `json:"max_scheduled"`
	}
	var l Limits
	if err := json.Unmarshal(raw, &body); err != nil {
		return l, ojserr.Invalid("body", "Send {\"max_concurrency\": n, \"fairness_weight\": w, \"max_enqueue_rate\": {\"limit\": n, \"period\": \"PT1M\"}} (each null or absent for none).")
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  **int
	}{{"max_concurrency", body.MaxConcurrency, &l.MaxConcurrency}, {"fairness_weight", body.FairnessWeight, &l.FairnessWeight},
		{"priority_boost", body.PriorityBoost, &l.PriorityBoost}} {
		if len(f.raw) > 0 && string(f.raw) != "null" {
			var n int
			if err := json.Unmarshal(f.raw, &n); err != nil {
				return l, ojserr.Invalid(f.name, "'%s' must be an integer, or null.", f.name)
			}
			*f.dst = &n
		}
	}
	var err error
	if l.MaxEnqueueRate, err = job.ParseWindow("max_enqueue_rate", body.MaxEnqueueRate); err != nil {
		return l, err
	}
	for name, raw := range map[string]json.RawMessage{"max_queue_depth": body.MaxQueueDepth, "max_scheduled": body.MaxScheduled} {
		if len(raw) > 0 && string(raw) != "null" {
			return l, ojserr.Newf(ojserr.Unsupported, "'%s' is not supported on this backend: no index counts a tenant's scheduled jobs. Bound the queue's depth (backpressure) or the tenant's max_enqueue_rate.", name).With("field", name)
		}
	}
	return l, l.Validate()
}

// Validate checks l's ranges: max_concurrency 0 to job.MaxKeyConcurrency,
// fairness_weight 1 to MaxFairnessWeight.
func (l Limits) Validate() error {
	if c := l.MaxConcurrency; c != nil && (*c < 0 || *c > job.MaxKeyConcurrency) {
		return ojserr.Invalid("max_concurrency", "'max_concurrency' must be an integer from 0 to %d, or null for no limit.", job.MaxKeyConcurrency)
	}
	if w := l.FairnessWeight; w != nil && (*w < 1 || *w > MaxFairnessWeight) {
		return ojserr.Invalid("fairness_weight", "'fairness_weight' must be an integer from 1 to %d, or null for 1.", MaxFairnessWeight)
	}
	if b := l.PriorityBoost; b != nil && (*b < job.MinPriority-job.MaxPriority || *b > job.MaxPriority-job.MinPriority) {
		return ojserr.Invalid("priority_boost", "'priority_boost' must be an integer from %d to %d, or null for 0.", job.MinPriority-job.MaxPriority, job.MaxPriority-job.MinPriority)
	}
	return nil
}

// Weight is l's fairness weight (1 when unset).
func (l Limits) Weight() int {
	if l.FairnessWeight == nil {
		return 1
	}
	return *l.FairnessWeight
}

// ConcurrencyKey is the rate limit key that holds a tenant's
// max_concurrency (pkg/ratelimit).
func ConcurrencyKey(tenant string) string { return "tenant:" + tenant }

// limitsTTL is how long a process keeps a tenant's limits read for
// admission (LimitsOf): a change applies to jobs admitted after it, in
// every process, within it.
const limitsTTL = 10 * time.Second

// Registry reads and writes the tenant items of the job table.
type Registry struct {
	db    store.DynamoAPI
	table string
	// limits holds the tenants' limits this process read (cachedLimits).
	limits sync.Map
}

type cachedLimits struct {
	l  Limits
	at time.Time
}

// LimitsOf is tenant's limits as this process last read them (at most
// limitsTTL before now).
func (r *Registry) LimitsOf(ctx context.Context, tenant string, now time.Time) (Limits, error) {
	if v, ok := r.limits.Load(tenant); ok && now.Sub(v.(cachedLimits).at) < limitsTTL {
		return v.(cachedLimits).l, nil
	}
	in, err := r.Get(ctx, tenant)
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	if in != nil {
		l = in.Limits
	}
	r.limits.Store(tenant, cachedLimits{l, now})
	return l, nil
}

// SetLimits sets tenant's limits (registering it if need be) and returns
// it as stored.
func (r *Registry) SetLimits(ctx context.Context, tenant string, l Limits, now time.Time) (*Info, error) {
	out, err := r.upsert(ctx, tenant, now, expression.Set(expression.Name("limits"), expression.Value(l)), types.ReturnValueAllNew)
	if err != nil {
		return nil, fmt.Errorf("set limits of tenant %s: %w", tenant, err)
	}
	r.limits.Store(tenant, cachedLimits{l, now})
	in, err := store.Unmarshal[Info](out.Attributes)
	if in != nil {
		slices.Sort(in.Queues)
	}
	return in, err
}

// upsert applies u to tenant's item, registering the tenant if need be.
func (r *Registry) upsert(ctx context.Context, tenant string, now time.Time, u expression.UpdateBuilder, rv types.ReturnValue) (*dynamodb.UpdateItemOutput, error) {
	u = u.Set(expression.Name("tenant"), expression.Value(tenant)).
		Set(expression.Name("first_seen"), expression.IfNotExists(expression.Name("first_seen"), expression.Value(job.Timestamp(now))))
	expr, err := expression.NewBuilder().WithUpdate(u).Build()
	if err != nil {
		return nil, err
	}
	return r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &r.table, Key: key(tenant), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ReturnValues: rv})
}

// New returns the registry of table through db (store.Store.DB).
func New(db store.DynamoAPI, table string) *Registry { return &Registry{db: db, table: table} }

func key(tenant string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": store.AttrS(store.ShardedKey(registryBase, tenant, registryShards)),
		"sk": store.AttrS(itemPrefix + tenant)}
}

// Record registers that tenant has jobs on queue (callers write it once
// per process and pair: queue.Service's admission).
func (r *Registry) Record(ctx context.Context, tenant, queue string, now time.Time) error {
	u := expression.Add(expression.Name("queues"), expression.Value(store.StringSet{queue}))
	if _, err := r.upsert(ctx, tenant, now, u, types.ReturnValueNone); err != nil {
		return fmt.Errorf("register tenant %s: %w", tenant, err)
	}
	return nil
}

// Get reads a tenant (nil when it never had a job).
func (r *Registry) Get(ctx context.Context, tenant string) (*Info, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &r.table, Key: key(tenant), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("read tenant %s: %w", tenant, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	in, err := store.Unmarshal[Info](out.Item)
	if in != nil {
		slices.Sort(in.Queues)
	}
	return in, err
}

// List reads every tenant, by id.
func (r *Registry) List(ctx context.Context) ([]Info, error) {
	parts, err := store.EachShard(ctx, store.ShardKeys(registryBase, registryShards), func(ctx context.Context, pk string) ([]Info, error) {
		return store.QueryAll[Info](ctx, r.db, &dynamodb.QueryInput{TableName: &r.table,
			KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :t)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS(pk), ":t": store.AttrS(itemPrefix)}})
	})
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	var out []Info
	for _, p := range parts {
		out = append(out, p...)
	}
	for i := range out {
		slices.Sort(out[i].Queues)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
