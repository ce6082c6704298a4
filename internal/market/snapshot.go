// Package market holds the market data that responses are made of: an
// immutable Snapshot per refresh (orderings, search, movers, lookups built
// once) and the Engine that feeds it, rolls history up and persists it.
package market

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"coinpulse"
)

// Order is a sort order of GET /markets.
type Order string

// The orders GET /markets accepts.
const (
	MarketCapDesc Order = "market_cap_desc"
	MarketCapAsc  Order = "market_cap_asc"
	VolumeDesc    Order = "volume_desc"
	PriceDesc     Order = "price_desc"
)

// Orders lists the valid orders, the default first.
var Orders = []Order{MarketCapDesc, MarketCapAsc, VolumeDesc, PriceDesc}

// Snapshot is the market as of one refresh. It never changes once built,
// so handlers read it without locks.
type Snapshot struct {
	ID        string
	AsOf      time.Time
	Feed      string
	Simulated bool
	Global    coinpulse.GlobalStats
	// MinMoverVolume is the 24 h volume floor for top movers, in USD.
	MinMoverVolume float64
	// Backfilling: the engine published this snapshot's quotes while it
	// was still fetching history (a feed whose history costs a call a
	// coin; see Engine.Load): changes, extremes and history may be
	// missing for some coins.
	Backfilling bool

	coins    []*coinpulse.CoinDetail // by market_cap_rank
	byID     map[string]*coinpulse.CoinDetail
	bySymbol map[string][]*coinpulse.CoinDetail // by market_cap_rank
	orders   map[Order][]*coinpulse.CoinDetail
	gainers  []*coinpulse.CoinDetail // by 24 h change, descending, ties by rank
	losers   []*coinpulse.CoinDetail // by 24 h change, ascending, ties by rank
	lower    []searchKey             // parallel to coins

	memo sync.Map
	// budget is what the memo holds, by class of key (see memoClass), so
	// that one kind of response cannot crowd out another.
	budget [4]memoBudget
	// retired is set once a newer snapshot replaced this one: its memo is
	// emptied and takes nothing more (see Retire).
	retired atomic.Bool
}

// memoBudget is what one class of memo keys holds: entries and bytes.
type memoBudget struct{ entries, bytes atomic.Int64 }

// memoClass is the budget a key counts against: the pages of /markets,
// the histories (large), the selections of /markets?ids= (one a watch
// list: they must not crowd out the pages), and the rest (a coin, global,
// movers, the portfolios' prices: small and asked for often).
func memoClass(key string) int {
	switch {
	case strings.HasPrefix(key, "markets|"):
		return 0
	case strings.HasPrefix(key, "history|"):
		return 1
	case strings.HasPrefix(key, "selection|"):
		return 3
	}
	return 2
}

// searchKey is a coin's lower-case symbol, name and id, and all three
// joined by NULs, which one look rules out for most coins.
type searchKey struct{ symbol, name, id, all string }

// A snapshot keeps at most maxMemo encoded responses of each class, and
// maxMemoBytes of them, so that a client walking every page size or every
// coin's history cannot grow memory without end.
const (
	maxMemo      = 256
	maxMemoBytes = 16 << 20
)

// MemoSizer is what a value kept by Memo tells of its size in bytes; a
// value that does not implement it counts as none.
type MemoSizer interface{ MemoSize() int }

