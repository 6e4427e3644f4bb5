package localrt

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// pollStream plays the DynamoDB Streams event source mapping: it reads each
// shard in order (a child only after its parent) and invokes the stream
// function with batches of records in the Lambda event shape (deliverBatch).
func (rt *Runtime) pollStream(ctx context.Context) {
	client := dynamodbstreams.NewFromConfig(rt.cfg.AWS)
	var mu sync.Mutex
	started := map[string]bool{}
	done := map[string]chan struct{}{}
	for ctx.Err() == nil {
		out, err := client.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(rt.streamARN)})
		if err != nil {
			if ctx.Err() == nil {
				rt.log.Warn("describe stream failed", "error", err.Error())
			}
			ctxsleep.Sleep(ctx, time.Second)
			continue
		}
		for _, sh := range out.StreamDescription.Shards {
			id := aws.ToString(sh.ShardId)
			mu.Lock()
			if started[id] {
				mu.Unlock()
				continue
			}
			started[id] = true
			ch := make(chan struct{})
			done[id] = ch
			parent := done[aws.ToString(sh.ParentShardId)]
			mu.Unlock()
			rt.wg.Go(func() {
				defer close(ch)
				if parent != nil {
					select {
					case <-parent:
					case <-ctx.Done():
						return
					}
				}
				rt.readShard(ctx, client, id)
			})
		}
		ctxsleep.Sleep(ctx, rt.streamPause(2*time.Second, 10*time.Second))
	}
}

// streamIdleAfter is how long after the last stream record the mapping
// counts as idle: it then reads each shard every streamIdlePoll instead of
// every Stream.PollInterval, and looks for new shards every 10 s instead
// of 2 s. On AWS the mapping's reads are free; here they were a quarter of
// an idle stack's requests. The first record after an idle spell waits up
// to streamIdlePoll; a stream with a record every 2 s or more often is
// read at the busy pace.
const (
	streamIdleAfter = 2 * time.Second
	streamIdlePoll  = time.Second
)

// streamPause is busy while the stream had a record within
// streamIdleAfter, idle otherwise.
func (rt *Runtime) streamPause(busy, idle time.Duration) time.Duration {
	if time.Since(time.Unix(0, rt.lastRecord.Load())) < streamIdleAfter {
		return busy
	}
	return idle
}

func (rt *Runtime) readShard(ctx context.Context, client *dynamodbstreams.Client, shardID string) {
	cfg := rt.cfg.Env.Stream
	it, err := client.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(rt.streamARN),
		ShardId: aws.String(shardID), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		rt.log.Warn("get shard iterator failed", "shard", shardID, "error", err.Error())
		return
	}
	iter := it.ShardIterator
	var pending []types.Record
	for ctx.Err() == nil && (iter != nil || len(pending) > 0) {
		if len(pending) < cfg.BatchSize && iter != nil {
			out, err := client.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(int32(cfg.BatchSize - len(pending)))})
			if err != nil {
				if ctx.Err() == nil {
					rt.log.Warn("get records failed", "shard", shardID, "error", err.Error())
					ctxsleep.Sleep(ctx, time.Second)
				}
				continue
			}
			iter = out.NextShardIterator
			if len(out.Records) > 0 {
				rt.lastRecord.Store(time.Now().UnixNano())
			}
			for _, r := range out.Records {
				// The mapping's filter criteria.
				if sk, ok := r.Dynamodb.Keys[cfg.Filter.Attribute].(*types.AttributeValueMemberS); ok && cfg.Filter.Keep(sk.Value) {
					pending = append(pending, r)
				}
			}
		}
		if len(pending) == 0 {
			ctxsleep.Sleep(ctx, rt.streamPause(cfg.PollInterval, streamIdlePoll))
			continue
		}
		pending = rt.deliverRecords(ctx, pending)
	}
}

// deliverRecords invokes the stream function with the records in batches
// whose event stays within Lambda's payload limit; it returns what is left
// (nothing, unless ctx ended).
func (rt *Runtime) deliverRecords(ctx context.Context, recs []types.Record) []types.Record {
	enc := encodeRecords(recs, rt.streamARN)
	for len(recs) > 0 && ctx.Err() == nil {
		n := fitRecords(enc, awslimit.LambdaRequestBytes)
		if left := rt.deliverBatch(ctx, recs[:n], enc[:n]); left > 0 {
			return recs[n-left:]
		}
		recs, enc = recs[n:], enc[n:]
	}
	return recs
}

// encodeRecords renders each record as the Lambda event holds it.
func encodeRecords(recs []types.Record, arn string) [][]byte {
	out := make([][]byte, len(recs))
	for i, r := range lambdaRecords(recs, arn) {
		out[i], _ = json.Marshal(r)
	}
	return out
}

