package store

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// Event items (see docs/data-model.md): pk EVT#<category>#<subject>, sk the
// event id, so one job's or workflow's events are one Query; the events
// index (ev_pk = ev#<UTC day>#<shard>, ev_sk = event id) orders all events
// by time for the events API. Subjects are spread over EventShards index
// partitions per day so that no partition takes every event write.
const (
	eventPrefix = "EVT#"
	// EventShards is the number of index partitions per day.
	EventShards = 8
)

func eventPK(category, subject string) string { return eventPrefix + category + "#" + subject }

func eventDay(t time.Time) string { return t.UTC().Format("20060102") }

func eventShard(subject string) int {
	h := fnv.New32a()
	h.Write([]byte(subject))
	return int(h.Sum32() % EventShards)
}

func eventIndexPK(day string, shard int) string { return "ev#" + day + "#" + strconv.Itoa(shard) }

// PutEvents stores events (idempotently: an event's key is its id, and the
// same change always derives the same event) with a TTL of ttl after the
// event time. Duplicates within evs are written once.
func (s *Store) PutEvents(ctx context.Context, evs []events.Event, ttl time.Duration) error {
	seen := make(map[string]bool, len(evs))
	items := make([]map[string]types.AttributeValue, 0, len(evs))
	for i := range evs {
		e := &evs[i]
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		body, err := e.Marshal()
		if err != nil {
			return fmt.Errorf("encode event %s: %w", e.ID, err)
		}
		at := e.At()
		it := map[string]types.AttributeValue{
			attrPK:  &types.AttributeValueMemberS{Value: eventPK(e.SubjectCategory(), e.Subject)},
			attrSK:  &types.AttributeValueMemberS{Value: e.ID},
			"ev_pk": &types.AttributeValueMemberS{Value: eventIndexPK(eventDay(at), eventShard(e.Subject))},
			"ev_sk": &types.AttributeValueMemberS{Value: e.ID},
			"type":  &types.AttributeValueMemberS{Value: e.Type},
			"body":  &types.AttributeValueMemberS{Value: string(body)},
			"ttl":   &types.AttributeValueMemberN{Value: itoa(at.Add(ttl).Unix())},
		}
		if q := e.Queue(); q != "" {
			it["queue"] = &types.AttributeValueMemberS{Value: q}
		}
		if jt := e.JobType(); jt != "" {
			it["job_type"] = &types.AttributeValueMemberS{Value: jt}
		}
		items = append(items, it)
	}
	return s.batchPut(ctx, items)
}

// QueryEvents returns one page of the events f selects, in id (time)
// order. now bounds the days read.
func (s *Store) QueryEvents(ctx context.Context, f events.Filter, now time.Time) (*events.Page, error) {
	limit := f.Limit
	if limit <= 0 || limit > events.MaxLimit {
		limit = events.DefaultLimit
	}
	start := f.Start(now)
	if !f.Until.IsZero() && start >= events.LowerBound(f.Until) {
		return &events.Page{Events: []events.Event{}, Cursor: f.After}, nil
	}
	var found []events.Event
	var err error
	if f.SubjectID != "" {
		found, err = s.queryEventPartition(ctx, "", eventPK(f.SubjectCategory, f.SubjectID), start, f, limit+1)
		if err != nil {
			return nil, err
		}
	} else {
		from, _ := events.ParseID(start)
		end := now
		if !f.Until.IsZero() && f.Until.Before(end) {
			end = f.Until
		}
		for day := from.Truncate(24 * time.Hour); !day.After(end) && len(found) <= limit; day = day.Add(24 * time.Hour) {
			got, err := s.queryEventDay(ctx, eventDay(day), start, f, limit+1-len(found))
			if err != nil {
				return nil, err
			}
			found = append(found, got...)
		}
	}
	page := &events.Page{Events: found, Cursor: f.After}
	if len(found) > limit {
		page.Events, page.HasMore = found[:limit], true
	}
	if n := len(page.Events); n > 0 {
		page.Cursor = page.Events[n-1].ID
	}
	if page.Events == nil {
		page.Events = []events.Event{}
	}
	return page, nil
}

