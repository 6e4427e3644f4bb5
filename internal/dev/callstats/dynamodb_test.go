package callstats_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A transaction bills two write units per item and KB, index entries
// included. DynamoDB Local reports two per KB of the items together, and
// leaves the index entries out of TOTAL: the recorder counts what DynamoDB
// bills.
func TestTransactionUnitsAreCountedPerItem(t *testing.T) {
	st, _ := testenv.Table(t)
	table := st.Table()
	rec := callstats.New("test")
	db := dynamodb.NewFromConfig(testenv.Config(), awsclient.DynamoDBOptions, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, rec.AddMiddleware)
	})
	ctx := context.Background()
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	var items []types.TransactWriteItem
	for i := range 10 {
		item := map[string]types.AttributeValue{"pk": s("T"), "sk": s(fmt.Sprint(i))}
		if i < 3 {
			// In the ready index: one more unit each, twice.
			item["ready_pk"], item["ready_sk"] = s("q"), s(fmt.Sprint(i))
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &table, Item: item}})
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}); err != nil {
		t.Fatal(err)
	}
	if got := rec.Set()["DynamoDB TransactWriteItems"].WriteUnits; got != 2*(10+3) {
		t.Fatalf("a transaction of 10 small items, 3 of them in an index, counted %g write units, want %d", got, 2*(10+3))
	}
}
