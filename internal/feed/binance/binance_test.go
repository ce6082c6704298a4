package binance

import (
	"context"
	"errors"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/feed/binance/bntest"
	"coinpulse/internal/feed/upstream"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) }

var pairs = []bntest.Pair{
	{Symbol: "BTCUSDT", Price: 90000}, {Symbol: "ETHUSDT", Price: 3000}, {Symbol: "XRPUSDT", Price: 2},
	{Symbol: "LUNAUSDT", Price: 0.2, Halted: true}, {Symbol: "ETHBTC", Price: 0.033}, {Symbol: "NOTACOINUSDT", Price: 1},
}

func newFeed(t *testing.T, up *bntest.Upstream, cfg Config) *Feed {
	t.Helper()
	cfg.BaseURL, cfg.RetryBase = up.URL, time.Millisecond
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The universe is the bundled coins trading against USDT, largest first;
// quotes are the tickers' last prices and quote volumes.
func TestUniverseAndQuotes(t *testing.T) {
	up := bntest.Start(t, pairs)
	f := newFeed(t, up, Config{})
	u, ids := universe(t, f)
	// LUNA is halted (no trade for two days), ETHBTC not against USDT,
	// NOTACOIN not bundled.
	if !slices.Equal(ids, []string{"bitcoin", "ethereum", "ripple"}) {
		t.Fatalf("universe %v", ids)
	}
	if btc := u[0]; btc.Symbol != "btc" || btc.Name != "Bitcoin" || btc.CirculatingSupply == 0 || btc.MaxSupply == nil || *btc.MaxSupply != 21e6 {
		t.Errorf("bitcoin %+v", btc)
	}
	now := time.Now()
	q, err := f.Quotes(context.Background(), now)
	if err != nil || len(q) != 3 {
		t.Fatalf("%v %+v", err, q)
	}
	btc := q[0]
	if btc.CoinID != "bitcoin" || math.Abs(btc.Price/bntest.Price(pairs[0], now)-1) > 1e-3 || btc.MarketCap != 0 || btc.TotalVolume == 0 || btc.Time.After(now) {
		t.Errorf("%+v", btc)
	}
	// A delisted pair: no quote, no failure.
	up.Delist("XRPUSDT")
	if q, err = f.Quotes(context.Background(), time.Now()); err != nil || len(q) != 2 {
		t.Errorf("%v %+v", err, q)
	}
	if up.Calls("ticker") != 3 {
		t.Errorf("%d ticker calls, want one a Universe or Quotes", up.Calls("ticker"))
	}
}

// History: the candle opening on each grid point, 1,000 a call, with the
// quote volume of the 24 hours before it; a delisted pair has none.
func TestHistory(t *testing.T) {
	up := bntest.Start(t, pairs)
	f := newFeed(t, up, Config{})
	u, _ := f.Universe(context.Background())
	btc := u[0]
	now := time.Now().UTC()
	from := now.Add(-90*24*time.Hour - time.Hour)
	pts, err := f.History(context.Background(), btc, coinpulse.Hourly, from, now)
	if err != nil {
		t.Fatal(err)
	}
	first := from.Truncate(time.Hour).Add(time.Hour) // from is off the grid
	if len(pts) != int(now.Sub(first)/time.Hour)+1 || !pts[0].Timestamp.Equal(first) {
		t.Fatalf("%d points from %v", len(pts), pts[0].Timestamp)
	}
	for i, p := range pts {
		at := first.Add(time.Duration(i) * time.Hour)
		want := bntest.QuoteVolume(pairs[0], at.Add(-24*time.Hour), time.Hour) // the first hour's; the rest follow
		if !p.Timestamp.Equal(at) || !near(p.Price, bntest.Price(pairs[0], at)) || !near(p.MarketCap, p.Price*btc.CirculatingSupply) || p.TotalVolume < want*0.5 {
			t.Fatalf("point %d: %+v", i, p)
		}
	}
	// 2,184 candles (a day more for the volume of the first): 3 calls.
	if n := up.Calls("klines"); n != 3 {
		t.Errorf("%d candle calls, want 3", n)
	}
	daily, err := f.History(context.Background(), btc, coinpulse.Daily, btc.ListedAt, now)
	if err != nil || len(daily) != 366 || !daily[0].Timestamp.Equal(btc.ListedAt) {
		t.Fatalf("%v %d points from %v", err, len(daily), daily[0].Timestamp)
	}
	d := daily[10]
	if want := bntest.QuoteVolume(pairs[0], d.Timestamp.Add(-24*time.Hour), 24*time.Hour); !near(d.TotalVolume, want) {
		t.Errorf("daily volume %v, want the day before's %v", d.TotalVolume, want)
	}
	up.Delist("BTCUSDT")
	if pts, err := f.History(context.Background(), btc, coinpulse.Daily, btc.ListedAt, now); err != nil || len(pts) != 0 {
		t.Errorf("delisted: %v %d", err, len(pts))
	}
}

func TestRefusals(t *testing.T) {
	up := bntest.Start(t, pairs)
	f := newFeed(t, up, Config{})
	up.TooMany(1)
	start := time.Now()
	if _, err := f.Universe(context.Background()); err != nil || time.Since(start) < time.Second {
		t.Errorf("a 429 waited out in %s: %v", time.Since(start), err)
	}
	_, err := f.c.Get(context.Background(), "/api/v3/klines", url.Values{"symbol": {"BTCUSDT"}, "interval": {"1w"}})
	var se *upstream.StatusError
	if !errors.As(err, &se) || se.Status != 400 || !strings.Contains(err.Error(), "Illegal characters found in a parameter. (code -1100)") {
		t.Errorf("%v", err)
	}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{BaseURL: "api.binance.com"}, "want http(s)://host"},
		{Config{Quote: "usdt"}, `quote asset "usdt": one of USDT, USDC`},
		{Config{Quote: "BTC"}, `quote asset "BTC": one of`},
		{Config{CallsPerMinute: 2501}, "calls a minute 2501: 1 to 2500"},
		{Config{HistoryDays: 10}, "history days 10: 92 to"},
	} {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	ts, err := ParseTickers([]byte(`[{"symbol":"BTCUSDT","lastPrice":"90000.01000000","quoteVolume":"1234.5","closeTime":1764288000000},
		{"symbol":"X","lastPrice":"1e5","quoteVolume":"-1","closeTime":5},{"symbol":""},{"symbol":3},7]`))
	if err != nil || len(ts) != 2 || ts[0].LastPrice != 90000.01 || ts[0].QuoteVolume != 1234.5 || !ts[0].CloseTime.Equal(time.UnixMilli(1764288000000)) ||
		ts[1].LastPrice != 0 || ts[1].QuoteVolume != 0 || !ts[1].CloseTime.IsZero() {
		t.Errorf("%v %+v", err, ts)
	}
	ks, err := ParseKlines([]byte(`[[1764288000000,"1.5","2","1","1.7","10",1764291599999,"15.5",3,"0","0","0"],
		[1764288000000,"9","2","1","1.7","10",1764291599999,"15.5",3,"0","0","0"],[1764291600000,"0","2"],[1764291600000,"0","2","1","1.7","10",0,"x",3],
		[1764291600000.5,"1","2","1","1.7","10",0,"1",3],["a","1","2","1","1.7","10",0,"1",3],[1764295200000,"2","2","1","1.7","10",0,"NaN",3]]`))
	want := []Kline{{1764288000000, 1.5, 15.5}, {1764295200000, 2, 0}}
	if err != nil || !slices.Equal(ks.Klines, want) || ks.Sent != 7 || ks.LastOpen != 1764295200000 {
		t.Errorf("%v %+v", err, ks)
	}
	for _, bad := range []string{``, `{}`, `[1]`} {
		if _, err := ParseKlines([]byte(bad)); err == nil {
			t.Errorf("klines %q: no error", bad)
		}
		if _, err := ParseTickers([]byte(bad)); err == nil && bad != `[1]` {
			t.Errorf("tickers %q: no error", bad)
		}
	}
	if m := apiError([]byte(`{"code":-1121,"msg":"Invalid symbol."}`)); m != "Invalid symbol. (code -1121)" {
		t.Errorf("%q", m)
	}
}

