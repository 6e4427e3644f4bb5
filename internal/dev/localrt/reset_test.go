package localrt_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
	"github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
)

// A test runner's FLUSHDB over RESP wipes the table and the queues and is
// answered only once that is done; PING and the connection handshake work.
func TestResetOverRESP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	table := testenv.Name(t, "jobs")
	db := testenv.DynamoDB()
	if _, err := emulator.EnsureTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]dbtypes.AttributeValue{
			"pk": &dbtypes.AttributeValueMemberS{Value: "X#" + strconv.Itoa(i)}, "sk": &dbtypes.AttributeValueMemberS{Value: "S"},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	q := testenv.Queue(t)
	for range 3 {
		if _, err := testenv.SQS().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("m")}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wiped := 0
	go func() {
		_ = localrt.ServeReset(l, func(ctx context.Context) error {
			n, err := localrt.Wipe(ctx, testenv.Config(), table, []string{q})
			wiped += n
			return err
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	send := func(args ...string) string {
		t.Helper()
		var b strings.Builder
		b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
		for _, a := range args {
			b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
		}
		if _, err := io.WriteString(c, b.String()); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimRight(line, "\r\n")
	}
	if got := send("HELLO", "3"); !strings.HasPrefix(got, "-ERR") {
		t.Errorf("HELLO: %q (clients must fall back to RESP2)", got)
	}
	if got := send("CLIENT", "SETINFO", "LIB-NAME", "go-redis"); got != "+OK" {
		t.Errorf("CLIENT SETINFO: %q", got)
	}
	if got := send("PING"); got != "+PONG" {
		t.Errorf("PING: %q", got)
	}
	if got := send("FLUSHDB"); got != "+OK" {
		t.Fatalf("FLUSHDB: %q", got)
	}
	if wiped < 60 {
		t.Errorf("wiped %d items, want at least the 60 written", wiped)
	}
	out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil || len(out.Items) != 0 {
		t.Fatalf("table after FLUSHDB: %d items (%v)", len(out.Items), err)
	}
	msgs, err := testenv.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), MaxNumberOfMessages: 10})
	if err != nil || len(msgs.Messages) != 0 {
		t.Fatalf("queue after FLUSHDB: %d messages (%v)", len(msgs.Messages), err)
	}
}
