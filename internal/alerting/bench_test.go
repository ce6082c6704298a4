package alerting

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"coinpulse"
)

// The benchmarks' market: benchCoins coins, and ticks that move benchMovers
// of them each (drawn from the benchPool coins with the most alerts) so
// that every mover crosses benchCrossEach alerts, whatever the number of
// alerts held.
const (
	benchCoins     = 10_000
	benchPool      = 200
	benchMovers    = 100
	benchCrossEach = 10
)

// benchSet is a synthetic set of alerts over benchCoins coins. Coin i has
// a price drawn log-uniformly from 0.01 to 60,000 and a share 1/(i+1) of
// the alerts (Zipf: the first coin holds about a tenth of them, the last
// a hundred-thousandth), whatever their number.
type benchSet struct {
	entries []Entry
	names   []string
	price   []float64
	coin    map[string]int // index by name
}

var (
	benchSetsMu sync.Mutex
	benchSets   = map[int]*benchSet{}
)

// getBenchSet returns the set of n alerts, the same for every benchmark.
func getBenchSet(n int) *benchSet {
	benchSetsMu.Lock()
	defer benchSetsMu.Unlock()
	if s := benchSets[n]; s != nil {
		return s
	}
	r := rand.New(rand.NewPCG(7, 8))
	s := &benchSet{
		entries: make([]Entry, n),
		names:   make([]string, benchCoins),
		price:   make([]float64, benchCoins),
		coin:    make(map[string]int, benchCoins),
	}
	cum := make([]float64, benchCoins) // cumulative Zipf weights
	total := 0.0
	for i := range benchCoins {
		s.names[i] = "coin-" + strconv.Itoa(i)
		s.coin[s.names[i]] = i
		s.price[i] = math.Exp(math.Log(0.01) + r.Float64()*math.Log(60_000/0.01))
		total += 1 / float64(i+1)
		cum[i] = total
	}
	for j := range s.entries {
		c, _ := slices.BinarySearch(cum, r.Float64()*total)
		c = min(c, benchCoins-1)
		e := Entry{ID: int64(j), ArmedSeq: int64(j), CoinID: s.names[c], Cond: coinpulse.Above}
		if r.IntN(2) == 0 {
			e.Cond = coinpulse.Below
		}
		e.Target = s.target(r, c, e.Cond)
		s.entries[j] = e
	}
	benchSets[n] = s
	return s
}

// target draws an alert's target on coin c: 0.1-50% over the coin's
// price for Above, under it for Below, so that at the coins' prices
// nothing is crossed.
func (s *benchSet) target(r *rand.Rand, c int, cond coinpulse.Condition) float64 {
	d := 0.001 + r.Float64()*0.499
	if cond != coinpulse.Above {
		d = -d
	}
	return s.price[c] * (1 + d)
}

// build returns an index of s's alerts and the heap bytes it takes per
// entry.
func (s *benchSet) build() (*Index, float64) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	ix := NewIndex()
	for _, e := range s.entries {
		ix.Add(e)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	return ix, float64(m1.HeapAlloc-m0.HeapAlloc) / float64(len(s.entries))
}

// firstKeys appends t's first n keys to buf.
func (t *tree) firstKeys(buf []key, n int) []key {
	var walk func(nd *node)
	walk = func(nd *node) {
		if nd.kids == nil {
			buf = append(buf, nd.keys[:min(len(nd.keys), n-len(buf))]...)
			return
		}
		for _, kid := range nd.kids {
			if len(buf) == n {
				return
			}
			walk(kid)
		}
	}
	walk(t.root)
	return buf
}

// movePrice returns the price that moves coin past exactly n of its Above
// entries (up) or of its Below entries in ix, or false when it does not
// have n+1 distinct targets on that side.
func movePrice(ix *Index, coin string, n int, up bool, buf []key) (float64, bool) {
	c := ix.coins[coin]
	if c == nil {
		return 0, false
	}
	sd, dir := &c.above, math.Inf(1)
	if !up {
		sd, dir = &c.below, math.Inf(-1)
	}
	ks := sd.firstKeys(buf[:0], n+1)
	if len(ks) <= n || ks[n-1].k == ks[n].k {
		return 0, false
	}
	t := ks[n-1].k
	if !up {
		t = -t
	}
	return math.Nextafter(t, dir), true
}

