// Package alerting keeps the armed price alerts in memory, indexed so that
// a market tick finds the ones it fires without looking at the others.
//
// # Crossing
//
// An entry is crossed by a price strictly past its target in its
// direction, as coinpulse.Condition.Crossed says: an Above entry by a price
// greater than its target, a Below entry by a price less than it. A price
// equal to the target crosses nothing, and a NaN or infinite price crosses
// nothing. Crossing is a matter of state, not of movement: every entry
// whose condition holds at a price is crossed by it, so an entry whose
// price went past while nobody was watching is crossed by the first price
// seen. A crossed entry is removed from the index as it is reported, so it
// is reported once; it is reported again only if it is added again.
//
// # Structure
//
// Each coin has two ordered sets of entries: its Above entries by target,
// ascending, and its Below entries by target, descending. The entries a
// price crosses are then a prefix of each set (the Above targets less than
// the price, the Below targets greater than it), so crossing walks that
// prefix and stops at the first entry not crossed, and a coin priced with
// nothing crossed costs a map lookup and two comparisons against cached
// minimums. A tick's cost
// grows with the number of coins priced and of entries crossed, and only
// logarithmically with the number held.
//
// The ordered set is a B+tree keyed by (target, id), the target negated on
// the Below side so that both sides are ascending and cross a prefix; the
// id makes every key unique, so equal targets need no special case. Adding
// and removing an entry are O(log n) in the coin's entries, with nodes of
// up to 64 keys, so a coin holding a million entries is four levels deep.
// Crossing removes a leaf's worth of the prefix at a time, O(log n) per
// leaf plus O(1) amortised per entry. A separate map from alert id to the
// entry's coin, side, target and owner lets Remove find the key to delete,
// and Add find the entry it replaces. The whole takes about 120 to 135
// bytes per entry (BenchmarkTick's B/entry), most of it the map's; with a million entries
// the map is far larger than the CPU caches, and its lookup is most of what
// crossing an entry costs.
//
// The alternatives were weighed as follows. Sorted slices make an insert
// or removal in the middle O(n): a memmove of a million keys for a popular
// coin. A binary heap per side crosses k entries in O(k log n), but removal
// by id needs every swap to update a position map, or lazy deletion with
// tombstones that linger until a compaction. A skip list has the B+tree's
// bounds with a pointer chase per entry, where the B+tree scans contiguous
// keys (16 bytes each) and allocates once per 32 or so.
package alerting

import (
	"math"
	"sync"

	"coinpulse"
)

// Entry is one armed alert in the index.
type Entry struct {
	// ID is the alert's id, unique in the index.
	ID int64
	// ArmedSeq is the arming the entry stands for (see
	// coinpulse.Alert.ArmedSeq); the index carries it, and does not look
	// at it.
	ArmedSeq int64
	// UserID is the alert owner's account; the index carries it, and does
	// not look at it.
	UserID int64
	// CoinID is the coin whose prices can cross the entry.
	CoinID string
	// Target is the price to cross. A NaN target is never crossed.
	Target float64
	// Cond is the direction. Any value other than coinpulse.Above is
	// taken, and reported back, as coinpulse.Below, as
	// coinpulse.Condition.Crossed takes it.
	Cond coinpulse.Condition
}

// Price is one coin's price in a tick.
type Price struct {
	CoinID string
	Price  float64
}

// Index is the set of armed alerts of a node. Create it with NewIndex. It
// is safe for concurrent use: one mutex serialises its methods, and Tick
// holds it for the whole tick.
type Index struct {
	mu    sync.Mutex
	coins map[string]*coin
	ids   map[int64]slot
	buf   []key // Cross's scratch
}

// coin holds a coin's entries, by side.
type coin struct {
	// min is the sides' least k (Above, then Below), all a tick looks at
	// for a coin with nothing crossed, first so as to be on one cache line.
	min          [2]float64
	id           string
	above, below side
}

// side is one direction's entries of a coin.
type side struct {
	tree
	coin  *coin
	below bool
}

// slot is where an entry is: the side whose tree holds key{keyOf(target,
// side.below), id}.
type slot struct {
	side   *side
	seq    int64
	user   int64
	target float64
}

// maxScratch is the most keys Index.buf keeps between crossings.
const maxScratch = 4096

// keyOf is an entry's k: the target, negated on the Below side, and +Inf,
// never crossed, for a NaN target.
func keyOf(target float64, below bool) float64 {
	if target != target {
		return math.Inf(1)
	}
	if below {
		return -target
	}
	return target
}

