// Package scale proves the workflow data model at its documented maximum:
// a batch and a group of 10,000 jobs, each on a fresh DynamoDB Local
// (which slows down badly once it has served one such run).
package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// TestTenThousandJobs runs a batch and a group of 10,000 jobs each through
// the real store with 16 concurrent workers, every completion reported to
// the engine twice: callbacks fire once, counters are exact, and the root
// node takes one write per counter shard rather than per job.
func TestTenThousandJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("scale run skipped with -short")
	}
	for _, kind := range []string{"group", "batch"} {
		t.Run(kind, func(t *testing.T) { scaleRun(t, kind, scaleJobs) })
	}
}

// newStack starts fresh emulators and returns a store, a lifecycle service
// and a workflow engine on them, wired as the product wires them (the
// request that finishes a job advances its workflow).
func newStack(t *testing.T) (*store.Store, *lifecycle.Service, *workflow.Engine) {
	ctx0 := context.Background()
	em, err := emulator.Start(ctx0, emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(em.Stop)
	for _, kv := range em.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	cfg, err := awsclient.Load(ctx0)
	if err != nil {
		t.Fatal(err)
	}
	db := dynamodb.NewFromConfig(cfg, awsclient.DynamoDBOptions)
	if _, err := emulator.EnsureTable(ctx0, db, "scale"); err != nil {
		t.Fatal(err)
	}
	st := store.New(db, "scale")
	qsvc := queue.NewService(st, queue.Config{})
	eng := workflow.New(st, workflow.Config{Admit: qsvc})
	svc := lifecycle.New(st, lifecycle.Config{Queues: qsvc, Workflows: eng})
	return st, svc, eng
}

// runBudget bounds one workflow's run: far beyond what it needs (a
// minute or two here, beside the soak on two cores), so that only a
// workflow that stops advancing fails, never a slow machine.
const runBudget = 20 * time.Minute

// runAll plays 16 pull workers until the workflow finishes: every ACK
// advances the workflow inline and the stream's verification then sees
// the record twice. It returns the jobs run by type.
func runAll(t *testing.T, st *store.Store, svc *lifecycle.Service, eng *workflow.Engine, queue, id string, deadline time.Time) map[string]int {
	ctx := context.Background()
	var mu sync.Mutex
	ran := map[string]int{}
	var wg sync.WaitGroup
	done := func() bool {
		root, err := wfstore.New(st).GetRoot(ctx, id)
		return err == nil && root.State.Terminal()
	}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{queue}, Count: 25})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					if done() {
						return
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				for _, j := range got {
					mu.Lock()
					ran[j.Type]++
					mu.Unlock()
					fin, err := svc.Ack(ctx, j.ID, json.RawMessage(`1`), 0)
					if err != nil {
						t.Error(err)
						return
					}
					for k := 0; k < 2; k++ {
						if err := eng.Verify(ctx, []workflow.Finished{{Job: fin}}); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	return ran
}

func scaleRun(t *testing.T, kind string, n int) {
	st, svc, eng := newStack(t)
	ctx := context.Background()
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = fmt.Sprintf(`{"type":"scale.job","args":[%d],"options":{"queue":"scale"}}`, i)
	}
	body := `{"type":"` + kind + `","jobs":[` + strings.Join(jobs, ",") + `]`
	if kind == "batch" {
		body += `,"callbacks":{"on_complete":{"type":"scale.done","args":[],"options":{"queue":"scale"}},"on_success":{"type":"scale.ok","args":[],"options":{"queue":"scale"}}}`
	}
	body += `}`
	start := time.Now()
	v, err := eng.Create(ctx, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	id := v.ID
	created := time.Since(start)
	ran := runAll(t, st, svc, eng, "scale", id, time.Now().Add(runBudget))
	root, err := wfstore.New(st).GetRoot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s of %d jobs: created+started in %v, finished in %v; root node version %d (writes)", kind, n, created.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond), root.Version())
	wantCallbacks := int64(0)
	if kind == "batch" {
		wantCallbacks = 2
	}
	shards, ok, fail := root.RolledCounts()
	callbacks := int64(ran["scale.done"] + ran["scale.ok"])
	if root.State != "completed" || ok != n || fail != 0 || shards != root.Shards || ran["scale.job"] != n || callbacks != wantCallbacks {
		t.Fatalf("state %s ok %d fail %d shards %d/%d ran %v callbacks %d", root.State, ok, fail, shards, root.Shards, ran, callbacks)
	}
	if root.Version() > int64(root.Shards)+10 {
		t.Fatalf("the root node took %d writes for %d shards: a write per job somewhere", root.Version(), root.Shards)
	}
}

// scaleJobs is the size of each run: the documented maximum.
var scaleJobs = wfdef.MaxJobs

// TestThousandStepGraphs runs two dependency graphs of 1,000 steps: a wide
// one (10 layers of 100 steps, each waiting for two steps of the layer
// before) and a deep one (a line of 999 steps that also waits for one
// more root at its end), each completion seen inline and twice by the
// stream: every step runs exactly once and the graph completes, its
// progress on one item.
func TestThousandStepGraphs(t *testing.T) {
	if testing.Short() {
		t.Skip("scale run skipped with -short")
	}
	st, svc, eng := newStack(t)
	for _, shape := range []string{"wide", "deep"} {
		t.Run(shape, func(t *testing.T) {
			ctx := context.Background()
			var steps []string
			for i := 0; i < 1000; i++ {
				var deps []string
				switch {
				case shape == "wide" && i >= 100:
					layer := i / 100
					a, b := (layer-1)*100+(i*7)%100, (layer-1)*100+(i*13+1)%100
					deps = []string{fmt.Sprintf(`"s%d"`, a)}
					if b != a {
						deps = append(deps, fmt.Sprintf(`"s%d"`, b))
					}
				case shape == "deep" && i > 0 && i < 999:
					deps = []string{fmt.Sprintf(`"s%d"`, i-1)}
				case shape == "deep" && i == 999:
					deps = []string{`"s998"`, `"s0"`}
				}
				steps = append(steps, fmt.Sprintf(`{"id":"s%d","type":"g.step","args":[%d],"depends_on":[%s]}`, i, i, strings.Join(deps, ",")))
			}
			if shape == "deep" {
				// The line's first step waits for a second root, so the
				// shape is a graph, not a chain.
				steps[1] = `{"id":"s1","type":"g.step","args":[1],"depends_on":["s0","root2"]}`
				steps = append(steps, `{"id":"root2","type":"g.step","args":[-1],"depends_on":[]}`)
			}
			q := "graph-" + shape
			start := time.Now()
			v, err := eng.Create(ctx, []byte(`{"name":"`+shape+`","options":{"queue":"`+q+`"},"steps":[`+strings.Join(steps, ",")+`]}`))
			if err != nil {
				t.Fatal(err)
			}
			if v.Type != "graph" {
				t.Fatalf("parsed as %v", v.Type)
			}
			id := v.ID
			ran := runAll(t, st, svc, eng, q, id, time.Now().Add(runBudget))
			root, err := wfstore.New(st).GetRoot(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s graph of %d steps finished in %v; graph node version %d (writes)", shape, len(steps), time.Since(start).Round(time.Millisecond), root.Version())
			if root.State != "completed" || len(root.OK) != len(steps) || ran["g.step"] != len(steps) {
				t.Fatalf("state %s ok %d ran %v", root.State, len(root.OK), ran)
			}
		})
	}
}
