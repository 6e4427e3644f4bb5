package wfstore

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/fault"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// NewWorkflow is everything a workflow's creation writes: its nodes (the
// root among them), the counter shards of its wide composites, and the
// jobs that start at once.
type NewWorkflow struct {
	Nodes  []Node
	Shards []Shard
	Jobs   []*job.Job
	// RedeliverAfter is passed to job creation (see store.Store.Create).
	RedeliverAfter time.Duration
	// FreshID is set when the server made the workflow's id (a UUIDv7 no
	// other workflow can hold): its creation may do without the check
	// that no workflow has it (see CreateWorkflow).
	FreshID bool
}

// CreateWorkflow writes a new workflow. Up to store.MaxBatch items (nodes,
// shards and first jobs together, and 3 MB of them) are written in one
// transaction, so the
// workflow and its first jobs appear together or not at all; a small one
// with a server-made id (FreshID) and one first job is written by two
// requests instead (createUnguarded). A larger one
// is written in stages: the root first (conditional, marked creating),
// then its other items, then the root unmarked and marked Unguarded, then
// its first jobs by conditional puts (absent) without a check of the root
// (a cancel meanwhile puts the ones not written yet as cancelled:
// workflow.takeUnwritten), then the Unguarded mark removed. A creator that
// dies while the root is marked leaves only items the sweeper deletes
// (no job exists before the mark is removed); one that dies later leaves
// a running workflow whose missing first jobs the sweeper's repair
// creates.
func (s *Store) CreateWorkflow(ctx context.Context, w NewWorkflow) error {
	root, items, err := workflowItems(w)
	if err != nil {
		return err
	}
	r := *root
	r.Rev = 1
	bytes := 0
	for _, it := range items {
		bytes += store.ItemBytes(it)
	}
	for _, j := range w.Jobs {
		n, err := store.JobItemBytes(j, w.RedeliverAfter)
		if err != nil {
			return err
		}
		bytes += n
	}
	if w.FreshID && len(w.Jobs) == 1 && len(items)+1 <= batchWriteMax && bytes <= awslimit.DynamoTxBytes-txNodeReserve {
		return s.createUnguarded(ctx, r, items, w)
	}
	if len(items)+len(w.Jobs)+1 <= store.MaxBatch && bytes <= awslimit.DynamoTxBytes-txNodeReserve {
		rootAV, err := marshalNode(&r)
		if err != nil {
			return err
		}
		tx := make([]types.TransactWriteItem, 0, len(items)+len(w.Jobs)+1)
		tx = append(tx, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: rootAV, ConditionExpression: aws.String("attribute_not_exists(pk)")}})
		for _, it := range items {
			tx = append(tx, types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: it}})
		}
		for _, j := range w.Jobs {
			put, err := s.jobs.JobPut(j, w.RedeliverAfter)
			if err != nil {
				return err
			}
			tx = append(tx, types.TransactWriteItem{Put: put})
		}
		_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
		if i, ok := store.FailedCondition(err); ok {
			if i == 0 {
				return ErrWorkflowExists
			}
			return &store.DuplicateError{ID: w.Jobs[i-1-len(items)].ID}
		}
		return createErr(r.WorkflowID, err)
	}
	r.Creating = true
	if err := s.putRoot(ctx, r); err != nil {
		return err
	}
	if err := store.BatchPut(ctx, s.db, s.table, items); err != nil {
		return createErr(r.WorkflowID, err)
	}
	// The mark off and Unguarded on in one write: from here a cancel may
	// come, and it finds the first jobs' writes unguarded.
	if _, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(r.WorkflowID, nodeSK(RootPath)),
		UpdateExpression: aws.String("SET cfirst = :t REMOVE creating"), ConditionExpression: aws.String("attribute_exists(pk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}}}); err != nil {
		return createErr(r.WorkflowID, err)
	}
	if _, err := s.putJobs(ctx, w.Jobs, w.RedeliverAfter); err != nil {
		return createErr(r.WorkflowID, err)
	}
	return s.unmark(ctx, r.WorkflowID, attrUnguarded)
}

// batchWriteMax is the most items one BatchWriteItem writes.
const batchWriteMax = 25

