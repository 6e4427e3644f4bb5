package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
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
)

// Node is one node of a workflow as stored: a job step (leaf) or a chain,
// group, batch or graph (composite). A composite's progress lives on its
// own item (OK and Fail: the indexes of the children that finished), or
// for a wide group or batch in counter shards rolled up into Rolled; a
// batch's callbacks in Fired, CallbacksOK and CallbacksFail. Every write
// to these sets is an ADD, so repeating it changes nothing.
type Node struct {
	WorkflowID string `dynamodbav:"wf_id"`
	Path       string `dynamodbav:"path"`
	// Kind is "job", "chain", "group", "batch" or "graph".
	Kind string `dynamodbav:"kind"`
	Name string `dynamodbav:"name,omitempty"`
	// StepID is the id a client gave the step (the dependency-graph form).
	StepID string `dynamodbav:"sid,omitempty"`
	Index  int    `dynamodbav:"idx"`
	// Def is a leaf's job request (JSON text).
	Def string `dynamodbav:"def,omitempty"`
	// JobType is a leaf's job type.
	JobType string `dynamodbav:"job_type,omitempty"`
	// PShard names the counter shard of its parent this node is counted
	// in (a child of a wide group or batch); empty when the parent counts
	// on itself.
	PShard string `dynamodbav:"pshard,omitempty"`
	// Deps lists the sibling indexes a graph step waits for; Next the
	// ones that wait for it.
	Deps []int `dynamodbav:"deps,omitempty,numberset"`
	Next []int `dynamodbav:"next,omitempty,numberset"`
	// Total is a composite's number of children (callbacks not counted).
	Total int `dynamodbav:"total,omitempty"`
	// Shards is the number of counter shards of a wide group or batch; 0
	// means its children are counted on the node itself.
	Shards int `dynamodbav:"shards,omitempty"`
	// Graph is a graph composite's structure, read together with its
	// progress: JSON {"ids": [step ids], "deps": [[dependency indexes]]}.
	Graph string `dynamodbav:"graph,omitempty"`
	// OK and Fail are the children that finished (counted on the node).
	OK   []int `dynamodbav:"ok,omitempty,numberset"`
	Fail []int `dynamodbav:"fail,omitempty,numberset"`
	// Rolled holds "<shard>:<ok>:<fail>" for each full counter shard.
	Rolled []string `dynamodbav:"rolled,omitempty,stringset"`
	// Callbacks lists a batch's defined callbacks (on_complete, ...);
	// Fired the ones triggered; CallbacksOK and CallbacksFail the fired
	// ones that finished.
	Callbacks     []string `dynamodbav:"callbacks,omitempty,stringset"`
	Fired         []string `dynamodbav:"fired,omitempty,stringset"`
	FiredAt       string   `dynamodbav:"fired_at,omitempty"`
	CallbacksOK   []string `dynamodbav:"cb_ok,omitempty,stringset"`
	CallbacksFail []string `dynamodbav:"cb_fail,omitempty,stringset"`
	// State is the node's state; leaves keep "waiting" (their job holds
	// theirs).
	State wfstate.State `dynamodbav:"state"`
	// JobCount is the number of leaf jobs in the workflow (root only).
	JobCount    int  `dynamodbav:"job_count,omitempty"`
	FailedIndex *int `dynamodbav:"failed_index,omitempty"`
	// FailedStep is the path of the child whose failure failed the node.
	FailedStep string `dynamodbav:"failed_step,omitempty"`
	// Error is what failed the node itself (JSON), e.g. its timeout.
	Error string `dynamodbav:"error,omitempty"`
	// TimeoutMS bounds a composite's run; Deadline (Unix ms) is when the
	// run that started it ends.
	TimeoutMS int64 `dynamodbav:"timeout_ms,omitempty"`
	Deadline  int64 `dynamodbav:"deadline_ms,omitempty"`
	// Compensate is a job step's compensation (a job request, JSON).
	Compensate string `dynamodbav:"compensate,omitempty"`
	// Last is set on a chain's last step: its job carries it
	// (job.Job.WorkflowLast), so finishing it needs no read of a next step.
	Last bool `dynamodbav:"last,omitempty"`
	// Plan lists, in the order they run, the steps a failed workflow's
	// compensation undoes (the /~compensate node).
	Plan []string `dynamodbav:"plan,omitempty"`
	// Root only: Compensable counts the steps with a compensate job;
	// Compensation is "waiting" while a failed workflow's compensation
	// waits for its running steps, then "none", "running", "completed"
	// or "failed"; Handlers lists the defined handlers, HandlersOK and
	// HandlersFail the finished ones; Run counts the retries.
	Compensable  int      `dynamodbav:"compensable,omitempty"`
	Compensation string   `dynamodbav:"compensation,omitempty"`
	Handlers     []string `dynamodbav:"handlers,omitempty,stringset"`
	HandlersOK   []string `dynamodbav:"h_ok,omitempty,stringset"`
	HandlersFail []string `dynamodbav:"h_fail,omitempty,stringset"`
	Run          int      `dynamodbav:"run,omitempty"`
	// Reopening is set while a retry re-opens the workflow's failed steps:
	// on the root for the whole retry, and on every composite (and counter
	// shard) whose counts the retry changes until its failed jobs are back
	// in their queues. A write that counts a child or decides from the
	// counts does not apply to a marked item (NodeWrite, CountOnShard,
	// RollUp: ErrReopening); the retry counts what finished meanwhile
	// once it clears the marks.
	Reopening string `dynamodbav:"reopening,omitempty"`
	// Form is "steps" for a workflow created in the dependency-graph form
	// (its view lists steps by id), empty for the tree form (root only).
	Form string `dynamodbav:"form,omitempty"`
	// Creating is set on the root of a large workflow while its items are
	// written; the sweeper deletes one whose creator died (one created
	// asynchronously, with CDef, it finishes instead).
	Creating bool `dynamodbav:"creating,omitempty"`
	// Unguarded is set on the root while a creation writes the first jobs
	// of a large workflow by plain conditional puts, without the root
	// check a transaction would make (half the write units): a cancel that
	// finds it puts a cancelled job in place of every first job not
	// written yet (workflow.takeUnwritten), so the creation cannot add one
	// after.
	Unguarded bool `dynamodbav:"cfirst,omitempty"`
	// Launching is set on the root of a workflow that is a chain or a
	// graph by the advance that starts its next job steps without a
	// transaction (Store.AdvanceMarked): a chain's next step's path, or
	// RootPath for a graph (the steps whose dependencies all completed),
	// recorded in the same write as the finished step, before the jobs are
	// put. A cancel or timeout that finds it puts a cancelled job in each
	// such step's place whose job does not exist yet
	// (workflow.takeUnwritten), so the advance's put fails and the stopped
	// workflow gains no job; the stream function puts the jobs if the
	// advancing request died between the two writes.
	Launching string `dynamodbav:"launch,omitempty"`
	// Cancelling is set on a cancelled workflow's root when the request
	// that cancelled it ran out of time before all its jobs were
	// cancelled: the stream function cancels the rest (SetCancelling).
	Cancelling bool `dynamodbav:"cancelling,omitempty"`
	// CancelPass counts the passes that cancelled part of the jobs left
	// (NextCancelPass): each is a change of the root, from which the
	// stream function runs the next.
	CancelPass int64 `dynamodbav:"cancel_pass,omitempty"`
	// CDef is the gzipped definition of a workflow created asynchronously
	// (see BeginWorkflow), kept on the root until its first jobs exist;
	// CreateItems is how many nodes its creation writes besides the root.
	CDef        []byte `dynamodbav:"cdef,omitempty"`
	CreateItems int    `dynamodbav:"citems,omitempty"`
	// CreateTries counts the writers that took the creation's lease
	// (ResumeWorkflow): past the first, a writer skips what exists.
	CreateTries int `dynamodbav:"ctries,omitempty"`
	// CreateJobs is how many first jobs (in job id order) a writer that
	// gave the lease back had written; CreateClean is the try (a
	// CreateTries value) that gave it back. A writer whose try follows a
	// clean one writes from CreateJobs on without reading which exist
	// (at most a request in flight when it stopped landed after it; the
	// put's condition skips those); after a writer that died it reads the
	// keys from CreateJobs on.
	CreateJobs  int `dynamodbav:"cjobs,omitempty"`
	CreateClean int `dynamodbav:"cclean,omitempty"`
	// CreateLease (Unix ms) is set while a writer holds the creation; the
	// stream function runs the next slice of a creation from the root's
	// change that gives it back.
	CreateLease int64  `dynamodbav:"clease,omitempty"`
	CreatedAt   string `dynamodbav:"created_at,omitempty"`
	StartedAt   string `dynamodbav:"started_at,omitempty"`
	CompletedAt string `dynamodbav:"completed_at,omitempty"`
	CancelledAt string `dynamodbav:"cancelled_at,omitempty"`
	// Rev counts the node's writes (1 when created): the stream derives
	// the ids of its events from it. It is "nv", not "version" as on every
	// other item: the due index projects "version" (a job's), and a
	// running workflow's root is in that index (its progress check), so
	// every step's write of the root would write the index too, twice the
	// units in a transaction. LegacyVersion is the count of a node written
	// before (see Version).
	Rev           int64 `dynamodbav:"nv,omitempty"`
	LegacyVersion int64 `dynamodbav:"version,omitempty"`
	// DuePK and DueAt list a running workflow's root in the due index so
	// the sweeper checks it for lost progress (see DueWorkflows).
	DuePK string `dynamodbav:"due_pk,omitempty"`
	DueAt int64  `dynamodbav:"due_at,omitempty"`
}

