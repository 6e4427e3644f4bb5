package wfstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// Checks are the sweeper's queries and writes of workflows in the due
// index: the progress check of running workflows and the deadlines of
// nested timeouts.
type Checks struct{ s *Store }

// NewChecks returns the checks of s's workflows.
func NewChecks(s *Store) Checks { return Checks{s} }

// dueNodes lists up to limit nodes of every shard of a workflow due
// partition (workflowDuePK or timeoutDuePK) due at or before now, earliest
// first.
func (c Checks) dueNodes(ctx context.Context, base string, now time.Time, limit int) ([]Composite, error) {
	parts, err := store.EachShard(ctx, store.ShardKeys(base, topology.JobTable.Shards.WorkflowDue), func(ctx context.Context, pk string) ([]Composite, error) {
		out, err := c.s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &c.s.table, IndexName: aws.String(topology.IndexDue),
			KeyConditionExpression:    aws.String("due_pk = :pk AND due_at <= :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS(pk), ":now": store.AttrN(ms(now))},
			Limit:                     aws.Int32(int32(limit)),
		})
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", pk, err)
		}
		var nodes []Composite
		err = attributevalue.UnmarshalListOfMaps(out.Items, &nodes)
		return nodes, err
	})
	if err != nil {
		return nil, err
	}
	all := slices.Concat(parts...)
	slices.SortStableFunc(all, func(a, b Composite) int { return cmp.Compare(a.DueAt, b.DueAt) })
	if len(all) > limit {
		all = all[:limit]
	}
	return all, nil
}

// DueTimeouts lists up to limit nested workflow nodes whose deadline has
// passed.
func (c Checks) DueTimeouts(ctx context.Context, now time.Time, limit int) ([]NodeKey, error) {
	nodes, err := c.dueNodes(ctx, timeoutDuePK, now, limit)
	if err != nil {
		return nil, fmt.Errorf("due workflow timeouts: %w", err)
	}
	keys := make([]NodeKey, len(nodes))
	for i, n := range nodes {
		keys[i] = NodeKey{WorkflowID: n.WorkflowID, Path: n.Path}
	}
	return keys, nil
}

// DueWorkflows lists up to limit workflows whose progress check is due
// (running ones, and failed ones whose compensation waits for running
// steps), with the due time each was listed at.
func (c Checks) DueWorkflows(ctx context.Context, now time.Time, limit int) (map[string]time.Time, error) {
	nodes, err := c.dueNodes(ctx, workflowDuePK, now, limit)
	if err != nil {
		return nil, fmt.Errorf("due workflows: %w", err)
	}
	ids := map[string]time.Time{}
	for _, n := range nodes {
		ids[n.WorkflowID] = fromMS(n.DueAt)
	}
	return ids, nil
}

// PostponeWorkflowCheck moves a workflow's next progress check from due
// to next, if nobody moved it meanwhile.
func (c Checks) PostponeWorkflowCheck(ctx context.Context, wfID string, due, next time.Time) error {
	_, err := c.s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &c.s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		UpdateExpression:          aws.String("SET due_at = :next"),
		ConditionExpression:       aws.String("due_at = :due"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":next": store.AttrN(ms(next)), ":due": store.AttrN(ms(due))},
	})
	if err != nil && !store.ConditionFailed(err) {
		return fmt.Errorf("postpone check of workflow %s: %w", wfID, err)
	}
	return nil
}
