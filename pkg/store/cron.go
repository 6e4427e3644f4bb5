package store

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

// CronInfo is a registered cron schedule as stored.
type CronInfo struct {
	Name          string `dynamodbav:"name"`
	Expression    string `dynamodbav:"expression"`
	Timezone      string `dynamodbav:"timezone"`
	OverlapPolicy string `dynamodbav:"overlap_policy"`
	Enabled       bool   `dynamodbav:"enabled"`
	Description   string `dynamodbav:"description,omitempty"`
	// Template is the job request (a PUSH body) each occurrence enqueues.
	Template  Packed `dynamodbav:"template"`
	CreatedAt string `dynamodbav:"created_at"`
	UpdatedAt string `dynamodbav:"updated_at,omitempty"`
	LastRunAt string `dynamodbav:"last_run_at,omitempty"`
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
	Event *CronEvent `dynamodbav:"event,omitempty"`
}

// CronEvent records one trigger or skip of a schedule.
type CronEvent struct {
	Seq           int64  `dynamodbav:"seq"`
	Type          string `dynamodbav:"type"` // "triggered" or "skipped"
	JobID         string `dynamodbav:"job_id,omitempty"`
	ScheduledTime string `dynamodbav:"scheduled_time"`
	ActualTime    string `dynamodbav:"actual_time"`
	Reason        string `dynamodbav:"reason,omitempty"`
	ActiveJobID   string `dynamodbav:"active_job_id,omitempty"`
}

// NextRunAt is the next occurrence, or nil while disabled.
func (c *CronInfo) NextRunAt() *time.Time {
	if c.NextMS == 0 || !c.Enabled {
		return nil
	}
	t := fromMS(c.NextMS)
	return &t
}

// ErrCronChanged is returned when a cron schedule changed since it was
// read (another sweeper fired it, or it was updated or deleted).
var ErrCronChanged = errors.New("cron schedule changed since it was read")

func cronKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK: &types.AttributeValueMemberS{Value: cronsPK}, attrSK: &types.AttributeValueMemberS{Value: cronPrefix + name},
	}
}

// CronTimes is where a registration or a PATCH leaves a schedule's
// clock: its next occurrence, when the sweeper next looks at it, and the
// occurrences held behind a running job. All zero for a disabled schedule.
type CronTimes struct {
	Next, DueAt time.Time
	Held        int64
}

// PutCron registers or replaces a schedule (upsert). prev is the schedule
// as the caller read it (nil when there was none): the write is
// conditional on it being unchanged since (ErrCronChanged), so that an
// update never undoes a fire that happened in between. Counters, the last
// run and the creation time of an existing schedule are kept; times set
// its clock (ignored when disabled). It reports whether the schedule was
// new.
func (s *Store) PutCron(ctx context.Context, c CronInfo, prev *CronInfo, times CronTimes, now time.Time) (*CronInfo, bool, error) {
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
	u = cronSchedule(u, c.Enabled, times)
	return s.updateCron(ctx, c.Name, u, cronUnchanged(prev))
}

// cronUnchanged is the condition that a schedule is still as read: absent
// when it was, else at the version read.
func cronUnchanged(prev *CronInfo) expression.ConditionBuilder {
	if prev == nil {
		return expression.AttributeNotExists(expression.Name(attrPK))
	}
	return expression.Equal(expression.Name(attrVersion), expression.Value(prev.Version))
}

// cronSchedule sets or clears a schedule's clock and due entry.
func cronSchedule(u expression.UpdateBuilder, enabled bool, t CronTimes) expression.UpdateBuilder {
	if !enabled {
		return u.Remove(expression.Name("next_ms")).Remove(expression.Name(attrDuePK)).Remove(expression.Name(attrDueAt)).
			Remove(expression.Name("held"))
	}
	due := t.DueAt
	if due.IsZero() || due.After(t.Next) {
		due = t.Next
	}
	u = u.Set(expression.Name("next_ms"), expression.Value(ms(t.Next))).
		Set(expression.Name(attrDuePK), expression.Value(cronDuePK)).Set(expression.Name(attrDueAt), expression.Value(ms(due)))
	if t.Held > 0 {
		return u.Set(expression.Name("held"), expression.Value(t.Held))
	}
	return u.Remove(expression.Name("held"))
}

