package market

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"coinpulse"
)

var asOf = time.Date(2026, 3, 10, 12, 34, 0, 0, time.UTC)

func f64(v float64) *float64 { return &v }

func rank(v int) *int { return &v }

// known is v, nil when it is 0: how the engine serves a market cap.
func known(v float64) *float64 {
	if v == 0 {
		return nil
	}
	return &v
}

// coin is a hand-made detail; change is the 24 h price change %, nil when
// unknown.
type coin struct {
	id, symbol, name    string
	mcap, volume, price float64
	change              *float64
}

func details(cs ...coin) []coinpulse.CoinDetail {
	out := make([]coinpulse.CoinDetail, len(cs))
	for i, c := range cs {
		out[i] = coinpulse.CoinDetail{MarketItem: coinpulse.MarketItem{
			ID: c.id, Symbol: c.symbol, Name: c.name,
			CurrentPrice: c.price, MarketCap: known(c.mcap), TotalVolume: f64(c.volume), Volume24h: f64(c.volume),
			PriceChangePercentage24h: c.change, LastUpdated: asOf,
		}}
		if c.change != nil && c.mcap != 0 {
			out[i].MarketCapChange24h = f64(c.mcap - c.mcap/(1+*c.change/100))
		}
	}
	return out
}

func build(t testing.TB, cs ...coin) *Snapshot {
	t.Helper()
	return Build("snap-1", asOf, "test", false, details(cs...), nil, 50_000)
}

func ids(cs []*coinpulse.CoinDetail) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// rankedIDs is "id#rank" for each coin, so a diff shows both; "id#-"
// for a coin without a market cap rank, with its place.
func rankedIDs(cs []*coinpulse.CoinDetail) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		if c.MarketCapRank == nil {
			out[i] = c.ID + "#-" + strconv.Itoa(c.Place)
			continue
		}
		if *c.MarketCapRank != c.Place {
			out[i] = c.ID + "#rank-not-place"
			continue
		}
		out[i] = c.ID + "#" + strconv.Itoa(*c.MarketCapRank)
	}
	return out
}

func TestBuildRanking(t *testing.T) {
	// Given out of order; ties in market cap, volume and price.
	s := build(t,
		coin{id: "delta", symbol: "d", name: "Delta", mcap: 50, volume: 7, price: 3},
		coin{id: "charlie", symbol: "c", name: "Charlie", mcap: 300, volume: 9, price: 1},
		coin{id: "alpha", symbol: "a", name: "Alpha", mcap: 100, volume: 9, price: 5},
		coin{id: "bravo", symbol: "b", name: "Bravo", mcap: 300, volume: 1, price: 5},
		coin{id: "echo", symbol: "e", name: "Echo", mcap: 50, volume: 9, price: 0.5},
	)
	if got, want := s.Len(), 5; got != want {
		t.Fatalf("Len() = %d, want %d", got, want)
	}
	tests := []struct {
		order Order
		want  []string
	}{
		// market cap desc, ties by id
		{MarketCapDesc, []string{"bravo#1", "charlie#2", "alpha#3", "delta#4", "echo#5"}},
		// ties (bravo/charlie, delta/echo) by rank
		{MarketCapAsc, []string{"delta#4", "echo#5", "alpha#3", "bravo#1", "charlie#2"}},
		// volume 9: charlie#2, alpha#3, echo#5; then 7, 1
		{VolumeDesc, []string{"charlie#2", "alpha#3", "echo#5", "delta#4", "bravo#1"}},
		// price 5: bravo#1, alpha#3; then 3, 1, 0.5
		{PriceDesc, []string{"bravo#1", "alpha#3", "delta#4", "charlie#2", "echo#5"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.order), func(t *testing.T) {
			items, pages := s.Page(tt.order, 1, 100)
			if pages != 1 {
				t.Errorf("totalPages = %d, want 1", pages)
			}
			if diff := cmp.Diff(tt.want, rankedIDs(items)); diff != "" {
				t.Errorf("order %s (-want +got):\n%s", tt.order, diff)
			}
		})
	}
	t.Run("every order is known", func(t *testing.T) {
		for _, o := range Orders {
			if items, _ := s.Page(o, 1, 10); len(items) != 5 {
				t.Errorf("order %s: %d items, want 5", o, len(items))
			}
		}
		if got, want := Orders[0], MarketCapDesc; got != want {
			t.Errorf("default order = %s, want %s", got, want)
		}
	})
	t.Run("lookups share the ranks", func(t *testing.T) {
		for id, want := range map[string]int{"bravo": 1, "charlie": 2, "alpha": 3, "delta": 4, "echo": 5} {
			d, ok := s.Lookup(id)
			if !ok || d.MarketCapRank == nil || *d.MarketCapRank != want {
				t.Errorf("Lookup(%q) rank = %v, %v; want %d, true", id, d.MarketCapRank, ok, want)
			}
		}
	})
}

