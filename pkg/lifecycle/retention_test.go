package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// stored is what a finished job's item holds for its retention, read back
// from DynamoDB Local (which does not delete by TTL).
type stored struct {
	TTL         *int64 `dynamodbav:"ttl"`
	Retain      *int64 `dynamodbav:"retain_s"`
	ResultBytes int    `dynamodbav:"result_bytes"`
}

// Finishing a job sets the table's TTL attribute in the same write: now
// plus its result_ttl, or its queue's default, or the environment's; -1 is a thousand
// years away, 0 expires it at once and hides its result. A discarded job
// (the dead letter queue) gets none: its own retention prunes it. The
// job's wire form carries result_stored_at, result_expires_at and
// result_size_bytes (ojs-results.md 6.2).
func TestFinishedJobsExpireByTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, arn := testenv.Table(t)
	table := strings.Split(arn, "/")[1] // arn:...:table/NAME/stream/...
	clk := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	qs := queue.NewService(st, queue.Config{Now: clk.Now, ResultTTLs: map[string]int64{"ret-q": 300}})
	s := lifecycle.New(st, lifecycle.Config{Now: clk.Now, ResultTTL: aws.Int64(3600), Queues: qs})
	now := clk.Now().Unix()
	item := func(id string) stored {
		t.Helper()
		out, err := testenv.DynamoDB().GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: store.JobKey(id), ConsistentRead: aws.Bool(true)})
		var r stored
		if err == nil {
			err = attributevalue.UnmarshalMap(out.Item, &r)
		}
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	run := func(q, ttl string, result string) *job.Job {
		t.Helper()
		j, err := s.Push(ctx, []byte(`{"type":"t.r","args":[],"queue":"`+q+`"`+ttl+`}`))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{q}, WorkerID: "w"}); err != nil || len(got) != 1 {
			t.Fatalf("fetch: %v %v", got, err)
		}
		if j, err = s.Ack(ctx, j.ID, json.RawMessage(result), 0); err != nil {
			t.Fatal(err)
		}
		return j
	}
	for _, c := range []struct {
		q, ttl, wire string
		expires      int64
		retain       *int64
	}{
		{"ret", "", `{"result":{"a":1},"result_stored_at":"2026-11-21T10:00:00.000Z","result_expires_at":"2026-11-21T11:00:00.000Z","result_size_bytes":7}`, now + 3600, nil},
		{"ret-q", "", `{"result":{"a":1},"result_ttl":300,"result_stored_at":"2026-11-21T10:00:00.000Z","result_expires_at":"2026-11-21T10:05:00.000Z","result_size_bytes":7}`, now + 300, aws.Int64(300)},
		{"ret-q", `,"result_ttl":60`, `{"result":{"a":1},"result_ttl":60,"result_stored_at":"2026-11-21T10:00:00.000Z","result_expires_at":"2026-11-21T10:01:00.000Z","result_size_bytes":7}`, now + 60, aws.Int64(60)},
		{"ret", `,"result_ttl":-1`, `{"result":{"a":1},"result_ttl":-1,"result_stored_at":"2026-11-21T10:00:00.000Z","result_size_bytes":7}`, now + 1000*365*86400, aws.Int64(1000 * 365 * 86400)},
		{"ret", `,"result_ttl":0`, `{"result_ttl":0}`, now, aws.Int64(0)},
	} {
		j := run(c.q, c.ttl, `{"a":1}`)
		r := item(j.ID)
		got, _ := json.Marshal([]any{r.TTL, r.Retain, r.ResultBytes})
		if want, _ := json.Marshal([]any{c.expires, c.retain, 7}); string(got) != string(want) {
			t.Errorf("result_ttl %q: item's ttl, retain_s, result_bytes %s; want %s", c.ttl, got, want)
		}
		var wire, want map[string]any
		_ = json.Unmarshal([]byte(c.wire), &want)
		b, _ := json.Marshal(j)
		_ = json.Unmarshal(b, &wire)
		for k := range wire {
			if !strings.HasPrefix(k, "result") {
				delete(wire, k)
			}
		}
		if got, want := fmt.Sprint(wire), fmt.Sprint(want); got != want {
			t.Errorf("result_ttl %q: wire %s; want %s", c.ttl, got, want)
		}
	}

	// A cancelled job expires too; a discarded one keeps the dead letter
	// queue's retention.
	j, err := s.Push(ctx, []byte(`{"type":"t.r","args":[],"queue":"ret2","retry":{"max_attempts":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"ret2"}, WorkerID: "w"}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Nack(ctx, j.ID, lifecycle.ErrorInput{Message: "no"}, 0); err != nil || d.State != job.Discarded || item(j.ID).TTL != nil {
		t.Fatalf("discarded job: %v %v, ttl %v", d, err, item(j.ID).TTL)
	}
	c, err := s.Push(ctx, []byte(`{"type":"t.r","args":[],"queue":"ret3","result_ttl":120}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cancel(ctx, c.ID); err != nil || *item(c.ID).TTL != now+120 {
		t.Fatalf("cancelled job: %v, ttl %v", err, item(c.ID).TTL)
	}
}

// Results up to 1 MiB as sent are stored packed like args; one that does
// not pack into store.MaxPackedResultBytes is refused with a 413 and the
// job stays active (ojs-results.md 7.2).
func TestLargeResults(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	ctx := context.Background()
	big := json.RawMessage(`"` + strings.Repeat("abc ", job.MaxResultBytes/4-1) + `"`)
	noise := json.RawMessage(`"` + testenv.RandomText(2*store.MaxPackedResultBytes, 7) + `"`)
	for _, c := range []struct {
		result json.RawMessage
		status int
	}{{noise, 413}, {json.RawMessage(string(big) + "   "), 413}, {big, 0}} {
		j, err := s.Push(ctx, []byte(`{"type":"t.r","args":[],"queue":"big"}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"big"}, WorkerID: "w"}); err != nil {
			t.Fatal(err)
		}
		done, err := s.Ack(ctx, j.ID, c.result, 0)
		if c.status != 0 {
			if cur, _ := s.Info(ctx, j.ID); ojserr.As(err).Status() != c.status || cur.State != job.Active {
				t.Fatalf("ack of %d bytes: %v, job %s", len(c.result), err, cur.State)
			}
			continue
		}
		if err != nil || done.ResultSizeBytes != len(big) || string(done.Result) != string(big) {
			t.Fatalf("ack of %d bytes: %v", len(big), err)
		}
	}
}