// createUnguarded writes a small workflow with a server-made id and one
// first job (a chain, say) as two requests instead of a
// transaction, for half the write units (a transaction bills every item
// twice): the root, marked Unguarded, and its nodes in one
// BatchWriteItem, then the first job's conditional put. What the
// transaction gave is kept otherwise: the id cannot be taken, so the
// root's duplicate check has nothing to find; a cancel between the two
// finds the mark and takes the job's place (workflow.takeUnwritten), so
// the put fails; a creator that dies between them leaves a running
// workflow without its first job, which the root's progress check writes
// (workflow.Repair), as for a large creation; the client saw a 5xx, as
// when the answer to a committed transaction is lost. The mark stays (a
// later cancel reads the first job once more; the repair removes it from a
// workflow still running past the creation's grace).
func (s *Store) createUnguarded(ctx context.Context, r Root, items []map[string]types.AttributeValue, w NewWorkflow) error {
	r.Unguarded = true
	rootAV, err := marshalNode(&r)
	if err != nil {
		return err
	}
	if err := store.BatchPut(ctx, s.db, s.table, append([]map[string]types.AttributeValue{rootAV}, items...)); err != nil {
		return createErr(r.WorkflowID, err)
	}
	if err := fault.Hit(fault.WorkflowAfterItems); err != nil {
		return err
	}
	_, err = s.putJobs(ctx, w.Jobs, w.RedeliverAfter)
	return createErr(r.WorkflowID, err)
}

// createErr is err (if any) as an error of workflow wfID's creation.
func createErr(wfID string, err error) error {
	if err != nil {
		return fmt.Errorf("create workflow %s: %w", wfID, err)
	}
	return nil
}

// putJobs writes jobs by conditional puts (absent), several at once: one
// that exists already (a cancel's placeholder, workflow.takeUnwritten, or an
// earlier try) is kept as it is. It returns how many it wrote.
func (s *Store) putJobs(ctx context.Context, jobs []*job.Job, redeliverAfter time.Duration) (int, error) {
	puts, err := s.jobPuts(jobs, redeliverAfter)
	if err != nil {
		return 0, err
	}
	return s.putAll(ctx, puts)
}

// putAll makes the conditional puts of putJobs, 16 at once.
func (s *Store) putAll(ctx context.Context, puts []*types.Put) (int, error) {
	var written atomic.Int64
	err := store.Parallel(ctx, len(puts), 16, func(ctx context.Context, i int) error {
		p := puts[i]
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: p.TableName, Item: p.Item, ConditionExpression: p.ConditionExpression})
		if err == nil {
			written.Add(1)
		}
		if err != nil && !store.ConditionFailed(err) {
			pk, _ := p.Item[attrPK].(*types.AttributeValueMemberS)
			return fmt.Errorf("put %s: %w", pk.Value, err)
		}
		return nil
	})
	return int(written.Load()), err
}

// BeginWorkflow writes only the root of a workflow created asynchronously:
// marked creating, holding the definition def (gzipped, Root.Definition
// reads it), conditional on no workflow with its id existing
// (ErrWorkflowExists). The stream function finishes it from the root's
// insert record (ResumeWorkflow), and the sweeper if that failed. items is
// how many nodes the creation writes besides the root, for progress.
func (s *Store) BeginWorkflow(ctx context.Context, root Root, def []byte, items int) error {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := w.Write(def); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	root.Rev, root.Creating, root.CDef, root.CreateItems = 1, true, buf.Bytes(), items
	av, err := marshalNode(&root)
	if err != nil {
		return err
	}
	if store.ItemBytes(av) > deferredRootBytes {
		return ErrTooLargeToDefer
	}
	return s.putRoot(ctx, root)
}

// ErrCreationBusy is ResumeWorkflow finding another writer's lease on the
// creation: that writer finishes it, or the sweeper once the lease ends.
var ErrCreationBusy = errors.New("another writer is creating the workflow")

// ErrCreationUnfinished is ResumeWorkflow stopping with part of the
// creation written: its slice of writing time ended, or its caller's time
// (the context's deadline, less a margin) ran out. It gave its lease back
// (a change of the root, so the stream function runs the next slice);
// running it again continues from what exists.
var ErrCreationUnfinished = errors.New("workflow creation not finished in this slice")

// CreationLease is the longest a ResumeWorkflow holds a creation. A
// caller with a deadline (a Lambda invocation) holds it only until that
// deadline and a little more, so a writer the runtime killed at its
// timeout is followed at once.
const CreationLease = 3 * time.Minute

// leaseSlack is how long a lease outlives its writer's deadline.
const leaseSlack = 2 * time.Second

// resumeMargin is the time ResumeWorkflow keeps before its caller's
// deadline to give its lease back: a tenth of what is left, at most 5 s.
func resumeMargin(left time.Duration) time.Duration { return min(5*time.Second, left/10) }

