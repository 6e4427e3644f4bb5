package deadletter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// The dead letter queue's persistence (docs/data-model.md): discarded job
// items in the ready index (store.DeadIndexPK), and the pruner's item.

// Job item attributes this package reads or writes (pkg/store's data
// model).
const (
	attrState    = "state"
	attrPrunedAt = "pruned_at"
)

// The dead letter pruner's bookkeeping item (pk DEADLETTER, sk DLQ#PRUNE):
// the next time a pruning run may start (claimed with a conditional write,
// so two sweepers never prune at once) and what the last run removed. The
// stream derives dead_letter.pruned from its changes.
const (
	pruneRunPK = "DEADLETTER"
	pruneRunSK = "DLQ#PRUNE"
)

// PruneRun is the pruner's bookkeeping item.
type PruneRun struct {
	// Run counts the runs claimed; LastRun is the last one finished.
	Run     int64 `dynamodbav:"run"`
	LastRun int64 `dynamodbav:"last_run"`
	// NextAt is when the next run may start (Unix ms).
	NextAt int64 `dynamodbav:"next_prune_at"`
	// FinishedAt is when the last run finished (Unix ms).
	FinishedAt int64 `dynamodbav:"finished_at"`
	// Pruned is how many jobs the last run removed, per queue in ByQueue.
	Pruned  int            `dynamodbav:"pruned"`
	ByQueue map[string]int `dynamodbav:"by_queue"`
	// ByAge and ByCount split Pruned by the limit that removed them.
	ByAge   int `dynamodbav:"by_age"`
	ByCount int `dynamodbav:"by_count"`
}

func pruneRunKey() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": store.AttrS(pruneRunPK), "sk": store.AttrS(pruneRunSK)}
}

// DecodePruneRun turns a stream image (or a read) into a PruneRun; ok is
// false for other items. It fails when the item is the pruner's but does
// not decode.
func DecodePruneRun(av map[string]types.AttributeValue) (*PruneRun, bool, error) {
	return store.DecodeIf[PruneRun](av, store.Equals(pruneRunSK), "prune run")
}

// table reads and writes the dead letter queue's items in the job table.
type table struct {
	st   *store.Store
	db   store.DynamoAPI
	name string
}

func newTable(st *store.Store) table { return table{st: st, db: st.DB(), name: st.Table()} }

// claimPruneRun starts a pruning run if none started since the last run's
// next_prune_at: one conditional write, so of two sweepers at once only one
// prunes. It returns the run number, or ok=false and the time the next run
// may start when it is not yet time.
func (t table) claimPruneRun(ctx context.Context, now, next time.Time) (int64, bool, time.Time, error) {
	out, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &t.name, Key: pruneRunKey(),
		UpdateExpression:    aws.String("SET next_prune_at = :next, run = if_not_exists(run, :zero) + :one, started_at = :now"),
		ConditionExpression: aws.String("attribute_not_exists(pk) OR next_prune_at <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":next": store.AttrN(next.UnixMilli()), ":now": store.AttrN(now.UnixMilli()),
			":zero": store.AttrN(0), ":one": store.AttrN(1),
		},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		var cur PruneRun
		_ = attributevalue.UnmarshalMap(ccf.Item, &cur)
		return 0, false, time.UnixMilli(cur.NextAt).UTC(), nil
	}
	if err != nil {
		return 0, false, time.Time{}, fmt.Errorf("claim prune run: %w", err)
	}
	var r PruneRun
	if err := attributevalue.UnmarshalMap(out.Attributes, &r); err != nil {
		return 0, false, time.Time{}, err
	}
	return r.Run, true, next, nil
}

// finishPruneRun records what run removed. When more remain (the run hit
// its budget), next moves the next run forward.
func (t table) finishPruneRun(ctx context.Context, run int64, r PruneRun, now time.Time, next *time.Time) error {
	name, value := expression.Name, expression.Value
	u := expression.Set(name("last_run"), value(run)).Set(name("finished_at"), value(now.UnixMilli())).
		Set(name("pruned"), value(r.Pruned)).Set(name("by_age"), value(r.ByAge)).Set(name("by_count"), value(r.ByCount))
	if next != nil {
		u = u.Set(name("next_prune_at"), value(next.UnixMilli()))
	}
	if len(r.ByQueue) > 0 {
		u = u.Set(name("by_queue"), value(r.ByQueue))
	} else {
		// Not an empty map: DynamoDB Local's stream images render an empty
		// map attribute as a string (seen with 3.3.0).
		u = u.Remove(name("by_queue"))
	}
	expr, err := expression.NewBuilder().WithUpdate(u).WithCondition(name("run").Equal(value(run))).Build()
	if err != nil {
		return err
	}
	_, err = t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &t.name, Key: pruneRunKey(), UpdateExpression: expr.Update(),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	if store.ConditionFailed(err) {
		return nil // a later run took over: its record wins
	}
	if err != nil {
		return fmt.Errorf("finish prune run %d: %w", run, err)
	}
	return nil
}