// updateCron writes a schedule under cond; a failed condition is
// ErrCronChanged.
func (s *Store) updateCron(ctx context.Context, name string, u expression.UpdateBuilder, cond expression.ConditionBuilder) (*CronInfo, bool, error) {
	expr, err := expression.NewBuilder().WithUpdate(u).WithCondition(cond).Build()
	if err != nil {
		return nil, false, err
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: cronKey(name),
		UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(),
		ExpressionAttributeValues: expr.Values(), ReturnValues: types.ReturnValueAllNew})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil, false, ErrCronChanged
	}
	if err != nil {
		return nil, false, fmt.Errorf("update cron %s: %w", name, err)
	}
	var c CronInfo
	if err := attributevalue.UnmarshalMap(out.Attributes, &c); err != nil {
		return nil, false, err
	}
	return &c, c.Version == 1, nil
}

// SetCronEnabled enables or disables schedule prev (as read), setting its
// clock to times; ErrCronChanged if it changed or went away since it was
// read.
func (s *Store) SetCronEnabled(ctx context.Context, prev *CronInfo, enabled bool, times CronTimes, now time.Time) (*CronInfo, error) {
	u := expression.Set(expression.Name("enabled"), expression.Value(enabled)).
		Set(expression.Name("updated_at"), expression.Value(job.Timestamp(now))).
		Add(expression.Name(attrVersion), expression.Value(1))
	u = cronSchedule(u, enabled, times)
	c, _, err := s.updateCron(ctx, prev.Name, u, cronUnchanged(prev))
	return c, err
}

// GetCron reads a schedule (consistent read).
func (s *Store) GetCron(ctx context.Context, name string) (*CronInfo, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: cronKey(name), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("get cron %s: %w", name, err)
	}
	if len(out.Item) == 0 {
		return nil, ErrNotFound
	}
	var c CronInfo
	if err := attributevalue.UnmarshalMap(out.Item, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// DeleteCron removes a schedule; ErrNotFound if there is none. Jobs it
// already enqueued are not touched.
func (s *Store) DeleteCron(ctx context.Context, name string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: cronKey(name),
		ConditionExpression: aws.String("attribute_exists(pk)")})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete cron %s: %w", name, err)
	}
	return nil
}

// Crons lists every schedule by name.
func (s *Store) Crons(ctx context.Context) ([]CronInfo, error) {
	all, err := queryAll[CronInfo](ctx, s.db, &dynamodb.QueryInput{TableName: &s.table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": avS(cronsPK), ":p": avS(cronPrefix)}})
	if err != nil {
		return nil, fmt.Errorf("list crons: %w", err)
	}
	return all, nil
}

// DueCrons lists up to limit enabled schedules that need evaluating at
// now. The index is eventually consistent: callers re-read each one.
func (s *Store) DueCrons(ctx context.Context, now time.Time, limit int) ([]string, error) {
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String(topology.IndexDue),
		KeyConditionExpression: aws.String("due_pk = :pk AND due_at <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": &types.AttributeValueMemberS{Value: cronDuePK}, ":now": &types.AttributeValueMemberN{Value: itoa(ms(now))}},
		Limit: aws.Int32(int32(limit))})
	if err != nil {
		return nil, fmt.Errorf("due crons: %w", err)
	}
	names := make([]string, 0, len(out.Items))
	for _, it := range out.Items {
		if sk, ok := it[attrSK].(*types.AttributeValueMemberS); ok {
			names = append(names, strings.TrimPrefix(sk.Value, cronPrefix))
		}
	}
	return names, nil
}

