package localrt

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/ojs-aws/ojs-serverless/pkg/edge/streamevent"
)

// TestLambdaRecordsMatchTheEventShape checks that what the local Streams
// mapping sends decodes as events.DynamoDBEvent with every attribute type
// intact, as the real mapping's records do.
func TestLambdaRecordsMatchTheEventShape(t *testing.T) {
	t.Parallel()
	created := time.Unix(1795255200, 0)
	img := map[string]types.AttributeValue{
		"s": &types.AttributeValueMemberS{Value: "x"}, "n": &types.AttributeValueMemberN{Value: "12.5"},
		"b": &types.AttributeValueMemberBOOL{Value: true}, "z": &types.AttributeValueMemberNULL{Value: true},
		"bin": &types.AttributeValueMemberB{Value: []byte{0, 1}}, "ss": &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"ns": &types.AttributeValueMemberNS{Value: []string{"1"}},
		"l":  &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "e"}}},
		"m":  &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberN{Value: "1"}}},
	}
	rec := types.Record{EventID: aws.String("e1"), EventName: types.OperationTypeModify, EventVersion: aws.String("1.1"),
		Dynamodb: &types.StreamRecord{ApproximateCreationDateTime: &created, Keys: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
			NewImage: img, OldImage: img, SequenceNumber: aws.String("42"), SizeBytes: aws.Int64(10), StreamViewType: types.StreamViewTypeNewAndOldImages}}
	raw, err := json.Marshal(map[string]any{"Records": lambdaRecords([]types.Record{rec}, "arn:x")})
	if err != nil {
		t.Fatal(err)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	r := ev.Records[0]
	if r.EventName != "MODIFY" || r.EventSource != "aws:dynamodb" || r.EventSourceArn != "arn:x" || r.Change.SequenceNumber != "42" ||
		r.Change.StreamViewType != "NEW_AND_OLD_IMAGES" || r.Change.ApproximateCreationDateTime.Unix() != created.Unix() {
		t.Fatalf("record: %+v", r)
	}
	back, err := streamevent.Image(r.Change.NewImage)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := back["n"].(*ddb.AttributeValueMemberN)
	bin, _ := back["bin"].(*ddb.AttributeValueMemberB)
	ss, _ := back["ss"].(*ddb.AttributeValueMemberSS)
	l, _ := back["l"].(*ddb.AttributeValueMemberL)
	m, _ := back["m"].(*ddb.AttributeValueMemberM)
	z, _ := back["z"].(*ddb.AttributeValueMemberNULL)
	if len(back) != len(img) || n == nil || n.Value != "12.5" || bin == nil || string(bin.Value) != "\x00\x01" || ss == nil || len(ss.Value) != 2 ||
		l == nil || len(l.Value) != 1 || m == nil || m.Value["k"] == nil || z == nil {
		t.Fatalf("attributes changed in transit: %+v", back)
	}
}
