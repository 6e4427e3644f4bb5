package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

func TestItemBytesFollowsDynamoDBsRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		item map[string]types.AttributeValue
		want int
	}{
		{"string", map[string]types.AttributeValue{"ab": &types.AttributeValueMemberS{Value: "héllo"}}, 2 + 6},
		{"number", map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "1795255200000"}}, 1 + 8},
		{"bool and null", map[string]types.AttributeValue{"b": &types.AttributeValueMemberBOOL{}, "z": &types.AttributeValueMemberNULL{Value: true}}, 4},
		{"list of strings", map[string]types.AttributeValue{"errors": &types.AttributeValueMemberL{Value: []types.AttributeValue{
			&types.AttributeValueMemberS{Value: "abc"}, &types.AttributeValueMemberS{Value: "de"}}}}, 6 + 3 + 1 + 3 + 1 + 2},
		{"map", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"k": &types.AttributeValueMemberS{Value: "v"}}}}, 1 + 3 + 1 + 1 + 1},
	} {
		if got := store.ItemBytes(tc.item); got != tc.want {
			t.Errorf("%s: %d bytes, want %d", tc.name, got, tc.want)
		}
	}
}

// pad returns an item of exactly n bytes by ItemBytes, with every
// attribute type a job item holds.
func pad(t *testing.T, pk string, n int) map[string]types.AttributeValue {
	t.Helper()
	item := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: "JOB"},
		"version": &types.AttributeValueMemberN{Value: "12"}, "push": &types.AttributeValueMemberBOOL{Value: true},
		"errors": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: `{"type":"x"}`}}},
		"v":      &types.AttributeValueMemberS{},
	}
	item["v"] = &types.AttributeValueMemberS{Value: strings.Repeat("a", n-store.ItemBytes(item))}
	if store.ItemBytes(item) != n {
		t.Fatalf("padded item is %d bytes", store.ItemBytes(item))
	}
	return item
}

// TestItemBytesNeverUndercountsDynamoDBLocal: what ItemBytes puts at the
// limits, DynamoDB Local (which enforces both, as DynamoDB does) accepts:
// an item of 400 KB and a transaction of awslimit.DynamoTxBytes. So the
// product's checks refuse whatever DynamoDB would, before writing.
func TestItemBytesNeverUndercountsDynamoDBLocal(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	db := testenv.DynamoDB()
	ctx := context.Background()
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: pad(t, "JOB#max", awslimit.DynamoItemBytes)}); err != nil {
		t.Fatalf("an item of %d bytes by ItemBytes: %v", awslimit.DynamoItemBytes, err)
	}
	tx := make([]types.TransactWriteItem, awslimit.DynamoTxItems)
	for i := range tx {
		tx[i] = types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.Table()), Item: pad(t, fmt.Sprintf("JOB#tx-%03d", i), awslimit.DynamoTxBytes/awslimit.DynamoTxItems)}}
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx}); err != nil {
		t.Fatalf("a transaction of %d bytes by ItemBytes: %v", awslimit.DynamoTxBytes, err)
	}
	// And past DynamoDB Local's own limit, it refuses (a 500 before the
	// product checked sizes).
	for i := range tx {
		tx[i] = types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.Table()), Item: pad(t, fmt.Sprintf("JOB#over-%03d", i), 4<<20/awslimit.DynamoTxItems+100)}}
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx}); err == nil {
		t.Fatal("DynamoDB Local accepted a transaction over 4 MiB")
	}
}

// TestCreateRefusesWhatDynamoDBWould: a batch whose items pass the
// transaction limit is refused before anything is written.
func TestCreateRefusesWhatDynamoDBWould(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	var jobs []*job.Job
	total := 0
	for i := 0; i < store.MaxBatch; i++ {
		// Random base64: stored compressed to about three quarters.
		j := newJob(t, fmt.Sprintf(`{"type":"a.b","args":[%q]}`, testenv.RandomText(55<<10, uint64(i))), t0)
		n, err := store.JobItemBytes(j, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		jobs = append(jobs, j)
	}
	var tl *store.TooLargeError
	if err := s.Create(ctx, jobs, time.Minute); !errors.As(err, &tl) || tl.What != "transaction" || tl.Bytes != total || tl.Max != awslimit.DynamoTxBytes {
		t.Fatalf("create of %d bytes: %v", total, err)
	}
	if _, err := s.Get(ctx, jobs[0].ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused batch wrote a job: %v", err)
	}
	if err := s.Create(ctx, jobs[:90], time.Minute); err != nil {
		t.Fatalf("90 of them fit: %v", err)
	}
}
