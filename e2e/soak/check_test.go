package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// snapshot is the whole table, read at the end of the run.
type snapshot struct {
	jobs   map[string]*job.Job                // by id
	nodes  map[string]map[string]wfstore.Node // workflow id -> path -> node
	events map[string][]jobEvent              // job id -> its events
	wfEvts map[string][]string                // workflow id -> event types
	seen   map[string]bool                    // event ids counted
}

type jobEvent struct {
	Type    string
	Attempt int
}

func scan(ctx context.Context, db *dynamodb.Client, table string) (*snapshot, error) {
	s := &snapshot{jobs: map[string]*job.Job{}, nodes: map[string]map[string]wfstore.Node{}, events: map[string][]jobEvent{}, wfEvts: map[string][]string{}, seen: map[string]bool{}}
	const segments = 4
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, segments)
	for seg := 0; seg < segments; seg++ {
		wg.Add(1)
		go func(seg int) {
			defer wg.Done()
			p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: aws.String(table), Segment: aws.Int32(int32(seg)), TotalSegments: aws.Int32(segments)})
			for p.HasMorePages() {
				out, err := p.NextPage(ctx)
				if err != nil {
					errs[seg] = err
					return
				}
				mu.Lock()
				for _, av := range out.Items {
					if err := s.add(av); err != nil {
						errs[seg] = err
					}
				}
				mu.Unlock()
			}
		}(seg)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *snapshot) add(av map[string]types.AttributeValue) error {
	pk, _ := av["pk"].(*types.AttributeValueMemberS)
	if pk == nil {
		return nil
	}
	switch {
	case strings.HasPrefix(pk.Value, "JOB#"):
		it, ok, err := store.DecodeItem(av)
		if err != nil || !ok {
			return err
		}
		s.jobs[it.Job.ID] = it.Job
	case strings.HasPrefix(pk.Value, "WF#"):
		n, ok, err := wfstore.DecodeNode(av)
		if err != nil || !ok {
			return err
		}
		b := n.Base()
		if s.nodes[b.WorkflowID] == nil {
			s.nodes[b.WorkflowID] = map[string]wfstore.Node{}
		}
		s.nodes[b.WorkflowID][b.Path] = n
	case strings.HasPrefix(pk.Value, "EVT#job#"), strings.HasPrefix(pk.Value, "EVT#workflow#"),
		strings.HasPrefix(pk.Value, "EVB#"):
		// A page of a subject's history (EVT#), or of the histories of the
		// subjects created in one second (EVB#); a retried stream batch may
		// have stored an event in two pages: each id counts once.
		evs, ok, err := events.DecodePage(av)
		if err != nil || !ok {
			return err
		}
		for _, ev := range evs {
			if s.seen[ev.ID] {
				continue
			}
			s.seen[ev.ID] = true
			switch ev.SubjectCategory() {
			case "job":
				attempt, _ := ev.Data["attempt"].(float64)
				s.events[ev.Subject] = append(s.events[ev.Subject], jobEvent{Type: ev.Type, Attempt: int(attempt)})
			case "workflow":
				t := ev.Type
				if cb, _ := ev.Data["callback"].(string); cb != "" {
					batch, _ := ev.Data["batch_path"].(string)
					t += ":" + batch + "/" + cb
				}
				s.wfEvts[ev.Subject] = append(s.wfEvts[ev.Subject], t)
			}
		}
	}
	return nil
}

// faultErrors are the error types a fault (not a handler) records on a
// job: its lease ran out because the worker died, lost its answer or
// crashed after claiming.
var faultErrors = map[string]bool{"visibility_timeout": true, "timeout": true}

// tally is what the checks count for the report.
type tally struct {
	wfState    map[string]int // kind/mode/state -> workflows
	jobs       map[string]int // job state -> jobs
	callbacks  int            // callback jobs created (fired)
	attempts   int
	faultExtra int // attempts lost to faults (fault-type errors)
	planned    int // attempts the plan needs without faults
	deviations int // leaves whose outcome differs from the plan, explained by faults
}

