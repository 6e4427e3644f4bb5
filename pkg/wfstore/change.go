package wfstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
)

// Change is one named change of a workflow node: what it writes and the
// state the node must be in for it to apply. The constructors below are
// every change the engine makes of a node; Store.Change applies one,
// Store.Advance applies them with the jobs of a step. A Change is a value:
// its modifiers return a new one.
type Change struct {
	// Path is the node changed.
	Path string
	ops  []op
	cond []expression.ConditionBuilder
	// to and from are the move the change makes, checked against the
	// node state machine; stated is set when the change carries a
	// condition on the node's state (a move does), so a step's scope
	// check adds none.
	to     wfstate.State
	from   []wfstate.State
	stated bool
	// decides is set when the change counts a finished child or decides
	// from the counts: it does not apply while a retry re-opens the node
	// (Composite.Reopening).
	decides bool
	// due lists the node in the due index at dueAt, in partition due of
	// its workflow; undue takes it out.
	due   string
	dueAt time.Time
	undue bool
}

// op adds its clauses to a change's update.
type op func(update) update

type update = expression.UpdateBuilder

func (c Change) with(o ...op) Change {
	c.ops = append(slices.Clip(c.ops), o...)
	return c
}

func (c Change) when(cs ...expression.ConditionBuilder) Change {
	c.cond = append(slices.Clip(c.cond), cs...)
	return c
}

func set(name string, v any) op {
	return func(u update) update { return u.Set(expression.Name(name), expression.Value(v)) }
}
func add(name string, v any) op {
	return func(u update) update { return u.Add(expression.Name(name), expression.Value(v)) }
}
func del(name string, v any) op {
	return func(u update) update { return u.Delete(expression.Name(name), expression.Value(v)) }
}
func remove(names ...string) op {
	return func(u update) update {
		for _, n := range names {
			u = u.Remove(expression.Name(n))
		}
		return u
	}
}

func nums(is ...int) types.AttributeValue {
	ns := make([]string, len(is))
	for i, v := range is {
		ns[i] = strconv.Itoa(v)
	}
	return &types.AttributeValueMemberNS{Value: ns}
}

func strs(ss ...string) types.AttributeValue { return &types.AttributeValueMemberSS{Value: ss} }

// isIn is the condition that attribute name is one of vals (= for one).
func isIn[S ~string](name string, vals ...S) expression.ConditionBuilder {
	vs := make([]expression.OperandBuilder, len(vals))
	for i, v := range vals {
		vs[i] = expression.Value(string(v))
	}
	if len(vs) == 1 {
		return expression.Name(name).Equal(vs[0])
	}
	return expression.Name(name).In(vs[0], vs[1:]...)
}

// stateIn is the condition that the node is in one of states.
func stateIn(states ...wfstate.State) expression.ConditionBuilder { return isIn("state", states...) }

// unsetOr is the condition that attribute name is absent or one of vals.
func unsetOr(name string, vals ...string) expression.ConditionBuilder {
	return expression.AttributeNotExists(expression.Name(name)).Or(isIn(name, vals...))
}

// and is the conjunction of cs (at least one).
func and(cs []expression.ConditionBuilder) expression.ConditionBuilder {
	if len(cs) == 1 {
		return cs[0]
	}
	return expression.And(cs[0], cs[1], cs[2:]...)
}

// outcome is the state a finished node is in: completed when ok.
func outcome(ok bool) wfstate.State {
	if ok {
		return wfstate.Completed
	}
	return wfstate.Failed
}

// countedIn is the set a finished child is counted in: "ok" or "fail".
func countedIn(ok bool) string {
	if ok {
		return "ok"
	}
	return "fail"
}

// inState makes c conditional on the node's state without moving it.
func (c Change) inState(states ...wfstate.State) Change {
	c = c.when(stateIn(states...))
	c.stated = true
	return c
}

// open makes c conditional on the node not being finished.
func (c Change) open() Change { return c.when(stateIn(wfstate.Waiting, wfstate.Running)) }