// crosses reports whether price can cross anything: it is neither NaN nor
// infinite.
func crosses(price float64) bool { return price-price == 0 }

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{coins: make(map[string]*coin), ids: make(map[int64]slot)}
}

// Len returns the number of entries held.
func (ix *Index) Len() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return len(ix.ids)
}

// Get returns the entry with this id, if any.
func (ix *Index) Get(id int64) (Entry, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s, ok := ix.ids[id]
	if !ok {
		return Entry{}, false
	}
	return s.entry(id), true
}

func (s slot) entry(id int64) Entry {
	e := Entry{ID: id, ArmedSeq: s.seq, UserID: s.user, CoinID: s.side.coin.id, Target: s.target, Cond: coinpulse.Above}
	if s.side.below {
		e.Cond = coinpulse.Below
	}
	return e
}

// Add inserts e, replacing the entry with the same ID if there is one,
// wherever it is (on another coin or side, at another target, for another
// arming). O(log n).
func (ix *Index) Add(e Entry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	below := e.Cond != coinpulse.Above
	k := keyOf(e.Target, below)
	old, had := ix.ids[e.ID]
	if had && old.side.coin.id == e.CoinID && old.side.below == below && keyOf(old.target, below) == k {
		// Same place: only the arming or the target's sign of zero
		// changed.
		ix.ids[e.ID] = slot{old.side, e.ArmedSeq, e.UserID, e.Target}
		return
	}
	c := ix.coins[e.CoinID]
	if c == nil {
		c = &coin{id: e.CoinID}
		c.above.init(&c.min[0])
		c.above.coin = c
		c.below.init(&c.min[1])
		c.below.coin = c
		c.below.below = true
		ix.coins[e.CoinID] = c
	}
	sd := &c.above
	if below {
		sd = &c.below
	}
	sd.insert(key{k, e.ID})
	ix.ids[e.ID] = slot{sd, e.ArmedSeq, e.UserID, e.Target}
	if had {
		old.side.delete(key{keyOf(old.target, old.side.below), e.ID})
		ix.dropIfEmpty(old.side.coin)
	}
}

// Remove removes the entry with this id and reports whether there was one.
// O(log n).
func (ix *Index) Remove(id int64) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s, ok := ix.ids[id]
	if !ok {
		return false
	}
	delete(ix.ids, id)
	s.side.delete(key{keyOf(s.target, s.side.below), id})
	ix.dropIfEmpty(s.side.coin)
	return true
}

// dropIfEmpty forgets c when it holds no entry, so that the coins map does
// not keep every coin ever seen.
func (ix *Index) dropIfEmpty(c *coin) {
	if c.above.n == 0 && c.below.n == 0 {
		delete(ix.coins, c.id)
	}
}

// Cross removes the entries of coinID that price crosses and appends them
// to dst: the Above entries by ascending target, then the Below entries by
// descending target, equal targets by id. It costs O(log n) per 64 entries
// crossed, and two comparisons when none is.
func (ix *Index) Cross(dst []Entry, coinID string, price float64) []Entry {
	if !crosses(price) {
		return dst
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.cross(dst, coinID, price)
}

// Tick crosses each price of a tick in turn, as Cross, and appends the
// entries crossed to dst. A coin priced twice is crossed twice, the second
// time among the entries left by the first.
func (ix *Index) Tick(dst []Entry, prices []Price) []Entry {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i := range prices {
		if p := &prices[i]; crosses(p.Price) {
			dst = ix.cross(dst, p.CoinID, p.Price)
		}
	}
	return dst
}

func (ix *Index) cross(dst []Entry, coinID string, price float64) []Entry {
	c := ix.coins[coinID]
	if c == nil || !(c.min[0] < price || c.min[1] < -price) {
		return dst
	}
	buf := c.above.popLess(price, ix.buf[:0])
	na := len(buf)
	buf = c.below.popLess(-price, buf)
	for i, k := range buf {
		s := ix.ids[k.id]
		delete(ix.ids, k.id)
		cond := coinpulse.Above
		if i >= na {
			cond = coinpulse.Below
		}
		dst = append(dst, Entry{ID: k.id, ArmedSeq: s.seq, UserID: s.user, CoinID: c.id, Target: s.target, Cond: cond})
	}
	if cap(buf) <= maxScratch {
		ix.buf = buf[:0]
	} else {
		ix.buf = nil // a crash crossed a lot: do not hold on to it
	}
	ix.dropIfEmpty(c)
	return dst
}
