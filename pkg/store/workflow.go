package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// Workflow item key prefixes: every item of a workflow lives in the
// partition WF#<id>; nodes under N#<path>, counter shards under
// C#<path>#<shard>. The root node (path "/") is the workflow's header.
const (
	wfPrefix    = "WF#"
	nodePrefix  = "N#"
	shardPrefix = "C#"
	// RootPath is the path of a workflow's root node.
	RootPath = "/"
	// CallbackShard is the counter shard of a batch's callbacks.
	CallbackShard = "cb"
)

// Node is one node of a workflow tree as stored: a job (leaf) or a chain,
// group or batch (composite).
type Node struct {
	WorkflowID string `dynamodbav:"wf_id"`
	Path       string `dynamodbav:"path"`
	// Kind is "job", "chain", "group" or "batch".
	Kind  string `dynamodbav:"kind"`
	Name  string `dynamodbav:"name,omitempty"`
	Index int    `dynamodbav:"idx"`
	// Def is a leaf's job request (JSON text).
	Def string `dynamodbav:"def,omitempty"`
	// JobType is a leaf's job type.
	JobType string `dynamodbav:"job_type,omitempty"`
	// Total is a composite's number of children (not callbacks).
	Total int `dynamodbav:"total,omitempty"`
	// Shards is the number of counter shards; ShardsDone how many rolled up.
	Shards     int `dynamodbav:"shards,omitempty"`
	ShardsDone int `dynamodbav:"shards_done,omitempty"`
	// OK and Fail are the rolled-up child outcomes.
	OK   int `dynamodbav:"ok,omitempty"`
	Fail int `dynamodbav:"fail,omitempty"`
	// Callbacks lists a batch's defined callbacks (on_complete, ...);
	// Fired the ones triggered.
	Callbacks []string `dynamodbav:"callbacks,omitempty,stringset"`
	Fired     []string `dynamodbav:"fired,omitempty,stringset"`
	FiredAt   string   `dynamodbav:"fired_at,omitempty"`
	// State is waiting, running, completed, failed or cancelled.
	State string `dynamodbav:"state"`
	// Outcome is "ok" or "fail" once recorded in the parent's counters.
	Outcome string `dynamodbav:"outcome,omitempty"`
	// Result and Error are a finished leaf's result and last error (JSON).
	Result  string `dynamodbav:"result,omitempty"`
	Error   string `dynamodbav:"error,omitempty"`
	Attempt int    `dynamodbav:"attempt,omitempty"`
	// JobCount is the number of leaf jobs in the workflow (root only).
	JobCount    int    `dynamodbav:"job_count,omitempty"`
	FailedIndex *int   `dynamodbav:"failed_index,omitempty"`
	CreatedAt   string `dynamodbav:"created_at,omitempty"`
	StartedAt   string `dynamodbav:"started_at,omitempty"`
	CompletedAt string `dynamodbav:"completed_at,omitempty"`
	CancelledAt string `dynamodbav:"cancelled_at,omitempty"`
	Version     int64  `dynamodbav:"version"`
	// DuePK and DueAt list a running workflow's root in the due index so
	// the sweeper checks it for lost progress (see DueWorkflows).
	DuePK string `dynamodbav:"due_pk,omitempty"`
	DueAt int64  `dynamodbav:"due_at,omitempty"`
}

// workflowDuePK is the due-index partition of running workflows. It has no
// "due#" prefix, so no queue name can collide with it.
const workflowDuePK = "wfdue"

// WorkflowCheckDue sets when the sweeper first checks a new workflow.
func WorkflowCheckDue(n *Node, at time.Time) { n.DuePK, n.DueAt = workflowDuePK, ms(at) }

// DueWorkflows lists up to limit running workflows whose progress check is
// due, with the due time each was listed at.
func (s *Store) DueWorkflows(ctx context.Context, now time.Time, limit int) (map[string]time.Time, error) {
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName: &s.table, IndexName: aws.String("due"),
		KeyConditionExpression: aws.String("due_pk = :pk AND due_at <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": &types.AttributeValueMemberS{Value: workflowDuePK}, ":now": &types.AttributeValueMemberN{Value: itoa(ms(now))},
		},
		Limit: aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, fmt.Errorf("query due workflows: %w", err)
	}
	ids := map[string]time.Time{}
	for _, av := range out.Items {
		var n Node
		if err := attributevalue.UnmarshalMap(av, &n); err != nil {
			return nil, err
		}
		ids[n.WorkflowID] = fromMS(n.DueAt)
	}
	return ids, nil
}

