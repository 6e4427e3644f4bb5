package workflow

import (
	"encoding/json"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// aheadStep is what a chain step's job carries of a step that follows it
// (job.Job.WorkflowAhead, a JSON array of them, in order): what starting
// that step needs of its node. A node's definition never changes once the
// workflow is created, so the copy stays true.
type aheadStep struct {
	Def  json.RawMessage `json:"d"`
	SID  string          `json:"s,omitempty"`
	Last bool            `json:"l,omitempty"`
}

// aheadReserve is the room a job item keeps, within its write unit, for
// what its claim and completion add (timestamps, the worker, the lease, a
// small result): the steps ahead are carried only where they cost no unit.
const aheadReserve = 256

// itemUnit is DynamoDB's write unit: 1 KB of item.
const itemUnit = 1024

// carryAhead puts on j (the job of a chain step) the definitions of the
// job steps that follow it in its chain (rest, in order, up to the first
// step that is not a job), as many as keep the job item within the write
// units it takes without them, aheadReserve bytes kept free. The request
// that finishes j then starts the next step without reading its node
// (chainStepDone); a job without them reads it, as before.
func (e *Engine) carryAhead(j *job.Job, rest []*store.Node) {
	var steps []aheadStep
	for _, n := range rest {
		if n.Kind != KindJob || n.Def == "" {
			break
		}
		steps = append(steps, aheadStep{Def: json.RawMessage(n.Def), SID: n.StepID, Last: n.Last})
	}
	j.WorkflowAhead = nil
	if len(steps) == 0 {
		return
	}
	bare, err := store.JobItemBytes(j, e.redel)
	if err != nil {
		return
	}
	room := (bare+aheadReserve+itemUnit-1)/itemUnit*itemUnit - aheadReserve
	for len(steps) > 0 {
		b, err := json.Marshal(steps)
		if err != nil {
			return
		}
		j.WorkflowAhead = b
		if size, err := store.JobItemBytes(j, e.redel); err == nil && size <= room {
			return
		}
		steps = steps[:len(steps)-1]
	}
	j.WorkflowAhead = nil
}

// aheadOf decodes what j carries of the steps after its own.
func aheadOf(j *job.Job) []aheadStep {
	if j == nil || len(j.WorkflowAhead) == 0 {
		return nil
	}
	var steps []aheadStep
	if json.Unmarshal(j.WorkflowAhead, &steps) != nil {
		return nil
	}
	return steps
}

// nodeOfAhead is the node of chain step index of chain, as a job ahead
// of it carries it.
func nodeOfAhead(wf, chain string, index int, a aheadStep) *store.Node {
	return &store.Node{WorkflowID: wf, Path: childPath(chain, segment(KindChain, index)), Kind: KindJob, Index: index,
		Def: string(a.Def), StepID: a.SID, Last: a.Last}
}
