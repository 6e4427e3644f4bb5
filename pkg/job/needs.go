package job

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// Needs is what a job needs of the worker that runs it (the ML resources
// extension, docs/ml-resources.md): compute resources and affinity rules
// over the worker's labels. It is read from the envelope's top-level
// ext_ml_* attributes and from meta.resources and meta.affinity
// (ojs-ml-resources.md 2 and 3); the attributes stay in the envelope as
// sent. A FETCH that states the worker's Capabilities gets only the jobs
// they fit; a FETCH that states none gets any job.
type Needs struct {
	// Accelerator is "gpu", "tpu", ... ("" and "cpu": none).
	Accelerator string  `json:"acc,omitempty"`
	GPUCount    int     `json:"gpu,omitempty"`
	GPUType     string  `json:"gpu_type,omitempty"`
	GPUMemoryGB float64 `json:"gpu_mem,omitempty"`
	CPUCores    int     `json:"cpu,omitempty"`
	MemoryGB    float64 `json:"mem,omitempty"`
	StorageGB   float64 `json:"disk,omitempty"`
	// Required rules must all hold for the worker's labels; Preferred
	// rules rank the jobs a worker fits (the sum of the weights that hold).
	Required  []AffinityRule `json:"req,omitempty"`
	Preferred []AffinityRule `json:"pref,omitempty"`
}

// AffinityRule is a rule over a worker label (ojs-ml-resources.md 3.2).
type AffinityRule struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
	// Weight ranks a preferred rule (1 to 100, default 1).
	Weight int `json:"weight,omitempty"`
}

// Affinity operators.
const (
	OpIn           = "In"
	OpNotIn        = "NotIn"
	OpExists       = "Exists"
	OpDoesNotExist = "DoesNotExist"
)

// Capabilities are what a worker offers in a FETCH ("capabilities" and
// "labels", ojs-ml-resources.md 2.3 and 6.1).
type Capabilities struct {
	Accelerator string  `json:"accelerator"`
	GPU         gpuCaps `json:"gpu"`
	CPU         struct {
		Cores int `json:"cores"`
	} `json:"cpu"`
	MemoryGB  float64 `json:"memory_gb"`
	StorageGB float64 `json:"storage_gb"`
	// Labels are the worker's labels by key.
	Labels map[string]string `json:"-"`
}

type gpuCaps struct {
	Count    int     `json:"count"`
	Type     string  `json:"type"`
	MemoryGB float64 `json:"memory_gb"`
}

// Limits of a job's needs.
const (
	maxAffinityRules = 20
	maxNeedText      = 256
)

// mlAttrs are the top-level ext_ml_* attributes that place a job.
type mlAttrs struct {
	Accelerator  *string         `json:"ext_ml_accelerator"`
	GPUType      *string         `json:"ext_ml_gpu_type"`
	GPUCount     *float64        `json:"ext_ml_gpu_count"`
	GPUMemoryGB  *float64        `json:"ext_ml_gpu_memory_gb"`
	CPUCores     *float64        `json:"ext_ml_cpu_cores"`
	MemoryGB     *float64        `json:"ext_ml_memory_gb"`
	StorageGB    *float64        `json:"ext_ml_storage_gb"`
	NodeAffinity json.RawMessage `json:"ext_ml_node_affinity"`
}

// metaNeeds is meta.resources and meta.affinity (an absent object reads
// as one with no member set).
type metaNeeds struct {
	Resources struct {
		GPU struct {
			Count    *float64 `json:"count"`
			Type     *string  `json:"type"`
			MemoryGB *float64 `json:"memory_gb"`
		} `json:"gpu"`
		CPU struct {
			Cores *float64 `json:"cores"`
		} `json:"cpu"`
		MemoryGB  *float64 `json:"memory_gb"`
		StorageGB *float64 `json:"storage_gb"`
	} `json:"resources"`
	Affinity json.RawMessage `json:"affinity"`
}

type affinity struct {
	Required  []AffinityRule `json:"required"`
	Preferred []AffinityRule `json:"preferred"`
}