func manyCoins(n int, seed uint64) []coin {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]coin, n)
	for i := range out {
		var change *float64
		if rng.IntN(10) > 0 {
			change = f64(rng.NormFloat64() * 10)
		}
		out[i] = coin{
			id:     fmt.Sprintf("coin-%05d", i),
			symbol: fmt.Sprintf("c%d", i%(n/2+1)), // pairs share a symbol
			name:   fmt.Sprintf("Coin %d", i),
			mcap:   math.Round(math.Exp(rng.Float64()*20)) + 1,
			volume: math.Round(math.Exp(rng.Float64() * 18)),
			price:  math.Exp(rng.NormFloat64() * 4),
			change: change,
		}
	}
	return out
}

func TestPage(t *testing.T) {
	s := build(t, manyCoins(7, 1)...)
	all, _ := s.Page(MarketCapDesc, 1, 250)
	if len(all) != 7 {
		t.Fatalf("Page(1, 250) = %d items, want 7", len(all))
	}
	tests := []struct {
		name           string
		page, perPage  int
		wantFrom, want int // all[wantFrom : wantFrom+want]
		wantPages      int
	}{
		{"first page", 1, 3, 0, 3, 3},
		{"middle page", 2, 3, 3, 3, 3},
		{"last partial page", 3, 3, 6, 1, 3},
		{"past the end", 4, 3, 0, 0, 3},
		{"far past the end", 1000, 3, 0, 0, 3},
		{"page zero", 0, 3, 0, 0, 3},
		{"one per page", 7, 1, 6, 1, 7},
		{"exact fit", 1, 7, 0, 7, 1},
		{"exact fit, next page", 2, 7, 0, 0, 1},
		{"larger than all", 1, 250, 0, 7, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, pages := s.Page(MarketCapDesc, tt.page, tt.perPage)
			if pages != tt.wantPages {
				t.Errorf("totalPages = %d, want %d", pages, tt.wantPages)
			}
			want := ids(all[tt.wantFrom : tt.wantFrom+tt.want])
			if diff := cmp.Diff(want, ids(items)); diff != "" {
				t.Errorf("Page(%d, %d) (-want +got):\n%s", tt.page, tt.perPage, diff)
			}
		})
	}
	t.Run("pages cover every order without repeats", func(t *testing.T) {
		s := build(t, manyCoins(1001, 2)...)
		for _, o := range Orders {
			seen := map[string]bool{}
			_, pages := s.Page(o, 1, 100)
			if pages != 11 {
				t.Errorf("%s: totalPages = %d, want 11", o, pages)
			}
			for p := 1; p <= pages; p++ {
				items, _ := s.Page(o, p, 100)
				for _, c := range items {
					if seen[c.ID] {
						t.Errorf("%s: %s repeated on page %d", o, c.ID, p)
					}
					seen[c.ID] = true
				}
			}
			if len(seen) != 1001 {
				t.Errorf("%s: pages hold %d coins, want 1001", o, len(seen))
			}
		}
	})
	t.Run("empty snapshot", func(t *testing.T) {
		s := build(t)
		items, pages := s.Page(MarketCapDesc, 1, 100)
		if len(items) != 0 || pages != 0 {
			t.Errorf("Page of no coins = %d items, %d pages; want 0, 0", len(items), pages)
		}
	})
}

