package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
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
	return map[string]types.AttributeValue{
		attrPK: &types.AttributeValueMemberS{Value: pruneRunPK}, attrSK: &types.AttributeValueMemberS{Value: pruneRunSK},
	}
}

// DecodePruneRun turns a stream image into a PruneRun; ok is false for
// other items.
func DecodePruneRun(av map[string]types.AttributeValue) (*PruneRun, bool, error) {
	return decodeIf[PruneRun](av, equals(pruneRunSK), "prune run")
}

// ClaimPruneRun starts a pruning run if none started since the last run's
// next_prune_at: one conditional write, so of two sweepers at once only one
// prunes. It returns the run number, or ok=false and the time the next run
// may start when it is not yet time.
func (s *Store) ClaimPruneRun(ctx context.Context, now, next time.Time) (int64, bool, time.Time, error) {
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: pruneRunKey(),
		UpdateExpression:    aws.String("SET next_prune_at = :next, run = if_not_exists(run, :zero) + :one, started_at = :now"),
		ConditionExpression: aws.String("attribute_not_exists(pk) OR next_prune_at <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":next": &types.AttributeValueMemberN{Value: itoa(ms(next))}, ":now": &types.AttributeValueMemberN{Value: itoa(ms(now))},
			":zero": &types.AttributeValueMemberN{Value: "0"}, ":one": &types.AttributeValueMemberN{Value: "1"},
		},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
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

// FinishPruneRun records what run removed. When more remain (the run hit
// its budget), next moves the next run forward.
func (s *Store) FinishPruneRun(ctx context.Context, run int64, r PruneRun, now time.Time, next *time.Time) error {
	vals := map[string]types.AttributeValue{
		":run": &types.AttributeValueMemberN{Value: itoa(run)}, ":now": &types.AttributeValueMemberN{Value: itoa(ms(now))},
		":n": &types.AttributeValueMemberN{Value: itoa(int64(r.Pruned))}, ":a": &types.AttributeValueMemberN{Value: itoa(int64(r.ByAge))},
		":c": &types.AttributeValueMemberN{Value: itoa(int64(r.ByCount))},
	}
	upd := "SET last_run = :run, finished_at = :now, pruned = :n, by_age = :a, by_count = :c"
	if next != nil {
		upd += ", next_prune_at = :next"
		vals[":next"] = &types.AttributeValueMemberN{Value: itoa(ms(*next))}
	}
	if len(r.ByQueue) > 0 {
		byQueue, err := attributevalue.Marshal(r.ByQueue)
		if err != nil {
			return err
		}
		vals[":q"] = byQueue
		upd += ", by_queue = :q"
	} else {
		// Not an empty map: DynamoDB Local's stream images render an empty
		// map attribute as a string (seen with 3.3.0).
		upd += " REMOVE by_queue"
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: pruneRunKey(), UpdateExpression: aws.String(upd),
		ConditionExpression: aws.String("run = :run"), ExpressionAttributeValues: vals,
	})
	if conditionFailed(err) {
		return nil // a later run took over: its record wins
	}
	if err != nil {
		return fmt.Errorf("finish prune run %d: %w", run, err)
	}
	return nil
}

// PruneState reads the pruner's bookkeeping item (nil before the first run).
func (s *Store) PruneState(ctx context.Context) (*PruneRun, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: pruneRunKey()})
	if err != nil {
		return nil, fmt.Errorf("read prune state: %w", err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	r, _, err := DecodePruneRun(out.Item)
	return r, err
}

// DeadRef locates one job in a queue's dead letter index.
type DeadRef struct {
	ID    string `dynamodbav:"id"`
	Queue string `dynamodbav:"queue"`
	// SortKey is the index sort key: discard time (ms) and id, so refs
	// compare by discard time as strings.
	SortKey string `dynamodbav:"ready_sk"`
}

// OldestDead returns up to limit of a queue's dead letter jobs, oldest
// first; with before set, only those discarded before it.
func (s *Store) OldestDead(ctx context.Context, queue string, before *time.Time, limit int) ([]DeadRef, error) {
	cond := "ready_pk = :pk"
	vals := map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: deadPrefix + queue}}
	if before != nil {
		cond += " AND ready_sk < :before"
		vals[":before"] = &types.AttributeValueMemberS{Value: deadSortKey(*before, "")}
	}
	var refs []DeadRef
	in := &dynamodb.QueryInput{
		TableName: &s.table, IndexName: aws.String(topology.IndexReady),
		KeyConditionExpression: aws.String(cond), ExpressionAttributeValues: vals,
		ProjectionExpression: aws.String("id, queue, ready_sk"), ScanIndexForward: aws.Bool(true),
		Limit: aws.Int32(int32(min(limit, 1000))),
	}
	for len(refs) < limit {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list oldest dead jobs of %s: %w", queue, err)
		}
		for _, it := range out.Items {
			var r DeadRef
			if err := attributevalue.UnmarshalMap(it, &r); err != nil {
				return nil, err
			}
			refs = append(refs, r)
		}
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

// CountDead counts a queue's dead letter jobs.
func (s *Store) CountDead(ctx context.Context, queue string) (int, error) {
	in := &dynamodb.QueryInput{
		TableName: &s.table, IndexName: aws.String(topology.IndexReady),
		KeyConditionExpression:    aws.String("ready_pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: deadPrefix + queue}},
		Select:                    types.SelectCount,
	}
	n := 0
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return 0, fmt.Errorf("count dead jobs of %s: %w", queue, err)
		}
		n += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return n, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// PruneDead removes one dead letter job for the retention policy. It marks
// the job (pruned_at) on the condition that it is still the same discarded
// job (same dead-letter sort key: not retried meanwhile), then deletes it on
// the condition that the mark is still there. ok is false when the job
// changed in between; it is then left alone.
func (s *Store) PruneDead(ctx context.Context, ref DeadRef, now time.Time) (bool, error) {
	mark := &types.AttributeValueMemberN{Value: itoa(ms(now))}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: jobKey(ref.ID),
		UpdateExpression:         aws.String("SET pruned_at = :m"),
		ConditionExpression:      aws.String("#s = :d AND ready_pk = :pk AND ready_sk = :sk"),
		ExpressionAttributeNames: map[string]string{"#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":m": mark, ":d": &types.AttributeValueMemberS{Value: string(job.Discarded)},
			":pk": &types.AttributeValueMemberS{Value: deadPrefix + ref.Queue}, ":sk": &types.AttributeValueMemberS{Value: ref.SortKey},
		},
	})
	if conditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark dead job %s pruned: %w", ref.ID, err)
	}
	_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: jobKey(ref.ID),
		ConditionExpression:      aws.String("#s = :d AND pruned_at = :m"),
		ExpressionAttributeNames: map[string]string{"#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":m": mark, ":d": &types.AttributeValueMemberS{Value: string(job.Discarded)},
		},
	})
	if conditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("prune dead job %s: %w", ref.ID, err)
	}
	return true, nil
}

// conditionFailed reports whether a single-item write failed its condition.
func conditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}
