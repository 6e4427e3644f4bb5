// Package sqsevent adapts SQS event source mapping invocations to the
// push-mode worker, reporting partial batch failures
// (ReportBatchItemFailures) by message id.
package sqsevent

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
	"github.com/ojs-aws/ojs-serverless/pkg/worker"
)

// Processor runs messages and returns the ids to deliver again.
type Processor interface {
	Process(ctx context.Context, msgs []worker.Message) []string
}

var _ Processor = (*worker.Processor)(nil)

// Handler returns the worker function's Lambda handler.
func Handler(p Processor) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		msgs := make([]worker.Message, len(ev.Records))
		for i, r := range ev.Records {
			msgs[i] = worker.Message{ID: r.MessageId, Body: []byte(r.Body)}
		}
		var resp events.SQSEventResponse
		for _, id := range p.Process(ctx, msgs) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
		return resp, nil
	}
}