// move is a change of the node's state from one of from to to, stamped
// at. Of from, only the states the node's table moves to to are named in
// its condition (a nested composite is never running, for one): the
// changes that finish or stop a node serve every kind.
func move(path string, to wfstate.State, at time.Time, from ...wfstate.State) Change {
	m := MachineOf(path)
	if ok := slices.DeleteFunc(slices.Clone(from), func(f wfstate.State) bool { return !m.Can(f, to) }); len(ok) > 0 {
		from = ok
	}
	// A finished node leaves the due index (checks, timeouts).
	c := Change{Path: path, to: to, from: from, stated: true, undue: to.Terminal(), decides: to == wfstate.Completed || to == wfstate.Failed}
	c = c.when(stateIn(from...)).with(set("state", string(to)))
	ts := job.Timestamp(at)
	switch to {
	case wfstate.Running:
		c = c.with(set("started_at", ts))
	case wfstate.Waiting:
		// Re-opened by a retry: it has not finished any more.
		c = c.with(remove("completed_at", "cancelled_at"))
	case wfstate.Cancelled:
		c = c.with(set("cancelled_at", ts), set("completed_at", ts))
	default:
		c = c.with(set("completed_at", ts))
	}
	return c
}

// checkAt lists the root in the due index for its progress check at t.
func (c Change) checkAt(t time.Time) Change {
	c.due, c.dueAt, c.undue = workflowDuePK, t, false
	return c
}

// uncheck takes the node out of the due index.
func (c Change) uncheck() Change {
	c.undue = true
	return c
}

// Finish moves a composite to completed (ok) or failed: from waiting or
// running, the root only from running (its chain's launch mark has then
// done its work and goes).
func Finish(path string, ok bool, at time.Time) Change {
	to := outcome(ok)
	if path == RootPath {
		return move(path, to, at, wfstate.Running).with(remove("launch"))
	}
	return move(path, to, at, wfstate.Waiting, wfstate.Running)
}

// Counting counts child idx as finished (ok or failed) in the same write.
func (c Change) Counting(idx int, ok bool) Change {
	c.decides = true
	return c.with(add(countedIn(ok), nums(idx)))
}

// Blaming records step as the child whose failure failed the node (none
// when step is empty).
func (c Change) Blaming(step string) Change {
	if step == "" {
		return c
	}
	return c.with(set("failed_step", step))
}

// IfNotAllOK makes c conditional on the decisions "this graph step cannot
// start yet" it relies on: of each set of child indexes, not all are
// counted OK yet.
func (c Change) IfNotAllOK(sets [][]int) Change {
	for _, all := range sets {
		if len(all) == 0 {
			continue
		}
		var parts []expression.ConditionBuilder
		for _, i := range all {
			parts = append(parts, expression.Contains(expression.Name("ok"), i))
		}
		c = c.when(expression.Not(and(parts)))
	}
	return c
}

// FailChain fails a chain at its step k (path step): counted, recorded as
// the failed index and step.
func FailChain(path string, k int, step string, at time.Time) Change {
	return Finish(path, false, at).Counting(k, false).Blaming(step).with(set("failed_index", k))
}

// CountChild counts child idx of a composite as finished.
func CountChild(path string, idx int, ok bool) Change {
	return Change{Path: path}.Counting(idx, ok)
}

// CountAndGoOn counts step idx as completed while its composite is still
// open: the record of a step that starts the steps after it.
func CountAndGoOn(path string, idx int) Change { return CountChild(path, idx, true).open() }

// StartDeadline sets a composite's deadline and lists it in the due index
// for its timeout at that time.
func StartDeadline(path string, deadline time.Time) Change {
	return Change{Path: path, due: timeoutDuePK, dueAt: deadline}.with(set("deadline_ms", ms(deadline)))
}

// FireCallbacksOnce records a batch's triggered callbacks, once (only if
// none were), while the batch is open.
func FireCallbacksOnce(path string, names []string, at time.Time) Change {
	c := Change{Path: path, decides: true}.open().with(set("fired_at", job.Timestamp(at)))
	if len(names) > 0 {
		c = c.with(set("fired", strs(names...)))
	}
	return c.when(expression.AttributeNotExists(expression.Name("fired_at")))
}