// Version is the node's write count: Rev, or for a node not written
// since nodes counted in "version", that count (its next write goes on
// from it: NodeWrite.build).
func (n *Node) Version() int64 {
	if n.Rev > 0 {
		return n.Rev
	}
	return n.LegacyVersion
}

// Done reports whether child i is counted as finished on the node.
func (n *Node) Done(i int) bool { return hasInt(n.OK, i) || hasInt(n.Fail, i) }

func hasInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func hasString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// RolledCounts sums the rolled-up shards: how many, and their ok and fail
// counts.
func (n *Node) RolledCounts() (shards, ok, fail int) {
	for _, r := range n.Rolled {
		parts := strings.Split(r, ":")
		if len(parts) != 3 {
			continue
		}
		o, _ := strconv.Atoi(parts[1])
		f, _ := strconv.Atoi(parts[2])
		shards, ok, fail = shards+1, ok+o, fail+f
	}
	return shards, ok, fail
}

// ShardRolled reports whether shard key was rolled up into the node.
func (n *Node) ShardRolled(key string) bool {
	for _, r := range n.Rolled {
		if strings.HasPrefix(r, key+":") {
			return true
		}
	}
	return false
}

// workflowDuePK is the due-index partition of running workflows. It has no
// "due#" prefix, so no queue name can collide with it. timeoutDuePK holds
// nested nodes whose timeout is running, at their deadline.
const (
	workflowDuePK = "wfdue"
	timeoutDuePK  = "wftimeout"
)

// dueNodes lists up to limit nodes of every shard of a workflow due
// partition (workflowDuePK or timeoutDuePK) due at or before now, earliest
// first.
func (s *Store) dueNodes(ctx context.Context, base string, now time.Time, limit int) ([]Node, error) {
	parts, err := eachShard(ctx, shardKeys(base, shards().WorkflowDue), func(ctx context.Context, pk string) ([]Node, error) {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &s.table, IndexName: aws.String(topology.IndexDue),
			KeyConditionExpression: aws.String("due_pk = :pk AND due_at <= :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": avS(pk), ":now": &types.AttributeValueMemberN{Value: itoa(ms(now))},
			},
			Limit: aws.Int32(int32(limit)),
		})
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", pk, err)
		}
		nodes := make([]Node, len(out.Items))
		for i, av := range out.Items {
			if err := attributevalue.UnmarshalMap(av, &nodes[i]); err != nil {
				return nil, err
			}
		}
		return nodes, nil
	})
	if err != nil {
		return nil, err
	}
	var all []Node
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.SortStableFunc(all, func(a, b Node) int { return cmp.Compare(a.DueAt, b.DueAt) })
	if len(all) > limit {
		all = all[:limit]
	}
	return all, nil
}

// DueTimeouts lists up to limit nested workflow nodes whose deadline has
// passed.
func (s *Store) DueTimeouts(ctx context.Context, now time.Time, limit int) ([]NodeKey, error) {
	nodes, err := s.dueNodes(ctx, timeoutDuePK, now, limit)
	if err != nil {
		return nil, fmt.Errorf("due workflow timeouts: %w", err)
	}
	keys := make([]NodeKey, len(nodes))
	for i, n := range nodes {
		keys[i] = NodeKey{WorkflowID: n.WorkflowID, Path: n.Path}
	}
	return keys, nil
}

// A failed workflow's compensation: none to run, running, or how it ended.
const (
	CompensationNone = "none"
	// CompensationWaiting: the workflow failed while steps that carry a
	// compensation were still running (a timeout cut them off); the
	// compensation starts once they have finished, so a step that
	// completes late is undone too. The root's progress check is set
	// meanwhile, so the sweeper looks again.
	CompensationWaiting   = "waiting"
	CompensationRunning   = "running"
	CompensationCompleted = "completed"
	CompensationFailed    = "failed"
)

// attrReopening marks an item a retry is re-opening (Node.Reopening).
const attrReopening = "reopening"

// ErrReopening is the answer to a count or roll-up refused because a retry
// is re-opening the composite or shard (Node.Reopening): the retry counts
// the child once it is done.
var ErrReopening = errors.New("store: a retry is re-opening the workflow's counts")

// RefusedByReopening reports whether err is a workflow write refused
// while a retry re-opens the workflow: ErrReopening, or a node conflict
// on a node carrying the mark.
func RefusedByReopening(err error) bool {
	var nc *ErrNodeConflict
	return errors.Is(err, ErrReopening) || errors.As(err, &nc) && nc.Current != nil && nc.Current.Reopening != ""
}

// ForgetInShard removes children from a counter shard's sets (a retry
// re-running them) and marks the shard as re-opening (Node.Reopening)
// until ClearShardMark.
func (s *Store) ForgetInShard(ctx context.Context, wfID, path, key string, idx []int) error {
	x := newExprs()
	update := "SET " + x.name(attrReopening) + " = " + x.str("true") + " DELETE " + x.name("ok") + " " + x.nums(idx) + ", " + x.name("fail") + " " + x.nums(idx)
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, shardSK(path, key)),
		UpdateExpression: &update, ExpressionAttributeNames: x.names, ExpressionAttributeValues: x.values})
	if err != nil {
		return fmt.Errorf("forget in %s%s#%s: %w", wfID, path, key, err)
	}
	return nil
}

// ClearShardMark removes a retry's mark from a counter shard (a shard
// without one is left as it is).
func (s *Store) ClearShardMark(ctx context.Context, wfID, path, key string) error {
	x := newExprs()
	update := "REMOVE " + x.name(attrReopening)
	cond := "attribute_exists(" + x.name(attrReopening) + ")"
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, shardSK(path, key)),
		UpdateExpression: &update, ConditionExpression: &cond, ExpressionAttributeNames: x.names})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("clear the mark of %s%s#%s: %w", wfID, path, key, err)
	}
	return nil
}

// TimeoutDue lists a nested node created with a running deadline in the
// due index at that deadline.
func TimeoutDue(n *Node) { n.DuePK, n.DueAt = workflowDueKey(timeoutDuePK, n.WorkflowID), n.Deadline }

// WorkflowCheckDue sets when the sweeper first checks a new workflow.
func WorkflowCheckDue(n *Node, at time.Time) {
	n.DuePK, n.DueAt = workflowDueKey(workflowDuePK, n.WorkflowID), ms(at)
}

// DueWorkflows lists up to limit workflows whose progress check is due
// (running ones, and failed ones whose compensation waits for running
// steps), with the due time each was listed at.
func (s *Store) DueWorkflows(ctx context.Context, now time.Time, limit int) (map[string]time.Time, error) {
	nodes, err := s.dueNodes(ctx, workflowDuePK, now, limit)
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

// Shard is one counter shard of a wide composite: child i of n counts in
// shard i mod ceil(n/ShardSize).
type Shard struct {
	Path     string `dynamodbav:"path"`
	Key      string `dynamodbav:"shard"`
	Expected int    `dynamodbav:"expected"`
	OK       []int  `dynamodbav:"ok,omitempty,numberset"`
	Fail     []int  `dynamodbav:"fail,omitempty,numberset"`
}

// Full reports whether every child of the shard finished.
func (sh *Shard) Full() bool { return len(sh.OK)+len(sh.Fail) >= sh.Expected }

type nodeItem struct {
	PK string `dynamodbav:"pk"`
	SK string `dynamodbav:"sk"`
	Node
}

type shardItem struct {
	PK   string `dynamodbav:"pk"`
	SK   string `dynamodbav:"sk"`
	WFID string `dynamodbav:"wf_id"`
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

// ErrWorkflowExists is returned when a workflow id is taken.
var ErrWorkflowExists = errors.New("workflow exists")

// ErrTooLargeToDefer is BeginWorkflow refusing a root that, with its
// definition, would not fit one item; the caller creates the workflow in
// the request instead.
var ErrTooLargeToDefer = errors.New("workflow definition too large to keep on its root")

// deferredRootBytes is the most a root holding its definition may weigh:
// DynamoDB's 400 KB less room for what running adds to it (counts,
// timestamps, errors).
const deferredRootBytes = awslimit.DynamoItemBytes - 64<<10

// ErrWorkflowNotRunning is returned when a workflow stopped (cancelled or
// finished) before a write that needs it running.
var ErrWorkflowNotRunning = errors.New("workflow is not running")

// NewWorkflow is everything a workflow's creation writes: its nodes (the
// root among them), the counter shards of its wide composites, and the
// jobs that start at once.
type NewWorkflow struct {
	Nodes  []Node
	Shards []Shard
	Jobs   []*job.Job
	// RedeliverAfter is passed to job creation (see Store.Create).
	RedeliverAfter time.Duration
	// FreshID is set when the server made the workflow's id (a UUIDv7 no
	// other workflow can hold): its creation may do without the check
	// that no workflow has it (see CreateWorkflow).
	FreshID bool
}

// CreateWorkflow writes a new workflow. Up to MaxBatch items (nodes,
// shards and first jobs together, and 3 MB of them) are written in one
// transaction, so the
// workflow and its first jobs appear together or not at all; a small one
// with a server-made id (FreshID) and one first job is written by two
// requests instead (createUnguarded). A larger one
// is written in stages: the root first (conditional, marked creating),
// then its other items, then the root unmarked and marked Unguarded, then
// its first jobs by conditional puts (absent) without a check of the root
// (a cancel meanwhile puts the ones not written yet as cancelled:
// workflow.takeUnwritten), then the Unguarded mark removed. A creator that
// dies while the root is marked leaves only items the sweeper deletes
// (no job exists before the mark is removed); one that dies later leaves
// a running workflow whose missing first jobs the sweeper's repair
// creates.
func (s *Store) CreateWorkflow(ctx context.Context, w NewWorkflow) error {
	root, items, err := workflowItems(w)
	if err != nil {
		return err
	}
	r := *root
	r.Rev = 1
	cond := aws.String("attribute_not_exists(pk)")
	bytes := 0
	for _, it := range items {
		bytes += ItemBytes(it)
	}
	for _, j := range w.Jobs {
		n, err := JobItemBytes(j, w.RedeliverAfter)
		if err != nil {
			return err
		}
		bytes += n
	}
	if w.FreshID && len(w.Jobs) == 1 && len(items)+1 <= batchWriteMax && bytes <= awslimit.DynamoTxBytes-txNodeReserve {
		return s.createUnguarded(ctx, r, items, w)
	}
	if len(items)+len(w.Jobs)+1 <= MaxBatch && bytes <= awslimit.DynamoTxBytes-txNodeReserve {
		rootAV, err := attributevalue.MarshalMap(nodeItem{PK: wfPrefix + r.WorkflowID, SK: nodeSK(RootPath), Node: r})
		if err != nil {
			return err
		}
		tx := make([]types.TransactWriteItem, 0, len(items)+len(w.Jobs)+1)
		tx = append(tx, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: rootAV, ConditionExpression: cond}})
		for _, it := range items {
			tx = append(tx, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: it}})
		}
		for _, j := range w.Jobs {
			put, err := s.jobPut(j, w.RedeliverAfter)
			if err != nil {
				return err
			}
			tx = append(tx, types.TransactWriteItem{Put: put})
		}
		_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
		if i, ok := failedCondition(err); ok {
			if i == 0 {
				return ErrWorkflowExists
			}
			return &DuplicateError{ID: w.Jobs[i-1-len(items)].ID}
		}
		if err != nil {
			return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
		}
		return nil
	}
	r.Creating = true
	if err := s.putRoot(ctx, r); err != nil {
		return err
	}
	if err := s.batchPut(ctx, items); err != nil {
		return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
	}
	// The mark off and Unguarded on in one write: from here a cancel may
	// come, and it finds the first jobs' writes unguarded.
	if _, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(r.WorkflowID, nodeSK(RootPath)),
		UpdateExpression: aws.String("SET cfirst = :t REMOVE creating"), ConditionExpression: aws.String("attribute_exists(pk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}}}); err != nil {
		return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
	}
	if err := s.putJobs(ctx, w.Jobs, w.RedeliverAfter); err != nil {
		return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
	}
	return s.unmark(ctx, r.WorkflowID, "cfirst")
}

