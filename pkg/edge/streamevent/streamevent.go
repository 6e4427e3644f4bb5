// Package streamevent adapts DynamoDB Streams event source mapping
// invocations to the engine. A failure is reported with the sequence
// number of the first failed record, so the mapping retries from there.
package streamevent

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/engine"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
)

// Processor handles changes; it returns the index of the first change to
// retry (or -1) and the error.
type Processor interface {
	Process(ctx context.Context, changes []engine.Change) (int, error)
}

var _ Processor = (*engine.Engine)(nil)

// Handler returns the stream function's Lambda handler.
func Handler(p Processor, log *slog.Logger) func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		changes := make([]engine.Change, 0, len(ev.Records))
		seqs := make([]string, 0, len(ev.Records))
		for _, r := range ev.Records {
			c, err := Change(r)
			if err != nil {
				// A record we cannot decode will never decode: log and skip it
				// rather than block the shard.
				log.ErrorContext(ctx, "skipping undecodable stream record", "event_id", r.EventID, "error", err.Error())
				continue
			}
			changes = append(changes, c)
			seqs = append(seqs, r.Change.SequenceNumber)
		}
		idx, err := p.Process(ctx, changes)
		if err == nil {
			return events.DynamoDBEventResponse{}, nil
		}
		if idx < 0 || idx >= len(seqs) {
			idx = 0
		}
		attrs := []any{"error", err.Error(), "first_failed", idx}
		if idx < len(changes) {
			attrs = append(attrs, "sequence_number", seqs[idx])
			attrs = append(attrs, subject(changes[idx])...)
		}
		log.ErrorContext(ctx, "stream batch failed; the mapping will retry", attrs...)
		if idx == 0 {
			// Failed at its first record (or somewhere Process cannot
			// name): a function error, so that the mapping bisects the
			// batch (BisectBatchOnFunctionError) and a record that fails
			// every time ends up alone. Reported as the first record's
			// failure, the whole batch would be retried as it is until
			// its retries ran out, every record of it going to the
			// mapping's dead-letter queue with the bad one.
			return events.DynamoDBEventResponse{}, err
		}
		return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: seqs[idx]}}}, nil
	}
}

// subject returns log attributes naming what a change is about: the job
// id (and its workflow), or the workflow of a node.
func subject(c engine.Change) []any {
	for _, it := range []*store.Item{c.New, c.Old} {
		if it != nil && it.Job != nil {
			if it.Job.WorkflowID != "" {
				return []any{"job_id", it.Job.ID, "workflow_id", it.Job.WorkflowID}
			}
			return []any{"job_id", it.Job.ID}
		}
	}
	for _, n := range []wfstore.Node{c.NewNode, c.OldNode} {
		if n != nil {
			return []any{"workflow_id", n.Base().WorkflowID, "node_path", n.Base().Path}
		}
	}
	return nil
}

// Change decodes one stream record.
func Change(r events.DynamoDBEventRecord) (engine.Change, error) {
	c := engine.Change{SequenceNumber: r.Change.SequenceNumber, At: r.Change.ApproximateCreationDateTime.UTC(),
		Expired: r.UserIdentity != nil && r.UserIdentity.PrincipalID == "dynamodb.amazonaws.com"}
	for _, img := range []struct {
		src   map[string]events.DynamoDBAttributeValue
		dst   **store.Item
		node  *wfstore.Node
		queue **queue.QueueInfo
		cron  **cron.Info
		prune **deadletter.PruneRun
		wkr   **queue.WorkerInfo
		key   **ratelimit.State
	}{{r.Change.OldImage, &c.Old, &c.OldNode, &c.OldQueue, &c.OldCron, &c.OldPrune, &c.OldWorker, &c.OldKey},
		{r.Change.NewImage, &c.New, &c.NewNode, &c.NewQueue, &c.NewCron, &c.NewPrune, &c.NewWorker, &c.NewKey}} {
		if len(img.src) == 0 {
			continue
		}
		av, err := Image(img.src)
		if err != nil {
			return c, err
		}
		for _, decode := range []func(map[string]types.AttributeValue) (bool, error){
			into(queue.DecodeQueue, img.queue), into(cron.Decode, img.cron), into(deadletter.DecodePruneRun, img.prune),
			into(queue.DecodeWorker, img.wkr), into(ratelimit.DecodeKey, img.key), into(wfstore.DecodeNode, img.node),
			into(decodeJob, img.dst),
		} {
			done, err := decode(av)
			if err != nil {
				return c, err
			}
			if done {
				break
			}
		}
	}
	return c, nil
}

// decodeJob is store.DecodeItem as a decoder of into.
func decodeJob(av map[string]types.AttributeValue) (*store.Item, bool, error) {
	it, ok, err := store.DecodeItem(av)
	return &it, ok, err
}

// into is decode as a decoder that sets *dst to what it recognises.
func into[T any](decode func(map[string]types.AttributeValue) (T, bool, error), dst *T) func(map[string]types.AttributeValue) (bool, error) {
	return func(av map[string]types.AttributeValue) (bool, error) {
		v, ok, err := decode(av)
		if ok && err == nil {
			*dst = v
		}
		return ok, err
	}
}

// Image converts a Lambda-event image to SDK attribute values.
func Image(m map[string]events.DynamoDBAttributeValue) (map[string]types.AttributeValue, error) {
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		av, err := Attribute(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		out[k] = av
	}
	return out, nil
}

// Attribute converts one Lambda-event attribute value.
func Attribute(v events.DynamoDBAttributeValue) (types.AttributeValue, error) {
	switch v.DataType() {
	case events.DataTypeString:
		return &types.AttributeValueMemberS{Value: v.String()}, nil
	case events.DataTypeNumber:
		return &types.AttributeValueMemberN{Value: v.Number()}, nil
	case events.DataTypeBoolean:
		return &types.AttributeValueMemberBOOL{Value: v.Boolean()}, nil
	case events.DataTypeNull:
		return &types.AttributeValueMemberNULL{Value: true}, nil
	case events.DataTypeBinary:
		return &types.AttributeValueMemberB{Value: v.Binary()}, nil
	case events.DataTypeStringSet:
		return &types.AttributeValueMemberSS{Value: v.StringSet()}, nil
	case events.DataTypeNumberSet:
		return &types.AttributeValueMemberNS{Value: v.NumberSet()}, nil
	case events.DataTypeBinarySet:
		return &types.AttributeValueMemberBS{Value: v.BinarySet()}, nil
	case events.DataTypeList:
		l := v.List()
		out := make([]types.AttributeValue, len(l))
		for i, e := range l {
			av, err := Attribute(e)
			if err != nil {
				return nil, err
			}
			out[i] = av
		}
		return &types.AttributeValueMemberL{Value: out}, nil
	case events.DataTypeMap:
		m, err := Image(v.Map())
		if err != nil {
			return nil, err
		}
		return &types.AttributeValueMemberM{Value: m}, nil
	}
	return nil, fmt.Errorf("unknown attribute type %v", v.DataType())
}
