package wfstore

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
)

// A workflow's items, by what they are. Every item of a workflow lives in
// the partition WF#<id>; its nodes under N#<path>: the Root (path "/",
// the workflow's header), a Composite for each chain, group, batch or
// graph, and a Step for each job step; the counter shards of wide
// composites under C#<path>#<shard> (Shard). All three node types begin
// with an Item; decoding picks the type from the path and the kind
// (DecodeNode).
const (
	wfPrefix    = "WF#"
	nodePrefix  = "N#"
	shardPrefix = "C#"
	// RootPath is the path of a workflow's root node.
	RootPath = "/"
)

// Item is what every node has: its key, its place in the tree and its
// state.
type Item struct {
	WorkflowID string `dynamodbav:"wf_id"`
	Path       string `dynamodbav:"path"`
	// Kind is "job", "chain", "group", "batch" or "graph".
	Kind string `dynamodbav:"kind"`
	Name string `dynamodbav:"name,omitempty"`
	// StepID is the id a client gave the step (the dependency-graph form).
	StepID string `dynamodbav:"sid,omitempty"`
	Index  int    `dynamodbav:"idx"`
	// PShard names the counter shard of its parent this node is counted
	// in (a child of a wide group or batch); empty when the parent counts
	// on itself.
	PShard string `dynamodbav:"pshard,omitempty"`
	// Deps lists the sibling indexes a graph step waits for; Next the
	// ones that wait for it.
	Deps []int `dynamodbav:"deps,omitempty,numberset"`
	Next []int `dynamodbav:"next,omitempty,numberset"`
	// Last is set on a chain's last step: its job carries it
	// (job.Job.WorkflowLast), so finishing it needs no read of a next step.
	Last bool `dynamodbav:"last,omitempty"`
	// State is the node's state (its table: MachineOf); a job step keeps
	// "waiting" (its job holds its state) unless it is a handler.
	State wfstate.State `dynamodbav:"state"`
	Times
	// Rev counts the node's writes (1 when created): the stream derives
	// the ids of its events from it. It is "nv", not "version" as on every
	// other item: the due index projects "version" (a job's), and a
	// running workflow's root is in that index (its progress check), so
	// every step's write of the root would write the index too, twice the
	// units in a transaction. LegacyVersion is the count of a node written
	// before (see Version).
	Rev           int64 `dynamodbav:"nv,omitempty"`
	LegacyVersion int64 `dynamodbav:"version,omitempty"`
	// TTL is the workflow's expiry (Unix seconds), the ttl every item of
	// the workflow and each of its jobs carries (0: kept for ever). The
	// engine builds later jobs from the nodes, so they get it without a
	// read (job.Job.WorkflowExpiry).
	TTL int64 `dynamodbav:"ttl,omitempty"`
}

// Times are when a node was created, started and finished.
type Times struct {
	CreatedAt   string `dynamodbav:"created_at,omitempty"`
	StartedAt   string `dynamodbav:"started_at,omitempty"`
	CompletedAt string `dynamodbav:"completed_at,omitempty"`
	CancelledAt string `dynamodbav:"cancelled_at,omitempty"`
}

// Base returns the item every node begins with.
func (it *Item) Base() *Item { return it }

// Node is a decoded node: a *Step, a *Composite or a *Root.
type Node interface{ Base() *Item }

// Step is a job step: its job request, written once; its job holds its
// state.
type Step struct {
	Item
	// Def is the job request (JSON text); JobType its type.
	Def     store.Packed `dynamodbav:"def,omitempty"`
	JobType string       `dynamodbav:"job_type,omitempty"`
	// Compensate is the step's compensation (a job request, JSON).
	Compensate store.Packed `dynamodbav:"compensate,omitempty"`
}

