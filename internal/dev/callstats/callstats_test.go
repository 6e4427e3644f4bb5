package callstats

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
)

// fakeAWS answers DynamoDB and SQS JSON-protocol requests with canned
// bodies by X-Amz-Target, and remembers the request bodies.
type fakeAWS struct {
	mu     sync.Mutex
	bodies map[string]string
	answer map[string]func(w http.ResponseWriter)
}

func (f *fakeAWS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies[target] = string(b)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if h, ok := f.answer[target]; ok {
		h(w)
		return
	}
	_, _ = w.Write([]byte(`{}`))
}

func newFake(t *testing.T) (*fakeAWS, aws.Config, *Recorder) {
	t.Helper()
	f := &fakeAWS{bodies: map[string]string{}, answer: map[string]func(http.ResponseWriter){
		"DynamoDB_20120810.PutItem": func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(`{"ConsumedCapacity":{"TableName":"t","CapacityUnits":3,"Table":{"CapacityUnits":1},"GlobalSecondaryIndexes":{"ready":{"CapacityUnits":1},"due":{"CapacityUnits":1}}}}`))
		},
		"DynamoDB_20120810.GetItem": func(w http.ResponseWriter) {
			// Only the total, as some emulators report it.
			_, _ = w.Write([]byte(`{"ConsumedCapacity":{"TableName":"t","CapacityUnits":0.5}}`))
		},
		"DynamoDB_20120810.TransactWriteItems": func(w http.ResponseWriter) {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","message":"Transaction cancelled","CancellationReasons":[{"Code":"ConditionalCheckFailed"},{"Code":"None"},{"Code":"None"}]}`))
		},
		"AmazonSQS.ReceiveMessage": func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"Messages":[]}`)) },
		"AmazonSQS.SendMessageBatch": func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(`{"Successful":[{"Id":"0","MessageId":"m0","MD5OfMessageBody":"x"},{"Id":"1","MessageId":"m1","MD5OfMessageBody":"x"}],"Failed":[]}`))
		},
	}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	rec := New("test")
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""),
		BaseEndpoint: aws.String(srv.URL), APIOptions: []func(*middleware.Stack) error{rec.AddMiddleware},
		RetryMaxAttempts: 1}
	return f, cfg, rec
}

func TestCountsDynamoDB(t *testing.T) {
	f, cfg, rec := newFake(t)
	ctx := context.Background()
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	key := map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "a"}}
	in := &dynamodb.PutItemInput{TableName: aws.String("t"), Item: key}
	if _, err := db.PutItem(ctx, in); err != nil {
		t.Fatal(err)
	}
	if in.ReturnConsumedCapacity != "" {
		t.Fatal("the caller's input was changed")
	}
	if !strings.Contains(f.bodies["DynamoDB_20120810.PutItem"], `"ReturnConsumedCapacity":"INDEXES"`) {
		t.Fatalf("consumed capacity not requested: %s", f.bodies["DynamoDB_20120810.PutItem"])
	}
	if _, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: key}); err != nil {
		t.Fatal(err)
	}
	items := make([]ddbtypes.TransactWriteItem, 3)
	for i := range items {
		items[i] = ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: aws.String("t"), Item: key}}
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}); err == nil {
		t.Fatal("want the cancellation")
	}
	s := rec.Set()
	put := s["DynamoDB PutItem"]
	if put.Calls != 1 || put.Attempts != 1 || put.WriteUnits != 3 || put.RequestBytes == 0 {
		t.Fatalf("PutItem %+v", put)
	}
	if get := s["DynamoDB GetItem"]; get.ReadUnits != 0.5 || get.WriteUnits != 0 {
		t.Fatalf("GetItem %+v", get)
	}
	tx := s["DynamoDB TransactWriteItems"]
	if tx.Calls != 1 || tx.Items != 3 || tx.Errors != 1 || tx.ConditionFailed != 1 || tx.WriteUnits != 6 {
		t.Fatalf("TransactWriteItems %+v", tx)
	}
	if tot := s.Total(DynamoDB); tot.Calls != 3 || tot.WriteUnits != 9 || tot.ReadUnits != 0.5 {
		t.Fatalf("total %+v", tot)
	}
}

func TestCountsSQS(t *testing.T) {
	_, cfg, rec := newFake(t)
	ctx := context.Background()
	q := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.DisableMessageChecksumValidation = true })
	if _, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String("http://q/1")}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 70000)
	if _, err := q.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String("http://q/1"), Entries: []sqstypes.SendMessageBatchRequestEntry{
		{Id: aws.String("0"), MessageBody: aws.String(big)}, {Id: aws.String("1"), MessageBody: aws.String("y")}}}); err != nil {
		t.Fatal(err)
	}
	s := rec.Set()
	if r := s["SQS ReceiveMessage"]; r.Calls != 1 || r.Empty != 1 || r.Chunks != 1 {
		t.Fatalf("ReceiveMessage %+v", r)
	}
	if b := s["SQS SendMessageBatch"]; b.Items != 2 || b.Chunks != 2 {
		t.Fatalf("SendMessageBatch %+v", b)
	}
}

func TestSetArithmeticAndFiles(t *testing.T) {
	dir := t.TempDir()
	a := New("fn-a")
	a.record(DynamoDB, "PutItem", func(o *Op) { o.Calls += 2; o.WriteUnits += 2 })
	if err := a.WriteFile(dir); err != nil {
		t.Fatal(err)
	}
	before, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	a.record(DynamoDB, "PutItem", func(o *Op) { o.Calls += 3; o.WriteUnits += 3 })
	a.record(SQS, "SendMessage", func(o *Op) { o.Calls++ })
	if err := a.WriteFile(dir); err != nil {
		t.Fatal(err)
	}
	after, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := after["fn-a"].Sub(before["fn-a"])
	if len(d) != 2 || d["DynamoDB PutItem"].Calls != 3 || d["DynamoDB PutItem"].WriteUnits != 3 || d["SQS SendMessage"].Calls != 1 {
		b, _ := json.Marshal(d)
		t.Fatalf("diff %s", b)
	}
	if ops := d.Ops(); ops[0].Service != DynamoDB {
		t.Fatalf("order %v", ops)
	}
}

func TestChunks(t *testing.T) {
	for n, want := range map[int64]int64{0: 1, 1: 1, 65536: 1, 65537: 2, 256 << 10: 4} {
		if got := Chunks(n); got != want {
			t.Errorf("Chunks(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestSetClause(t *testing.T) {
	for expr, want := range map[string]string{
		"SET #0 = :0, #1 = :1\nREMOVE #2\n": " #0 = :0, #1 = :1\n",
		"REMOVE #a ADD #b :v SET #c = :c":   " #c = :c",
		"ADD version :one":                  "",
		"set #x = :added":                   " #x = :added",
		"SET #DELETE_ME = :1 DELETE #s :v":  " #DELETE_ME = :1 ",
	} {
		if got := setClause(expr); got != want {
			t.Errorf("setClause(%q) = %q, want %q", expr, got, want)
		}
	}
}
