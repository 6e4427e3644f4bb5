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
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"github.com/ojs-aws/ojs-serverless/pkg/emulator"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
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

func scaleRun(t *testing.T, kind string, n int) {
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
	if _, err := store.EnsureTable(ctx0, db, "scale"); err != nil {
		t.Fatal(err)
	}
	st := store.New(db, "scale")
	svc := lifecycle.New(st, lifecycle.Config{})
	eng := workflow.New(st, workflow.Config{Jobs: svc})
	svc.SetWorkflows(eng)
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
	id := (*v)["id"].(string)
	created := time.Since(start)
	var ran, callbacks atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(8 * time.Minute)
	done := func() bool {
		root, err := st.GetNode(ctx, id, store.RootPath)
		return err == nil && (root.State == "completed" || root.State == "failed")
	}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				got, err := svc.Fetch(ctx, lifecycle.FetchRequest{Queues: []string{"scale"}, Count: 25})
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
					if j.Type == "scale.job" {
						ran.Add(1)
					} else {
						callbacks.Add(1)
					}
					// The ACK advances the workflow inline; the stream's
					// verification then sees the record twice.
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
	root, err := st.GetNode(ctx, id, store.RootPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s of %d jobs: created+started in %v, finished in %v; root node version %d (writes)", kind, n, created.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond), root.Version)
	wantCallbacks := int64(0)
	if kind == "batch" {
		wantCallbacks = 2
	}
	shards, ok, fail := root.RolledCounts()
	if root.State != "completed" || ok != n || fail != 0 || shards != root.Shards || ran.Load() != int64(n) || callbacks.Load() != wantCallbacks {
		t.Fatalf("state %s ok %d fail %d shards %d/%d ran %d callbacks %d", root.State, ok, fail, shards, root.Shards, ran.Load(), callbacks.Load())
	}
	if root.Version > int64(root.Shards)+10 {
		t.Fatalf("the root node took %d writes for %d shards: a write per job somewhere", root.Version, root.Shards)
	}
}

// scaleJobs is the size of each run: the documented maximum.
var scaleJobs = workflow.MaxJobs