// queryEventDay merges the day's index shards: each shard is read in
// parallel up to want matches, then the first want overall are kept.
func (s *Store) queryEventDay(ctx context.Context, day, start string, f events.Filter, want int) ([]events.Event, error) {
	var (
		mu       sync.Mutex
		all      []events.Event
		firstErr error
		wg       sync.WaitGroup
	)
	for shard := range EventShards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.queryEventPartition(ctx, topology.IndexEvents, eventIndexPK(day, shard), start, f, want)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			all = append(all, got...)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	if len(all) > want {
		all = all[:want]
	}
	return all, nil
}

// queryEventPartition reads one partition (of the table when index is "",
// else of the index) from start upwards until want events matched.
func (s *Store) queryEventPartition(ctx context.Context, index, pk, start string, f events.Filter, want int) ([]events.Event, error) {
	pkName, skName := attrPK, attrSK
	if index != "" {
		pkName, skName = "ev_pk", "ev_sk"
	}
	key := expression.Key(pkName).Equal(expression.Value(pk))
	if start != "" {
		key = key.And(expression.Key(skName).GreaterThan(expression.Value(start)))
	}
	if !f.Until.IsZero() {
		key = expression.Key(pkName).Equal(expression.Value(pk)).
			And(expression.Key(skName).Between(expression.Value(maxStr(start, "evt_")), expression.Value(events.LowerBound(f.Until))))
	}
	b := expression.NewBuilder().WithKeyCondition(key)
	if len(f.Types)+len(f.Queues)+len(f.JobTypes) > 0 {
		b = b.WithFilter(filterCond(f))
	}
	expr, err := b.Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.QueryInput{TableName: &s.table, KeyConditionExpression: expr.KeyCondition(), FilterExpression: expr.Filter(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), Limit: aws.Int32(int32(max(want, 25)))}
	if index != "" {
		in.IndexName = aws.String(index)
	}
	var out []events.Event
	for {
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("query events %s: %w", pk, err)
		}
		for _, av := range res.Items {
			body, ok := av["body"].(*types.AttributeValueMemberS)
			if !ok {
				continue
			}
			var e events.Event
			if err := json.Unmarshal([]byte(body.Value), &e); err != nil {
				return nil, fmt.Errorf("decode event: %w", err)
			}
			if e.ID == start || !f.Matches(&e) {
				continue
			}
			if !f.Until.IsZero() && !e.At().Before(f.Until) {
				continue
			}
			out = append(out, e)
			if len(out) >= want {
				return out, nil
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

func maxStr(a, b string) string {
	if a > b {
		return a
	}
	return b
}

// filterCond is the filter expression of f's type, queue and job type
// dimensions (at least one must be set).
func filterCond(f events.Filter) expression.ConditionBuilder {
	var conds []expression.ConditionBuilder
	if len(f.Types) > 0 {
		var any []expression.ConditionBuilder
		for _, t := range f.Types {
			if p, ok := cutStar(t); ok {
				any = append(any, expression.Name("type").BeginsWith(p))
			} else {
				any = append(any, expression.Name("type").Equal(expression.Value(t)))
			}
		}
		conds = append(conds, or(any))
	}
	for _, d := range []struct {
		name string
		vals []string
	}{{"queue", f.Queues}, {"job_type", f.JobTypes}} {
		if len(d.vals) == 0 {
			continue
		}
		var any []expression.ConditionBuilder
		for _, v := range d.vals {
			any = append(any, expression.Name(d.name).Equal(expression.Value(v)))
		}
		conds = append(conds, or(any))
	}
	c := conds[0]
	for _, x := range conds[1:] {
		c = c.And(x)
	}
	return c
}

func or(cs []expression.ConditionBuilder) expression.ConditionBuilder {
	if len(cs) == 1 {
		return cs[0]
	}
	return expression.Or(cs[0], cs[1], cs[2:]...)
}

func cutStar(t string) (string, bool) {
	if len(t) > 0 && t[len(t)-1] == '*' {
		return t[:len(t)-1], true
	}
	return "", false
}
