// Package workflow implements the OJS workflow primitives (chain, group,
// batch, and their nesting; ojs-workflows.md) on the job lifecycle. A
// workflow is a tree of nodes stored under one DynamoDB partition; the
// stream function advances it when a node's job finishes, with conditional
// writes and transactions only, so duplicated, retried and concurrent
// stream records fire every step and callback exactly once.
package workflow

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/pkg/internal/jsoncase"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// Node kinds.
const (
	KindJob   = "job"
	KindChain = "chain"
	KindGroup = "group"
	KindBatch = "batch"
)

// Limits, stated in the README and the manifest.
const (
	// MaxDepth is the deepest nesting of composites accepted (the root is
	// level 1): a chain of groups of chains of batches of groups.
	MaxDepth = 5
	// MaxJobs bounds the jobs (leaves) of one workflow.
	MaxJobs = 10_000
	// MaxChildren bounds the steps or jobs of one composite.
	MaxChildren = 10_000
	// MaxNameLength bounds a composite's name (bytes): names are stored
	// in the node items (at most 400 KB each).
	MaxNameLength = 1024
	// ShardSize is how many children share one counter shard: a composite
	// with n children has ceil(n/ShardSize) shards, so no item takes a
	// write for every child.
	ShardSize = 100
)

// Callback names of a batch, in firing order.
var Callbacks = []string{"on_complete", "on_success", "on_failure"}

// Def is a parsed workflow node.
type Def struct {
	Kind     string
	Name     string
	Path     string
	Index    int
	JobType  string
	Request  json.RawMessage // leaf: the job request as sent
	Children []*Def
	// Callbacks maps on_complete/on_success/on_failure to leaf defs.
	Callbacks map[string]*Def
}

// Problem is one validation failure with its JSON path.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

type rawNode struct {
	Type      *string                    `json:"type"`
	ID        *string                    `json:"id"`
	Name      *string                    `json:"name"`
	Steps     []json.RawMessage          `json:"steps"`
	Jobs      []json.RawMessage          `json:"jobs"`
	Callbacks map[string]json.RawMessage `json:"callbacks"`
}

// Parse validates a workflow creation request and returns its tree and
// the number of leaf jobs. Every problem is listed with its JSON path in a
// 400 invalid_workflow error. now validates the jobs' timestamps.
func Parse(raw []byte, now time.Time) (*Def, string, int, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || !json.Valid(t) {
		return nil, "", 0, ojserr.New(ojserr.InvalidPayload, "The request body is empty or not valid JSON.").With("field", "body")
	}
	var rn rawNode
	if t[0] != '{' || jsoncase.Unmarshal(t, &rn) != nil {
		return nil, "", 0, invalid([]Problem{{"$", "a workflow must be a JSON object with type, and steps or jobs"}})
	}
	id := ""
	if rn.ID != nil {
		if job.ValidateID(*rn.ID) != nil {
			return nil, "", 0, invalid([]Problem{{"$.id", "must be a lowercase hyphenated UUIDv7"}})
		}
		id = *rn.ID
	}
	p := &parser{now: now}
	root := p.node(t, "$", "/", 0, 1)
	if p.jobs > MaxJobs {
		p.add("$", fmt.Sprintf("the workflow has %d jobs; the maximum is %d", p.jobs, MaxJobs))
	}
	if len(p.problems) > 0 {
		return nil, "", 0, invalid(p.problems)
	}
	return root, id, p.jobs, nil
}

func invalid(ps []Problem) error {
	msg := "Workflow validation failed: " + ps[0].Path + " " + ps[0].Message
	if len(ps) > 1 {
		msg += fmt.Sprintf(" (and %d more problems)", len(ps)-1)
	}
	return ojserr.Newf(ojserr.InvalidWorkflow, "%s", msg).With("validation_errors", ps)
}

type parser struct {
	now      time.Time
	problems []Problem
	jobs     int
}

func (p *parser) add(path, msg string) {
	if len(p.problems) < 100 {
		p.problems = append(p.problems, Problem{path, msg})
	}
}

func isComposite(rn rawNode) bool {
	if rn.Type == nil {
		return false
	}
	switch *rn.Type {
	case KindChain, KindGroup, KindBatch:
		// These names are reserved for workflows: a node of this type is
		// a nested workflow, never a job.
		return true
	}
	return false
}

