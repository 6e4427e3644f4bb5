package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func newJob(t *testing.T, body string, at time.Time) *job.Job {
	t.Helper()
	e, err := job.ParseEnqueue([]byte(body), at)
	if err != nil {
		t.Fatal(err)
	}
	return e.Job
}

func TestCreateGetAndDuplicate(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	j := newJob(t, `{"type":"test.echo","args":[1,"two",{"x":3.25}],"meta":{"k":"v"},"custom_attr":true}`, t0)
	if err := s.Create(ctx, []*job.Job{j}, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(j)
	b, _ := json.Marshal(got)
	if string(a) != string(b) {
		t.Fatalf("round trip differs:\n%s\n%s", a, b)
	}
	var dup *store.DuplicateError
	if err := s.Create(ctx, []*job.Job{j}, time.Minute); !errors.As(err, &dup) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := s.Get(ctx, uuid.Must(uuid.NewV7()).String()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing job: %v", err)
	}
}

func TestBatchCreateIsAtomic(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	existing := newJob(t, `{"type":"a.b","args":[]}`, t0)
	if err := s.Create(ctx, []*job.Job{existing}, time.Minute); err != nil {
		t.Fatal(err)
	}
	fresh := newJob(t, `{"type":"a.b","args":[]}`, t0)
	var dup *store.DuplicateError
	err := s.Create(ctx, []*job.Job{fresh, existing}, time.Minute)
	if !errors.As(err, &dup) || dup.Index != 1 {
		t.Fatalf("want duplicate at index 1, got %v", err)
	}
	if _, err := s.Get(ctx, fresh.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a rejected batch left job %s behind: %v", fresh.ID, err)
	}
}

func TestConcurrentClaimsHaveOneWinner(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	j := newJob(t, `{"type":"a.b","args":[]}`, t0)
	if err := s.Create(ctx, []*job.Job{j}, time.Minute); err != nil {
		t.Fatal(err)
	}
	var wins, conflicts atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Apply(ctx, store.Claim(j.ID, store.ClaimOpts{Queue: j.Queue, Now: t0, LeaseUntil: t0.Add(time.Minute)}))
			var ce *store.ConflictError
			switch {
			case err == nil:
				wins.Add(1)
			case errors.As(err, &ce) && ce.Current.State == job.Active:
				conflicts.Add(1)
			default:
				t.Errorf("claim: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 || conflicts.Load() != 7 {
		t.Fatalf("wins=%d conflicts=%d", wins.Load(), conflicts.Load())
	}
	got, _ := s.Get(ctx, j.ID)
	if got.Attempt != 1 || got.State != job.Active || got.LeaseUntil == nil {
		t.Fatalf("claimed job: %+v", got)
	}
}

func TestCompleteRequiresActiveAndAttempt(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	j := newJob(t, `{"type":"a.b","args":[]}`, t0)
	_ = s.Create(ctx, []*job.Job{j}, time.Minute)
	var ce *store.ConflictError
	if _, err := s.Apply(ctx, store.Complete(j.ID, nil, 0, t0)); !errors.As(err, &ce) || ce.Current.State != job.Available {
		t.Fatalf("complete of available job: %v", err)
	}
	if _, err := s.Apply(ctx, store.Claim(j.ID, store.ClaimOpts{Queue: j.Queue, Now: t0, LeaseUntil: t0.Add(time.Minute)})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, store.Complete(j.ID, nil, 2, t0)); !errors.As(err, &ce) {
		t.Fatalf("late completion of another attempt must not apply: %v", err)
	}
	done, err := s.Apply(ctx, store.Complete(j.ID, json.RawMessage(`{"ok":true}`), 1, t0.Add(time.Second)))
	if err != nil || done.State != job.Completed || string(done.Result) != `{"ok":true}` || done.CompletedAt == nil {
		t.Fatalf("complete: %+v %v", done, err)
	}
	if _, err := s.Apply(ctx, store.Cancel(j.ID, t0, job.Scheduled, job.Available, job.Pending, job.Retryable, job.Active)); !errors.As(err, &ce) || ce.Current.State != job.Completed {
		t.Fatalf("cancel of completed job: %v", err)
	}
	if _, err := s.Apply(ctx, store.Cancel(uuid.Must(uuid.NewV7()).String(), t0, job.Available)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancel of unknown job: %v", err)
	}
}

func TestInvalidTransitionIsRejectedBeforeWriting(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	j := newJob(t, `{"type":"a.b","args":[]}`, t0)
	j.State = job.Completed
	if _, err := s.Apply(context.Background(), store.Promote(j, t0, time.Minute, false)); err == nil {
		t.Fatal("completed -> available must be rejected")
	}
}

func TestReadyOrderAndDueIndex(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	low := newJob(t, `{"type":"a.b","args":["low"],"queue":"q","priority":-10}`, t0)
	first := newJob(t, `{"type":"a.b","args":["first"],"queue":"q"}`, t0.Add(time.Millisecond))
	second := newJob(t, `{"type":"a.b","args":["second"],"queue":"q"}`, t0.Add(2*time.Millisecond))
	high := newJob(t, `{"type":"a.b","args":["high"],"queue":"q","priority":10}`, t0.Add(3*time.Millisecond))
	later := newJob(t, `{"type":"a.b","args":["later"],"queue":"q","scheduled_at":"2026-11-21T10:05:00Z"}`, t0)
	if err := s.Create(ctx, []*job.Job{low, first, second, high, later}, time.Minute); err != nil {
		t.Fatal(err)
	}
	items, err := s.ReadyOf(ctx, "", "q", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	// The index projects no payloads (args come with the claim) but the
	// size FETCH budgets by.
	name := map[string]string{high.ID: `["high"]`, first.ID: `["first"]`, second.ID: `["second"]`, low.ID: `["low"]`}
	var order []string
	for _, it := range items {
		order = append(order, name[it.Job.ID])
		if !it.Partial || len(it.Job.Args) != 0 || it.FetchBytes != store.FetchBytes(newJobCopy(t, it.Job.ID, low, first, second, high)) {
			t.Fatalf("ready item %s: partial=%v args=%s fb=%d", it.Job.ID, it.Partial, it.Job.Args, it.FetchBytes)
		}
	}
	want := `[["high"] ["first"] ["second"] ["low"]]`
	if got := jsonList(order); got != want {
		t.Fatalf("ready order %s, want %s", got, want)
	}
	due, _ := s.Due(ctx, "q", t0.Add(4*time.Minute), 10)
	if len(due) != 0 {
		t.Fatalf("nothing is due yet, got %d", len(due))
	}
	due, _ = s.Due(ctx, "q", t0.Add(5*time.Minute), 10)
	if len(due) != 1 || due[0].Job.ID != later.ID {
		t.Fatalf("due: %+v", due)
	}
	if _, err := s.Apply(ctx, store.Promote(due[0].Job, t0.Add(4*time.Minute), time.Minute, false)); err == nil {
		t.Fatal("promotion before the due time must fail")
	}
	p, err := s.Apply(ctx, store.Promote(due[0].Job, t0.Add(5*time.Minute), time.Minute, false))
	if err != nil || p.State != job.Available || p.EnqueuedAt == nil {
		t.Fatalf("promote: %+v %v", p, err)
	}
}

func TestExpiredJobIsNotClaimed(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	j := newJob(t, `{"type":"a.b","args":[],"expires_at":"2026-11-21T10:00:01Z"}`, t0)
	_ = s.Create(ctx, []*job.Job{j}, time.Minute)
	var ce *store.ConflictError
	if _, err := s.Apply(ctx, store.Claim(j.ID, store.ClaimOpts{Queue: j.Queue, Now: t0.Add(2 * time.Second), LeaseUntil: t0.Add(time.Minute)})); !errors.As(err, &ce) {
		t.Fatalf("claim of expired job: %v", err)
	}
	d, err := s.Apply(ctx, store.Expire(ce.Current, t0.Add(2*time.Second)))
	if err != nil || d.State != job.Discarded || d.Error == nil || d.Error.Type != "expired" {
		t.Fatalf("expire: %+v %v", d, err)
	}
	page, err := s.ListQueue(ctx, store.ListDead, j.Queue, nil, 10, "")
	if err != nil || len(page.Items) != 1 || page.Items[0].Job.ID != j.ID {
		t.Fatalf("dead list: %+v %v", page, err)
	}
}

// newJobCopy returns the job with id among jobs.
func newJobCopy(t *testing.T, id string, jobs ...*job.Job) *job.Job {
	t.Helper()
	for _, j := range jobs {
		if j.ID == id {
			return j
		}
	}
	t.Fatalf("no job %s", id)
	return nil
}

func jsonList(v []string) string {
	out := "["
	for i, s := range v {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out + "]"
}

// ApplyAll cancels 250 jobs in transactions of 100: the jobs that moved
// on (claimed) answer a ConflictError with their state and stay as they
// are, a missing job answers ErrNotFound, every other job is cancelled;
// a transaction that lost a job to its condition is tried again without it.
func TestApplyAllAnswersPerJob(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	const n = 250
	jobs := make([]*job.Job, n)
	for i := range jobs {
		jobs[i] = newJob(t, `{"type":"a.b","args":[],"options":{"queue":"applyall"}}`, t0)
	}
	for lo := 0; lo < n; lo += 25 {
		if err := s.Create(ctx, jobs[lo:lo+25], time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	claimed := map[int]bool{3: true, 150: true, 151: true, 249: true}
	for i := range claimed {
		if _, err := s.Apply(ctx, store.Claim(jobs[i].ID, store.ClaimOpts{Queue: "applyall", Now: t0, LeaseUntil: t0.Add(time.Minute)})); err != nil {
			t.Fatal(err)
		}
	}
	var ts []store.Transition
	for _, j := range jobs {
		ts = append(ts, store.Cancel(j.ID, t0, job.Available))
	}
	missing := uuid.Must(uuid.NewV7()).String()
	ts = append(ts, store.Cancel(missing, t0, job.Available))
	errs, err := s.ApplyAll(ctx, ts)
	if err != nil || len(errs) != n+1 {
		t.Fatalf("ApplyAll: %d answers, %v", len(errs), err)
	}
	for i, j := range jobs {
		got, gerr := s.Get(ctx, j.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		var ce *store.ConflictError
		switch {
		case claimed[i]:
			if !errors.As(errs[i], &ce) || ce.Current.State != job.Active || got.State != job.Active {
				t.Fatalf("claimed job %d: answer %v, state %s", i, errs[i], got.State)
			}
		case errs[i] != nil || got.State != job.Cancelled:
			t.Fatalf("job %d: answer %v, state %s", i, errs[i], got.State)
		}
	}
	if !errors.Is(errs[n], store.ErrNotFound) {
		t.Fatalf("missing job: %v", errs[n])
	}
}
