// Package store persists jobs in the single DynamoDB table. Every state
// change is one conditional UpdateItem built by a Transition constructor
// that names the states it leaves; creation is a conditional put (or a
// transaction for batches). No read-then-write without a condition.
package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// DynamoAPI is the part of the DynamoDB client the store uses.
type DynamoAPI interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// ErrNotFound is returned when a job does not exist.
var ErrNotFound = errors.New("not found")

// ConflictError is returned when a transition's condition failed: the job
// exists but was not in an expected state. Current is the job as it was.
type ConflictError struct {
	Current *job.Job
	Tried   Transition
	// DueAt is the current item's due index time (a redelivery check, a
	// lease's end, a scheduled time), zero when it has none. Set by Apply.
	DueAt time.Time
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("job %s is %s; cannot move it to %s", e.Current.ID, e.Current.State, e.Tried.To)
}

// ConditionFailed reports whether a single-item write failed its condition.
func ConditionFailed(err error) bool {
	_, ok := errors.AsType[*types.ConditionalCheckFailedException](err)
	return ok
}

// DuplicateError is returned when a job id already exists. Index is the
// position in a batch (0 for single creates).
type DuplicateError struct {
	ID    string
	Index int
}

func (e *DuplicateError) Error() string { return fmt.Sprintf("job %s already exists", e.ID) }

// MaxBatch is the most jobs Create writes atomically (a DynamoDB
// transaction holds at most 100 items).
const MaxBatch = 100

// Store reads and writes jobs in one table.
type Store struct {
	db    DynamoAPI
	table string
	due   dueWatch
}

// New returns a store on the named table.
func New(db DynamoAPI, table string) *Store { return &Store{db: db, table: table} }

// Table is the table name.
func (s *Store) Table() string { return s.table }

// DB is the DynamoDB client the store was built with: the table kernel's
// client for the packages that own their items' persistence (events,
// crons, queues and workers, dead letter, workflows).
func (s *Store) DB() DynamoAPI { return s.db }

// Create writes new jobs, all or none. Each job's initial index entries are
// set from its state: available jobs join the ready index, scheduled ones
// the due index. redeliverAfter is when the sweeper re-sends an available
// push-mode job that was not claimed. Jobs DynamoDB would refuse for their
// size (an item over 400 KB, a transaction over 4 MB) are refused with
// *TooLargeError before anything is written.
func (s *Store) Create(ctx context.Context, jobs []*job.Job, redeliverAfter time.Duration) error {
	if len(jobs) == 0 {
		return nil
	}
	if len(jobs) > MaxBatch {
		return fmt.Errorf("create: %d jobs exceed the transaction limit of %d", len(jobs), MaxBatch)
	}
	puts := make([]*types.Put, len(jobs))
	var err error
	for i, j := range jobs {
		if puts[i], err = s.JobPut(j, redeliverAfter); err != nil {
			return err
		}
	}
	if err := checkSizes(puts); err != nil {
		return err
	}
	if len(puts) == 1 {
		// A single put carries a token of its own, so that an SDK retry of
		// a put whose answer was lost knows the job it finds as its own, not
		// a duplicate. (The SDK gives each transaction a ClientRequestToken.)
		tok := strconv.FormatUint(rand.Uint64(), 36)
		puts[0].Item[attrWriteToken] = AttrS(tok)
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: puts[0].Item, ConditionExpression: puts[0].ConditionExpression,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
		if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
			if old, ok := ccf.Item[attrWriteToken].(*types.AttributeValueMemberS); ok && old.Value == tok {
				return nil
			}
			return &DuplicateError{ID: jobs[0].ID}
		}
		if err != nil {
			return fmt.Errorf("put job %s: %w", jobs[0].ID, err)
		}
		return nil
	}
	tx := make([]types.TransactWriteItem, len(puts))
	for i, p := range puts {
		tx[i] = types.TransactWriteItem{Put: p}
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
	if i, ok := FailedCondition(err); ok {
		return &DuplicateError{ID: jobs[i].ID, Index: i}
	}
	if err != nil {
		return fmt.Errorf("create %d jobs: %w", len(jobs), err)
	}
	return nil
}

