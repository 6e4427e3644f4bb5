package workflow

import (
	"encoding/json"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstore"
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

// aheadAttr is the job item attribute that holds them (store's record).
const aheadAttr = "wf_ahead"

// carryAhead puts on j (the job of a chain step) the definitions of the
// job steps that follow it in its chain (rest, in order, up to the first
// step that is not a job), as many as keep the job item within the write
// units it takes without them, aheadReserve bytes kept free. The request
// that finishes j then starts the next step without reading its node
// (chainStepDone); a job without them reads it, as before. The item is
// sized once: the attribute adds its name and its JSON text.
func (mk *maker) carryAhead(j *job.Job, rest []*wfstore.Step) {
	j.WorkflowAhead = nil
	bare, err := store.JobItemBytes(j, mk.redel)
	if err != nil {
		return
	}
	room := (bare+aheadReserve+itemUnit-1)/itemUnit*itemUnit - aheadReserve - bare - len(aheadAttr)
	var steps []aheadStep
	size := len("[]")
	for _, n := range rest {
		if n == nil || n.Def == "" {
			break
		}
		a := aheadStep{Def: json.RawMessage(n.Def), SID: n.StepID, Last: n.Last}
		b, err := json.Marshal(a)
		if err != nil || size+len(b)+len(",") > room {
			break
		}
		size += len(b) + len(",")
		steps = append(steps, a)
	}
	if len(steps) > 0 {
		j.WorkflowAhead, _ = json.Marshal(steps)
	}
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
func nodeOfAhead(wf, chain string, index int, a aheadStep) *wfstore.Step {
	return &wfstore.Step{Item: wfstore.Item{WorkflowID: wf, Path: wfdef.ChildPath(chain, wfdef.Segment(wfdef.KindChain, index)), Kind: wfdef.KindJob,
		Index: index, StepID: a.SID, Last: a.Last}, Def: store.Packed(a.Def)}
}