// streamEvent is the stream event holding the encoded records, byte for byte
// what encoding the records together gives.
func streamEvent(enc [][]byte) []byte {
	return append(append([]byte(`{"Records":[`), bytes.Join(enc, []byte(","))...), ']', '}')
}

// fitRecords returns how many encoded records from the start of enc fit
// in one stream event of at most limit bytes (at least one).
func fitRecords(enc [][]byte, limit int) int {
	size := len(`{"Records":[]}`)
	for i, b := range enc {
		if i > 0 {
			size++ // the comma
		}
		size += len(b)
		if size > limit {
			return max(i, 1)
		}
	}
	return len(enc)
}

// deliverBatch invokes the stream function with one batch (recs, encoded as
// enc), bisecting it on a function error (Stream.BisectOnError) and
// retrying the failed tail up to Stream.MaxRetries times, then skipping it as
// an on-failure destination would; it returns how many records are left
// (none, unless ctx ended).
func (rt *Runtime) deliverBatch(ctx context.Context, recs []types.Record, enc [][]byte) int {
	cfg := rt.cfg.Env.Stream
	for attempt := 0; ctx.Err() == nil; attempt++ {
		payload := streamEvent(enc)
		if rt.cfg.DuplicateStreamRecords { // an extra delivery, its outcome ignored
			_, _ = rt.Invoke(ctx, topology.FunctionStream, payload)
		}
		res, err := rt.Invoke(ctx, topology.FunctionStream, payload)
		failedAt := -1
		if err != nil {
			failedAt = 0
			rt.log.Warn("stream invocation failed", "error", err.Error(), "attempt", attempt+1)
			if cfg.BisectOnError && len(recs) > 1 {
				half := len(recs) / 2
				if left := rt.deliverBatch(ctx, recs[:half], enc[:half]); left > 0 {
					return left + len(recs) - half
				}
				return rt.deliverBatch(ctx, recs[half:], enc[half:])
			}
		} else {
			var resp events.DynamoDBEventResponse
			_ = json.Unmarshal(res, &resp)
			if len(resp.BatchItemFailures) > 0 {
				seq := resp.BatchItemFailures[0].ItemIdentifier
				failedAt = max(slices.IndexFunc(recs, func(r types.Record) bool { return aws.ToString(r.Dynamodb.SequenceNumber) == seq }), 0)
			}
		}
		if failedAt < 0 {
			return 0
		}
		recs, enc = recs[failedAt:], enc[failedAt:]
		if attempt >= cfg.MaxRetries {
			rt.log.Error("stream records exhausted their retries; skipping them (on-failure destination)", "count", len(recs),
				"first_sequence", aws.ToString(recs[0].Dynamodb.SequenceNumber))
			return 0
		}
		ctxsleep.Sleep(ctx, time.Duration(attempt+1)*200*time.Millisecond)
	}
	return len(recs)
}

// lambdaRecords renders stream records as the Lambda event source mapping
// does: events.DynamoDBEventRecord, what the stream function decodes.
func lambdaRecords(recs []types.Record, arn string) []events.DynamoDBEventRecord {
	out := make([]events.DynamoDBEventRecord, len(recs))
	for i, r := range recs {
		d := r.Dynamodb
		out[i] = events.DynamoDBEventRecord{EventID: aws.ToString(r.EventID), EventName: string(r.EventName), EventVersion: aws.ToString(r.EventVersion),
			EventSource: "aws:dynamodb", AWSRegion: "us-east-1", EventSourceArn: arn, Change: events.DynamoDBStreamRecord{
				Keys: image(d.Keys), NewImage: image(d.NewImage), OldImage: image(d.OldImage), SequenceNumber: aws.ToString(d.SequenceNumber),
				SizeBytes: aws.ToInt64(d.SizeBytes), StreamViewType: string(d.StreamViewType)}}
		if d.ApproximateCreationDateTime != nil {
			out[i].Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: d.ApproximateCreationDateTime.Truncate(time.Second)}
		}
	}
	return out
}

func image(m map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	out := make(map[string]events.DynamoDBAttributeValue, len(m))
	for k, v := range m {
		out[k] = attr(v)
	}
	return out
}

func attr(v types.AttributeValue) events.DynamoDBAttributeValue {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(t.Value)
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(t.Value)
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(t.Value)
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(t.Value)
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(t.Value)
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(t.Value)
	case *types.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(t.Value)
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(t.Value))
		for i, e := range t.Value {
			l[i] = attr(e)
		}
		return events.NewListAttribute(l)
	case *types.AttributeValueMemberM:
		return events.NewMapAttribute(image(t.Value))
	}
	return events.NewNullAttribute()
}
