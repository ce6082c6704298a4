package alerting

import (
	"math"
	"slices"
)

// key is one entry's place in a side's tree: its target, negated on the
// Below side so that both sides cross a prefix, and its alert id, which
// makes keys unique and breaks ties between equal targets. k is never NaN.
type key struct {
	k  float64
	id int64
}

// less orders keys by k, then by id.
func (a key) less(b key) bool { return a.k < b.k || (a.k == b.k && a.id < b.id) }

// The node capacities. A node holds at most max keys (leaf) or kids
// (inner) between operations, and, unless it is the root, at least min: a
// quarter, not a half, so that an entry added and removed again at the
// boundary does not split and merge a node every time.
const (
	maxKeys = 64
	minKeys = maxKeys / 4
	maxKids = 64
	minKids = maxKids / 4
)

// node is a node of a B+tree. A leaf (kids nil) holds keys in order. An
// inner node holds len(kids)-1 separators in keys: every key under
// kids[i] is at least keys[i-1] and less than keys[i].
type node struct {
	keys []key
	kids []*node
}

// newLeaf returns a leaf with room for capacity keys. Leaves made by a
// split get room for maxKeys+1 at once; a tree's first leaf starts small,
// as most coins have few alerts, and grows as needed.
func newLeaf(capacity int) *node { return &node{keys: make([]key, 0, capacity)} }

func newInner() *node {
	return &node{keys: make([]key, 0, maxKids), kids: make([]*node, 0, maxKids+1)}
}

func (n *node) underfull() bool {
	if n.kids == nil {
		return len(n.keys) < minKeys
	}
	return len(n.kids) < minKids
}

