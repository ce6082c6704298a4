package market

import (
	"slices"
	"testing"
	"time"

	"coinpulse"
)

func TestRing(t *testing.T) {
	r := ring[float64]{Step: 10, Keep: 3, Caps: true}
	for i := range 10 {
		r.add(int64(100+10*i), float64(i), float64(-i))
	}
	if r.Start != 170 || !slices.Equal(r.Price, []float64{7, 8, 9}) || !slices.Equal(r.Cap, []float64{-7, -8, -9}) {
		t.Fatalf("after 10 adds: start %d, %v %v; want 170, [7 8 9] [-7 -8 -9]", r.Start, r.Price, r.Cap)
	}
	if cap(r.Price) > r.Keep || cap(r.Cap) > r.Keep {
		t.Errorf("capacity grew past Keep: %d, %d", cap(r.Price), cap(r.Cap))
	}
	r.add(180, 80, -80) // replaces a slot
	if p, m, ok := r.at(180); !ok || p != 80 || m != -80 {
		t.Errorf("at(180) = %v %v %v after a replacement", p, m, ok)
	}
	// Between two points: interpolated, 80 at 180 and 9 at 190.
	if p, m, ok := r.at(185); !ok || p != 44.5 || m != -44.5 {
		t.Errorf("at(185) = %v %v %v, want 44.5 -44.5 halfway between the points either side", p, m, ok)
	}
	if p, _, ok := r.at(199); !ok || p != 9 {
		t.Errorf("at(less than a step past the end) = %v %v, want the last point", p, ok)
	}
	if _, _, ok := r.at(200); ok {
		t.Error("at(a step past the end) found a point: the ring does not know that far")
	}
	if _, _, ok := r.at(169); ok {
		t.Error("at(before the start) found a point")
	}
	r.add(250, 1, 1) // a gap restarts the ring
	if r.Start != 250 || len(r.Price) != 1 {
		t.Errorf("after a gap: start %d, %v", r.Start, r.Price)
	}
	// Between a known market cap and an unknown one (0), none is known;
	// on the known one's point, it is.
	r.add(260, 3, 0)
	if p, m, ok := r.at(255); !ok || p != 2 || m != 0 {
		t.Errorf("at(255) = %v %v %v, want 2 and an unknown (0) market cap", p, m, ok)
	}
	if p, m, ok := r.at(250); !ok || p != 1 || m != 1 {
		t.Errorf("at(250) = %v %v %v, want the point's own 1 and 1", p, m, ok)
	}
	d := ring[float32]{Step: 10, Keep: 2}
	d.add(10, 1, 99)
	if p, m, ok := d.at(10); !ok || p != 1 || m != 0 || d.Cap != nil {
		t.Errorf("a ring without caps kept one: %v %v %v", p, m, d.Cap)
	}
}

// hours is a point an hour from day to now: a price of 1, then 2 at now,
// and a market cap of supply times the price (0: unknown).
func hours(day, now time.Time, supply float64) []coinpulse.HistoryPoint {
	var pts []coinpulse.HistoryPoint
	for t := day; !t.After(now); t = t.Add(time.Hour) {
		p := 1.0
		if t.Equal(now) {
			p = 2
		}
		pts = append(pts, coinpulse.HistoryPoint{Timestamp: t, Price: p, MarketCap: p * supply})
	}
	return pts
}

// A coin whose feed knows neither its market cap nor its circulating
// supply has neither, nor a market cap change; one whose market cap a
// day ago is unknown has a market cap but no change.
func TestDetailUnknownMarketCap(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	day := now.Add(-24 * time.Hour)
	c := coinState{Hourly: ring[float64]{Step: 3600, Keep: 26, Caps: true}}
	c.Info = coinpulse.CoinInfo{ID: "x", Symbol: "x", Name: "X"}
	c.addSeries(coinpulse.Hourly, hours(day, now, 10))
	c.apply(coinpulse.Quote{CoinID: "x", Price: 2, Time: now})
	d := c.detail(now)
	if d.MarketCap != nil || d.CirculatingSupply != nil || d.MarketCapChange24h != nil || d.MarketCapChangePercentage24h != nil {
		t.Errorf("unknown market cap: cap %v, supply %v, change %v %v; want all null", d.MarketCap, d.CirculatingSupply, d.MarketCapChange24h, d.MarketCapChangePercentage24h)
	}
	if d.PriceChangePercentage24h == nil || *d.PriceChangePercentage24h != 100 {
		t.Errorf("price change %v, want 100", d.PriceChangePercentage24h)
	}

	c = coinState{Hourly: ring[float64]{Step: 3600, Keep: 26, Caps: true}}
	c.Info = coinpulse.CoinInfo{ID: "x", Symbol: "x", Name: "X", CirculatingSupply: 10}
	c.addSeries(coinpulse.Hourly, hours(day, now, 0))
	c.apply(coinpulse.Quote{CoinID: "x", Price: 2, Time: now})
	d = c.detail(now)
	if d.MarketCap == nil || *d.MarketCap != 20 || d.CirculatingSupply == nil || *d.CirculatingSupply != 10 {
		t.Errorf("market cap %v, supply %v; want 20 (2 × 10), 10", d.MarketCap, d.CirculatingSupply)
	}
	if d.MarketCapChange24h != nil || d.MarketCapChangePercentage24h != nil {
		t.Errorf("market cap change %v %v against an unknown market cap a day ago, want null", d.MarketCapChange24h, d.MarketCapChangePercentage24h)
	}
}

// The 24 h high and low take in the price 24 h ago that the change is
// measured from: on the hour, the point exactly 24 h back (an audit: it
// was left out, and a change from 1 came with a low of 1.5); off the
// hour, the price between the two points either side of it.
func TestDetailRangeTakesInThePrice24hAgo(t *testing.T) {
	for _, now := range []time.Time{
		time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC),
	} {
		c := coinState{Hourly: ring[float64]{Step: 3600, Keep: 26, Caps: true}}
		c.Info = coinpulse.CoinInfo{ID: "x", Symbol: "x", Name: "X"}
		from := now.Add(-25 * time.Hour).Truncate(time.Hour)
		var pts []coinpulse.HistoryPoint
		for at := from; at.Before(now); at = at.Add(time.Hour) {
			p := 2.0 // 1 at the hour 24 h ago, or at the hour before it
			if at.Equal(now.Add(-24 * time.Hour).Truncate(time.Hour)) {
				p = 1
			}
			pts = append(pts, coinpulse.HistoryPoint{Timestamp: at, Price: p})
		}
		c.addSeries(coinpulse.Hourly, pts)
		c.apply(coinpulse.Quote{CoinID: "x", Price: 3, Time: now})
		d := c.detail(now)
		if d.PriceChange24h == nil || d.Low24h == nil || d.High24h == nil {
			t.Fatalf("%v: change %v, low %v, high %v; want them known", now, d.PriceChange24h, d.Low24h, d.High24h)
		}
		then := d.CurrentPrice - *d.PriceChange24h
		if *d.Low24h != then || *d.High24h != 3 {
			t.Errorf("%v: price 24 h ago %v, low_24h %v, high_24h %v; want the low to be the price 24 h ago, the high 3", now, then, *d.Low24h, *d.High24h)
		}
	}
}
