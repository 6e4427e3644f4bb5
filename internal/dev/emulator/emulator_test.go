package emulator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// TestStreamsOnTheIndexedDatabase starts the emulators as the test runs do
// and checks what the stream-record indexes must not change: each table's
// stream still holds exactly its own records, in write order, while two
// tables write in turns (the case where the indexes, not the table's
// order, decide what a query reads).
func TestStreamsOnTheIndexedDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	em, err := Start(ctx, Options{IndexStreams: true})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Stop()
	if memoryDir := em.dataDir; memoryDir != "" {
		// Where there is a memory file system (Linux), the database lives
		// there and must be indexed: a JDK is a prerequisite.
		if !em.StreamIndexed {
			t.Fatalf("database in %s but its stream records are not indexed", memoryDir)
		}
	} else if _, err := os.Stat("/dev/shm"); err == nil {
		t.Logf("/dev/shm has under %d bytes free: DynamoDB Local runs -inMemory, unindexed", minMemoryFree)
	}

	creds := credentials.NewStaticCredentialsProvider("local", "local", "")
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(em.DynamoDBEndpoint)})
	st := dynamodbstreams.New(dynamodbstreams.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(em.DynamoDBEndpoint)})
	tables := []string{"streams-a", "streams-b"}
	arns := map[string]string{}
	for _, name := range tables {
		out, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
			StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewImage}})
		if err != nil {
			t.Fatal(err)
		}
		arns[name] = aws.ToString(out.TableDescription.LatestStreamArn)
	}
	const perTable = 40
	for i := range perTable {
		for _, name := range tables {
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name),
				Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("%s-%03d", name, i)}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range tables {
		d, err := st.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arns[name])})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(d.StreamDescription.Shards); n != 1 {
			t.Fatalf("%s: %d shards, want 1", name, n)
		}
		it, err := st.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(arns[name]),
			ShardId: d.StreamDescription.Shards[0].ShardId, ShardIteratorType: stypes.ShardIteratorTypeTrimHorizon})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for iter := it.ShardIterator; iter != nil && len(keys) < perTable; {
			out, err := st.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(7)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range out.Records {
				keys = append(keys, r.Dynamodb.Keys["pk"].(*stypes.AttributeValueMemberS).Value)
			}
			if len(out.Records) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
		if len(keys) != perTable {
			t.Fatalf("%s: %d stream records, want %d: %v", name, len(keys), perTable, keys)
		}
		for i, k := range keys {
			if want := fmt.Sprintf("%s-%03d", name, i); k != want {
				t.Fatalf("%s: record %d is %s, want %s", name, i, k, want)
			}
		}
	}
	em.Stop()
	if em.dataDir != "" {
		if _, err := os.Stat(em.dataDir); !os.IsNotExist(err) {
			t.Fatalf("Stop left %s behind (%v)", em.dataDir, err)
		}
	}
}

// TestSweepRemovesTheDatabasesOfGoneRuns checks that a run killed before
// Stop does not hold its memory for good: the next Start removes its
// directory, and only its.
func TestSweepRemovesTheDatabasesOfGoneRuns(t *testing.T) {
	shm := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{ // name -> owner.pid content ("" for none)
		memoryDirPrefix + "gone":    strconv.Itoa(gone.Process.Pid),
		memoryDirPrefix + "running": strconv.Itoa(os.Getpid()),
		memoryDirPrefix + "young":   "",
		"someone-elses":             strconv.Itoa(gone.Process.Pid),
	}
	for name, owner := range dirs {
		if err := os.Mkdir(filepath.Join(shm, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(shm, name, ownerFile), []byte(owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	old := filepath.Join(shm, memoryDirPrefix+"old-unowned")
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(old, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	sweepMemoryDirs(shm)
	for name, kept := range map[string]bool{
		memoryDirPrefix + "gone": false, memoryDirPrefix + "old-unowned": false,
		memoryDirPrefix + "running": true, memoryDirPrefix + "young": true, "someone-elses": true,
	} {
		_, err := os.Stat(filepath.Join(shm, name))
		if exists := err == nil; exists != kept {
			t.Errorf("%s: exists %v after the sweep, want %v", name, exists, kept)
		}
	}
}
