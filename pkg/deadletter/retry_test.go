package deadletter_test

import (
	"context"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// A discarded holder retried from the dead letter queue takes its key
// back only if no live job holds it meanwhile: retrying it while a job
// enqueued since holds the key would make two live jobs of one key (a
// payment run twice). Once that job finished, the retry takes the key.
func TestDeadLetterRetryKeepsAUniqueKeyToOneLiveJob(t *testing.T) {
	t.Parallel()
	s, d, _ := newService(t)
	ctx := context.Background()
	body := `{"type":"u.pay","args":["invoice-7"],"options":{"queue":"udl","retry":{"max_attempts":1},"unique":{"keys":["type","args"],"on_conflict":"reject"}}}`
	first, err := s.Push(ctx, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"udl"}}); err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	if j, err := s.Nack(ctx, first.ID, lifecycle.ErrorInput{Type: "boom", Message: "declined"}, 0); err != nil || j.State != job.Discarded {
		t.Fatalf("fail: %+v %v", j, err)
	}
	second, err := s.Push(ctx, []byte(body)) // the key is free: its holder is discarded
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Retry(ctx, first.ID, deadletter.RetryOverride{}); code(err) != ojserr.Conflict {
		t.Fatalf("dead letter retry while %s holds the key: %v, want 409", second.ID, err)
	}
	if cur, _ := s.Info(ctx, first.ID); cur.State != job.Discarded {
		t.Fatalf("the refused retry changed the job: %s", cur.State)
	}
	// Once the second job finished, the retry takes the key back: a new
	// PUSH of the key is then a duplicate of the retried job.
	if got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"udl"}}); err != nil || len(got) != 1 || got[0].ID != second.ID {
		t.Fatalf("fetch the second: %v %v", got, err)
	}
	if _, err := s.Ack(ctx, second.ID, nil, 0); err != nil {
		t.Fatal(err)
	}
	if j, err := d.Retry(ctx, first.ID, deadletter.RetryOverride{}); err != nil || j.State != job.Available {
		t.Fatalf("dead letter retry once the holder finished: %+v %v", j, err)
	}
	if _, err := s.Push(ctx, []byte(body)); code(err) == "" {
		t.Fatal("a PUSH of the key was accepted while the retried job holds it")
	}
}
