package sim

import (
	"context"
	"encoding/csv"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"coinpulse"
)

// refCoin is one row of universe.csv, read independently of parseUniverse.
type refCoin struct {
	id, symbol, name string
	price            float64
	listed           time.Time
	listPrice        float64 // 0 for a pegged coin
	peggedTo         string  // the underlying's id, or ""
}

// readCSV reads universe.csv with encoding/csv, so that the feed is checked
// against the file rather than against its own parser.
func readCSV(t testing.TB) []refCoin {
	t.Helper()
	f, err := os.Open("universe.csv")
	if err != nil {
		t.Fatalf("open universe.csv: %v", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("read universe.csv: %v", err)
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	num := func(row []string, name string) float64 {
		t.Helper()
		if row[col[name]] == "" && row[col["pegged_to"]] != "" {
			return 0 // a pegged coin's figure taken from its underlying
		}
		v, err := strconv.ParseFloat(row[col[name]], 64)
		if err != nil {
			t.Fatalf("universe.csv %s %s: %v", row[0], name, err)
		}
		return v
	}
	var out []refCoin
	for _, row := range rows[1:] {
		listed, err := time.Parse("2006-01-02", row[col["listed"]])
		if err != nil {
			t.Fatalf("universe.csv %s listed: %v", row[0], err)
		}
		out = append(out, refCoin{
			id: row[col["id"]], symbol: row[col["symbol"]], name: row[col["name"]],
			price: num(row, "price_usd"), listed: listed, listPrice: num(row, "listing_price_usd"),
			peggedTo: row[col["pegged_to"]],
		})
	}
	return out
}

func newFeed(t testing.TB, seed int64, n int) *Feed {
	t.Helper()
	f, err := New(seed, n)
	if err != nil {
		t.Fatalf("New(%d, %d): %v", seed, n, err)
	}
	return f
}

func universe(t testing.TB, f *Feed) []coinpulse.CoinInfo {
	t.Helper()
	u, err := f.Universe(context.Background())
	if err != nil {
		t.Fatalf("Universe: %v", err)
	}
	return u
}

func quotes(t testing.TB, f *Feed, now time.Time) []coinpulse.Quote {
	t.Helper()
	q, err := f.Quotes(context.Background(), now)
	if err != nil {
		t.Fatalf("Quotes(%v): %v", now, err)
	}
	return q
}

func history(t testing.TB, f *Feed, id string, interval coinpulse.Interval, from, to time.Time) []coinpulse.HistoryPoint {
	t.Helper()
	c := f.byID[id]
	if c == nil {
		t.Fatalf("no coin %q", id)
	}
	pts, err := f.History(context.Background(), c.info, interval, from, to)
	if err != nil {
		t.Fatalf("History(%s, %s, %v, %v): %v", id, interval, from, to, err)
	}
	return pts
}

func relDiff(a, b float64) float64 {
	if a == b {
		return 0
	}
	return math.Abs(a-b) / math.Max(math.Abs(a), math.Abs(b))
}

// sampleIDs are coins of every kind: large, stable, shared symbol (and
// pegged), pegged, listed inside the hourly region, listed after the
// anchor, synthetic.
var sampleIDs = []string{"bitcoin", "ethereum", "tether", "ripple", "dydx-chain", "wrapped-steth", "plasma", "monad"}

func TestUniverse(t *testing.T) {
	ref := readCSV(t)
	tests := []struct {
		name string
		n    int
		want int
	}{
		{"default", 0, 1000},
		{"below minimum", 10, 1000},
		{"exactly minimum", 1000, 1000},
		{"larger", 5000, 5000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := universe(t, newFeed(t, 1, tt.n))
			if got := len(u); got != tt.want {
				t.Fatalf("len(Universe) = %d, want %d", got, tt.want)
			}
			if got, want := u[0].ID, "bitcoin"; got != want {
				t.Errorf("first coin = %q, want %q", got, want)
			}
			seen := map[string]bool{}
			for i, c := range u {
				if seen[c.ID] {
					t.Errorf("duplicate id %q at %d", c.ID, i)
				}
				seen[c.ID] = true
				if c.Symbol != strings.ToLower(c.Symbol) || c.Symbol == "" {
					t.Errorf("coin %q: symbol %q is not lower case and non-empty", c.ID, c.Symbol)
				}
				if c.Name == "" {
					t.Errorf("coin %q: empty name", c.ID)
				}
				if !(c.CirculatingSupply > 0) || math.IsInf(c.CirculatingSupply, 0) {
					t.Errorf("coin %q: circulating supply %v, want positive and finite", c.ID, c.CirculatingSupply)
				}
				if c.ListedAt.IsZero() || c.ListedAt.Location() != time.UTC {
					t.Errorf("coin %q: ListedAt %v, want a UTC time", c.ID, c.ListedAt)
				}
				if i < len(ref) {
					if got, want := [3]string{c.ID, c.Symbol, c.Name}, [3]string{ref[i].id, strings.ToLower(ref[i].symbol), ref[i].name}; got != want {
						t.Errorf("coin %d = %q, want %q (universe.csv row %d)", i, got, want, i+2)
					}
					if !c.ListedAt.Equal(ref[i].listed) {
						t.Errorf("coin %q: ListedAt %v, want %v", c.ID, c.ListedAt, ref[i].listed)
					}
				} else if !strings.HasPrefix(c.ID, "sim-") {
					t.Errorf("coin %d = %q, want a synthetic id starting sim-", i, c.ID)
				}
			}
		})
	}
	t.Run("real coins are a few hundred", func(t *testing.T) {
		if n := len(ref); n < 250 || n > 400 {
			t.Errorf("universe.csv has %d coins, want about 300", n)
		}
	})
	t.Run("larger universe extends the default", func(t *testing.T) {
		small, large := universe(t, newFeed(t, 1, 0)), universe(t, newFeed(t, 1, 5000))
		if diff := cmp.Diff(small, large[:len(small)]); diff != "" {
			t.Errorf("New(1, 5000)[:1000] differs from New(1, 0) (-want +got):\n%s", diff)
		}
	})
}

func TestDeterminism(t *testing.T) {
	ctx := context.Background()
	at := Anchor.Add(1234*time.Hour + 17*time.Minute + 3*time.Second) // off the grid: tick noise
	t.Run("same seed", func(t *testing.T) {
		a, b := newFeed(t, 7, 0), newFeed(t, 7, 0)
		if diff := cmp.Diff(universe(t, a), universe(t, b)); diff != "" {
			t.Errorf("Universe differs (-a +b):\n%s", diff)
		}
		if diff := cmp.Diff(quotes(t, a, at), quotes(t, b, at)); diff != "" {
			t.Errorf("Quotes(%v) differ (-a +b):\n%s", at, diff)
		}
		for _, id := range append(sampleIDs, universe(t, a)[999].ID) {
			for _, iv := range []coinpulse.Interval{coinpulse.Hourly, coinpulse.Daily} {
				from := at.AddDate(-2, 0, 0)
				if diff := cmp.Diff(history(t, a, id, iv, from, at), history(t, b, id, iv, from, at)); diff != "" {
					t.Errorf("History(%s, %s) differs (-a +b):\n%s", id, iv, diff)
				}
			}
		}
	})
	t.Run("different seed", func(t *testing.T) {
		a, b := newFeed(t, 1, 0), newFeed(t, 2, 0)
		ua, ub := universe(t, a), universe(t, b)
		nReal := len(readCSV(t))
		if diff := cmp.Diff(ua[:nReal], ub[:nReal]); diff != "" {
			t.Errorf("real coins' info depends on the seed (-seed1 +seed2):\n%s", diff)
		}
		same := 0
		for i := nReal; i < len(ua); i++ {
			if ua[i].ID == ub[i].ID {
				same++
			}
		}
		if same > (len(ua)-nReal)/10 {
			t.Errorf("%d of %d synthetic ids are the same for seeds 1 and 2, want them mostly different", same, len(ua)-nReal)
		}
		qa, qb := quotes(t, a, at), quotes(t, b, at)
		if len(qa) != len(qb) {
			t.Fatalf("len(Quotes) = %d and %d", len(qa), len(qb))
		}
		for i := range nReal {
			if qa[i].CoinID != qb[i].CoinID {
				t.Fatalf("quote %d: coin %q vs %q", i, qa[i].CoinID, qb[i].CoinID)
			}
			if qa[i].Price == qb[i].Price {
				t.Errorf("%s: price %v is the same for seeds 1 and 2", qa[i].CoinID, qa[i].Price)
			}
		}
		if _, err := b.History(ctx, a.byID["bitcoin"].info, coinpulse.Daily, at.AddDate(0, 0, -3), at); err != nil {
			t.Errorf("History of a real coin on another seed: %v", err)
		}
	})
}

func TestConsistency(t *testing.T) {
	t.Run("hourly history equals quotes on the grid", func(t *testing.T) {
		f := newFeed(t, 3, 0)
		ids := append(sampleIDs, universe(t, f)[500].ID)
		from, to := Anchor.Add(-2*time.Hour), Anchor.Add(30*time.Hour)
		want := map[string][]coinpulse.HistoryPoint{}
		for _, id := range ids {
			want[id] = history(t, f, id, coinpulse.Hourly, from, to)
		}
		for i := range want["bitcoin"] {
			at := from.Add(time.Duration(i) * time.Hour)
			byID := map[string]coinpulse.Quote{}
			for _, q := range quotes(t, f, at) {
				byID[q.CoinID] = q
			}
			for _, id := range ids {
				if id == "monad" {
					continue // listed after the anchor: no quotes here
				}
				q, ok := byID[id]
				if !ok {
					t.Fatalf("Quotes(%v) has no %s", at, id)
				}
				p := want[id][i]
				if !p.Timestamp.Equal(at) {
					t.Fatalf("%s history point %d at %v, want %v", id, i, p.Timestamp, at)
				}
				if d := relDiff(q.Price, p.Price); d > 1e-12 {
					t.Errorf("%s at %v: quote price %v, history price %v (rel diff %g)", id, at, q.Price, p.Price, d)
				}
				if d := relDiff(q.TotalVolume, p.TotalVolume); d > 1e-12 {
					t.Errorf("%s at %v: quote volume %v, history volume %v", id, at, q.TotalVolume, p.TotalVolume)
				}
				if d := relDiff(q.MarketCap, p.MarketCap); d > 1e-12 {
					t.Errorf("%s at %v: quote market cap %v, history market cap %v", id, at, q.MarketCap, p.MarketCap)
				}
			}
		}
	})
	t.Run("quotes at the anchor are the reference prices", func(t *testing.T) {
		ref := readCSV(t)
		for _, seed := range []int64{1, 99} {
			byID := map[string]coinpulse.Quote{}
			for _, q := range quotes(t, newFeed(t, seed, 0), Anchor) {
				byID[q.CoinID] = q
			}
			for _, r := range ref {
				q, ok := byID[r.id]
				if !r.listed.After(Anchor) && !ok {
					t.Errorf("seed %d: no quote for %s at the anchor", seed, r.id)
					continue
				}
				if r.listed.After(Anchor) {
					if ok {
						t.Errorf("seed %d: %s quoted at the anchor, before its listing %v", seed, r.id, r.listed)
					}
					continue
				}
				if d := relDiff(q.Price, r.price); d > 1e-9 {
					t.Errorf("seed %d: %s price at anchor = %v, want %v", seed, r.id, q.Price, r.price)
				}
				if !q.Time.Equal(Anchor) {
					t.Errorf("seed %d: %s quote time %v, want %v", seed, r.id, q.Time, Anchor)
				}
			}
		}
	})
	t.Run("quote off the grid lies near its neighbours", func(t *testing.T) {
		f := newFeed(t, 1, 0)
		at := Anchor.Add(100*time.Hour + 30*time.Minute)
		h := history(t, f, "bitcoin", coinpulse.Hourly, at.Add(-time.Hour), at.Add(time.Hour))
		var q coinpulse.Quote
		for _, x := range quotes(t, f, at) {
			if x.CoinID == "bitcoin" {
				q = x
			}
		}
		lo, hi := math.Min(h[0].Price, h[1].Price), math.Max(h[0].Price, h[1].Price)
		// Tick noise is a bridge with the hour's volatility: a few percent
		// at the very most around the interpolation.
		if q.Price < lo*0.95 || q.Price > hi*1.05 {
			t.Errorf("quote at %v = %v, far from the hour's points %v and %v", at, q.Price, h[0].Price, h[1].Price)
		}
	})
}

func TestHistory(t *testing.T) {
	ref := readCSV(t)
	now := time.Date(2026, 3, 10, 12, 34, 56, 0, time.UTC)
	f := newFeed(t, 1, 0)
	u := universe(t, f)
	info := map[string]coinpulse.CoinInfo{}
	for _, c := range u {
		info[c.ID] = c
	}
	regionStart := Anchor.Add(-hourlyRegion * time.Hour)

	checkPoints := func(t *testing.T, id string, interval coinpulse.Interval, pts []coinpulse.HistoryPoint) {
		t.Helper()
		c := info[id]
		for i, p := range pts {
			if p.Timestamp.Location() != time.UTC {
				t.Errorf("%s point %d: timestamp %v not in UTC", id, i, p.Timestamp)
			}
			if p.Timestamp.Truncate(interval.Step()) != p.Timestamp {
				t.Errorf("%s point %d: timestamp %v not on the %s grid", id, i, p.Timestamp, interval)
			}
			if i > 0 && !p.Timestamp.After(pts[i-1].Timestamp) {
				t.Errorf("%s point %d: timestamp %v not after %v", id, i, p.Timestamp, pts[i-1].Timestamp)
			}
			if i > 0 && p.Timestamp.Sub(pts[i-1].Timestamp) != interval.Step() {
				t.Errorf("%s point %d: gap %v after %v, want %v", id, i, p.Timestamp.Sub(pts[i-1].Timestamp), pts[i-1].Timestamp, interval.Step())
			}
			if p.Timestamp.Before(c.ListedAt) {
				t.Errorf("%s point %d at %v, before listing %v", id, i, p.Timestamp, c.ListedAt)
			}
			for name, v := range map[string]float64{"price": p.Price, "market cap": p.MarketCap, "volume": p.TotalVolume} {
				if !(v > 0) || math.IsInf(v, 0) {
					t.Errorf("%s point %d at %v: %s = %v, want positive and finite", id, i, p.Timestamp, name, v)
				}
			}
			if d := relDiff(p.MarketCap, p.Price*c.CirculatingSupply); d > 1e-12 {
				t.Errorf("%s point %d: market cap %v, want price × supply = %v", id, i, p.MarketCap, p.Price*c.CirculatingSupply)
			}
		}
	}

	t.Run("daily from listing", func(t *testing.T) {
		for _, r := range ref {
			c := info[r.id]
			pts := history(t, f, r.id, coinpulse.Daily, c.ListedAt, now)
			if len(pts) == 0 {
				t.Errorf("%s: no daily history from %v to %v", r.id, c.ListedAt, now)
				continue
			}
			checkPoints(t, r.id, coinpulse.Daily, pts)
			if first := pts[0].Timestamp; first.Before(c.ListedAt) || first.Sub(c.ListedAt) >= 24*time.Hour {
				t.Errorf("%s: first daily point at %v, want within a day of listing %v", r.id, first, c.ListedAt)
			}
			if last, want := pts[len(pts)-1].Timestamp, now.Truncate(24*time.Hour); !last.Equal(want) {
				t.Errorf("%s: last daily point at %v, want %v", r.id, last, want)
			}
			// Coins listed before the hourly region start on the daily
			// bridge, which ends at the listing price. (A pegged coin
			// follows its underlying instead: TestPegged.)
			if c.ListedAt.Before(regionStart) && r.peggedTo == "" {
				if d := relDiff(pts[0].Price, r.listPrice); d > 1e-9 {
					t.Errorf("%s: first daily price %v, want the listing price %v", r.id, pts[0].Price, r.listPrice)
				}
			}
		}
	})
	t.Run("synthetic and full range", func(t *testing.T) {
		for _, c := range u[len(ref):] {
			pts := history(t, f, c.ID, coinpulse.Daily, time.Time{}, now)
			if len(pts) == 0 || !pts[0].Timestamp.Equal(c.ListedAt) {
				t.Fatalf("%s: daily history from the zero time starts %v, want at listing %v", c.ID, pts, c.ListedAt)
			}
			checkPoints(t, c.ID, coinpulse.Daily, pts)
		}
	})

	tests := []struct {
		name     string
		id       string
		interval coinpulse.Interval
		from, to time.Time
		want     int
	}{
		{"hourly 90 days", "bitcoin", coinpulse.Hourly, now.Truncate(time.Hour).Add(-90 * 24 * time.Hour), now.Truncate(time.Hour), 90*24 + 1},
		{"hourly 90 days off grid", "bitcoin", coinpulse.Hourly, now.Add(-90 * 24 * time.Hour), now, 90 * 24},
		{"hourly across the region start", "ethereum", coinpulse.Hourly, regionStart.Add(-48 * time.Hour), regionStart.Add(48 * time.Hour), 97},
		{"hourly 1 day", "ripple", coinpulse.Hourly, now.Add(-24 * time.Hour), now, 24},
		{"daily 365", "bitcoin", coinpulse.Daily, now.AddDate(0, 0, -365), now, 365},
		{"daily before listing clipped", "plasma", coinpulse.Daily, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 9, 30, 0, 0, 0, 0, time.UTC), 6},
		{"before listing", "monad", coinpulse.Hourly, Anchor, Anchor.Add(24 * time.Hour), 0},
		{"empty range", "bitcoin", coinpulse.Daily, now, now.Add(-48 * time.Hour), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pts := history(t, f, tt.id, tt.interval, tt.from, tt.to)
			if got := len(pts); got != tt.want {
				t.Fatalf("len(History) = %d, want %d", got, tt.want)
			}
			checkPoints(t, tt.id, tt.interval, pts)
			for i, p := range pts {
				if p.Timestamp.Before(tt.from) || p.Timestamp.After(tt.to) {
					t.Errorf("point %d at %v outside [%v, %v]", i, p.Timestamp, tt.from, tt.to)
				}
			}
		})
	}

	t.Run("daily points equal hourly points at midnight", func(t *testing.T) {
		from, to := now.AddDate(0, 0, -60), now
		daily := history(t, f, "bitcoin", coinpulse.Daily, from, to)
		hourly := history(t, f, "bitcoin", coinpulse.Hourly, from, to)
		at := map[time.Time]float64{}
		for _, p := range hourly {
			at[p.Timestamp] = p.Price
		}
		for _, p := range daily {
			if d := relDiff(at[p.Timestamp], p.Price); d > 1e-12 {
				t.Errorf("at %v: daily %v, hourly %v", p.Timestamp, p.Price, at[p.Timestamp])
			}
		}
	})

	t.Run("unknown coin", func(t *testing.T) {
		_, err := f.History(context.Background(), coinpulse.CoinInfo{ID: "no-such-coin"}, coinpulse.Daily, now.AddDate(0, 0, -1), now)
		if !coinpulse.IsNotFound(err) {
			t.Errorf("History of an unknown coin: err = %v, want RESOURCE_NOT_FOUND", err)
		}
	})
}

