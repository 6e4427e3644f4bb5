package deadletter_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The job service gives the dead letter service its clock, push-mode
// queues and queue registry.
var _ deadletter.Jobs = (*lifecycle.Service)(nil)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func code(err error) ojserr.Code { return ojserr.As(err).Code }

// newServices returns a job service, its queue service (one push-mode
// queue, "lambda") and the dead letter service on st, all on clock c.
func newServices(st *store.Store, c *clock, dc deadletter.Config) (*lifecycle.Service, *queue.Service, *deadletter.Service) {
	q := queue.NewService(st, queue.Config{Now: c.Now, PushQueues: []string{"lambda"}})
	s := lifecycle.New(st, lifecycle.Config{Now: c.Now, Rand: func() float64 { return 0.5 }, Queues: q})
	return s, q, deadletter.New(st, s, q, dc)
}

// newService is newServices on a table of its own, at 2026-11-21 10:00.
func newService(t *testing.T) (*lifecycle.Service, *deadletter.Service, *clock) {
	t.Helper()
	st, _ := testenv.Table(t)
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	s, _, d := newServices(st, c, deadletter.Config{})
	return s, d, c
}

// discard pushes a job to queue q and discards it at the clock's time.
func discard(t *testing.T, s *lifecycle.Service, q string) string {
	t.Helper()
	ctx := context.Background()
	j, err := s.Push(ctx, []byte(`{"type":"test.dead","args":[],"options":{"queue":"`+q+`","retry":{"max_attempts":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{q}})
	if err != nil || len(got) != 1 || got[0].ID != j.ID {
		t.Fatalf("fetch %s: %v %v", j.ID, got, err)
	}
	if d, err := s.Nack(ctx, j.ID, lifecycle.ErrorInput{Type: "Boom", Message: "boom"}, 0); err != nil || d.State != job.Discarded {
		t.Fatalf("nack: %+v %v", d, err)
	}
	return j.ID
}

func deadIDs(t *testing.T, d *deadletter.Service, q string) []string {
	t.Helper()
	jobs, _, err := d.List(context.Background(), q, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	sort.Strings(ids)
	return ids
}
