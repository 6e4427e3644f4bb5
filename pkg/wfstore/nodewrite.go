package wfstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
)

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
// *ErrNodeConflict with the node as it is, or store.ErrNotFound.
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
			return nil, store.ErrNotFound
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
// store.ErrNotFound.
func refusedIfMarked(err error) error {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return err
	}
	if len(ccf.Item) == 0 {
		return store.ErrNotFound
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
