package cron

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// Cron items: pk CRONS, sk CRON#<name> (one partition: listing is one
// query), in the due index under "cron" at the time they next need the
// sweeper (absent while disabled). Every write adds one to version, and
// every fire or skip is a conditional write on the version read, so two
// sweepers evaluating the same schedule at once fire it once.
const (
	cronsPK    = "CRONS"
	cronPrefix = "CRON#"
	cronDuePK  = "cron"
)

// The table's attribute names a schedule uses (docs/data-model.md).
const (
	attrPK      = "pk"
	attrSK      = "sk"
	attrDuePK   = "due_pk"
	attrDueAt   = "due_at"
	attrVersion = "version"
)

// Info is a registered cron schedule as stored.
type Info struct {
	Name          string `dynamodbav:"name"`
	Expression    string `dynamodbav:"expression"`
	Timezone      string `dynamodbav:"timezone"`
	OverlapPolicy string `dynamodbav:"overlap_policy"`
	Enabled       bool   `dynamodbav:"enabled"`
	Description   string `dynamodbav:"description,omitempty"`
	// Template is the job request (a PUSH body) each occurrence enqueues.
	Template  store.Packed `dynamodbav:"template"`
	CreatedAt string       `dynamodbav:"created_at"`
	UpdatedAt string       `dynamodbav:"updated_at,omitempty"`
	LastRunAt string       `dynamodbav:"last_run_at,omitempty"`
	// NextMS is the next occurrence (Unix ms); 0 while disabled.
	NextMS int64 `dynamodbav:"next_ms,omitempty"`
	// DueMS is when the sweeper next looks at it (Unix ms).
	DueMS     int64  `dynamodbav:"due_at,omitempty"`
	RunCount  int64  `dynamodbav:"run_count"`
	SkipCount int64  `dynamodbav:"skip_count"`
	LastJobID string `dynamodbav:"last_job_id,omitempty"`
	// Held counts occurrences of an "enqueue" schedule waiting for the
	// previous run to finish.
	Held    int64 `dynamodbav:"held,omitempty"`
	Version int64 `dynamodbav:"version"`
	// Event is the last trigger or skip, for the stream function to turn
	// into a cron.triggered or cron.skipped event.
	Event *Event `dynamodbav:"event,omitempty"`
}

// Event records one trigger or skip of a schedule.
type Event struct {
	Seq           int64  `dynamodbav:"seq"`
	Type          string `dynamodbav:"type"` // "triggered" or "skipped"
	JobID         string `dynamodbav:"job_id,omitempty"`
	ScheduledTime string `dynamodbav:"scheduled_time"`
	ActualTime    string `dynamodbav:"actual_time"`
	Reason        string `dynamodbav:"reason,omitempty"`
	ActiveJobID   string `dynamodbav:"active_job_id,omitempty"`
}

// NextRunAt is the next occurrence, or nil while disabled.
func (c *Info) NextRunAt() *time.Time {
	if c.NextMS == 0 || !c.Enabled {
		return nil
	}
	t := time.UnixMilli(c.NextMS).UTC()
	return &t
}

// ErrChanged is returned when a cron schedule changed since it was read
// (another sweeper fired it, or it was updated or deleted).
var ErrChanged = errors.New("cron schedule changed since it was read")

// ErrPrevNotDone is returned by Store.Step when the previous run of the
// schedule turned out not to be finished.
var ErrPrevNotDone = errors.New("the previous run of the schedule is not finished")

// Times is where a registration or a PATCH leaves a schedule's clock: its
// next occurrence, when the sweeper next looks at it, and the occurrences
// held behind a running job. All zero for a disabled schedule.
type Times struct {
	Next, DueAt time.Time
	Held        int64
}

// Step is the outcome of evaluating a schedule once: the job to enqueue
// (nil for none), the schedule's next occurrence and due time, held
// occurrences, and the event to record.
type Step struct {
	Job            *job.Job
	RedeliverAfter time.Duration
	Next, DueAt    time.Time
	Held           int64
	Ran, Skipped   bool // count a run or a skip
	Event          *Event
	// PrevMustBeDone makes the write fail with ErrPrevNotDone if the
	// schedule's previous job is not terminal by then.
	PrevMustBeDone bool
}

// Store persists cron schedules in the table of the kernel it was built
// from. Reads are consistent except Due's (an index query).
type Store struct {
	k     *store.Store
	db    store.DynamoAPI
	table string
}

// NewStore returns the schedules' persistence on kernel k's table. A fire
// writes its job through k, as every job is written.
func NewStore(k *store.Store) *Store { return &Store{k: k, db: k.DB(), table: k.Table()} }

var _ Table = (*Store)(nil)

func cronKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: store.AttrS(cronsPK), attrSK: store.AttrS(cronPrefix + name)}
}

