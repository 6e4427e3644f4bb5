package wfstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// attrReopening marks an item a retry is re-opening (Composite.Reopening).
const attrReopening = "reopening"

// ErrReopening is the answer to a count or roll-up refused because a retry
// is re-opening the composite or shard (Composite.Reopening): the retry counts
// the child once it is done.
var ErrReopening = errors.New("store: a retry is re-opening the workflow's counts")

// RefusedByReopening reports whether err is a workflow write refused
// while a retry re-opens the workflow: ErrReopening, or a node conflict
// on a node carrying the mark.
func RefusedByReopening(err error) bool {
	var nc *ErrNodeConflict
	return errors.Is(err, ErrReopening) || errors.As(err, &nc) && nc.Composite() != nil && nc.Composite().Reopening != ""
}

// ForgetInShard removes children from a counter shard's sets (a retry
// re-running them) and marks the shard as re-opening (Composite.Reopening)
// until ClearShardMark.
func (s *Store) ForgetInShard(ctx context.Context, wfID, path, key string, idx []int) error {
	u := expression.Set(expression.Name(attrReopening), expression.Value("true")).
		Delete(expression.Name("ok"), expression.Value(nums(idx...))).Delete(expression.Name("fail"), expression.Value(nums(idx...)))
	if err := s.updateShard(ctx, wfID, path, key, expression.NewBuilder().WithUpdate(u)); err != nil {
		return fmt.Errorf("forget in %s%s#%s: %w", wfID, path, key, err)
	}
	return nil
}

// ClearShardMark removes a retry's mark from a counter shard (a shard
// without one is left as it is).
func (s *Store) ClearShardMark(ctx context.Context, wfID, path, key string) error {
	b := expression.NewBuilder().WithUpdate(expression.Remove(expression.Name(attrReopening))).
		WithCondition(expression.AttributeExists(expression.Name(attrReopening)))
	if err := s.updateShard(ctx, wfID, path, key, b); err != nil && !store.ConditionFailed(err) {
		return fmt.Errorf("clear the mark of %s%s#%s: %w", wfID, path, key, err)
	}
	return nil
}

func (s *Store) updateShard(ctx context.Context, wfID, path, key string, b expression.Builder) error {
	x, err := b.Build()
	if err != nil {
		return err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, shardSK(path, key)),
		UpdateExpression: x.Update(), ConditionExpression: x.Condition(), ExpressionAttributeNames: x.Names(), ExpressionAttributeValues: x.Values()})
	return err
}