func TestSearch(t *testing.T) {
	s := build(t,
		coin{id: "bitcoin", symbol: "btc", name: "Bitcoin", mcap: 1000},
		coin{id: "btc-clone", symbol: "btc", name: "Clone", mcap: 10},
		coin{id: "named-btc", symbol: "xbt", name: "BTC", mcap: 20},
		coin{id: "bitcoin-cash", symbol: "bch", name: "Bitcoin Cash", mcap: 500},
		coin{id: "btc-standard", symbol: "btcst", name: "BTC Standard Hashrate", mcap: 30},
		coin{id: "btc-prefix-name", symbol: "zzz", name: "Btcfi", mcap: 40},
		coin{id: "wrapped-bitcoin", symbol: "wbtc", name: "Wrapped Bitcoin", mcap: 600},
		coin{id: "renbtc", symbol: "renbtc", name: "renBTC", mcap: 5},
		coin{id: "ethereum", symbol: "eth", name: "Ethereum", mcap: 800},
		coin{id: "nem", symbol: "xem", name: "NEM", mcap: 3},
		coin{id: "sim-nemula", symbol: "nem", name: "Nemula", mcap: 2},
	)
	// ranks: bitcoin 1, ethereum 2, wrapped-bitcoin 3, bitcoin-cash 4,
	// btc-prefix-name 5, btc-standard 6, named-btc 7, btc-clone 8, renbtc 9,
	// nem 10, sim-nemula 11
	tests := []struct {
		name  string
		q     string
		limit int
		want  []string
	}{
		{"exact symbol, exact name, prefix, substring", "btc", 20,
			[]string{"bitcoin", "btc-clone", "named-btc", "btc-prefix-name", "btc-standard", "wrapped-bitcoin", "renbtc"}},
		{"case-insensitive", "BtC", 20,
			[]string{"bitcoin", "btc-clone", "named-btc", "btc-prefix-name", "btc-standard", "wrapped-bitcoin", "renbtc"}},
		{"limit cuts the lowest bucket", "btc", 5,
			[]string{"bitcoin", "btc-clone", "named-btc", "btc-prefix-name", "btc-standard"}},
		{"limit inside the first bucket", "btc", 1, []string{"bitcoin"}},
		{"exact name before prefix", "Bitcoin", 20, []string{"bitcoin", "bitcoin-cash", "wrapped-bitcoin"}},
		{"prefix by rank", "bitc", 20, []string{"bitcoin", "bitcoin-cash", "wrapped-bitcoin"}},
		{"substring of a name", "coin c", 20, []string{"bitcoin-cash"}},
		{"substring of a symbol", "th", 20, []string{"ethereum"}},
		{"exact id with the exact names", "bitcoin-cash", 20, []string{"bitcoin-cash"}},
		{"exact symbol before exact id and name (SPEC; an audit)", "NEM", 20, []string{"sim-nemula", "nem"}},
		{"id prefix", "wrapped-", 20, []string{"wrapped-bitcoin"}},
		{"id substring", "-clone", 20, []string{"btc-clone"}},
		{"no match", "dogecoin", 20, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, total := s.Search(tt.q, tt.limit)
			if diff := cmp.Diff(tt.want, ids(got)); diff != "" {
				t.Errorf("Search(%q, %d) (-want +got):\n%s", tt.q, tt.limit, diff)
			}
			// Every match counts, beyond the limit too.
			if all, _ := s.Search(tt.q, 100); total != len(all) {
				t.Errorf("Search(%q, %d) total %d, want %d", tt.q, tt.limit, total, len(all))
			}
			if got == nil {
				t.Errorf("Search(%q) = nil, want a non-nil slice", tt.q)
			}
		})
	}
	t.Run("limit respected on a large snapshot", func(t *testing.T) {
		s := build(t, manyCoins(2000, 3)...)
		for _, limit := range []int{1, 7, 20, 100} {
			got, total := s.Search("coin", limit)
			if total != 2000 {
				t.Errorf("Search(coin, %d) total %d, want 2000", limit, total)
			}
			if len(got) != limit {
				t.Errorf("Search(coin, %d) = %d results, want %d", limit, len(got), limit)
			}
			for i := 1; i < len(got); i++ {
				if got[i].Place <= got[i-1].Place {
					t.Errorf("Search(coin, %d): result %d rank %d after rank %d, want by rank", limit, i, got[i].Place, got[i-1].Place)
				}
			}
		}
	})
}