// node parses one node at JSON path jp and tree path tp.
func (p *parser) node(raw json.RawMessage, jp, tp string, index, depth int) *Def {
	var rn rawNode
	if err := jsoncase.Unmarshal(raw, &rn); err != nil {
		p.add(jp, "must be a job or a workflow object")
		return nil
	}
	if !isComposite(rn) {
		return p.leaf(raw, jp, tp, index)
	}
	d := &Def{Kind: *rn.Type, Path: tp, Index: index}
	if rn.Name != nil {
		d.Name = *rn.Name
		if len(d.Name) > MaxNameLength {
			p.add(jp+".name", fmt.Sprintf("at most %d bytes", MaxNameLength))
		}
	}
	if depth > MaxDepth {
		p.add(jp, fmt.Sprintf("nesting is %d levels deep; the maximum is %d", depth, MaxDepth))
		return d
	}
	field, items := "jobs", rn.Jobs
	if d.Kind == KindChain {
		field, items = "steps", rn.Steps
		if rn.Jobs != nil {
			p.add(jp+".jobs", "a chain lists its steps in 'steps'")
		}
	} else if rn.Steps != nil {
		p.add(jp+".steps", "a "+d.Kind+" lists its jobs in 'jobs'")
	}
	if len(items) == 0 {
		p.add(jp+"."+field, field+" array must contain at least one element")
	}
	if len(items) > MaxChildren {
		p.add(jp+"."+field, fmt.Sprintf("at most %d elements", MaxChildren))
		return d
	}
	seg := "j"
	if d.Kind == KindChain {
		seg = "s"
	}
	for i, it := range items {
		c := p.node(it, fmt.Sprintf("%s.%s[%d]", jp, field, i), childPath(tp, fmt.Sprintf("%s%d", seg, i)), i, depth+1)
		if c != nil {
			d.Children = append(d.Children, c)
		}
	}
	if d.Kind == KindBatch {
		if len(rn.Callbacks) == 0 {
			p.add(jp+".callbacks", "a batch needs at least one of on_complete, on_success, on_failure (use a group for no callbacks)")
		}
		d.Callbacks = map[string]*Def{}
		for name, cb := range rn.Callbacks {
			known := false
			for _, k := range Callbacks {
				known = known || k == name
			}
			if !known {
				p.add(jp+".callbacks."+name, "unknown callback; use on_complete, on_success or on_failure")
				continue
			}
			var cn rawNode
			if jsoncase.Unmarshal(cb, &cn) == nil && isComposite(cn) {
				p.add(jp+".callbacks."+name, "a callback is a job, not a workflow")
				continue
			}
			if c := p.leaf(cb, jp+".callbacks."+name, childPath(tp, name), -1); c != nil {
				p.jobs-- // callbacks are not counted in job_count
				d.Callbacks[name] = c
			}
		}
	} else if rn.Callbacks != nil {
		p.add(jp+".callbacks", "only a batch has callbacks")
	}
	return d
}

func (p *parser) leaf(raw json.RawMessage, jp, tp string, index int) *Def {
	p.jobs++
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err == nil {
		if _, ok := probe["id"]; ok {
			p.add(jp+".id", "jobs in a workflow get their ids from the workflow; remove 'id'")
			return nil
		}
	}
	e, err := job.ParseEnqueue(raw, p.now)
	if err != nil {
		oe := ojserr.As(err)
		field, _ := oe.Details["field"].(string)
		path := jp
		if field != "" && field != "body" {
			path += "." + field
		}
		p.add(path, oe.Message)
		return nil
	}
	if e.Pending {
		p.add(jp+".options.pending", "jobs in a workflow cannot be pending")
		return nil
	}
	if e.Job.Unique != nil {
		p.add(jp+".options.unique", "jobs in a workflow cannot carry a unique policy (the workflow already runs each job once)")
		return nil
	}
	return &Def{Kind: KindJob, Path: tp, Index: index, JobType: e.Job.Type, Request: raw}
}

func childPath(parent, seg string) string {
	if parent == "/" {
		return "/" + seg
	}
	return parent + "/" + seg
}

// JobID derives the deterministic id of the job at path in workflow wfID:
// a UUIDv7 with the workflow's timestamp and bits from a hash of the path,
// so a re-created job always collides with the first.
func JobID(wfID, path string) string {
	w, _ := uuid.Parse(wfID)
	h := sha256.Sum256([]byte(wfID + "|" + path))
	var u uuid.UUID
	copy(u[:6], w[:6])
	copy(u[6:], h[:10])
	u[6] = (u[6] & 0x0f) | 0x70 // version 7
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 4122 variant
	return u.String()
}

// Walk calls f for d and every descendant, callbacks included.
func Walk(d *Def, f func(*Def)) {
	f(d)
	for _, c := range d.Children {
		Walk(c, f)
	}
	for _, name := range Callbacks {
		if c := d.Callbacks[name]; c != nil {
			f(c)
		}
	}
}
