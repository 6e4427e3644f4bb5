package events

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// Event pages (docs/data-model.md "Events"): the stream function writes a
// batch's events as few items as it can, each a page holding the events of
// one window of time (PageWindow), compressed together, in the log (pk
// EVL#<UTC day>#<shard>), in the subjects' histories (EVB#<category>#<second
// of the id's time>#<shard> for UUIDv7 jobs and workflows, EVT#<category>#
// <subject> for others) and, for the QueueIndexed types, in the queue's
// failure pages (EVQ#<queue>). A page's sort key is <window lower bound>#
// <first event id>#<hash of its ids>, so the same events always make the
// same page; readers drop duplicate events by id.
const (
	eventPrefix       = "EVT#"
	eventBucketPrefix = "EVB#"
	eventLogPrefix    = "EVL#"
	eventQueuePrefix  = "EVQ#"
	// SubjectShards is the number of partitions of one second's history
	// bucket. A page goes to the shard its first event hashes to; a history
	// is read from all of them. (Until 2026-11-27 the shard was a hash of
	// the subject, so a batch wrote a page per shard its subjects hashed
	// to, up to eight a second instead of one; those pages are in the same
	// partitions and are read the same way.)
	SubjectShards = 8
	// LogShards is the number of log partitions per day.
	LogShards = 8
	// PageWindow is the span of time one page holds. A query from a cursor
	// re-reads the pages of the cursor's window (at most this much of the
	// log) to find the events after it.
	PageWindow = time.Second
	// maxPageRaw bounds the uncompressed events of one page (a page is an
	// item: at most 400 KB). An event bigger than this is a page of its own.
	maxPageRaw = 256 << 10
	// eventFormat names the page encoding: a JSON array of events,
	// compressed with DEFLATE and eventDict as preset dictionary. Readers
	// refuse another value; a new encoding gets a new value.
	eventFormat = "1"
)

// eventDict is the preset dictionary of event pages: the text events share,
// so that a page of one or two events compresses too. It is part of the
// stored format (eventFormat "1"): never change it, add a new format.
var eventDict = []byte(`"datacontenttype":"application/json","data":{"job_id":"","job_type":"","queue":"default","attempt":1,"max_attempts":3,` +
	`"duration_ms":"result":null,"worker_id":"unknown","priority":0,"workflow_id":"","workflow_type":"chain","step":"error":{"type":"","message":""}},` +
	`{"specversion":"1.0","id":"evt_0000000-0000-7000-8000-000000000000","type":"job.enqueued","job.started","job.completed","job.failed",` +
	`"workflow.step_completed","workflow.completed","source":"ojs://","time":"2026-01-01T00:00:00.000Z","subject":"`)

// attrStoredAt is an event page's write time (Unix ms).
const attrStoredAt = "sa"

// The job table's key and TTL attributes (topology.JobTable).
var (
	attrPK  = topology.JobTable.PartitionKey.Name
	attrSK  = topology.JobTable.SortKey.Name
	attrTTL = topology.JobTable.TTLAttribute
)

// Store reads and writes the event log's pages in the job table (the
// events API, the admin statistics and searches, queue stats). It is safe
// for concurrent use.
type Store struct {
	db    store.DynamoAPI
	table string
}

// NewStore returns the event log kept in table, read and written with db:
// the job store's client and table (store.Store's DB and Table), so that
// the events cost the same requests through the same client. db must also
// be a store.BatchWriter for PutEvents.
func NewStore(db store.DynamoAPI, table string) *Store { return &Store{db: db, table: table} }

// storeClock stamps event pages (a variable for tests).
var storeClock = time.Now

func eventPK(category, subject string) string { return eventPrefix + category + "#" + subject }