func TestQuotes(t *testing.T) {
	f := newFeed(t, 1, 0)
	info := map[string]coinpulse.CoinInfo{}
	for _, c := range universe(t, f) {
		info[c.ID] = c
	}
	times := []time.Time{
		time.Date(2026, 3, 10, 12, 34, 56, 0, time.UTC),
		time.Date(2026, 3, 10, 12, 35, 56, 0, time.UTC),
		time.Date(2024, 1, 1, 6, 0, 0, 0, time.UTC), // before the hourly region
		Anchor.Add(-time.Minute),
	}
	for _, now := range times {
		t.Run(now.Format(time.RFC3339), func(t *testing.T) {
			for _, q := range quotes(t, f, now) {
				c := info[q.CoinID]
				if now.Before(c.ListedAt) {
					t.Errorf("%s quoted at %v, before its listing %v", q.CoinID, now, c.ListedAt)
				}
				if !q.Time.Equal(now) {
					t.Errorf("%s: quote time %v, want %v", q.CoinID, q.Time, now)
				}
				if !(q.Price > 0) || math.IsInf(q.Price, 0) || !(q.TotalVolume > 0) || math.IsInf(q.TotalVolume, 0) {
					t.Errorf("%s: price %v, volume %v, want positive and finite", q.CoinID, q.Price, q.TotalVolume)
				}
				if d := relDiff(q.MarketCap, q.Price*c.CirculatingSupply); d > 1e-12 {
					t.Errorf("%s: market cap %v, want price × supply = %v", q.CoinID, q.MarketCap, q.Price*c.CirculatingSupply)
				}
			}
		})
	}
}