// search returns the index of the first key of n not less than x.
func (n *node) search(x key) int {
	lo, hi := 0, len(n.keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.keys[m].less(x) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// route returns the index of the kid of inner node n whose keys' range
// holds x: the number of separators not greater than x.
func (n *node) route(x key) int {
	lo, hi := 0, len(n.keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if x.less(n.keys[m]) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// tree is a B+tree of keys, ascending. Every leaf is at the same depth. The
// leftmost leaf is never replaced (splits keep the left half in place,
// merges keep the left node, and the root only grows above it or shrinks
// down to it), so first stays valid for the tree's life. *min caches the
// k of the least key (+Inf when t is empty) for the check a tick makes on
// every coin; it is kept outside t, next to the other side's.
type tree struct {
	root, first *node
	n           int // keys held
	min         *float64
}

func (t *tree) init(min *float64) {
	t.root = newLeaf(0)
	t.first = t.root
	t.min = min
	*t.min = math.Inf(1)
}

func (t *tree) setMin() {
	if t.n == 0 {
		*t.min = math.Inf(1)
	} else {
		*t.min = t.first.keys[0].k
	}
}

// shrink drops the root while it is an inner node with a single kid.
func (t *tree) shrink() {
	for t.root.kids != nil && len(t.root.kids) == 1 {
		t.root = t.root.kids[0]
	}
}

// insert adds x, which must not be in t.
func (t *tree) insert(x key) {
	if right, sep, split := t.root.insert(x); split {
		r := newInner()
		r.keys = append(r.keys, sep)
		r.kids = append(r.kids, t.root, right)
		t.root = r
	}
	t.n++
	t.setMin()
}

// insert adds x under n and, when that leaves n over capacity, splits it:
// n keeps the left half and the right half is returned with the separator
// between them.
func (n *node) insert(x key) (right *node, sep key, split bool) {
	if n.kids == nil {
		if len(n.keys) == cap(n.keys) {
			n.keys = slices.Grow(n.keys, min(max(2*cap(n.keys), 4), maxKeys+1)-len(n.keys))
		}
		n.keys = slices.Insert(n.keys, n.search(x), x)
		if len(n.keys) <= maxKeys {
			return nil, key{}, false
		}
		mid := len(n.keys) / 2
		right = newLeaf(maxKeys + 1)
		right.keys = append(right.keys, n.keys[mid:]...)
		n.keys = n.keys[:mid]
		return right, right.keys[0], true
	}
	i := n.route(x)
	r, s, ok := n.kids[i].insert(x)
	if !ok {
		return nil, key{}, false
	}
	n.keys = slices.Insert(n.keys, i, s)
	n.kids = slices.Insert(n.kids, i+1, r)
	if len(n.kids) <= maxKids {
		return nil, key{}, false
	}
	mid := len(n.kids) / 2
	right = newInner()
	right.keys = append(right.keys, n.keys[mid:]...)
	right.kids = append(right.kids, n.kids[mid:]...)
	sep = n.keys[mid-1]
	n.keys = n.keys[:mid-1]
	clear(n.kids[mid:])
	n.kids = n.kids[:mid]
	return right, sep, true
}

// delete removes x and reports whether it was there.
func (t *tree) delete(x key) bool {
	if !t.root.delete(x) {
		return false
	}
	t.n--
	t.shrink()
	t.setMin()
	return true
}

func (n *node) delete(x key) bool {
	if n.kids == nil {
		i := n.search(x)
		if i == len(n.keys) || n.keys[i] != x {
			return false
		}
		n.keys = slices.Delete(n.keys, i, i+1)
		return true
	}
	i := n.route(x)
	if !n.kids[i].delete(x) {
		return false
	}
	if n.kids[i].underfull() {
		n.fix(i)
	}
	return true
}

// popLess removes every key with k < p and appends them to buf, in order.
// It works a leaf at a time from the left: O(log n) per leaf, plus O(1)
// amortised per key removed.
func (t *tree) popLess(p float64, buf []key) []key {
	if !(*t.min < p) {
		return buf
	}
	for t.n > 0 && t.first.keys[0].k < p {
		before := len(buf)
		buf = t.root.popFirst(p, buf)
		t.n -= len(buf) - before
		t.shrink()
	}
	t.setMin()
	return buf
}

// popFirst removes the keys with k < p from the leftmost leaf under n,
// appending them to buf, and restores the node capacities on the way up.
func (n *node) popFirst(p float64, buf []key) []key {
	if n.kids == nil {
		j := 0
		for j < len(n.keys) && n.keys[j].k < p {
			j++
		}
		buf = append(buf, n.keys[:j]...)
		n.keys = n.keys[:copy(n.keys, n.keys[j:])]
		return buf
	}
	buf = n.kids[0].popFirst(p, buf)
	if n.kids[0].underfull() {
		n.fix(0)
	}
	return buf
}

// fix restores the capacity of n.kids[i], which is under its minimum, with
// a neighbour: the two merge into the left one when they fit in one node,
// and share their keys (or kids) evenly otherwise. n has at least two
// kids.
func (n *node) fix(i int) {
	if i == len(n.kids)-1 {
		i--
	}
	l, r := n.kids[i], n.kids[i+1]
	if l.kids == nil {
		if len(l.keys)+len(r.keys) <= maxKeys {
			l.keys = append(l.keys, r.keys...)
			n.dropRight(i)
			return
		}
		half := (len(l.keys) + len(r.keys)) / 2
		if d := half - len(l.keys); d > 0 {
			l.keys = append(l.keys, r.keys[:d]...)
			r.keys = r.keys[:copy(r.keys, r.keys[d:])]
		} else {
			r.keys = slices.Insert(r.keys, 0, l.keys[half:]...)
			l.keys = l.keys[:half]
		}
		n.keys[i] = r.keys[0]
		return
	}
	if len(l.kids)+len(r.kids) <= maxKids {
		l.keys = append(l.keys, n.keys[i])
		l.keys = append(l.keys, r.keys...)
		l.kids = append(l.kids, r.kids...)
		n.dropRight(i)
		return
	}
	half := (len(l.kids) + len(r.kids)) / 2
	if d := half - len(l.kids); d > 0 {
		// Rotate r's first d kids into l through the separator.
		l.keys = append(l.keys, n.keys[i])
		l.keys = append(l.keys, r.keys[:d-1]...)
		l.kids = append(l.kids, r.kids[:d]...)
		n.keys[i] = r.keys[d-1]
		r.keys = r.keys[:copy(r.keys, r.keys[d:])]
		m := copy(r.kids, r.kids[d:])
		clear(r.kids[m:])
		r.kids = r.kids[:m]
	} else {
		// Rotate l's kids from half on into r through the separator.
		r.keys = slices.Insert(r.keys, 0, n.keys[i])
		r.keys = slices.Insert(r.keys, 0, l.keys[half:]...)
		r.kids = slices.Insert(r.kids, 0, l.kids[half:]...)
		n.keys[i] = l.keys[half-1]
		l.keys = l.keys[:half-1]
		clear(l.kids[half:])
		l.kids = l.kids[:half]
	}
}

// dropRight removes kids[i+1], merged into kids[i], and their separator.
func (n *node) dropRight(i int) {
	n.keys = slices.Delete(n.keys, i, i+1)
	n.kids = slices.Delete(n.kids, i+1, i+2)
}