// historyBucket is the bucket holding subject's history, the prefix of its
// SubjectShards partitions (historyPKs): its creation second's for a job or
// workflow named by a UUIDv7. ok is false for any other subject, whose
// history is its own partition (eventPK). The bucket is derived from the id
// alone, so a reader knows it without reading the job.
func historyBucket(category, subject string) (prefix string, ok bool) {
	if category != "job" && category != "workflow" || job.ValidateID(subject) != nil {
		return "", false
	}
	sec, _ := uuid.MustParse(subject).Time().UnixTime()
	return eventBucketPrefix + category + "#" + strconv.FormatInt(sec, 10) + "#", true
}

// historyPKs are the partitions a history query of subject reads: its
// bucket's shards, and its own partition (every history before the buckets,
// and the only one of a subject without a bucket).
func historyPKs(category, subject string) []string {
	own := eventPK(category, subject)
	prefix, ok := historyBucket(category, subject)
	if !ok {
		return []string{own}
	}
	pks := make([]string, 0, SubjectShards+1)
	for shard := range SubjectShards {
		pks = append(pks, prefix+strconv.Itoa(shard))
	}
	return append(pks, own)
}

// pageShard spreads pages over n partitions by their first event.
func pageShard(firstID string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(firstID))
	return int(h.Sum32() % uint32(n))
}

func eventQueuePK(queue string) string { return eventQueuePrefix + queue }

// TenantPK is the partition of a tenant's event pages: every event of its
// jobs, which a Filter with Tenant reads (a tenant's stats and its
// scoped events API).
func TenantPK(tenant string) string { return eventPK("tenant", tenant) }

// QueueIndexed are the event types also paged per queue (pk EVQ#<queue>):
// the ends of attempts other than success, rare next to the completions
// that fill the log, so that counting one queue's failures reads only
// them.
var QueueIndexed = []string{JobFailed, JobRetrying, JobDiscarded, JobCancelled, JobExpired}

// queuePages returns the pk of the queue pages that hold every event f
// can match: f names one queue and only QueueIndexed types (no patterns).
func queuePages(f Filter) (string, bool) {
	if f.SubjectID != "" || len(f.Queues) != 1 || len(f.Types) == 0 {
		return "", false
	}
	for _, t := range f.Types {
		if !slices.Contains(QueueIndexed, t) {
			return "", false
		}
	}
	return eventQueuePK(f.Queues[0]), true
}

func eventDay(t time.Time) string { return t.UTC().Format("20060102") }

func eventLogPK(day string, shard int) string {
	return eventLogPrefix + day + "#" + strconv.Itoa(shard)
}

// windowKey is the lower bound of the window holding t: every event of the
// window sorts at or after it, before the next window's.
func windowKey(t time.Time) string { return LowerBound(t.UTC().Truncate(PageWindow)) }

var windowKeyLen = len(windowKey(time.Unix(0, 0)))

