package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// Uniqueness locks (ojs-unique-jobs.md): pk UNQ#<key>, sk UNIQUE, naming
// the job that holds the key and, for a policy with a period, when the
// hold ends (also its TTL). A job with a unique policy is created in one
// transaction with its lock, so two enqueues of the same key can never
// both succeed: the strong uniqueness of section 8.1.
const (
	uniquePrefix = "UNQ#"
	uniqueSK     = "UNIQUE"
)

// ErrLockHeld is returned by CreateUnique when the key is held by another
// job than the caller expected (or, with no holder expected, by anyone).
var ErrLockHeld = errors.New("uniqueness key is held")

// UniqueLock is the holder of a uniqueness key.
type UniqueLock struct {
	JobID string
	// Until is when the hold ends (zero: while the holder is in the
	// policy's states).
	Until time.Time
}

func uniqueKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: AttrS(uniquePrefix + key), attrSK: AttrS(uniqueSK)}
}

// CreateUnique creates j as the holder of its uniqueness key, in one
// transaction: with holder empty the key must be free (no lock, or one
// whose period ended before now); otherwise the lock must still name holder,
// at holderVersion (or gone). It returns ErrLockHeld when those conditions
// fail and a DuplicateError when a job with j's id exists.
func (s *Store) CreateUnique(ctx context.Context, j *job.Job, redeliverAfter time.Duration, until, now time.Time, holder string, holderVersion int64) error {
	put, err := s.JobPut(j, redeliverAfter)
	if err != nil {
		return err
	}
	lock := uniqueKey(j.Unique.Key)
	lock["job_id"] = AttrS(j.ID)
	if !until.IsZero() {
		lock["until_ms"] = &types.AttributeValueMemberN{Value: itoa(ms(until))}
		lock["ttl"] = &types.AttributeValueMemberN{Value: itoa(until.Unix() + 60)}
	}
	lp := &types.Put{TableName: &s.table, Item: lock}
	tx := []types.TransactWriteItem{{Put: lp}, {Put: put}}
	if holder == "" {
		lp.ConditionExpression = aws.String("attribute_not_exists(pk) OR until_ms <= :now")
		lp.ExpressionAttributeValues = map[string]types.AttributeValue{":now": &types.AttributeValueMemberN{Value: itoa(ms(now))}}
	} else {
		lp.ConditionExpression = aws.String("job_id = :h")
		lp.ExpressionAttributeValues = map[string]types.AttributeValue{":h": AttrS(holder)}
		tx = append(tx, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: &s.table, Key: JobKey(holder),
			ConditionExpression:       aws.String("attribute_not_exists(pk) OR version = :v"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: itoa(holderVersion)}}}})
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
	if i, ok := FailedCondition(err); ok {
		if i == 1 {
			return &DuplicateError{ID: j.ID}
		}
		return ErrLockHeld
	}
	if err != nil {
		return fmt.Errorf("create unique job %s: %w", j.ID, err)
	}
	return nil
}

// ReviveUnique applies t, a dead letter retry (Revive) of a job enqueued
// under uniqueness key key, in one transaction with taking the key back:
// on condition that it is free (no lock, one whose period ended, or one
// naming the job) or, with holder set, still names holder. Otherwise it
// returns ErrLockHeld and nothing is written.
func (s *Store) ReviveUnique(ctx context.Context, t Transition, key string, now time.Time, holder string) (*job.Job, error) {
	cond := "attribute_not_exists(pk) OR job_id = :me OR until_ms <= :now"
	vals := map[string]types.AttributeValue{":me": AttrS(t.ID), ":now": &types.AttributeValueMemberN{Value: itoa(ms(now))}}
	if holder != "" {
		cond = "job_id = :h"
		vals = map[string]types.AttributeValue{":me": AttrS(t.ID), ":h": AttrS(holder)}
	}
	j, err := s.ApplyWith(ctx, t, &types.Update{TableName: &s.table, Key: uniqueKey(key),
		UpdateExpression: aws.String("SET job_id = :me"), ConditionExpression: aws.String(cond), ExpressionAttributeValues: vals})
	if _, ok := errors.AsType[*WithFailedError](err); ok {
		return nil, ErrLockHeld
	}
	return j, err
}

// UniqueHolder reads the holder of a uniqueness key (consistent read);
// ErrNotFound if none.
func (s *Store) UniqueHolder(ctx context.Context, key string) (UniqueLock, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: uniqueKey(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return UniqueLock{}, fmt.Errorf("read uniqueness key: %w", err)
	}
	if len(out.Item) == 0 {
		return UniqueLock{}, ErrNotFound
	}
	var l struct {
		JobID   string `dynamodbav:"job_id"`
		UntilMS *int64 `dynamodbav:"until_ms"`
	}
	if err := attributevalue.UnmarshalMap(out.Item, &l); err != nil {
		return UniqueLock{}, fmt.Errorf("read uniqueness key: %w", err)
	}
	lock := UniqueLock{JobID: l.JobID}
	if l.UntilMS != nil {
		lock.Until = fromMS(*l.UntilMS)
	}
	return lock, nil
}
