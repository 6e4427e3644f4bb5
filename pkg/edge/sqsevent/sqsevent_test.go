package sqsevent

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/ojs-aws/ojs-serverless/pkg/worker"
)

type recorder struct {
	got  []worker.Message
	fail []string
}

func (r *recorder) Process(_ context.Context, msgs []worker.Message) []string {
	r.got = msgs
	return r.fail
}

func TestHandlerReportsPartialFailures(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../events/sqs-job.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	p := &recorder{fail: []string{"2e1424d4-f796-459a-8184-9c92662be6da"}}
	res, err := Handler(p)(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.got) != 2 || p.got[0].ID != "059f36b4-87a3-44ab-83d2-661975830a7d" || string(p.got[1].Body) != "not a job envelope" {
		t.Fatalf("messages: %+v", p.got)
	}
	if len(res.BatchItemFailures) != 1 || res.BatchItemFailures[0].ItemIdentifier != "2e1424d4-f796-459a-8184-9c92662be6da" {
		t.Fatalf("response: %+v", res)
	}
}