// batchWriteMax is the most items one BatchWriteItem writes.
const batchWriteMax = 25

// createUnguarded writes a small workflow with a server-made id and one
// first job (a chain, say) as two requests instead of a
// transaction, for half the write units (a transaction bills every item
// twice): the root, marked Unguarded, and its nodes in one
// BatchWriteItem, then the first job's conditional put. What the
// transaction gave is kept otherwise: the id cannot be taken, so the
// root's duplicate check has nothing to find; a cancel between the two
// finds the mark and takes the job's place (workflow.takeUnwritten), so
// the put fails; a creator that dies between them leaves a running
// workflow without its first job, which the root's progress check writes
// (workflow.Repair), as for a large creation; the client saw a 5xx, as
// when the answer to a committed transaction is lost. The mark stays (a
// later cancel reads the first job once more; the repair removes it from a
// workflow still running past the creation's grace).
func (s *Store) createUnguarded(ctx context.Context, r Node, items []map[string]types.AttributeValue, w NewWorkflow) error {
	r.Unguarded = true
	rootAV, err := attributevalue.MarshalMap(nodeItem{PK: wfPrefix + r.WorkflowID, SK: nodeSK(RootPath), Node: r})
	if err != nil {
		return err
	}
	if err := s.batchPut(ctx, append([]map[string]types.AttributeValue{rootAV}, items...)); err != nil {
		return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
	}
	if err := fault.Hit(fault.WorkflowAfterItems); err != nil {
		return err
	}
	if err := s.putJobs(ctx, w.Jobs, w.RedeliverAfter); err != nil {
		return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
	}
	return nil
}

// putJobs writes jobs by conditional puts (absent), several at once: one
// that exists already (a cancel's placeholder, workflow.takeUnwritten, or an
// earlier try) is kept as it is.
func (s *Store) putJobs(ctx context.Context, jobs []*job.Job, redeliverAfter time.Duration) error {
	puts := make([]*types.Put, len(jobs))
	for i, j := range jobs {
		var err error
		if puts[i], err = s.jobPut(j, redeliverAfter); err != nil {
			return err
		}
	}
	return s.putAll(ctx, puts)
}

// putAll makes the conditional puts of putJobs, 16 at once.
func (s *Store) putAll(ctx context.Context, puts []*types.Put) error {
	return parallel(ctx, len(puts), 16, func(ctx context.Context, i int) error {
		p := puts[i]
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: p.TableName, Item: p.Item, ConditionExpression: p.ConditionExpression})
		if err != nil && !conditionFailed(err) {
			pk, _ := p.Item[attrPK].(*types.AttributeValueMemberS)
			return fmt.Errorf("put %s: %w", pk.Value, err)
		}
		return nil
	})
}

// BeginWorkflow writes only the root of a workflow created asynchronously:
// marked creating, holding the gzipped definition def, conditional on no
// workflow with its id existing (ErrWorkflowExists). The stream function
// finishes it from the root's insert record (ResumeWorkflow), and the
// sweeper if that failed. items is how many nodes the creation writes
// besides the root, for progress.
func (s *Store) BeginWorkflow(ctx context.Context, root Node, def []byte, items int) error {
	root.Rev, root.Creating, root.CDef, root.CreateItems = 1, true, def, items
	av, err := attributevalue.MarshalMap(nodeItem{PK: wfPrefix + root.WorkflowID, SK: nodeSK(RootPath), Node: root})
	if err != nil {
		return err
	}
	if ItemBytes(av) > deferredRootBytes {
		return ErrTooLargeToDefer
	}
	return s.putRoot(ctx, root)
}

// ErrCreationBusy is ResumeWorkflow finding another writer's lease on the
// creation: that writer finishes it, or the sweeper once the lease ends.
var ErrCreationBusy = errors.New("another writer is creating the workflow")

// ErrCreationUnfinished is ResumeWorkflow stopping with part of the
// creation written: its slice of writing time ended, or its caller's time
// (the context's deadline, less a margin) ran out. It gave its lease back
// (a change of the root, so the stream function runs the next slice);
// running it again continues from what exists.
var ErrCreationUnfinished = errors.New("workflow creation not finished in this slice")

// errSliceOver ends a ResumeWorkflow's writing once its slice is used.
var errSliceOver = errors.New("creation slice over")

// sliceKey carries, in a ResumeWorkflow's context, whether its slice is
// over (a func() bool). Writers check it between requests, never during
// one: a request once started lands, and each phase makes its first
// request whatever the time, so every slice gets further than the last.
type sliceKey struct{}

// sliceOver is errSliceOver once ctx's slice is over.
func sliceOver(ctx context.Context) error {
	if over, _ := ctx.Value(sliceKey{}).(func() bool); over != nil && over() {
		return errSliceOver
	}
	return nil
}

// CreationLease is the longest a ResumeWorkflow holds a creation. A
// caller with a deadline (a Lambda invocation) holds it only until that
// deadline and a little more, so a writer the runtime killed at its
// timeout is followed at once.
const CreationLease = 3 * time.Minute

// leaseSlack is how long a lease outlives its writer's deadline.
const leaseSlack = 2 * time.Second

// resumeMargin is the time ResumeWorkflow keeps before its caller's
// deadline to give its lease back: a tenth of what is left, at most 5 s.
func resumeMargin(left time.Duration) time.Duration { return min(5*time.Second, left/10) }

// ResumeWorkflow finishes a workflow BeginWorkflow started, from the same
// items CreateWorkflow would write: while the root is marked creating (no
// job exists yet) its nodes and shards are written and the mark removed;
// then its first jobs are written (conditional puts, so jobs that exist
// are kept as they are) and the definition dropped from the root. Every
// step is idempotent, so a writer that died is resumed by running it
// again; a writer after the first reads which items exist and writes only
// the others, so every try gets further than the last. One writer at a
// time: it first takes a lease on the root (ErrCreationBusy while
// another's runs), since a second writer's unconditional node writes could
// otherwise land after the first had started the jobs, over their
// progress. It writes for at most slice (0: no limit; the clock starts at
// its first write, after it read what exists, so every slice gets
// further) and never past shortly before ctx's deadline, and gives the
// lease back when it fails or stops (ErrCreationUnfinished). A workflow
// whose creation is finished changes nothing.
func (s *Store) ResumeWorkflow(ctx context.Context, w NewWorkflow, now time.Time, slice time.Duration) error {
	want, items, err := workflowItems(w)
	if err != nil {
		return err
	}
	wfID := want.WorkflowID
	lease, work := CreationLease, ctx
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		lease = min(lease, left+leaseSlack)
		var cancel context.CancelFunc
		work, cancel = context.WithTimeout(ctx, left-resumeMargin(left))
		defer cancel()
	}
	until := now.Add(lease).UnixMilli()
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		UpdateExpression:    aws.String("SET clease = :until ADD ctries :one"),
		ConditionExpression: aws.String("attribute_exists(cdef) AND (attribute_not_exists(clease) OR clease < :now)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":until": &types.AttributeValueMemberN{Value: strconv.FormatInt(until, 10)},
			":now":   &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)},
			":one":   &types.AttributeValueMemberN{Value: "1"}},
		ReturnValues: types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if _, pending := ccf.Item["cdef"]; pending {
			return ErrCreationBusy
		}
		return nil // finished (or gone)
	}
	if err != nil {
		return fmt.Errorf("create workflow %s: %w", wfID, err)
	}
	var root nodeItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &root); err != nil {
		return err
	}
	var end atomic.Int64 // Unix ns; 0 until the first write
	startSlice := func() {
		if slice > 0 {
			end.CompareAndSwap(0, time.Now().Add(slice).UnixNano())
		}
	}
	wctx := context.WithValue(work, sliceKey{}, func() bool {
		e := end.Load()
		return e != 0 && time.Now().UnixNano() > e
	})
	done, err := s.resume(wctx, startSlice, w, root.Node, items)
	if err != nil {
		stopped := work.Err() != nil || errors.Is(err, errSliceOver)
		// Give the lease back so a retry need not wait for it to end, with
		// how far this try got, so the next one need not read it.
		_, _ = s.db.UpdateItem(context.WithoutCancel(ctx), &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
			UpdateExpression: aws.String("SET cjobs = :done, cclean = :try REMOVE clease"), ConditionExpression: aws.String("clease = :until"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":until": &types.AttributeValueMemberN{Value: strconv.FormatInt(until, 10)},
				":done": &types.AttributeValueMemberN{Value: strconv.Itoa(done)}, ":try": &types.AttributeValueMemberN{Value: strconv.Itoa(root.CreateTries)}}})
		if stopped {
			return fmt.Errorf("create workflow %s: %w (%v)", wfID, ErrCreationUnfinished, err)
		}
		return err
	}
	return nil
}

