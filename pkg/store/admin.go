package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/opaque"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// The operator's reads (pkg/admin), none of which scans the table.

// Listing names one index partition the Admin API lists jobs from.
type Listing int

// The partitions a job listing reads.
const (
	// ListAvailable is a queue's available jobs: the pull-mode ones in
	// fetch order (ready index), then the push-mode ones by their
	// redelivery check (due index).
	ListAvailable Listing = iota
	// ListDead is a queue's discarded jobs, newest first (ready index,
	// dead#<queue>).
	ListDead
	// ListWaiting is a queue's due index partition by due time: scheduled,
	// retryable and active jobs and push-mode redelivery checks.
	ListWaiting
)

// partitions names the index, its partition and sort attributes, the
// partitions of the queue (one per shard) and the listing's direction.
func (l Listing) partitions(queue string) (index, keyName, sortName string, keys []string, forward bool) {
	switch l {
	case ListAvailable:
		return topology.IndexReady, attrReadyPK, attrReadySK, readyKeys(queue), true
	case ListDead:
		return topology.IndexReady, attrReadyPK, attrReadySK, []string{deadPrefix + queue}, false
	default:
		return topology.IndexDue, attrDuePK, attrDueAt, dueKeys(queue), true
	}
}

// IndexPage is one page of an index listing: the items read (unfiltered)
// and the cursor of the next page ("" after the last).
type IndexPage struct {
	Items  []Item
	Cursor string
}

// ListQueue reads up to limit items of one queue's index partitions from
// cursor (a previous IndexPage.Cursor, or "" to start), merged across the
// shards in index order, filtered on states when set. A page may hold
// fewer than limit items and still have a cursor.
func (s *Store) ListQueue(ctx context.Context, l Listing, queue string, states []job.State, limit int, cursor string) (IndexPage, error) {
	if l != ListAvailable {
		return s.listIndex(ctx, l, queue, states, false, limit, cursor)
	}
	// Two parts: the ready index without push-mode jobs (one written before
	// they left it is also in the due index), then the due index's
	// available jobs. A cursor into the second starts with pushCursor.
	var page IndexPage
	if rest, ok := strings.CutPrefix(cursor, pushCursor); ok {
		cursor = rest
	} else {
		var err error
		if page, err = s.listIndex(ctx, ListAvailable, queue, states, true, limit, cursor); err != nil || page.Cursor != "" {
			return page, err
		}
		if len(page.Items) >= limit {
			page.Cursor = pushCursor
			return page, nil
		}
		cursor = ""
	}
	if len(states) > 0 && !slices.Contains(states, job.Available) {
		return page, nil
	}
	push, err := s.listIndex(ctx, ListWaiting, queue, []job.State{job.Available}, false, limit-len(page.Items), cursor)
	if err != nil {
		return IndexPage{}, err
	}
	page.Items = append(page.Items, push.Items...)
	if push.Cursor != "" {
		page.Cursor = pushCursor + push.Cursor
	}
	return page, nil
}

// pushCursor starts a ListAvailable cursor into its push-mode part (not a
// character of the base64url alphabet the shard cursors are written in).
const pushCursor = "."