// Build makes a snapshot of details (ranked here by market cap, ties by id).
func Build(id string, asOf time.Time, feed string, simulated bool, details []coinpulse.CoinDetail, markets *int, minMoverVolume float64) *Snapshot {
	s := &Snapshot{
		ID: id, AsOf: asOf, Feed: feed, Simulated: simulated, MinMoverVolume: minMoverVolume,
		coins:    make([]*coinpulse.CoinDetail, len(details)),
		byID:     make(map[string]*coinpulse.CoinDetail, len(details)),
		bySymbol: make(map[string][]*coinpulse.CoinDetail, len(details)),
		orders:   make(map[Order][]*coinpulse.CoinDetail, len(Orders)),
	}
	for i := range details {
		s.coins[i] = &details[i]
	}
	// An unknown market cap (nil) sorts after every known one, as −1.
	slices.SortFunc(s.coins, func(a, b *coinpulse.CoinDetail) int {
		if c := cmp.Compare(marketCap(b), marketCap(a)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	s.lower = make([]searchKey, len(s.coins))
	for i, c := range s.coins {
		c.Place = i + 1
		if c.MarketCap != nil {
			c.MarketCapRank = &c.Place
		}
		s.byID[c.ID] = c
		s.bySymbol[c.Symbol] = append(s.bySymbol[c.Symbol], c)
		k := searchKey{symbol: strings.ToLower(c.Symbol), name: strings.ToLower(c.Name), id: strings.ToLower(c.ID)}
		k.all = k.symbol + "\x00" + k.name + "\x00" + k.id
		s.lower[i] = k
	}
	s.orders[MarketCapDesc] = s.coins
	for _, o := range Orders[1:] {
		out := slices.Clone(s.coins)
		slices.SortStableFunc(out, o.compare)
		s.orders[o] = out
	}

	for _, c := range s.coins {
		if c.PriceChangePercentage24h != nil && c.TotalVolume != nil && *c.TotalVolume >= minMoverVolume {
			s.gainers = append(s.gainers, c)
		}
	}
	s.losers = slices.Clone(s.gainers)
	slices.SortStableFunc(s.gainers, func(a, b *coinpulse.CoinDetail) int {
		return cmp.Compare(*b.PriceChangePercentage24h, *a.PriceChangePercentage24h)
	})
	slices.SortStableFunc(s.losers, func(a, b *coinpulse.CoinDetail) int {
		return cmp.Compare(*a.PriceChangePercentage24h, *b.PriceChangePercentage24h)
	})
	s.Global = global(s.coins, markets)
	return s
}

// compare orders coins as o lists them: by its key, ties by place (the
// default order's: market cap, ties by id), which is all of
// MarketCapDesc's.
func (o Order) compare(a, b *coinpulse.CoinDetail) int {
	var c int
	switch o {
	case MarketCapAsc:
		// Ascending too, an unknown market cap comes after every known one.
		if (a.MarketCap == nil) != (b.MarketCap == nil) {
			c = cmp.Compare(marketCap(b), marketCap(a))
		} else {
			c = cmp.Compare(marketCap(a), marketCap(b))
		}
	case VolumeDesc:
		// An unknown volume sorts after every known one.
		c = cmp.Compare(volume(b), volume(a))
	case PriceDesc:
		c = cmp.Compare(b.CurrentPrice, a.CurrentPrice)
	}
	if c != 0 {
		return c
	}
	return a.Place - b.Place
}

// Select returns the coins with the given ids in order's order, and the
// ids of no coin in the snapshot, as given. ids must be distinct.
func (s *Snapshot) Select(order Order, ids []string) (coins []*coinpulse.CoinDetail, unknown []string) {
	for _, id := range ids {
		if c := s.byID[id]; c != nil {
			coins = append(coins, c)
		} else {
			unknown = append(unknown, id)
		}
	}
	slices.SortFunc(coins, order.compare)
	return coins, unknown
}

// marketCap is a coin's market cap, −1 when it is not known.
func marketCap(c *coinpulse.CoinDetail) float64 {
	if c.MarketCap == nil {
		return -1
	}
	return *c.MarketCap
}

// volume is a coin's 24 h volume, −1 when it is not known.
func volume(c *coinpulse.CoinDetail) float64 {
	if c.TotalVolume == nil {
		return -1
	}
	return *c.TotalVolume
}

func global(coins []*coinpulse.CoinDetail, markets *int) coinpulse.GlobalStats {
	g := coinpulse.GlobalStats{ActiveCryptocurrencies: len(coins), Markets: markets}
	// The change over 24 h is that of the coins whose change is known: a
	// coin listed less than a day ago (no figure a day back) is left out of
	// both sides, rather than making the whole figure unknown.
	var before, after float64
	for _, c := range coins {
		if c.MarketCap != nil {
			g.TotalMarketCap += *c.MarketCap
		}
		if c.TotalVolume != nil {
			g.TotalVolume24h += *c.TotalVolume
		}
		if c.MarketCap != nil && c.MarketCapChange24h != nil {
			before += *c.MarketCap - *c.MarketCapChange24h
			after += *c.MarketCap
		}
	}
	share := func(id string) *float64 {
		for _, c := range coins {
			if c.ID == id && c.MarketCap != nil && g.TotalMarketCap > 0 {
				v := *c.MarketCap / g.TotalMarketCap * 100
				return &v
			}
		}
		return nil
	}
	g.BitcoinDominance = share("bitcoin")
	g.EthereumDominance = share("ethereum")
	if before > 0 {
		v := (after - before) / before * 100
		g.MarketCapChangePercentage24h = &v
	}
	return g
}

// Len returns the number of coins.
func (s *Snapshot) Len() int { return len(s.coins) }

// Coins returns every coin by market-cap rank. The slice is the
// snapshot's own: do not change it.
func (s *Snapshot) Coins() []*coinpulse.CoinDetail { return s.coins }

// Page returns page (1-based) of perPage items in order, and the total
// number of pages. A page past the end is empty.
func (s *Snapshot) Page(order Order, page, perPage int) (items []*coinpulse.CoinDetail, totalPages int) {
	all := s.orders[order]
	totalPages = (len(all) + perPage - 1) / perPage
	start := (page - 1) * perPage
	if page < 1 || start >= len(all) {
		return nil, totalPages
	}
	return all[start:min(start+perPage, len(all))], totalPages
}

// Search matches q case-insensitively on symbol, name or id: exact
// symbol, exact name or id, prefix, substring (SPEC's order, the id
// ranked with the name), each by market cap rank. It returns the first
// limit matches and how many coins match in all.
func (s *Snapshot) Search(q string, limit int) ([]*coinpulse.CoinDetail, int) {
	q = strings.ToLower(q)
	var buckets [4][]*coinpulse.CoinDetail
	total := 0
	for i, k := range s.lower {
		var b int
		if !strings.Contains(k.all, q) {
			continue
		}
		switch {
		case k.symbol == q:
			b = 0
		case k.name == q || k.id == q:
			b = 1
		case strings.HasPrefix(k.symbol, q) || strings.HasPrefix(k.name, q) || strings.HasPrefix(k.id, q):
			b = 2
		case strings.Contains(k.symbol, q) || strings.Contains(k.name, q) || strings.Contains(k.id, q):
			b = 3
		default:
			continue
		}
		total++
		if len(buckets[b]) < limit {
			buckets[b] = append(buckets[b], s.coins[i])
		}
	}
	out := make([]*coinpulse.CoinDetail, 0, limit)
	for _, b := range buckets {
		out = append(out, b[:min(len(b), limit-len(out))]...)
	}
	return out, total
}

// Gainers returns up to limit coins with a positive 24 h change, largest
// first; Losers the negative ones, largest fall first. Both leave out coins
// under MinMoverVolume.
func (s *Snapshot) Gainers(limit int) []*coinpulse.CoinDetail {
	out := make([]*coinpulse.CoinDetail, 0, limit)
	for _, c := range s.gainers {
		if len(out) == limit || *c.PriceChangePercentage24h <= 0 {
			break
		}
		out = append(out, c)
	}
	return out
}

// Losers: see Gainers.
func (s *Snapshot) Losers(limit int) []*coinpulse.CoinDetail {
	out := make([]*coinpulse.CoinDetail, 0, limit)
	for _, c := range s.losers {
		if len(out) == limit || *c.PriceChangePercentage24h >= 0 {
			break
		}
		out = append(out, c)
	}
	return out
}

// Coin returns the coin with exactly this id, nil when the snapshot has
// none. The result is shared: read it, never change it.
func (s *Snapshot) Coin(id string) *coinpulse.CoinDetail { return s.byID[id] }

// Lookup resolves, as the SPEC orders, an exact id, else a symbol
// (case-insensitive, the highest market cap wins), else, as a last
// resort, an id in another case ("Bitcoin"): so "NEM" is the coin whose
// symbol is nem, if there is one, before the coin whose id is nem. The result is a copy with
// ResolvedBy and Alternatives filled in; ok is false when nothing matches.
func (s *Snapshot) Lookup(idOrSymbol string) (d coinpulse.CoinDetail, ok bool) {
	lower := strings.ToLower(idOrSymbol)
	c, by := s.byID[idOrSymbol], "id"
	if c == nil {
		if same := s.bySymbol[lower]; len(same) > 0 {
			c, by = same[0], "symbol"
		}
	}
	if c == nil {
		c = s.byID[lower]
	}
	if c == nil {
		return d, false
	}
	d = *c
	d.ResolvedBy = by
	d.Alternatives = []coinpulse.CoinRef{}
	for _, o := range s.bySymbol[c.Symbol] {
		if o != c {
			d.Alternatives = append(d.Alternatives, coinpulse.CoinRef{ID: o.ID, Name: o.Name, MarketCapRank: o.MarketCapRank})
		}
	}
	return d, true
}

// Memo returns the value s keeps under key, building and keeping it on
// first use (up to a bound per snapshot; past it, build runs every time).
// A failed build is returned and not kept. The api package keeps encoded
// responses here. A key must always be used with the same T.
func Memo[T any](s *Snapshot, key string, build func() (T, error)) (T, error) {
	if v, ok := s.memo.Load(key); ok {
		return v.(T), nil
	}
	v, err := build()
	if err != nil || s.retired.Load() {
		return v, err
	}
	size := int64(len(key)) // a selection's key can be kilobytes
	if m, ok := any(v).(MemoSizer); ok {
		size += int64(m.MemoSize())
	}
	// Reserved before the store and given back when the value is not
	// kept (over the bound, or another caller stored the key first), so
	// that callers building the same key at once count it once.
	b := &s.budget[memoClass(key)]
	if b.entries.Add(1) > maxMemo {
		b.entries.Add(-1)
		return v, nil
	}
	if b.bytes.Add(size) > maxMemoBytes {
		b.bytes.Add(-size)
		b.entries.Add(-1)
		return v, nil
	}
	if old, loaded := s.memo.LoadOrStore(key, v); loaded {
		b.bytes.Add(-size)
		b.entries.Add(-1)
		return old.(T), nil
	}
	if s.retired.Load() { // retired while v was built
		s.memo.Delete(key)
	}
	return v, nil
}

// Retire empties the memo of a snapshot a newer one has replaced, and
// keeps it from taking more: a retired snapshot answers only the pages of
// /markets asked with its id, which are encoded again for each request,
// rather than keep what its clients were sent for the minutes it is
// retained.
func (s *Snapshot) Retire() {
	s.retired.Store(true)
	s.memo.Clear()
}

// snapshotID renders a snapshot's opaque id: a function of its time and
// of what else decides its figures (config: the feed's configuration,
// the coins it serves, the movers' volume floor), so that every node of
// one configuration names the same snapshot alike, and a node restarted
// on another configuration names it otherwise (an audit: a client's
// If-None-Match from the sim feed got a 304 from the replay one, whose
// snapshot of the same instant had the same id).
func snapshotID(asOf time.Time, config uint32) string {
	return strconv.FormatInt(asOf.UnixMilli(), 36) + "-" + strconv.FormatUint(uint64(config), 36)
}
