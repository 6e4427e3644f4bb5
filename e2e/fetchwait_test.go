package e2e

import (
	"bytes"
	"encoding/json"
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
			raw, _ := json.Marshal(map[string]any{"queues": []string{q}, "worker_id": fmt.Sprint("e2e-wait-", w), "wait_ms": 20000})
			req, _ := http.NewRequest(http.MethodPost, baseURL+"/ojs/v1/workers/fetch", bytes.NewReader(raw))
			req.Header.Set("Content-Type", "application/openjobspec+json")
			if authToken != "" {
				req.Header.Set("Authorization", "Bearer "+authToken)
			}
			res, err := client.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer res.Body.Close()
			var body struct {
				Jobs []struct {
					ID string `json:"id"`
				} `json:"jobs"`
			}
			err = json.NewDecoder(res.Body).Decode(&body)
			if err == nil && res.StatusCode != 200 {
				err = fmt.Errorf("status %d", res.StatusCode)
			}
			a := answer{err: err, took: time.Since(start)}
			for _, j := range body.Jobs {
				a.ids = append(a.ids, j.ID)
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