// listIndex is ListQueue of one index listing; pullOnly leaves out
// push-mode jobs.
func (s *Store) listIndex(ctx context.Context, l Listing, queue string, states []job.State, pullOnly bool, limit int, cursor string) (IndexPage, error) {
	index, keyName, sortName, keys, forward := l.partitions(queue)
	starts := make([]string, len(keys)) // per shard: "" from the start, "-" done, else its cursor
	if cursor != "" {
		if err := decodeShardCursor(cursor, starts); err != nil {
			return IndexPage{}, err
		}
	}
	type part struct {
		items []map[string]types.AttributeValue
		last  map[string]types.AttributeValue
	}
	parts, err := EachShard(ctx, keys, func(ctx context.Context, pk string) (part, error) {
		i := slices.Index(keys, pk)
		if starts[i] == "-" {
			return part{}, nil
		}
		in := &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String(index),
			KeyConditionExpression:    aws.String("#k = :k"),
			ExpressionAttributeNames:  map[string]string{"#k": keyName},
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": AttrS(pk)},
			ScanIndexForward:          aws.Bool(forward), Limit: aws.Int32(int32(limit))}
		var filters []string
		if len(states) > 0 {
			in.ExpressionAttributeNames["#s"] = attrState
			var ph []string
			for i, st := range states {
				p := fmt.Sprintf(":s%d", i)
				ph = append(ph, p)
				in.ExpressionAttributeValues[p] = AttrS(string(st))
			}
			filters = append(filters, "#s IN ("+strings.Join(ph, ", ")+")")
		}
		if pullOnly {
			in.ExpressionAttributeNames["#p"] = attrPush
			in.ExpressionAttributeValues[":t"] = &types.AttributeValueMemberBOOL{Value: true}
			filters = append(filters, "(attribute_not_exists(#p) OR #p <> :t)")
		}
		if len(filters) > 0 {
			in.FilterExpression = aws.String(strings.Join(filters, " AND "))
		}
		if starts[i] != "" {
			k, err := DecodeCursor(starts[i])
			if err != nil {
				return part{}, err
			}
			in.ExclusiveStartKey = k
		}
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return part{}, fmt.Errorf("query %s: %w", index, err)
		}
		return part{items: out.Items, last: out.LastEvaluatedKey}, nil
	})
	if err != nil {
		return IndexPage{}, err
	}
	// Merge the shards' pages in index order (each shard's own order kept,
	// ties included), up to limit, and no further than the first point
	// where a shard that has more could hold an earlier item.
	before := func(a, b string) bool { return (forward && a < b) || (!forward && a > b) }
	var bound string
	for _, p := range parts {
		if b := sortValue(p.last, sortName); len(p.last) > 0 && (bound == "" || before(b, bound)) {
			bound = b
		}
	}
	taken := make([]int, len(keys))
	var page IndexPage
	for len(page.Items) < limit {
		best, bestV := -1, ""
		for i, p := range parts {
			if taken[i] < len(p.items) {
				if v := sortValue(p.items[taken[i]], sortName); best < 0 || before(v, bestV) {
					best, bestV = i, v
				}
			}
		}
		if best < 0 || (bound != "" && before(bound, bestV)) {
			break
		}
		it, ok, err := DecodeItem(parts[best].items[taken[best]])
		if err != nil {
			return IndexPage{}, err
		}
		if ok {
			it.Partial = true
			page.Items = append(page.Items, it)
		}
		taken[best]++
	}
	next := make([]string, len(keys))
	more := false
	for i, p := range parts {
		switch {
		case starts[i] == "-" || (taken[i] == len(p.items) && len(p.last) == 0):
			next[i] = "-"
		case taken[i] == len(p.items):
			next[i] = EncodeCursor(p.last)
		case taken[i] > 0:
			next[i] = EncodeCursor(indexKey(p.items[taken[i]-1], keyName, sortName))
		default:
			next[i] = starts[i]
		}
		more = more || next[i] != "-"
	}
	if more {
		page.Cursor = encodeShardCursor(next)
	}
	if l == ListDead {
		// Dead letters are shown with their error history, which the
		// index does not project.
		if page.Items, err = s.WholeJobs(ctx, page.Items); err != nil {
			return IndexPage{}, err
		}
	}
	return page, nil
}

// WholeJobs replaces index items by the jobs read by key, in the same order;
// a job deleted since the index was read is left out.
func (s *Store) WholeJobs(ctx context.Context, items []Item) ([]Item, error) {
	if len(items) == 0 {
		return items, nil
	}
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.Job.ID
	}
	byID, err := s.BatchGetJobs(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := items[:0]
	for _, it := range items {
		if j, ok := byID[it.Job.ID]; ok {
			it.Job, it.Partial = j, false
			out = append(out, it)
		}
	}
	return out, nil
}