// pruneState reads the pruner's bookkeeping item (nil before the first run).
func (t table) pruneState(ctx context.Context) (*PruneRun, error) {
	out, err := t.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &t.name, Key: pruneRunKey()})
	if err != nil {
		return nil, fmt.Errorf("read prune state: %w", err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	r, _, err := DecodePruneRun(out.Item)
	return r, err
}

// ref locates one job in a queue's dead letter index.
type ref struct {
	ID    string `dynamodbav:"id"`
	Queue string `dynamodbav:"queue"`
	// SortKey is the index sort key: discard time (ms) and id, so refs
	// compare by discard time as strings.
	SortKey string `dynamodbav:"ready_sk"`
}

// oldest returns up to limit of a queue's dead letter jobs, oldest first;
// with before set (not zero), only those discarded before it.
func (t table) oldest(ctx context.Context, queue string, before time.Time, limit int) ([]ref, error) {
	var refs []ref
	in := deadQuery(t.name, queue, time.Time{}, before)
	in.ProjectionExpression, in.ScanIndexForward, in.Limit = aws.String("id, queue, ready_sk"), aws.Bool(true), aws.Int32(int32(min(limit, 1000)))
	for len(refs) < limit {
		out, err := t.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list oldest dead jobs of %s: %w", queue, err)
		}
		var page []ref
		if err := attributevalue.UnmarshalListOfMaps(out.Items, &page); err != nil {
			return nil, err
		}
		refs = append(refs, page...)
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if len(refs) > limit {
		refs = refs[:limit]
	}
	return refs, nil
}

// deadQuery is the query of table's dead letter index of queue: the jobs
// discarded at or after since and before before (either zero for no
// bound), read by the index's key so that jobs outside cost nothing.
func deadQuery(table, queue string, since, before time.Time) *dynamodb.QueryInput {
	cond := "ready_pk = :pk"
	vals := map[string]types.AttributeValue{":pk": store.AttrS(store.DeadIndexPK(queue))}
	switch {
	case !since.IsZero() && !before.IsZero():
		// BETWEEN is inclusive; no key equals a bare time prefix.
		cond += " AND ready_sk BETWEEN :since AND :before"
	case !since.IsZero():
		cond += " AND ready_sk >= :since"
	case !before.IsZero():
		cond += " AND ready_sk < :before"
	}
	if !since.IsZero() {
		vals[":since"] = store.AttrS(store.DeadSortKey(since, ""))
	}
	if !before.IsZero() {
		vals[":before"] = store.AttrS(store.DeadSortKey(before, ""))
	}
	return &dynamodb.QueryInput{TableName: &table, IndexName: aws.String(topology.IndexReady), KeyConditionExpression: aws.String(cond),
		ExpressionAttributeValues: vals}
}

// count counts a queue's dead letter jobs.
func (t table) count(ctx context.Context, queue string) (int, error) {
	n, err := store.CountAll(ctx, t.db, deadQuery(t.name, queue, time.Time{}, time.Time{}))
	if err != nil {
		return 0, fmt.Errorf("count dead jobs of %s: %w", queue, err)
	}
	return n, nil
}

// prune removes one dead letter job for the retention policy. It marks
// the job (pruned_at) on the condition that it is still the same discarded
// job (same dead-letter sort key: not retried meanwhile), then deletes it on
// the condition that the mark is still there. ok is false when the job
// changed in between; it is then left alone.
func (t table) prune(ctx context.Context, r ref, now time.Time) (bool, error) {
	mark := store.AttrN(now.UnixMilli())
	_, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &t.name, Key: store.JobKey(r.ID),
		UpdateExpression:         aws.String("SET pruned_at = :m"),
		ConditionExpression:      aws.String("#s = :d AND ready_pk = :pk AND ready_sk = :sk"),
		ExpressionAttributeNames: map[string]string{"#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":m": mark, ":d": store.AttrS(string(job.Discarded)),
			":pk": store.AttrS(store.DeadIndexPK(r.Queue)), ":sk": store.AttrS(r.SortKey),
		},
	})
	if store.ConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark dead job %s pruned: %w", r.ID, err)
	}
	_, err = t.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &t.name, Key: store.JobKey(r.ID),
		ConditionExpression:      aws.String("#s = :d AND pruned_at = :m"),
		ExpressionAttributeNames: map[string]string{"#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":m": mark, ":d": store.AttrS(string(job.Discarded)),
		},
	})
	if store.ConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("prune dead job %s: %w", r.ID, err)
	}
	return true, nil
}