// TestWalkerDoesNotDrift moves the feed's remembered Quotes position all
// over the path and asks for history in random order: every answer must be
// the one a fresh feed gives.
func TestWalkerDoesNotDrift(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 34, 56, 0, time.UTC)
	type query struct {
		id       string
		interval coinpulse.Interval
		from, to time.Time
	}
	var qs []query
	for _, id := range []string{"bitcoin", "ethereum", "tether", "dydx-chain", "plasma"} {
		for back := 0; back < 5; back++ {
			end := now.AddDate(0, 0, -100*back)
			qs = append(qs,
				query{id, coinpulse.Hourly, end.AddDate(0, 0, -20), end},
				query{id, coinpulse.Daily, end.AddDate(-1, 0, 0), end},
			)
		}
		qs = append(qs, query{id, coinpulse.Daily, time.Time{}, now})
	}
	fresh := newFeed(t, 5, 0)
	want := make([][]coinpulse.HistoryPoint, len(qs))
	for i, q := range qs {
		want[i] = history(t, newFeed(t, 5, 0), q.id, q.interval, q.from, q.to)
		if len(want[i]) == 0 && q.id != "plasma" { // plasma is listed late in 2025
			t.Fatalf("query %+v: no points", q)
		}
		if diff := cmp.Diff(want[i], history(t, fresh, q.id, q.interval, q.from, q.to)); diff != "" {
			t.Fatalf("query %+v: a fresh feed's answer changes when asked again (-first +second):\n%s", q, diff)
		}
	}

	opt := cmpopts.EquateApprox(1e-12, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	f := newFeed(t, 5, 0)
	// Backwards, then forwards, then in random order, with the Quotes walk
	// moved far away between history queries.
	order := make([]int, len(qs))
	for i := range order {
		order[i] = len(qs) - 1 - i
	}
	for i := range qs {
		order = append(order, i)
	}
	order = append(order, rng.Perm(len(qs))...)
	quoteTimes := []time.Time{now.AddDate(0, 3, 0), Anchor.AddDate(-1, 0, 0), now, Anchor.Add(-hourlyRegion*time.Hour - time.Hour), Anchor.AddDate(0, 6, 0)}
	for n, i := range order {
		if n%20 == 0 {
			quotes(t, f, quoteTimes[(n/20)%len(quoteTimes)])
		}
		q := qs[i]
		got := history(t, f, q.id, q.interval, q.from, q.to)
		if diff := cmp.Diff(want[i], got, opt); diff != "" {
			t.Errorf("query %d (%s %s %v..%v) after walking around differs from a fresh feed (-fresh +got):\n%s", n, q.id, q.interval, q.from, q.to, diff)
		}
	}

	// Quotes themselves, taken in a random order, must match a fresh feed.
	var times []time.Time
	for h := -3000; h <= 4000; h += 1750 {
		times = append(times, Anchor.Add(time.Duration(h)*time.Hour+17*time.Second))
	}
	g := newFeed(t, 5, 0)
	for _, i := range rng.Perm(len(times)) {
		want := quotes(t, newFeed(t, 5, 0), times[i])
		if diff := cmp.Diff(want, quotes(t, g, times[i]), opt); diff != "" {
			t.Errorf("Quotes(%v) after walking around differs from a fresh feed (-fresh +got):\n%s", times[i], diff)
		}
	}
}

func BenchmarkQuotes1000(b *testing.B) {
	f := newFeed(b, 1, 0)
	ctx := context.Background()
	now := time.Date(2026, 3, 10, 12, 34, 56, 0, time.UTC)
	f.Quotes(ctx, now) // place the walks near now, as a running server has
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Minute)
		if _, err := f.Quotes(ctx, now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHistoryBackfill(b *testing.B) {
	f := newFeed(b, 1, 0)
	ctx := context.Background()
	now := time.Date(2026, 3, 10, 12, 34, 56, 0, time.UTC)
	btc := f.byID["bitcoin"].info
	b.ReportAllocs()
	for b.Loop() {
		h, err := f.History(ctx, btc, coinpulse.Hourly, now.Add(-90*24*time.Hour), now)
		if err != nil || len(h) != 90*24 {
			b.Fatalf("hourly: %d points, %v", len(h), err)
		}
		d, err := f.History(ctx, btc, coinpulse.Daily, btc.ListedAt, now)
		if err != nil || len(d) == 0 {
			b.Fatalf("daily: %d points, %v", len(d), err)
		}
	}
}
