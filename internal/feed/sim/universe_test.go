package sim

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const header = "id,symbol,name,price_usd,circulating_supply,total_supply,max_supply,annual_volatility,listed,listing_price_usd,turnover,pegged_to"

func TestParseUniverse(t *testing.T) {
	const good = "bitcoin,BTC,Bitcoin,92000,19955000,19955000,21000000,0.5,2013-04-28,135.3,0.035,"
	const other = "ethereum,eth,Ethereum,3100,120700000,120700000,,0.7,2015-08-07,2.83,0.07,"
	const wrapped = "wrapped-bitcoin,wbtc,Wrapped Bitcoin,92000,127000,127000,,,2019-01-31,,0.02,bitcoin"
	tests := []struct {
		name    string
		text    string
		wantErr string // substring; "" means success
	}{
		{"valid", header + "\n" + good + "\n" + other + "\n", ""},
		{"wrong header", strings.Replace(header, "price_usd", "price", 1) + "\n" + good + "\n", "header must be"},
		{"missing column", strings.TrimSuffix(header, ",pegged_to") + "\n" + strings.TrimSuffix(good, ",") + "\n", "header must be"},
		{"header only", header + "\n", "header must be"},
		{"empty", "", "header must be"},
		{"duplicate id", header + "\n" + good + "\n" + other + "\n" + good + "\n", `line 4: empty or duplicate id "bitcoin"`},
		{"empty id", header + "\n" + "," + strings.SplitN(good, ",", 2)[1] + "\n", "empty or duplicate id"},
		{"non-numeric price", header + "\n" + strings.Replace(good, "92000", "lots", 1) + "\n", `line 2: price_usd "lots" is not a positive number`},
		{"negative supply", header + "\n" + strings.Replace(good, ",19955000,19955000,", ",-1,19955000,", 1) + "\n", `circulating_supply "-1" is not a positive number`},
		{"infinite volatility", header + "\n" + strings.Replace(good, ",0.5,", ",Inf,", 1) + "\n", `annual_volatility "Inf" is not a positive number`},
		{"NaN turnover", header + "\n" + strings.Replace(good, ",0.035", ",NaN", 1) + "\n", `turnover "NaN" is not a positive number`},
		{"missing volatility", header + "\n" + strings.Replace(good, ",0.5,", ",,", 1) + "\n", `annual_volatility "" is not a positive number`},
		{"missing listing price", header + "\n" + strings.Replace(good, ",135.3,", ",,", 1) + "\n", `listing_price_usd "" is not a positive number`},
		{"bad date", header + "\n" + strings.Replace(good, "2013-04-28", "28/04/2013", 1) + "\n", "line 2: listed:"},
		{"impossible date", header + "\n" + other + "\n" + strings.Replace(good, "2013-04-28", "2013-02-30", 1) + "\n", "line 3: listed:"},
		{"ragged row", header + "\n" + good + ",extra\n", "universe.csv"},
		{"pegged to an unknown coin", header + "\n" + good + "\n" + strings.Replace(wrapped, ",bitcoin", ",bitcoin-2", 1) + "\n", `line 3: wrapped-bitcoin is pegged to "bitcoin-2", which is not in the universe`},
		{"pegged to itself", header + "\n" + good + "\n" + strings.Replace(wrapped, ",bitcoin", ",wrapped-bitcoin", 1) + "\n", "line 3: wrapped-bitcoin is pegged to itself"},
		{"pegged to a pegged coin", header + "\n" + good + "\n" + wrapped + "\n" + "wwbtc,wwbtc,Wrapped WBTC,92000,1,1,,,2020-01-01,,0.01,wrapped-bitcoin\n", "line 4: wwbtc is pegged to wrapped-bitcoin, which is itself pegged (to bitcoin)"},
		{"pegged before its underlying", header + "\n" + good + "\n" + strings.Replace(wrapped, "2019-01-31", "2012-01-31", 1) + "\n", "line 3: wrapped-bitcoin (listed 2012-01-31) is pegged to bitcoin, listed later (2013-04-28)"},
		{"pegged with a volatility", header + "\n" + good + "\n" + strings.Replace(wrapped, ",,,2019", ",,0.5,2019", 1) + "\n", "line 3: wrapped-bitcoin is pegged to bitcoin: leave annual_volatility and listing_price_usd empty"},
		{"pegged with a listing price", header + "\n" + good + "\n" + strings.Replace(wrapped, ",,0.02,", ",3450,0.02,", 1) + "\n", "line 3: wrapped-bitcoin is pegged to bitcoin: leave annual_volatility and listing_price_usd empty"},
		{"pegged with a bad price", header + "\n" + good + "\n" + strings.Replace(wrapped, ",92000,", ",0,", 1) + "\n", `line 3: price_usd "0" is not a positive number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			coins, err := parseUniverse(tt.text)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("parseUniverse: %v", err)
				}
				if got, want := len(coins), 2; got != want {
					t.Fatalf("got %d coins, want %d", got, want)
				}
				btc, eth := coins[0], coins[1]
				if btc.info.ID != "bitcoin" || btc.info.Symbol != "btc" || btc.info.Name != "Bitcoin" {
					t.Errorf("coin 0 = %q %q %q, want bitcoin btc Bitcoin", btc.info.ID, btc.info.Symbol, btc.info.Name)
				}
				if btc.ref != 92000 || btc.listPrice != 135.3 || btc.turnover != 0.035 || btc.info.CirculatingSupply != 19955000 {
					t.Errorf("bitcoin figures = ref %v list %v turnover %v supply %v", btc.ref, btc.listPrice, btc.turnover, btc.info.CirculatingSupply)
				}
				if btc.info.MaxSupply == nil || *btc.info.MaxSupply != 21000000 {
					t.Errorf("bitcoin max supply = %v, want 21000000", btc.info.MaxSupply)
				}
				if eth.info.MaxSupply != nil {
					t.Errorf("ethereum max supply = %v, want nil (empty column)", *eth.info.MaxSupply)
				}
				if got, want := btc.info.ListedAt.Format("2006-01-02T15:04:05Z07:00"), "2013-04-28T00:00:00Z"; got != want {
					t.Errorf("bitcoin ListedAt = %s, want %s", got, want)
				}
				if btc.sigmaD <= 0 || btc.sigmaH <= 0 || btc.sigmaH >= btc.sigmaD || btc.key == 0 || btc.key == eth.key {
					t.Errorf("bitcoin path parameters: sigmaD %v sigmaH %v key %x (eth key %x)", btc.sigmaD, btc.sigmaH, btc.key, eth.key)
				}
				return
			}
			if err == nil {
				t.Fatalf("parseUniverse succeeded with %d coins, want an error containing %q", len(coins), tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantErr)
			}
			if coins != nil {
				t.Errorf("coins = %d on error, want nil", len(coins))
			}
		})
	}
}

func TestParseEmbeddedUniverse(t *testing.T) {
	coins, err := parseUniverse(universeCSV)
	if err != nil {
		t.Fatalf("parseUniverse(universe.csv): %v", err)
	}
	ref := readCSV(t)
	if got, want := len(coins), len(ref); got != want {
		t.Fatalf("got %d coins, want %d (rows of universe.csv)", got, want)
	}
	for i, c := range coins {
		if c.info.ID != ref[i].id || c.ref != ref[i].price || c.listPrice != ref[i].listPrice {
			t.Errorf("coin %d = %s ref %v list %v, want %s ref %v list %v", i, c.info.ID, c.ref, c.listPrice, ref[i].id, ref[i].price, ref[i].listPrice)
		}
		if c.info.TotalSupply != nil && *c.info.TotalSupply < c.info.CirculatingSupply*0.999 {
			t.Errorf("%s: total supply %v below circulating %v", c.info.ID, *c.info.TotalSupply, c.info.CirculatingSupply)
		}
		if c.info.MaxSupply != nil && c.info.TotalSupply != nil && *c.info.MaxSupply < *c.info.TotalSupply*0.999 {
			t.Errorf("%s: max supply %v below total %v", c.info.ID, *c.info.MaxSupply, *c.info.TotalSupply)
		}
	}
}

// TestSyntheticSymbolsAndNames checks that a synthetic coin never stands in
// the way of a real one (an audit: sim-zecorxa's symbol was zec, Zcash's,
// and sim-nemula's was nem, NEM's id, so GET /coins/NEM was the fake coin):
// its symbol is shared with no other coin and is no real coin's id, in any
// case, and no two coins share a name. Only real coins share symbols
// (ton, dydx), as they do in the market.
func TestSyntheticSymbolsAndNames(t *testing.T) {
	for _, n := range []int{0, 10_000, MaxCoins} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			if n > 10_000 && testing.Short() {
				t.Skip("a universe of the largest size --sim-coins allows; -short")
			}
			f := newFeed(t, 1, n)
			realIDs := map[string]string{}
			bySymbol := map[string][]string{} // lower-case symbol → ids
			byName := map[string][]string{}   // lower-case name → ids
			for _, c := range f.coins {
				if !strings.HasPrefix(c.info.ID, "sim-") {
					realIDs[strings.ToLower(c.info.ID)] = c.info.ID
				}
				sym := strings.ToLower(c.info.Symbol)
				bySymbol[sym] = append(bySymbol[sym], c.info.ID)
				name := strings.ToLower(c.info.Name)
				byName[name] = append(byName[name], c.info.ID)
			}
			bad := 0
			for _, c := range f.coins {
				if !strings.HasPrefix(c.info.ID, "sim-") {
					continue
				}
				sym := strings.ToLower(c.info.Symbol)
				if ids := bySymbol[sym]; len(ids) > 1 {
					bad++
					t.Errorf("%s: symbol %q is shared by %v", c.info.ID, c.info.Symbol, ids)
				}
				if id, ok := realIDs[sym]; ok {
					bad++
					t.Errorf("%s: symbol %q is the id of %s", c.info.ID, c.info.Symbol, id)
				}
				if c.info.Symbol != sym || !validSymbol(sym) {
					bad++
					t.Errorf("%s: symbol %q, want 3 to %d lower-case letters and maybe a number", c.info.ID, c.info.Symbol, maxSymbolLen)
				}
				if bad > 20 {
					t.Fatal("too many errors")
				}
			}
			for name, ids := range byName {
				if len(ids) > 1 {
					t.Errorf("name %q is shared by %v", name, ids)
				}
			}
			if got, want := len(f.coins), max(n, MinCoins); got != want {
				t.Errorf("%d coins, want %d", got, want)
			}
		})
	}
	// The coins the audit named: symbols derived from more of the name,
	// the id, price path and the first holder of a symbol unchanged.
	f := newFeed(t, 1, 0)
	for id, want := range map[string]string{
		"sim-zecorxa": "zeco",  // was zec, Zcash's
		"sim-nemula":  "nemu",  // was nem, NEM's id
		"sim-mone":    "mone",  // was mon, Monad's
		"sim-zendo":   "zendo", // was zen, Horizen's; zend is an earlier coin's
		"sim-corlazo": "cor",   // the first of 16 cor keeps it
		"sim-cortuka": "cort",
		"sim-zentu":   "zen2", // zen, zent and zentu are taken
		"monad":       "mon",
		"zencash":     "zen",
	} {
		c := f.byID[id]
		if c == nil {
			t.Errorf("no coin %s", id)
			continue
		}
		if c.info.Symbol != want {
			t.Errorf("%s: symbol %q, want %q", id, c.info.Symbol, want)
		}
	}
}

// validSymbol reports whether s is what uniqueSymbol makes: 3 to
// maxSymbolLen lower-case letters, or 3 or 4 followed by a number from 2.
func validSymbol(s string) bool {
	letters := strings.TrimRight(s, "0123456789")
	if letters == s {
		return len(s) >= 3 && len(s) <= maxSymbolLen && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz") == ""
	}
	num, err := strconv.Atoi(s[len(letters):])
	return err == nil && num >= 2 && s[len(letters)] != '0' && len(letters) >= 3 && len(letters) <= 4 && strings.Trim(letters, "abcdefghijklmnopqrstuvwxyz") == ""
}

func TestUniqueSymbolAndName(t *testing.T) {
	taken := map[string]bool{"zec": true}
	next := map[string]int{}
	var got []string
	for range 6 {
		s := uniqueSymbol("zecorxa", 3, taken, next)
		taken[s] = true
		got = append(got, s)
	}
	if want := []string{"zeco", "zecor", "zecorx", "zec2", "zec3", "zec4"}; !slices.Equal(got, want) {
		t.Errorf("symbols for zecorxa with zec taken = %v, want %v", got, want)
	}
	taken["zeco5"] = true // another stem's number: no clash with zec's
	if got, want := uniqueSymbol("zecorxa", 4, taken, next), "zeco2"; got != want {
		t.Errorf("symbol for zecorxa, 4 letters drawn = %q, want %q", got, want)
	}
	taken["kazo"], taken["kazo2"] = true, true // another coin's number; skipped
	if got, want := uniqueSymbol("kazo", 4, taken, next), "kazo3"; got != want {
		t.Errorf("symbol for kazo with kazo, kazo2 taken = %q, want %q", got, want)
	}

	names := map[string]bool{"zomo token": true}
	got = got[:0]
	for range len(suffixes) + 1 {
		s := uniqueName("Zomo", 1, names, next)
		names[strings.ToLower(s)] = true
		got = append(got, s)
	}
	want := []string{"Zomo Chain", "Zomo Network", "Zomo Protocol", "Zomo Finance", "Zomo Swap", "Zomo AI", "Zomo DAO", "Zomo Verse", "Zomo Coin", "Zomo Token 2", "Zomo Token 3"}
	if !slices.Equal(got, want) {
		t.Errorf("names for Zomo with Zomo Token taken = %v, want %v", got, want)
	}
}

func TestParsePegged(t *testing.T) {
	// A pegged coin may come before its underlying in the file.
	text := header + "\n" +
		"wrapped-steth,wsteth,Wrapped stETH,3780,3300000,3300000,,,2021-02-23,,0.01,ethereum\n" +
		"ethereum,eth,Ethereum,3100,120700000,120700000,,0.7,2015-08-07,2.83,0.07,\n" +
		"ethena-usde,usde,Ethena USDe,1.0,6500000000,6500000000,,0.008,2024-02-16,1.0,0.04,\n" +
		"ethena-staked-usde,susde,Ethena Staked USDe,1.2,3500000000,3500000000,,,2024-02-20,,0.01, ethena-usde \n"
	coins, err := parseUniverse(text)
	if err != nil {
		t.Fatalf("parseUniverse: %v", err)
	}
	wsteth, eth, usde, susde := coins[0], coins[1], coins[2], coins[3]
	if eth.peg != nil || usde.peg != nil {
		t.Errorf("ethereum or ethena-usde pegged: %+v %+v", eth.peg, usde.peg)
	}
	for _, tt := range []struct {
		c, under *coin
		ratio    float64
		maxDev   float64
	}{
		{wsteth, eth, 3780.0 / 3100, maxPegDeviation},
		{susde, usde, 1.2, 0.008 / math.Sqrt(365*24)}, // below 0.3 %: the stablecoin's hourly volatility
	} {
		p := tt.c.peg
		if p == nil {
			t.Errorf("%s: not pegged", tt.c.info.ID)
			continue
		}
		if p.under != tt.under || math.Abs(p.ratio-tt.ratio) > 1e-15 || math.Abs(p.logRatio-math.Log(tt.ratio)) > 1e-15 || math.Abs(p.maxDev-tt.maxDev) > 1e-18 {
			t.Errorf("%s: pegged to %s × %v (log %v), deviation %v; want %s × %v, deviation %v", tt.c.info.ID, p.under.info.ID, p.ratio, p.logRatio, p.maxDev, tt.under.info.ID, tt.ratio, tt.maxDev)
		}
		if tt.c.sigmaH != tt.under.sigmaH || tt.c.sigmaD != tt.under.sigmaD || tt.c.listPrice != 0 {
			t.Errorf("%s: sigma %v/%v list price %v; want the underlying's sigma %v/%v and no listing price", tt.c.info.ID, tt.c.sigmaH, tt.c.sigmaD, tt.c.listPrice, tt.under.sigmaH, tt.under.sigmaD)
		}
	}
}
