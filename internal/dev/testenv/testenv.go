// Package testenv gives integration tests the real emulators: TestMain
// calls Main, which starts DynamoDB Local and the SQS emulator on free ports
// (or reuses the ones named by OJS_TEST_DYNAMODB_ENDPOINT and
// OJS_TEST_SQS_ENDPOINT, which `make test` starts once for all packages),
// and each test gets its own table or queue.
package testenv

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Endpoint environment variables shared with with-emulators.
const (
	EnvDynamoDB = emulator.EnvTestDynamoDB
	EnvSQS      = emulator.EnvTestSQS
)

var (
	cfg     aws.Config
	counter atomic.Int64
	runID   = fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
)

// Main starts the emulators if needed, runs the tests and stops them.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	if os.Getenv(EnvDynamoDB) == "" || os.Getenv(EnvSQS) == "" {
		em, err := emulator.Start(ctx, emulator.Options{IndexStreams: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, "testenv:", err)
			return 1
		}
		defer em.Stop()
		os.Setenv(EnvDynamoDB, em.DynamoDBEndpoint)
		os.Setenv(EnvSQS, em.SQSEndpoint)
	}
	(&emulator.Emulators{DynamoDBEndpoint: os.Getenv(EnvDynamoDB), SQSEndpoint: os.Getenv(EnvSQS)}).SetEnv()
	var err error
	if cfg, err = awsclient.Load(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	return m.Run()
}

// Config is the AWS configuration pointing at the emulators.
func Config() aws.Config { return cfg }

// DynamoDB returns a client for DynamoDB Local.
func DynamoDB() *dynamodb.Client { return dynamodb.NewFromConfig(cfg, awsclient.DynamoDBOptions) }

// SQS returns a client for the SQS emulator.
func SQS() *sqs.Client { return sqs.NewFromConfig(cfg) }

// Name returns a name unique to this test run, for tables and queues.
func Name(t testing.TB, prefix string) string {
	n := strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(strings.ToLower(t.Name()))
	return fmt.Sprintf("%s-%s-%s-%d", prefix, n[:min(len(n), 40)], runID, counter.Add(1))
}

// Table creates a fresh job table and returns a store on it and the
// table's stream ARN.
func Table(t testing.TB) (*store.Store, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := Name(t, "jobs")
	db := DynamoDB()
	arn, err := emulator.EnsureTable(ctx, db, name)
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	// Tables are not deleted: DynamoDB Local stalls while it deletes one.
	return store.New(db, name), arn
}

// CountedTable is Table with every DynamoDB request of the store counted
// in the returned recorder (calls, write and read units as DynamoDB
// Local reports them).
func CountedTable(t testing.TB) (*store.Store, *callstats.Recorder) {
	t.Helper()
	base, _ := Table(t)
	rec := callstats.New("test")
	db := dynamodb.NewFromConfig(cfg, awsclient.DynamoDBOptions, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, rec.AddMiddleware)
	})
	return store.New(db, base.Table()), rec
}

// Eventually polls cond every 20 ms until it returns true or the timeout
// passes, then fails the test with msg. The timeout is at least two
// minutes: a loaded CI machine must not fail a test by being slow.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	timeout = max(timeout, 2*time.Minute)
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, msg)
		}
	}
}

// Queue creates a fresh SQS queue and returns its URL.
func Queue(t testing.TB) string {
	t.Helper()
	out, err := SQS().CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(Name(t, "q"))})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	return aws.ToString(out.QueueUrl)
}

// Clock is a settable clock for tests.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock forward.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// RandomText is n characters of random base64 drawn from seed: JSON text
// that the store's packing compresses to about three quarters only, for
// tests that must reach an item's size limits as stored.
func RandomText(n int, seed uint64) string {
	raw := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)[:n]
}

// PartitionSizes counts the items of each shard partition base, base#1,
// ... (n of them) of an index of table ("" for the table itself), read
// straight from DynamoDB, not through the product's code.
func PartitionSizes(t testing.TB, table, index, keyName, base string, n int) []int {
	t.Helper()
	db := DynamoDB()
	sizes := make([]int, n)
	for i := range sizes {
		pk := base
		if i > 0 {
			pk = fmt.Sprintf("%s#%d", base, i)
		}
		in := &dynamodb.QueryInput{TableName: aws.String(table), KeyConditionExpression: aws.String("#k = :k"),
			ExpressionAttributeNames:  map[string]string{"#k": keyName},
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": &types.AttributeValueMemberS{Value: pk}},
			Select:                    types.SelectCount}
		if index != "" {
			in.IndexName = aws.String(index)
		}
		out, err := db.Query(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		sizes[i] = int(out.Count)
	}
	return sizes
}

// Spread fails the test unless each shard holds exactly the keys that
// shardOf assigns to it, and unless the keys are spread over more than one
// shard.
func Spread(t testing.TB, what string, sizes []int, keys []string, shardOf func(key string) int) {
	t.Helper()
	want := make([]int, len(sizes))
	for _, k := range keys {
		want[shardOf(k)]++
	}
	if !slices.Equal(sizes, want) {
		t.Fatalf("%s: shard sizes %v, want %v from the keys' hashes", what, sizes, want)
	}
	if slices.Max(want) == len(keys) {
		t.Fatalf("%s: all %d keys in one shard %v (the partition is not spread)", what, len(keys), sizes)
	}
}