// CountCallback counts a batch's fired callback name as finished.
func CountCallback(path, name string, ok bool) Change {
	return Change{Path: path, decides: true}.with(add("cb_"+countedIn(ok), strs(name)))
}

// DropCheck takes a node out of the due index if it is still in state.
func DropCheck(path string, state wfstate.State) Change {
	return Change{Path: path, undue: true}.inState(state)
}

// TimeOut fails a composite whose deadline passed (the root only while it
// runs), recording errJSON as what failed it.
func TimeOut(path string, at time.Time, errJSON string) Change {
	from := []wfstate.State{wfstate.Waiting, wfstate.Running}
	if path == RootPath {
		from = from[1:]
	}
	return move(path, wfstate.Failed, at, from...).with(set("error", errJSON))
}

// CancelNode cancels a node in one of from (by default waiting or
// running).
func CancelNode(path string, at time.Time, from ...wfstate.State) Change {
	if len(from) == 0 {
		from = []wfstate.State{wfstate.Waiting, wfstate.Running}
	}
	return move(path, wfstate.Cancelled, at, from...)
}

// CancelWorkflow cancels a running workflow whose creation finished; its
// root stays in the progress checks (at checkAt) until its jobs are all
// cancelled.
func CancelWorkflow(at, checkAt time.Time) Change {
	return CancelNode(RootPath, at, wfstate.Running).checkAt(checkAt).when(expression.AttributeNotExists(expression.Name("creating")))
}

// StartNode moves a waiting node to running: a handler's launch.
func StartNode(path string, at time.Time) Change {
	return move(path, wfstate.Running, at, wfstate.Waiting)
}

// FinishHandler records a running handler's outcome on its node.
func FinishHandler(path string, ok bool, at time.Time) Change {
	return move(path, outcome(ok), at, wfstate.Running)
}

// CountHandler counts handler name as finished on a failed or cancelled
// workflow's root.
func CountHandler(name string, ok bool) Change {
	return Change{Path: RootPath}.inState(wfstate.Failed, wfstate.Cancelled).with(add("h_"+countedIn(ok), strs(name)))
}

// RearmHandler moves a finished handler's node (in from) back to waiting
// for its next launch, forgetting its counts.
func RearmHandler(path string, from wfstate.State, at time.Time) Change {
	return move(path, wfstate.Waiting, at, from).with(remove("ok", "fail", "failed_step", "failed_index"))
}

// compensation sets a failed workflow's compensation to to while it is
// unset or one of from.
func compensation(to string, from ...string) Change {
	return Change{Path: RootPath}.inState(wfstate.Failed).with(set("compensation", to)).when(unsetOr("compensation", from...))
}

// CompensationWaits records that a failed workflow's compensation waits
// for its running steps; the root's check comes back at checkAt.
func CompensationWaits(checkAt time.Time) Change {
	return compensation(CompensationWaiting, CompensationWaiting).checkAt(checkAt)
}

// CompensationSkipped records that a failed workflow has nothing to
// compensate; its check goes.
func CompensationSkipped() Change {
	return compensation(CompensationNone, CompensationWaiting).uncheck()
}

// CompensationStarts records that a failed workflow's compensation runs
// (written with its first job); its check goes.
func CompensationStarts() Change {
	return compensation(CompensationRunning, CompensationWaiting).uncheck()
}

// CompensationEnds records a finished compensation's outcome (and the
// step that failed it) on the failed workflow.
func CompensationEnds(outcome, failedStep string) Change {
	c := Change{Path: RootPath}.inState(wfstate.Failed).with(set("compensation", outcome))
	if failedStep != "" {
		c = c.with(set("compensation_failed_step", failedStep))
	}
	return c
}

