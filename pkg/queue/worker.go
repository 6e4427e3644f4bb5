package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// Worker items: pk W#<id>, sk WORKER, listed in the due index under
// "workers" ordered by last heartbeat, and deleted by TTL a day after the
// last one.
const (
	workerPrefix = "W#"
	workerSK     = "WORKER"
	workersDuePK = "workers"
	workerTTL    = 24 * time.Hour
)

// WorkerInfo is a worker as its heartbeats describe it, with the state
// the server wants it in (Directive: "", "quiet" or "terminate").
type WorkerInfo struct {
	ID              string   `dynamodbav:"worker_id" json:"id"`
	State           string   `dynamodbav:"state,omitempty" json:"state"`
	Directive       string   `dynamodbav:"directive,omitempty" json:"directive,omitempty"`
	Hostname        string   `dynamodbav:"hostname,omitempty" json:"hostname,omitempty"`
	Queues          []string `dynamodbav:"queues,omitempty" json:"queues,omitempty"`
	ActiveJobs      int      `dynamodbav:"active_jobs" json:"active_jobs"`
	Concurrency     int      `dynamodbav:"concurrency,omitempty" json:"concurrency,omitempty"`
	LastHeartbeatAt string   `dynamodbav:"last_heartbeat_at,omitempty" json:"last_heartbeat_at,omitempty"`
	FirstSeenAt     string   `dynamodbav:"first_seen_at,omitempty" json:"started_at,omitempty"`
}

func workerKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: store.AttrS(workerPrefix + id), attrSK: store.AttrS(workerSK)}
}

// WorkerBeat records a heartbeat and returns the worker as stored,
// including any directive an operator set.
func (s *Store) WorkerBeat(ctx context.Context, w WorkerInfo, now time.Time) (*WorkerInfo, error) {
	u := expression.Set(expression.Name("worker_id"), expression.Value(w.ID)).
		Set(expression.Name("active_jobs"), expression.Value(w.ActiveJobs)).
		Set(expression.Name("last_heartbeat_at"), expression.Value(job.Timestamp(now))).
		Set(expression.Name("first_seen_at"), expression.IfNotExists(expression.Name("first_seen_at"), expression.Value(job.Timestamp(now)))).
		Set(expression.Name(attrDuePK), expression.Value(workersDuePK)).
		Set(expression.Name(attrDueAt), expression.Value(now.UnixMilli())).
		Set(expression.Name("ttl"), expression.Value(now.Add(workerTTL).Unix()))
	if w.State != "" {
		u = u.Set(expression.Name("state"), expression.Value(w.State))
	}
	if w.Hostname != "" {
		u = u.Set(expression.Name("hostname"), expression.Value(w.Hostname))
	}
	if w.Concurrency > 0 {
		u = u.Set(expression.Name("concurrency"), expression.Value(w.Concurrency))
	}
	if len(w.Queues) > 0 {
		u = u.Set(expression.Name("queues"), expression.Value(w.Queues))
	}
	return s.updateWorker(ctx, w.ID, u)
}

// DecodeWorker turns a stream image into a WorkerInfo; ok is false for
// other items.
func DecodeWorker(av map[string]types.AttributeValue) (*WorkerInfo, bool, error) {
	return store.DecodeIf[WorkerInfo](av, store.Equals(workerSK), "worker item")
}

// WorkerState reads what a worker last reported and the directive an
// operator set (a consistent read of a small item: one read unit).
func (s *Store) WorkerState(ctx context.Context, id string) (*WorkerInfo, error) {
	return get[WorkerInfo](ctx, s, &dynamodb.GetItemInput{ProjectionExpression: aws.String("worker_id, #s, directive"),
		ExpressionAttributeNames: map[string]string{"#s": "state"}}, workerKey(id), "worker "+id)
}

// SetWorkerDirective records the state an operator wants a worker in; it
// learns it on its next heartbeat.
func (s *Store) SetWorkerDirective(ctx context.Context, id, directive string, now time.Time) (*WorkerInfo, error) {
	u := expression.Set(expression.Name("worker_id"), expression.Value(id)).Set(expression.Name("directive"), expression.Value(directive)).
		Set(expression.Name("ttl"), expression.Value(now.Add(workerTTL).Unix()))
	return s.updateWorker(ctx, id, u)
}

func (s *Store) updateWorker(ctx context.Context, id string, u expression.UpdateBuilder) (*WorkerInfo, error) {
	av, err := s.update(ctx, workerKey(id), u, nil, types.ReturnValueAllNew)
	if err != nil {
		return nil, fmt.Errorf("update worker %s: %w", id, err)
	}
	return store.Unmarshal[WorkerInfo](av)
}

// Workers lists the workers seen in the last day, most recent heartbeat
// first (at most limit).
func (s *Store) Workers(ctx context.Context, limit int) ([]WorkerInfo, error) {
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String(topology.IndexDue),
		KeyConditionExpression:    aws.String("due_pk = :w"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":w": store.AttrS(workersDuePK)},
		ScanIndexForward:          aws.Bool(false), Limit: aws.Int32(int32(limit))})
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	var ws []WorkerInfo
	if err := attributevalue.UnmarshalListOfMaps(out.Items, &ws); err != nil {
		return nil, err
	}
	return ws, nil
}

// Worker reads a worker's whole item (nil when there is none).
func (s *Store) Worker(ctx context.Context, id string) (*WorkerInfo, error) {
	return get[WorkerInfo](ctx, s, &dynamodb.GetItemInput{}, workerKey(id), "worker "+id)
}

// ErrWorkerNotStale is returned by DeleteWorker for a worker that sent a
// heartbeat after the cut-off.
var ErrWorkerNotStale = errors.New("worker is not stale")

// DeleteWorker removes a worker's item if its last heartbeat is before
// staleBefore (the heartbeat time is the item's due_at). It returns
// store.ErrNotFound if there is no such worker.
func (s *Store) DeleteWorker(ctx context.Context, id string, staleBefore time.Time) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: workerKey(id),
		ConditionExpression:                 aws.String("attribute_exists(pk) AND (attribute_not_exists(due_at) OR due_at < :cut)"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":cut": store.AttrN(staleBefore.UnixMilli())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		if len(ccf.Item) == 0 {
			return store.ErrNotFound
		}
		return ErrWorkerNotStale
	}
	if err != nil {
		return fmt.Errorf("delete worker %s: %w", id, err)
	}
	return nil
}