// NeedsOf reads j's needs; an attribute of the wrong shape is an
// INVALID_REQUEST naming it. A value given both at the top level and in
// meta is the top level's; the rules of both apply.
func NeedsOf(j *Job) (Needs, error) {
	var n Needs
	if bytes.Contains(j.Meta, []byte(`"resources"`)) || bytes.Contains(j.Meta, []byte(`"affinity"`)) {
		var m metaNeeds
		if err := json.Unmarshal(j.Meta, &m); err != nil {
			return n, ojserr.Invalid("meta.resources", "meta.resources and meta.affinity must be the ML resources extension's objects: %v.", jsonProblem(err))
		}
		r := m.Resources
		n.GPUType = deref(r.GPU.Type)
		// cmp.Or: the first failure in field order (each field is read).
		if err := cmp.Or(setCount(&n.GPUCount, r.GPU.Count, "meta.resources.gpu.count"),
			setAmount(&n.GPUMemoryGB, r.GPU.MemoryGB, "meta.resources.gpu.memory_gb"),
			setCount(&n.CPUCores, r.CPU.Cores, "meta.resources.cpu.cores"),
			setAmount(&n.MemoryGB, r.MemoryGB, "meta.resources.memory_gb"),
			setAmount(&n.StorageGB, r.StorageGB, "meta.resources.storage_gb"),
			n.addRules(m.Affinity, "meta.affinity")); err != nil {
			return n, err
		}
	}
	if !hasPrefix(j.Extra, "ext_ml_") {
		return n, n.validate()
	}
	raw, _ := json.Marshal(j.Extra)
	var a mlAttrs
	if err := json.Unmarshal(raw, &a); err != nil {
		return n, ojserr.Invalid("ext_ml", "The ext_ml_* attributes must have the ML resources extension's types: %v.", jsonProblem(err))
	}
	n.Accelerator = deref(a.Accelerator) // meta sets none
	if a.GPUType != nil {
		n.GPUType = *a.GPUType
	}
	if err := cmp.Or(setCount(&n.GPUCount, a.GPUCount, "ext_ml_gpu_count"), setCount(&n.CPUCores, a.CPUCores, "ext_ml_cpu_cores"),
		setAmount(&n.GPUMemoryGB, a.GPUMemoryGB, "ext_ml_gpu_memory_gb"), setAmount(&n.MemoryGB, a.MemoryGB, "ext_ml_memory_gb"),
		setAmount(&n.StorageGB, a.StorageGB, "ext_ml_storage_gb"), n.addRules(a.NodeAffinity, "ext_ml_node_affinity")); err != nil {
		return n, err
	}
	return n, n.validate()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func setCount(dst *int, v *float64, field string) error {
	if v == nil {
		return nil
	}
	if *v < 0 || *v != math.Trunc(*v) || *v > 1e6 {
		return ojserr.Invalid(field, "'%s' must be a whole number from 0 to 1000000.", field)
	}
	*dst = int(*v)
	return nil
}

func setAmount(dst *float64, v *float64, field string) error {
	if v == nil {
		return nil
	}
	if *v < 0 || *v > 1e9 {
		return ojserr.Invalid(field, "'%s' must be a number from 0 to 1000000000.", field)
	}
	*dst = *v
	return nil
}

// addRules adds the required and preferred rules of raw (an affinity
// object, or absent).
func (n *Needs) addRules(raw json.RawMessage, field string) error {
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	var a affinity
	if err := json.Unmarshal(raw, &a); err != nil {
		return ojserr.Invalid(field, "'%s' must be an object of 'required' and 'preferred' rules: %v.", field, jsonProblem(err))
	}
	for i := range a.Preferred {
		if a.Preferred[i].Weight == 0 {
			a.Preferred[i].Weight = 1
		}
	}
	n.Required = append(n.Required, a.Required...)
	n.Preferred = append(n.Preferred, a.Preferred...)
	return nil
}

// validate checks the needs' texts and rules.
func (n Needs) validate() error {
	for _, s := range []string{n.Accelerator, n.GPUType} {
		if len(s) > maxNeedText {
			return ojserr.Invalid("ext_ml", "An ML resource name is at most %d bytes.", maxNeedText)
		}
	}
	if len(n.Required) > maxAffinityRules || len(n.Preferred) > maxAffinityRules {
		return ojserr.Invalid("affinity", "A job has at most %d required and %d preferred affinity rules.", maxAffinityRules, maxAffinityRules)
	}
	for i, r := range append(append([]AffinityRule{}, n.Required...), n.Preferred...) {
		field := fmt.Sprintf("affinity rule %d", i+1)
		switch {
		case r.Key == "" || len(r.Key) > maxNeedText:
			return ojserr.Invalid("affinity", "%s: 'key' must be 1 to %d bytes.", field, maxNeedText)
		case r.Operator != OpIn && r.Operator != OpNotIn && r.Operator != OpExists && r.Operator != OpDoesNotExist:
			return ojserr.Invalid("affinity", "%s: 'operator' must be In, NotIn, Exists or DoesNotExist; got %q.", field, r.Operator).With("allowed", []string{OpIn, OpNotIn, OpExists, OpDoesNotExist})
		case (r.Operator == OpIn || r.Operator == OpNotIn) && len(r.Values) == 0:
			return ojserr.Invalid("affinity", "%s: '%s' needs at least one value.", field, r.Operator)
		case r.Weight < 0 || r.Weight > 100:
			return ojserr.Invalid("affinity", "%s: 'weight' must be from 1 to 100.", field)
		}
	}
	return nil
}

// IsZero reports whether n asks nothing of a worker.
func (n Needs) IsZero() bool {
	return n.Accelerator == "" && n.GPUCount == 0 && n.GPUType == "" && n.GPUMemoryGB == 0 && n.CPUCores == 0 &&
		n.MemoryGB == 0 && n.StorageGB == 0 && len(n.Required) == 0 && len(n.Preferred) == 0
}

// EncodeNeeds is j's needs as stored with the job ("" for none, or for
// needs that do not parse: the enqueue refused those before).
func EncodeNeeds(j *Job) string {
	n, err := NeedsOf(j)
	if err != nil || n.IsZero() {
		return ""
	}
	b, _ := json.Marshal(n)
	return string(b)
}

// DecodeNeeds reads EncodeNeeds' form ("" is no needs).
func DecodeNeeds(s string) (Needs, error) {
	var n Needs
	if s == "" {
		return n, nil
	}
	return n, json.Unmarshal([]byte(s), &n)
}

// Fit reports whether a worker with capabilities c may run a job with
// needs n (ojs-ml-resources.md 6.2: every resource at least the job's,
// every required rule holding), and the sum of the weights of n's
// preferred rules that hold.
func (n Needs) Fit(c *Capabilities) (ok bool, score int) {
	switch acc := strings.ToLower(n.Accelerator); acc {
	case "", "cpu", "none":
	case "gpu":
		if c.GPU.Count == 0 && !strings.EqualFold(c.Accelerator, "gpu") {
			return false, 0
		}
	default:
		if !strings.EqualFold(c.Accelerator, acc) {
			return false, 0
		}
	}
	if n.GPUCount > c.GPU.Count || n.GPUMemoryGB > c.GPU.MemoryGB || n.CPUCores > c.CPU.Cores ||
		n.MemoryGB > c.MemoryGB || n.StorageGB > c.StorageGB {
		return false, 0
	}
	if n.GPUType != "" && !strings.EqualFold(n.GPUType, c.GPU.Type) {
		return false, 0
	}
	for _, r := range n.Required {
		if !r.holds(c.Labels) {
			return false, 0
		}
	}
	for _, r := range n.Preferred {
		if r.holds(c.Labels) {
			score += r.Weight
		}
	}
	return true, score
}

func (r AffinityRule) holds(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case OpExists:
		return ok
	case OpDoesNotExist:
		return !ok
	case OpIn:
		return ok && slices.Contains(r.Values, v)
	default: // NotIn
		return !ok || !slices.Contains(r.Values, v)
	}
}