// PutEvents stores events as pages of the log and of their subjects'
// histories, with a TTL of ttl after the latest event of each page. Writing
// the same events again in the same groups rewrites the same pages; any
// other grouping adds duplicates the readers drop.
func (s *Store) PutEvents(ctx context.Context, evs []Event, ttl time.Duration) error {
	seen := make(map[string]bool, len(evs))
	type raw struct {
		ev   *Event
		body []byte
	}
	// pk ("" for the log) + "\x00" + window key -> events; a bucket's pk
	// is its prefix: the page's shard is picked by pagePK.
	groups := map[string][]raw{}
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
		w := windowKey(e.At())
		page := func(pk string) { groups[pk+"\x00"+w] = append(groups[pk+"\x00"+w], raw{e, body}) }
		page("")
		hk, ok := historyBucket(e.SubjectCategory(), e.Subject)
		if !ok {
			hk = eventPK(e.SubjectCategory(), e.Subject)
		}
		page(hk)
		if q := e.Queue(); q != "" && slices.Contains(QueueIndexed, e.Type) {
			page(eventQueuePK(q))
		}
		if t := e.Tenant(); t != "" {
			page(TenantPK(t)) // a tenant's events are paged together too
		}
	}
	var items []map[string]ddb.AttributeValue
	storedAt := storeClock()
	for key, group := range groups {
		pk, w, _ := strings.Cut(key, "\x00")
		sort.Slice(group, func(i, j int) bool { return group[i].ev.ID < group[j].ev.ID })
		for len(group) > 0 {
			n, size := 0, 0
			for n < len(group) && (n == 0 || size+len(group[n].body) <= maxPageRaw) {
				size += len(group[n].body) + 1
				n++
			}
			bodies := make([][]byte, n)
			latest := time.Time{}
			h := fnv.New64a()
			for i, r := range group[:n] {
				bodies[i] = r.body
				h.Write([]byte(r.ev.ID))
				if at := r.ev.At(); at.After(latest) {
					latest = at
				}
			}
			z, err := encodePage(bodies)
			if err != nil {
				return err
			}
			first := group[0].ev
			items = append(items, map[string]ddb.AttributeValue{
				attrPK: store.AttrS(pagePK(pk, first)),
				attrSK: store.AttrS(w + "#" + first.ID + "#" + strconv.FormatUint(h.Sum64(), 36)),
				"z":    &ddb.AttributeValueMemberB{Value: z},
				"n":    store.AttrN(int64(n)),
				"ef":   store.AttrS(eventFormat),
				// When the page was stored: a tailing reader's cursor
				// finds pages stored after its read (Filter.Fresh).
				attrStoredAt: store.AttrN(storedAt.UnixMilli()),
				attrTTL:      store.AttrN(latest.Add(ttl).Unix()),
			})
			group = group[n:]
		}
	}
	return store.BatchPut(ctx, s.db, s.table, items)
}

// pagePK is the partition of a page of group pk ("" for the log) whose
// first event is first: a log or bucket page goes to the shard first
// hashes to.
func pagePK(pk string, first *Event) string {
	switch {
	case pk == "":
		return eventLogPK(eventDay(first.At()), pageShard(first.ID, LogShards))
	case strings.HasPrefix(pk, eventBucketPrefix):
		return pk + strconv.Itoa(pageShard(first.ID, SubjectShards))
	}
	return pk
}

var pageWriters = sync.Pool{New: func() any {
	w, err := flate.NewWriterDict(nil, flate.DefaultCompression, eventDict)
	if err != nil {
		panic(err) // only for an invalid level
	}
	return w
}}