func TestMovers(t *testing.T) {
	const big = 1e6
	s := build(t,
		coin{id: "up10", symbol: "a", name: "A", mcap: 900, volume: big, change: f64(10)},
		coin{id: "up5", symbol: "b", name: "B", mcap: 800, volume: big, change: f64(5)},
		coin{id: "up20-thin", symbol: "c", name: "C", mcap: 700, volume: 49_999, change: f64(20)},
		coin{id: "up30-unknown", symbol: "d", name: "D", mcap: 600, volume: big, change: nil},
		coin{id: "flat", symbol: "e", name: "E", mcap: 500, volume: big, change: f64(0)},
		coin{id: "down3", symbol: "f", name: "F", mcap: 400, volume: big, change: f64(-3)},
		coin{id: "down8", symbol: "g", name: "G", mcap: 300, volume: 50_000, change: f64(-8)},
		coin{id: "down50-thin", symbol: "h", name: "H", mcap: 200, volume: 10, change: f64(-50)},
		coin{id: "up1", symbol: "i", name: "I", mcap: 100, volume: big, change: f64(1)},
	)
	tests := []struct {
		name  string
		get   func(int) []*coinpulse.CoinDetail
		limit int
		want  []string
	}{
		{"gainers", s.Gainers, 10, []string{"up10", "up5", "up1"}},
		{"gainers limit", s.Gainers, 2, []string{"up10", "up5"}},
		{"losers", s.Losers, 10, []string{"down8", "down3"}},
		{"losers limit", s.Losers, 1, []string{"down8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.get(tt.limit)
			if diff := cmp.Diff(tt.want, ids(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	t.Run("floor from Build", func(t *testing.T) {
		s := Build("s", asOf, "test", false, details(
			coin{id: "up", symbol: "a", name: "A", mcap: 2, volume: 10, change: f64(3)},
			coin{id: "down", symbol: "b", name: "B", mcap: 1, volume: 10, change: f64(-3)},
		), nil, 0)
		if got := ids(s.Gainers(10)); !cmp.Equal(got, []string{"up"}) {
			t.Errorf("Gainers with no floor = %v, want [up]", got)
		}
		if got := ids(s.Losers(10)); !cmp.Equal(got, []string{"down"}) {
			t.Errorf("Losers with no floor = %v, want [down]", got)
		}
	})
	t.Run("large snapshot", func(t *testing.T) {
		s := build(t, manyCoins(5000, 4)...)
		g, l := s.Gainers(100), s.Losers(100)
		if len(g) != 100 || len(l) != 100 {
			t.Fatalf("got %d gainers, %d losers; want 100 each", len(g), len(l))
		}
		for i, c := range g {
			if *c.PriceChangePercentage24h <= 0 || *c.TotalVolume < s.MinMoverVolume {
				t.Errorf("gainer %d: %s change %v volume %v", i, c.ID, *c.PriceChangePercentage24h, *c.TotalVolume)
			}
			if i > 0 && *c.PriceChangePercentage24h > *g[i-1].PriceChangePercentage24h {
				t.Errorf("gainer %d: change %v after %v, want descending", i, *c.PriceChangePercentage24h, *g[i-1].PriceChangePercentage24h)
			}
		}
		for i, c := range l {
			if *c.PriceChangePercentage24h >= 0 || *c.TotalVolume < s.MinMoverVolume {
				t.Errorf("loser %d: %s change %v volume %v", i, c.ID, *c.PriceChangePercentage24h, *c.TotalVolume)
			}
			if i > 0 && *c.PriceChangePercentage24h < *l[i-1].PriceChangePercentage24h {
				t.Errorf("loser %d: change %v after %v, want ascending", i, *c.PriceChangePercentage24h, *l[i-1].PriceChangePercentage24h)
			}
		}
	})
	t.Run("none", func(t *testing.T) {
		s := build(t, coin{id: "flat", symbol: "a", name: "A", mcap: 1, volume: 1e9, change: f64(0)})
		if g, l := s.Gainers(10), s.Losers(10); g == nil || l == nil || len(g)+len(l) != 0 {
			t.Errorf("Gainers, Losers = %v, %v; want two empty non-nil slices", g, l)
		}
	})
}

func TestLookup(t *testing.T) {
	s := build(t,
		coin{id: "bitcoin", symbol: "btc", name: "Bitcoin", mcap: 1000},
		coin{id: "the-open-network", symbol: "ton", name: "Toncoin", mcap: 300},
		coin{id: "tokamak-network", symbol: "ton", name: "Tokamak Network", mcap: 20},
		coin{id: "ton-clone", symbol: "ton", name: "Ton Clone", mcap: 5},
		coin{id: "ton", symbol: "tonic", name: "Tonic", mcap: 1},
	)
	// ranks: bitcoin 1, the-open-network 2, tokamak-network 3, ton-clone 4, ton 5
	tests := []struct {
		query    string
		wantOK   bool
		wantID   string
		wantBy   string
		wantAlts []coinpulse.CoinRef
	}{
		{"bitcoin", true, "bitcoin", "id", []coinpulse.CoinRef{}},
		{"Bitcoin", true, "bitcoin", "id", []coinpulse.CoinRef{}},
		{"BTC", true, "bitcoin", "symbol", []coinpulse.CoinRef{}},
		{"btc", true, "bitcoin", "symbol", []coinpulse.CoinRef{}},
		{"TON-Clone", true, "ton-clone", "id", []coinpulse.CoinRef{
			{ID: "the-open-network", Name: "Toncoin", MarketCapRank: rank(2)},
			{ID: "tokamak-network", Name: "Tokamak Network", MarketCapRank: rank(3)},
		}},
		{"tokamak-network", true, "tokamak-network", "id", []coinpulse.CoinRef{
			{ID: "the-open-network", Name: "Toncoin", MarketCapRank: rank(2)},
			{ID: "ton-clone", Name: "Ton Clone", MarketCapRank: rank(4)},
		}},
		// an exact id wins over a symbol shared by larger coins
		{"ton", true, "ton", "id", []coinpulse.CoinRef{}},
		{"TONIC", true, "ton", "symbol", []coinpulse.CoinRef{}},
		// a symbol in another case wins over an id in another case
		{"TON", true, "the-open-network", "symbol", []coinpulse.CoinRef{
			{ID: "tokamak-network", Name: "Tokamak Network", MarketCapRank: rank(3)},
			{ID: "ton-clone", Name: "Ton Clone", MarketCapRank: rank(4)},
		}},
		{"unknown", false, "", "", nil},
		{"", false, "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			d, ok := s.Lookup(tt.query)
			if ok != tt.wantOK {
				t.Fatalf("Lookup(%q) ok = %v, want %v", tt.query, ok, tt.wantOK)
			}
			if !ok {
				return
			}
			if d.ID != tt.wantID || d.ResolvedBy != tt.wantBy {
				t.Errorf("Lookup(%q) = %s by %q, want %s by %q", tt.query, d.ID, d.ResolvedBy, tt.wantID, tt.wantBy)
			}
			if d.Alternatives == nil {
				t.Errorf("Lookup(%q).Alternatives = nil, want a non-nil slice", tt.query)
			}
			if diff := cmp.Diff(tt.wantAlts, d.Alternatives); diff != "" {
				t.Errorf("Lookup(%q).Alternatives (-want +got):\n%s", tt.query, diff)
			}
		})
	}
	t.Run("symbol shared: highest market cap wins", func(t *testing.T) {
		d, ok := s.Lookup("TON ")
		if ok {
			t.Errorf("Lookup(%q) = %s, want no match (no trimming here)", "TON ", d.ID)
		}
		s := build(t,
			coin{id: "small", symbol: "dup", name: "Small", mcap: 1},
			coin{id: "large", symbol: "dup", name: "Large", mcap: 100},
		)
		d, ok = s.Lookup("Dup")
		want := []coinpulse.CoinRef{{ID: "small", Name: "Small", MarketCapRank: rank(2)}}
		if !ok || d.ID != "large" || d.ResolvedBy != "symbol" {
			t.Fatalf("Lookup(Dup) = %s by %q, %v; want large by symbol", d.ID, d.ResolvedBy, ok)
		}
		if diff := cmp.Diff(want, d.Alternatives); diff != "" {
			t.Errorf("alternatives (-want +got):\n%s", diff)
		}
	})
	t.Run("result is a copy", func(t *testing.T) {
		d, _ := s.Lookup("ton-clone")
		d.Alternatives[0].Name = "changed"
		d.Name = "changed"
		again, _ := s.Lookup("ton-clone")
		if again.Name != "Ton Clone" || again.Alternatives[0].Name != "Toncoin" {
			t.Errorf("changing a Lookup result changed the snapshot: %q, %q", again.Name, again.Alternatives[0].Name)
		}
	})
}

func TestGlobal(t *testing.T) {
	markets := 150
	tests := []struct {
		name          string
		coins         []coin
		markets       *int
		wantCap, wVol float64
		wantBTC       *float64
		wantETH       *float64
		wantChange    *float64
	}{
		{
			name: "all known",
			coins: []coin{
				{id: "bitcoin", symbol: "btc", name: "Bitcoin", mcap: 600, volume: 60, change: f64(20)},    // was 500
				{id: "ethereum", symbol: "eth", name: "Ethereum", mcap: 300, volume: 30, change: f64(-25)}, // was 400
				{id: "other", symbol: "o", name: "Other", mcap: 100, volume: 10, change: f64(0)},           // was 100
			},
			markets: &markets,
			wantCap: 1000, wVol: 100,
			wantBTC: f64(60), wantETH: f64(30),
			wantChange: f64(0), // 1000 now, 1000 before
		},
		{
			name: "growth",
			coins: []coin{
				{id: "bitcoin", symbol: "btc", name: "Bitcoin", mcap: 550, volume: 1, change: f64(10)}, // was 500
				{id: "other", symbol: "o", name: "Other", mcap: 150, volume: 2, change: f64(50)},       // was 100
			},
			wantCap: 700, wVol: 3,
			wantBTC:    f64(550.0 / 700 * 100),
			wantChange: f64(100.0 / 600 * 100), // 700 now, 600 before
		},
		{
			name: "one change unknown", // a coin listed less than a day ago: left out of both sides
			coins: []coin{
				{id: "bitcoin", symbol: "btc", name: "Bitcoin", mcap: 800, volume: 1, change: f64(60)}, // was 500
				{id: "new", symbol: "n", name: "New", mcap: 200, volume: 1, change: nil},
			},
			wantCap: 1000, wVol: 2,
			wantBTC:    f64(80),
			wantChange: f64(60), // 800 now, 500 before
		},
		{
			name: "no change known",
			coins: []coin{
				{id: "new", symbol: "n", name: "New", mcap: 200, volume: 1, change: nil},
			},
			wantCap: 200, wVol: 1,
			wantChange: nil,
		},
		{
			name: "no bitcoin",
			coins: []coin{
				{id: "other", symbol: "o", name: "Other", mcap: 110, volume: 5, change: f64(10)},
			},
			wantCap: 110, wVol: 5,
			wantChange: f64(10),
		},
		{name: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Build("s", asOf, "test", false, details(tt.coins...), tt.markets, 0)
			g := s.Global
			want := coinpulse.GlobalStats{
				TotalMarketCap: tt.wantCap, TotalVolume24h: tt.wVol,
				BitcoinDominance: tt.wantBTC, EthereumDominance: tt.wantETH,
				ActiveCryptocurrencies: len(tt.coins), Markets: tt.markets,
				MarketCapChangePercentage24h: tt.wantChange,
			}
			approx := cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) })
			if diff := cmp.Diff(want, g, approx); diff != "" {
				t.Errorf("Global (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("market cap change", func(t *testing.T) {
		// before: 100 + 100 = 200; now 150 + 90 = 240: +20 %
		d := details(
			coin{id: "bitcoin", symbol: "btc", name: "Bitcoin", mcap: 150},
			coin{id: "x", symbol: "x", name: "X", mcap: 90},
		)
		d[0].MarketCapChange24h, d[1].MarketCapChange24h = f64(50), f64(-10)
		g := Build("s", asOf, "test", false, d, nil, 0).Global
		if g.MarketCapChangePercentage24h == nil || math.Abs(*g.MarketCapChangePercentage24h-20) > 1e-9 {
			t.Errorf("MarketCapChangePercentage24h = %v, want 20", g.MarketCapChangePercentage24h)
		}
	})
}

// A coin whose market cap is not known (nil) has no rank: it comes after
// every ranked coin in both market cap orders, by id, keeps its place as
// a tie-breaker in the others, and counts for nothing in the global
// figures.
func TestBuildUnknownMarketCap(t *testing.T) {
	s := build(t,
		coin{id: "zulu", symbol: "dup", name: "Zulu", volume: 5, price: 2, change: f64(1)},
		coin{id: "bitcoin", symbol: "btc", name: "Bitcoin", volume: 1, price: 9, change: f64(3)},
		coin{id: "alpha", symbol: "a", name: "Alpha", mcap: 100, volume: 5, price: 1, change: f64(10)},
		coin{id: "bravo", symbol: "dup", name: "Bravo", mcap: 300, volume: 1, price: 1, change: f64(20)},
	)
	for _, tt := range []struct {
		order Order
		want  []string
	}{
		{MarketCapDesc, []string{"bravo#1", "alpha#2", "bitcoin#-3", "zulu#-4"}},
		{MarketCapAsc, []string{"alpha#2", "bravo#1", "bitcoin#-3", "zulu#-4"}},
		{VolumeDesc, []string{"alpha#2", "zulu#-4", "bravo#1", "bitcoin#-3"}},
		{PriceDesc, []string{"bitcoin#-3", "zulu#-4", "bravo#1", "alpha#2"}},
	} {
		items, _ := s.Page(tt.order, 1, 100)
		if diff := cmp.Diff(tt.want, rankedIDs(items)); diff != "" {
			t.Errorf("order %s (-want +got):\n%s", tt.order, diff)
		}
	}
	g := s.Global
	if g.TotalMarketCap != 400 || g.BitcoinDominance != nil || g.ActiveCryptocurrencies != 4 {
		t.Errorf("Global = %+v, want a total market cap of 400, no bitcoin dominance, 4 coins", g)
	}
	// 400 now, 100/1.1 + 300/1.2 before: the unknown ones count on neither side.
	if want := (400 - (100/1.1 + 300/1.2)) / (100/1.1 + 300/1.2) * 100; g.MarketCapChangePercentage24h == nil || math.Abs(*g.MarketCapChangePercentage24h-want) > 1e-9 {
		t.Errorf("MarketCapChangePercentage24h = %v, want %v", g.MarketCapChangePercentage24h, want)
	}
	d, ok := s.Lookup("dup")
	if !ok || d.ID != "bravo" || len(d.Alternatives) != 1 || d.Alternatives[0].MarketCapRank != nil {
		t.Fatalf("Lookup(dup) = %s, %+v; want bravo with zulu, unranked, as its alternative", d.ID, d.Alternatives)
	}
	b, err := json.Marshal(d.Alternatives[0])
	if err != nil || !strings.Contains(string(b), `"market_cap_rank":null`) {
		t.Errorf("alternative = %s, %v; want a null market_cap_rank", b, err)
	}
	z := s.Coin("zulu")
	b, err = json.Marshal(z.MarketItem)
	if err != nil || !strings.Contains(string(b), `"market_cap":null,"market_cap_rank":null`) {
		t.Errorf("zulu = %s, %v; want a null market cap and rank", b, err)
	}
}

func TestMemo(t *testing.T) {
	s := build(t, manyCoins(10, 5)...)
	t.Run("builds once", func(t *testing.T) {
		calls := 0
		b := func() ([]byte, error) { calls++; return []byte("v" + strconv.Itoa(calls)), nil }
		for i := range 3 {
			got, err := Memo(s, "once", b)
			if err != nil || string(got) != "v1" {
				t.Errorf("Memo call %d = %q, %v; want v1, nil", i, got, err)
			}
		}
		if calls != 1 {
			t.Errorf("build ran %d times, want 1", calls)
		}
	})
	t.Run("errors are not stored", func(t *testing.T) {
		boom := errors.New("boom")
		calls := 0
		_, err := Memo(s, "flaky", func() ([]byte, error) { calls++; return nil, boom })
		if !errors.Is(err, boom) {
			t.Fatalf("Memo error = %v, want boom", err)
		}
		got, err := Memo(s, "flaky", func() ([]byte, error) { calls++; return []byte("ok"), nil })
		if err != nil || string(got) != "ok" || calls != 2 {
			t.Errorf("Memo after a failure = %q, %v (%d builds); want ok, nil, 2 builds", got, err, calls)
		}
		got, _ = Memo(s, "flaky", func() ([]byte, error) { calls++; return []byte("again"), nil })
		if string(got) != "ok" || calls != 2 {
			t.Errorf("Memo after success = %q (%d builds); want ok (2 builds)", got, calls)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		s := build(t, manyCoins(10, 6)...)
		builds := map[string]int{}
		b := func(k string) func() ([]byte, error) {
			return func() ([]byte, error) { builds[k]++; return []byte(k), nil }
		}
		for i := range maxMemo {
			k := "k" + strconv.Itoa(i)
			if got, _ := Memo(s, k, b(k)); string(got) != k {
				t.Fatalf("Memo(%s) = %q", k, got)
			}
		}
		for range 3 {
			if got, _ := Memo(s, "k0", b("k0")); string(got) != "k0" {
				t.Fatalf("Memo(k0) = %q", got)
			}
			if got, _ := Memo(s, "over", b("over")); string(got) != "over" {
				t.Fatalf("Memo(over) = %q", got)
			}
		}
		if builds["k0"] != 1 {
			t.Errorf("k0 (stored) built %d times, want 1", builds["k0"])
		}
		if builds["over"] != 3 {
			t.Errorf("a key past the bound built %d times, want 3 (not stored)", builds["over"])
		}
		n := 0
		s.memo.Range(func(any, any) bool { n++; return true })
		if n != maxMemo {
			t.Errorf("snapshot keeps %d entries, want %d", n, maxMemo)
		}
	})
	t.Run("bounded in bytes", func(t *testing.T) {
		s := build(t, manyCoins(10, 6)...)
		big := sized(make([]byte, maxMemoBytes/4-len("history|0"))) // with its key, a quarter
		for i := range 6 {
			Memo(s, "history|"+strconv.Itoa(i), func() (sized, error) { return big, nil })
		}
		n := 0
		s.memo.Range(func(any, any) bool { n++; return true })
		if n != 4 {
			t.Errorf("snapshot keeps %d responses of a quarter of the byte bound, want 4", n)
		}
	})
	t.Run("the pages of /markets apart", func(t *testing.T) {
		s := build(t, manyCoins(10, 6)...)
		for i := range maxMemo + 10 { // a client asking for every coin
			Memo(s, "coin|c"+strconv.Itoa(i), func() (sized, error) { return sized("x"), nil })
		}
		builds := 0
		for range 3 {
			Memo(s, "markets|market_cap_desc|1|100", func() (sized, error) { builds++; return sized("page"), nil })
		}
		if builds != 1 {
			t.Errorf("a page of /markets built %d times after the other responses filled their bound, want 1", builds)
		}
	})
	t.Run("the selections of /markets?ids= apart from its pages", func(t *testing.T) {
		s := build(t, manyCoins(10, 6)...)
		for i := range maxMemo + 10 { // every subscriber's watch list
			Memo(s, "selection|market_cap_desc|1|100|c"+strconv.Itoa(i)+"|", func() (sized, error) { return sized("x"), nil })
		}
		builds := 0
		for range 3 {
			Memo(s, "markets|market_cap_desc|1|100", func() (sized, error) { builds++; return sized("page"), nil })
		}
		if builds != 1 {
			t.Errorf("a page of /markets built %d times after the selections filled their bound, want 1", builds)
		}
		// Keys count in the bytes: a selection's can be kilobytes.
		if b := s.budget[3].bytes.Load(); b < int64(maxMemo*len("selection|market_cap_desc|1|100|c0|")) {
			t.Errorf("the selections' budget counts %d bytes, less than their keys", b)
		}
	})
	t.Run("callers of one key at once count it once", func(t *testing.T) {
		s := build(t, manyCoins(10, 6)...)
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				Memo(s, "markets|page", func() (sized, error) { return sized(make([]byte, maxMemoBytes/8)), nil })
			}()
		}
		wg.Wait()
		if e, b := s.budget[0].entries.Load(), s.budget[0].bytes.Load(); e != 1 || b != maxMemoBytes/8+int64(len("markets|page")) {
			t.Errorf("64 callers of one key: the budget counts %d entries and %d bytes, want 1 and %d with its key (review: duplicates used it up)", e, b, maxMemoBytes/8+len("markets|page"))
		}
		builds := 0
		Memo(s, "markets|other", func() (sized, error) { builds++; return sized("x"), nil })
		Memo(s, "markets|other", func() (sized, error) { builds++; return sized("x"), nil })
		if builds != 1 {
			t.Errorf("another page built %d times, want 1 (kept)", builds)
		}
	})
	t.Run("histories apart from the small responses", func(t *testing.T) {
		s := build(t, manyCoins(10, 6)...)
		for i := range 40 {
			Memo(s, "history|c"+strconv.Itoa(i)+"|max|daily", func() (sized, error) { return sized(make([]byte, maxMemoBytes/16)), nil })
		}
		builds := 0
		for range 2 {
			Memo(s, "global", func() (sized, error) { builds++; return sized("g"), nil })
		}
		if builds != 1 {
			t.Errorf("global built %d times after the histories filled theirs, want 1", builds)
		}
	})
	t.Run("retired", func(t *testing.T) {
		s := build(t, manyCoins(10, 6)...)
		Memo(s, "markets|a", func() (sized, error) { return sized("a"), nil })
		s.Retire()
		builds := 0
		for range 3 {
			Memo(s, "markets|a", func() (sized, error) { builds++; return sized("a"), nil })
		}
		n := 0
		s.memo.Range(func(any, any) bool { n++; return true })
		if builds != 3 || n != 0 {
			t.Errorf("a retired snapshot: %d builds of 3 calls, %d entries kept; want 3 and none", builds, n)
		}
	})
	t.Run("concurrent callers agree", func(t *testing.T) {
		s := build(t, manyCoins(10, 7)...)
		var wg sync.WaitGroup
		results := make([]string, 16)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, _ := Memo(s, "k", func() ([]byte, error) { return []byte("v" + strconv.Itoa(i)), nil })
				results[i] = string(b)
			}()
		}
		wg.Wait()
		stored, _ := Memo(s, "k", func() ([]byte, error) { return []byte("late"), nil })
		for i, r := range results {
			if r != string(stored) {
				t.Errorf("caller %d got %q, stored %q", i, r, stored)
			}
		}
	})
}

