// Package wfstate is the state machine of workflows and their nodes (a
// workflow's root, and every chain, group, batch and graph inside it;
// ojs-workflows.md section 8). Job steps follow the job state machine
// (pkg/job); this one governs the composite nodes and the workflow itself.
//
//	waiting   -> running | completed | failed | cancelled
//	running   -> completed | failed | cancelled
//	failed    -> running | waiting (a retry re-opens it: the root runs
//	             again, nested nodes wait again)
//	cancelled -> running | waiting (the same)
//	completed -> waiting (only a workflow's on_failure or on_cancel
//	             handler, which a retry re-arms for a later failure or
//	             cancel; every other completed node is final)
//
// A workflow's root is running from creation: its first jobs are written
// in the same request (the spec's pending workflow state is never
// observable). A nested chain, group or batch is stored waiting until it
// finishes: starting it writes only its first jobs, and its parent's
// progress tells that it started (views show it running), so it moves
// from waiting straight to completed or failed. Every change is a
// conditional write naming the states it leaves (pkg/store), and the
// writer checks it against this table first.
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

var transitions = map[State][]State{
	Waiting:   {Running, Completed, Failed, Cancelled},
	Running:   {Completed, Failed, Cancelled},
	Failed:    {Running, Waiting},
	Cancelled: {Running, Waiting},
	Completed: {Waiting},
}

// CanTransition reports whether from -> to is a valid transition.
func CanTransition(from, to State) bool { return slices.Contains(transitions[from], to) }

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