// resume writes what ResumeWorkflow writes; startSlice starts the slice's
// clock (at the first write). It returns how many of the first jobs, in
// job id order, are known to exist (see Node.CreateJobs).
func (s *Store) resume(ctx context.Context, startSlice func(), w NewWorkflow, root Node, items []map[string]types.AttributeValue) (int, error) {
	again := root.CreateTries > 1 // an earlier writer may have written part of it
	if root.Creating {
		if again {
			keys := make([]map[string]types.AttributeValue, len(items))
			for i, it := range items {
				keys[i] = map[string]types.AttributeValue{attrPK: it[attrPK], attrSK: it[attrSK]}
			}
			have, err := s.existing(ctx, keys)
			if err != nil {
				return 0, fmt.Errorf("create workflow %s: %w", root.WorkflowID, err)
			}
			items = slices.DeleteFunc(slices.Clone(items), func(it map[string]types.AttributeValue) bool { return have[itemKey(it)] })
		}
		startSlice()
		if err := s.batchPut(ctx, items); err != nil {
			return 0, fmt.Errorf("create workflow %s: %w", root.WorkflowID, err)
		}
		if err := s.unmark(ctx, root.WorkflowID, "creating"); err != nil {
			return 0, err
		}
	}
	// The first jobs in id order (their ids are fixed by the workflow and
	// the steps' paths), so that every try writes them in the same order
	// and what exists is a leading run of them (Advance writes its
	// transactions one after another, in order) plus at most a request in
	// flight when a try stopped.
	all := slices.SortedFunc(slices.Values(w.Jobs), func(a, b *job.Job) int { return strings.Compare(a.ID, b.ID) })
	start := min(root.CreateJobs, len(all))
	jobs, at := all[start:], []int(nil) // at[i]: the index in all of jobs[i], when some were skipped
	if again && root.CreateClean != root.CreateTries-1 {
		// The try before died: read which exist past what a clean one
		// recorded.
		keys := make([]map[string]types.AttributeValue, len(jobs))
		for i, j := range jobs {
			keys[i] = jobKey(j.ID)
		}
		have, err := s.existing(ctx, keys)
		if err != nil {
			return start, fmt.Errorf("create workflow %s: %w", root.WorkflowID, err)
		}
		var kept []*job.Job
		for i, j := range jobs {
			if !have[itemKey(jobKey(j.ID))] {
				kept = append(kept, j)
				at = append(at, start+i)
			}
		}
		jobs = kept
	}
	done := start
	progress := func(n int) { // jobs[:n] exist
		switch {
		case n >= len(jobs):
			done = len(all)
		case at != nil:
			done = at[n]
		default:
			done = start + n
		}
	}
	startSlice()
	err := s.Advance(ctx, Advance{WorkflowID: root.WorkflowID, Jobs: jobs, RedeliverAfter: w.RedeliverAfter, Progress: progress})
	if err != nil && !errors.Is(err, ErrWorkflowNotRunning) {
		return done, err
	}
	return len(all), s.unmark(ctx, root.WorkflowID, "cdef", "citems", "clease", "ctries", "cjobs", "cclean")
}

// existing reads which of keys name an item (consistently, keys only,
// 100 a request, 8 requests at once) and returns them by itemKey.
func (s *Store) existing(ctx context.Context, keys []map[string]types.AttributeValue) (map[string]bool, error) {
	bg, ok := s.db.(batchGetter)
	if !ok {
		return nil, fmt.Errorf("the DynamoDB client cannot batch get")
	}
	var chunks [][]map[string]types.AttributeValue
	for len(keys) > 0 {
		n := min(100, len(keys))
		chunks, keys = append(chunks, keys[:n]), keys[n:]
	}
	have := map[string]bool{}
	var mu sync.Mutex
	err := parallel(ctx, len(chunks), 8, func(ctx context.Context, c int) error {
		keys := chunks[c]
		for tries := 0; len(keys) > 0; tries++ {
			if tries > 8 {
				return fmt.Errorf("batch get: %d keys still unprocessed", len(keys))
			}
			res, err := bg.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{s.table: {
				Keys: keys, ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String("pk, sk")}}})
			if err != nil {
				return fmt.Errorf("batch get: %w", err)
			}
			mu.Lock()
			for _, av := range res.Responses[s.table] {
				have[itemKey(av)] = true
			}
			mu.Unlock()
			keys = res.UnprocessedKeys[s.table].Keys
			if len(keys) > 0 {
				if err := sleepCtx(ctx, time.Duration(tries+1)*20*time.Millisecond); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return have, err
}

// itemKey names an item by its primary key.
func itemKey(av map[string]types.AttributeValue) string {
	pk, _ := av[attrPK].(*types.AttributeValueMemberS)
	sk, _ := av[attrSK].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil {
		return ""
	}
	return pk.Value + "\x00" + sk.Value
}

// putRoot writes a workflow's root, conditional on no workflow with its id
// existing.
func (s *Store) putRoot(ctx context.Context, r Node) error {
	rootAV, err := attributevalue.MarshalMap(nodeItem{PK: wfPrefix + r.WorkflowID, SK: nodeSK(RootPath), Node: r})
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: rootAV, ConditionExpression: aws.String("attribute_not_exists(pk)")})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ErrWorkflowExists
	}
	if err != nil {
		return fmt.Errorf("create workflow %s: %w", r.WorkflowID, err)
	}
	return nil
}

// DeleteWorkflowJob deletes a finished job of workflow wfID (completed,
// failed or cancelled) on the condition that it is still in the state
// read: a retry removes the jobs its handlers ran in the run before, whose
// ids (derived from the workflow and the path) the next launch writes
// anew. A discarded job's removal is reported as dead_letter.deleted.
func (s *Store) DeleteWorkflowJob(ctx context.Context, wfID, id string, state job.State) error {
	switch state {
	case job.Completed, job.Discarded, job.Cancelled:
	default:
		return fmt.Errorf("delete job %s: not a finished state: %s", id, state)
	}
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: jobKey(id),
		ConditionExpression:       aws.String("#s = :s AND wf_id = :w"),
		ExpressionAttributeNames:  map[string]string{"#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": avS(string(state)), ":w": avS(wfID)},
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return nil // gone, or changed by someone else: not a job of the run before any more
	}
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	return nil
}

// SetCancelling marks a cancelled workflow's root as still cancelling its
// jobs (on; the mark's change is the stream record on which the stream
// function cancels the rest), or done with them (off: the mark and the
// root's progress check are removed).
// Both apply only while the root is cancelled: a retry re-opening the
// workflow meanwhile owns its jobs and its check (nil is answered).
func (s *Store) SetCancelling(ctx context.Context, wfID string, on bool) error {
	in := &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		UpdateExpression:                    aws.String("REMOVE cancelling, " + attrDuePK + ", " + attrDueAt),
		ConditionExpression:                 aws.String("#s = :c"),
		ExpressionAttributeNames:            map[string]string{"#s": "state"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":c": avS(string(wfstate.Cancelled))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}
	if on {
		in.UpdateExpression = aws.String("SET cancelling = :t")
		in.ExpressionAttributeValues[":t"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	_, err := s.db.UpdateItem(ctx, in)
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		if len(cf.Item) == 0 {
			return fmt.Errorf("workflow %s: cancelling: %w", wfID, ErrNotFound)
		}
		return nil // re-opened by a retry meanwhile
	}
	if err != nil {
		return fmt.Errorf("workflow %s: cancelling: %w", wfID, err)
	}
	return nil
}

// NextCancelPass records on a cancelling workflow's root that a pass
// cancelled part of its jobs and left the rest: the change is a stream
// record of the root, from which the stream function runs the next pass
// (its other records wait for one pass at most, not for the whole cancel).
// Nothing is written once the root is no longer cancelling.
func (s *Store) NextCancelPass(ctx context.Context, wfID string) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		UpdateExpression:          aws.String("ADD cancel_pass :one"),
		ConditionExpression:       aws.String("#s = :c AND cancelling = :t"),
		ExpressionAttributeNames:  map[string]string{"#s": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": avS(string(wfstate.Cancelled)), ":t": &types.AttributeValueMemberBOOL{Value: true}, ":one": &types.AttributeValueMemberN{Value: "1"}}})
	if err != nil && !conditionFailed(err) {
		return fmt.Errorf("workflow %s: next cancel pass: %w", wfID, err)
	}
	return nil
}

// ClearUnguarded removes a root's Unguarded mark (cfirst) that a creator
// which died while writing the first jobs left: once those jobs exist
// (the sweeper's repair writes the missing ones), a cancel need not look
// for unwritten ones any more.
func (s *Store) ClearUnguarded(ctx context.Context, wfID string) error {
	return s.unmark(ctx, wfID, "cfirst")
}

// unmark removes creation attributes from a workflow's root (it exists).
func (s *Store) unmark(ctx context.Context, wfID string, attrs ...string) error {
	if _, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		UpdateExpression: aws.String("REMOVE " + strings.Join(attrs, ", ")), ConditionExpression: aws.String("attribute_exists(pk)")}); err != nil {
		return fmt.Errorf("create workflow %s: %w", wfID, err)
	}
	return nil
}

