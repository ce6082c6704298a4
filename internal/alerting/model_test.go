package alerting

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"testing"

	"coinpulse"
)

// model is the brute-force index the tests hold Index to: a map, crossed
// by looking at every entry.
type model struct {
	m map[int64]Entry
}

func newModel() *model { return &model{m: make(map[int64]Entry)} }

func (m *model) add(e Entry) {
	if e.Cond != coinpulse.Above {
		e.Cond = coinpulse.Below
	}
	m.m[e.ID] = e
}

func (m *model) remove(id int64) bool {
	_, ok := m.m[id]
	delete(m.m, id)
	return ok
}

// cross removes and returns the entries of coinID that price crosses, in
// the order Index.Cross documents.
func (m *model) cross(coinID string, price float64) []Entry {
	if math.IsNaN(price) || math.IsInf(price, 0) {
		return nil
	}
	var above, below []Entry
	for _, e := range m.m {
		if e.CoinID != coinID || !e.Cond.Crossed(price, e.Target) {
			continue
		}
		if e.Cond == coinpulse.Above {
			above = append(above, e)
		} else {
			below = append(below, e)
		}
	}
	slices.SortFunc(above, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.ID, b.ID))
	})
	slices.SortFunc(below, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(b.Target, a.Target), cmp.Compare(a.ID, b.ID))
	})
	out := append(above, below...)
	for _, e := range out {
		delete(m.m, e.ID)
	}
	return out
}

func (m *model) tick(prices []Price) []Entry {
	var out []Entry
	for _, p := range prices {
		out = append(out, m.cross(p.CoinID, p.Price)...)
	}
	return out
}

// sameEntries reports whether got and want are equal, entry by entry, with
// NaN targets equal to each other and zeros told apart by sign.
func sameEntries(got, want []Entry) bool {
	return slices.EqualFunc(got, want, sameEntry)
}

func sameEntry(a, b Entry) bool {
	return a.ID == b.ID && a.ArmedSeq == b.ArmedSeq && a.CoinID == b.CoinID && a.Cond == b.Cond &&
		math.Float64bits(a.Target) == math.Float64bits(b.Target)
}

// checkModel fails t unless ix holds exactly m's entries.
func checkModel(t testing.TB, ix *Index, m *model) {
	t.Helper()
	if ix.Len() != len(m.m) {
		t.Fatalf("Len() = %d, model holds %d", ix.Len(), len(m.m))
	}
	for id, want := range m.m {
		got, ok := ix.Get(id)
		if !ok || !sameEntry(got, want) {
			t.Fatalf("Get(%d) = %+v, %v; want %+v", id, got, ok, want)
		}
	}
}

// checkIndex fails t unless ix's invariants hold.
func checkIndex(t testing.TB, ix *Index) {
	t.Helper()
	if err := ix.check(); err != nil {
		t.Fatal(err)
	}
}

func (ix *Index) check() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	total := 0
	for id, c := range ix.coins {
		if c.id != id {
			return fmt.Errorf("coin %q filed under %q", c.id, id)
		}
		if c.above.n == 0 && c.below.n == 0 {
			return fmt.Errorf("coin %q kept with no entry", id)
		}
		for _, sd := range []*side{&c.above, &c.below} {
			if sd.coin != c || sd.below != (sd == &c.below) {
				return fmt.Errorf("coin %q: side links wrong", id)
			}
			keys, err := sd.tree.check()
			if err != nil {
				return fmt.Errorf("coin %q below=%v: %v", id, sd.below, err)
			}
			for _, k := range keys {
				s, ok := ix.ids[k.id]
				if !ok || s.side != sd || keyOf(s.target, sd.below) != k.k {
					return fmt.Errorf("coin %q below=%v: key %+v, slot %+v, %v", id, sd.below, k, s, ok)
				}
			}
			total += len(keys)
		}
	}
	if total != len(ix.ids) {
		return fmt.Errorf("trees hold %d keys, ids %d", total, len(ix.ids))
	}
	for id, s := range ix.ids {
		if ix.coins[s.side.coin.id] != s.side.coin {
			return fmt.Errorf("id %d: coin %q not in the index", id, s.side.coin.id)
		}
	}
	return nil
}

// check verifies t's invariants and returns its keys in order.
func (t *tree) check() ([]key, error) {
	var keys []key
	leafDepth := -1
	var first *node
	var walk func(n *node, depth int, lo, hi *key) error
	walk = func(n *node, depth int, lo, hi *key) error {
		root := n == t.root
		if n.kids == nil {
			if first == nil {
				first = n
			}
			if leafDepth < 0 {
				leafDepth = depth
			} else if depth != leafDepth {
				return fmt.Errorf("leaves at depths %d and %d", leafDepth, depth)
			}
			if len(n.keys) > maxKeys || !root && len(n.keys) < minKeys {
				return fmt.Errorf("leaf of %d keys", len(n.keys))
			}
			for i, k := range n.keys {
				if math.IsNaN(k.k) {
					return fmt.Errorf("NaN key %+v", k)
				}
				if i > 0 && !n.keys[i-1].less(k) {
					return fmt.Errorf("leaf keys out of order: %+v, %+v", n.keys[i-1], k)
				}
				if lo != nil && k.less(*lo) || hi != nil && !k.less(*hi) {
					return fmt.Errorf("key %+v outside [%+v, %+v)", k, lo, hi)
				}
			}
			keys = append(keys, n.keys...)
			return nil
		}
		if len(n.keys) != len(n.kids)-1 {
			return fmt.Errorf("inner node of %d kids and %d separators", len(n.kids), len(n.keys))
		}
		if len(n.kids) > maxKids || root && len(n.kids) < 2 || !root && len(n.kids) < minKids {
			return fmt.Errorf("inner node of %d kids (root %v)", len(n.kids), root)
		}
		for i, kid := range n.kids {
			l, h := lo, hi
			if i > 0 {
				l = &n.keys[i-1]
			}
			if i < len(n.keys) {
				h = &n.keys[i]
			}
			if l != nil && h != nil && !l.less(*h) {
				return fmt.Errorf("separators out of order: %+v, %+v", *l, *h)
			}
			if err := walk(kid, depth+1, l, h); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(t.root, 0, nil, nil); err != nil {
		return nil, err
	}
	if first != t.first {
		return nil, fmt.Errorf("first is not the leftmost leaf")
	}
	if len(keys) != t.n {
		return nil, fmt.Errorf("n = %d, tree holds %d keys", t.n, len(keys))
	}
	want := math.Inf(1)
	if len(keys) > 0 {
		want = keys[0].k
	}
	if *t.min != want {
		return nil, fmt.Errorf("min = %v, least key %v", *t.min, want)
	}
	return keys, nil
}

// height returns the number of levels of t.
func (t *tree) height() int {
	h := 1
	for n := t.root; n.kids != nil; n = n.kids[0] {
		h++
	}
	return h
}

// maxHeight returns the height of ix's tallest tree.
func (ix *Index) maxHeight() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	h := 0
	for _, c := range ix.coins {
		h = max(h, c.above.height(), c.below.height())
	}
	return h
}