func BenchmarkBuild10000(b *testing.B) {
	d := details(manyCoins(10_000, 8)...)
	b.ReportAllocs()
	for b.Loop() {
		Build("s", asOf, "test", false, d, nil, 50_000)
	}
}

func BenchmarkPage(b *testing.B) {
	s := Build("s", asOf, "test", false, details(manyCoins(10_000, 9)...), nil, 50_000)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		items, _ := s.Page(Orders[i%len(Orders)], 1+i%100, 100)
		if len(items) != 100 {
			b.Fatalf("%d items", len(items))
		}
	}
}

func BenchmarkSelect(b *testing.B) {
	s := Build("s", asOf, "test", false, details(manyCoins(10_000, 11)...), nil, 50_000)
	ids := make([]string, 250)
	for i := range ids {
		ids[i] = s.coins[(i*37)%len(s.coins)].ID
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if got, _ := s.Select(Orders[i%len(Orders)], ids); len(got) != 250 {
			b.Fatalf("%d coins", len(got))
		}
	}
}

func BenchmarkSearch10000(b *testing.B) {
	s := Build("s", asOf, "test", false, details(manyCoins(10_000, 10)...), nil, 50_000)
	queries := []string{"coin 12", "c42", "Coin", "zz", "C7"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		s.Search(queries[i%len(queries)], 20)
	}
}