// workflowItems returns a new workflow's root and its other items (nodes
// and counter shards) as written.
func workflowItems(w NewWorkflow) (*Node, []map[string]types.AttributeValue, error) {
	var root *Node
	var items []map[string]types.AttributeValue
	for i := range w.Nodes {
		n := w.Nodes[i]
		n.Rev = 1
		if n.Path == RootPath {
			root = &w.Nodes[i]
			continue
		}
		av, err := attributevalue.MarshalMap(nodeItem{PK: wfPrefix + n.WorkflowID, SK: nodeSK(n.Path), Node: n})
		if err != nil {
			return nil, nil, err
		}
		items = append(items, av)
	}
	if root == nil {
		return nil, nil, fmt.Errorf("workflow has no root node")
	}
	for _, sh := range w.Shards {
		av, err := attributevalue.MarshalMap(shardItem{PK: wfPrefix + root.WorkflowID, SK: shardSK(sh.Path, sh.Key), WFID: root.WorkflowID, Shard: sh})
		if err != nil {
			return nil, nil, err
		}
		items = append(items, av)
	}
	return root, items, nil
}

// DeleteWorkflow removes every item of a workflow whose creation never
// finished (its root still marked creating, so none of its jobs exist).
// It returns false if the root is not marked.
func (s *Store) DeleteWorkflow(ctx context.Context, wfID string) (bool, error) {
	var keys []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{TableName: &s.table, KeyConditionExpression: aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: wfPrefix + wfID}},
			ProjectionExpression:      aws.String("pk, sk"), ExclusiveStartKey: start})
		if err != nil {
			return false, fmt.Errorf("list workflow %s: %w", wfID, err)
		}
		for _, it := range out.Items {
			if sk := it[attrSK].(*types.AttributeValueMemberS).Value; sk != nodeSK(RootPath) {
				keys = append(keys, it)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		ConditionExpression: aws.String("creating = :t"), ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}}})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete workflow %s: %w", wfID, err)
	}
	bw, ok := s.db.(BatchWriter)
	if !ok {
		return true, fmt.Errorf("the DynamoDB client cannot batch write")
	}
	for len(keys) > 0 {
		n := min(25, len(keys))
		reqs := make([]types.WriteRequest, n)
		for i := range n {
			reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: keys[i]}}
		}
		keys = keys[n:]
		for tries := 0; len(reqs) > 0 && tries < 8; tries++ {
			out, err := bw.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{s.table: reqs}})
			if err != nil {
				return true, err
			}
			reqs = out.UnprocessedItems[s.table]
		}
	}
	return true, nil
}

// BatchWriter is the batch write call CreateWorkflow uses for large
// workflows.
type BatchWriter interface {
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

// batchPut writes items 25 at a time, eight requests at once.
func (s *Store) batchPut(ctx context.Context, items []map[string]types.AttributeValue) error {
	bw, ok := s.db.(BatchWriter)
	if !ok {
		return fmt.Errorf("the DynamoDB client cannot batch write")
	}
	var chunks [][]types.WriteRequest
	for len(items) > 0 {
		n := min(25, len(items))
		reqs := make([]types.WriteRequest, n)
		for i := 0; i < n; i++ {
			reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: items[i]}}
		}
		items = items[n:]
		chunks = append(chunks, reqs)
	}
	return parallel(ctx, len(chunks), 8, func(ctx context.Context, c int) error {
		reqs := chunks[c]
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
		return nil
	})
}

// parallel runs f for 0..n-1, at most conc at once, and returns the first
// error.
func parallel(ctx context.Context, n, conc int, f func(context.Context, int) error) error {
	if n == 0 {
		return nil
	}
	if n == 1 {
		return f(ctx, 0)
	}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		if i > 0 {
			if err := sliceOver(ctx); err != nil {
				<-sem
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				break
			}
		}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := f(ctx, i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return first
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

// NodeKey names a node of a workflow.
type NodeKey struct{ WorkflowID, Path string }

// ShardRef names a counter shard of a workflow.
type ShardRef struct{ WorkflowID, Path, Key string }

// Progress is what a batch read of nodes, shards and jobs found, keyed by
// workflow id + path (nodes) and workflow id + path + "#" + key (shards);
// Jobs holds the ids of the jobs that exist.
type Progress struct {
	Nodes  map[NodeKey]*Node
	Shards map[ShardRef]*Shard
	Jobs   map[string]bool
}

// ReadProgress reads nodes, shards and whether jobs exist, in batches of
// 100 (consistent reads); missing items are absent from the result.
func (s *Store) ReadProgress(ctx context.Context, nodes []NodeKey, shards []ShardRef, jobs []string) (*Progress, error) {
	p := &Progress{Nodes: map[NodeKey]*Node{}, Shards: map[ShardRef]*Shard{}, Jobs: map[string]bool{}}
	bg, ok := s.db.(batchGetter)
	if !ok {
		return nil, fmt.Errorf("the DynamoDB client cannot batch get")
	}
	seen := map[string]bool{}
	var keys []map[string]types.AttributeValue
	for _, k := range nodes {
		if id := k.WorkflowID + "|" + nodeSK(k.Path); !seen[id] {
			seen[id] = true
			keys = append(keys, wfKey(k.WorkflowID, nodeSK(k.Path)))
		}
	}
	for _, k := range shards {
		if id := k.WorkflowID + "|" + shardSK(k.Path, k.Key); !seen[id] {
			seen[id] = true
			keys = append(keys, wfKey(k.WorkflowID, shardSK(k.Path, k.Key)))
		}
	}
	for _, id := range jobs {
		if k := "JOB|" + id; !seen[k] {
			seen[k] = true
			keys = append(keys, jobKey(id))
		}
	}
	for len(keys) > 0 {
		n := min(100, len(keys))
		chunk := keys[:n]
		keys = keys[n:]
		for tries := 0; len(chunk) > 0 && tries < 8; tries++ {
			res, err := bg.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{s.table: {Keys: chunk, ConsistentRead: aws.Bool(true)}}})
			if err != nil {
				return nil, fmt.Errorf("batch get workflow items: %w", err)
			}
			for _, av := range res.Responses[s.table] {
				sk := av[attrSK].(*types.AttributeValueMemberS).Value
				if sk == jobSK {
					p.Jobs[strings.TrimPrefix(av[attrPK].(*types.AttributeValueMemberS).Value, jobPrefix)] = true
					continue
				}
				if strings.HasPrefix(sk, nodePrefix) {
					var it nodeItem
					if err := attributevalue.UnmarshalMap(av, &it); err != nil {
						return nil, err
					}
					n := it.Node
					p.Nodes[NodeKey{n.WorkflowID, n.Path}] = &n
				} else {
					var it shardItem
					if err := attributevalue.UnmarshalMap(av, &it); err != nil {
						return nil, err
					}
					sh := it.Shard
					p.Shards[ShardRef{it.WFID, sh.Path, sh.Key}] = &sh
				}
			}
			chunk = res.UnprocessedKeys[s.table].Keys
		}
	}
	return p, nil
}

