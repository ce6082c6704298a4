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
	if p, _, ok := r.at(1000); !ok || p != 9 {
		t.Errorf("at(past the end) = %v %v, want the last point", p, ok)
	}
	if _, _, ok := r.at(169); ok {
		t.Error("at(before the start) found a point")
	}
	r.add(250, 1, 1) // a gap restarts the ring
	if r.Start != 250 || len(r.Price) != 1 {
		t.Errorf("after a gap: start %d, %v", r.Start, r.Price)
	}
	d := ring[float32]{Step: 10, Keep: 2}
	d.add(10, 1, 99)
	if p, m, ok := d.at(10); !ok || p != 1 || m != 0 || d.Cap != nil {
		t.Errorf("a ring without caps kept one: %v %v %v", p, m, d.Cap)
	}
}

// A high or a low the API has served is not taken back by a later quote:
// all-time and 24 h extremes fold every quote in (an audit: the ATH fell
// with the next lower quote, as only hourly points were kept).
func TestQuotesKeepTheirExtremes(t *testing.T) {
	h := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	c := newCoinState(coinpulse.CoinInfo{ID: "x"})
	for i := range 25 {
		c.addPoint(coinpulse.Hourly, coinpulse.HistoryPoint{Timestamp: h.Add(time.Duration(i-24) * time.Hour), Price: 100, MarketCap: 1})
	}
	for _, q := range []struct {
		at    time.Duration
		price float64
	}{{10 * time.Minute, 120}, {20 * time.Minute, 80}, {30 * time.Minute, 100}} {
		c.apply(coinpulse.Quote{CoinID: "x", Price: q.price, Time: h.Add(q.at)})
	}
	d := c.detail(h.Add(30 * time.Minute))
	if d.ATH != 120 || !d.ATHDate.Equal(h.Add(10*time.Minute)) || d.ATL != 80 || !d.ATLDate.Equal(h.Add(20*time.Minute)) {
		t.Errorf("ATH %v at %v, ATL %v at %v; want 120 at +10m and 80 at +20m", d.ATH, d.ATHDate, d.ATL, d.ATLDate)
	}
	if d.High24h == nil || *d.High24h != 120 || d.Low24h == nil || *d.Low24h != 80 {
		t.Errorf("24 h high %v, low %v; want 120 and 80", d.High24h, d.Low24h)
	}
	// The next hour's point does not drop the hour's extremes.
	c.addPoint(coinpulse.Hourly, coinpulse.HistoryPoint{Timestamp: h.Add(time.Hour), Price: 100, MarketCap: 1})
	c.apply(coinpulse.Quote{CoinID: "x", Price: 101, Time: h.Add(time.Hour)})
	if d := c.detail(h.Add(time.Hour)); *d.High24h != 120 || *d.Low24h != 80 {
		t.Errorf("after the hour: 24 h high %v, low %v; want 120 and 80", *d.High24h, *d.Low24h)
	}
}
