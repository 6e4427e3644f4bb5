package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// A FETCH with wait_ms waits for jobs (a long poll): three workers wait on
// an empty queue, more than the api function's warm execution
// environments, and the jobs pushed meanwhile are each handed to one of
// them long before their wait is over. The PUSHes are served while the
// waiting FETCHes hold environments: the local runtime starts more, as
// Lambda does.
func TestWaitingFetchesTakeJobsPushedDuringTheirWait(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	const workers = 3
	type answer struct {
		ids  []string
		err  error
		took time.Duration
	}
	answers := make(chan answer, workers)
	for w := range workers {
		go func() {
			start := time.Now()
			r, err := send(http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": fmt.Sprint("e2e-wait-", w), "wait_ms": 20000})
			if err == nil && r.Status != 200 {
				err = fmt.Errorf("status %d: %s", r.Status, r.Raw)
			}
			a := answer{err: err, took: time.Since(start)}
			jobs, _ := r.Body["jobs"].([]any)
			for _, j := range jobs {
				a.ids = append(a.ids, j.(map[string]any)["id"].(string))
			}
			answers <- a
		}()
	}
	// A FETCH without a wait answers within milliseconds: none may have
	// answered before the jobs exist.
	time.Sleep(1500 * time.Millisecond)
	select {
	case a := <-answers:
		t.Fatalf("a waiting FETCH answered before any job was pushed: %+v", a)
	default:
	}
	pushed := map[string]bool{}
	for range workers {
		pushed[push(t, map[string]any{"type": "wait.job", "args": []any{}, "options": map[string]any{"queue": q}})["id"].(string)] = true
	}
	for range workers {
		a := <-answers
		if a.err != nil || len(a.ids) != 1 || !pushed[a.ids[0]] {
			t.Fatalf("waiting FETCH: %+v, want one of the pushed jobs %v", a, pushed)
		}
		if a.took >= 20*time.Second {
			t.Fatalf("a FETCH got its job only after its whole wait (%v)", a.took)
		}
		delete(pushed, a.ids[0]) // each job handed out once
	}
}
