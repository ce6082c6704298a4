package market

import (
	"math"
	"time"

	"coinpulse"
)

// coinState is the engine's running record of one coin: its latest quote,
// the recent hourly and daily points that the 24 h, 7 d, 30 d and 1 y
// figures need, and its all-time extremes. statecodec.go saves it.
type coinState struct {
	Info                 coinpulse.CoinInfo
	Price, MarketCap     float64
	Volume               float64 // 0 when NoVolume
	NoVolume             bool
	Updated              time.Time
	Hourly               ring[float64] // prices and market caps, the last 26 hours
	Daily                ring[float32] // prices, the last 367 days (float32 halves the largest part of the state)
	ATH, ATL             float64
	ATHDate, ATLDate     time.Time
	HasQuote, HasExtreme bool
}

// ring is a run of evenly spaced points starting at Start (Unix seconds),
// at most Keep of them. Cap holds market caps when Caps is set (the hourly
// ring; the daily one needs only prices).
type ring[T float32 | float64] struct {
	Start int64
	Step  int64
	Keep  int
	Caps  bool
	Price []T
	Cap   []T
}

// add appends a point at t (Unix seconds, on the step): a point before the
// end replaces the one at its slot, a point past a gap restarts the ring,
// and the oldest points fall off past Keep. The slices never grow past
// Keep.
func (r *ring[T]) add(t int64, price, mcap float64) {
	switch {
	case len(r.Price) == 0 || t < r.Start:
		r.reset(t)
	case t < r.Start+int64(len(r.Price))*r.Step:
		i := (t - r.Start) / r.Step
		r.Price[i] = T(price)
		if r.Caps {
			r.Cap[i] = T(mcap)
		}
		return
	case t != r.Start+int64(len(r.Price))*r.Step:
		r.reset(t)
	}
	if len(r.Price) == r.Keep {
		copy(r.Price, r.Price[1:])
		r.Price = r.Price[:r.Keep-1]
		if r.Caps {
			copy(r.Cap, r.Cap[1:])
			r.Cap = r.Cap[:r.Keep-1]
		}
		r.Start += r.Step
	}
	r.Price = append(r.Price, T(price))
	if r.Caps {
		r.Cap = append(r.Cap, T(mcap))
	}
}

func (r *ring[T]) reset(t int64) {
	r.Start = t
	if cap(r.Price) < r.Keep {
		r.Price = make([]T, 0, r.Keep)
	}
	r.Price = r.Price[:0]
	if r.Caps {
		if cap(r.Cap) < r.Keep {
			r.Cap = make([]T, 0, r.Keep)
		}
		r.Cap = r.Cap[:0]
	}
}

// at returns the ring's value at t: interpolated linearly between the
// points either side of t, or the last point when t is at or after it,
// by less than a step (mcap is 0 without Caps, and when a market cap it
// would be drawn from is 0, unknown). So a change "over 24
// hours" is measured from now − 24 h, not from the last point before it,
// up to a step further back. ok is false before the first point, and a
// step or more after the last: a ring that stopped then (a start after a
// long stop serving quotes while it backfills) does not know t.
func (r *ring[T]) at(t int64) (price, mcap float64, ok bool) {
	if len(r.Price) == 0 || t < r.Start || t-(r.Start+int64(len(r.Price)-1)*r.Step) >= r.Step {
		return 0, 0, false
	}
	i := int((t - r.Start) / r.Step)
	if i >= len(r.Price)-1 {
		i = len(r.Price) - 1
		if r.Caps {
			mcap = float64(r.Cap[i])
		}
		return float64(r.Price[i]), mcap, true
	}
	f := float64(t-(r.Start+int64(i)*r.Step)) / float64(r.Step)
	lerp := func(a, b T) float64 { return float64(a) + (float64(b)-float64(a))*f }
	switch {
	case !r.Caps:
	case f == 0:
		mcap = float64(r.Cap[i])
	case r.Cap[i] != 0 && r.Cap[i+1] != 0:
		mcap = lerp(r.Cap[i], r.Cap[i+1])
	}
	return lerp(r.Price[i], r.Price[i+1]), mcap, true
}

const (
	keepHourly = 26
	keepDaily  = 367
)

func newCoinState(info coinpulse.CoinInfo) *coinState {
	return &coinState{Info: info, Hourly: ring[float64]{Step: 3600, Keep: keepHourly, Caps: true}, Daily: ring[float32]{Step: 86400, Keep: keepDaily}}
}

// observe updates the extremes with a price seen at t.
func (c *coinState) observe(price float64, t time.Time) {
	if !c.HasExtreme || price > c.ATH {
		c.ATH, c.ATHDate = price, t
	}
	if !c.HasExtreme || price < c.ATL {
		c.ATL, c.ATLDate = price, t
	}
	c.HasExtreme = true
}