// PostponeWorkflowCheck moves a workflow's next progress check from due
// to next, if nobody moved it meanwhile.
func (s *Store) PostponeWorkflowCheck(ctx context.Context, wfID string, due, next time.Time) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		UpdateExpression:          aws.String("SET due_at = :next"),
		ConditionExpression:       aws.String("due_at = :due"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":next": &types.AttributeValueMemberN{Value: itoa(ms(next))}, ":due": &types.AttributeValueMemberN{Value: itoa(ms(due))}},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("postpone check of workflow %s: %w", wfID, err)
	}
	return nil
}

// Shard is one counter shard of a composite node.
type Shard struct {
	Expected int  `dynamodbav:"expected"`
	OK       int  `dynamodbav:"ok"`
	Fail     int  `dynamodbav:"fail"`
	Rolled   bool `dynamodbav:"rolled,omitempty"`
}

type nodeItem struct {
	PK string `dynamodbav:"pk"`
	SK string `dynamodbav:"sk"`
	Node
}

type shardItem struct {
	PK   string `dynamodbav:"pk"`
	SK   string `dynamodbav:"sk"`
	WFID string `dynamodbav:"wf_id"`
	Path string `dynamodbav:"path"`
	Key  string `dynamodbav:"shard"`
	Shard
}

func wfKey(wfID, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK: &types.AttributeValueMemberS{Value: wfPrefix + wfID},
		attrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

func nodeSK(path string) string { return nodePrefix + path }

func shardSK(path, shard string) string { return shardPrefix + path + "#" + shard }

// ShardKey names shard k of a composite.
func ShardKey(k int) string { return strconv.Itoa(k) }

// NewShard describes a shard to create with a workflow.
type NewShard struct {
	Path, Key string
	Expected  int
}

// ErrWorkflowExists is returned when a workflow id is taken.
var ErrWorkflowExists = errors.New("workflow exists")

// CreateWorkflow writes a workflow's nodes and counter shards. The root
// node is written last and conditionally: its stream record starts the
// workflow, so a workflow whose creation failed midway never starts (its
// partial items are unreachable and carry no jobs). Workflows of at most
// 100 items are written in one transaction.
func (s *Store) CreateWorkflow(ctx context.Context, nodes []Node, shards []NewShard) error {
	var root *Node
	var items []map[string]types.AttributeValue
	for i := range nodes {
		n := nodes[i]
		n.Version = 1
		if n.Path == RootPath {
			root = &nodes[i]
			continue
		}
		av, err := attributevalue.MarshalMap(nodeItem{PK: wfPrefix + n.WorkflowID, SK: nodeSK(n.Path), Node: n})
		if err != nil {
			return err
		}
		items = append(items, av)
	}
	if root == nil {
		return fmt.Errorf("workflow has no root node")
	}
	for _, sh := range shards {
		av, err := attributevalue.MarshalMap(shardItem{PK: wfPrefix + root.WorkflowID, SK: shardSK(sh.Path, sh.Key), WFID: root.WorkflowID, Path: sh.Path, Key: sh.Key, Shard: Shard{Expected: sh.Expected}})
		if err != nil {
			return err
		}
		items = append(items, av)
	}
	r := *root
	r.Version = 1
	rootAV, err := attributevalue.MarshalMap(nodeItem{PK: wfPrefix + r.WorkflowID, SK: nodeSK(RootPath), Node: r})
	if err != nil {
		return err
	}
	cond := aws.String("attribute_not_exists(pk)")
	if len(items) < MaxBatch {
		tx := make([]types.TransactWriteItem, 0, len(items)+1)
		for _, it := range items {
			tx = append(tx, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: it}})
		}
		tx = append(tx, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: rootAV, ConditionExpression: cond}})
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) {
			return ErrWorkflowExists
		}
		if err != nil {
			return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
		}
		return nil
	}
	if err := s.batchPut(ctx, items); err != nil {
		return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: rootAV, ConditionExpression: cond})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ErrWorkflowExists
	}
	if err != nil {
		return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
	}
	return nil
}