// RetryWorkflow re-opens a failed or cancelled workflow (in from) whose
// compensation has not started: running again, in its next run, marked
// re-opening (Composite.Reopening) until its failed jobs are back in their
// queues, checked at checkAt. A non-zero deadline restarts its timeout.
func RetryWorkflow(from wfstate.State, at, checkAt, deadline time.Time) Change {
	c := move(RootPath, wfstate.Running, at, from).checkAt(checkAt).
		with(add("run", 1), set(attrReopening, "true")).
		with(remove("failed_index", "failed_step", "error", "compensation", "h_ok", "h_fail", "completed_at", "cancelled_at")).
		when(unsetOr("compensation", CompensationNone, CompensationWaiting))
	if !deadline.IsZero() {
		c = c.with(set("deadline_ms", ms(deadline)))
	}
	return c
}

// Reopening is what a retry forgets of one composite (Reopen).
type Reopening struct {
	// Fail, CallbacksFail and Rolled are the failed children, failed
	// callbacks and rolled-up counter shards forgotten.
	Fail          []int
	CallbacksFail []string
	Rolled        []string
	// Refire forgets a batch's fired callbacks: they are decided again.
	Refire bool
	// From, when set, is the failed or cancelled state the composite
	// leaves for waiting at At; Deadline, when set, restarts its clock.
	From     wfstate.State
	At       time.Time
	Deadline time.Time
	// Mark marks the composite as re-opening (Composite.Reopening) until
	// ClearReopening.
	Mark bool
}

// Reopen forgets a composite's failures for a retry (see Reopening).
func Reopen(path string, r Reopening) Change {
	c := Change{Path: path}
	if r.From != "" {
		c = move(path, wfstate.Waiting, r.At, r.From)
	}
	c = c.with(remove("failed_index", "failed_step", "error"))
	if len(r.Fail) > 0 {
		c = c.with(del("fail", nums(r.Fail...)))
	}
	if len(r.CallbacksFail) > 0 && !r.Refire {
		c = c.with(del("cb_fail", strs(r.CallbacksFail...)))
	}
	if len(r.Rolled) > 0 {
		c = c.with(del("rolled", strs(r.Rolled...)))
	}
	if r.Refire {
		c = c.with(remove("fired", "fired_at", "cb_ok", "cb_fail"))
	}
	if !r.Deadline.IsZero() {
		c.due, c.dueAt = timeoutDuePK, r.Deadline
		c = c.with(set("deadline_ms", ms(r.Deadline)))
	}
	if r.Mark {
		c = c.with(set(attrReopening, "true"))
	}
	return c
}

// ClearReopening removes a retry's mark from a composite (the root's only
// while it runs).
func ClearReopening(path string) Change {
	c := Change{Path: path}.with(remove(attrReopening))
	if path == RootPath {
		c = c.inState(wfstate.Running)
	}
	return c
}

// MarkCancelling records on a cancelled workflow's root that its jobs are
// still being cancelled: the change is the stream record on which the
// stream function cancels the rest.
func MarkCancelling() Change {
	return Change{Path: RootPath}.inState(wfstate.Cancelled).with(set(attrCancelling, true))
}

// NextCancelPass records on a cancelling workflow's root that a pass
// cancelled part of its jobs and left the rest: the change is a stream
// record of the root, from which the stream function runs the next pass
// (its other records wait for one pass at most, not for the whole cancel).
func NextCancelPass() Change {
	return Change{Path: RootPath}.inState(wfstate.Cancelled).with(add("cancel_pass", 1)).
		when(expression.Name(attrCancelling).Equal(expression.Value(true)))
}

// CancelDone records that a cancelled workflow's jobs are all cancelled:
// its cancelling mark and its progress check go.
func CancelDone() Change {
	return Change{Path: RootPath, undue: true}.inState(wfstate.Cancelled).with(remove(attrCancelling))
}

// ClearUnguarded removes a root's Unguarded mark that a creator which
// died while writing the first jobs left: once those jobs exist (the
// sweeper's repair writes the missing ones), a cancel need not look for
// unwritten ones any more.
func ClearUnguarded() Change { return Change{Path: RootPath}.with(remove(attrUnguarded)) }

// The root's marks (Root.Cancelling, Root.Unguarded).
const (
	attrCancelling = "cancelling"
	attrUnguarded  = "cfirst"
)

