package wfstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// attrReopening marks an item a retry is re-opening (Node.Reopening).
const attrReopening = "reopening"

// ErrReopening is the answer to a count or roll-up refused because a retry
// is re-opening the composite or shard (Node.Reopening): the retry counts
// the child once it is done.
var ErrReopening = errors.New("store: a retry is re-opening the workflow's counts")

// RefusedByReopening reports whether err is a workflow write refused
// while a retry re-opens the workflow: ErrReopening, or a node conflict
// on a node carrying the mark.
func RefusedByReopening(err error) bool {
	var nc *ErrNodeConflict
	return errors.Is(err, ErrReopening) || errors.As(err, &nc) && nc.Current != nil && nc.Current.Reopening != ""
}

// ForgetInShard removes children from a counter shard's sets (a retry
// re-running them) and marks the shard as re-opening (Node.Reopening)
// until ClearShardMark.
func (s *Store) ForgetInShard(ctx context.Context, wfID, path, key string, idx []int) error {
	x := newExprs()
	update := "SET " + x.name(attrReopening) + " = " + x.str("true") + " DELETE " + x.name("ok") + " " + x.nums(idx) + ", " + x.name("fail") + " " + x.nums(idx)
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, shardSK(path, key)),
		UpdateExpression: &update, ExpressionAttributeNames: x.names, ExpressionAttributeValues: x.values})
	if err != nil {
		return fmt.Errorf("forget in %s%s#%s: %w", wfID, path, key, err)
	}
	return nil
}

// ClearShardMark removes a retry's mark from a counter shard (a shard
// without one is left as it is).
func (s *Store) ClearShardMark(ctx context.Context, wfID, path, key string) error {
	x := newExprs()
	update := "REMOVE " + x.name(attrReopening)
	cond := "attribute_exists(" + x.name(attrReopening) + ")"
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, shardSK(path, key)),
		UpdateExpression: &update, ConditionExpression: &cond, ExpressionAttributeNames: x.names})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("clear the mark of %s%s#%s: %w", wfID, path, key, err)
	}
	return nil
}