// ResumeWorkflow finishes a workflow BeginWorkflow started, from the same
// items CreateWorkflow would write: while the root is marked creating (no
// job exists yet) its nodes and shards are written and the mark removed;
// then its first jobs are written (conditional puts, so jobs that exist
// are kept as they are) and the definition dropped from the root. Every
// step is idempotent, so a writer that died is resumed by running it
// again; a writer after the first reads which items exist and writes only
// the others, so every try gets further than the last. One writer at a
// time: it first takes a lease on the root (ErrCreationBusy while
// another's runs), since a second writer's unconditional node writes could
// otherwise land after the first had started the jobs, over their
// progress. It writes for at most slice (0: no limit; the clock starts at
// its first write, after it read what exists, so every slice gets
// further) and never past shortly before ctx's deadline, and gives the
// lease back when it fails or stops (ErrCreationUnfinished). A workflow
// whose creation is finished changes nothing.
func (s *Store) ResumeWorkflow(ctx context.Context, w NewWorkflow, now time.Time, slice time.Duration) error {
	want, items, err := workflowItems(w)
	if err != nil {
		return err
	}
	wfID := want.WorkflowID
	lease, work := CreationLease, ctx
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		lease = min(lease, left+leaseSlack)
		var cancel context.CancelFunc
		work, cancel = context.WithTimeout(ctx, left-resumeMargin(left))
		defer cancel()
	}
	until := now.Add(lease).UnixMilli()
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		UpdateExpression:          aws.String("SET clease = :until ADD ctries :one"),
		ConditionExpression:       aws.String("attribute_exists(cdef) AND (attribute_not_exists(clease) OR clease < :now)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": store.AttrN(until), ":now": store.AttrN(now.UnixMilli()), ":one": store.AttrN(1)},
		ReturnValues:              types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		if _, pending := ccf.Item["cdef"]; pending {
			return ErrCreationBusy
		}
		return nil // finished (or gone)
	}
	if err != nil {
		return createErr(wfID, err)
	}
	root, err := store.Unmarshal[Root](out.Attributes)
	if err != nil {
		return err
	}
	var end atomic.Int64 // Unix ns; 0 until the first write
	startSlice := func() {
		if slice > 0 {
			end.CompareAndSwap(0, time.Now().Add(slice).UnixNano())
		}
	}
	wctx := store.WithSlice(work, func() bool {
		e := end.Load()
		return e != 0 && time.Now().UnixNano() > e
	})
	done, err := s.resume(wctx, startSlice, w, *root, items)
	if err == nil {
		return nil
	}
	stopped := work.Err() != nil || errors.Is(err, store.ErrSliceOver)
	// Give the lease back so a retry need not wait for it to end, with
	// how far this try got, so the next one need not read it.
	_, _ = s.db.UpdateItem(context.WithoutCancel(ctx), &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		UpdateExpression: aws.String("SET cjobs = :done, cclean = :try REMOVE clease"), ConditionExpression: aws.String("clease = :until"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": store.AttrN(until), ":done": store.AttrN(int64(done)), ":try": store.AttrN(int64(root.CreateTries))}})
	if stopped {
		return fmt.Errorf("create workflow %s: %w (%v)", wfID, ErrCreationUnfinished, err)
	}
	return err
}

// resume writes what ResumeWorkflow writes; startSlice starts the slice's
// clock (at the first write). It returns how many of the first jobs, in
// job id order, are known to exist (see Creation.CreateJobs).
func (s *Store) resume(ctx context.Context, startSlice func(), w NewWorkflow, root Root, items []map[string]types.AttributeValue) (int, error) {
	again := root.CreateTries > 1 // an earlier writer may have written part of it
	if root.Creating {
		if again {
			keys := make([]map[string]types.AttributeValue, len(items))
			for i, it := range items {
				keys[i] = map[string]types.AttributeValue{attrPK: it[attrPK], attrSK: it[attrSK]}
			}
			have, err := s.existing(ctx, keys)
			if err != nil {
				return 0, createErr(root.WorkflowID, err)
			}
			items = slices.DeleteFunc(slices.Clone(items), func(it map[string]types.AttributeValue) bool { return have[itemKey(it)] })
		}
		startSlice()
		if err := store.BatchPut(ctx, s.db, s.table, items); err != nil {
			return 0, createErr(root.WorkflowID, err)
		}
		if err := s.unmark(ctx, root.WorkflowID, "creating"); err != nil {
			return 0, err
		}
	}
	// The first jobs in id order (their ids are fixed by the workflow and
	// the steps' paths), so that every try writes them in the same order
	// and what exists is a leading run of them (Advance writes its
	// transactions one after another, in order) plus at most a request in
	// flight when a try stopped.
	all := slices.SortedFunc(slices.Values(w.Jobs), func(a, b *job.Job) int { return strings.Compare(a.ID, b.ID) })
	start := min(root.CreateJobs, len(all))
	jobs, at := all[start:], []int(nil) // at[i]: the index in all of jobs[i], when some were skipped
	if again && root.CreateClean != root.CreateTries-1 {
		// The try before died: read which exist past what a clean one
		// recorded.
		keys := make([]map[string]types.AttributeValue, len(jobs))
		for i, j := range jobs {
			keys[i] = store.JobKey(j.ID)
		}
		have, err := s.existing(ctx, keys)
		if err != nil {
			return start, createErr(root.WorkflowID, err)
		}
		var kept []*job.Job
		for i, j := range jobs {
			if !have[itemKey(store.JobKey(j.ID))] {
				kept = append(kept, j)
				at = append(at, start+i)
			}
		}
		jobs = kept
	}
	done := start
	progress := func(n int) { // jobs[:n] exist
		switch {
		case n >= len(jobs):
			done = len(all)
		case at != nil:
			done = at[n]
		default:
			done = start + n
		}
	}
	startSlice()
	err := s.Advance(ctx, Advance{WorkflowID: root.WorkflowID, Jobs: jobs, RedeliverAfter: w.RedeliverAfter, Progress: progress})
	if err != nil && !errors.Is(err, ErrWorkflowNotRunning) {
		return done, err
	}
	return len(all), s.unmark(ctx, root.WorkflowID, "cdef", "citems", "clease", "ctries", "cjobs", "cclean")
}

// existing reads which of keys name an item (consistently, keys only,
// 100 a request, 8 requests at once) and returns them by itemKey.
func (s *Store) existing(ctx context.Context, keys []map[string]types.AttributeValue) (map[string]bool, error) {
	have := map[string]bool{}
	var mu sync.Mutex
	err := store.BatchGet(ctx, s.db, s.table, keys, "pk, sk", func(av map[string]types.AttributeValue) error {
		mu.Lock()
		have[itemKey(av)] = true
		mu.Unlock()
		return nil
	})
	return have, err
}

// itemKey names an item by its primary key.
func itemKey(av map[string]types.AttributeValue) string {
	pk, _ := av[attrPK].(*types.AttributeValueMemberS)
	sk, _ := av[attrSK].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil {
		return ""
	}
	return pk.Value + "\x00" + sk.Value
}

// putRoot writes a workflow's root, conditional on no workflow with its id
// existing.
func (s *Store) putRoot(ctx context.Context, r Root) error {
	rootAV, err := marshalNode(&r)
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: rootAV, ConditionExpression: aws.String("attribute_not_exists(pk)")})
	if store.ConditionFailed(err) {
		return ErrWorkflowExists
	}
	return createErr(r.WorkflowID, err)
}

