package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// The operator's reads (pkg/admin): listings of one index partition with
// an opaque cursor, bounded counts, and the few deletes the Admin API
// adds. None of them scans the table.

// Listing names one index partition the Admin API lists jobs from.
type Listing int

// The partitions a job listing reads.
const (
	// ListAvailable is a queue's available jobs in fetch order (ready
	// index, avail#<queue>).
	ListAvailable Listing = iota
	// ListDead is a queue's discarded jobs, newest first (ready index,
	// dead#<queue>).
	ListDead
	// ListWaiting is a queue's scheduled, retryable and active jobs (and
	// available push-mode jobs' redelivery checks) by due time (due index,
	// due#<queue>).
	ListWaiting
)

func (l Listing) query(queue string) (index, keyName, key string, forward bool) {
	switch l {
	case ListAvailable:
		return topology.IndexReady, attrReadyPK, availPrefix + queue, true
	case ListDead:
		return topology.IndexReady, attrReadyPK, deadPrefix + queue, false
	default:
		return topology.IndexDue, attrDuePK, duePrefix + queue, true
	}
}

// IndexPage is one page of an index listing: the items read (unfiltered)
// and the cursor of the next page ("" after the last).
type IndexPage struct {
	Items  []Item
	Cursor string
}

// ListQueue reads up to limit items of one queue's index partition from
// cursor (a previous IndexPage.Cursor, or "" to start). states, when set,
// filters on the job state (a DynamoDB filter: read capacity is spent on
// the items read, not returned).
func (s *Store) ListQueue(ctx context.Context, l Listing, queue string, states []job.State, limit int, cursor string) (IndexPage, error) {
	index, keyName, key, forward := l.query(queue)
	in := &dynamodb.QueryInput{IndexName: aws.String(index),
		KeyConditionExpression:    aws.String("#k = :k"),
		ExpressionAttributeNames:  map[string]string{"#k": keyName},
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": avS(key)},
		ScanIndexForward:          aws.Bool(forward), Limit: aws.Int32(int32(limit))}
	if len(states) > 0 {
		in.ExpressionAttributeNames["#s"] = attrState
		var ph []string
		for i, st := range states {
			p := fmt.Sprintf(":s%d", i)
			ph = append(ph, p)
			in.ExpressionAttributeValues[p] = avS(string(st))
		}
		in.FilterExpression = aws.String("#s IN (" + strings.Join(ph, ", ") + ")")
	}
	if cursor != "" {
		k, err := DecodeCursor(cursor)
		if err != nil {
			return IndexPage{}, err
		}
		in.ExclusiveStartKey = k
	}
	items, last, err := s.queryJobs(ctx, in)
	if err != nil {
		return IndexPage{}, err
	}
	p := IndexPage{Items: items}
	if len(last) > 0 {
		p.Cursor = EncodeCursor(last)
	}
	return p, nil
}

// ErrBadCursor is returned for a cursor this store did not produce.
var ErrBadCursor = errors.New("bad cursor")

// EncodeCursor turns a DynamoDB key (strings and numbers only, as every key
// of this table is) into an opaque URL-safe cursor.
func EncodeCursor(key map[string]types.AttributeValue) string {
	m := map[string]string{}
	for k, v := range key {
		switch a := v.(type) {
		case *types.AttributeValueMemberS:
			m[k] = "S" + a.Value
		case *types.AttributeValueMemberN:
			m[k] = "N" + a.Value
		}
	}
	b, _ := json.Marshal(m)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor is the inverse of EncodeCursor; it returns ErrBadCursor for
// anything else.
func DecodeCursor(c string) (map[string]types.AttributeValue, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) > 4096 {
		return nil, ErrBadCursor
	}
	var m map[string]string
	if json.Unmarshal(b, &m) != nil || len(m) == 0 || len(m) > 4 {
		return nil, ErrBadCursor
	}
	key := map[string]types.AttributeValue{}
	for k, v := range m {
		switch {
		case strings.HasPrefix(v, "S") && len(v) > 1:
			key[k] = avS(v[1:])
		case strings.HasPrefix(v, "N") && len(v) > 1:
			key[k] = &types.AttributeValueMemberN{Value: v[1:]}
		default:
			return nil, ErrBadCursor
		}
	}
	return key, nil
}

