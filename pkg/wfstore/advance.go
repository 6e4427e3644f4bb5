package wfstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
)

// Advance is one step of a workflow written as a whole: jobs that start
// (each created only if it does not exist) and node writes. It is applied
// only while the workflow runs. Up to store.MaxBatch items go in one
// transaction; more are written jobs first, in transactions of store.MaxBatch,
// with the node writes in the last one, so that the node writes (the
// record that the step happened) are never visible before its jobs.
type Advance struct {
	WorkflowID string
	Jobs       []*job.Job
	Changes    []Change
	// NewNodes are nodes the step creates (each only if it does not
	// exist), written with the node writes.
	NewNodes []Node
	// Scope is the node that must be in one of ScopeStates for the step
	// to apply: by default the root, running; a failed workflow's
	// compensation and handlers are steps of their own nodes.
	Scope       string
	ScopeStates []wfstate.State
	// RedeliverAfter is passed to job creation (see store.Store.Create).
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
	if a.Scope == "" {
		a.Scope, a.ScopeStates = RootPath, []wfstate.State{wfstate.Running}
	}
	room := store.MaxBatch - len(a.Changes) - len(a.NewNodes)
	if !slices.ContainsFunc(a.Changes, func(c Change) bool { return c.Path == a.Scope }) {
		room-- // the scope check
	}
	if room < 0 {
		return fmt.Errorf("advance of workflow %s: %d node changes exceed a transaction", a.WorkflowID, len(a.Changes))
	}
	sizes := make([]int, len(a.Jobs))
	for i, j := range a.Jobs {
		n, err := store.JobItemBytes(j, a.RedeliverAfter)
		if err != nil {
			return err
		}
		if n > awslimit.DynamoItemBytes {
			return &store.TooLargeError{What: "item", Bytes: n, Max: awslimit.DynamoItemBytes, Index: i}
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
	for done := 0; done < tail; {
		end, b := done, 0
		for end < tail && end-done < store.MaxBatch-1 && (end == done || b+sizes[end] <= awslimit.DynamoTxBytes-txCheckReserve) {
			b += sizes[end]
			end++
		}
		if err := s.advanceTx(ctx, a, a.Jobs[done:end], nil, nil); err != nil {
			return err
		}
		if done = end; a.Progress != nil {
			a.Progress(done)
		}
		if err := store.SliceOver(ctx); err != nil {
			return err // a creation's slice is over: the next goes on
		}
	}
	if err := s.advanceTx(ctx, a, a.Jobs[tail:], a.Changes, a.NewNodes); err != nil {
		return err
	}
	if a.Progress != nil {
		a.Progress(len(a.Jobs))
	}
	return nil
}

// AdvanceMarked applies a step of a workflow that is a graph as two
// writes instead of a transaction, for half its write units (a
// transaction bills every item twice): the root's change c (the finished
// step counted, with c's conditions) with Root.Launching set to mark and
// the condition that the workflow runs, then jobs put where they do not
// exist. What the transaction's atomicity gave is kept by the mark: a
// cancel or timeout after the first write finds it and takes the place of
// every job not there yet, so no job is added to a stopped workflow; a
// cancel before it makes it fail (ErrWorkflowNotRunning, nothing
// written). A request that dies between the writes leaves the mark on a
// running root and jobs missing, which the stream function's check of the
// finished step finds (workflow.Verify) and writes again. mark is RootPath
// (the steps whose dependencies all completed). Errors as Advance's;
// *ErrNodeConflict when another of c's conditions failed.
func (s *Store) AdvanceMarked(ctx context.Context, wfID string, c Change, mark string, jobs []*job.Job, redeliverAfter time.Duration) error {
	if c.Path != RootPath {
		return fmt.Errorf("advance of workflow %s: a marked advance writes the root, not %s", wfID, c.Path)
	}
	puts, err := s.jobPuts(jobs, redeliverAfter)
	if err != nil {
		return err
	}
	if _, err := s.Change(ctx, wfID, c.marking(mark)); err != nil {
		var nc *ErrNodeConflict
		if errors.Is(err, store.ErrNotFound) || errors.As(err, &nc) && nc.State() != wfstate.Running {
			return ErrWorkflowNotRunning // as Advance's check of the root
		}
		return err
	}
	if err := fault.Hit(fault.WorkflowAfterMark); err != nil {
		return err
	}
	// (A job that exists is the step repeated, or a cancel's placeholder.)
	if _, err := s.putAll(ctx, puts); err != nil {
		return fmt.Errorf("advance workflow %s: %w", wfID, err)
	}
	return nil
}

// PutNext is the step of a workflow that is a chain to a next step that
// is a job: that job put where it does not exist, and nothing else. The
// put is the record that the step before it completed (the chain's
// progress is its jobs); a cancel or timeout puts a cancelled
// placeholder first where it would start a step after the stop
// (workflow's stopper), so the put of a stopped workflow's step fails.
// It reports whether the job was written (not: the step repeated, or a
// placeholder there).
func (s *Store) PutNext(ctx context.Context, wfID string, j *job.Job, redeliverAfter time.Duration) (bool, error) {
	n, err := s.putJobs(ctx, []*job.Job{j}, redeliverAfter)
	if err != nil {
		return false, fmt.Errorf("advance workflow %s: %w", wfID, err)
	}
	return n == 1, nil
}

// jobPuts are the conditional puts of jobs, each checked against the item
// size limit.
func (s *Store) jobPuts(jobs []*job.Job, redeliverAfter time.Duration) ([]*types.Put, error) {
	puts := make([]*types.Put, len(jobs))
	for i, j := range jobs {
		var err error
		if puts[i], err = s.jobs.JobPut(j, redeliverAfter); err != nil {
			return nil, err
		}
		if n := store.ItemBytes(puts[i].Item); n > awslimit.DynamoItemBytes {
			return nil, &store.TooLargeError{What: "item", Bytes: n, Max: awslimit.DynamoItemBytes, Index: i}
		}
	}
	return puts, nil
}

// Room kept in a transaction besides its jobs: for the node items it
// updates (counted whole), and for the root check of a jobs-only one.
const (
	txNodeReserve  = 1 << 20
	txCheckReserve = 8 << 10
)

// advanceTx writes jobs, node writes and new nodes in one transaction
// conditional on a's scope, retrying without the jobs that turn out to
// exist.
func (s *Store) advanceTx(ctx context.Context, a Advance, jobs []*job.Job, nodes []Change, newNodes []Node) error {
	wfID := a.WorkflowID
	for tries := 0; len(jobs)+len(nodes)+len(newNodes) > 0; tries++ {
		var tx []types.TransactWriteItem
		hasScope := false
		for _, c := range nodes {
			var scope []wfstate.State
			if c.Path == a.Scope {
				hasScope, scope = true, a.ScopeStates
			}
			x, err := c.expr(wfID, scope)
			if err != nil {
				return err
			}
			tx = append(tx, types.TransactWriteItem{Update: &types.Update{TableName: &s.table, Key: wfKey(wfID, nodeSK(c.Path)),
				UpdateExpression: x.Update(), ConditionExpression: x.Condition(),
				ExpressionAttributeNames: x.Names(), ExpressionAttributeValues: x.Values(),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
		}
		if !hasScope {
			x, err := expression.NewBuilder().WithCondition(stateIn(a.ScopeStates...)).Build()
			if err != nil {
				return err
			}
			tx = append(tx, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: &s.table, Key: wfKey(wfID, nodeSK(a.Scope)),
				ConditionExpression: x.Condition(), ExpressionAttributeNames: x.Names(), ExpressionAttributeValues: x.Values(),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
		}
		for _, n := range newNodes {
			av, err := marshalNew(n)
			if err != nil {
				return err
			}
			tx = append(tx, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: av, ConditionExpression: aws.String("attribute_not_exists(pk)"),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
		}
		first := len(tx)
		for _, j := range jobs {
			put, err := s.jobs.JobPut(j, a.RedeliverAfter)
			if err != nil {
				return err
			}
			tx = append(tx, types.TransactWriteItem{Put: put})
		}
		if len(tx) == 1 && tx[0].ConditionCheck != nil {
			return nil
		}
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
		tce, canceled := errors.AsType[*types.TransactionCanceledException](err)
		if !canceled {
			if err != nil {
				return fmt.Errorf("advance workflow %s: %w", wfID, err)
			}
			return nil
		}
		exist, conflict := map[int]bool{}, false
		for i, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "TransactionConflict" {
				conflict = true
			}
			if aws.ToString(r.Code) != "ConditionalCheckFailed" {
				continue
			}
			if i >= first {
				exist[i-first] = true
				continue
			}
			if len(r.Item) == 0 {
				return ErrWorkflowNotRunning
			}
			n, err := decodeNode(r.Item)
			if err != nil {
				return err
			}
			if n.Base().Path == a.Scope && !slices.Contains(a.ScopeStates, n.Base().State) {
				return ErrWorkflowNotRunning
			}
			return &ErrNodeConflict{Current: n}
		}
		if len(exist) == 0 {
			if conflict && tries < store.ConflictTries {
				// Another transaction held one of the items (a completion
				// settling the same node): try again after a jittered,
				// growing pause.
				if err := ctxsleep.Wait(ctx, store.ConflictBackoff(tries)); err != nil {
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
	}
	return nil
}