// DeleteWorkflowJob deletes a finished job of workflow wfID (completed,
// failed or cancelled) on the condition that it is still in the state
// read: a retry removes the jobs its handlers ran in the run before, whose
// ids (derived from the workflow and the path) the next launch writes
// anew. A discarded job's removal is reported as dead_letter.deleted.
func (s *Store) DeleteWorkflowJob(ctx context.Context, wfID, id string, state job.State) error {
	switch state {
	case job.Completed, job.Discarded, job.Cancelled:
	default:
		return fmt.Errorf("delete job %s: not a finished state: %s", id, state)
	}
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: store.JobKey(id),
		ConditionExpression:       aws.String("#s = :s AND wf_id = :w"),
		ExpressionAttributeNames:  map[string]string{"#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": store.AttrS(string(state)), ":w": store.AttrS(wfID)},
	})
	if store.ConditionFailed(err) {
		return nil // gone, or changed by someone else: not a job of the run before any more
	}
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	return nil
}

// unmark removes creation attributes from a workflow's root (it exists).
func (s *Store) unmark(ctx context.Context, wfID string, attrs ...string) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		UpdateExpression: aws.String("REMOVE " + strings.Join(attrs, ", ")), ConditionExpression: aws.String("attribute_exists(pk)")})
	return createErr(wfID, err)
}

