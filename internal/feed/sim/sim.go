// Package sim is the default market feed: a deterministic simulation over a
// bundled universe of real coins (topped up with synthetic sim- coins).
//
// A coin's log-price is a random walk on an hourly grid anchored at its
// reference price at Anchor, with every step drawn from a hash of (seed,
// coin, hour). Between grid points the price follows a Brownian bridge;
// before the 90-day hourly region that ends at Anchor the path is a daily
// Brownian bridge down to the coin's listing price. A pegged coin (a wrapped
// or staked token, see peg) has no walk of its own: its price is its
// underlying's times a fixed ratio and a tiny deviation. The price at any
// time is therefore a pure function of the seed, the coin and the time.
package sim

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"coinpulse"
)

// Anchor is the instant at which every coin trades at its reference price.
var Anchor = time.Date(2025, 11, 1, 0, 0, 0, 0, time.UTC)

// algorithm versions the path construction: the engine's saved state and
// stored history are reused only by the same version (see String).
// Version 4 pegs wrapped and staked tokens to their underlying.
const algorithm = 4

// hourlyRegion is how far before Anchor the hourly grid reaches; before it
// the path is drawn on a daily grid.
const hourlyRegion = 90 * 24

// Feed is the simulated feed. Its methods are safe for concurrent use.
type Feed struct {
	seed  uint64
	coins []*coin
	byID  map[string]*coin

	mu     sync.Mutex
	cursor map[string]*walker // the last position of each coin's Quotes walk
}

var (
	_ coinpulse.Feed          = (*Feed)(nil)
	_ coinpulse.MarketCounter = (*Feed)(nil)
)

// New returns the simulation for seed over max(n, MinCoins) coins: the
// bundled real coins, then synthetic ones.
func New(seed int64, n int) (*Feed, error) {
	coins, err := parseUniverse(universeCSV)
	if err != nil {
		return nil, err
	}
	if n < MinCoins {
		n = MinCoins
	}
	if len(coins) < n {
		coins = append(coins, synthetic(uint64(seed), n-len(coins), coins, Anchor)...)
	}
	f := &Feed{seed: uint64(seed), coins: coins, byID: make(map[string]*coin, len(coins)), cursor: map[string]*walker{}}
	for _, c := range coins {
		f.byID[c.info.ID] = c
	}
	return f, nil
}

// Name returns "sim".
func (f *Feed) Name() string { return "sim" }

// Simulated returns true: every figure is made up.
func (f *Feed) Simulated() bool { return true }

// Markets is the simulated number of exchanges reported in global stats.
func (f *Feed) Markets() (int, bool) { return 120 + int(f.seed%60), true }

// Universe returns every coin's info.
func (f *Feed) Universe(context.Context) ([]coinpulse.CoinInfo, error) {
	out := make([]coinpulse.CoinInfo, len(f.coins))
	for i, c := range f.coins {
		out[i] = c.info
	}
	return out, nil
}

// Quotes returns every coin's price, market cap and 24 h volume at now.
func (f *Feed) Quotes(_ context.Context, now time.Time) ([]coinpulse.Quote, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]coinpulse.Quote, 0, len(f.coins))
	for _, c := range f.coins {
		if now.Before(c.info.ListedAt) {
			continue
		}
		w := f.cursor[c.info.ID]
		if w == nil {
			w = f.newWalker(c)
			f.cursor[c.info.ID] = w
		}
		p := f.point(c, w, now, true)
		out = append(out, coinpulse.Quote{CoinID: c.info.ID, Price: p.Price, MarketCap: p.MarketCap, TotalVolume: p.TotalVolume, Time: now})
	}
	return out, nil
}

// History returns the coin's points at interval in [from, to] (clipped to
// its listing), on the interval's UTC grid, oldest first.
func (f *Feed) History(_ context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	c := f.byID[info.ID]
	if c == nil {
		return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "no coin %q in the simulation", info.ID)
	}
	step := interval.Step()
	if from.Before(c.info.ListedAt) {
		from = c.info.ListedAt
	}
	t := from.Truncate(step)
	if t.Before(from) {
		t = t.Add(step)
	}
	w := f.newWalker(c)
	f.mu.Lock()
	if cur := f.cursor[c.info.ID]; cur != nil {
		*w = *cur // start near now rather than at the anchor
	}
	f.mu.Unlock()
	var out []coinpulse.HistoryPoint
	for ; !t.After(to); t = t.Add(step) {
		out = append(out, f.point(c, w, t, false))
	}
	return out, nil
}

// point computes the coin's figures at t, moving w there.
func (f *Feed) point(c *coin, w *walker, t time.Time, noise bool) coinpulse.HistoryPoint {
	l := w.logAt(t, noise)
	if c.peg != nil {
		l += c.peg.logRatio + math.Log1p(c.peg.deviation(f.seed, c.key, t))
	}
	price := math.Exp(l)
	mcap := price * c.info.CirculatingSupply
	hour := int64(math.Floor(t.Sub(Anchor).Hours()))
	volume := mcap * c.turnover * math.Exp(0.3*normal(f.seed, c.key, streamVolume, hour))
	return coinpulse.HistoryPoint{Timestamp: t, Price: price, MarketCap: mcap, TotalVolume: volume}
}

// deviation is the pegged coin's relative deviation from ratio × its
// underlying's price at t, within ±maxDev: a draw on each hour of the grid
// (the sum of two uniform draws, so mostly well inside the bound), zero at
// Anchor (where every coin trades at its reference price) and linear in
// between. It uses the pegged coin's own key, so two tokens of the same
// coin deviate differently.
func (p *peg) deviation(seed, key uint64, t time.Time) float64 {
	x := t.Sub(Anchor).Hours()
	k := math.Floor(x)
	at := func(k int64) float64 {
		if k == 0 {
			return 0
		}
		h := mix(seed, key, streamPeg, k)
		return p.maxDev * (uniform(h) + uniform(splitmix(h)) - 1)
	}
	a := at(int64(k))
	if frac := x - k; frac != 0 {
		return a + frac*(at(int64(k)+1)-a)
	}
	return a
}