// FailedCondition returns the index of the first item of a cancelled
// transaction whose condition failed; ok is false for any other outcome.
func FailedCondition(err error) (index int, ok bool) {
	tce, ok := errors.AsType[*types.TransactionCanceledException](err)
	if !ok {
		return -1, false
	}
	for i, r := range tce.CancellationReasons {
		if aws.ToString(r.Code) == "ConditionalCheckFailed" {
			return i, true
		}
	}
	return -1, false
}

// Unmarshal decodes an item into a new T.
func Unmarshal[T any](av map[string]types.AttributeValue) (*T, error) {
	var v T
	if err := attributevalue.UnmarshalMap(av, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// QueryAll runs a query page by page and decodes every item as a T.
func QueryAll[T any](ctx context.Context, db DynamoAPI, in *dynamodb.QueryInput) ([]T, error) {
	var all []T
	for {
		out, err := db.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, it := range out.Items {
			v, err := Unmarshal[T](it)
			if err != nil {
				return nil, err
			}
			all = append(all, *v)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return all, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// CountAll runs a query page by page as a count (Select COUNT) and
// returns the total.
func CountAll(ctx context.Context, db DynamoAPI, in *dynamodb.QueryInput) (int, error) {
	in.Select = types.SelectCount
	n := 0
	for {
		out, err := db.Query(ctx, in)
		if err != nil {
			return 0, err
		}
		n += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return n, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// Get reads a job with a strongly consistent read.
func (s *Store) Get(ctx context.Context, id string) (*job.Job, error) {
	it, err := s.GetItem(ctx, id)
	if err != nil {
		return nil, err
	}
	return it.Job, nil
}

// GetItem reads a job with its bookkeeping (consistent read).
func (s *Store) GetItem(ctx context.Context, id string) (Item, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: JobKey(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Item{}, fmt.Errorf("get job %s: %w", id, err)
	}
	it, ok, err := DecodeItem(out.Item)
	if err != nil {
		return Item{}, err
	}
	if !ok {
		return Item{}, ErrNotFound
	}
	return it, nil
}

// Apply runs a transition as one conditional UpdateItem and returns the job
// as written. If the condition fails it returns *ConflictError with the job
// as it is, or ErrNotFound if there is no such job.
func (s *Store) Apply(ctx context.Context, t Transition) (*job.Job, error) {
	u, err := s.updateOf(t)
	if err != nil {
		return nil, err
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
		ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
		ReturnValues: types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: u.ReturnValuesOnConditionCheckFailure,
	})
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		if tok, ok := ccf.Item[attrWriteToken].(*types.AttributeValueMemberS); ok && t.token != "" && tok.Value == t.token {
			// This very write landed: the SDK retried the request after
			// its answer was lost, and the retry found the write done.
			return decodeJob(ccf.Item)
		}
		return nil, conflict(ccf.Item, t)
	}
	if _, ok := errors.AsType[*types.TransactionConflictException](err); ok {
		// A transaction holds the job (a keyed claim's): nothing written.
		return nil, fmt.Errorf("apply %s to job %s: %w", t.To, t.ID, ErrTransactionConflict)
	}
	if err != nil {
		return nil, fmt.Errorf("apply %s to job %s: %w", t.To, t.ID, err)
	}
	return decodeJob(out.Attributes)
}

// conflict is the answer to t's failed condition, given the item as it was
// (none: ErrNotFound): a *ConflictError, or the error decoding it.
func conflict(item map[string]types.AttributeValue, t Transition) error {
	if len(item) == 0 {
		return ErrNotFound
	}
	cur, ok, err := DecodeItem(item)
	if err == nil && !ok {
		err = fmt.Errorf("item is not a job")
	}
	if err != nil {
		return err
	}
	return &ConflictError{Current: cur.Job, Tried: t, DueAt: cur.DueAt}
}

// updateOf is t, validated, as the conditional update of its job (which
// must exist), returning the item as it was when the condition fails.
func (s *Store) updateOf(t Transition) (*types.Update, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	cond := t.condition().And(expression.AttributeExists(expression.Name(attrPK)))
	expr, err := expression.NewBuilder().WithUpdate(t.update).WithCondition(cond).Build()
	if err != nil {
		return nil, fmt.Errorf("build transition %s of job %s: %w", t.To, t.ID, err)
	}
	if t.due != "" {
		s.due.wrote(t.due, t.dueAt) // before the write: reading early is harmless
	}
	return &types.Update{TableName: &s.table, Key: JobKey(t.ID),
		UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}, nil
}

// ApplyAll applies transitions of distinct jobs as Apply would, up to 100
// in one transaction, four transactions at once. It answers per transition:
// nil, a *ConflictError, ErrNotFound, or ErrNotTried for those it did not
// get to before ctx's budget ended (WithBudget; the first transaction is
// always tried). A transaction cancelled for failed conditions is tried
// again without those jobs; one cancelled otherwise is applied one by one.
func (s *Store) ApplyAll(ctx context.Context, ts []Transition) ([]error, error) {
	return s.applyAll(ctx, ts, nil)
}

// Guard is a condition on an item besides the jobs that every transaction
// of ApplyAllIf checks (a workflow's root still cancelled, say).
type Guard struct {
	key    map[string]types.AttributeValue
	cond   string
	names  map[string]string
	values map[string]types.AttributeValue
}

// ErrGuardFailed is ApplyAllIf's answer once its guard's condition
// failed: the transitions not applied by then answer ErrNotTried.
var ErrGuardFailed = errors.New("the guard's condition failed")

// ApplyAllIf is ApplyAll with every transaction also checking g (99 jobs
// to a transaction, one transaction at a time): the transitions apply only
// while g holds, so a decision made from g's item cannot be applied after
// that item changed.
func (s *Store) ApplyAllIf(ctx context.Context, ts []Transition, g Guard) ([]error, error) {
	return s.applyAll(ctx, ts, &g)
}

func (s *Store) applyAll(ctx context.Context, ts []Transition, g *Guard) ([]error, error) {
	errs := make([]error, len(ts))
	for i := range errs {
		errs[i] = ErrNotTried
	}
	size, conc := MaxBatch, 4
	if g != nil {
		// One transaction at a time: DynamoDB cancels concurrent
		// transactions that touch the same item (TransactionConflict), and
		// every one of these checks the guard's item.
		size, conc = size-1, 1
	}
	chunks := (len(ts) + size - 1) / size
	err := Parallel(ctx, chunks, conc, func(ctx context.Context, c int) error {
		lo := c * size
		pending := make([]int, 0, size)
		for i := lo; i < min(lo+size, len(ts)); i++ {
			pending = append(pending, i)
		}
		return s.applyChunk(ctx, ts, pending, errs, g)
	})
	if errors.Is(err, ErrSliceOver) {
		err = nil
	}
	return errs, err
}

// ErrNotTried answers, in ApplyAll, a transition left for lack of time.
var ErrNotTried = errors.New("not tried within the budget")

// WithBudget returns ctx whose batch writers (ApplyAll, a workflow
// creation's) start no request after end, though the requests under way
// finish (unlike a deadline, which cancels them).
func WithBudget(ctx context.Context, end time.Time) context.Context {
	return context.WithValue(ctx, sliceKey{}, func() bool { return time.Now().After(end) })
}

// applyChunk applies ts[pending] in one transaction (with g's check, when
// set), again without the jobs whose condition failed (at most three
// tries), then one by one.
func (s *Store) applyChunk(ctx context.Context, ts []Transition, pending []int, errs []error, g *Guard) error {
	for tries := 0; len(pending) > 0 && tries < 3; tries++ {
		next, conditionsOnly, err := s.transact(ctx, ts, pending, errs, g)
		if err != nil || next == nil {
			return err
		}
		pending = next
		if !conditionsOnly {
			break
		}
	}
	for _, i := range pending {
		if g != nil {
			// One job and the guard: a transaction of two.
			for tries := 0; ; tries++ {
				if next, _, err := s.transact(ctx, ts, []int{i}, errs, g); err != nil || next == nil {
					if err != nil {
						return err
					}
					break
				}
				if tries >= 3 {
					return fmt.Errorf("apply the transition of job %s: transaction conflicts", ts[i].ID)
				}
				if err := ctxsleep.Wait(ctx, ConflictBackoff(tries)); err != nil {
					return err
				}
			}
			continue
		}
		_, err := s.Apply(ctx, ts[i])
		if _, ok := errors.AsType[*ConflictError](err); err != nil && !ok && !errors.Is(err, ErrNotFound) {
			return err
		}
		errs[i] = err
	}
	return nil
}

// transact writes ts[pending] (and g's check) in one transaction. It
// records each outcome in errs and returns the transitions to try again
// (nil when none is left) and whether only conditions failed; an error
// when the transaction failed otherwise, ErrGuardFailed when g's did.
func (s *Store) transact(ctx context.Context, ts []Transition, pending []int, errs []error, g *Guard) (next []int, conditionsOnly bool, err error) {
	tx := make([]types.TransactWriteItem, 0, len(pending)+1)
	for _, i := range pending {
		u, err := s.updateOf(ts[i])
		if err != nil {
			return nil, false, err
		}
		tx = append(tx, types.TransactWriteItem{Update: u})
	}
	if g != nil {
		tx = append(tx, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: &s.table, Key: g.key,
			ConditionExpression: &g.cond, ExpressionAttributeNames: g.names, ExpressionAttributeValues: g.values}})
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
	if err == nil {
		for _, i := range pending {
			errs[i] = nil
		}
		return nil, true, nil
	}
	tce, ok := errors.AsType[*types.TransactionCanceledException](err)
	if !ok || len(tce.CancellationReasons) != len(tx) {
		return nil, false, fmt.Errorf("apply %d transitions: %w", len(pending), err)
	}
	if g != nil && aws.ToString(tce.CancellationReasons[len(pending)].Code) == "ConditionalCheckFailed" {
		return nil, false, ErrGuardFailed
	}
	conditionsOnly = true
	for k, r := range tce.CancellationReasons[:len(pending)] {
		i := pending[k]
		switch aws.ToString(r.Code) {
		case "ConditionalCheckFailed":
			errs[i] = conflict(r.Item, ts[i])
			if _, ok := errors.AsType[*ConflictError](errs[i]); !ok && errs[i] != ErrNotFound {
				return nil, false, errs[i]
			}
		case "None", "":
			next = append(next, i)
		default: // TransactionConflict and the like
			conditionsOnly = false
			next = append(next, i)
		}
	}
	return next, conditionsOnly, nil
}

// queryShard reads up to limit jobs of partition pk of an index, whose key
// condition cond names pk :pk (and now :now, and :after, after).
func (s *Store) queryShard(ctx context.Context, index, cond, pk string, now time.Time, after string, limit int) ([]Item, error) {
	vals := map[string]types.AttributeValue{":pk": AttrS(pk)}
	if strings.Contains(cond, ":now") {
		vals[":now"] = AttrN(ms(now))
	}
	if strings.Contains(cond, ":after") {
		vals[":after"] = AttrS(after)
	}
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{TableName: &s.table, IndexName: &index,
		KeyConditionExpression: &cond, ExpressionAttributeValues: vals, Limit: aws.Int32(int32(limit))})
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", index, err)
	}
	items := make([]Item, 0, len(out.Items))
	for _, av := range out.Items {
		it, ok, err := DecodeItem(av)
		if err != nil {
			return nil, err
		}
		if ok {
			it.Partial = true
			items = append(items, it)
		}
	}
	return items, nil
}

// ReadyOf lists up to limit available jobs of a queue in fetch order,
// of one tenant's jobs (tenant "": every job; a tenant's from the tenant
// index), from after on (a listed job's Item.ReadySK; "": from the head,
// else for a FETCH that went through a window it could not take): it
// reads the head of every shard at once and merges them by the ready sort
// key, so priority-then-FIFO holds across shards. The index is eventually
// consistent: callers claim with a condition.
func (s *Store) ReadyOf(ctx context.Context, tenant, queue, after string, limit int) ([]Item, error) {
	index, cond, keys := topology.IndexReady, "ready_pk = :pk", readyKeys(queue)
	if tenant != "" {
		index, cond, keys = topology.IndexTenant, "tn_pk = :pk", TenantKeys(tenant, queue)
	}
	if after != "" {
		cond += " AND ready_sk > :after"
	}
	parts, err := EachShard(ctx, keys, func(ctx context.Context, pk string) ([]Item, error) {
		return s.queryShard(ctx, index, cond, pk, time.Time{}, after, limit)
	})
	if err != nil {
		return nil, err
	}
	return mergeItems(parts, limit, func(a, b Item) int { return strings.Compare(a.ReadySK, b.ReadySK) }), nil
}

// ReadyPush lists up to limit available push-mode jobs of a queue (not in
// the ready index: SQS holds their place in line) in the order of their
// redelivery checks, from the due index, reading at most readyPushPages
// pages of it.
func (s *Store) ReadyPush(ctx context.Context, queue string, limit int) ([]Item, error) {
	var out []Item
	cursor := ""
	for page := 0; page < readyPushPages && len(out) < limit; page++ {
		p, err := s.listIndex(ctx, ListWaiting, queue, []job.State{job.Available}, false, max(limit, 100), cursor)
		if err != nil {
			return out, err
		}
		out = append(out, p.Items...)
		if cursor = p.Cursor; cursor == "" {
			break
		}
	}
	return out[:min(len(out), limit)], nil
}

// readyPushPages bounds what a FETCH of a push-mode queue reads of the due
// index: ten pages of at most 100 entries a shard.
const readyPushPages = 10

// Due lists up to limit jobs of a queue whose due time is at or before now,
// earliest first, from every due shard: scheduled and retryable jobs to
// promote, active jobs whose lease ended, and available push-mode jobs to
// redeliver. The sweeper reads this way; FETCH reads through DueNow.
func (s *Store) Due(ctx context.Context, queue string, now time.Time, limit int) ([]Item, error) {
	parts, err := EachShard(ctx, dueKeys(queue), func(ctx context.Context, pk string) ([]Item, error) {
		return s.queryShard(ctx, topology.IndexDue, "due_pk = :pk AND due_at <= :now", pk, now, "", limit)
	})
	if err != nil {
		return nil, err
	}
	return mergeItems(parts, limit, byDueAt), nil
}

func byDueAt(a, b Item) int { return a.DueAt.Compare(b.DueAt) }

// Ping checks that the table answers (a read of a key that never exists).
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: map[string]types.AttributeValue{attrPK: AttrS("HEALTH"), attrSK: AttrS("HEALTH")}})
	if err != nil {
		return fmt.Errorf("ping table %s: %w", s.table, err)
	}
	return nil
}