// Composite is a chain, group, batch or graph (and the workflow's
// compensation). Its progress lives on its own item (OK and Fail: the
// indexes of the children that finished), or for a wide group or batch in
// counter shards rolled up into Rolled; a batch's callbacks in Fired,
// CallbacksOK and CallbacksFail. Every write to these sets is an ADD, so
// repeating it changes nothing.
type Composite struct {
	Item
	// Total is the number of children (callbacks not counted).
	Total int `dynamodbav:"total,omitempty"`
	// Shards is the number of counter shards of a wide group or batch; 0
	// means its children are counted on the node itself.
	Shards int `dynamodbav:"shards,omitempty"`
	// Graph is a graph's structure, read together with its progress:
	// JSON {"ids": [step ids], "deps": [[dependency indexes]]}.
	Graph string `dynamodbav:"graph,omitempty"`
	// OK and Fail are the children that finished (counted on the node).
	OK   []int `dynamodbav:"ok,omitempty,numberset"`
	Fail []int `dynamodbav:"fail,omitempty,numberset"`
	// Rolled holds "<shard>:<ok>:<fail>" for each full counter shard.
	Rolled []string `dynamodbav:"rolled,omitempty,stringset"`
	Batch
	FailedIndex *int `dynamodbav:"failed_index,omitempty"`
	// FailedStep is the path of the child whose failure failed the node.
	FailedStep string `dynamodbav:"failed_step,omitempty"`
	// Error is what failed the node itself (JSON), e.g. its timeout.
	Error string `dynamodbav:"error,omitempty"`
	// TimeoutMS bounds its run; Deadline (Unix ms) is when the run that
	// started it ends.
	TimeoutMS int64 `dynamodbav:"timeout_ms,omitempty"`
	Deadline  int64 `dynamodbav:"deadline_ms,omitempty"`
	// Plan lists, in the order they run, the steps a failed workflow's
	// compensation undoes (the /~compensate node).
	Plan []string `dynamodbav:"plan,omitempty"`
	// Reopening is set while a retry re-opens the workflow's failed steps:
	// on the root for the whole retry, and on every composite (and counter
	// shard) whose counts the retry changes until its failed jobs are back
	// in their queues. A change that counts a child or decides from the
	// counts does not apply to a marked item (Change, CountOnShard,
	// RollUp: ErrReopening); the retry counts what finished meanwhile
	// once it clears the marks.
	Reopening string `dynamodbav:"reopening,omitempty"`
	// DuePK and DueAt list it in the due index: a nested composite at its
	// deadline, a running workflow's root for its progress check (see
	// DueWorkflows).
	DuePK string `dynamodbav:"due_pk,omitempty"`
	DueAt int64  `dynamodbav:"due_at,omitempty"`
}

// Batch is a batch's callbacks: the defined ones (on_complete, ...);
// Fired the ones triggered (at FiredAt); CallbacksOK and CallbacksFail
// the fired ones that finished.
type Batch struct {
	Callbacks     []string `dynamodbav:"callbacks,omitempty,stringset"`
	Fired         []string `dynamodbav:"fired,omitempty,stringset"`
	FiredAt       string   `dynamodbav:"fired_at,omitempty"`
	CallbacksOK   []string `dynamodbav:"cb_ok,omitempty,stringset"`
	CallbacksFail []string `dynamodbav:"cb_fail,omitempty,stringset"`
}