type batchGetter interface {
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// WorkflowItems reads every node of a workflow (paginated query of its
// partition), root first.
func (s *Store) WorkflowItems(ctx context.Context, wfID string) ([]*Node, error) {
	return s.Subtree(ctx, wfID, RootPath)
}

// Subtree reads the node at path and every node below it, in path order
// (the node itself first).
func (s *Store) Subtree(ctx context.Context, wfID, path string) ([]*Node, error) {
	prefix := nodeSK(path)
	if path != RootPath {
		n, err := s.GetNode(ctx, wfID, path)
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		prefix += "/"
		nodes := []*Node{n}
		more, err := s.queryNodes(ctx, wfID, prefix)
		return append(nodes, more...), err
	}
	return s.queryNodes(ctx, wfID, prefix)
}

func (s *Store) queryNodes(ctx context.Context, wfID, prefix string) ([]*Node, error) {
	var nodes []*Node
	var start map[string]types.AttributeValue
	for {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &s.table, KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :n)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": &types.AttributeValueMemberS{Value: wfPrefix + wfID}, ":n": &types.AttributeValueMemberS{Value: prefix},
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

// exprs builds the names and values of a hand-written expression.
type exprs struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

func newExprs() *exprs {
	return &exprs{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

func (x *exprs) name(n string) string {
	k := "#" + n
	x.names[k] = n
	return k
}

func (x *exprs) val(v types.AttributeValue) string {
	k := fmt.Sprintf(":v%d", len(x.values))
	x.values[k] = v
	return k
}

func (x *exprs) str(s string) string { return x.val(&types.AttributeValueMemberS{Value: s}) }

func (x *exprs) num(i int64) string { return x.val(&types.AttributeValueMemberN{Value: itoa(i)}) }

func (x *exprs) nums(is []int) string {
	ns := make([]string, len(is))
	for i, v := range is {
		ns[i] = strconv.Itoa(v)
	}
	return x.val(&types.AttributeValueMemberNS{Value: ns})
}

func (x *exprs) strs(ss []string) string { return x.val(&types.AttributeValueMemberSS{Value: ss}) }

func (x *exprs) namesOrNil() map[string]string {
	if len(x.names) == 0 {
		return nil
	}
	return x.names
}

func (x *exprs) valuesOrNil() map[string]types.AttributeValue {
	if len(x.values) == 0 {
		return nil
	}
	return x.values
}

// NodeWrite is one change of a node, applied only if the node is in one of
// the From states (when set) and the NotAll conditions hold. It moves the
// node to To (when set, with the matching timestamp), counts children in
// OK or Fail, and records fired callbacks (only once: Fired is written
// only if none were).
type NodeWrite struct {
	Path string
	From []wfstate.State
	To   wfstate.State
	At   time.Time
	// AddOK and AddFail count children as finished.
	AddOK, AddFail []int
	// AddCallbacksOK and AddCallbacksFail count finished callbacks.
	AddCallbacksOK, AddCallbacksFail []string
	// Fired records the triggered callbacks of a batch (condition: none
	// recorded yet).
	Fired []string
	// FailedIndex records the failed step of a chain; FailedStep the
	// path of the child whose failure failed the node.
	FailedIndex *int
	FailedStep  string
	// NotAll holds sets of child indexes of which, for the write to apply,
	// not all may be counted OK yet: the decisions "this graph step cannot
	// start yet" the write relies on.
	NotAll [][]int
	// Open makes the write conditional on the node not being finished
	// (waiting or running): the writes that start its children.
	Open bool
	// Deadline sets the node's deadline and lists it in the due index at
	// that time (the root's listing is its progress check, set by
	// CheckAt instead).
	Deadline time.Time
	// CheckAt moves the root's progress check (its due index entry).
	CheckAt time.Time
	// Error records what failed the node itself (JSON).
	Error string
	// DelOK, DelFail and DelCallbacksFail forget counted children (a
	// retry re-running them); DelRolled forgets rolled-up shards.
	DelOK, DelFail   []int
	DelCallbacksFail []string
	DelRolled        []string
	AddHandlersOK    []string
	AddHandlersFail  []string
	// SetStrings and SetNumbers set attributes; Remove removes attributes;
	// AddNumbers adds to number attributes.
	SetStrings map[string]string
	SetNumbers map[string]int64
	Remove     []string
	AddNumbers map[string]int
	// CondAbsent names attributes that must not exist for the write to
	// apply; CondStates, when set, replaces From as the state condition
	// without moving the state.
	CondAbsent []string
	CondStates []wfstate.State
	// CondUnsetOr names attributes that, for the write to apply, must be
	// absent or hold one of the listed values.
	CondUnsetOr map[string][]string
	// ClearCheck removes the root's progress check (its due index entry).
	ClearCheck bool
}

// validate checks every From -> To against the node state machine.
func (w NodeWrite) validate() error {
	if w.To == "" {
		return nil
	}
	if !w.To.Valid() {
		return fmt.Errorf("node %s: invalid state %q", w.Path, w.To)
	}
	if len(w.From) == 0 {
		return fmt.Errorf("node %s: a move to %s must name the states it leaves", w.Path, w.To)
	}
	for _, f := range w.From {
		if !wfstate.CanTransition(f, w.To) {
			return fmt.Errorf("node %s: invalid transition %s -> %s", w.Path, f, w.To)
		}
		if f == wfstate.Completed && !strings.HasPrefix(w.Path, "/~") {
			// Only a workflow's handlers are re-armed (wfstate).
			return fmt.Errorf("node %s: invalid transition %s -> %s (only a handler's node leaves completed)", w.Path, f, w.To)
		}
	}
	return nil
}

// decides reports whether w counts a finished child or decides from the
// counts (finishes the node, fires callbacks): such a write does not
// apply while a retry re-opens the node (Node.Reopening).
func (w NodeWrite) decides() bool {
	return len(w.AddOK) > 0 || len(w.AddFail) > 0 || len(w.AddCallbacksOK) > 0 || len(w.AddCallbacksFail) > 0 ||
		w.Fired != nil || w.To == wfstate.Completed || w.To == wfstate.Failed
}

// build returns the update and condition expressions of w; scope, when
// the write targets its step's scope node (the root, or a handler's or the
// compensation's node), adds the condition that it is in one of those
// states.
func (w NodeWrite) build(x *exprs, wfID string, scope []wfstate.State) (update, cond string) {
	var set, add, remove, conds []string
	// From "version" for a node written before "nv" (Node.Version).
	set = append(set, x.name("nv")+" = if_not_exists("+x.name("nv")+", if_not_exists("+x.name("version")+", "+x.num(0)+")) + "+x.num(1))
	if w.To != "" {
		set = append(set, x.name("state")+" = "+x.str(string(w.To)))
		at := job.Timestamp(w.At)
		switch w.To {
		case wfstate.Running:
			set = append(set, x.name("started_at")+" = "+x.str(at))
		case wfstate.Waiting:
			// Re-opened by a retry: it has not finished any more.
			remove = append(remove, x.name("completed_at"), x.name("cancelled_at"))
		case wfstate.Cancelled:
			set = append(set, x.name("cancelled_at")+" = "+x.str(at), x.name("completed_at")+" = "+x.str(at))
		default:
			set = append(set, x.name("completed_at")+" = "+x.str(at))
		}
		if w.To.Terminal() && w.CheckAt.IsZero() {
			// A finished node leaves the due index (checks, timeouts).
			remove = append(remove, x.name(attrDuePK), x.name(attrDueAt))
		}
		states := make([]string, len(w.From))
		for i, f := range w.From {
			states[i] = x.str(string(f))
		}
		conds = append(conds, x.name("state")+" IN ("+strings.Join(states, ", ")+")")
	}
	if w.FailedIndex != nil {
		set = append(set, x.name("failed_index")+" = "+x.num(int64(*w.FailedIndex)))
	}
	if w.FailedStep != "" {
		set = append(set, x.name("failed_step")+" = "+x.str(w.FailedStep))
	}
	if w.Error != "" {
		set = append(set, x.name("error")+" = "+x.str(w.Error))
	}
	if !w.Deadline.IsZero() {
		set = append(set, x.name("deadline_ms")+" = "+x.num(ms(w.Deadline)), x.name(attrDuePK)+" = "+x.str(workflowDueKey(timeoutDuePK, wfID)),
			x.name(attrDueAt)+" = "+x.num(ms(w.Deadline)))
	}
	if !w.CheckAt.IsZero() {
		set = append(set, x.name(attrDuePK)+" = "+x.str(workflowDueKey(workflowDuePK, wfID)), x.name(attrDueAt)+" = "+x.num(ms(w.CheckAt)))
	}
	keys := make([]string, 0, len(w.SetStrings))
	for k := range w.SetStrings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		set = append(set, x.name(k)+" = "+x.str(w.SetStrings[k]))
	}
	for k, v := range w.AddNumbers {
		add = append(add, x.name(k)+" "+x.num(int64(v)))
	}
	for k, v := range w.SetNumbers {
		set = append(set, x.name(k)+" = "+x.num(v))
	}
	var del []string
	if len(w.DelOK) > 0 {
		del = append(del, x.name("ok")+" "+x.nums(w.DelOK))
	}
	if len(w.DelFail) > 0 {
		del = append(del, x.name("fail")+" "+x.nums(w.DelFail))
	}
	if len(w.DelCallbacksFail) > 0 {
		del = append(del, x.name("cb_fail")+" "+x.strs(w.DelCallbacksFail))
	}
	if len(w.DelRolled) > 0 {
		del = append(del, x.name("rolled")+" "+x.strs(w.DelRolled))
	}
	if len(w.AddHandlersOK) > 0 {
		add = append(add, x.name("h_ok")+" "+x.strs(w.AddHandlersOK))
	}
	if len(w.AddHandlersFail) > 0 {
		add = append(add, x.name("h_fail")+" "+x.strs(w.AddHandlersFail))
	}
	for _, r := range w.Remove {
		remove = append(remove, x.name(r))
	}
	for _, a := range w.CondAbsent {
		conds = append(conds, "attribute_not_exists("+x.name(a)+")")
	}
	for _, a := range slices.Sorted(maps.Keys(w.CondUnsetOr)) {
		vals := make([]string, len(w.CondUnsetOr[a]))
		for i, v := range w.CondUnsetOr[a] {
			vals[i] = x.str(v)
		}
		conds = append(conds, "(attribute_not_exists("+x.name(a)+") OR "+x.name(a)+" IN ("+strings.Join(vals, ", ")+"))")
	}
	if w.ClearCheck && w.CheckAt.IsZero() && !w.To.Terminal() { // a move to a terminal state removes it already
		remove = append(remove, x.name(attrDuePK), x.name(attrDueAt))
	}
	if len(w.CondStates) > 0 {
		states := make([]string, len(w.CondStates))
		for i, f := range w.CondStates {
			states[i] = x.str(string(f))
		}
		conds = append(conds, x.name("state")+" IN ("+strings.Join(states, ", ")+")")
	}
	if w.Open {
		conds = append(conds, x.name("state")+" IN ("+x.str(string(wfstate.Waiting))+", "+x.str(string(wfstate.Running))+")")
	}
	if len(w.AddOK) > 0 {
		add = append(add, x.name("ok")+" "+x.nums(w.AddOK))
	}
	if len(w.AddFail) > 0 {
		add = append(add, x.name("fail")+" "+x.nums(w.AddFail))
	}
	if len(w.AddCallbacksOK) > 0 {
		add = append(add, x.name("cb_ok")+" "+x.strs(w.AddCallbacksOK))
	}
	if len(w.AddCallbacksFail) > 0 {
		add = append(add, x.name("cb_fail")+" "+x.strs(w.AddCallbacksFail))
	}
	if w.Fired != nil {
		set = append(set, x.name("fired_at")+" = "+x.str(job.Timestamp(w.At)))
		if len(w.Fired) > 0 {
			set = append(set, x.name("fired")+" = "+x.strs(w.Fired))
		}
		conds = append(conds, "attribute_not_exists("+x.name("fired_at")+")")
	}
	for _, all := range w.NotAll {
		var parts []string
		for _, i := range all {
			parts = append(parts, "contains("+x.name("ok")+", "+x.num(int64(i))+")")
		}
		if len(parts) > 0 {
			conds = append(conds, "NOT ("+strings.Join(parts, " AND ")+")")
		}
	}
	if w.decides() {
		conds = append(conds, "attribute_not_exists("+x.name(attrReopening)+")")
	}
	if len(scope) > 0 && w.To == "" && len(w.CondStates) == 0 {
		states := make([]string, len(scope))
		for i, f := range scope {
			states[i] = x.str(string(f))
		}
		conds = append(conds, x.name("state")+" IN ("+strings.Join(states, ", ")+")")
	}
	conds = append(conds, "attribute_exists(pk)")
	update = "SET " + strings.Join(set, ", ")
	if len(add) > 0 {
		update += " ADD " + strings.Join(add, ", ")
	}
	if len(del) > 0 {
		update += " DELETE " + strings.Join(del, ", ")
	}
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	return update, strings.Join(conds, " AND ")
}

// ErrNodeConflict is returned when a node write's condition failed: the
// node is not in a From state, its callbacks were fired already, or a
// NotAll decision no longer holds. Current is the node as it was.
type ErrNodeConflict struct{ Current *Node }

func (e *ErrNodeConflict) Error() string {
	return fmt.Sprintf("node %s%s changed (state %s)", e.Current.WorkflowID, e.Current.Path, e.Current.State)
}

// UpdateNode applies one node write and returns the node as written, or
// *ErrNodeConflict with the node as it is, or ErrNotFound.
func (s *Store) UpdateNode(ctx context.Context, wfID string, w NodeWrite) (*Node, error) {
	if err := w.validate(); err != nil {
		return nil, err
	}
	x := newExprs()
	update, cond := w.build(x, wfID, nil)
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(w.Path)),
		UpdateExpression: &update, ConditionExpression: &cond, ExpressionAttributeNames: x.namesOrNil(), ExpressionAttributeValues: x.valuesOrNil(),
		ReturnValues: types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if len(ccf.Item) == 0 {
			return nil, ErrNotFound
		}
		var it nodeItem
		if err := attributevalue.UnmarshalMap(ccf.Item, &it); err != nil {
			return nil, err
		}
		return nil, &ErrNodeConflict{Current: &it.Node}
	}
	if err != nil {
		return nil, fmt.Errorf("update node %s%s: %w", wfID, w.Path, err)
	}
	var it nodeItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return nil, err
	}
	return &it.Node, nil
}