// sortValue is an index item's sort attribute as a string that orders like
// the attribute (numbers zero-padded). Items of equal value keep the order
// their shard returned them in.
func sortValue(av map[string]types.AttributeValue, sortName string) string {
	switch a := av[sortName].(type) {
	case *types.AttributeValueMemberS:
		return a.Value
	case *types.AttributeValueMemberN:
		return fmt.Sprintf("%020s", a.Value)
	}
	return ""
}

// indexKey is the exclusive start key of an index query at item av.
func indexKey(av map[string]types.AttributeValue, keyName, sortName string) map[string]types.AttributeValue {
	k := map[string]types.AttributeValue{}
	for _, n := range []string{attrPK, attrSK, keyName, sortName} {
		if v, ok := av[n]; ok {
			k[n] = v
		}
	}
	return k
}

// encodeShardCursor and decodeShardCursor carry one position per shard.
func encodeShardCursor(pos []string) string { return opaque.Encode(pos) }

func decodeShardCursor(c string, into []string) error {
	var pos []string
	if !opaque.Decode(c, &pos) || len(pos) != len(into) {
		return ErrBadCursor
	}
	copy(into, pos)
	return nil
}

// ErrBadCursor is returned for a cursor this store did not produce.
var ErrBadCursor = errors.New("bad cursor")

// EncodeCursor turns a DynamoDB key (strings and numbers only, as every key
// of this table is) into an opaque URL-safe cursor.
func EncodeCursor(key map[string]types.AttributeValue) string {
	m := map[string]string{}
	for k, v := range key {
		switch a := v.(type) {
		case *types.AttributeValueMemberS:
			m[k] = "S" + a.Value
		case *types.AttributeValueMemberN:
			m[k] = "N" + a.Value
		}
	}
	return opaque.Encode(m)
}

// DecodeCursor is the inverse of EncodeCursor; it returns ErrBadCursor for
// anything else.
func DecodeCursor(c string) (map[string]types.AttributeValue, error) {
	var m map[string]string
	if !opaque.Decode(c, &m) || len(m) == 0 || len(m) > 4 {
		return nil, ErrBadCursor
	}
	key := map[string]types.AttributeValue{}
	for k, v := range m {
		switch {
		case strings.HasPrefix(v, "S") && len(v) > 1:
			key[k] = AttrS(v[1:])
		case strings.HasPrefix(v, "N") && len(v) > 1:
			key[k] = &types.AttributeValueMemberN{Value: v[1:]}
		default:
			return nil, ErrBadCursor
		}
	}
	return key, nil
}

// CountStates counts one queue's index partition by job state, reading at
// most max index entries if max > 0 (then capped is true: some were left
// unread). Each job is counted once: ListAvailable counts the pull-mode
// available jobs, ListWaiting the push-mode ones.
func (s *Store) CountStates(ctx context.Context, l Listing, queue string, max int) (counts map[job.State]int, capped bool, err error) {
	index, keyName, _, keys, _ := l.partitions(queue)
	counts = map[job.State]int{}
	read := 0
	for _, key := range keys {
		in := &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String(index),
			KeyConditionExpression:    aws.String("#k = :k"),
			ExpressionAttributeNames:  map[string]string{"#k": keyName, "#s": attrState, "#p": attrPush},
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": AttrS(key)},
			ProjectionExpression:      aws.String("#s, #p")}
		for {
			if max > 0 && read >= max {
				return counts, true, nil
			}
			page, err := s.db.Query(ctx, in)
			if err != nil {
				return counts, false, fmt.Errorf("count %s: %w", key, err)
			}
			for _, it := range page.Items {
				st, _ := it[attrState].(*types.AttributeValueMemberS)
				push, _ := it[attrPush].(*types.AttributeValueMemberBOOL)
				// A push-mode job in ready (written before they left it) is counted from due.
				if st != nil && (push == nil || !push.Value || l != ListAvailable) {
					counts[job.State(st.Value)]++
				}
			}
			read += len(page.Items)
			if len(page.LastEvaluatedKey) == 0 {
				break
			}
			in.ExclusiveStartKey = page.LastEvaluatedKey
		}
	}
	return counts, false, nil
}

