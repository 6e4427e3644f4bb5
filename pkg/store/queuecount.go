package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// QueueCounts are a queue's jobs per waiting state, counted from the
// indexes (exact at the time of reading).
type QueueCounts struct {
	Available, Active, Scheduled, Retryable, Discarded int
}

// doneKeys are the "done" partitions of a queue: the completing write
// copies the job's due partition (its queue's due shards, by job id; no
// key takes more than its share of a queue's completions), or the queue
// name when the job had no due entry (and before 2026-11-28).
func doneKeys(queue string) []string { return append(dueKeys(queue), queue) }

// CountCompleted counts a queue's jobs completed at or after since, from
// the keys-only "done" index (1 read unit per 4 KB of keys: about 40,000
// completions per page), every partition at once.
func (s *Store) CountCompleted(ctx context.Context, queue string, since time.Time) (int, error) {
	counts, err := EachShard(ctx, doneKeys(queue), func(ctx context.Context, pk string) (int, error) {
		return CountAll(ctx, s.db, &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String(topology.IndexDone),
			KeyConditionExpression:    aws.String("#k = :q AND #s >= :since"),
			ExpressionAttributeNames:  map[string]string{"#k": attrDonePK, "#s": attrDoneSK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":q": AttrS(pk), ":since": AttrS(fmt.Sprintf("%013d", ms(since)))}})
	})
	if err != nil {
		return 0, fmt.Errorf("count completions of queue %s: %w", queue, err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n, nil
}

// CountQueue counts a queue's jobs by state: the available pull-mode ones
// and the discarded ones from the ready index, the available push-mode,
// active, scheduled and retryable ones from the due index. It reads every
// index entry of the queue, so its cost grows with the backlog.
func (s *Store) CountQueue(ctx context.Context, queue string) (QueueCounts, error) {
	n := map[job.State]int{}
	for _, l := range []Listing{ListAvailable, ListDead, ListWaiting} {
		counts, _, err := s.CountStates(ctx, l, queue, 0)
		if err != nil {
			return QueueCounts{}, fmt.Errorf("count queue %s: %w", queue, err)
		}
		for st, c := range counts {
			n[st] += c
		}
	}
	return QueueCounts{n[job.Available], n[job.Active], n[job.Scheduled], n[job.Retryable], n[job.Discarded]}, nil
}