// BatchWriter is the batch write call CreateWorkflow uses for large
// workflows.
type BatchWriter interface {
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

func (s *Store) batchPut(ctx context.Context, items []map[string]types.AttributeValue) error {
	bw, ok := s.db.(BatchWriter)
	if !ok {
		return fmt.Errorf("the DynamoDB client cannot batch write")
	}
	for len(items) > 0 {
		n := min(25, len(items))
		reqs := make([]types.WriteRequest, n)
		for i := 0; i < n; i++ {
			reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: items[i]}}
		}
		items = items[n:]
		for tries := 0; len(reqs) > 0; tries++ {
			if tries > 8 {
				return fmt.Errorf("batch write: %d items still unprocessed", len(reqs))
			}
			out, err := bw.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{s.table: reqs}})
			if err != nil {
				return err
			}
			reqs = out.UnprocessedItems[s.table]
			if len(reqs) > 0 {
				time.Sleep(time.Duration(tries+1) * 20 * time.Millisecond)
			}
		}
	}
	return nil
}

// getWF reads one workflow item into out (consistent read).
func (s *Store) getWF(ctx context.Context, wfID, sk string, out any) error {
	res, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: wfKey(wfID, sk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("get %s %s: %w", wfID, sk, err)
	}
	if len(res.Item) == 0 {
		return ErrNotFound
	}
	return attributevalue.UnmarshalMap(res.Item, out)
}

// GetNode reads one node (consistent read).
func (s *Store) GetNode(ctx context.Context, wfID, path string) (*Node, error) {
	var it nodeItem
	if err := s.getWF(ctx, wfID, nodeSK(path), &it); err != nil {
		return nil, err
	}
	return &it.Node, nil
}

// GetShard reads one counter shard (consistent read).
func (s *Store) GetShard(ctx context.Context, wfID, path, key string) (*Shard, error) {
	var it shardItem
	if err := s.getWF(ctx, wfID, shardSK(path, key), &it); err != nil {
		return nil, err
	}
	return &it.Shard, nil
}

// WorkflowItems reads every node of a workflow (paginated query of its
// partition), root first.
func (s *Store) WorkflowItems(ctx context.Context, wfID string) ([]*Node, error) {
	var nodes []*Node
	var start map[string]types.AttributeValue
	for {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &s.table, KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :n)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": &types.AttributeValueMemberS{Value: wfPrefix + wfID}, ":n": &types.AttributeValueMemberS{Value: nodePrefix},
			},
			ConsistentRead: aws.Bool(true), ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, fmt.Errorf("query workflow %s: %w", wfID, err)
		}
		for _, av := range out.Items {
			var it nodeItem
			if err := attributevalue.UnmarshalMap(av, &it); err != nil {
				return nil, err
			}
			n := it.Node
			nodes = append(nodes, &n)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nodes, nil
		}
		start = out.LastEvaluatedKey
	}
}

// Outcome is a finished child recorded in its parent's counters.
type Outcome struct {
	WorkflowID, Path, Parent, ShardKey string
	OK                                 bool
	Result, Error                      string
	Attempt                            int
	At                                 time.Time
	// StartedAt, when set, records when a leaf's job started (for the
	// duration in workflow events).
	StartedAt time.Time
}

