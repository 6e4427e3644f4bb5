package wfstore

import (
	"sort"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
)

// Tree is a workflow's nodes (or a subtree's) in memory, by path.
type Tree struct {
	WorkflowID string
	Root       *Root
	ByPath     map[string]Node
	// Kids are the children of each composite in index order (callbacks
	// not included); Callbacks its callbacks by name; Special the root's
	// handler and compensation nodes (paths /~<name>), which are not its
	// steps.
	Kids      map[string][]*Item
	Callbacks map[string]map[string]*Item
	Special   map[string]*Item
}

// NewTree indexes nodes (a workflow's, or a subtree's).
func NewTree(nodes []Node) *Tree {
	t := &Tree{ByPath: map[string]Node{}, Kids: map[string][]*Item{}, Callbacks: map[string]map[string]*Item{},
		Special: map[string]*Item{}}
	for _, node := range nodes {
		n := node.Base()
		t.ByPath[n.Path] = node
		if t.WorkflowID == "" {
			t.WorkflowID = n.WorkflowID
		}
		if r, ok := node.(*Root); ok {
			t.Root = r
			continue
		}
		parent := wfdef.ParentPath(n.Path)
		if parent == RootPath && strings.HasPrefix(n.Path, "/~") {
			t.Special[n.Path] = n
			continue
		}
		if name, ok := wfdef.CallbackName(n.Path); ok {
			if t.Callbacks[parent] == nil {
				t.Callbacks[parent] = map[string]*Item{}
			}
			t.Callbacks[parent][name] = n
			continue
		}
		t.Kids[parent] = append(t.Kids[parent], n)
	}
	for _, ks := range t.Kids {
		sort.Slice(ks, func(i, j int) bool { return ks[i].Index < ks[j].Index })
	}
	return t
}

// Item is the node at path, or nil.
func (t *Tree) Item(path string) *Item {
	if n := t.ByPath[path]; n != nil {
		return n.Base()
	}
	return nil
}

// Step is the job step at path, or nil.
func (t *Tree) Step(path string) *Step {
	s, _ := t.ByPath[path].(*Step)
	return s
}

// Steps are the job steps of items, up to the first that is not one.
func (t *Tree) Steps(items []*Item) []*Step {
	var out []*Step
	for _, it := range items {
		st := t.Step(it.Path)
		if st == nil {
			break
		}
		out = append(out, st)
	}
	return out
}

// Composite is the composite at path (the root's own for the root), or nil.
func (t *Tree) Composite(path string) *Composite { return CompositeOf(t.ByPath[path]) }

// StepKey is the key a step's result has in parent_results and its id in
// views: the client's step id, else its position in the tree.
func (it *Item) StepKey() string {
	if it.StepID != "" {
		return it.StepID
	}
	return strings.TrimPrefix(it.Path, "/")
}
