package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// pullPool is the in-test pool of pull-mode workers: each fetches from the
// pull queues, runs the job by its planned behaviour and ACKs or NACKs it
// through the HTTP API. Sometimes a worker "dies": it did the work (or not)
// and never ACKs, stops heartbeating, and is replaced by a new worker id;
// its leases expire and the jobs run again.
type pullPool struct {
	c       *client
	count   *counters
	die     float64 // probability per job that the worker dies holding it
	mu      sync.Mutex
	runs    map[string]int // job id + "#" + attempt -> times this pool ran it
	doubles []string       // the same attempt of a job handed out twice
	acks    map[string]int // job id -> successful (200) ACKs
	// acked is the attempt each successful ACK acknowledged: a job must
	// complete at the attempt that was acknowledged, never at a later one
	// another worker holds (ojs-worker-protocol 5.6, reservation ownership).
	acked map[string][]int
}

type fetched struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Attempt int    `json:"attempt"`
	Args    []any  `json:"args"`
}

const leaseMS = 3000

func (p *pullPool) run(ctx context.Context, workers int, seed uint64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p.worker(ctx, i, rand.New(rand.NewPCG(seed, uint64(i)+1)))
		}(i)
	}
	return &wg
}

func (p *pullPool) worker(ctx context.Context, i int, r *rand.Rand) {
	gen := 0
	for ctx.Err() == nil {
		wid := fmt.Sprintf("soak-w%d-g%d", i, gen)
		st, raw, _ := p.c.call(ctx, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": pullQueues, "count": 4, "worker_id": wid,
			"visibility_timeout_ms": leaseMS})
		var res struct {
			Jobs []fetched `json:"jobs"`
		}
		if st != 200 || json.Unmarshal(raw, &res) != nil || len(res.Jobs) == 0 {
			sleep(ctx, 150*time.Millisecond)
			continue
		}
		died := false
		for _, j := range res.Jobs {
			if died {
				break // its other jobs are abandoned with it
			}
			p.mu.Lock()
			key := fmt.Sprintf("%s#%d", j.ID, j.Attempt)
			p.runs[key]++
			if p.runs[key] == 2 {
				p.doubles = append(p.doubles, key)
			}
			p.mu.Unlock()
			if r.Float64() < p.die {
				died = true
				p.count.add("pull worker died holding jobs (never ACKs; leases expire)", 1)
				continue
			}
			if r.Float64() < 0.02 {
				// A zombie: the worker stalls past its lease without
				// heartbeating (a GC pause, a network partition), then
				// carries on as if nothing happened. By then the job may run
				// elsewhere: its late ACK or NACK must be refused.
				sleep(ctx, (leaseMS+1500)*time.Millisecond)
				p.count.add("pull: zombie worker stalled past its lease, then answered", 1)
			} else if r.Float64() < 0.03 {
				// A slow job: the worker heartbeats to keep its lease.
				for k := 0; k < 3 && ctx.Err() == nil; k++ {
					sleep(ctx, time.Second)
					p.c.call(ctx, "POST", "/ojs/v1/workers/heartbeat", map[string]any{"worker_id": wid, "active_jobs": []string{j.ID},
						"visibility_timeout_ms": leaseMS})
				}
				p.count.add("pull: slow jobs kept alive by heartbeats", 1)
			}
			tag, _ := j.Args[0].(string)
			fail := j.Type == "soak."+behaveFail || (j.Type == "soak."+behaveFlaky && j.Attempt == 1)
			var st int
			var retried bool
			if fail {
				st, _, retried = p.c.call(ctx, "POST", "/ojs/v1/workers/nack", map[string]any{"job_id": j.ID, "worker_id": wid,
					"error": map[string]any{"type": j.Type, "message": fmt.Sprintf("attempt %d fails on purpose", j.Attempt), "retryable": true}})
			} else {
				st, _, retried = p.c.call(ctx, "POST", "/ojs/v1/workers/ack", map[string]any{"job_id": j.ID, "worker_id": wid,
					"result": map[string]any{"tag": tag, "attempt": j.Attempt}})
				if st == 200 {
					p.mu.Lock()
					p.acks[j.ID]++
					p.acked[j.ID] = append(p.acked[j.ID], j.Attempt)
					p.mu.Unlock()
				}
			}
			switch {
			case st == 409 && retried:
				p.count.add("pull: ACK/NACK answered 409 after a lost answer (it had committed)", 1)
			case st == 409:
				p.count.add("pull: ACK/NACK too late (lease expired, job moved on)", 1)
			}
		}
		if died {
			gen++
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
