package tenant

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// A tenant's enqueue windows (max_enqueue_rate, ojs-multi-tenancy.md 8.1):
// one counter item per tenant and fixed window, pk TENANTS#<shard>, sk
// TQ#<tenant>#<window>, kept until the table's TTL removes it a day after
// its window. Outside the table's stream (topology.StreamFilter).
const enqueuePrefix = "TQ#"

// AdmitEnqueue counts n jobs enqueued by tenant now against its
// max_enqueue_rate w: one conditional write of the window's counter, so
// that every process's enqueues together never pass the limit. A refusal
// (nothing counted) is TENANT_LIMIT_EXCEEDED with Retry-After the
// window's end. A request refused for another reason after its tenant's
// count keeps its count (refused early, never late).
func (r *Registry) AdmitEnqueue(ctx context.Context, tenant string, n int, w *job.Window, now time.Time) error {
	period := max(w.Period.Milliseconds(), 1)
	win := now.UnixMilli() / period
	end := time.UnixMilli((win + 1) * period)
	if n > w.Limit {
		return limitExceeded(tenant, "max_enqueue_rate", 0, w.Limit, end.Sub(now))
	}
	key := map[string]types.AttributeValue{"pk": store.AttrS(store.ShardedKey(registryBase, tenant, registryShards)),
		"sk": store.AttrS(enqueuePrefix + tenant + "#" + strconv.FormatInt(win, 10))}
	expr, err := expression.NewBuilder().
		WithUpdate(expression.Add(expression.Name("n"), expression.Value(n)).
			Set(expression.Name(topology.JobTable.TTLAttribute), expression.Value(end.Add(24*time.Hour).Unix()))).
		WithCondition(expression.Or(expression.AttributeNotExists(expression.Name("n")),
			expression.Name("n").LessThanEqual(expression.Value(w.Limit-n)))).Build()
	if err != nil {
		return err
	}
	_, err = r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &r.table, Key: key, UpdateExpression: expr.Update(),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	if store.ConditionFailed(err) {
		cur := 0
		if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
			if c, ok := ccf.Item["n"].(*types.AttributeValueMemberN); ok {
				cur, _ = strconv.Atoi(c.Value)
			}
		}
		return limitExceeded(tenant, "max_enqueue_rate", cur, w.Limit, end.Sub(now))
	}
	if err != nil {
		return ojserr.Backend(fmt.Errorf("count tenant %s's enqueues: %w", tenant, err))
	}
	return nil
}

// limitExceeded is ojs-multi-tenancy.md 8.2's refusal.
func limitExceeded(tenant, limit string, current, maximum int, retryAfter time.Duration) error {
	e := ojserr.Newf(ojserr.TenantLimitExceeded, "Tenant '%s' has exceeded %s (%d).", tenant, limit, maximum).
		With("tenant_id", tenant).With("limit", limit).With("current", current).With("maximum", maximum)
	e.Retryable = true
	e.Headers = map[string]string{"Retry-After": strconv.Itoa(max(int(math.Ceil(retryAfter.Seconds())), 1))}
	return e
}