// BenchmarkTick times ticks that price all benchCoins coins, of which
// benchMovers, drawn at random from the benchPool coins with the most
// alerts, move up or down past benchCrossEach alerts each: 1,000 alerts
// crossed per tick, with 100,000 alerts held as with 1,000,000. ns/tick is
// Tick alone. The op also re-arms the alerts crossed, at new targets drawn
// like the first, so that the index keeps its size and its shape and the
// next tick crosses other alerts. B/entry is the index's heap per alert.
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run("alerts="+strconv.Itoa(n), func(b *testing.B) { benchTick(b, n, true) })
	}
}

// BenchmarkTickMoved is BenchmarkTick with ticks that price only the
// coins that move: the cost of crossing, without that of looking at the
// coins that cross nothing.
func BenchmarkTickMoved(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run("alerts="+strconv.Itoa(n), func(b *testing.B) { benchTick(b, n, false) })
	}
}

func benchTick(b *testing.B, n int, all bool) {
	s := getBenchSet(n)
	ix, perEntry := s.build()
	r := rand.New(rand.NewPCG(11, 12))
	var prices []Price
	if all {
		for c := range benchCoins {
			prices = append(prices, Price{s.names[c], s.price[c]})
		}
	} else {
		prices = make([]Price, benchMovers)
	}
	pool := make([]int, benchPool)
	for i := range pool {
		pool[i] = i
	}
	const want = benchMovers * benchCrossEach
	crossed := make([]Entry, 0, want)
	var buf []key
	var tickTime time.Duration
	ticks := 0
	b.ReportAllocs()
	for b.Loop() {
		// Draw the movers, and their prices.
		for j := range benchMovers {
			k := j + r.IntN(benchPool-j)
			pool[j], pool[k] = pool[k], pool[j]
			c := pool[j]
			p, ok := movePrice(ix, s.names[c], benchCrossEach, r.IntN(2) == 0, buf)
			if !ok {
				b.Fatalf("coin %d has too few alerts to cross %d", c, benchCrossEach)
			}
			if all {
				prices[c].Price = p
			} else {
				prices[j] = Price{s.names[c], p}
			}
		}
		t0 := time.Now()
		crossed = ix.Tick(crossed[:0], prices)
		tickTime += time.Since(t0)
		ticks++
		if len(crossed) != want {
			b.Fatalf("tick crossed %d alerts, want %d", len(crossed), want)
		}
		for _, e := range crossed {
			e.Target = s.target(r, s.coin[e.CoinID], e.Cond)
			e.ArmedSeq += int64(n)
			ix.Add(e)
		}
		if all {
			for _, c := range pool[:benchMovers] {
				prices[c].Price = s.price[c]
			}
		}
	}
	b.ReportMetric(float64(tickTime.Nanoseconds())/float64(ticks), "ns/tick")
	b.ReportMetric(perEntry, "B/entry")
}

// BenchmarkAdd times adding new alerts to an index of 1,000,000, drawn
// like the others; every 100,000 adds they are removed, untimed.
func BenchmarkAdd(b *testing.B) {
	b.Run("alerts=1000000", func(b *testing.B) {
		const n, batch = 1_000_000, 100_000
		s := getBenchSet(n + batch)
		base := &benchSet{entries: s.entries[:n]}
		ix, _ := base.build()
		fresh := s.entries[n:]
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			ix.Add(fresh[i])
			if i++; i == batch {
				b.StopTimer()
				for _, e := range fresh {
					ix.Remove(e.ID)
				}
				i = 0
				b.StartTimer()
			}
		}
	})
}

// BenchmarkRemove times removing alerts, in random order, from an index
// of 1,000,000; every 100,000 removals they are added back, untimed.
func BenchmarkRemove(b *testing.B) {
	b.Run("alerts=1000000", func(b *testing.B) {
		const n, batch = 1_000_000, 100_000
		s := getBenchSet(n)
		ix, _ := s.build()
		perm := rand.New(rand.NewPCG(9, 10)).Perm(n)
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			ix.Remove(int64(perm[i]))
			if i++; i%batch == 0 {
				b.StopTimer()
				for _, id := range perm[i-batch : i] {
					ix.Add(s.entries[id])
				}
				i %= n
				b.StartTimer()
			}
		}
	})
}