// A candle missing from Binance's answer is interpolated over, and the
// volumes about it count the candles there are; a candle left out as
// unreadable does not end the paging.
func TestHistoryHoles(t *testing.T) {
	up := bntest.Start(t, pairs)
	f := newFeed(t, up, Config{})
	u, _ := f.Universe(context.Background())
	btc := u[0]
	now := time.Now().UTC()
	hole := now.Truncate(time.Hour).Add(-10 * time.Hour)
	up.Drop("BTCUSDT", hole)
	up.Zero("BTCUSDT", now.Truncate(time.Hour).Add(-60*24*time.Hour)) // in the first page
	from := now.Add(-90 * 24 * time.Hour)
	pts, err := f.History(context.Background(), btc, coinpulse.Hourly, from, now)
	if err != nil {
		t.Fatal(err)
	}
	first := from.Truncate(time.Hour).Add(time.Hour)
	if want := int(now.Sub(first)/time.Hour) + 1; len(pts) != want {
		t.Fatalf("%d points, want %d: the last at %v", len(pts), want, pts[len(pts)-1].Timestamp)
	}
	for i, p := range pts {
		if at := first.Add(time.Duration(i) * time.Hour); !p.Timestamp.Equal(at) || p.TotalVolume == 0 || math.Abs(p.Price/bntest.Price(pairs[0], at)-1) > 0.01 {
			t.Fatalf("point %d: %+v", i, p)
		}
	}
	// The volume of the hour after the hole: 23 candles.
	after := pts[len(pts)-1-int(now.Sub(hole.Add(time.Hour))/time.Hour)]
	var want float64
	for h := after.Timestamp.Add(-24 * time.Hour); h.Before(after.Timestamp); h = h.Add(time.Hour) {
		if !h.Equal(hole) {
			want += bntest.QuoteVolume(pairs[0], h, time.Hour)
		}
	}
	if !after.Timestamp.Equal(hole.Add(time.Hour)) || !near(after.TotalVolume, want) {
		t.Errorf("after the hole: %+v, want volume %v", after, want)
	}
}

// Coins Binance lists under another ticker are priced by it, per token.
func TestRenamedPairs(t *testing.T) {
	up := bntest.Start(t, []bntest.Pair{{Symbol: "RONINUSDT", Price: 0.25}, {Symbol: "1MBABYDOGEUSDT", Price: 0.0009}, {Symbol: "BTCUSDT", Price: 90000}})
	f := newFeed(t, up, Config{})
	_, ids := universe(t, f)
	if !slices.Equal(ids, []string{"bitcoin", "ronin", "baby-doge-coin"}) {
		t.Fatalf("%v", ids)
	}
	q, _ := f.Quotes(context.Background(), time.Now())
	for _, x := range q {
		if x.CoinID == "baby-doge-coin" && (x.Price > 1e-8 || x.Price < 1e-10) {
			t.Errorf("baby doge at %v a token", x.Price)
		}
	}
}

// universe takes f's universe, and its ids.
func universe(t *testing.T, f *Feed) ([]coinpulse.CoinInfo, []string) {
	t.Helper()
	u, err := f.Universe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range u {
		ids = append(ids, c.ID)
	}
	return u, ids
}