// ParseCapabilities reads a FETCH's "capabilities" (an object) and
// "labels" (["key:value", ...] or {"key": "value"}); nil when the FETCH
// has neither.
func ParseCapabilities(caps, labels json.RawMessage) (*Capabilities, error) {
	if (len(caps) == 0 || isNull(caps)) && (len(labels) == 0 || isNull(labels)) {
		return nil, nil
	}
	c := &Capabilities{Labels: map[string]string{}}
	if len(caps) > 0 && !isNull(caps) {
		if err := json.Unmarshal(caps, c); err != nil {
			return nil, ojserr.Invalid("capabilities", "'capabilities' must be an object of gpu {count, type, memory_gb}, cpu {cores}, memory_gb, storage_gb and accelerator: %v.", jsonProblem(err))
		}
	}
	if len(labels) == 0 || isNull(labels) {
		return c, nil
	}
	var list []string
	if err := json.Unmarshal(labels, &list); err == nil {
		for _, l := range list {
			k, v, _ := strings.Cut(l, ":")
			c.Labels[k] = v
		}
		return c, nil
	}
	if err := json.Unmarshal(labels, &c.Labels); err != nil {
		return nil, ojserr.Invalid("labels", "'labels' must be a list of \"key:value\" strings or an object of strings.")
	}
	return c, nil
}

// jsonProblem says what err (from decoding a request's object) found.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("'%s' must be %s, not a JSON %s", te.Field, kindName(te.Type.Kind().String()), te.Value)
	}
	return "malformed JSON"
}

func kindName(k string) string {
	switch k {
	case "float64", "int":
		return "a number"
	case "string":
		return "a string"
	case "slice":
		return "a list"
	}
	return "an object"
}