// marking is a marked advance's record (Store.AdvanceMarked): c with the
// root's launch mark set, while the workflow runs.
func (c Change) marking(mark string) Change {
	return c.inState(wfstate.Running).with(set("launch", mark))
}

// MachineOf is the transition table of the node at path: the root's, a
// handler's (or the compensation's), or a nested composite's.
func MachineOf(path string) wfstate.Machine {
	switch {
	case path == RootPath:
		return wfstate.Root
	case strings.HasPrefix(path, "/~") && !strings.Contains(path[1:], "/"):
		return wfstate.Handler
	}
	return wfstate.Composite
}

// check checks c's move against its node's transition table.
func (c Change) check() error {
	if c.to == "" {
		return nil
	}
	m := MachineOf(c.Path)
	for _, f := range c.from {
		if !m.Can(f, c.to) {
			return fmt.Errorf("node %s: invalid transition %s -> %s", c.Path, f, c.to)
		}
	}
	return nil
}

// expr builds c's update and condition for a node of workflow wfID; scope,
// when the change is of its step's scope node (Advance.Scope), is the
// states that node must be in.
func (c Change) expr(wfID string, scope []wfstate.State) (expression.Expression, error) {
	if err := c.check(); err != nil {
		return expression.Expression{}, err
	}
	// Every write counts in "nv", from "version" for a node written
	// before (Item.Version).
	u := expression.Set(expression.Name("nv"), expression.Plus(
		expression.IfNotExists(expression.Name("nv"), expression.IfNotExists(expression.Name("version"), expression.Value(0))), expression.Value(1)))
	for _, o := range c.ops {
		u = o(u)
	}
	switch {
	case c.due != "":
		u = u.Set(expression.Name(attrDuePK), expression.Value(workflowDueKey(c.due, wfID))).Set(expression.Name(attrDueAt), expression.Value(ms(c.dueAt)))
	case c.undue:
		u = u.Remove(expression.Name(attrDuePK)).Remove(expression.Name(attrDueAt))
	}
	conds := append(slices.Clip(c.cond), expression.AttributeExists(expression.Name("pk")))
	if c.decides {
		conds = append(conds, expression.AttributeNotExists(expression.Name(attrReopening)))
	}
	if len(scope) > 0 && !c.stated {
		conds = append(conds, stateIn(scope...))
	}
	return expression.NewBuilder().WithUpdate(u).WithCondition(and(conds)).Build()
}

// ErrNodeConflict is returned when a change's condition failed: the node
// is not in the state it expects, its callbacks were fired already, or a
// graph decision no longer holds. Current is the node as it was.
type ErrNodeConflict struct{ Current Node }

func (e *ErrNodeConflict) Error() string {
	b := e.Current.Base()
	return fmt.Sprintf("node %s%s changed (state %s)", b.WorkflowID, b.Path, b.State)
}

// State is the state the node was in.
func (e *ErrNodeConflict) State() wfstate.State { return e.Current.Base().State }

// Composite is the node as it was if it is a composite (the root's own
// for the root), or nil.
func (e *ErrNodeConflict) Composite() *Composite { return CompositeOf(e.Current) }

// Root is the node as it was if it is the root, or nil.
func (e *ErrNodeConflict) Root() *Root {
	r, _ := e.Current.(*Root)
	return r
}

// Change applies c to a composite (or a handler's node) of workflow wfID
// and returns it as written (the root's own composite for the root), or
// *ErrNodeConflict with the node as it is, or store.ErrNotFound.
func (s *Store) Change(ctx context.Context, wfID string, c Change) (*Composite, error) {
	n, err := s.change(ctx, wfID, c)
	if err != nil {
		return nil, err
	}
	if comp := CompositeOf(n); comp != nil {
		return comp, nil
	}
	return &Composite{Item: *n.Base()}, nil // a handler that is one job step
}