// RecordOutcome marks a child node finished and counts it in its parent's
// shard, in one transaction that applies only the first time: it returns
// false when the outcome was already recorded (a duplicate or retried
// stream record).
func (s *Store) RecordOutcome(ctx context.Context, o Outcome) (bool, error) {
	outcome, state, counter := "ok", "completed", "ok"
	if !o.OK {
		outcome, state, counter = "fail", "failed", "fail"
	}
	u := expression.Set(expression.Name("outcome"), expression.Value(outcome)).
		Set(expression.Name("state"), expression.Value(state)).
		Set(expression.Name("completed_at"), expression.Value(job.Timestamp(o.At))).
		Add(expression.Name(attrVersion), expression.Value(1))
	if o.Result != "" {
		u = u.Set(expression.Name("result"), expression.Value(o.Result))
	}
	if o.Error != "" {
		u = u.Set(expression.Name("error"), expression.Value(o.Error))
	}
	if o.Attempt > 0 {
		u = u.Set(expression.Name("attempt"), expression.Value(o.Attempt))
	}
	if !o.StartedAt.IsZero() {
		u = u.Set(expression.Name("started_at"), expression.IfNotExists(expression.Name("started_at"), expression.Value(job.Timestamp(o.StartedAt))))
	}
	child, err := expression.NewBuilder().WithUpdate(u).
		WithCondition(expression.AttributeExists(expression.Name(attrPK)).And(expression.AttributeNotExists(expression.Name("outcome")))).Build()
	if err != nil {
		return false, err
	}
	count, err := expression.NewBuilder().WithUpdate(expression.Add(expression.Name(counter), expression.Value(1))).
		WithCondition(expression.AttributeExists(expression.Name(attrPK))).Build()
	if err != nil {
		return false, err
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{TableName: &s.table, Key: wfKey(o.WorkflowID, nodeSK(o.Path)), UpdateExpression: child.Update(),
			ConditionExpression: child.Condition(), ExpressionAttributeNames: child.Names(), ExpressionAttributeValues: child.Values()}},
		{Update: &types.Update{TableName: &s.table, Key: wfKey(o.WorkflowID, shardSK(o.Parent, o.ShardKey)), UpdateExpression: count.Update(),
			ConditionExpression: count.Condition(), ExpressionAttributeNames: count.Names(), ExpressionAttributeValues: count.Values()}},
	}})
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		if len(tce.CancellationReasons) > 0 && aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
			return false, nil
		}
		return false, fmt.Errorf("record outcome of %s%s: %w", o.WorkflowID, o.Path, err)
	}
	if err != nil {
		return false, fmt.Errorf("record outcome of %s%s: %w", o.WorkflowID, o.Path, err)
	}
	return true, nil
}

// RollUp adds a full shard's counts to its node, exactly once (the shard
// is marked rolled in the same transaction). It returns false if the shard
// was already rolled up.
func (s *Store) RollUp(ctx context.Context, wfID, path, key string, sh *Shard) (bool, error) {
	mark, err := expression.NewBuilder().WithUpdate(expression.Set(expression.Name("rolled"), expression.Value(true))).
		WithCondition(expression.AttributeNotExists(expression.Name("rolled"))).Build()
	if err != nil {
		return false, err
	}
	u := expression.Add(expression.Name(attrVersion), expression.Value(1))
	if key == CallbackShard {
		u = u.Set(expression.Name("cb_done"), expression.Value(true)).Set(expression.Name("cb_fail"), expression.Value(sh.Fail))
	} else {
		u = u.Add(expression.Name("shards_done"), expression.Value(1)).Add(expression.Name("ok"), expression.Value(sh.OK)).
			Add(expression.Name("fail"), expression.Value(sh.Fail))
	}
	node, err := expression.NewBuilder().WithUpdate(u).Build()
	if err != nil {
		return false, err
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{TableName: &s.table, Key: wfKey(wfID, shardSK(path, key)), UpdateExpression: mark.Update(),
			ConditionExpression: mark.Condition(), ExpressionAttributeNames: mark.Names(), ExpressionAttributeValues: mark.Values()}},
		{Update: &types.Update{TableName: &s.table, Key: wfKey(wfID, nodeSK(path)), UpdateExpression: node.Update(),
			ExpressionAttributeNames: node.Names(), ExpressionAttributeValues: node.Values()}},
	}})
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("roll up %s%s#%s: %w", wfID, path, key, err)
	}
	return true, nil
}

// CallbacksDone reports whether a batch's callback shard was rolled up and
// how many callbacks failed.
func (s *Store) CallbacksDone(ctx context.Context, wfID, path string) (bool, int, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(path)), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("cb_done, cb_fail")})
	if err != nil {
		return false, 0, err
	}
	var v struct {
		Done bool `dynamodbav:"cb_done"`
		Fail int  `dynamodbav:"cb_fail"`
	}
	if err := attributevalue.UnmarshalMap(out.Item, &v); err != nil {
		return false, 0, err
	}
	return v.Done, v.Fail, nil
}