// encodePage compresses the JSON array of bodies.
func encodePage(bodies [][]byte) ([]byte, error) {
	var buf bytes.Buffer
	w := pageWriters.Get().(*flate.Writer)
	defer pageWriters.Put(w)
	w.Reset(&buf)
	w.Write([]byte{'['})
	for i, b := range bodies {
		if i > 0 {
			w.Write([]byte{','})
		}
		w.Write(b)
	}
	w.Write([]byte{']'})
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("compress events: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodePage returns the events of a stored event page, an item of the
// table as PutEvents writes it (ok is false for an item that is not one; err
// for a page of an unknown format or that does not decode).
func DecodePage(av map[string]ddb.AttributeValue) (evs []Event, ok bool, err error) {
	return decodeEventPage(av, nil)
}

// decodeEventPage is DecodePage that returns no events, without
// parsing them, when the page's JSON does not contain mention (a history
// query's subject: a bucket page holds every subject of its second).
func decodeEventPage(av map[string]ddb.AttributeValue, mention []byte) (evs []Event, ok bool, err error) {
	z, _ := av["z"].(*ddb.AttributeValueMemberB)
	pk, _ := av[attrPK].(*ddb.AttributeValueMemberS)
	if z == nil || pk == nil || !(strings.HasPrefix(pk.Value, eventPrefix) || strings.HasPrefix(pk.Value, eventBucketPrefix) ||
		strings.HasPrefix(pk.Value, eventLogPrefix) || strings.HasPrefix(pk.Value, eventQueuePrefix)) {
		return nil, false, nil
	}
	if f, _ := av["ef"].(*ddb.AttributeValueMemberS); f == nil || f.Value != eventFormat {
		return nil, true, fmt.Errorf("event page %s: unknown format", pk.Value)
	}
	r := flate.NewReaderDict(bytes.NewReader(z.Value), eventDict)
	defer r.Close()
	raw, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return nil, true, fmt.Errorf("event page %s: %w", pk.Value, err)
	}
	if mention != nil && !bytes.Contains(raw, mention) {
		return nil, true, nil
	}
	if err := json.Unmarshal(raw, &evs); err != nil {
		return nil, true, fmt.Errorf("event page %s: %w", pk.Value, err)
	}
	return evs, true, nil
}

// QueryEvents returns one page of the events f selects, in id (time)
// order: at most f.Limit events (DefaultLimit when it is 0 or above
// MaxLimit) and, with f.MaxBytes set, at most that many bytes of JSON (at
// least one event). now bounds the days read. Errors are the DynamoDB
// client's and those of pages that do not decode.
func (s *Store) QueryEvents(ctx context.Context, f Filter, now time.Time) (*Page, error) {
	limit := f.Limit
	if limit <= 0 || limit > MaxLimit {
		limit = DefaultLimit
	}
	start := f.Start(now)
	if !f.Until.IsZero() && start >= LowerBound(f.Until) {
		return &Page{Events: []Event{}, Cursor: f.After}, nil
	}
	var found []Event
	var err error
	seen := &seenPages{now: now}
	switch pk, queued := queuePages(f); {
	case f.SubjectID != "":
		// Its bucket's shards and, for pages stored before the buckets
		// (until their TTL ends), the subject's own partition.
		found, err = s.readMerged(ctx, historyPKs(f.SubjectCategory, f.SubjectID), start, f, limit+1, seen)
	case f.Tenant != "":
		found, err = s.readPages(ctx, TenantPK(f.Tenant), start, f, limit+1, seen)
	case queued:
		found, err = s.readPages(ctx, pk, start, f, limit+1, seen)
	default:
		from, _ := ParseID(start)
		end := now
		if !f.Until.IsZero() && f.Until.Before(end) {
			end = f.Until
		}
		for day := from.Truncate(24 * time.Hour); err == nil && !day.After(end) && len(found) <= limit; day = day.Add(24 * time.Hour) {
			var got []Event
			got, err = s.queryEventDay(ctx, eventDay(day), start, f, limit+1-len(found), seen)
			found = append(found, got...)
		}
	}
	if err != nil {
		return nil, err
	}
	page := &Page{Events: found}
	if len(found) > limit {
		page.Events, page.HasMore = found[:limit], true
	}
	if n := eventsWithin(page.Events, f.MaxBytes); n < len(page.Events) {
		page.Events, page.HasMore = page.Events[:n], true
	}
	page.Cursor = f.NextCursor(page.Events, page.HasMore, now, seen.list())
	if page.Events == nil {
		page.Events = []Event{}
	}
	return page, nil
}

// eventsWithin is how many of evs, from the first, fit budget bytes of
// JSON (at least one; all of them for budget 0).
func eventsWithin(evs []Event, budget int) int {
	if budget <= 0 {
		return len(evs)
	}
	total := 0
	for i := range evs {
		b, err := json.Marshal(&evs[i])
		if err != nil {
			continue // counted as nothing: an event read from JSON encodes
		}
		if total += len(b) + 1; i > 0 && total > budget {
			return i
		}
	}
	return len(evs)
}

// queryEventDay merges the day's log shards.
func (s *Store) queryEventDay(ctx context.Context, day, start string, f Filter, want int, seen *seenPages) ([]Event, error) {
	pks := make([]string, LogShards)
	for shard := range LogShards {
		pks[shard] = eventLogPK(day, shard)
	}
	return s.readMerged(ctx, pks, start, f, want, seen)
}

// readMerged reads partitions pks in parallel, each up to want matches,
// and keeps the first want overall, in id order without duplicates.
func (s *Store) readMerged(ctx context.Context, pks []string, start string, f Filter, want int, seen *seenPages) ([]Event, error) {
	found := make([][]Event, len(pks))
	errs := make([]error, len(pks))
	var wg sync.WaitGroup
	for i, pk := range pks {
		wg.Go(func() { found[i], errs[i] = s.readPages(ctx, pk, start, f, want, seen) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := sortUnique(slices.Concat(found...))
	if len(out) > want {
		out = out[:want]
	}
	return out, nil
}

// readPages reads the pages of one partition from start's window upwards
// and returns, in id order without duplicates, up to want events after
// start (and before f.Until) that f matches. Pages are read window by
// window: a window's events all sort before the next window's, so once a
// window ends with want matches, no later page can change the answer.
func (s *Store) readPages(ctx context.Context, pk, start string, f Filter, want int, seen *seenPages) ([]Event, error) {
	key := expression.Key(attrPK).Equal(expression.Value(pk))
	lo := "evt_"
	if t, ok := ParseID(start); ok {
		lo = windowKey(t)
	}
	if !f.Until.IsZero() {
		// Pages of the window holding Until and earlier ('$' follows '#').
		key = key.And(expression.Key(attrSK).Between(expression.Value(lo), expression.Value(windowKey(f.Until)+"$")))
	} else {
		key = key.And(expression.Key(attrSK).GreaterThanEqual(expression.Value(lo)))
	}
	expr, err := expression.NewBuilder().WithKeyCondition(key).Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.QueryInput{TableName: &s.table, KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()}
	var (
		out    []Event
		window string
		// A subject named by a valid id is written as it is in JSON: a page
		// without it holds none of its events.
		mention []byte
	)
	if f.SubjectID != "" && job.ValidateID(f.SubjectID) == nil {
		mention = []byte(`"` + f.SubjectID + `"`)
	}
	enough := func() bool {
		out = sortUnique(out)
		return len(out) >= want
	}
	for {
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("query events %s: %w", pk, err)
		}
		for _, av := range res.Items {
			sk, _ := av[attrSK].(*ddb.AttributeValueMemberS)
			if sk == nil || len(sk.Value) < windowKeyLen {
				continue
			}
			if w := sk.Value[:windowKeyLen]; w != window {
				if window != "" && enough() {
					return out[:want], nil
				}
				window = w
			}
			evs, ok, err := decodeEventPage(av, mention)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			var storedAt time.Time // zero for pages written before it was kept
			if n, ok := av[attrStoredAt].(*ddb.AttributeValueMemberN); ok {
				if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
					storedAt = time.UnixMilli(ms)
				}
			}
			page := PageHash(pk, sk.Value, storedAt)
			seen.add(page, storedAt)
			for i := range evs {
				e := &evs[i]
				if e.ID <= start || !f.Fresh(e.ID, storedAt, page) || !f.Matches(e) ||
					// A bucket holds the histories of other subjects.
					f.SubjectID != "" && (e.Subject != f.SubjectID || e.SubjectCategory() != f.SubjectCategory) {
					continue
				}
				if !f.Until.IsZero() && !e.At().Before(f.Until) {
					continue
				}
				out = append(out, *e)
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
	if enough() {
		out = out[:want]
	}
	return out, nil
}

// seenPages collects the pages a query read that were stored within
// StoreMargin before it, for its cursor (CursorState.Seen).
type seenPages struct {
	now    time.Time
	mu     sync.Mutex
	hashes []uint64
	over   bool
}

func (p *seenPages) add(h uint64, storedAt time.Time) {
	if !AtRisk(storedAt, p.now) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Contains(p.hashes, h) {
		return
	}
	if len(p.hashes) == MaxSeen {
		p.over = true
		return
	}
	p.hashes = append(p.hashes, h)
}

// list is the pages seen, or nil if there were too many to name.
func (p *seenPages) list() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.over {
		return nil
	}
	return p.hashes
}

// sortUnique sorts events by id and drops repeated ids.
func sortUnique(evs []Event) []Event {
	sort.Slice(evs, func(i, j int) bool { return evs[i].ID < evs[j].ID })
	return slices.CompactFunc(evs, func(a, b Event) bool { return a.ID == b.ID })
}