// Root is a workflow's root node: the composite at its top and the
// workflow's own attributes.
type Root struct {
	Composite
	// JobCount is the number of job steps in the workflow.
	JobCount int `dynamodbav:"job_count,omitempty"`
	// Form is "steps" for a workflow created in the dependency-graph form
	// (its view lists steps by id), empty for the tree form.
	Form string `dynamodbav:"form,omitempty"`
	// Compensable counts the steps with a compensate job; Compensation
	// is "waiting" while a failed workflow's compensation waits for its
	// running steps, then "none", "running", "completed" or "failed";
	// Handlers lists the defined handlers, HandlersOK and HandlersFail
	// the finished ones; Run counts the retries.
	Compensable  int      `dynamodbav:"compensable,omitempty"`
	Compensation string   `dynamodbav:"compensation,omitempty"`
	Handlers     []string `dynamodbav:"handlers,omitempty,stringset"`
	HandlersOK   []string `dynamodbav:"h_ok,omitempty,stringset"`
	HandlersFail []string `dynamodbav:"h_fail,omitempty,stringset"`
	Run          int      `dynamodbav:"run,omitempty"`
	// Unguarded is set while a creation writes the first jobs of a large
	// workflow by plain conditional puts, without the root check a
	// transaction would make (half the write units): a cancel that finds
	// it puts a cancelled job in place of every first job not written yet
	// (workflow.takeUnwritten), so the creation cannot add one after.
	Unguarded bool `dynamodbav:"cfirst,omitempty"`
	// Launching is set by the advance of a workflow that is a chain or a
	// graph that starts its next job steps without a transaction
	// (Store.AdvanceMarked): a chain's next step's path, or RootPath for a
	// graph (the steps whose dependencies all completed), recorded in the
	// same write as the finished step, before the jobs are put. A cancel
	// or timeout that finds it puts a cancelled job in each such step's
	// place whose job does not exist yet (workflow.takeUnwritten), so the
	// advance's put fails and the stopped workflow gains no job; the
	// stream function puts the jobs if the advancing request died between
	// the two writes.
	Launching string `dynamodbav:"launch,omitempty"`
	// Cancelling is set on a cancelled workflow's root when the request
	// that cancelled it ran out of time before all its jobs were
	// cancelled: the stream function cancels the rest (SetCancelling).
	// CancelPass counts the passes that cancelled part of the jobs left
	// (NextCancelPass): each is a change of the root, from which the
	// stream function runs the next.
	Cancelling bool  `dynamodbav:"cancelling,omitempty"`
	CancelPass int64 `dynamodbav:"cancel_pass,omitempty"`
	// Retain is the workflow's retention in seconds (the longest of its
	// jobs'): its items outlive its end by that much (see Extend).
	Retain int64 `dynamodbav:"wf_r,omitempty"`
	// Tenant is the tenant of every job of the workflow ("": none).
	Tenant string `dynamodbav:"tenant,omitempty"`
	Creation
}

// Creation is the state of a large workflow's creation, on its root.
type Creation struct {
	// Creating is set while the workflow's items are written; the sweeper
	// deletes one whose creator died (one created asynchronously, with
	// CDef, it finishes instead).
	Creating bool `dynamodbav:"creating,omitempty"`
	// CDef is the gzipped definition of a workflow created asynchronously
	// (see BeginWorkflow), kept until its first jobs exist; CreateItems
	// is how many nodes its creation writes besides the root.
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
	CreateLease int64 `dynamodbav:"clease,omitempty"`
}

// Definition is the definition an asynchronously created workflow's root
// holds until its creation is finished (nil when none).
func (r *Root) Definition() ([]byte, error) {
	if len(r.CDef) == 0 {
		return nil, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.CDef))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// Version is the node's write count: Rev, or for a node not written
// since nodes counted in "version", that count (its next write goes on
// from it: Change.expr).
func (n *Item) Version() int64 {
	if n.Rev > 0 {
		return n.Rev
	}
	return n.LegacyVersion
}

// Done reports whether child i is counted as finished on the node.
func (n *Composite) Done(i int) bool { return slices.Contains(n.OK, i) || slices.Contains(n.Fail, i) }