// CronStep is the outcome of evaluating a schedule once: the job to
// enqueue (nil for none), the schedule's next occurrence and due time,
// held occurrences, and the event to record.
type CronStep struct {
	Job            *job.Job
	RedeliverAfter time.Duration
	Next, DueAt    time.Time
	Held           int64
	Ran, Skipped   bool // count a run or a skip
	Event          *CronEvent
	// PrevMustBeDone makes the write fail with ErrPrevNotDone if the
	// schedule's previous job is not terminal by then.
	PrevMustBeDone bool
}

// ErrPrevNotDone is returned by StepCron when the previous run of the
// schedule turned out not to be finished.
var ErrPrevNotDone = errors.New("the previous run of the schedule is not finished")

// StepCron applies one evaluation of schedule c (as read): it writes the
// schedule, conditional on its version, and creates the job in the same
// transaction. ErrCronChanged means someone else got there first.
func (s *Store) StepCron(ctx context.Context, c *CronInfo, st CronStep, now time.Time) error {
	u := expression.Set(expression.Name("next_ms"), expression.Value(ms(st.Next))).
		Set(expression.Name(attrDueAt), expression.Value(ms(st.DueAt))).
		Set(expression.Name(attrVersion), expression.Value(c.Version+1))
	if st.Held > 0 {
		u = u.Set(expression.Name("held"), expression.Value(st.Held))
	} else {
		u = u.Remove(expression.Name("held"))
	}
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
		seq := int64(1)
		if c.Event != nil {
			seq = c.Event.Seq + 1
		}
		st.Event.Seq = seq
		ev, err := attributevalue.Marshal(st.Event)
		if err != nil {
			return err
		}
		u = u.Set(expression.Name("event"), expression.Value(ev))
	}
	cond := expression.Equal(expression.Name(attrVersion), expression.Value(c.Version)).And(expression.Name("enabled").Equal(expression.Value(true)))
	expr, err := expression.NewBuilder().WithUpdate(u).WithCondition(cond).Build()
	if err != nil {
		return err
	}
	update := &types.Update{TableName: &s.table, Key: cronKey(c.Name), UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()}
	if st.Job == nil {
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: update.Key, UpdateExpression: update.UpdateExpression,
			ConditionExpression: update.ConditionExpression, ExpressionAttributeNames: update.ExpressionAttributeNames,
			ExpressionAttributeValues: update.ExpressionAttributeValues})
		if errors.As(err, new(*types.ConditionalCheckFailedException)) {
			return ErrCronChanged
		}
		if err != nil {
			return fmt.Errorf("step cron %s: %w", c.Name, err)
		}
		return nil
	}
	put, err := s.jobPut(st.Job, st.RedeliverAfter)
	if err != nil {
		return err
	}
	tx := []types.TransactWriteItem{{Update: update}, {Put: put}}
	if st.PrevMustBeDone && c.LastJobID != "" {
		tx = append(tx, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: &s.table, Key: jobKey(c.LastJobID),
			ConditionExpression:       aws.String("attribute_not_exists(pk) OR #s IN (:c, :x, :d)"),
			ExpressionAttributeNames:  map[string]string{"#s": attrState},
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": avS(string(job.Completed)), ":x": avS(string(job.Cancelled)), ":d": avS(string(job.Discarded))}}})
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
	if i, ok := failedCondition(err); ok {
		if i == 2 {
			return ErrPrevNotDone
		}
		return ErrCronChanged
	}
	if err != nil {
		return fmt.Errorf("fire cron %s: %w", c.Name, err)
	}
	return nil
}

func avS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// DecodeCron turns a stream image into a schedule; ok is false for other
// items.
func DecodeCron(av map[string]types.AttributeValue) (*CronInfo, bool, error) {
	return decodeIf[CronInfo](av, prefixed(cronPrefix), "cron item")
}