// Put registers or replaces a schedule (upsert). prev is the schedule as
// the caller read it (nil when there was none): the write is conditional
// on it being unchanged since (ErrChanged), so that an update never
// undoes a fire that happened in between. Counters, the last run and the
// creation time of an existing schedule are kept; times set its clock
// (ignored when disabled). It reports whether the schedule was new.
func (s *Store) Put(ctx context.Context, c Info, prev *Info, times Times, now time.Time) (*Info, bool, error) {
	u := expression.Set(expression.Name("name"), expression.Value(c.Name)).
		Set(expression.Name("expression"), expression.Value(c.Expression)).
		Set(expression.Name("timezone"), expression.Value(c.Timezone)).
		Set(expression.Name("overlap_policy"), expression.Value(c.OverlapPolicy)).
		Set(expression.Name("enabled"), expression.Value(c.Enabled)).
		Set(expression.Name("template"), expression.Value(c.Template)).
		Set(expression.Name("updated_at"), expression.Value(job.Timestamp(now))).
		Set(expression.Name("created_at"), expression.IfNotExists(expression.Name("created_at"), expression.Value(job.Timestamp(now)))).
		Set(expression.Name("run_count"), expression.IfNotExists(expression.Name("run_count"), expression.Value(0))).
		Set(expression.Name("skip_count"), expression.IfNotExists(expression.Name("skip_count"), expression.Value(0))).
		Set(expression.Name(attrVersion), expression.Plus(expression.IfNotExists(expression.Name(attrVersion), expression.Value(0)), expression.Value(1)))
	if c.Description != "" {
		u = u.Set(expression.Name("description"), expression.Value(c.Description))
	} else {
		u = u.Remove(expression.Name("description"))
	}
	u = schedule(u, c.Enabled, times)
	return s.update(ctx, c.Name, u, unchanged(prev))
}

// unchanged is the condition that a schedule is still as read: absent
// when it was, else at the version read.
func unchanged(prev *Info) expression.ConditionBuilder {
	if prev == nil {
		return expression.AttributeNotExists(expression.Name(attrPK))
	}
	return expression.Equal(expression.Name(attrVersion), expression.Value(prev.Version))
}

// schedule sets or clears a schedule's clock and due entry.
func schedule(u expression.UpdateBuilder, enabled bool, t Times) expression.UpdateBuilder {
	if !enabled {
		return u.Remove(expression.Name("next_ms")).Remove(expression.Name(attrDuePK)).Remove(expression.Name(attrDueAt)).
			Remove(expression.Name("held"))
	}
	due := t.DueAt
	if due.IsZero() || due.After(t.Next) {
		due = t.Next
	}
	u = u.Set(expression.Name("next_ms"), expression.Value(t.Next.UnixMilli())).
		Set(expression.Name(attrDuePK), expression.Value(cronDuePK)).Set(expression.Name(attrDueAt), expression.Value(due.UnixMilli()))
	return held(u, t.Held)
}

// held sets the held occurrences (n > 0) or removes them.
func held(u expression.UpdateBuilder, n int64) expression.UpdateBuilder {
	if n > 0 {
		return u.Set(expression.Name("held"), expression.Value(n))
	}
	return u.Remove(expression.Name("held"))
}

// update writes a schedule under cond; a failed condition is ErrChanged.
func (s *Store) update(ctx context.Context, name string, u expression.UpdateBuilder, cond expression.ConditionBuilder) (*Info, bool, error) {
	expr, err := expression.NewBuilder().WithUpdate(u).WithCondition(cond).Build()
	if err != nil {
		return nil, false, err
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: cronKey(name),
		UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(),
		ExpressionAttributeValues: expr.Values(), ReturnValues: types.ReturnValueAllNew})
	if store.ConditionFailed(err) {
		return nil, false, ErrChanged
	}
	if err != nil {
		return nil, false, fmt.Errorf("update cron %s: %w", name, err)
	}
	c, err := store.Unmarshal[Info](out.Attributes)
	if err != nil {
		return nil, false, err
	}
	return c, c.Version == 1, nil
}

// SetEnabled enables or disables schedule prev (as read), setting its
// clock to times; ErrChanged if it changed or went away since it was
// read.
func (s *Store) SetEnabled(ctx context.Context, prev *Info, enabled bool, times Times, now time.Time) (*Info, error) {
	u := expression.Set(expression.Name("enabled"), expression.Value(enabled)).
		Set(expression.Name("updated_at"), expression.Value(job.Timestamp(now))).
		Add(expression.Name(attrVersion), expression.Value(1))
	u = schedule(u, enabled, times)
	c, _, err := s.update(ctx, prev.Name, u, unchanged(prev))
	return c, err
}

// Get reads a schedule (consistent read); store.ErrNotFound if there is
// none.
func (s *Store) Get(ctx context.Context, name string) (*Info, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: cronKey(name), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("get cron %s: %w", name, err)
	}
	if len(out.Item) == 0 {
		return nil, store.ErrNotFound
	}
	return store.Unmarshal[Info](out.Item)
}

