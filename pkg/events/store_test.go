package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// logTable returns the event log of a new table, read and written with
// the job store's client, and the table's name.
func logTable(t *testing.T) (*events.Store, string) {
	t.Helper()
	st, _ := testenv.Table(t)
	return events.NewStore(st.DB(), st.Table()), st.Table()
}

func ev(typ, subject, queue string, at time.Time, seq int64) events.Event {
	return events.New("ojs://test/engine", typ, subject, at, seq, map[string]any{"job_type": "t." + queue, "queue": queue, "job_id": subject}, "k")
}

// bigResultEvent is a job.completed event of subject at at whose result
// is 150 KB of incompressible-looking hex, different for each i.
func bigResultEvent(subject, queue string, at time.Time, i int) events.Event {
	e := ev(events.JobCompleted, subject, queue, at, 0)
	r := make([]byte, 0, 150<<10)
	for j := 0; len(r) < 150<<10; j++ {
		r = append(r, fmt.Sprintf("%x", (j*2654435761)^(i*40503))...)
	}
	e.Data["result"] = string(r)
	return e
}

func ids(evs []events.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func TestEventLogQueriesInTimeOrderAcrossShardsAndDays(t *testing.T) {
	t.Parallel()
	s, _ := logTable(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var all []events.Event
	// 60 jobs over three days (so several index days and every shard), each
	// with enqueued then completed; queues alternate a/b.
	for i := range 60 {
		at := now.Add(-50 * time.Hour).Add(time.Duration(i) * 50 * time.Minute)
		q := []string{"a", "b"}[i%2]
		subj := fmt.Sprintf("job-%02d", i)
		all = append(all, ev(events.JobEnqueued, subj, q, at, 0), ev(events.JobCompleted, subj, q, at.Add(time.Second), 1))
	}
	if err := s.PutEvents(ctx, all, time.Hour); err != nil {
		t.Fatal(err)
	}
	// Writing the same events again (a duplicated stream record) changes nothing.
	if err := s.PutEvents(ctx, append(all[:10:10], all[:10]...), time.Hour); err != nil {
		t.Fatal(err)
	}

	// Page through everything since the start, 7 at a time.
	var got []events.Event
	f := events.Filter{Since: now.Add(-72 * time.Hour), Limit: 7}
	for pages := 0; ; pages++ {
		if pages > 30 {
			t.Fatal("pagination does not end")
		}
		p, err := s.QueryEvents(ctx, f, now)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Events...)
		if !p.HasMore {
			break
		}
		if len(p.Events) != 7 || p.Cursor != p.Events[6].ID {
			t.Fatalf("page of %d with cursor %s", len(p.Events), p.Cursor)
		}
		f.After = p.Cursor
	}
	if len(got) != len(all) {
		t.Fatalf("paged %d events, stored %d", len(got), len(all))
	}
	for i := range got {
		if got[i].ID != all[i].ID {
			t.Fatalf("event %d is %s (%s), want %s (%s)", i, got[i].ID, got[i].Time, all[i].ID, all[i].Time)
		}
	}

	// Filters: type, queue, job type, one job, a time window, the default
	// window (last 24 hours).
	check := func(name string, f events.Filter, want func(e events.Event) bool) {
		t.Helper()
		f.Limit = 1000
		p, err := s.QueryEvents(ctx, f, now)
		if err != nil {
			t.Fatal(err)
		}
		var exp []string
		for _, e := range all {
			if want(e) {
				exp = append(exp, e.ID)
			}
		}
		if fmt.Sprint(ids(p.Events)) != fmt.Sprint(exp) {
			t.Errorf("%s: got %d events, want %d", name, len(p.Events), len(exp))
		}
	}
	since := now.Add(-72 * time.Hour)
	check("type", events.Filter{Since: since, Types: []string{events.JobCompleted}}, func(e events.Event) bool { return e.Type == events.JobCompleted })
	check("prefix", events.Filter{Since: since, Types: []string{"job.*"}}, func(e events.Event) bool { return true })
	check("queue", events.Filter{Since: since, Queues: []string{"b"}}, func(e events.Event) bool { return e.Queue() == "b" })
	check("job type and type", events.Filter{Since: since, JobTypes: []string{"t.a"}, Types: []string{events.JobEnqueued}},
		func(e events.Event) bool { return e.JobType() == "t.a" && e.Type == events.JobEnqueued })
	check("one job", events.Filter{SubjectCategory: "job", SubjectID: "job-07"}, func(e events.Event) bool { return e.Subject == "job-07" })
	from, until := now.Add(-30*time.Hour), now.Add(-20*time.Hour)
	check("window", events.Filter{Since: from, Until: until}, func(e events.Event) bool { return !e.At().Before(from) && e.At().Before(until) })
	check("default window", events.Filter{}, func(e events.Event) bool { return e.At().After(now.Add(-24 * time.Hour)) })
}

// eventItems scans the table's event pages: the log's (EVL#) and the
// subjects' (EVT#), with their compressed bytes and events.
func eventItems(t *testing.T, table string) (logPages, subjectPages, zBytes, rawBytes, stored int) {
	t.Helper()
	db := testenv.DynamoDB()
	in := &dynamodb.ScanInput{TableName: &table}
	for {
		out, err := db.Scan(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		for _, av := range out.Items {
			evs, ok, err := events.DecodePage(av)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				continue
			}
			pk := av["pk"].(*types.AttributeValueMemberS).Value
			if strings.HasPrefix(pk, "EVL#") {
				logPages++
				zBytes += len(av["z"].(*types.AttributeValueMemberB).Value)
				for i := range evs {
					b, _ := evs[i].Marshal()
					rawBytes += len(b)
				}
				stored += len(evs)
			} else {
				subjectPages++
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// A batch's events are stored as one compressed page of the log per window
// and one page per subject and window, not an item (and an index entry)
// per event: the log costs a fraction of a write unit per event.
func TestEventPagesPackABatch(t *testing.T) {
	t.Parallel()
	s, table := logTable(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).Add(100 * time.Millisecond)
	var batch []events.Event
	// 40 jobs, each enqueued, started and completed within 600 ms: one
	// window of the log, 40 subjects.
	for i := range 40 {
		subj := fmt.Sprintf("job-%02d", i)
		batch = append(batch, ev(events.JobEnqueued, subj, "a", at.Add(time.Duration(i)*time.Millisecond), 0),
			ev(events.JobStarted, subj, "a", at.Add(time.Duration(i+200)*time.Millisecond), 1),
			ev(events.JobCompleted, subj, "a", at.Add(time.Duration(i+400)*time.Millisecond), 2))
	}
	if err := s.PutEvents(ctx, batch, time.Hour); err != nil {
		t.Fatal(err)
	}
	logPages, subjectPages, z, raw, stored := eventItems(t, table)
	if logPages != 1 || subjectPages != 40 || stored != len(batch) {
		t.Fatalf("%d log pages holding %d events and %d subject pages; want 1 holding %d and 40", logPages, stored, subjectPages, len(batch))
	}
	// DynamoDB bills a write unit per KB: the page must cost well under the
	// 120 units that one item per event would.
	if z*8 > raw {
		t.Fatalf("the log page is %d bytes for %d bytes of events: not compressed 8 to 1", z, raw)
	}
	t.Logf("log page %d bytes for %d events (%d bytes of JSON)", z, stored, raw)

	p, err := s.QueryEvents(ctx, events.Filter{SubjectCategory: "job", SubjectID: "job-07"}, at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 3 || p.Events[0].Type != events.JobEnqueued || p.Events[2].Type != events.JobCompleted {
		t.Fatalf("job-07's history: %v", p.Events)
	}
}

// A stream batch retried with other records regroups its events: the same
// events then sit in several pages. Every query, paged by any limit, still
// returns each event once, in id order, and a cursor inside a window
// continues right after it.
func TestEventPagesOfRetriedBatchesReadOnce(t *testing.T) {
	t.Parallel()
	s, _ := logTable(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var all []events.Event
	// 90 events over 3 seconds (3 windows), 6 subjects.
	for i := range 90 {
		at := now.Add(-time.Minute).Add(time.Duration(i) * 33 * time.Millisecond)
		all = append(all, ev([]string{events.JobEnqueued, events.JobStarted, events.JobCompleted}[i%3], fmt.Sprintf("job-%d", i%6), "a", at, int64(i)))
	}
	writes := [][]events.Event{all[:50], all[30:], all[10:70], all[85:], all}
	for _, w := range writes {
		if err := s.PutEvents(ctx, w, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{1, 7, 29, 100} {
		var got []string
		f := events.Filter{Since: now.Add(-time.Hour), Limit: limit}
		for calls := 0; ; calls++ {
			if calls > 100 {
				t.Fatal("pagination does not end")
			}
			p, err := s.QueryEvents(ctx, f, now)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ids(p.Events)...)
			if !p.HasMore {
				break
			}
			f.After = p.Cursor
		}
		if fmt.Sprint(got) != fmt.Sprint(ids(all)) {
			t.Fatalf("limit %d: paged %d events, want the %d stored once each in order", limit, len(got), len(all))
		}
	}
	// One subject's history from a cursor in the middle of a window.
	var mine []events.Event
	for _, e := range all {
		if e.Subject == "job-4" {
			mine = append(mine, e)
		}
	}
	p, err := s.QueryEvents(ctx, events.Filter{SubjectCategory: "job", SubjectID: "job-4", After: mine[3].ID, Limit: 1000}, now)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(p.Events)) != fmt.Sprint(ids(mine[4:])) {
		t.Fatalf("job-4 after its 4th event: %d events, want %d", len(p.Events), len(mine)-4)
	}
}

// Events too big to share a page are split over several (an item holds at
// most 400 KB), and all of them are read.
func TestEventPagesSplitBigEvents(t *testing.T) {
	t.Parallel()
	s, table := logTable(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var all []events.Event
	for i := range 4 {
		all = append(all, bigResultEvent(fmt.Sprintf("job-%d", i), "a", now.Add(-time.Minute).Add(time.Duration(i)*time.Millisecond), i))
	}
	if err := s.PutEvents(ctx, all, time.Hour); err != nil {
		t.Fatal(err)
	}
	logPages, _, _, _, stored := eventItems(t, table)
	if logPages < 2 || stored != 4 {
		t.Fatalf("%d log pages holding %d events; want the 4 big events split over at least 2", logPages, stored)
	}
	p, err := s.QueryEvents(ctx, events.Filter{Since: now.Add(-time.Hour)}, now)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(p.Events)) != fmt.Sprint(ids(all)) || p.Events[3].Data["result"] != all[3].Data["result"] {
		t.Fatalf("read %d events back", len(p.Events))
	}
}

// pkRecorder records the event partitions a store's queries read.
type pkRecorder struct {
	store.DynamoAPI
	mu  sync.Mutex
	pks []string
}

func (r *pkRecorder) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	for _, v := range in.ExpressionAttributeValues {
		if s, ok := v.(*types.AttributeValueMemberS); ok && strings.HasPrefix(s.Value, "EV") {
			r.mu.Lock()
			r.pks = append(r.pks, s.Value)
			r.mu.Unlock()
		}
	}
	return r.DynamoAPI.Query(ctx, in, o...)
}

func (r *pkRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.pks
	r.pks = nil
	return out
}

// TestQueueFailuresReadOnlyTheQueuesPages: the failures of one quiet
// queue on a busy table (what a queue's stats count) are read from that
// queue's pages, not from the log of every queue's events, and the answer
// is the one the log gives.
func TestQueueFailuresReadOnlyTheQueuesPages(t *testing.T) {
	t.Parallel()
	s, table := logTable(t)
	rec := &pkRecorder{DynamoAPI: testenv.DynamoDB()}
	read := events.NewStore(rec, table)
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var all []events.Event
	for i := range 300 {
		at := now.Add(-time.Hour).Add(time.Duration(i) * 11 * time.Second)
		subj := fmt.Sprintf("busy-%03d", i)
		all = append(all, ev(events.JobEnqueued, subj, "busy", at, 0), ev(events.JobCompleted, subj, "busy", at.Add(time.Second), 1))
	}
	at := now.Add(-30 * time.Minute)
	all = append(all,
		ev(events.JobFailed, "busy-fail", "busy", at, 0),
		ev(events.JobFailed, "quiet-1", "quiet", at.Add(time.Second), 0), ev(events.JobRetrying, "quiet-1", "quiet", at.Add(time.Second), 1),
		ev(events.JobFailed, "quiet-2", "quiet", at.Add(time.Minute), 0), ev(events.JobDiscarded, "quiet-2", "quiet", at.Add(time.Minute), 1),
		ev(events.JobCancelled, "quiet-3", "quiet", at.Add(2*time.Minute), 0),
		ev(events.JobCompleted, "quiet-4", "quiet", at.Add(3*time.Minute), 0))
	// Two batches, the second repeating part of the first (a retried stream
	// batch): readers drop the duplicates.
	if err := s.PutEvents(ctx, all, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEvents(ctx, all[len(all)-8:], time.Hour); err != nil {
		t.Fatal(err)
	}
	query := func(f events.Filter) ([]string, []string) {
		t.Helper()
		f.Since = now.Add(-time.Hour)
		var got []string
		for range 20 {
			p, err := read.QueryEvents(ctx, f, now)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range p.Events {
				got = append(got, e.Subject+" "+e.Type)
			}
			if !p.HasMore {
				return got, rec.take()
			}
			f.After = p.Cursor
		}
		t.Fatal("pagination does not end")
		return nil, nil
	}
	for _, tc := range []struct {
		types []string
		want  []string
	}{
		{[]string{events.JobFailed}, []string{"quiet-1 job.failed", "quiet-2 job.failed"}},
		{[]string{events.JobFailed, events.JobCancelled, events.JobDiscarded},
			[]string{"quiet-1 job.failed", "quiet-2 job.failed", "quiet-2 job.discarded", "quiet-3 job.cancelled"}},
	} {
		for _, limit := range []int{1, 100} {
			got, pks := query(events.Filter{Types: tc.types, Queues: []string{"quiet"}, Limit: limit})
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%v, limit %d: got %v, want %v", tc.types, limit, got, tc.want)
			}
			for _, pk := range pks {
				if pk != "EVQ#quiet" {
					t.Errorf("%v, limit %d: read %s, want only the queue's pages", tc.types, limit, pk)
				}
			}
			// The log, read when the filter names two queues, says the same.
			fromLog, pks := query(events.Filter{Types: tc.types, Queues: []string{"quiet", "none"}, Limit: limit})
			if fmt.Sprint(fromLog) != fmt.Sprint(tc.want) || !strings.HasPrefix(fmt.Sprint(pks), "[EVL#") {
				t.Errorf("%v from the log: %v (read %v)", tc.types, fromLog, pks)
			}
		}
	}
	// Types the queue pages do not hold are read from the log.
	got, pks := query(events.Filter{Types: []string{events.JobCompleted}, Queues: []string{"quiet"}, Limit: 10})
	if fmt.Sprint(got) != "[quiet-4 job.completed]" || slices.Contains(pks, "EVQ#quiet") {
		t.Errorf("completions of the quiet queue: %v (read %v)", got, pks)
	}
}

// A reader tailing the log with its pages' cursors also gets the events
// stored late below its cursor (a stream batch retried, a shard behind
// another) for events.Settle after their time, without the events it
// already had again; a page cut among late events goes on from the last
// of them. With plain cursors those late events were never returned.
// Not parallel: it sets the clock that stamps the pages.
func TestTailingCursorFindsEventsStoredLate(t *testing.T) {
	s, _ := logTable(t)
	ctx := context.Background()
	t0 := time.Now().UTC().Truncate(time.Second)
	var stored time.Time
	defer events.SetStoreClock(func() time.Time { return stored })()
	put := func(at time.Time, evs ...events.Event) {
		t.Helper()
		stored = at
		if err := s.PutEvents(ctx, evs, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	e := func(name string, at time.Time) events.Event { return ev(events.JobCompleted, name, "tail", at, 0) }
	f := events.Filter{Types: []string{events.JobCompleted}, Queues: []string{"tail"}, Since: t0.Add(-time.Minute), Tail: true}
	read := func(now time.Time, limit int) *events.Page {
		t.Helper()
		f.Limit = limit
		p, err := s.QueryEvents(ctx, f, now)
		if err != nil {
			t.Fatal(err)
		}
		if !f.SetCursor(p.Cursor) {
			t.Fatalf("cursor %q does not parse", p.Cursor)
		}
		return p
	}
	want := func(p *events.Page, more bool, evs ...events.Event) {
		t.Helper()
		if fmt.Sprint(ids(p.Events)) != fmt.Sprint(ids(evs)) || p.HasMore != more {
			t.Fatalf("page %v has_more %v, want %v has_more %v", ids(p.Events), p.HasMore, ids(evs), more)
		}
	}
	e1, e2 := e("e1", t0.Add(-5*time.Second)), e("e2", t0.Add(-4*time.Second))
	put(t0.Add(-4*time.Second), e1, e2)
	want(read(t0, 100), false, e1, e2)

	e0, e3 := e("e0", t0.Add(-4500*time.Millisecond)), e("e3", t0.Add(time.Second))
	put(t0.Add(time.Second), e0, e3) // e0 late, below the cursor
	want(read(t0.Add(5*time.Second), 100), false, e0, e3)

	l1, l2 := e("l1", t0.Add(-2*time.Second)), e("l2", t0.Add(-time.Second))
	put(t0.Add(6*time.Second), l1, l2) // both late
	want(read(t0.Add(10*time.Second), 1), true, l1)
	want(read(t0.Add(11*time.Second), 1), false, l2)
	want(read(t0.Add(14*time.Second), 100), false)

	// A read right after a store names the pages it saw in its cursor, so
	// the next read does not return their events again; a page stored
	// late after it is not one of them.
	e4 := e("e4", t0.Add(15*time.Second))
	put(t0.Add(15*time.Second), e4)
	want(read(t0.Add(15500*time.Millisecond), 100), false, e4)
	want(read(t0.Add(16*time.Second), 100), false)
	l3 := e("l3", t0.Add(12*time.Second))
	put(t0.Add(16200*time.Millisecond), l3)
	want(read(t0.Add(16500*time.Millisecond), 100), false, l3)
	want(read(t0.Add(17*time.Second), 100), false)

	// Internal readers paging a fixed window take plain cursors.
	p, err := s.QueryEvents(ctx, events.Filter{Types: []string{events.JobCompleted}, Queues: []string{"tail"}, Since: t0.Add(-time.Minute), Limit: 2}, t0.Add(20*time.Second))
	if err != nil || p.Cursor != p.Events[1].ID {
		t.Fatalf("plain cursor %q, want %s (%v)", p.Cursor, p.Events[1].ID, err)
	}
}

// v7 is a UUIDv7 with the time at and n in its random bits.
func v7(at time.Time, n int) string {
	var u uuid.UUID
	ms := at.UnixMilli()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6], u[7] = 0x70, byte(n>>16)
	u[8] = 0x80 | byte(n>>8)&0x3f
	u[15] = byte(n)
	return u.String()
}

// The histories of jobs created in the same second share their pages: a
// batch writes one page per second of creation and window, not one per
// job (nor, as before 2026-11-27, one per shard its jobs hash to); the
// pages of many batches are spread over the bucket's shards; and each
// job's history is still exactly its own events, paged by any limit. Pages
// stored in the layouts before (a subject's own partition; the shard its
// id hashed to) are still read, each event once.
func TestHistoriesOfJobsCreatedTogetherShareTheirPages(t *testing.T) {
	t.Parallel()
	s, table := logTable(t)
	ctx := context.Background()
	db := testenv.DynamoDB()
	created := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).Add(100 * time.Millisecond)
	var batch []events.Event
	var jobs []string
	for i := range 40 {
		id := v7(created.Add(time.Duration(i)*10*time.Millisecond), i)
		jobs = append(jobs, id)
		at := created.Add(time.Duration(i) * time.Millisecond)
		batch = append(batch, ev(events.JobEnqueued, id, "a", at, 0),
			ev(events.JobStarted, id, "a", at.Add(200*time.Millisecond), 1),
			ev(events.JobCompleted, id, "a", at.Add(400*time.Millisecond), 2))
	}
	if err := s.PutEvents(ctx, batch, time.Hour); err != nil {
		t.Fatal(err)
	}
	logPages, subjectPages, _, _, stored := eventItems(t, table)
	if logPages != 1 || subjectPages != 1 || stored != len(batch) {
		t.Fatalf("%d log pages holding %d events and %d history pages for 40 jobs created in one second; want 1 holding %d and 1",
			logPages, stored, subjectPages, len(batch))
	}
	history := func(id string, limit int) []events.Event {
		t.Helper()
		var got []events.Event
		f := events.Filter{SubjectCategory: "job", SubjectID: id, Limit: limit}
		for calls := 0; ; calls++ {
			if calls > 20 {
				t.Fatal("pagination does not end")
			}
			p, err := s.QueryEvents(ctx, f, created.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, p.Events...)
			if !p.HasMore {
				return got
			}
			f.After = p.Cursor
		}
	}
	for i, id := range jobs {
		for _, limit := range []int{1, 2, 100} {
			got := history(id, limit)
			if want := ids(batch[3*i : 3*i+3]); fmt.Sprint(ids(got)) != fmt.Sprint(want) {
				t.Fatalf("job %d's history by %d: %v, want %v", i, limit, ids(got), want)
			}
		}
	}

	// A job whose first events were stored in its own partition, before
	// the buckets: its page is moved there, then its later events are
	// stored in its bucket (one of them again).
	old := v7(created.Add(time.Hour), 99)
	at := created.Add(time.Hour)
	first := []events.Event{ev(events.JobEnqueued, old, "a", at, 0), ev(events.JobStarted, old, "a", at.Add(time.Millisecond), 1)}
	if err := s.PutEvents(ctx, first, time.Hour); err != nil {
		t.Fatal(err)
	}
	out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: &table, FilterExpression: aws.String("begins_with(pk, :b) AND contains(sk, :id)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberS{Value: "EVB#job#"}, ":id": &types.AttributeValueMemberS{Value: first[0].ID}}})
	if err != nil || len(out.Items) != 1 {
		t.Fatalf("the new job's bucket page: %d items, %v", len(out.Items), err)
	}
	page := out.Items[0]
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: map[string]types.AttributeValue{"pk": page["pk"], "sk": page["sk"]}}); err != nil {
		t.Fatal(err)
	}
	page["pk"] = &types.AttributeValueMemberS{Value: "EVT#job#" + old}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: page}); err != nil {
		t.Fatal(err)
	}
	later := []events.Event{first[1], ev(events.JobCompleted, old, "a", at.Add(2*time.Millisecond), 2)}
	if err := s.PutEvents(ctx, later, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 100} {
		if got, want := ids(history(old, limit)), ids(append(first, later[1])); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("history across its own partition and its bucket, by %d: %v, want %v", limit, got, want)
		}
	}
}

// A busy second's history pages do not all go to one partition: each page
// goes to the shard of the bucket its first event hashes to, and a history
// reads every shard, so it finds its events wherever they were put (as in
// the layout before 2026-11-27, when the shard was a hash of the subject).
func TestHistoryPagesOfOneSecondAreSpreadOverTheBucketsShards(t *testing.T) {
	t.Parallel()
	s, table := logTable(t)
	ctx := context.Background()
	db := testenv.DynamoDB()
	created := time.Date(2026, 11, 21, 13, 0, 0, 0, time.UTC)
	var jobs []string
	want := map[string][]events.Event{}
	for i := range 24 {
		id := v7(created.Add(time.Duration(i)*time.Millisecond), i)
		jobs = append(jobs, id)
		// A batch of its own for each job's events, as when jobs finish
		// apart: one history page each.
		at := created.Add(time.Duration(i) * time.Second)
		evs := []events.Event{ev(events.JobEnqueued, id, "a", at, 0), ev(events.JobCompleted, id, "a", at.Add(time.Millisecond), 1)}
		want[id] = evs
		if err := s.PutEvents(ctx, evs, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	prefix := fmt.Sprintf("EVB#job#%d#", created.Unix())
	out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: &table, FilterExpression: aws.String("begins_with(pk, :b)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberS{Value: "EVB#"}}})
	if err != nil {
		t.Fatal(err)
	}
	shards := map[string]int{}
	for _, av := range out.Items {
		pk := av["pk"].(*types.AttributeValueMemberS).Value
		if !strings.HasPrefix(pk, prefix) {
			t.Fatalf("history page in %s, want the bucket %s<shard>", pk, prefix)
		}
		shards[pk]++
	}
	if len(out.Items) != len(jobs) || len(shards) < 2 || len(shards) > events.SubjectShards {
		t.Fatalf("%d history pages in %d partitions (%v), want %d pages spread over 2 to %d", len(out.Items), len(shards), shards, len(jobs), events.SubjectShards)
	}
	// A page put in another shard (the layout before: the subject's
	// hash) is read the same.
	moved := out.Items[0]
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: map[string]types.AttributeValue{"pk": moved["pk"], "sk": moved["sk"]}}); err != nil {
		t.Fatal(err)
	}
	pk := moved["pk"].(*types.AttributeValueMemberS).Value
	shard, _ := strconv.Atoi(pk[len(prefix):])
	moved["pk"] = &types.AttributeValueMemberS{Value: prefix + strconv.Itoa((shard+1)%events.SubjectShards)}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: moved}); err != nil {
		t.Fatal(err)
	}
	for _, id := range jobs {
		p, err := s.QueryEvents(ctx, events.Filter{SubjectCategory: "job", SubjectID: id, Limit: 100}, created.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(p.Events); fmt.Sprint(got) != fmt.Sprint(ids(want[id])) {
			t.Fatalf("history of %s: %v, want %v", id, got, ids(want[id]))
		}
	}
}

// TestEventPagesStopAtTheirByteBound: 40 job.completed events carrying
// 150 KB results each (6 MB) would not fit Lambda's 6 MB response in one
// page of the events API: with MaxBytes set (the HTTP API sets it), a page
// ends before the event that would pass it, has more, and the pages that
// follow its cursor hold the rest, each event once. Without it (internal
// readers) the limit alone decides.
func TestEventPagesStopAtTheirByteBound(t *testing.T) {
	t.Parallel()
	s, _ := logTable(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var all []events.Event
	for i := range 40 {
		all = append(all, bigResultEvent(fmt.Sprintf("big-%02d", i), "bigres", now.Add(-time.Minute).Add(time.Duration(i)*time.Millisecond), i))
	}
	if err := s.PutEvents(ctx, all, time.Hour); err != nil {
		t.Fatal(err)
	}
	if p, err := s.QueryEvents(ctx, events.Filter{Since: now.Add(-time.Hour), Limit: 100}, now); err != nil || len(p.Events) != 40 || p.HasMore {
		t.Fatalf("without a byte bound: %d events, more %v, %v", len(p.Events), p.HasMore, err)
	}
	f := events.Filter{Since: now.Add(-time.Hour), Limit: 100, MaxBytes: store.ListBytes}
	var got []events.Event
	for pages := 1; ; pages++ {
		p, err := s.QueryEvents(ctx, f, now)
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, e := range p.Events {
			b, _ := json.Marshal(&e)
			size += len(b)
		}
		if size > store.ListBytes || len(p.Events) == 0 || (pages == 1 && !p.HasMore) {
			t.Fatalf("page %d: %d events of %d bytes, more %v", pages, len(p.Events), size, p.HasMore)
		}
		got = append(got, p.Events...)
		if !p.HasMore || pages > 10 {
			break
		}
		f.After = p.Cursor
	}
	if fmt.Sprint(ids(got)) != fmt.Sprint(ids(all)) {
		t.Fatalf("read %d events over the pages, want the %d in order", len(got), len(all))
	}
}
