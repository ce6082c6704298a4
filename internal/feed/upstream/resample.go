package upstream

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"coinpulse"
)

// Sample is one point of a chart as an API sends it: at T (Unix
// milliseconds), a price and, where known, a market cap and a volume (0
// when not: the history point's fields are not nullable).
type Sample struct {
	T                 int64
	Price             float64
	MarketCap, Volume float64
}

// Resample returns the points on step's grid (UTC) in [from, to] that the
// samples, ordered by time, tell: a grid point between two samples at most
// two steps apart is interpolated linearly between them, one within a step
// of the nearest sample takes that sample's figures, and one farther from
// any is left out rather than made up. An API's points can lie off the
// grid (CoinGecko's hourly ones a few minutes past the hour, its last at
// the moment asked), which this maps onto it.
func Resample(samples []Sample, step time.Duration, from, to time.Time) []coinpulse.HistoryPoint {
	if len(samples) == 0 || to.Before(from) {
		return nil
	}
	stepMs := step.Milliseconds()
	g := from.UTC().Truncate(step)
	if g.Before(from) {
		g = g.Add(step)
	}
	var out []coinpulse.HistoryPoint
	i := 0 // samples[:i] are before the grid point
	for ; !g.After(to); g = g.Add(step) {
		t := g.UnixMilli()
		for i < len(samples) && samples[i].T < t {
			i++
		}
		var p coinpulse.HistoryPoint
		switch {
		case i < len(samples) && samples[i].T == t:
			s := samples[i]
			p = coinpulse.HistoryPoint{Price: s.Price, MarketCap: s.MarketCap, TotalVolume: s.Volume}
		case i > 0 && i < len(samples) && samples[i].T-samples[i-1].T <= 2*stepMs:
			a, b := samples[i-1], samples[i]
			f := float64(t-a.T) / float64(b.T-a.T)
			lerp := func(x, y float64) float64 { return x + (y-x)*f }
			// A market cap or a volume of 0 is unknown: so is one drawn
			// from it.
			known := func(x, y float64) float64 {
				if x == 0 || y == 0 {
					return 0
				}
				return lerp(x, y)
			}
			p = coinpulse.HistoryPoint{Price: lerp(a.Price, b.Price), MarketCap: known(a.MarketCap, b.MarketCap), TotalVolume: known(a.Volume, b.Volume)}
		default:
			s, ok := nearest(samples, i, t, stepMs)
			if !ok {
				continue
			}
			p = coinpulse.HistoryPoint{Price: s.Price, MarketCap: s.MarketCap, TotalVolume: s.Volume}
		}
		p.Timestamp = g
		out = append(out, p)
	}
	return out
}

// nearest returns the sample next to index i (samples[i-1] or samples[i])
// closest to t, if it is within d of it.
func nearest(samples []Sample, i int, t, d int64) (Sample, bool) {
	best, dist := Sample{}, int64(math.MaxInt64)
	for _, j := range [2]int{i - 1, i} {
		if j >= 0 && j < len(samples) {
			if x := absInt(samples[j].T - t); x < dist {
				best, dist = samples[j], x
			}
		}
	}
	return best, dist <= d
}

func absInt(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Cut returns s cut to at most n bytes, on a character's boundary, with
// "…" when it was cut.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// CleanMessage makes an API's message fit a log line: valid UTF-8, no
// control characters, at most 300 bytes.
func CleanMessage(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return Cut(s, 300)
}