// WithFailedError is ApplyWith's answer when the other item's condition
// failed: Item is that item as it was (nil when absent).
type WithFailedError struct {
	Item map[string]types.AttributeValue
}

func (e *WithFailedError) Error() string {
	return "the condition on the item written with the job failed"
}

// ErrTransactionConflict answers ApplyWith when its transaction met another
// write of its items, Apply when a transaction held the job: nothing written.
var ErrTransactionConflict = errors.New("transaction conflict")

// ApplyWith applies t together with a conditional update of another item
// (with) in one transaction and returns the job as written (read back:
// a transaction returns no values). If t's condition fails it returns a
// *ConflictError or ErrNotFound as Apply does; if with's, a
// *WithFailedError (with should ask for the item as it was).
func (s *Store) ApplyWith(ctx context.Context, t Transition, with *types.Update) (*job.Job, error) {
	u, err := s.updateOf(t)
	if err != nil {
		return nil, err
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{{Update: u}, {Update: with}},
		// A retry of a request whose answer was lost finds it done.
		ClientRequestToken: aws.String(t.token),
	})
	if tce, ok := errors.AsType[*types.TransactionCanceledException](err); ok && len(tce.CancellationReasons) == 2 {
		onJob, onWith := tce.CancellationReasons[0], tce.CancellationReasons[1]
		switch {
		case aws.ToString(onJob.Code) == "ConditionalCheckFailed":
			return nil, conflict(onJob.Item, t)
		case aws.ToString(onWith.Code) == "ConditionalCheckFailed":
			return nil, &WithFailedError{Item: onWith.Item}
		default:
			return nil, ErrTransactionConflict
		}
	}
	if err != nil {
		return nil, fmt.Errorf("apply %s to job %s with another item: %w", t.To, t.ID, err)
	}
	return s.Get(ctx, t.ID)
}

// APIError maps the store's errors about job id to the API's: ErrNotFound
// is a 404, a *ConflictError a 409 naming the job's current state and the
// state op tried to reach, an *ojserr.Error stays as it is, anything else
// is a backend error (its details logged, never shown). nil stays nil.
func APIError(err error, id, op string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) {
		return ojserr.NotFoundf("job", id)
	}
	if ce, ok := errors.AsType[*ConflictError](err); ok {
		return ojserr.StateConflict(ojserr.Conflict, "Cannot %s job in state '%s'.", op, ce.Current.State).
			With("job_id", id).With("current_state", string(ce.Current.State)).With("target_state", string(ce.Tried.To))
	}
	if oe, ok := errors.AsType[*ojserr.Error](err); ok {
		return oe
	}
	return ojserr.Backend(err)
}