// Delete removes a schedule; store.ErrNotFound if there is none. Jobs it
// already enqueued are not touched.
func (s *Store) Delete(ctx context.Context, name string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: cronKey(name),
		ConditionExpression: aws.String("attribute_exists(pk)")})
	if store.ConditionFailed(err) {
		return store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete cron %s: %w", name, err)
	}
	return nil
}

// List returns every schedule by name (consistent reads, page by page).
func (s *Store) List(ctx context.Context) ([]Info, error) {
	all, err := store.QueryAll[Info](ctx, s.db, &dynamodb.QueryInput{TableName: &s.table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS(cronsPK), ":p": store.AttrS(cronPrefix)}})
	if err != nil {
		return nil, fmt.Errorf("list crons: %w", err)
	}
	return all, nil
}

// Due lists the names of up to limit enabled schedules that need
// evaluating at now, and when the first of the others is due (zero when
// the page held none: none, or a full page of due ones). The index is
// eventually consistent: callers re-read each one.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) (names []string, next time.Time, err error) {
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String(topology.IndexDue),
		KeyConditionExpression:    aws.String("due_pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS(cronDuePK)},
		Limit:                     aws.Int32(int32(limit))})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("due crons: %w", err)
	}
	names = make([]string, 0, len(out.Items))
	for _, it := range out.Items {
		var e struct {
			SK    string `dynamodbav:"sk"`
			DueAt int64  `dynamodbav:"due_at"`
		}
		if attributevalue.UnmarshalMap(it, &e) != nil {
			continue
		}
		if at := time.UnixMilli(e.DueAt); at.After(now) {
			return names, at, nil // the index is in due_at order
		}
		names = append(names, strings.TrimPrefix(e.SK, cronPrefix))
	}
	return names, time.Time{}, nil
}

// Step applies one evaluation of schedule c (as read): it writes the
// schedule, conditional on its version, and creates the job in the same
// transaction. ErrChanged means someone else got there first;
// ErrPrevNotDone that st.PrevMustBeDone and the previous run is not
// finished.
func (s *Store) Step(ctx context.Context, c *Info, st Step, now time.Time) error {
	u := expression.Set(expression.Name("next_ms"), expression.Value(st.Next.UnixMilli())).
		Set(expression.Name(attrDueAt), expression.Value(st.DueAt.UnixMilli())).
		Set(expression.Name(attrVersion), expression.Value(c.Version+1))
	u = held(u, st.Held)
	if st.Ran {
		u = u.Set(expression.Name("run_count"), expression.Value(c.RunCount+1)).
			Set(expression.Name("last_run_at"), expression.Value(job.Timestamp(now)))
	}
	if st.Skipped {
		u = u.Set(expression.Name("skip_count"), expression.Value(c.SkipCount+1))
	}
	if st.Job != nil {
		u = u.Set(expression.Name("last_job_id"), expression.Value(st.Job.ID))
	}
	if st.Event != nil {
		st.Event.Seq = 1
		if c.Event != nil {
			st.Event.Seq = c.Event.Seq + 1
		}
		ev, err := attributevalue.Marshal(st.Event)
		if err != nil {
			return err
		}
		u = u.Set(expression.Name("event"), expression.Value(ev))
	}
	cond := expression.Equal(expression.Name(attrVersion), expression.Value(c.Version)).And(expression.Name("enabled").Equal(expression.Value(true)))
	if st.Job == nil {
		_, _, err := s.update(ctx, c.Name, u, cond)
		return err
	}
	expr, err := expression.NewBuilder().WithUpdate(u).WithCondition(cond).Build()
	if err != nil {
		return err
	}
	update := &types.Update{TableName: &s.table, Key: cronKey(c.Name), UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()}
	put, err := s.k.JobPut(st.Job, st.RedeliverAfter)
	if err != nil {
		return err
	}
	tx := []types.TransactWriteItem{{Update: update}, {Put: put}}
	if st.PrevMustBeDone && c.LastJobID != "" {
		tx = append(tx, types.TransactWriteItem{ConditionCheck: s.k.JobFinishedCheck(c.LastJobID)})
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
	if i, ok := store.FailedCondition(err); ok {
		if i == 2 {
			return ErrPrevNotDone
		}
		return ErrChanged
	}
	if err != nil {
		return fmt.Errorf("fire cron %s: %w", c.Name, err)
	}
	return nil
}

// Job reads job id (consistent read), the previous run of a schedule;
// store.ErrNotFound if it is gone.
func (s *Store) Job(ctx context.Context, id string) (*job.Job, error) { return s.k.Get(ctx, id) }

// Decode turns an item (a read or a stream image) into a schedule; ok is
// false for other items.
func Decode(av map[string]types.AttributeValue) (*Info, bool, error) {
	return store.DecodeIf[Info](av, store.Prefixed(cronPrefix), "cron item")
}
