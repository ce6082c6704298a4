package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"coinpulse/internal/feed/binance/bntest"
)

// serve --feed binance against a stand-in for Binance's API: the bundled
// coins that trade against USDT are served at Binance's prices, with
// market caps from the bundled supplies and a year of history.
func TestServeBinance(t *testing.T) {
	pairs := []bntest.Pair{{Symbol: "BTCUSDT", Price: 90000}, {Symbol: "ETHUSDT", Price: 3000}, {Symbol: "SOLUSDT", Price: 150}, {Symbol: "FOOUSDT", Price: 1}}
	up := bntest.Start(t, pairs)
	args := []string{"--data-dir", t.TempDir(), "--feed", "binance", "--binance-url", up.URL, "--refresh", "2s", "--plans", generousPlans(t)}
	s := startServe(t, args...)
	m := demoKey.FindStringSubmatch(s.stdout.String())
	if m == nil {
		t.Fatalf("no demo key:\n%s", s.stdout)
	}
	key := m[2]
	s.waitHistory(t)
	if log := s.stderr.String(); !strings.Contains(log, "market data from Binance") || strings.Contains(log, "SIMULATED") {
		t.Errorf("the log does not say where the data comes from:\n%s", log)
	}
	status, body := s.get(t, "/api/v1/markets/global", key)
	meta, _ := body["meta"].(map[string]any)
	data, _ := body["data"].(map[string]any)
	if status != 200 || meta["feed"] != "binance" || meta["simulated"] != false || data["active_cryptocurrencies"] != 3.0 {
		t.Fatalf("global: %d %v", status, body)
	}
	status, body = s.get(t, "/api/v1/coins/eth", key)
	eth, _ := body["data"].(map[string]any)
	price, _ := eth["current_price"].(float64)
	supply, _ := eth["circulating_supply"].(float64)
	if status != 200 || eth["id"] != "ethereum" || math.Abs(price/bntest.Price(pairs[1], time.Now())-1) > 0.01 || supply == 0 || eth["market_cap"] != price*supply || eth["price_change_percentage_24h"] == nil || eth["price_change_percentage_1y"] == nil {
		t.Fatalf("ethereum: %d %v", status, body)
	}
	status, body = s.get(t, "/api/v1/coins/bitcoin/history?days=90&interval=hourly", key)
	data, _ = body["data"].(map[string]any)
	pts, _ := data["points"].([]any)
	if status != 200 || len(pts) < 90*24 {
		t.Fatalf("hourly history: %d, %d points", status, len(pts))
	}
	for i, p := range pts[:len(pts)-1] {
		pt := p.(map[string]any)
		at, _ := time.Parse(time.RFC3339, pt["timestamp"].(string))
		if want := bntest.Price(pairs[0], at); math.Abs(pt["price"].(float64)/want-1) > 1e-6 {
			t.Fatalf("hourly point %d: %v, want %v", i, pt, want)
		}
	}
	s.stop(t)
	s = startServe(t, args...)
	if strings.Contains(s.stderr.String(), "backfilling history") {
		t.Errorf("a restart backfilled again:\n%s", s.stderr)
	}
}

func TestServeBinanceRefusals(t *testing.T) {
	refusals(t, []refusal{
		{[]string{"--binance-rate", "5"}, "--binance-rate is for --feed binance; the feed is sim"},
		{[]string{"--feed", "binance", "--binance-quote", "usdt"}, `--binance-quote: quote asset "usdt"`},
		{[]string{"--feed", "binance", "--binance-quote", "BTC"}, `--binance-quote: quote asset "BTC": one of USDT, USDC, FDUSD, TUSD, USDP, DAI, USD, whose prices are served as USD`},
		{[]string{"--feed", "binance", "--binance-rate", "0"}, "--binance-rate: calls a minute 0: 1 to 2500"},
		{[]string{"--feed", "binance", "--binance-rate", "2500", "--refresh", "2s"}, "--binance-rate 2500: with --refresh 2s, up to 7400 of the 6,000 request weight"},
		{[]string{"--feed", "binance", "--binance-history-days", "7321"}, "--binance-history-days: history days 7321"},
		{[]string{"--feed", "binance", "--binance-url", "ftp://x"}, "--binance-url: URL"},
		{[]string{"--feed", "binance", "--refresh", "1s"}, "--refresh 1s: Binance weighs a refresh 80 of the 6,000 an address may spend a minute, 4800 a minute at this refresh; at least 1.6s"},
		{[]string{"--feed", "binance", "--coingecko-coins", "5"}, "--coingecko-coins is for --feed coingecko; the feed is binance"},
	})
}