// ChangeRoot applies c to a workflow's root and returns it as written;
// errors as Change's.
func (s *Store) ChangeRoot(ctx context.Context, wfID string, c Change) (*Root, error) {
	if c.Path != RootPath {
		return nil, fmt.Errorf("workflow %s: change of %s is not of the root", wfID, c.Path)
	}
	n, err := s.change(ctx, wfID, c)
	if err != nil {
		return nil, err
	}
	r, ok := n.(*Root)
	if !ok {
		return nil, fmt.Errorf("workflow %s: its root decoded as %T", wfID, n)
	}
	return r, nil
}

func (s *Store) change(ctx context.Context, wfID string, c Change) (Node, error) {
	x, err := c.expr(wfID, nil)
	if err != nil {
		return nil, err
	}
	item, old, err := s.update(ctx, wfKey(wfID, nodeSK(c.Path)), x)
	if errors.Is(err, errRefused) {
		n, err := decodeNode(old)
		if err != nil {
			return nil, err
		}
		return nil, &ErrNodeConflict{Current: n}
	}
	if err != nil {
		return nil, fmt.Errorf("update node %s%s: %w", wfID, c.Path, err)
	}
	return decodeNode(item)
}

// errRefused is update's answer when the update's condition failed on an
// item that exists.
var errRefused = errors.New("wfstore: condition failed")

// update applies x to the item at key and returns the item as written;
// when x's condition fails, errRefused with the item as it was, or
// store.ErrNotFound when there is none.
func (s *Store) update(ctx context.Context, key map[string]types.AttributeValue, x expression.Expression) (item, old map[string]types.AttributeValue, err error) {
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: key,
		UpdateExpression: x.Update(), ConditionExpression: x.Condition(), ExpressionAttributeNames: x.Names(), ExpressionAttributeValues: x.Values(),
		ReturnValues: types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	ccf, failed := errors.AsType[*types.ConditionalCheckFailedException](err)
	switch {
	case failed && len(ccf.Item) == 0:
		return nil, nil, store.ErrNotFound
	case failed:
		return nil, ccf.Item, errRefused
	case err != nil:
		return nil, nil, err
	}
	return out.Attributes, nil, nil
}

// counted is the update of a counter shard or a roll-up: one ADD, applied
// while the item exists and no retry re-opens it (ErrReopening).
func (s *Store) counted(ctx context.Context, key map[string]types.AttributeValue, attr string, v types.AttributeValue) (map[string]types.AttributeValue, error) {
	x, err := expression.NewBuilder().WithUpdate(expression.Add(expression.Name(attr), expression.Value(v))).
		WithCondition(expression.AttributeExists(expression.Name("pk")).And(expression.AttributeNotExists(expression.Name(attrReopening)))).Build()
	if err != nil {
		return nil, err
	}
	item, _, err := s.update(ctx, key, x)
	if errors.Is(err, errRefused) {
		return nil, ErrReopening // the retry's mark refused it
	}
	return item, err
}

// CountOnShard counts child idx of the composite at path as finished in
// counter shard key and returns the shard as written (idempotent);
// ErrReopening while a retry re-opens the shard.
func (s *Store) CountOnShard(ctx context.Context, wfID, path, key string, idx int, ok bool) (*Shard, error) {
	av, err := s.counted(ctx, wfKey(wfID, shardSK(path, key)), countedIn(ok), nums(idx))
	if err != nil {
		return nil, fmt.Errorf("count %s%s#%s: %w", wfID, path, key, err)
	}
	return decodeShard(av)
}

// RollUp records a full shard's counts on its composite (idempotent) and
// returns the composite as written; ErrReopening while a retry re-opens
// the composite.
func (s *Store) RollUp(ctx context.Context, wfID, path string, sh *Shard) (*Composite, error) {
	entry := fmt.Sprintf("%s:%d:%d", sh.Key, len(sh.OK), len(sh.Fail))
	av, err := s.counted(ctx, wfKey(wfID, nodeSK(path)), "rolled", strs(entry))
	if err != nil {
		return nil, fmt.Errorf("roll up %s%s#%s: %w", wfID, path, sh.Key, err)
	}
	n, err := decodeNode(av)
	if err != nil {
		return nil, err
	}
	return CompositeOf(n), nil
}