// workflowItems returns a new workflow's root and its other items (nodes
// and counter shards) as written.
func workflowItems(w NewWorkflow) (*Root, []map[string]types.AttributeValue, error) {
	var root *Root
	var items []map[string]types.AttributeValue
	for _, n := range w.Nodes {
		if r, ok := n.(*Root); ok {
			root = r
			continue
		}
		av, err := marshalNew(n)
		if err != nil {
			return nil, nil, err
		}
		items = append(items, av)
	}
	if root == nil {
		return nil, nil, fmt.Errorf("workflow has no root node")
	}
	for _, sh := range w.Shards {
		av, err := attributevalue.MarshalMap(shardItem{PK: wfPrefix + root.WorkflowID, SK: shardSK(sh.Path, sh.Key), WFID: root.WorkflowID, TTL: root.TTL, Shard: sh})
		if err != nil {
			return nil, nil, err
		}
		items = append(items, av)
	}
	return root, items, nil
}

// DeleteWorkflow removes every item of a workflow whose creation never
// finished (its root still marked creating, so none of its jobs exist).
// It returns false if the root is not marked.
func (s *Store) DeleteWorkflow(ctx context.Context, wfID string) (bool, error) {
	keys, err := s.otherKeys(ctx, wfID)
	if err != nil {
		return false, err
	}
	_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: wfKey(wfID, nodeSK(RootPath)),
		ConditionExpression: aws.String("creating = :t"), ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}}})
	if store.ConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete workflow %s: %w", wfID, err)
	}
	for chunk := range slices.Chunk(keys, batchWriteMax) {
		reqs := make([]types.WriteRequest, len(chunk))
		for i, k := range chunk {
			reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: k}}
		}
		for tries := 0; len(reqs) > 0 && tries < 8; tries++ {
			out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{s.table: reqs}})
			if err != nil {
				return true, err
			}
			reqs = out.UnprocessedItems[s.table]
		}
	}
	return true, nil
}

// otherKeys lists the keys of the items of workflow wfID's partition but
// its root.
func (s *Store) otherKeys(ctx context.Context, wfID string) ([]map[string]types.AttributeValue, error) {
	items, err := store.QueryAll[struct {
		SK string `dynamodbav:"sk"`
	}](ctx, s.db, &dynamodb.QueryInput{TableName: &s.table, KeyConditionExpression: aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS(wfPrefix + wfID)}, ProjectionExpression: aws.String("pk, sk")})
	if err != nil {
		return nil, fmt.Errorf("list workflow %s: %w", wfID, err)
	}
	var keys []map[string]types.AttributeValue
	for _, it := range items {
		if it.SK != nodeSK(RootPath) {
			keys = append(keys, wfKey(wfID, it.SK))
		}
	}
	return keys, nil
}

// Extend moves the ttl of every item of workflow wfID and of its jobs
// (jobIDs) that expires before until to until: the rare fan-out for a
// workflow that outlives its expiry (workflow.Engine.keep). Its nodes go
// first (later jobs copy theirs), its root last, so a pass that failed
// half way is made again. Items without a ttl (a permanent workflow) are
// left alone; repeating it changes nothing.
func (s *Store) Extend(ctx context.Context, wfID string, jobIDs []string, until int64) error {
	keys, err := s.otherKeys(ctx, wfID)
	if err != nil {
		return err
	}
	if err := store.Parallel(ctx, len(keys), 16, func(ctx context.Context, i int) error {
		return s.extend(ctx, keys[i], false, until)
	}); err != nil {
		return err
	}
	if err := s.ExtendJobs(ctx, jobIDs, until); err != nil {
		return err
	}
	return s.extend(ctx, wfKey(wfID, nodeSK(RootPath)), false, until)
}

// ExtendJobs moves the ttl of the workflow jobs ids to until where it
// comes before.
func (s *Store) ExtendJobs(ctx context.Context, ids []string, until int64) error {
	return store.Parallel(ctx, len(ids), 16, func(ctx context.Context, i int) error {
		return s.extend(ctx, store.JobKey(ids[i]), true, until)
	})
}

// extend sets the ttl of the item at key to until if it expires before;
// a job's wf_ttl (its workflow's expiry, which it keeps) moves with it.
func (s *Store) extend(ctx context.Context, key map[string]types.AttributeValue, isJob bool, until int64) error {
	set, cond := "SET #t = :t", "#t < :t"
	if isJob {
		set, cond = set+", wf_ttl = :t", "wf_ttl < :t"
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &s.table, Key: key, UpdateExpression: &set, ConditionExpression: &cond,
		ExpressionAttributeNames:  map[string]string{"#t": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": store.AttrN(until)}})
	if err != nil && !store.ConditionFailed(err) {
		return fmt.Errorf("extend %s: %w", itemKey(key), err)
	}
	return nil
}