// DeleteFinished deletes a completed or cancelled job for good, on the
// condition that it is still in the state read (else ConflictError).
// pkg/deadletter deletes discarded jobs.
func (s *Store) DeleteFinished(ctx context.Context, id string, state job.State) error {
	if state != job.Completed && state != job.Cancelled {
		return fmt.Errorf("delete job %s: only completed or cancelled jobs, not %s", id, state)
	}
	return s.deleteInState(ctx, id, state)
}

// DeleteWaiting deletes a job that is available, scheduled, retryable or
// pending and not part of a workflow (a queue purge), on the condition
// that it is still in that state and unclaimed.
func (s *Store) DeleteWaiting(ctx context.Context, id string, state job.State) error {
	switch state {
	case job.Available, job.Scheduled, job.Retryable, job.Pending:
	default:
		return fmt.Errorf("delete job %s: not a waiting state: %s", id, state)
	}
	return s.deleteInState(ctx, id, state)
}

func (s *Store) deleteInState(ctx context.Context, id string, state job.State) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: JobKey(id),
		ConditionExpression:                 aws.String("#s = :s AND attribute_not_exists(wf_id)"),
		ExpressionAttributeNames:            map[string]string{"#s": attrState},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":s": AttrS(string(state))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		return conflict(ccf.Item, Transition{ID: id, To: "deleted"})
	}
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	return nil
}

// QueueCounts are a queue's jobs per waiting state, counted from the
// indexes (exact at the time of reading).
type QueueCounts struct {
	Available, Active, Scheduled, Retryable, Discarded int
}

// doneKeys are the "done" partitions of a queue: the completing write
// copies the job's due partition (its queue's due shards, by job id; no
// key takes more than its share of a queue's completions), or the queue
// name when the job had no due entry (and before 2026-11-28).
func doneKeys(queue string) []string { return append(dueKeys(queue), queue) }

// CountCompleted counts a queue's jobs completed at or after since, from
// the keys-only "done" index (1 read unit per 4 KB of keys: about 40,000
// completions per page), every partition at once.
func (s *Store) CountCompleted(ctx context.Context, queue string, since time.Time) (int, error) {
	counts, err := EachShard(ctx, doneKeys(queue), func(ctx context.Context, pk string) (int, error) {
		return CountAll(ctx, s.db, &dynamodb.QueryInput{TableName: &s.table, IndexName: aws.String(topology.IndexDone),
			KeyConditionExpression:    aws.String("#k = :q AND #s >= :since"),
			ExpressionAttributeNames:  map[string]string{"#k": attrDonePK, "#s": attrDoneSK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":q": AttrS(pk), ":since": AttrS(fmt.Sprintf("%013d", ms(since)))}})
	})
	if err != nil {
		return 0, fmt.Errorf("count completions of queue %s: %w", queue, err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n, nil
}

// CountQueue counts a queue's jobs by state: the available pull-mode ones
// and the discarded ones from the ready index, the available push-mode,
// active, scheduled and retryable ones from the due index. It reads every
// index entry of the queue, so its cost grows with the backlog.
func (s *Store) CountQueue(ctx context.Context, queue string) (QueueCounts, error) {
	n := map[job.State]int{}
	for _, l := range []Listing{ListAvailable, ListDead, ListWaiting} {
		counts, _, err := s.CountStates(ctx, l, queue, 0)
		if err != nil {
			return QueueCounts{}, fmt.Errorf("count queue %s: %w", queue, err)
		}
		for st, c := range counts {
			n[st] += c
		}
	}
	return QueueCounts{n[job.Available], n[job.Active], n[job.Scheduled], n[job.Retryable], n[job.Discarded]}, nil
}
