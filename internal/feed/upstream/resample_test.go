package upstream

import (
	"math"
	"testing"
	"time"

	"coinpulse"
)

func TestResample(t *testing.T) {
	h := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	ms := func(d time.Duration) int64 { return h.Add(d).UnixMilli() }
	samples := []Sample{
		{T: ms(-30 * time.Minute), Price: 100, MarketCap: 1000, Volume: 10},
		{T: ms(30 * time.Minute), Price: 200, MarketCap: 2000, Volume: 20},
		{T: ms(2 * time.Hour), Price: 300},
		// a gap of 5 hours: 3:00 and 4:00 are too far from any sample
		{T: ms(7*time.Hour + 10*time.Minute), Price: 700},
	}
	got := Resample(samples, time.Hour, h, h.Add(9*time.Hour))
	want := []coinpulse.HistoryPoint{
		{Timestamp: h, Price: 150, MarketCap: 1500, TotalVolume: 15},
		// toward a sample of unknown (0) market cap and volume: unknown
		{Timestamp: h.Add(time.Hour), Price: 200 + 100*(30.0/90)},
		{Timestamp: h.Add(2 * time.Hour), Price: 300},
		{Timestamp: h.Add(3 * time.Hour), Price: 300}, // within an hour of the sample at 2:00
		{Timestamp: h.Add(7 * time.Hour), Price: 700},
		{Timestamp: h.Add(8 * time.Hour), Price: 700},
	}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.Timestamp.Equal(w.Timestamp) || math.Abs(g.Price-w.Price) > 1e-9 || math.Abs(g.MarketCap-w.MarketCap) > 1e-9 || math.Abs(g.TotalVolume-w.TotalVolume) > 1e-9 {
			t.Errorf("point %d: %+v, want %+v", i, g, w)
		}
	}
	// from between grid points starts at the next one.
	if got := Resample(samples, time.Hour, h.Add(time.Minute), h.Add(time.Hour)); len(got) != 1 || !got[0].Timestamp.Equal(h.Add(time.Hour)) {
		t.Errorf("%+v", got)
	}
	if got := Resample(nil, time.Hour, h, h.Add(time.Hour)); got != nil {
		t.Errorf("%+v", got)
	}
	if got := Resample(samples, time.Hour, h.Add(time.Hour), h); got != nil {
		t.Errorf("to before from: %+v", got)
	}
}

func TestCut(t *testing.T) {
	for _, tt := range []struct{ in, want string }{{"abc", "abc"}, {"abcdef", "abcd…"}, {"aé€x", "aé…"}} {
		if got := Cut(tt.in, 4); got != tt.want {
			t.Errorf("Cut(%q, 4) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := CleanMessage("a\nb\xffc"); got != "a b?c" {
		t.Errorf("%q", got)
	}
}