// FireCallbacks creates a batch's callback shard expecting the triggered
// callbacks and records which fired, exactly once. It returns false if
// they were already fired.
func (s *Store) FireCallbacks(ctx context.Context, wfID, path string, fired []string, at time.Time) (bool, error) {
	shard, err := attributevalue.MarshalMap(shardItem{PK: wfPrefix + wfID, SK: shardSK(path, CallbackShard), WFID: wfID, Path: path, Key: CallbackShard, Shard: Shard{Expected: len(fired)}})
	if err != nil {
		return false, err
	}
	u := expression.Add(expression.Name(attrVersion), expression.Value(1)).Set(expression.Name("fired_at"), expression.Value(job.Timestamp(at)))
	if len(fired) > 0 {
		u = u.Set(expression.Name("fired"), expression.Value(&types.AttributeValueMemberSS{Value: fired}))
	}
	node, err := expression.NewBuilder().WithUpdate(u).Build()
	if err != nil {
		return false, err
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: &s.table, Item: shard, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
		{Update: &types.Update{TableName: &s.table, Key: wfKey(wfID, nodeSK(path)), UpdateExpression: node.Update(),
			ExpressionAttributeNames: node.Names(), ExpressionAttributeValues: node.Values()}},
	}})
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("fire callbacks of %s%s: %w", wfID, path, err)
	}
	return true, nil
}

// SetNodeState moves a node from one of the from states to "to" (with
// started_at, completed_at or cancelled_at as fits), and optionally records
// the failed step index. It returns false if the node was not in a from
// state.
func (s *Store) SetNodeState(ctx context.Context, wfID, path string, to string, at time.Time, failedIndex *int, from ...string) (bool, error) {
	u := expression.Set(expression.Name("state"), expression.Value(to)).Add(expression.Name(attrVersion), expression.Value(1))
	switch to {
	case "running":
		u = u.Set(expression.Name("started_at"), expression.Value(job.Timestamp(at)))
	case "cancelled":
		u = u.Set(expression.Name("cancelled_at"), expression.Value(job.Timestamp(at))).Set(expression.Name("completed_at"), expression.Value(job.Timestamp(at)))
	default:
		u = u.Set(expression.Name("completed_at"), expression.Value(job.Timestamp(at)))
	}
	if to != "running" {
		// A finished workflow leaves the due index.
		u = u.Remove(expression.Name(attrDuePK)).Remove(expression.Name(attrDueAt))
	}
	if failedIndex != nil {
		u = u.Set(expression.Name("failed_index"), expression.Value(*failedIndex))
	}
	ops := make([]expression.OperandBuilder, 0, len(from))
	for _, f := range from[1:] {
		ops = append(ops, expression.Value(f))
	}
	expr, err := expression.NewBuilder().WithUpdate(u).WithCondition(expression.Name("state").In(expression.Value(from[0]), ops...)).Build()
	if err != nil {
		return false, err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(path)),
		UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("set node %s%s %s: %w", wfID, path, to, err)
	}
	return true, nil
}

// CreateWorkflowJobs creates a workflow's jobs only while its root is
// still running (a ConditionCheck in every transaction), so a cancelled
// workflow never gains a job. Jobs that exist already are skipped: the
// call is idempotent.
func (s *Store) CreateWorkflowJobs(ctx context.Context, wfID string, jobs []*job.Job, redeliverAfter time.Duration) error {
	check := types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		ConditionExpression: aws.String("#s = :running"), ExpressionAttributeNames: map[string]string{"#s": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":running": &types.AttributeValueMemberS{Value: "running"}}}}
	for len(jobs) > 0 {
		n := min(MaxBatch-1, len(jobs))
		chunk := jobs[:n]
		jobs = jobs[n:]
		tx := []types.TransactWriteItem{check}
		for _, j := range chunk {
			put, err := s.jobPut(j, redeliverAfter)
			if err != nil {
				return err
			}
			tx = append(tx, types.TransactWriteItem{Put: put})
		}
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) {
			if aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
				return ErrWorkflowNotRunning
			}
			// Some jobs exist (a retried start): create the rest one by one.
			for _, j := range chunk {
				put, _ := s.jobPut(j, redeliverAfter)
				_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{check, {Put: put}}})
				if errors.As(err, &tce) && aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
					return ErrWorkflowNotRunning
				}
				if err != nil && !errors.As(err, &tce) {
					return fmt.Errorf("create workflow job %s: %w", j.ID, err)
				}
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("create %d workflow jobs: %w", len(chunk), err)
		}
	}
	return nil
}