// CountOnShard counts child idx of the composite at path as finished in
// counter shard key and returns the shard as written (idempotent);
// ErrReopening while a retry re-opens the shard.
func (s *Store) CountOnShard(ctx context.Context, wfID, path, key string, idx int, ok bool) (*Shard, error) {
	x := newExprs()
	attr := "fail"
	if ok {
		attr = "ok"
	}
	set := x.name(attr)
	update := "ADD " + set + " " + x.nums([]int{idx})
	cond := "attribute_exists(pk) AND attribute_not_exists(" + x.name(attrReopening) + ")"
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, shardSK(path, key)),
		UpdateExpression: &update, ConditionExpression: &cond, ExpressionAttributeNames: x.names, ExpressionAttributeValues: x.values,
		ReturnValues: types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	if err := refusedIfMarked(err); err != nil {
		return nil, fmt.Errorf("count %s%s#%s: %w", wfID, path, key, err)
	}
	var it shardItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return nil, err
	}
	return &it.Shard, nil
}

// refusedIfMarked turns a count's or roll-up's failed condition into
// ErrReopening when the item exists (the retry's mark refused it), or
// ErrNotFound.
func refusedIfMarked(err error) error {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return err
	}
	if len(ccf.Item) == 0 {
		return ErrNotFound
	}
	return ErrReopening
}

// RollUp records a full shard's counts on its composite (idempotent) and
// returns the composite as written; ErrReopening while a retry re-opens
// the composite.
func (s *Store) RollUp(ctx context.Context, wfID, path string, sh *Shard) (*Node, error) {
	x := newExprs()
	entry := fmt.Sprintf("%s:%d:%d", sh.Key, len(sh.OK), len(sh.Fail))
	update := "ADD " + x.name("rolled") + " " + x.strs([]string{entry})
	cond := "attribute_exists(pk) AND attribute_not_exists(" + x.name(attrReopening) + ")"
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(path)),
		UpdateExpression: &update, ConditionExpression: &cond, ExpressionAttributeNames: x.names, ExpressionAttributeValues: x.values,
		ReturnValues: types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	if err := refusedIfMarked(err); err != nil {
		return nil, fmt.Errorf("roll up %s%s#%s: %w", wfID, path, sh.Key, err)
	}
	var it nodeItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return nil, err
	}
	return &it.Node, nil
}

// Advance is one step of a workflow written as a whole: jobs that start
// (each created only if it does not exist) and node writes. It is applied
// only while the workflow runs. Up to MaxBatch items go in one
// transaction; more are written jobs first, in transactions of MaxBatch,
// with the node writes in the last one, so that the node writes (the
// record that the step happened) are never visible before its jobs.
type Advance struct {
	WorkflowID string
	Jobs       []*job.Job
	Nodes      []NodeWrite
	// NewNodes are nodes the step creates (each only if it does not
	// exist), written with the node writes.
	NewNodes []Node
	// Scope is the node that must be in one of ScopeStates for the step
	// to apply: by default the root, running; a failed workflow's
	// compensation and handlers are steps of their own nodes.
	Scope       string
	ScopeStates []wfstate.State
	// RedeliverAfter is passed to job creation (see Store.Create).
	RedeliverAfter time.Duration
	// Progress, when set, is told after each transaction how many of
	// Jobs, from the first, exist.
	Progress func(done int)
}

// Advance applies a. Jobs that exist already are skipped (a repeated
// step). It returns ErrWorkflowNotRunning when the workflow stopped,
// *ErrNodeConflict when a node write's condition failed (nothing of the
// last transaction applied), or another error.
func (s *Store) Advance(ctx context.Context, a Advance) error {
	for _, w := range a.Nodes {
		if err := w.validate(); err != nil {
			return err
		}
	}
	if a.Scope == "" {
		a.Scope, a.ScopeStates = RootPath, []wfstate.State{wfstate.Running}
	}
	scopeWrite := -1
	for i, w := range a.Nodes {
		if w.Path == a.Scope {
			scopeWrite = i
		}
	}
	room := MaxBatch - len(a.Nodes) - len(a.NewNodes)
	if scopeWrite < 0 {
		room-- // the scope check
	}
	if room < 0 {
		return fmt.Errorf("advance of workflow %s: %d node writes exceed a transaction", a.WorkflowID, len(a.Nodes))
	}
	sizes := make([]int, len(a.Jobs))
	for i, j := range a.Jobs {
		n, err := JobItemBytes(j, a.RedeliverAfter)
		if err != nil {
			return err
		}
		if n > awslimit.DynamoItemBytes {
			return &TooLargeError{What: "item", Bytes: n, Max: awslimit.DynamoItemBytes, Index: i}
		}
		sizes[i] = n
	}
	// The last transaction holds the node writes and as many jobs from the
	// end as fit beside them (node items are read as whole items: keep a
	// megabyte for them); the jobs before it go in leading transactions of
	// at most MaxBatch-1 jobs and DynamoDB's 4 MB, one after another, all
	// before the last. Not at once: every one of them checks the scope
	// node, and on DynamoDB two transactions holding the same item cancel
	// each other (TransactionConflict), so eight at once would mostly
	// retry. (DynamoDB Local runs transactions one at a time anyway.)
	tail, bytes := len(a.Jobs), 0
	for tail > 0 && len(a.Jobs)-tail < room && bytes+sizes[tail-1] <= awslimit.DynamoTxBytes-txNodeReserve {
		tail--
		bytes += sizes[tail]
	}
	var chunks [][]*job.Job
	for start := 0; start < tail; {
		end, b := start, 0
		for end < tail && end-start < MaxBatch-1 && (end == start || b+sizes[end] <= awslimit.DynamoTxBytes-txCheckReserve) {
			b += sizes[end]
			end++
		}
		chunks = append(chunks, a.Jobs[start:end])
		start = end
	}
	done := 0
	for _, c := range chunks {
		if err := s.advanceTx(ctx, a, c, nil, nil); err != nil {
			return err
		}
		if done += len(c); a.Progress != nil {
			a.Progress(done)
		}
		if err := sliceOver(ctx); err != nil {
			return err // a creation's slice is over: the next goes on
		}
	}
	if err := s.advanceTx(ctx, a, a.Jobs[tail:], a.Nodes, a.NewNodes); err != nil {
		return err
	}
	if a.Progress != nil {
		a.Progress(len(a.Jobs))
	}
	return nil
}