// Movers with equal changes order by market cap rank, in both lists.
func TestMoverTiesByRank(t *testing.T) {
	s := build(t,
		coin{id: "c", symbol: "c", name: "C", mcap: 3e6, volume: 1e6, price: 1, change: f64(-5)},
		coin{id: "a", symbol: "a", name: "A", mcap: 9e6, volume: 1e6, price: 1, change: f64(-5)},
		coin{id: "b", symbol: "b", name: "B", mcap: 6e6, volume: 1e6, price: 1, change: f64(-5)},
		coin{id: "e", symbol: "e", name: "E", mcap: 2e6, volume: 1e6, price: 1, change: f64(7)},
		coin{id: "d", symbol: "d", name: "D", mcap: 8e6, volume: 1e6, price: 1, change: f64(7)},
	)
	if got, want := ids(s.Losers(10)), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("losers %v, want %v (ties by rank)", got, want)
	}
	if got, want := ids(s.Gainers(10)), []string{"d", "e"}; !slices.Equal(got, want) {
		t.Errorf("gainers %v, want %v (ties by rank)", got, want)
	}
}

// sized is a memo value that tells its size.
type sized []byte

func (s sized) MemoSize() int { return len(s) }

// A volume the feed does not know is null: such a coin sorts last by
// volume, is no top mover and adds nothing to the global volume.
func TestUnknownVolume(t *testing.T) {
	d := details(
		coin{id: "known", symbol: "k", name: "Known", price: 1, mcap: 100, volume: 1e6, change: f64(10)},
		coin{id: "unknown", symbol: "u", name: "Unknown", price: 1, mcap: 200, volume: 0, change: f64(20)},
		coin{id: "small", symbol: "s", name: "Small", price: 1, mcap: 50, volume: 10, change: f64(5)},
	)
	d[1].TotalVolume, d[1].Volume24h = nil, nil
	s := Build("s1", asOf, "sim", true, d, nil, 1)
	if got := ids(s.orders[VolumeDesc]); !slices.Equal(got, []string{"known", "small", "unknown"}) {
		t.Errorf("by volume: %v", got)
	}
	if got := ids(s.Gainers(10)); !slices.Equal(got, []string{"known", "small"}) {
		t.Errorf("gainers: %v", got)
	}
	if s.Global.TotalVolume24h != 1e6+10 {
		t.Errorf("global volume %v", s.Global.TotalVolume24h)
	}
}
