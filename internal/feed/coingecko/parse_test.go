package coingecko

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"coinpulse/internal/feed/coingecko/cgtest"
	"coinpulse/internal/feed/upstream"
)

// fixtures are CoinGecko's own response examples; the tests that read
// them skip when ../shared is absent (a clone on its own).
const fixtures = "../../../../shared/fixtures/coingecko"

func fixture(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		tb.Skipf("no fixture %s (../shared is absent): %v", name, err)
	}
	return b
}

// CoinGecko's example of /coins/markets reads as it says.
func TestParseMarketsFixture(t *testing.T) {
	ms, skipped, err := ParseMarkets(fixture(t, "coins_markets.json"))
	if err != nil || len(skipped) > 0 || len(ms) != 1 {
		t.Fatalf("%v %v %+v", err, skipped, ms)
	}
	m := ms[0]
	if m.ID != "bitcoin" || m.Symbol != "btc" || m.Name != "Bitcoin" || *m.CurrentPrice != 77671 || *m.MarketCap != 1555886872303 ||
		*m.TotalVolume != 33235034316 || *m.CirculatingSupply != 20030493 || *m.TotalSupply != 20030843 || *m.MaxSupply != 21e6 ||
		!m.LastUpdated.Equal(time.Date(2026, 5, 18, 12, 49, 21, 599e6, time.UTC)) {
		t.Errorf("%+v", m)
	}
}

// CoinGecko's example of /global reads as it says, and the stand-in's
// answer has its shape.
func TestParseGlobalFixture(t *testing.T) {
	body := fixture(t, "global.json")
	if n, err := ParseGlobal(body); err != nil || n != 1476 {
		t.Errorf("ParseGlobal(global.json) = %d, %v; want 1476", n, err)
	}
	var want, got map[string]map[string]any
	json.Unmarshal(body, &want)
	getJSON(t, cgtest.Start(t, cgtest.Coins(2)).URL+"/global", &got)
	for k := range got["data"] {
		if _, ok := want["data"][k]; !ok {
			t.Errorf("the stand-in's /global sends %q, which CoinGecko's does not", k)
		}
	}
}

func TestParseGlobal(t *testing.T) {
	for _, in := range []string{``, `[]`, `{}`, `{"data":{}}`, `{"data":{"markets":null}}`, `{"data":{"markets":0}}`,
		`{"data":{"markets":-3}}`, `{"data":{"markets":1.5}}`, `{"data":{"markets":2e6}}`, `{"data":{"markets":"12"}}`, `{"data":{"markets":1e400}}`} {
		if n, err := ParseGlobal([]byte(in)); err == nil {
			t.Errorf("ParseGlobal(%s) = %d, want an error", in, n)
		}
	}
	if n, err := ParseGlobal([]byte(`{"data":{"markets":1e6,"active_cryptocurrencies":17000}}`)); err != nil || n != 1_000_000 {
		t.Errorf("ParseGlobal(1e6) = %d, %v", n, err)
	}
}

// CoinGecko's example of /coins/{id}/market_chart/range reads as it says.
func TestParseChartFixture(t *testing.T) {
	for _, name := range []string{"coins_id_market_chart_range.json", "coins_id_market_chart.json"} {
		s, err := ParseChart(fixture(t, name))
		want := []upstream.Sample{
			{T: 1779027899041, Price: 77953.82550382407, MarketCap: 1560631481361.8042, Volume: 18688431751.857048},
			{T: 1779028199661, Price: 78052.87543398788, MarketCap: 1562027330524.267, Volume: 18974828816.446976},
		}
		if err != nil || !slices.Equal(s, want) {
			t.Errorf("%s: %v %+v", name, err, s)
		}
	}
}

// The stand-in's answers have CoinGecko's shape: no field the fixtures do
// not have, and every field the feed reads.
func TestStandInShape(t *testing.T) {
	up := cgtest.Start(t, cgtest.Coins(2))
	var want []map[string]any
	json.Unmarshal(fixture(t, "coins_markets.json"), &want)
	var got []map[string]any
	getJSON(t, up.URL+"/coins/markets?vs_currency=usd&per_page=10&page=1", &got)
	if len(got) != 2 {
		t.Fatalf("%v", got)
	}
	for k := range got[0] {
		if _, ok := want[0][k]; !ok {
			t.Errorf("the stand-in's markets send %q, which CoinGecko's do not", k)
		}
	}
	for _, k := range []string{"id", "symbol", "name", "current_price", "market_cap", "total_volume", "circulating_supply", "total_supply", "max_supply", "last_updated"} {
		if _, ok := got[0][k]; !ok {
			t.Errorf("the stand-in's markets lack %q", k)
		}
	}
	var wantChart, gotChart map[string]any
	json.Unmarshal(fixture(t, "coins_id_market_chart_range.json"), &wantChart)
	now := time.Now().Unix()
	getJSON(t, up.URL+"/coins/bitcoin/market_chart/range?vs_currency=usd&from="+itoa(now-86400*3)+"&to="+itoa(now), &gotChart)
	if !slices.Equal(slices.Sorted(maps.Keys(gotChart)), slices.Sorted(maps.Keys(wantChart))) {
		t.Errorf("chart keys %v, CoinGecko's %v", slices.Sorted(maps.Keys(gotChart)), slices.Sorted(maps.Keys(wantChart)))
	}
}

