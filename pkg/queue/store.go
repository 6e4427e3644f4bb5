package queue

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Store reads and writes the queue and worker items of the job table:
// one request per call, except FetchState (a BatchGetItem, repeated for
// unprocessed keys) and QueueInfos and Queues (a paged query of each
// registry shard).
type Store struct {
	db    store.DynamoAPI
	table string
}

// NewStore returns the queue and worker store of table through db (the
// client of the table kernel, store.Store.DB).
func NewStore(db store.DynamoAPI, table string) *Store { return &Store{db: db, table: table} }

// Attribute names shared with the job items (docs/data-model.md).
const (
	attrPK      = "pk"
	attrSK      = "sk"
	attrVersion = "version"
	attrDuePK   = "due_pk"
	attrDueAt   = "due_at"
)

// update applies u to the item at key (under cond when set) and returns
// the attributes rv asks for.
func (s *Store) update(ctx context.Context, key map[string]types.AttributeValue, u expression.UpdateBuilder, cond *expression.ConditionBuilder, rv types.ReturnValue) (map[string]types.AttributeValue, error) {
	b := expression.NewBuilder().WithUpdate(u)
	if cond != nil {
		b = b.WithCondition(*cond)
	}
	expr, err := b.Build()
	if err != nil {
		return nil, err
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: key, UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ReturnValues: rv})
	if err != nil {
		return nil, err
	}
	return out.Attributes, nil
}

// get reads, consistently, the item at key as a T (nil when there is
// none); in may hold a projection, what names the item in an error.
func get[T any](ctx context.Context, s *Store, in *dynamodb.GetItemInput, key map[string]types.AttributeValue, what string) (*T, error) {
	in.TableName, in.Key, in.ConsistentRead = &s.table, key, aws.Bool(true)
	out, err := s.db.GetItem(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return store.Unmarshal[T](out.Item)
}