// delete deletes a discarded job (ojs-dead-letter.md section 10). It
// returns store.ErrNotFound if the job does not exist and a
// *store.ConflictError if it is not discarded.
//
// A job the dead letter pruner has marked (pruned_at) and not yet removed
// is unmarked first: deleted with the mark, the stream function would
// report the operator's delete as a prune (dead_letter.pruned instead of
// dead_letter.deleted). The pruner's own delete, conditional on its mark,
// then leaves the job alone.
func (t table) delete(ctx context.Context, id string) error {
	for try := 0; ; try++ {
		_, err := t.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &t.name, Key: store.JobKey(id),
			ConditionExpression:                 aws.String("#s = :d AND attribute_not_exists(pruned_at)"),
			ExpressionAttributeNames:            map[string]string{"#s": attrState},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":d": store.AttrS(string(job.Discarded))},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			if err != nil {
				return fmt.Errorf("delete dead job %s: %w", id, err)
			}
			return nil
		}
		if len(ccf.Item) == 0 {
			return store.ErrNotFound
		}
		mark, marked := ccf.Item[attrPrunedAt].(*types.AttributeValueMemberN)
		if st, _ := ccf.Item[attrState].(*types.AttributeValueMemberS); !marked || st == nil || st.Value != string(job.Discarded) || try == 2 {
			it, ok, derr := store.DecodeItem(ccf.Item)
			if derr != nil {
				return derr
			}
			if !ok {
				return fmt.Errorf("item is not a job")
			}
			return &store.ConflictError{Current: it.Job, Tried: store.Transition{ID: id, To: "deleted"}}
		}
		_, err = t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &t.name, Key: store.JobKey(id),
			UpdateExpression:          aws.String("REMOVE pruned_at"),
			ConditionExpression:       aws.String("pruned_at = :m"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":m": mark}})
		if err != nil && !store.ConditionFailed(err) {
			return fmt.Errorf("unmark dead job %s: %w", id, err)
		}
		// Deleted by the pruner meanwhile, or unmarked: look again.
	}
}

// page is one page of a dead letter listing; Cursor is empty on the last
// page.
type page struct {
	Jobs   []*job.Job
	Cursor string
}

// pageCursor is the cursor of a listing that goes on after dead letter
// job j.
func pageCursor(j *job.Job) string {
	if j.DiscardedAt == nil {
		return ""
	}
	return j.ID + "|" + store.DeadSortKey(*j.DiscardedAt, j.ID)
}

// page lists discarded jobs of a queue, newest first (oldest first with
// oldest), only those discarded at or after since and before before
// (either zero for no bound; see deadQuery). cursor is the value returned
// by the previous page.
func (t table) page(ctx context.Context, queue string, since, before time.Time, oldest bool, limit int, cursor string) (page, error) {
	in := deadQuery(t.name, queue, since, before)
	in.ScanIndexForward, in.Limit = aws.Bool(oldest), aws.Int32(int32(limit))
	if cursor != "" {
		id, sk, ok := strings.Cut(cursor, "|")
		if !ok {
			return page{}, fmt.Errorf("bad cursor")
		}
		start := store.JobKey(id)
		start["ready_pk"], start["ready_sk"] = store.AttrS(store.DeadIndexPK(queue)), store.AttrS(sk)
		in.ExclusiveStartKey = start
	}
	out, err := t.db.Query(ctx, in)
	if err != nil {
		return page{}, fmt.Errorf("query %s: %w", aws.ToString(in.IndexName), err)
	}
	items := make([]store.Item, 0, len(out.Items))
	for _, av := range out.Items {
		it, ok, err := store.DecodeItem(av)
		if err != nil {
			return page{}, err
		}
		if ok {
			it.Partial = true
			items = append(items, it)
		}
	}
	items, trimmed := store.TrimToBytes(items, store.ListBytes)
	p := page{}
	if (len(out.LastEvaluatedKey) > 0 || trimmed) && len(items) > 0 {
		p.Cursor = pageCursor(items[len(items)-1].Job)
	}
	if items, err = t.st.WholeJobs(ctx, items); err != nil {
		return page{}, err
	}
	p.Jobs = make([]*job.Job, len(items))
	for i, it := range items {
		p.Jobs[i] = it.Job
	}
	return p, nil
}