// verify checks every invariant of the run and returns what broke.
// Definitions (docs/fault-injection.md):
//   - "enqueued twice": a job id that is not the deterministic id of a node
//     that had to run, or a job whose event history shows more enqueues or
//     starts than attempts, or the same attempt started twice, or more than
//     one terminal event;
//   - "a callback fired twice": a batch whose recorded fired set, callback
//     jobs or workflow.callback_fired events differ from the one set its
//     jobs' outcomes call for, or a callback job that ran twice;
//   - exact counters: the API's job_count, completed_count and
//     failed_count equal the counts of the leaf jobs in the table.
func verify(plans []*wfPlan, snap *snapshot, views map[string]map[string]any, pool *pullPool) ([]string, *tally) {
	var bad []string
	fail := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	t := &tally{wfState: map[string]int{}, jobs: map[string]int{}}
	want := map[string]bool{} // job ids that must exist
	for _, w := range plans {
		nodes := snap.nodes[w.id]
		if nodes == nil || nodes["/"] == nil {
			fail("workflow %d (%s): not in the table", w.index, w.id)
			continue
		}
		if w.kind == "timed" {
			checkTimed(w, nodes, snap, views, want, t, fail)
			continue
		}
		var eval func(n *node, run bool) (ok bool)
		counted := map[string]int{}
		eval = func(n *node, run bool) bool {
			sn := nodes[n.path]
			if sn == nil {
				fail("wf %d %s: node missing", w.index, n.path)
				return false
			}
			if !run {
				walk(n, func(d *node) {
					if d.kind == "job" {
						if j := snap.jobs[wfdef.JobID(w.id, d.path)]; j != nil {
							fail("wf %d %s: a job exists for a step that must never run (state %s)", w.index, d.path, j.State)
						}
					} else if dn := nodes[d.path]; dn != nil && dn.Base().State != wfstate.Waiting {
						fail("wf %d %s: a node that must never start is %s", w.index, d.path, dn.Base().State)
					}
				})
				return false
			}
			if n.kind == "job" {
				id := wfdef.JobID(w.id, n.path)
				want[id] = true
				j := snap.jobs[id]
				if j == nil {
					fail("wf %d %s: the job was never created (lost)", w.index, n.path)
					return false
				}
				ok := checkJob(w, n, j, wfstore.CompositeOf(nodes[parentPath(n.path)]), snap, pool, t, fail)
				if !n.callback {
					if ok {
						counted["completed"]++
					} else {
						counted["failed"]++
					}
				}
				return ok
			}
			var ok bool
			switch n.kind {
			case "chain":
				ok = true
				for _, c := range n.children {
					if !eval(c, ok) {
						ok = false
					}
				}
			case "graph":
				// A step runs when every step it depends on completed; the
				// graph fails when a step that ran failed.
				ok = true
				okStep := make([]bool, len(n.children))
				for i, c := range n.children {
					run := true
					for _, d := range c.deps {
						run = run && okStep[d]
					}
					okStep[i] = eval(c, run)
					if run && !okStep[i] {
						ok = false
					}
				}
			case "group", "batch":
				all := true
				for _, c := range n.children {
					if !eval(c, true) {
						all = false
					}
				}
				ok = all
				if n.kind == "batch" {
					fired := []string{}
					for _, name := range []string{"on_complete", "on_success", "on_failure"} {
						cb := n.callbacks[name]
						if cb == nil {
							continue
						}
						should := name == "on_complete" || (name == "on_success" && all) || (name == "on_failure" && !all)
						if should {
							fired = append(fired, name)
						}
						eval(cb, should)
						if should {
							t.callbacks++
						}
						evs := 0
						for _, e := range snap.wfEvts[w.id] {
							if e == "workflow.callback_fired:"+n.path+"/"+name {
								evs++
							}
						}
						if (should && evs != 1) || (!should && evs != 0) {
							fail("wf %d %s %s: %d callback_fired events, want %d", w.index, n.path, name, evs, map[bool]int{true: 1, false: 0}[should])
						}
					}
					if len(fired) > 0 {
						// A batch with triggered callbacks completes when they do.
						ok = true
						for _, name := range fired {
							if j := snap.jobs[wfdef.JobID(w.id, n.callbacks[name].path)]; j == nil || j.State != job.Completed {
								ok = false
							}
						}
					}
					got := append([]string{}, wfstore.CompositeOf(sn).Fired...)
					sort.Strings(got)
					exp := append([]string{}, fired...)
					sort.Strings(exp)
					if strings.Join(got, ",") != strings.Join(exp, ",") {
						fail("wf %d %s: callbacks recorded as fired %v, want %v", w.index, n.path, got, exp)
					}
				}
			}
			want := wfstate.Completed
			if !ok {
				want = wfstate.Failed
			}
			if sn.Base().State != want {
				fail("wf %d %s (%s): node state %s, want %s", w.index, n.path, n.kind, sn.Base().State, want)
			}
			return ok
		}
		eval(w.root, true)
		if w.kind == "saga" {
			checkSaga(w, nodes, snap, want, fail)
		}
		state := nodes["/"].Base().State
		t.wfState[w.kind+"/"+w.mode+"/"+string(state)]++
		v := views[w.id]
		if v == nil {
			fail("wf %d: no API view", w.index)
			continue
		}
		if v["state"] != string(state) {
			fail("wf %d: API state %v, table %s", w.index, v["state"], state)
		}
		_, leafCount := w.leaves()
		meta, _ := v["metadata"].(map[string]any)
		num := func(k string) int { f, _ := meta[k].(float64); return int(f) }
		if num("job_count") != leafCount || num("completed_count") != counted["completed"] || num("failed_count") != counted["failed"] {
			fail("wf %d: counters job/completed/failed %d/%d/%d, jobs in the table %d/%d/%d", w.index,
				num("job_count"), num("completed_count"), num("failed_count"), leafCount, counted["completed"], counted["failed"])
		}
	}
	for id, j := range snap.jobs {
		t.jobs[string(j.State)]++
		if !want[id] {
			fail("job %s (%s, workflow %s node %s, state %s): not the job of any step that had to run: enqueued twice or stray", id, j.Type, j.WorkflowID, j.WorkflowNode, j.State)
		}
		if !j.State.Terminal() {
			fail("job %s (%s %s): left in state %s", id, j.WorkflowID, j.WorkflowNode, j.State)
		}
	}
	for _, k := range pool.doubles {
		fail("pull: attempt %s was handed to workers twice", k)
	}
	for id, n := range pool.acks {
		if n > 1 {
			fail("pull: job %s acknowledged %d times", id, n)
		}
	}
	return bad, t
}