// addPoint records a history point in the rings and extremes.
func (c *coinState) addPoint(interval coinpulse.Interval, p coinpulse.HistoryPoint) {
	c.addSeries(interval, []coinpulse.HistoryPoint{p})
}

// addSeries records a run of points, oldest first: every point counts for
// the extremes, only those the ring keeps are added to it.
func (c *coinState) addSeries(interval coinpulse.Interval, pts []coinpulse.HistoryPoint) {
	for _, p := range pts {
		c.observe(p.Price, p.Timestamp)
	}
	if interval == coinpulse.Hourly {
		addTail(&c.Hourly, pts)
	} else {
		addTail(&c.Daily, pts)
	}
}

func addTail[T float32 | float64](r *ring[T], pts []coinpulse.HistoryPoint) {
	for _, p := range pts[max(0, len(pts)-r.Keep):] {
		r.add(p.Timestamp.Unix(), p.Price, p.MarketCap)
	}
}

// apply takes a new quote. Quotes do not move the stored extremes: those
// come from history points only, so that every node computes the same
// figures whenever it started; detail folds the current price in.
func (c *coinState) apply(q coinpulse.Quote) {
	c.Price, c.Volume, c.NoVolume, c.Updated, c.HasQuote = q.Price, q.TotalVolume, q.NoVolume, q.Time, true
	c.MarketCap = q.MarketCap
	if c.MarketCap == 0 {
		c.MarketCap = q.Price * c.Info.CirculatingSupply
	}
}

func ptr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func pct(now, then float64) *float64 {
	if then == 0 {
		return nil
	}
	return ptr((now - then) / then * 100)
}

// detail computes the coin's figures as of now.
func (c *coinState) detail(now time.Time) coinpulse.CoinDetail {
	d := coinpulse.CoinDetail{
		MarketItem: coinpulse.MarketItem{
			ID: c.Info.ID, Symbol: c.Info.Symbol, Name: c.Info.Name,
			CurrentPrice: c.Price,
			ATH:          c.ATH, ATL: c.ATL,
			LastUpdated: c.Updated,
		},
		ATHDate: c.ATHDate, ATLDate: c.ATLDate,
		TotalSupply: c.Info.TotalSupply, MaxSupply: c.Info.MaxSupply,
		HistoryStart: c.Info.ListedAt,
	}
	if !c.NoVolume {
		v := ptr(c.Volume) // one allocation for both: read only
		d.TotalVolume, d.Volume24h = v, v
	}
	// A market cap or a supply of 0 is one the feed does not know.
	if c.MarketCap > 0 {
		d.MarketCap = ptr(c.MarketCap)
	}
	if c.Info.CirculatingSupply > 0 {
		d.CirculatingSupply = ptr(c.Info.CirculatingSupply)
	}
	if !c.HasExtreme || c.Price > d.ATH {
		d.ATH, d.ATHDate = c.Price, c.Updated
	}
	if !c.HasExtreme || c.Price < d.ATL {
		d.ATL, d.ATLDate = c.Price, c.Updated
	}
	if d.ATH > 0 {
		d.ATHChangePercentage = (c.Price - d.ATH) / d.ATH * 100
	}
	if d.ATL > 0 {
		d.ATLChangePercentage = (c.Price - d.ATL) / d.ATL * 100
	}
	day := now.Add(-24 * time.Hour).Unix()
	if p, m, ok := c.Hourly.at(day); ok {
		d.PriceChange24h = ptr(c.Price - p)
		d.PriceChangePercentage24h = pct(c.Price, p)
		if c.MarketCap > 0 && m > 0 {
			d.MarketCapChange24h = ptr(c.MarketCap - m)
			d.MarketCapChangePercentage24h = pct(c.MarketCap, m)
		}
		// The range takes in the price 24 h ago the change is measured
		// from, and the points after it.
		hi, lo := max(c.Price, p), min(c.Price, p)
		for i, v := range c.Hourly.Price { // float64
			if c.Hourly.Start+int64(i)*c.Hourly.Step > day {
				hi, lo = max(hi, v), min(lo, v)
			}
		}
		d.High24h, d.Low24h = &hi, &lo
	}
	for _, lb := range []struct {
		days int
		dst  **float64
	}{{7, &d.PriceChangePercentage7d}, {30, &d.PriceChangePercentage30d}, {365, &d.PriceChangePercentage1y}} {
		if p, _, ok := c.Daily.at(now.AddDate(0, 0, -lb.days).Unix()); ok {
			*lb.dst = pct(c.Price, p)
		}
	}
	switch {
	case c.Info.MaxSupply != nil:
		d.FullyDilutedValuation = ptr(c.Price * *c.Info.MaxSupply)
	case c.Info.TotalSupply != nil:
		d.FullyDilutedValuation = ptr(c.Price * *c.Info.TotalSupply)
	}
	return d
}
