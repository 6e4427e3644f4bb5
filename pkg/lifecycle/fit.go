package lifecycle

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// fitting keeps those of a queue's candidates whose needs worker meets
// (job.Needs.Fit, docs/ml-resources.md), the ones it prefers first within
// each priority; skipped reports that some did not fit (claimPast then
// looks at the next window of the queue, as for jobs a rate limit key
// holds). The needs are read with the candidates' ids (the ready index
// does not hold them), once per enqueued job and process (c).
func (c *needsCache) fitting(ctx context.Context, st *store.Store, worker *job.Capabilities, items []store.Item) (kept []store.Item, skipped bool, err error) {
	needs, err := c.of(ctx, st, items)
	if err != nil {
		return nil, false, err
	}
	scores := make(map[string]int, len(items))
	for _, it := range items {
		if ok, score := needs[it.Job.ID].Fit(worker); ok {
			kept, scores[it.Job.ID] = append(kept, it), score
		}
	}
	slices.SortStableFunc(kept, func(a, b store.Item) int {
		return cmp.Or(cmp.Compare(b.Job.Priority, a.Job.Priority), cmp.Compare(scores[b.Job.ID], scores[a.Job.ID]))
	})
	return kept, len(kept) < len(items), nil
}

// maxNeedsCached bounds needsCache (emptied when full).
const maxNeedsCached = 10000

// needsCache holds the needs of jobs this process read, by job id and
// ready_sk (a job's needs never change while it waits; ready_sk tells an
// enqueue from a later one of the same id).
type needsCache struct{ m boundedMap[string, job.Needs] }

// of reads the needs of items' jobs: the cached ones from memory, the
// others with one batch read of their ids and stored needs.
func (c *needsCache) of(ctx context.Context, st *store.Store, items []store.Item) (map[string]job.Needs, error) {
	out := make(map[string]job.Needs, len(items))
	var keys []map[string]types.AttributeValue
	readySK := map[string]string{}
	for _, it := range items {
		if n, ok := c.m.get(it.Job.ID + "\x00" + it.ReadySK); ok {
			out[it.Job.ID] = n
			continue
		}
		keys, readySK[it.Job.ID] = append(keys, store.JobKey(it.Job.ID)), it.ReadySK
	}
	var mu sync.Mutex
	err := store.BatchGet(ctx, st.DB(), st.Table(), keys, "id, rq", func(av map[string]types.AttributeValue) error {
		var v struct {
			ID    string `dynamodbav:"id"`
			Needs string `dynamodbav:"rq"`
		}
		if err := attributevalue.UnmarshalMap(av, &v); err != nil {
			return err
		}
		n, err := job.DecodeNeeds(v.Needs)
		if err != nil {
			return err
		}
		mu.Lock()
		out[v.ID] = n
		mu.Unlock()
		c.m.put(v.ID+"\x00"+readySK[v.ID], n)
		return nil
	})
	return out, err
}