// RolledCounts sums the rolled-up shards: how many, and their ok and fail
// counts.
func (n *Composite) RolledCounts() (shards, ok, fail int) {
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
func (n *Composite) ShardRolled(key string) bool {
	return slices.ContainsFunc(n.Rolled, func(r string) bool { return strings.HasPrefix(r, key+":") })
}

// workflowDuePK is the due-index partition of running workflows. It has no
// "due#" prefix, so no queue name can collide with it. timeoutDuePK holds
// nested nodes whose timeout is running, at their deadline.
const (
	workflowDuePK = "wfdue"
	timeoutDuePK  = "wftimeout"
)

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

// TimeoutDue lists a nested node created with a running deadline in the
// due index at that deadline.
func TimeoutDue(n *Composite) {
	n.DuePK, n.DueAt = workflowDueKey(timeoutDuePK, n.WorkflowID), n.Deadline
}

// WorkflowCheckDue sets when the sweeper first checks a new workflow.
func WorkflowCheckDue(n *Root, at time.Time) {
	n.DuePK, n.DueAt = workflowDueKey(workflowDuePK, n.WorkflowID), ms(at)
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

// marshalNode is a node's item: its attributes and its key.
func marshalNode(n Node) (map[string]types.AttributeValue, error) {
	av, err := attributevalue.MarshalMap(n)
	if err != nil {
		return nil, err
	}
	b := n.Base()
	av[attrPK], av[attrSK] = store.AttrS(wfPrefix+b.WorkflowID), store.AttrS(nodeSK(b.Path))
	return av, nil
}

// marshalNew is a new node's item: its first write (Rev 1).
func marshalNew(n Node) (map[string]types.AttributeValue, error) {
	av, err := marshalNode(n)
	if err == nil {
		av["nv"] = store.AttrN(1)
	}
	return av, err
}

// decodeNode decodes a node item by what it is: the root (path "/"), a
// job step (kind "job") or a composite.
func decodeNode(av map[string]types.AttributeValue) (Node, error) {
	path, _ := av["path"].(*types.AttributeValueMemberS)
	kind, _ := av["kind"].(*types.AttributeValueMemberS)
	var n Node
	switch {
	case path != nil && path.Value == RootPath:
		n = &Root{}
	case kind != nil && kind.Value == kindJob:
		n = &Step{}
	default:
		n = &Composite{}
	}
	if err := attributevalue.UnmarshalMap(av, n); err != nil {
		return nil, fmt.Errorf("decode workflow node: %w", err)
	}
	return n, nil
}

// kindJob is the kind of a job step (wfdef.KindJob).
const kindJob = "job"

// decodeAs decodes a node item as a T (*Root, *Composite or *Step),
// failing if it is another kind of node.
func decodeAs[T Node](av map[string]types.AttributeValue) (T, error) {
	n, err := decodeNode(av)
	if err != nil {
		var zero T
		return zero, err
	}
	t, ok := n.(T)
	if !ok {
		return t, fmt.Errorf("workflow node %s%s is a %T", n.Base().WorkflowID, n.Base().Path, n)
	}
	return t, nil
}

// CompositeOf is the composite of a composite node (the root's own for
// the root), or nil for a job step.
func CompositeOf(n Node) *Composite {
	switch c := n.(type) {
	case *Root:
		return &c.Composite
	case *Composite:
		return c
	}
	return nil
}

type shardItem struct {
	PK   string `dynamodbav:"pk"`
	SK   string `dynamodbav:"sk"`
	WFID string `dynamodbav:"wf_id"`
	TTL  int64  `dynamodbav:"ttl,omitempty"`
	Shard
}

func decodeShard(av map[string]types.AttributeValue) (*Shard, error) {
	it, err := store.Unmarshal[shardItem](av)
	if err != nil {
		return nil, err
	}
	return &it.Shard, nil
}

func wfKey(wfID, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: store.AttrS(wfPrefix + wfID), attrSK: store.AttrS(sk)}
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

// DecodeNode turns a stream image into a workflow node; ok is false for
// items that are not nodes.
func DecodeNode(av map[string]types.AttributeValue) (Node, bool, error) {
	sk, ok := av[attrSK].(*types.AttributeValueMemberS)
	if !ok || !strings.HasPrefix(sk.Value, nodePrefix) {
		return nil, false, nil
	}
	n, err := decodeNode(av)
	return n, err == nil, err
}

// SortedInts returns a sorted copy of a set.
func SortedInts(s []int) []int { return slices.Sorted(slices.Values(s)) }

// HasString reports whether list holds v.
func HasString(list []string, v string) bool { return slices.Contains(list, v) }
