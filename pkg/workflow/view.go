package workflow

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// View is a workflow as the API shows it (ojs-workflows.md section 11).
type View map[string]any

// Get returns the workflow's state with every step and job.
func (e *Engine) Get(ctx context.Context, wfID string) (*View, error) {
	if err := validWorkflowID(wfID); err != nil {
		return nil, err
	}
	nodes, err := e.st.WorkflowItems(ctx, wfID)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if len(nodes) == 0 || nodes[0].Path != store.RootPath {
		return nil, ojserr.NotFoundf("workflow", wfID)
	}
	var ids []string
	for _, n := range nodes {
		if n.Kind == KindJob && n.Outcome == "" {
			ids = append(ids, JobID(wfID, n.Path))
		}
	}
	jobs, err := e.st.BatchGetJobs(ctx, ids)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return render(nil, wfID, derefNodes(nodes), jobs), nil
}

func derefNodes(ns []*store.Node) []store.Node {
	out := make([]store.Node, len(ns))
	for i, n := range ns {
		out[i] = *n
	}
	return out
}

// jobState maps a job state to a workflow job state.
func jobState(s job.State) string {
	switch s {
	case job.Active:
		return "active"
	case job.Completed:
		return StateCompleted
	case job.Discarded:
		return StateFailed
	case job.Cancelled:
		return StateCancelled
	}
	return "pending"
}

// render builds the view. jobs holds the current jobs of unfinished leaves;
// nil means "just created": leaves that start at once show as pending.
func render(_ *Def, wfID string, nodes []store.Node, jobs map[string]*job.Job) *View {
	byPath := map[string]*store.Node{}
	kids := map[string][]*store.Node{}
	for i := range nodes {
		n := &nodes[i]
		byPath[n.Path] = n
		if n.Path != store.RootPath {
			kids[parentOf(n.Path)] = append(kids[parentOf(n.Path)], n)
		}
	}
	root := byPath[store.RootPath]
	starting := map[string]bool{}
	if jobs == nil {
		var mark func(path string)
		mark = func(path string) {
			n := byPath[path]
			starting[path] = true
			for _, c := range kids[path] {
				if isCallback(c.Path) || (n.Kind == KindChain && c.Index != 0) {
					continue
				}
				mark(c.Path)
			}
		}
		mark(store.RootPath)
	}
	completed, failed := 0, 0
	var failedIDs []string
	errs := []map[string]any{}
	var entry func(n *store.Node) map[string]any
	entry = func(n *store.Node) map[string]any {
		m := map[string]any{"index": n.Index}
		if n.Kind == KindJob {
			m["type"] = n.JobType
			id := JobID(wfID, n.Path)
			m["job_id"] = nil
			state := StateWaiting
			switch {
			case n.Outcome == "ok":
				state, m["job_id"] = StateCompleted, id
				if !isCallback(n.Path) {
					completed++
				}
				if n.Result != "" {
					m["result"] = json.RawMessage(n.Result)
				}
			case n.Outcome == "fail":
				state, m["job_id"] = StateFailed, id
				if !isCallback(n.Path) {
					failed++
				}
				failedIDs = append(failedIDs, id)
				var ei job.ErrorInfo
				if json.Unmarshal([]byte(n.Error), &ei) == nil {
					m["error"] = ei
					code := ei.Code
					if code == "" {
						code = ei.Type
					}
					errs = append(errs, map[string]any{"job_id": id, "node": n.Path, "code": code, "type": ei.Type, "message": ei.Message, "attempt": n.Attempt})
				}
			case jobs[id] != nil:
				j := jobs[id]
				state, m["job_id"] = jobState(j.State), id
				if j.StartedAt != nil {
					m["started_at"] = job.Timestamp(*j.StartedAt)
				}
				m["attempt"] = j.Attempt
			case starting[n.Path]:
				state, m["job_id"] = "pending", id
			case root.State == StateCancelled || root.State == StateFailed:
				state = StateCancelled
			}
			m["state"] = state
			if n.CompletedAt != "" {
				m["completed_at"] = n.CompletedAt
			}
			if n.Attempt > 0 {
				m["attempt"] = n.Attempt
			}
			return m
		}
		m["type"] = n.Kind
		if n.Name != "" {
			m["name"] = n.Name
		}
		state := n.State
		if state == StateWaiting && (root.State == StateCancelled || root.State == StateFailed) {
			state = StateCancelled
		}
		if starting[n.Path] && state == StateWaiting {
			state = StateRunning
		}
		m["state"] = state
		var list []map[string]any
		cbs := map[string]any{}
		cs := kids[n.Path]
		sort.Slice(cs, func(i, j int) bool { return cs[i].Index < cs[j].Index })
		for _, c := range cs {
			if isCallback(c.Path) {
				cbs[c.Path[len(n.Path)+boolInt(n.Path != "/"):]] = entry(c)
				continue
			}
			list = append(list, entry(c))
		}
		if n.Kind == KindChain {
			m["steps"] = list
		} else {
			m["jobs"] = list
		}
		if len(cbs) > 0 {
			m["callbacks"] = cbs
		}
		for _, k := range []string{"started_at", "completed_at"} {
			v := map[string]string{"started_at": n.StartedAt, "completed_at": n.CompletedAt}[k]
			if v != "" {
				m[k] = v
			}
		}
		return m
	}
	v := View(entry(root))
	delete(v, "index")
	v["id"] = wfID
	meta := map[string]any{"created_at": root.CreatedAt, "job_count": root.JobCount, "completed_count": completed, "failed_count": failed}
	for k, val := range map[string]string{"started_at": root.StartedAt, "completed_at": root.CompletedAt, "cancelled_at": root.CancelledAt} {
		if val != "" {
			meta[k] = val
		}
	}
	v["metadata"] = meta
	if root.Kind == KindChain && root.FailedIndex != nil {
		v["failed_step_index"] = *root.FailedIndex
	}
	if len(failedIDs) > 0 {
		sort.Strings(failedIDs)
		v["failed_job_ids"] = failedIDs
		v["errors"] = errs
	}
	// Direct-children counters (the conformance suite's shapes).
	done := 0
	for _, c := range kids[store.RootPath] {
		if c.Outcome == "ok" && !isCallback(c.Path) {
			done++
		}
	}
	if root.Kind == KindChain {
		v["steps_total"], v["steps_completed"] = root.Total, done
	} else {
		v["jobs_total"], v["jobs_completed"] = root.Total, done
	}
	return &v
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