func TestParseMarkets(t *testing.T) {
	body := `[
	 {"id":"good","symbol":"GD ","name":" Good ","current_price":2.5,"market_cap":null,"total_volume":-1,"circulating_supply":10,"total_supply":null,"max_supply":1e400,"last_updated":"2026-11-27T10:00:00.000Z"},
	 {"id":"dead","symbol":"dd","name":"Dead","current_price":1e-35,"market_cap":0,"last_updated":"yesterday"},
	 {"id":"dead","symbol":"dd","name":"Dead twice"},
	 {"id":"Bad/Id","symbol":"x","name":"X"},
	 {"id":"noname","symbol":"n","name":""},
	 {"id":"ctl","symbol":"c\u0007","name":"C"},
	 {"id":"shape","current_price":"1"},
	 7
	]`
	ms, skipped, err := ParseMarkets([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	// max_supply 1e400 does not fit a float64: encoding/json refuses the
	// whole element, which is then left out.
	if len(ms) != 1 || ms[0].ID != "dead" {
		t.Fatalf("kept %+v; skipped %q", ms, skipped)
	}
	d := ms[0]
	if d.CurrentPrice != nil || d.MarketCap == nil || *d.MarketCap != 0 || !d.LastUpdated.IsZero() {
		t.Errorf("dead: %+v", d)
	}
	if len(skipped) != 6 {
		t.Errorf("skipped %q, want 6 (a repeated coin is dropped without a word)", skipped)
	}

	ms, _, err = ParseMarkets([]byte(`[{"id":"good","symbol":"GD ","name":" Good ","current_price":2.5,"market_cap":null,"total_volume":-1,"circulating_supply":10,"total_supply":null,"max_supply":2e18}]`))
	if err != nil || len(ms) != 1 {
		t.Fatal(err, ms)
	}
	g := ms[0]
	if g.Symbol != "gd" || g.Name != "Good" || *g.CurrentPrice != 2.5 || g.MarketCap != nil || g.TotalVolume != nil || *g.CirculatingSupply != 10 || g.TotalSupply != nil || g.MaxSupply != nil {
		t.Errorf("good: %+v", g)
	}
	for _, bad := range []string{``, `{}`, `null x`, `[1,`} {
		if _, _, err := ParseMarkets([]byte(bad)); err == nil || !strings.Contains(err.Error(), "want a JSON array of coins") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestParseChart(t *testing.T) {
	body := `{"prices":[[3000,3],[1000,1],[2000,null],[null,5],[1e300,1],[1234.5,1],[4000],[5000,0],[6000,6]],
	 "market_caps":[[1000,10],[3000,-1],[6000,60],[9000,90]],
	 "total_volumes":[[1000,100],[6000,1e19]]}`
	s, err := ParseChart([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	// Millisecond timestamps before 2009 are no point: these are all.
	if len(s) != 0 {
		t.Errorf("%+v", s)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	body = strings.NewReplacer("3000", itoa(base+3000), "1000", itoa(base+1000), "2000", itoa(base+2000), "6000", itoa(base+6000), "5000", itoa(base+5000)).Replace(body)
	s, err = ParseChart([]byte(body))
	want := []upstream.Sample{
		{T: base + 1000, Price: 1, MarketCap: 10, Volume: 100},
		{T: base + 3000, Price: 3},
		{T: base + 6000, Price: 6, MarketCap: 60},
	}
	if err != nil || !slices.Equal(s, want) {
		t.Errorf("%v %+v", err, s)
	}
	for _, bad := range []string{``, `[]`, `{"market_caps":[]}`, `{"prices":{}}`, `{"prices":[]} x`} {
		if _, err := ParseChart([]byte(bad)); err == nil || !strings.Contains(err.Error(), "want a chart object") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if s, err := ParseChart([]byte(`{"prices":[]}`)); err != nil || len(s) != 0 {
		t.Errorf("no prices: %v %v", s, err)
	}
}

func TestUpstreamError(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":"coin not found"}`: "coin not found",
		`{"status":{"error_code":429,"error_message":"You've exceeded the Rate Limit."}}`:                          "You've exceeded the Rate Limit.",
		`{"error":{"status":{"error_code":10012,"error_message":"Your request exceeds the allowed time range."}}}`: "Your request exceeds the allowed time range.",
		`<html>bad gateway</html>`: "",
		`{"error":"a\nb"}`:         "a b",
	} {
		if got := upstreamError([]byte(body)); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}
