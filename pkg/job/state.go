// Package job is the OJS job model: the eight lifecycle states and the only
// transitions between them, the job envelope as stored and as shown on the
// wire, and the validation of PUSH requests.
//
// State machine (ojs-core.md section 6):
//
//	(push) -> scheduled | available | pending
//	scheduled -> available (due) | cancelled | discarded (expired)
//	pending   -> available (activate) | cancelled
//	available -> active (claim) | cancelled | discarded (expired)
//	active    -> completed | retryable | discarded | cancelled | available (lease expired, attempts left)
//	retryable -> available (backoff elapsed) | cancelled | discarded (expired)
//	discarded -> available (manual retry from the dead letter list, or a
//	             workflow retry re-running its failed step)
//	cancelled -> available (a workflow retry re-running a step its
//	             cancellation or timeout stopped)
//	completed: terminal; cancelled and discarded end a job unless one of
//	the retries above re-opens it
package job

import "slices"

// State is a job lifecycle state. The string values are persisted.
type State string

// The eight OJS job states.
const (
	Scheduled State = "scheduled"
	Available State = "available"
	Pending   State = "pending"
	Active    State = "active"
	Completed State = "completed"
	Retryable State = "retryable"
	Cancelled State = "cancelled"
	Discarded State = "discarded"
)

// States lists every state.
var States = []State{Scheduled, Available, Pending, Active, Completed, Retryable, Cancelled, Discarded}

var transitions = map[State][]State{
	Scheduled: {Available, Cancelled, Discarded},
	Pending:   {Available, Cancelled},
	Available: {Active, Cancelled, Discarded},
	Active:    {Completed, Retryable, Discarded, Cancelled, Available},
	Retryable: {Available, Cancelled, Discarded},
	Discarded: {Available},
	Cancelled: {Available},
}

// CanTransition reports whether from -> to is a valid transition.
func CanTransition(from, to State) bool { return slices.Contains(transitions[from], to) }

// Valid reports whether s is one of the eight states.
func (s State) Valid() bool {
	_, ok := transitions[s]
	return ok || s == Completed
}

// Terminal reports whether s is completed, cancelled or discarded.
func (s State) Terminal() bool { return s == Completed || s == Cancelled || s == Discarded }
