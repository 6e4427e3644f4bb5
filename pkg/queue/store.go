package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
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

// batchGetter is a client with BatchGetItem (FetchState's one read).
type batchGetter interface {
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

func avS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func ms(t time.Time) int64 { return t.UnixMilli() }

// decodeIf decodes a stream image into a T when its sort key satisfies
// match; ok is false for other items.
func decodeIf[T any](av map[string]types.AttributeValue, match func(sk string) bool, what string) (*T, bool, error) {
	sk, ok := av[attrSK].(*types.AttributeValueMemberS)
	if !ok || !match(sk.Value) {
		return nil, false, nil
	}
	var v T
	if err := attributevalue.UnmarshalMap(av, &v); err != nil {
		return nil, false, fmt.Errorf("decode %s: %w", what, err)
	}
	return &v, true, nil
}

func prefixed(p string) func(string) bool {
	return func(sk string) bool { return strings.HasPrefix(sk, p) }
}

func equals(v string) func(string) bool { return func(sk string) bool { return sk == v } }