// parentPath is the path of a node's parent.
func parentPath(p string) string {
	i := strings.LastIndex(p, "/")
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// checkSaga checks a failed saga's compensation: every step that
// completed is undone exactly once, the latest completion first, each
// compensation with its step's result; a saga that completed, or whose
// first step failed, undoes nothing.
func checkSaga(w *wfPlan, nodes map[string]wfstore.Node, snap *snapshot, want map[string]bool, fail func(string, ...any)) {
	root := nodes["/"].(*wfstore.Root)
	type done struct {
		path string
		at   time.Time
	}
	var completed []done
	for _, c := range w.root.children {
		if j := snap.jobs[wfdef.JobID(w.id, c.path)]; j != nil && j.State == job.Completed && j.CompletedAt != nil {
			completed = append(completed, done{c.path, *j.CompletedAt})
		}
	}
	sort.Slice(completed, func(a, b int) bool {
		if !completed[a].at.Equal(completed[b].at) {
			return completed[a].at.After(completed[b].at)
		}
		return completed[a].path > completed[b].path
	})
	if root.State != wfstate.Failed {
		if root.Compensation != "" {
			fail("wf %d: a %s saga has compensation %q", w.index, root.State, root.Compensation)
		}
		return
	}
	if len(completed) == 0 {
		// Its first step failed: nothing to undo, no compensation events.
		if root.Compensation != wfstore.CompensationNone {
			fail("wf %d: a failed saga with no completed step has compensation %q, want none", w.index, root.Compensation)
		}
		for _, e := range snap.wfEvts[w.id] {
			if e == "workflow.compensating" || e == "workflow.compensated" {
				fail("wf %d: %s without a completed step to undo", w.index, e)
			}
		}
		if j := snap.jobs[wfdef.JobID(w.id, "/~compensate/s0")]; j != nil {
			fail("wf %d: a compensation without a completed step exists", w.index)
		}
		return
	}
	if root.Compensation != wfstore.CompensationCompleted {
		fail("wf %d: a failed saga's compensation is %q, want completed", w.index, root.Compensation)
	}
	for k, d := range completed {
		id := wfdef.JobID(w.id, fmt.Sprintf("/~compensate/s%d", k))
		want[id] = true
		j := snap.jobs[id]
		if j == nil || j.State != job.Completed {
			fail("wf %d: compensation %d (undoing %s) is missing or not completed: %v", w.index, k, d.path, j)
			continue
		}
		var pr struct {
			Compensates string `json:"compensates"`
		}
		_ = json.Unmarshal(j.ParentResults, &pr)
		if "/"+pr.Compensates != d.path {
			fail("wf %d: compensation %d undoes %q, want %s (latest completion first)", w.index, k, pr.Compensates, d.path)
		}
	}
	if j := snap.jobs[wfdef.JobID(w.id, fmt.Sprintf("/~compensate/s%d", len(completed)))]; j != nil {
		fail("wf %d: a compensation beyond the %d completed steps exists", w.index, len(completed))
	}
	evs := map[string]int{}
	for _, e := range snap.wfEvts[w.id] {
		evs[e]++
	}
	if evs["workflow.compensating"] != 1 || evs["workflow.compensated"] != 1 {
		fail("wf %d: compensation events %v", w.index, evs)
	}
}

// checkTimed checks a group whose timeout raced its jobs: it ended once,
// completed if and only if every job completed; a job the timeout stopped
// was cancelled before it started, and the workflow then failed with
// workflow_timeout; every job is terminal and ran at most once per
// attempt.
func checkTimed(w *wfPlan, nodes map[string]wfstore.Node, snap *snapshot, views map[string]map[string]any, want map[string]bool,
	t *tally, fail func(string, ...any)) {
	root := nodes["/"].(*wfstore.Root)
	all, cancelled := true, 0
	for _, c := range w.root.children {
		id := wfdef.JobID(w.id, c.path)
		want[id] = true
		j := snap.jobs[id]
		if j == nil {
			fail("wf %d %s: the job was never created (lost)", w.index, c.path)
			continue
		}
		if j.State != job.Completed {
			all = false
		}
		if j.State == job.Cancelled {
			cancelled++
			if j.StartedAt != nil && j.Attempt > 0 && len(j.Errors) == 0 {
				fail("wf %d %s: a job that had started was cancelled by the timeout", w.index, c.path)
			}
		}
	}
	switch {
	case all && root.State != wfstate.Completed && !strings.Contains(root.Error, workflow.ErrorCodeTimeout):
		fail("wf %d: every job completed but the workflow is %s", w.index, root.State)
	case !all && root.State != wfstate.Failed:
		fail("wf %d: a job did not complete but the workflow is %s", w.index, root.State)
	case cancelled > 0 && !strings.Contains(root.Error, workflow.ErrorCodeTimeout):
		fail("wf %d: %d jobs cancelled without a timeout (error %q)", w.index, cancelled, root.Error)
	}
	evs := 0
	for _, e := range snap.wfEvts[w.id] {
		if e == "workflow.timed_out" {
			evs++
		}
	}
	if strings.Contains(root.Error, workflow.ErrorCodeTimeout) != (evs == 1) || evs > 1 {
		fail("wf %d: %d workflow.timed_out events, error %q", w.index, evs, root.Error)
	}
	t.wfState[w.kind+"/"+w.mode+"/"+string(root.State)]++
	if v := views[w.id]; v == nil || v["state"] != string(root.State) {
		fail("wf %d: API view %v, table %s", w.index, v["state"], root.State)
	}
}

// checkJob checks one leaf's job: terminal, result, outcome as planned
// or explained by faults, counted once in its parent as what it was, and
// its event history (each attempt enqueued once and started once, one
// terminal event).
func checkJob(w *wfPlan, n *node, j *job.Job, parent *wfstore.Composite, snap *snapshot, pool *pullPool, t *tally, fail func(string, ...any)) bool {
	ok := j.State == job.Completed
	if j.State != job.Completed && j.State != job.Discarded {
		fail("wf %d %s: job %s is %s, not finished", w.index, n.path, j.ID, j.State)
		return false
	}
	if parent != nil && parent.Shards == 0 {
		seg := n.path[strings.LastIndex(n.path, "/")+1:]
		var inOK, inFail bool
		if strings.HasPrefix(seg, "on_") {
			inOK, inFail = wfstore.HasString(parent.CallbacksOK, seg), wfstore.HasString(parent.CallbacksFail, seg)
		} else if idx, err := strconv.Atoi(seg[1:]); err == nil {
			inOK, inFail = slices.Contains(parent.OK, idx), slices.Contains(parent.Fail, idx)
			if next := wfdef.ChildPath(wfstore.RootPath, wfdef.Segment(wfdef.KindChain, idx+1)); ok && !inOK && parent.Path == wfstore.RootPath && parent.Kind == wfdef.KindChain {
				// A workflow that is a chain records a step by its next
				// job's put (wfstore.Store.PutNext): that job must exist.
				inOK = snap.jobs[wfdef.JobID(w.id, next)] != nil
			}
		}
		if inOK != ok || inFail == ok {
			fail("wf %d %s: counted in its parent as ok=%v fail=%v, job %s", w.index, n.path, inOK, inFail, j.State)
		}
	}
	if j.WorkflowID != w.id || j.WorkflowNode != n.path {
		fail("wf %d %s: job %s belongs to %s %s", w.index, n.path, j.ID, j.WorkflowID, j.WorkflowNode)
	}
	// Attempts: planned ones, plus those lost to faults.
	faultErrs := 0
	for _, e := range j.Errors {
		if faultErrors[e.Type] {
			faultErrs++
		}
	}
	planned := 1
	switch n.behave {
	case behaveFlaky:
		planned = 2
	case behaveFail:
		planned = failMaxAttempts
	}
	t.attempts += j.Attempt
	t.planned += planned
	t.faultExtra += faultErrs
	if extra := j.Attempt - planned; extra > faultErrs {
		fail("wf %d %s: %d attempts, %d planned, only %d explained by faults (errors %v)", w.index, n.path, j.Attempt, planned, faultErrs, errTypes(j))
	}
	plannedOK := n.behave != behaveFail
	if ok != plannedOK {
		if plannedOK && faultErrs > 0 {
			t.deviations++ // every attempt lost to faults and the handler's own: explained
		} else {
			fail("wf %d %s: job %s ended %s, planned %s (errors %v)", w.index, n.path, j.ID, j.State, n.behave, errTypes(j))
		}
	}
	if ok && !(n.behave == behaveFlaky && !n.pull) { // test.fail_once answers {"recovered":true}
		var res any
		_ = json.Unmarshal(j.Result, &res)
		var tag any
		switch r := res.(type) {
		case []any:
			if len(r) > 0 {
				tag = r[0]
			}
		case map[string]any:
			tag = r["tag"]
		}
		if tag != n.tag {
			fail("wf %d %s: result %s is not this job's", w.index, n.path, j.Result)
		}
	}
	// Event history.
	evs := snap.events[j.ID]
	count := map[string]int{}
	started := map[int]int{}
	for _, e := range evs {
		count[e.Type]++
		if e.Type == "job.started" {
			started[e.Attempt]++
		}
	}
	if count["job.enqueued"] != j.Attempt || count["job.started"] != j.Attempt {
		fail("wf %d %s: job %s has %d attempts but %d job.enqueued and %d job.started events", w.index, n.path, j.ID, j.Attempt, count["job.enqueued"], count["job.started"])
	}
	for a := 1; a <= j.Attempt; a++ {
		if started[a] != 1 {
			fail("wf %d %s: attempt %d started %d times", w.index, n.path, a, started[a])
		}
	}
	if count["job.completed"]+count["job.discarded"] != 1 {
		fail("wf %d %s: %d completed and %d discarded events", w.index, n.path, count["job.completed"], count["job.discarded"])
	}
	if f := count["job.failed"]; f != j.Attempt-map[bool]int{true: 1, false: 0}[ok] {
		fail("wf %d %s: %d job.failed events for %d attempts ending %s", w.index, n.path, f, j.Attempt, j.State)
	}
	if n.pull {
		pool.mu.Lock()
		for _, a := range pool.acked[j.ID] {
			if a != j.Attempt || !ok {
				fail("wf %d %s: an ACK of attempt %d succeeded, but the job ended %s at attempt %d: a worker that no longer held the reservation completed it",
					w.index, n.path, a, j.State, j.Attempt)
			}
		}
		for a := j.Attempt + 1; a <= j.Attempt+3; a++ {
			if pool.runs[fmt.Sprintf("%s#%d", j.ID, a)] > 0 {
				fail("wf %d %s: a worker ran attempt %d of a job that had %d", w.index, n.path, a, j.Attempt)
			}
		}
		pool.mu.Unlock()
	}
	return ok
}

func errTypes(j *job.Job) []string {
	var out []string
	for _, e := range j.Errors {
		out = append(out, e.Type)
	}
	return out
}
