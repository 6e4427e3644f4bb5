// Package wfstate is the state machine of workflows and their nodes (a
// workflow's root, and every chain, group, batch and graph inside it;
// ojs-workflows.md section 8). Job steps follow the job state machine
// (pkg/job); this one governs the workflow's own items, each kind with a
// table of its own:
//
//	Root (the workflow):
//	  running   -> completed | failed | cancelled
//	  failed    -> running   (a retry re-opens it)
//	  cancelled -> running   (the same)
//	Composite (a nested chain, group, batch or graph):
//	  waiting   -> completed | failed | cancelled
//	  failed    -> waiting   (a retry re-opens it)
//	  cancelled -> waiting   (the same)
//	Handler (a workflow's on_failure, on_cancel or on_complete handler,
//	or its compensation; a job step or a chain):
//	  waiting   -> running
//	  running   -> completed | failed | cancelled
//	  completed | failed | cancelled -> waiting (a retry re-arms it for a
//	             later failure or cancel)
//
// A workflow's root is running from creation: its first jobs are written
// in the same request (the spec's pending workflow state is never
// observable). A nested chain, group or batch is stored waiting until it
// finishes: starting it writes only its first jobs, and its parent's
// progress tells that it started (views show it running), so it moves
// from waiting straight to completed or failed. Every change is a
// conditional write naming the states it leaves (pkg/wfstore), and the
// writer checks it against its item's table first.
package wfstate

import "slices"

// State is a workflow or node state. The string values are persisted.
type State string

// The workflow and node states.
const (
	Waiting   State = "waiting"
	Running   State = "running"
	Completed State = "completed"
	Failed    State = "failed"
	Cancelled State = "cancelled"
)

// Machine is the transition table of one kind of item: the states each
// state may move to.
type Machine map[State][]State

// The tables of a workflow's root, its nested composites and its
// handlers (see the package comment).
var (
	Root = Machine{
		Running:   {Completed, Failed, Cancelled},
		Failed:    {Running},
		Cancelled: {Running},
	}
	Composite = Machine{
		Waiting:   {Completed, Failed, Cancelled},
		Failed:    {Waiting},
		Cancelled: {Waiting},
	}
	Handler = Machine{
		Waiting:   {Running},
		Running:   {Completed, Failed, Cancelled},
		Completed: {Waiting},
		Failed:    {Waiting},
		Cancelled: {Waiting},
	}
)

// Can reports whether from -> to is a transition of m.
func (m Machine) Can(from, to State) bool {
	return slices.Contains(m[from], to)
}

// Terminal reports whether s is completed, failed or cancelled (a failed
// or cancelled workflow can be re-opened by a retry, but nothing moves it
// until then).
func (s State) Terminal() bool { return s == Completed || s == Failed || s == Cancelled }

// Valid reports whether s is one of the five states.
func (s State) Valid() bool {
	switch s {
	case Waiting, Running, Completed, Failed, Cancelled:
		return true
	}
	return false
}
