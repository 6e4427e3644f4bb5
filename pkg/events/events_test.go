package events

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/retry"
)

var uuidv7 = regexp.MustCompile(`^evt_[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestIDIsADeterministicTimeOrderedUUIDv7(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 123e6, time.UTC)
	a := ID(at, 5, "job.completed", "j1")
	if !uuidv7.MatchString(a) {
		t.Fatalf("%s is not evt_<uuidv7>", a)
	}
	if b := ID(at, 5, "job.completed", "j1"); a != b {
		t.Fatalf("same inputs, different ids: %s %s", a, b)
	}
	if b := ID(at, 5, "job.completed", "j2"); a == b {
		t.Fatal("different keys gave the same id")
	}
	got, ok := ParseID(a)
	if !ok || !got.Equal(at) {
		t.Fatalf("ParseID = %v %v, want %v", got, ok, at)
	}
	// Later time sorts after; same ms orders by seq; LowerBound sorts first.
	ids := []string{ID(at.Add(time.Millisecond), 0, "x"), ID(at, 9, "y"), ID(at, 2, "z"), LowerBound(at)}
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	want := []string{ids[3], ids[2], ids[1], ids[0]}
	for i := range want {
		if sorted[i] != want[i] {
			t.Fatalf("order %v, want %v", sorted, want)
		}
	}
	for _, bad := range []string{"", "evt_", "job_0193", "evt_0193ABCD-0000-7000-8000-000000000000", "evt_zz93abcd-0000-7000-8000-000000000000", a + "0"} {
		if _, ok := ParseID(bad); ok {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}

func ts(s string) *time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return &t
}

func baseJob(state job.State) *job.Job {
	return &job.Job{ID: "019539a4-0000-7000-8000-000000000001", Type: "email.send", Queue: "email", State: state,
		Retry: retry.Policy{MaxAttempts: 3}, CreatedAt: ts("2026-01-01T00:00:00Z"), EnqueuedAt: ts("2026-01-01T00:00:00Z")}
}

// types lists the event types with their data, for compact assertions.
func types(evs []Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func TestFromJobFollowsTheLifecycle(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 9, 0, time.UTC)
	avail := baseJob(job.Available)
	active := baseJob(job.Active)
	active.Attempt, active.WorkerID, active.StartedAt, active.LeaseUntil = 1, "w1", ts("2026-01-01T00:00:01Z"), ts("2026-01-01T00:00:31Z")
	beat := *active
	beat.LeaseUntil = ts("2026-01-01T00:01:01Z")
	half := 0.5
	reported := *active
	reported.Progress = &job.Progress{Value: &half, Message: "half", UpdatedAt: "2026-01-01T00:00:02.000Z"}
	done := *active
	done.State, done.CompletedAt, done.Result = job.Completed, ts("2026-01-01T00:00:02.5Z"), json.RawMessage(`{"ok":true}`)
	errInfo := &job.ErrorInfo{Type: "handler_error", Code: "SMTP", Message: "refused", Timestamp: "2026-01-01T00:00:03Z"}
	retrying := *active
	retrying.State, retrying.Error, retrying.NextAttemptAt = job.Retryable, errInfo, ts("2026-01-01T00:00:10Z")
	discarded := *active
	discarded.State, discarded.Error, discarded.DiscardedAt, discarded.CompletedAt = job.Discarded, errInfo, ts("2026-01-01T00:00:03Z"), ts("2026-01-01T00:00:03Z")
	requeued := *active
	requeued.State, requeued.Error, requeued.EnqueuedAt = job.Available, &job.ErrorInfo{Type: "lease_expired", Message: "lease ended", Timestamp: "2026-01-01T00:00:40Z"}, ts("2026-01-01T00:00:40Z")
	revived := baseJob(job.Available)
	revived.EnqueuedAt = ts("2026-01-01T00:10:00Z")
	expired := baseJob(job.Discarded)
	expired.ExpiresAt, expired.DiscardedAt, expired.Error = ts("2026-01-01T00:05:00Z"), ts("2026-01-01T00:05:01Z"), &job.ErrorInfo{Type: "expired", Message: "expired"}
	cancelled := baseJob(job.Cancelled)
	cancelled.CancelledAt = ts("2026-01-01T00:00:04Z")
	sched := baseJob(job.Scheduled)
	sched.ScheduledAt = ts("2026-01-02T00:00:00Z")

	cases := []struct {
		name     string
		old, cur *job.Job
		want     []string
		check    func(t *testing.T, evs []Event)
	}{
		{"created available", nil, avail, []string{JobEnqueued}, func(t *testing.T, evs []Event) {
			d := evs[0].Data
			if d["job_type"] != "email.send" || d["queue"] != "email" || d["priority"] != 0 || evs[0].Subject != avail.ID {
				t.Errorf("data %v subject %s", d, evs[0].Subject)
			}
		}},
		{"created scheduled", nil, sched, []string{JobScheduled}, func(t *testing.T, evs []Event) {
			if evs[0].Data["scheduled_at"] != "2026-01-02T00:00:00.000Z" {
				t.Errorf("data %v", evs[0].Data)
			}
		}},
		{"claimed", avail, active, []string{JobStarted}, func(t *testing.T, evs []Event) {
			if evs[0].Data["worker_id"] != "w1" || evs[0].Data["attempt"] != 1 || evs[0].Time != "2026-01-01T00:00:01.000Z" {
				t.Errorf("%+v", evs[0])
			}
		}},
		{"heartbeat", active, &beat, []string{JobHeartbeat}, func(t *testing.T, evs []Event) {
			if evs[0].Data["visible_until"] != "2026-01-01T00:01:01.000Z" {
				t.Errorf("data %v", evs[0].Data)
			}
		}},
		{"same lease is no heartbeat", active, active, nil, nil},
		{"progress reported", active, &reported, []string{JobProgress}, func(t *testing.T, evs []Event) {
			if d := evs[0].Data; *d["progress"].(*float64) != 0.5 || d["message"] != "half" || d["attempt"] != 1 {
				t.Errorf("data %v", d)
			}
		}},
		{"same progress is no event", &reported, &reported, nil, nil},
		{"completed", active, &done, []string{JobCompleted}, func(t *testing.T, evs []Event) {
			d := evs[0].Data
			if d["duration_ms"] != int64(1500) || d["attempt"] != 1 || string(d["result"].(json.RawMessage)) != `{"ok":true}` {
				t.Errorf("data %v", d)
			}
		}},
		{"failed, will retry", active, &retrying, []string{JobFailed, JobRetrying}, func(t *testing.T, evs []Event) {
			e := evs[0].Data["error"].(map[string]any)
			if e["code"] != "SMTP" || e["retryable"] != true || evs[1].Data["next_retry_at"] != "2026-01-01T00:00:10.000Z" || evs[1].Data["max_attempts"] != 3 {
				t.Errorf("data %v / %v", evs[0].Data, evs[1].Data)
			}
		}},
		{"failed for good", active, &discarded, []string{JobFailed, JobDiscarded, DeadLetterAdded}, func(t *testing.T, evs []Event) {
			if d := evs[2].Data; d["attempt"] != 1 || d["discarded_at"] != "2026-01-01T00:00:03.000Z" || d["error"].(map[string]any)["code"] != "SMTP" {
				t.Errorf("dead_letter.added data %v", d)
			}
			if evs[0].Data["error"].(map[string]any)["retryable"] != false || evs[1].Data["total_attempts"] != 1 {
				t.Errorf("data %v / %v", evs[0].Data, evs[1].Data)
			}
			le := evs[1].Data["last_error"].(map[string]any)
			if le["code"] != "SMTP" || le["message"] != "refused" {
				t.Errorf("last_error %v", le)
			}
		}},
		{"lease expired", active, &requeued, []string{JobFailed, JobEnqueued}, nil},
		{"retried from the dead letter queue", &discarded, revived, []string{JobEnqueued, DeadLetterRetried}, func(t *testing.T, evs []Event) {
			if d := evs[1].Data; d["state"] != "available" || d["job_id"] != revived.ID || d["queue"] != "email" {
				t.Errorf("dead_letter.retried data %v", d)
			}
		}},
		{"expired", avail, expired, []string{JobExpired, DeadLetterAdded}, func(t *testing.T, evs []Event) {
			if evs[0].Data["ttl_ms"] != int64(300000) || evs[0].Data["expired_at"] != "2026-01-01T00:05:01.000Z" {
				t.Errorf("data %v", evs[0].Data)
			}
		}},
		{"cancelled", avail, cancelled, []string{JobCancelled}, func(t *testing.T, evs []Event) {
			if d := evs[0].Data; d["previous_state"] != "available" || d["reason"] != nil {
				t.Errorf("data %v", d)
			}
		}},
		{"created cancelled (a workflow's first job taken by a cancel)", nil, cancelled, []string{JobCancelled}, func(t *testing.T, evs []Event) {
			d := evs[0].Data
			if _, ok := d["previous_state"]; ok || d["reason"] == nil || d["queue"] != "email" {
				t.Errorf("data %v: want no previous_state and a reason", d)
			}
		}},
		{"pending workflow job", nil, baseJob(job.Pending), nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := FromJob("ojs://test/engine", c.old, c.cur, 3, at)
			got := types(evs)
			if len(got) != len(c.want) {
				t.Fatalf("events %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("events %v, want %v", got, c.want)
				}
			}
			for i, e := range evs {
				if e.SpecVersion != "1.0" || !uuidv7.MatchString(e.ID) || e.Source != "ojs://test/engine" || e.Subject != c.cur.ID {
					t.Errorf("envelope %+v", e)
				}
				if i > 0 && e.ID <= evs[i-1].ID {
					t.Errorf("ids out of lifecycle order: %s then %s", evs[i-1].ID, e.ID)
				}
				if _, err := json.Marshal(e); err != nil {
					t.Error(err)
				}
			}
			if again := FromJob("ojs://test/engine", c.old, c.cur, 3, at); len(again) > 0 && again[0].ID != evs[0].ID {
				t.Error("the same change derived a different id")
			}
			if c.check != nil {
				c.check(t, evs)
			}
		})
	}
}

// Deleting a discarded job is dead_letter.deleted; pruning it (counted in
// dead_letter.pruned) and removing any other job are not events.
func TestFromDeletedJob(t *testing.T) {
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	dead := baseJob(job.Discarded)
	evs := FromDeletedJob("ojs://test/engine", dead, false, 7, at)
	if len(evs) != 1 || evs[0].Type != DeadLetterDeleted || evs[0].Subject != dead.ID || evs[0].Data["job_id"] != dead.ID ||
		evs[0].Data["queue"] != "email" || evs[0].Time != "2026-01-02T00:00:00.000Z" {
		t.Fatalf("deleted: %+v", evs)
	}
	if again := FromDeletedJob("ojs://test/engine", dead, false, 7, at); again[0].ID != evs[0].ID {
		t.Error("the same removal derived a different id")
	}
	if evs := FromDeletedJob("ojs://test/engine", dead, true, 7, at); len(evs) != 0 {
		t.Errorf("pruned: %+v", evs)
	}
	if evs := FromDeletedJob("ojs://test/engine", baseJob(job.Completed), false, 7, at); len(evs) != 0 {
		t.Errorf("completed job removed: %+v", evs)
	}
}

func TestParseQuery(t *testing.T) {
	f, err := ParseQuery(url.Values{"types": {"job.completed,job.*"}, "queues": {"a,b"}, "limit": {"10"}, "job_id": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Types) != 2 || len(f.Queues) != 2 || f.Limit != 10 || f.SubjectCategory != "job" || f.SubjectID != "x" {
		t.Fatalf("%+v", f)
	}
	e := Event{Type: "job.failed", Data: map[string]any{"queue": "b", "job_type": "t"}}
	if !f.Matches(&e) {
		t.Error("job.* and queue b should match")
	}
	e.Data["queue"] = "c"
	if f.Matches(&e) {
		t.Error("queue c should not match")
	}
	for _, bad := range []url.Values{
		{"limit": {"0"}}, {"limit": {"1001"}}, {"limit": {"x"}}, {"types": {"job.nope"}}, {"types": {"job*"}},
		{"after": {"not-an-id"}}, {"since": {"yesterday"}}, {"colour": {"red"}}, {"job_id": {"a"}, "workflow_id": {"b"}},
		{"since": {"2026-01-02T00:00:00Z"}, "until": {"2026-01-01T00:00:00Z"}},
	} {
		_, err := ParseQuery(bad)
		if e := ojserr.As(err); err == nil || e.Status() != 400 || e.Code != ojserr.InvalidRequest {
			t.Errorf("%v: got %v, want 400 invalid_request", bad, err)
		}
	}
}

// A page's cursor is an event id, or for a tailing reader the id, the late
// bound, the read time and the pages seen; both parse back as they were,
// and anything else is refused.
func TestCursorsRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	after, late := ID(at, 1, "a"), LowerBound(at.Add(-Settle))
	for _, c := range []CursorState{
		{After: after},
		{After: after, LateAfter: late, ReadAt: at},
		{After: after, LateAfter: late, ReadAt: at, Seen: []uint64{1, 1<<48 - 1, PageHash("EVL#x", "sk", at)}},
	} {
		s := c.String()
		var f Filter
		if !f.SetCursor(s) || f.After != c.After || f.LateAfter != c.LateAfter || !f.ReadAt.Equal(c.ReadAt) || fmt.Sprint(f.Seen) != fmt.Sprint(c.Seen) {
			t.Errorf("%q parsed as %+v, want %+v", s, f, c)
		}
	}
	// A late bound at or above the cursor is no tailing cursor.
	if s := (CursorState{After: late, LateAfter: after, ReadAt: at}).String(); s != late {
		t.Errorf("cursor %q", s)
	}
	for _, bad := range []string{"", "page2", after + "~", after + "~" + late, after + "~" + late + "~x", after + "~" + after + "~1",
		after + "~" + late + "~1~!!", after + "~" + late + "~1~AAAA", after + "~" + late + "~1~AAAAAAAA~x"} {
		var f Filter
		if f.SetCursor(bad) {
			t.Errorf("cursor %q accepted", bad)
		}
	}
}
