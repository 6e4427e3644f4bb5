package localrt_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestProvisionedQueueRedrivesAfterMaxReceiveCount checks the local queues
// behave like the deployed ones: a message received MaxReceiveCount times
// without being deleted moves to the dead-letter queue.
func TestProvisionedQueueRedrivesAfterMaxReceiveCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, _ := topology.ForEnv("local")
	env.Prefix = testenv.Name(t, "p")
	q := env.Queues[0]
	_, urls, err := localrt.Provision(ctx, testenv.Config(), env, testenv.Name(t, "t"))
	if err != nil {
		t.Fatal(err)
	}
	client := testenv.SQS()
	url := urls[q.Name]
	if !strings.HasSuffix(url, q.SQSName(env.Prefix)) {
		t.Fatalf("queue url %s", url)
	}
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameVisibilityTimeout}})
	if err != nil || attrs.Attributes["VisibilityTimeout"] != "360" {
		t.Fatalf("visibility timeout: %v %v", attrs, err)
	}
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("poison")}); err != nil {
		t.Fatal(err)
	}
	received := 0
	for i := 0; i <= q.MaxReceiveCount; i++ {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			break
		}
		received++
		// Not deleted: make it visible again at once (a failed batch).
		if _, err := client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url),
			ReceiptHandle: out.Messages[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("received %d times before redrive (maxReceiveCount %d)", received, q.MaxReceiveCount)
	// AWS moves the message once its receive count exceeds
	// maxReceiveCount; the emulator counts a little differently, so accept
	// anything from 2 receives up to the bound.
	if received < 2 || received > q.MaxReceiveCount {
		t.Fatalf("received %d times; want between 2 and %d", received, q.MaxReceiveCount)
	}
	dlq, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q.DLQName(env.Prefix))})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "message in the dead-letter queue", func() bool {
		_, _ = client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, WaitTimeSeconds: 1})
		return err == nil && len(out.Messages) == 1 && aws.ToString(out.Messages[0].Body) == "poison"
	})
}

// TestProvisionedQueueTakes256KiB: the local queues refuse a message over
// SQS's portable 256 KiB, as the deployed ones (MaximumMessageSize set by
// the stack) do; the emulator's default would take 1 MiB.
func TestProvisionedQueueTakes256KiB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, _ := topology.ForEnv("local")
	env.Prefix = testenv.Name(t, "p")
	_, urls, err := localrt.Provision(ctx, testenv.Config(), env, testenv.Name(t, "t"))
	if err != nil {
		t.Fatal(err)
	}
	url := aws.String(urls[env.Queues[0].Name])
	client := testenv.SQS()
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(strings.Repeat("a", awslimit.SQSMessageBytes))}); err != nil {
		t.Fatalf("a message of 256 KiB: %v", err)
	}
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(strings.Repeat("a", awslimit.SQSMessageBytes+1))}); err == nil {
		t.Fatal("the local queue took a message over 256 KiB")
	}
	out, err := client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: url, Entries: []sqstypes.SendMessageBatchRequestEntry{
		{Id: aws.String("ok"), MessageBody: aws.String("small")}, {Id: aws.String("big"), MessageBody: aws.String(strings.Repeat("a", awslimit.SQSMessageBytes+1))}}})
	if err != nil || len(out.Successful) != 1 || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Id) != "big" || !out.Failed[0].SenderFault {
		t.Fatalf("batch with one message over 256 KiB: %+v %v", out, err)
	}
}
