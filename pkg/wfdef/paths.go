package wfdef

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// A node's path names its place in the workflow: the root is "/", and a
// child's path is its parent's followed by its segment (Segment, or a
// callback's name). Handlers and compensations hang off the root under a
// "~" segment.

// Segment names child i of a composite of kind in its path: s<i> for a
// chain's steps, j<i> for a group's or batch's jobs, g<i> for a graph's.
func Segment(kind string, i int) string {
	switch kind {
	case KindChain:
		return fmt.Sprintf("s%d", i)
	case KindGraph:
		return fmt.Sprintf("g%d", i)
	}
	return fmt.Sprintf("j%d", i)
}

// ChildPath is the path of the child named seg (a Segment or a callback
// name) of the node at parent.
func ChildPath(parent, seg string) string {
	if parent == "/" {
		return "/" + seg
	}
	return parent + "/" + seg
}

// HandlerPath is the path of the workflow handler name (HandlerOnFailure,
// HandlerOnCancel): /~<name>.
func HandlerPath(name string) string { return "/~" + name }

// ParentPath is the path of the node that holds the node at path; the
// root's ("/") for the root and its children.
func ParentPath(path string) string {
	i := strings.LastIndex(path, "/")
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

// LastSegment is the last segment of path: the node's own name in its
// parent (s0, j3, g1, on_complete, ~compensate; empty for the root).
func LastSegment(path string) string { return path[strings.LastIndex(path, "/")+1:] }

// ChildIndex is the position of the node at path among its parent's
// children (the number of its last segment), -1 for a batch callback.
func ChildIndex(path string) int {
	seg := LastSegment(path)
	if strings.HasPrefix(seg, "on_") {
		return -1
	}
	i, err := strconv.Atoi(seg[1:])
	if err != nil {
		return -1
	}
	return i
}

// CallbackName reports whether path is a batch callback and which: its
// last segment, and whether that is a callback name (on_...).
func CallbackName(path string) (string, bool) {
	seg := LastSegment(path)
	return seg, strings.HasPrefix(seg, "on_")
}

// IsCallback reports whether path is a batch callback.
func IsCallback(path string) bool {
	_, ok := CallbackName(path)
	return ok
}

// ParentKind tells the kind of the composite a child belongs to from the
// child's path segment (s: chain, j: group or batch, g: graph, on_: batch
// callback).
func ParentKind(path string) string {
	seg := LastSegment(path)
	switch {
	case strings.HasPrefix(seg, "on_"):
		return KindBatch
	case strings.HasPrefix(seg, "s"):
		return KindChain
	case strings.HasPrefix(seg, "g"):
		return KindGraph
	}
	return KindGroup
}

// JobID derives the deterministic id of the job at path in workflow wfID:
// a UUIDv7 with the workflow's timestamp, the step's position in the 12
// bits after the version (fetch order) and bits of a hash of the path.
func JobID(wfID, path string) string {
	w, _ := uuid.Parse(wfID)
	h := sha256.Sum256([]byte(wfID + "|" + path))
	var u uuid.UUID
	copy(u[:6], w[:6])
	copy(u[6:], h[:10])
	pos := position(path) & 0xfff
	u[6] = 0x70 | byte(pos>>8) // version 7, then the position's high bits
	u[7] = byte(pos)
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 4122 variant
	return u.String()
}

// position is a step's order among its siblings: its index, or for a
// batch callback its place in Callbacks after every job.
func position(path string) int {
	seg := LastSegment(path)
	if i := slices.Index(Callbacks, seg); i >= 0 {
		return 0xffd + i
	}
	n := 0
	for _, c := range seg[min(1, len(seg)):] {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// Walk calls f for d and every descendant, callbacks and handlers
// included.
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
	for _, name := range Handlers {
		if h := d.Handlers[name]; h != nil {
			Walk(h, f)
		}
	}
}