// CountStates counts one queue's index partition by job state, reading at
// most max index entries (only the state attribute is returned).
func (s *Store) CountStates(ctx context.Context, l Listing, queue string, max int) (map[job.State]int, bool, error) {
	index, keyName, key, _ := l.query(queue)
	in := &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String(index),
		KeyConditionExpression:    aws.String("#k = :k"),
		ExpressionAttributeNames:  map[string]string{"#k": keyName, "#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": avS(key)},
		ProjectionExpression:      aws.String("#s")}
	out := map[job.State]int{}
	read := 0
	for {
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return out, false, fmt.Errorf("count %s: %w", key, err)
		}
		for _, it := range page.Items {
			if st, ok := it[attrState].(*types.AttributeValueMemberS); ok {
				out[job.State(st.Value)]++
			}
		}
		read += len(page.Items)
		if len(page.LastEvaluatedKey) == 0 {
			return out, false, nil
		}
		if read >= max {
			return out, true, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// DeleteFinished deletes a completed or cancelled job for good, on the
// condition that it is still in the state read (a job retried or changed
// meanwhile is left alone: ConflictError). Discarded jobs are deleted with
// DeleteDead, which the stream reports as dead_letter.deleted.
func (s *Store) DeleteFinished(ctx context.Context, id string, state job.State) error {
	if state != job.Completed && state != job.Cancelled {
		return fmt.Errorf("delete job %s: only completed or cancelled jobs, not %s", id, state)
	}
	return s.deleteInState(ctx, id, state)
}

// DeleteWaiting deletes a job that is available, scheduled, retryable or
// pending and not part of a workflow (a queue purge), on the condition
// that it is still in that state and unclaimed.
func (s *Store) DeleteWaiting(ctx context.Context, id string, state job.State) error {
	switch state {
	case job.Available, job.Scheduled, job.Retryable, job.Pending:
	default:
		return fmt.Errorf("delete job %s: not a waiting state: %s", id, state)
	}
	return s.deleteInState(ctx, id, state)
}

func (s *Store) deleteInState(ctx context.Context, id string, state job.State) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: jobKey(id),
		ConditionExpression:                 aws.String("#s = :s AND attribute_not_exists(wf_id)"),
		ExpressionAttributeNames:            map[string]string{"#s": attrState},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":s": avS(string(state))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if len(ccf.Item) == 0 {
			return ErrNotFound
		}
		cur, derr := decodeJob(ccf.Item)
		if derr != nil {
			return derr
		}
		return &ConflictError{Current: cur, Tried: Transition{ID: id, To: "deleted"}}
	}
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	return nil
}

// Worker reads a worker's whole item (nil when there is none).
func (s *Store) Worker(ctx context.Context, id string) (*WorkerInfo, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: workerKey(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("read worker %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	var w WorkerInfo
	if err := attributevalue.UnmarshalMap(out.Item, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// ErrWorkerNotStale is returned by DeleteWorker for a worker that sent a
// heartbeat after the cut-off.
var ErrWorkerNotStale = errors.New("worker is not stale")

// DeleteWorker removes a worker's item if its last heartbeat is before
// staleBefore (the heartbeat time is the item's due_at). It returns
// ErrNotFound if there is no such worker.
func (s *Store) DeleteWorker(ctx context.Context, id string, staleBefore time.Time) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: workerKey(id),
		ConditionExpression:                 aws.String("attribute_exists(pk) AND (attribute_not_exists(due_at) OR due_at < :cut)"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":cut": &types.AttributeValueMemberN{Value: itoa(ms(staleBefore))}},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if len(ccf.Item) == 0 {
			return ErrNotFound
		}
		return ErrWorkerNotStale
	}
	if err != nil {
		return fmt.Errorf("delete worker %s: %w", id, err)
	}
	return nil
}