// AdvanceMarked applies a step of a workflow that is a chain or a graph
// as two writes instead of a transaction, for half its write units (a
// transaction bills every item twice): the root's write w (the finished
// step counted, with w's conditions) with Node.Launching set to mark and
// the condition that the workflow runs, then jobs put where they do not
// exist. What the transaction's atomicity gave is kept by the mark: a
// cancel or timeout after the first write finds it and takes the place of
// every job not there yet, so no job is added to a stopped workflow; a
// cancel before it makes it fail (ErrWorkflowNotRunning, nothing
// written). A request that dies between the writes leaves the mark on a
// running root and jobs missing, which the stream function's check of the
// finished step finds (workflow.Verify) and writes again. mark is the
// next step's path for a chain, RootPath for a graph (the steps whose
// dependencies all completed). Errors as Advance's; *ErrNodeConflict when
// another of w's conditions failed.
func (s *Store) AdvanceMarked(ctx context.Context, wfID string, w NodeWrite, mark string, jobs []*job.Job, redeliverAfter time.Duration) error {
	if w.Path != RootPath {
		return fmt.Errorf("advance of workflow %s: a marked advance writes the root, not %s", wfID, w.Path)
	}
	puts := make([]*types.Put, len(jobs))
	for i, j := range jobs {
		var err error
		if puts[i], err = s.jobPut(j, redeliverAfter); err != nil {
			return err
		}
		if n := ItemBytes(puts[i].Item); n > awslimit.DynamoItemBytes {
			return &TooLargeError{What: "item", Bytes: n, Max: awslimit.DynamoItemBytes, Index: i}
		}
	}
	w.CondStates = []wfstate.State{wfstate.Running}
	w.SetStrings = maps.Clone(w.SetStrings)
	if w.SetStrings == nil {
		w.SetStrings = map[string]string{}
	}
	w.SetStrings["launch"] = mark
	if _, err := s.UpdateNode(ctx, wfID, w); err != nil {
		var nc *ErrNodeConflict
		if errors.Is(err, ErrNotFound) || errors.As(err, &nc) && nc.Current.State != wfstate.Running {
			return ErrWorkflowNotRunning // as Advance's check of the root
		}
		return err
	}
	if err := fault.Hit(fault.WorkflowAfterMark); err != nil {
		return err
	}
	// (A job that exists is the step repeated, or a cancel's placeholder.)
	if err := s.putAll(ctx, puts); err != nil {
		return fmt.Errorf("advance workflow %s: %w", wfID, err)
	}
	return nil
}

// Room kept in a transaction besides its jobs: for the node items it
// updates (counted whole), and for the root check of a jobs-only one.
const (
	txNodeReserve  = 1 << 20
	txCheckReserve = 8 << 10
)

// conflictTries is how many times a transaction cancelled by a
// TransactionConflict is tried again; conflictBackoff the pause before
// try n+1: full jitter over 20 ms doubling up to 640 ms, about 2.5 s in
// all at most.
const conflictTries = 8

func conflictBackoff(n int) time.Duration {
	ceiling := 20 * time.Millisecond << min(n, 5)
	return time.Duration(rand.Int64N(int64(ceiling))) + time.Millisecond
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// advanceTx writes jobs, node writes and new nodes in one transaction
// conditional on a's scope, retrying without the jobs that turn out to
// exist.
func (s *Store) advanceTx(ctx context.Context, a Advance, jobs []*job.Job, nodes []NodeWrite, newNodes []Node) error {
	wfID := a.WorkflowID
	if len(jobs) == 0 && len(nodes) == 0 && len(newNodes) == 0 {
		return nil
	}
	inScope := func(st wfstate.State) bool {
		for _, x := range a.ScopeStates {
			if x == st {
				return true
			}
		}
		return false
	}
	for tries := 0; ; tries++ {
		var tx []types.TransactWriteItem
		hasScope := false
		for _, w := range nodes {
			x := newExprs()
			var scope []wfstate.State
			if w.Path == a.Scope {
				hasScope, scope = true, a.ScopeStates
			}
			update, cond := w.build(x, wfID, scope)
			tx = append(tx, types.TransactWriteItem{Update: &types.Update{TableName: &s.table, Key: wfKey(wfID, nodeSK(w.Path)),
				UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
				ExpressionAttributeNames: x.namesOrNil(), ExpressionAttributeValues: x.valuesOrNil(),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
		}
		if !hasScope {
			x := newExprs()
			states := make([]string, len(a.ScopeStates))
			for i, st := range a.ScopeStates {
				states[i] = x.str(string(st))
			}
			tx = append(tx, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: &s.table, Key: wfKey(wfID, nodeSK(a.Scope)),
				ConditionExpression:      aws.String(x.name("state") + " IN (" + strings.Join(states, ", ") + ")"),
				ExpressionAttributeNames: x.names, ExpressionAttributeValues: x.values,
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
		}
		for _, n := range newNodes {
			n.Rev = 1
			av, err := attributevalue.MarshalMap(nodeItem{PK: wfPrefix + wfID, SK: nodeSK(n.Path), Node: n})
			if err != nil {
				return err
			}
			tx = append(tx, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: av, ConditionExpression: aws.String("attribute_not_exists(pk)"),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
		}
		first := len(tx)
		for _, j := range jobs {
			put, err := s.jobPut(j, a.RedeliverAfter)
			if err != nil {
				return err
			}
			tx = append(tx, types.TransactWriteItem{Put: put})
		}
		if len(tx) == 1 && tx[0].ConditionCheck != nil {
			return nil
		}
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			if err != nil {
				return fmt.Errorf("advance workflow %s: %w", wfID, err)
			}
			return nil
		}
		var exist map[int]bool
		conflict := false
		for i, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "TransactionConflict" {
				conflict = true
			}
			if aws.ToString(r.Code) != "ConditionalCheckFailed" {
				continue
			}
			if i >= first {
				if exist == nil {
					exist = map[int]bool{}
				}
				exist[i-first] = true
				continue
			}
			if len(r.Item) == 0 {
				return ErrWorkflowNotRunning
			}
			var it nodeItem
			if err := attributevalue.UnmarshalMap(r.Item, &it); err != nil {
				return err
			}
			if it.Path == a.Scope && !inScope(it.State) {
				return ErrWorkflowNotRunning
			}
			return &ErrNodeConflict{Current: &it.Node}
		}
		if exist == nil {
			if conflict && tries < conflictTries {
				// Another transaction held one of the items (a completion
				// settling the same node): try again after a jittered,
				// growing pause.
				if err := sleepCtx(ctx, conflictBackoff(tries)); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("advance workflow %s: %w", wfID, err)
		}
		if tries >= 8 {
			return fmt.Errorf("advance workflow %s: jobs keep colliding: %w", wfID, err)
		}
		kept := jobs[:0:0]
		for i, j := range jobs {
			if !exist[i] {
				kept = append(kept, j)
			}
		}
		jobs = kept
		if len(jobs) == 0 && len(nodes) == 0 && len(newNodes) == 0 {
			return nil
		}
	}
}

// BatchGetJobs reads jobs by id (up to 100 per call, strongly consistent);
// missing ids are absent from the result.
func (s *Store) BatchGetJobs(ctx context.Context, ids []string) (map[string]*job.Job, error) {
	bg, ok := s.db.(batchGetter)
	if !ok {
		return nil, fmt.Errorf("the DynamoDB client cannot batch get")
	}
	out := map[string]*job.Job{}
	var chunks [][]map[string]types.AttributeValue
	for len(ids) > 0 {
		n := min(100, len(ids))
		keys := make([]map[string]types.AttributeValue, n)
		for i, id := range ids[:n] {
			keys[i] = jobKey(id)
		}
		ids = ids[n:]
		chunks = append(chunks, keys)
	}
	var mu sync.Mutex
	err := parallel(ctx, len(chunks), 8, func(ctx context.Context, c int) error {
		keys := chunks[c]
		for tries := 0; len(keys) > 0 && tries < 8; tries++ {
			res, err := bg.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}})
			if err != nil {
				return fmt.Errorf("batch get jobs: %w", err)
			}
			for _, av := range res.Responses[s.table] {
				j, err := decodeJob(av)
				if err != nil {
					return err
				}
				mu.Lock()
				out[j.ID] = j
				mu.Unlock()
			}
			keys = res.UnprocessedKeys[s.table].Keys
		}
		return nil
	})
	return out, err
}

// jobPut builds the conditional put of a new job with its initial index
// entries, set from its state: available jobs join the ready index
// (push-mode ones the due index instead, for redelivery); scheduled ones
// the due index.
func (s *Store) jobPut(j *job.Job, redeliverAfter time.Duration) (*types.Put, error) {
	r, err := toRecord(j)
	if err != nil {
		return nil, err
	}
	r.FetchBytes = FetchBytes(j)
	switch j.State {
	case job.Available:
		if j.Push {
			r.DuePK, r.DueAt = dueKey(j.Queue, j.ID), ms(j.EnqueuedAt.Add(redeliverAfter))
		} else {
			r.ReadyPK, r.ReadySK = readyKey(j.Queue, j.ID), readySortKey(j.Priority, *j.EnqueuedAt, j.ID)
		}
	case job.Scheduled:
		r.DuePK, r.DueAt = dueKey(j.Queue, j.ID), ms(*j.ScheduledAt)
	case job.Pending, job.Cancelled: // Cancelled: a cancel's placeholder (workflow.takeUnwritten)
	default:
		return nil, fmt.Errorf("create job %s in state %s", j.ID, j.State)
	}
	if r.DuePK != "" {
		s.due.wrote(r.DuePK, fromMS(r.DueAt))
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
	n, ok, err := decodeIf[nodeItem](av, prefixed(nodePrefix), "workflow node")
	if err != nil || !ok {
		return nil, ok, err
	}
	return &n.Node, true, nil
}

// SortedInts returns a sorted copy of a set.
func SortedInts(s []int) []int {
	out := append([]int(nil), s...)
	sort.Ints(out)
	return out
}

// HasString reports whether list holds v.
func HasString(list []string, v string) bool { return hasString(list, v) }