// ErrWorkflowNotRunning is returned when a workflow stopped (cancelled or
// finished) before its jobs could be created.
var ErrWorkflowNotRunning = errors.New("workflow is not running")

// BatchGetJobs reads jobs by id (up to 100 per call, eventually
// consistent); missing ids are absent from the result.
func (s *Store) BatchGetJobs(ctx context.Context, ids []string) (map[string]*job.Job, error) {
	bg, ok := s.db.(interface {
		BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	})
	if !ok {
		return nil, fmt.Errorf("the DynamoDB client cannot batch get")
	}
	out := map[string]*job.Job{}
	for len(ids) > 0 {
		n := min(100, len(ids))
		keys := make([]map[string]types.AttributeValue, n)
		for i, id := range ids[:n] {
			keys[i] = jobKey(id)
		}
		ids = ids[n:]
		for tries := 0; len(keys) > 0 && tries < 8; tries++ {
			res, err := bg.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{s.table: {Keys: keys}}})
			if err != nil {
				return nil, fmt.Errorf("batch get jobs: %w", err)
			}
			for _, av := range res.Responses[s.table] {
				j, err := decodeJob(av)
				if err != nil {
					return nil, err
				}
				out[j.ID] = j
			}
			keys = res.UnprocessedKeys[s.table].Keys
		}
	}
	return out, nil
}

// jobPut builds the conditional put of a new job with its initial index
// entries, set from its state: available jobs join the ready index (and,
// push-mode, the due index for redelivery); scheduled ones the due index.
func (s *Store) jobPut(j *job.Job, redeliverAfter time.Duration) (*types.Put, error) {
	r, err := toRecord(j)
	if err != nil {
		return nil, err
	}
	switch j.State {
	case job.Available:
		r.ReadyPK, r.ReadySK = availPrefix+j.Queue, readySortKey(j.Priority, *j.EnqueuedAt, j.ID)
		if j.Push {
			r.DuePK, r.DueAt = duePrefix+j.Queue, ms(j.EnqueuedAt.Add(redeliverAfter))
		}
	case job.Scheduled:
		r.DuePK, r.DueAt = duePrefix+j.Queue, ms(*j.ScheduledAt)
	case job.Pending:
	default:
		return nil, fmt.Errorf("create job %s in state %s", j.ID, j.State)
	}
	av, err := attributevalue.MarshalMap(r)
	if err != nil {
		return nil, err
	}
	return &types.Put{TableName: &s.table, Item: av, ConditionExpression: aws.String("attribute_not_exists(pk)")}, nil
}

// DecodeNode turns a stream image into a workflow node; ok is false for
// items that are not nodes.
func DecodeNode(av map[string]types.AttributeValue) (*Node, bool, error) {
	sk, ok := av[attrSK].(*types.AttributeValueMemberS)
	if !ok || len(sk.Value) < len(nodePrefix) || sk.Value[:len(nodePrefix)] != nodePrefix {
		return nil, false, nil
	}
	var it nodeItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return nil, false, fmt.Errorf("decode workflow node: %w", err)
	}
	return &it.Node, true, nil
}

// WorkflowStarted reports the workflow id when a stream image is a
// workflow's root node (its insertion starts the workflow).
func WorkflowStarted(av map[string]types.AttributeValue) (string, bool) {
	sk, ok := av[attrSK].(*types.AttributeValueMemberS)
	if !ok || sk.Value != nodeSK(RootPath) {
		return "", false
	}
	id, ok := av["wf_id"].(*types.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return id.Value, true
}