// walker evaluates one coin's path, remembering where it last was so that
// nearby times cost little.
//
// The hourly grid is built in two levels, so that reaching an hour far from
// the anchor costs one draw per day rather than one per hour: the UTC day
// boundaries are a random walk with the variance of 24 hourly steps, and the
// hours inside a day are a discrete Brownian bridge between its boundaries
// (24 hourly draws, corrected linearly to end on the next boundary). That is
// exactly the distribution of a plain hourly random walk, and a daily point
// costs one draw.
type walker struct {
	f *Feed
	c *coin // whose walk: a pegged coin's underlying
	// block level: the log-price lb at hour blk*blockHours
	blk int64
	lb  float64
	// the hours of block inner (valid when innerOK): log-prices at
	// inner*blockHours + i, i in 0..blockHours
	inner   int64
	innerOK bool
	hours   [blockHours + 1]float64
	// daily bridge: total days J from listing to the region start, the walk
	// W at day j back from the region start, and the region start's
	// log-price.
	bridge    bool
	J         int64
	j         int64
	w, wJ, l0 float64
}

const blockHours = 24

// newWalker returns a walker at the anchor on the path of c, or of its
// underlying if c is pegged (point then applies the peg).
func (f *Feed) newWalker(c *coin) *walker {
	if c.peg != nil {
		c = c.peg.under
	}
	return &walker{f: f, c: c, lb: math.Log(c.ref)}
}

// blockStep is the log-return of block b (from boundary b-1 to b).
func (w *walker) blockStep(b int64) float64 {
	return w.c.sigmaH * math.Sqrt(blockHours) * normal(w.f.seed, w.c.key, streamBlock, b)
}

// boundary moves the block walk to boundary b and returns its log-price.
func (w *walker) boundary(b int64) float64 {
	for w.blk < b {
		w.blk++
		w.lb += w.blockStep(w.blk)
	}
	for w.blk > b {
		w.lb -= w.blockStep(w.blk)
		w.blk--
	}
	return w.lb
}

// hour returns the log-price at hour k from Anchor.
func (w *walker) hour(k int64) float64 {
	b := k / blockHours
	switch r := k % blockHours; {
	case r == 0:
		return w.boundary(b) // a day boundary needs no hours inside
	case r < 0:
		b--
	}
	if !w.innerOK || w.inner != b {
		start := w.boundary(b)
		end := w.boundary(b + 1)
		var sum float64
		w.hours[0] = 0
		for i := int64(1); i <= blockHours; i++ {
			sum += w.c.sigmaH * normal(w.f.seed, w.c.key, streamHourly, b*blockHours+i)
			w.hours[i] = sum
		}
		for i := range w.hours {
			w.hours[i] = start + w.hours[i] - float64(i)/blockHours*(sum-(end-start))
		}
		w.inner, w.innerOK = b, true
	}
	return w.hours[k-b*blockHours]
}

// initBridge prepares the daily bridge from the hourly region's start back
// to the listing price.
func (w *walker) initBridge() {
	if w.bridge {
		return
	}
	w.bridge = true
	start := Anchor.Add(-hourlyRegion * time.Hour)
	w.J = int64(start.Sub(w.c.info.ListedAt).Hours() / 24)
	w.l0 = w.hour(-hourlyRegion)
	for j := int64(1); j <= w.J; j++ {
		w.wJ += w.c.sigmaD * normal(w.f.seed, w.c.key, streamDaily, j)
	}
	w.j, w.w = w.J, w.wJ
}

// day returns the bridge's log-price j days before the hourly region.
func (w *walker) day(j int64) float64 {
	for w.j < j {
		w.j++
		w.w += w.c.sigmaD * normal(w.f.seed, w.c.key, streamDaily, w.j)
	}
	for w.j > j {
		w.w -= w.c.sigmaD * normal(w.f.seed, w.c.key, streamDaily, w.j)
		w.j--
	}
	target := math.Log(w.c.listPrice) - w.l0
	return w.l0 + w.w - float64(j)/float64(w.J)*(w.wJ-target)
}

// logAt returns the log-price at t; with noise, times between grid points
// get Brownian-bridge noise (ticks), without it they are interpolated.
func (w *walker) logAt(t time.Time, noise bool) float64 {
	x := t.Sub(Anchor).Hours()
	if x >= -hourlyRegion {
		k := int64(math.Floor(x))
		frac := x - float64(k)
		a := w.hour(k)
		if frac == 0 {
			return a
		}
		b := w.hour(k + 1)
		l := a + frac*(b-a)
		if noise {
			l += w.c.sigmaH * math.Sqrt(frac*(1-frac)) * normal(w.f.seed, w.c.key, streamTick, t.Unix())
		}
		return l
	}
	w.initBridge()
	y := Anchor.Add(-hourlyRegion*time.Hour).Sub(t).Hours() / 24
	j := int64(math.Floor(y))
	frac := y - float64(j)
	if j >= w.J {
		return math.Log(w.c.listPrice)
	}
	a := w.day(j)
	if frac == 0 {
		return a
	}
	b := w.day(j + 1)
	return a + frac*(b-a)
}

// String describes the feed for logs.
func (f *Feed) String() string {
	return fmt.Sprintf("sim/v%d(seed=%d, coins=%d, universe=%x)", algorithm, f.seed, len(f.coins), hashString(universeCSV)>>32)
}
