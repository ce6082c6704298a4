package main

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"coinpulse/internal/feed/coingecko/cgtest"
)

// serve --feed coingecko against a stand-in for CoinGecko's API: the
// largest coins are served with CoinGecko's figures, labelled as the
// market's, with 90 days of hourly and a year of daily history from three
// calls a coin; a restart on the same data directory makes none.
func TestServeCoinGecko(t *testing.T) {
	coins := cgtest.Coins(30)
	up := cgtest.Start(t, coins)
	up.Key = "CG-test-key"
	up.ChartDelay = 30 * time.Millisecond // 60 calls: a backfill of about a second
	noCap := coins[3].ID
	up.NoCap(noCap)
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(up.Key+"\n"), 0o600)
	args := []string{"--data-dir", t.TempDir(), "--feed", "coingecko", "--coingecko-url", up.URL, "--coingecko-key-file", keyFile,
		"--coingecko-coins", "20", "--coingecko-rate", "60000", "--plans", generousPlans(t)}
	s := startServe(t, args...)
	m := demoKey.FindStringSubmatch(s.stdout.String())
	if m == nil {
		t.Fatalf("no demo key:\n%s", s.stdout)
	}
	key := m[2]
	// Ready with quotes before the history is in.
	status, body := s.get(t, "/readyz", "")
	if data, _ := body["data"].(map[string]any); status != 200 || data["history"] != "backfilling" {
		t.Errorf("readyz during the backfill: %d %v", status, body)
	}
	s.waitHistory(t)
	if log := s.stderr.String(); !strings.Contains(log, "market data from CoinGecko") || !strings.Contains(log, "backfills 20 coins in about 60 calls") ||
		!strings.Contains(log, "serving quotes while history backfills") || strings.Contains(log, "SIMULATED") {
		t.Errorf("the log does not say where the data comes from:\n%s", log)
	}
	if n := up.Calls("chart"); n != 60 {
		t.Errorf("the backfill made %d chart calls, want 60 (three a coin)", n)
	}
	status, body = s.get(t, "/api/v1/markets/global", key)
	meta, _ := body["meta"].(map[string]any)
	data, _ := body["data"].(map[string]any)
	if status != 200 || meta["feed"] != "coingecko" || meta["simulated"] != false || data["active_cryptocurrencies"] != 20.0 || data["markets"] != float64(cgtest.Markets) {
		t.Fatalf("global: %d %v", status, body)
	}
	now := time.Now()
	status, body = s.get(t, "/api/v1/coins/btc", key)
	btc, _ := body["data"].(map[string]any)
	price, _ := btc["current_price"].(float64)
	if status != 200 || btc["id"] != "bitcoin" || math.Abs(price/cgtest.Price(coins[0], now)-1) > 0.01 || btc["price_change_percentage_24h"] == nil || btc["price_change_percentage_30d"] == nil || btc["max_supply"] != 21e6 {
		t.Fatalf("bitcoin: %d %v", status, body)
	}
	// A free key's history reaches 365 days back, to the second: a year
	// ago is known once the node has run for two days.
	if btc["price_change_percentage_1y"] != nil || btc["history_start"] != time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -363).Format(time.RFC3339) {
		t.Errorf("bitcoin's 1 y change %v, history start %v", btc["price_change_percentage_1y"], btc["history_start"])
	}
	status, body = s.get(t, "/api/v1/coins/bitcoin/history?days=90&interval=hourly", key)
	data, _ = body["data"].(map[string]any)
	pts, _ := data["points"].([]any)
	if status != 200 || len(pts) < 90*24 {
		t.Fatalf("hourly history: %d, %d points", status, len(pts))
	}
	for i, p := range pts[:len(pts)-1] { // the last is the current price
		pt := p.(map[string]any)
		at, _ := time.Parse(time.RFC3339, pt["timestamp"].(string))
		if want := cgtest.Price(coins[0], at); !at.Equal(at.Truncate(time.Hour)) || math.Abs(pt["price"].(float64)/want-1) > 1e-4 {
			t.Fatalf("hourly point %d: %v, want %v on the hour", i, pt, want)
		}
	}
	status, body = s.get(t, "/api/v1/coins/bitcoin/history?days=max", key)
	data, _ = body["data"].(map[string]any)
	pts, _ = data["points"].([]any)
	if status != 200 || len(pts) < 363 {
		t.Fatalf("daily history: %d, %d points", status, len(pts))
	}
	// A coin whose market cap CoinGecko does not know has none, no rank
	// and no supply, comes last, and its history's market caps are null.
	status, body = s.get(t, "/api/v1/coins/"+noCap, key)
	d, _ := body["data"].(map[string]any)
	if status != 200 || d["market_cap"] != nil || d["market_cap_rank"] != nil || d["circulating_supply"] != nil || d["market_cap_change_24h"] != nil || d["current_price"] == nil {
		t.Errorf("%s: %d %v; want a price but a null market cap, rank, supply and change", noCap, status, d)
	}
	status, body = s.get(t, "/api/v1/markets?per_page=20", key)
	items, _ := body["data"].([]any)
	if status != 200 || len(items) != 20 || items[19].(map[string]any)["id"] != noCap || items[18].(map[string]any)["market_cap_rank"] != 19.0 {
		t.Errorf("markets: %d, %d items, want %s last, unranked, after rank 19", status, len(items), noCap)
	}
	status, body = s.get(t, "/api/v1/coins/"+noCap+"/history?days=7", key)
	data, _ = body["data"].(map[string]any)
	pts, _ = data["points"].([]any)
	if status != 200 || len(pts) < 7 {
		t.Fatalf("%s history: %d, %d points", noCap, status, len(pts))
	}
	for _, p := range pts {
		if pt := p.(map[string]any); pt["market_cap"] != nil || pt["total_volume"] == nil || pt["price"] == nil {
			t.Fatalf("%s history point %v, want a null market cap only", noCap, pt)
		}
	}
	s.stop(t)

	calls := up.Calls("chart")
	s = startServe(t, args...)
	if strings.Contains(s.stderr.String(), "backfilling history") {
		t.Errorf("a restart backfilled again:\n%s", s.stderr)
	}
	// Within the hour it stopped in, a restart asks no history; past it,
	// one call a coin.
	if n := up.Calls("chart") - calls; n != 0 && n != 20 {
		t.Errorf("a restart made %d chart calls", n)
	}
}

func TestServeCoinGeckoRefusals(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "key")
	os.WriteFile(empty, []byte("\n"), 0o600)
	refusals(t, []refusal{
		{[]string{"--feed", "kraken"}, `--feed "kraken": sim, replay, coingecko or binance`},
		{[]string{"--coingecko-coins", "50"}, "--coingecko-coins is for --feed coingecko; the feed is sim"},
		{[]string{"--feed", "replay", "--replay-dir", t.TempDir(), "--coingecko-url", "http://x"}, "--coingecko-url is for --feed coingecko; the feed is replay"},
		{[]string{"--feed", "coingecko", "--coingecko-coins", "0"}, "--coingecko-coins: coins 0: 1 to 5000"},
		{[]string{"--feed", "coingecko", "--coingecko-rate", "-1"}, "--coingecko-rate: calls a minute -1"},
		{[]string{"--feed", "coingecko", "--coingecko-history-days", "30"}, "--coingecko-history-days: history days 30: 92 to"},
		{[]string{"--feed", "coingecko", "--coingecko-url", "api.coingecko.com"}, `--coingecko-url: URL "api.coingecko.com": want http(s)://host/path`},
		{[]string{"--feed", "coingecko", "--coingecko-key-file", empty}, "--coingecko-key-file: " + empty + " holds 0 characters"},
		{[]string{"--feed", "coingecko", "--coingecko-key-file", empty + ".none"}, "--coingecko-key-file: open"},
		{[]string{"--feed", "coingecko", "--refresh", "1s", "--coingecko-coins", "600"}, "--refresh 1s: quoting 600 coins takes 3 CoinGecko calls a refresh, 10801 an hour with the hourly count of exchanges, more than --coingecko-rate 25 allows (1500 an hour); refresh less often"},
		{[]string{"--feed", "coingecko", "--refresh", "1m", "--coingecko-rate", "1"}, "--refresh 1m0s: quoting 100 coins takes 1 CoinGecko calls a refresh, 61 an hour with the hourly count of exchanges, more than --coingecko-rate 1 allows (60 an hour)"},
		{[]string{"--feed", "coingecko", "--seed", "3"}, "--seed is for --feed sim; the feed is coingecko"},
		{[]string{"--feed", "coingecko", "--coingecko-history-days", "400"}, "--coingecko-history-days 400: CoinGecko's public API, and its free demo keys, reach 365 days back"},
		{[]string{"--feed", "coingecko", "--coingecko-url", "https://pro-api.coingecko.com/api/v3"}, "a paid plan's API needs its key: --coingecko-key-file"},
	})
}

// Two nodes on one PostgreSQL database take each refresh's quotes from
// CoinGecko once between them, and serve the same figures: a snapshot
// from one is the same on the other. The second starts warm from the
// state the first saved.
func TestServeCoinGeckoTwoNodes(t *testing.T) {
	db := postgresSchema(t)
	coins := cgtest.Coins(30)
	up := cgtest.Start(t, coins)
	args := []string{"--db", db, "--feed", "coingecko", "--coingecko-url", up.URL, "--coingecko-coins", "20", "--coingecko-rate", "60000", "--plans", generousPlans(t)}
	a := startServe(t, args...)
	m := demoKey.FindStringSubmatch(a.stdout.String())
	if m == nil {
		t.Fatalf("no demo key:\n%s", a.stdout)
	}
	key := m[2]
	a.waitHistory(t)
	charts := up.Calls("chart")
	// CoinGecko's top list moves before the second node starts: its own
	// choice would leave out a coin of the first's for the 21st. It
	// serves the first node's set all the same.
	up.Delist(coins[3].ID)
	b := startServe(t, args...)
	b.waitHistory(t)
	if n := up.Calls("chart") - charts; n != 0 && n != 20 { // 20: the hour turned in between
		t.Errorf("the second node made %d chart calls, want none (a warm start from the first's state, on its set)", n)
	}
	if !strings.Contains(b.stderr.String(), "serving the coin set chosen before") {
		t.Errorf("the second node does not log serving the first's coin set:\n%s", b.stderr)
	}
	if _, pb := b.get(t, "/api/v1/coins/"+coins[3].ID, key); pb["success"] != true {
		t.Errorf("the second node does not serve %s, of the first's set: %v", coins[3].ID, pb)
	}
	// 1 s refreshes: about one quote call a second between the two.
	before, start := up.Calls("markets"), time.Now()
	time.Sleep(4 * time.Second)
	if n, secs := up.Calls("markets")-before, time.Since(start).Seconds(); float64(n) > secs+2 {
		t.Errorf("%d quote calls in %.1f s of 1 s refreshes on two nodes, want one a refresh", n, secs)
	}
	if !strings.Contains(a.stderr.String()+b.stderr.String(), "quotes relayed from another node") {
		t.Errorf("neither node logs quotes relayed:\n%s\n%s", a.stderr, b.stderr)
	}
	// A snapshot of one node's is the other's, figure for figure.
	for try := 0; ; try++ {
		_, pa := a.get(t, "/api/v1/markets?per_page=20", key)
		snap, _ := pa["meta"].(map[string]any)["snapshot"].(string)
		status, pb := b.get(t, "/api/v1/markets?per_page=20&snapshot="+snap, key)
		if status == 200 {
			if !reflect.DeepEqual(pa["data"], pb["data"]) {
				t.Errorf("snapshot %s differs between the nodes:\n%v\n%v", snap, pa["data"], pb["data"])
			}
			break
		}
		if try == 20 {
			t.Fatalf("the second node never knew the first's snapshot %s: %d %v", snap, status, pb)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, ga := a.get(t, "/api/v1/markets/global", key)
	if d, _ := ga["data"].(map[string]any); d["markets"] != float64(cgtest.Markets) {
		t.Errorf("global: %v", ga)
	}
}

// Two nodes started at once on an empty database take turns at the
// history: the second serves quotes while the first backfills, then
// loads what it stored, so CoinGecko answers the chart calls of one node.
func TestServeCoinGeckoTwoNodesAtOnce(t *testing.T) {
	db := postgresSchema(t)
	up := cgtest.Start(t, cgtest.Coins(30))
	// 10 calls a second: the first node's backfill (60 chart calls)
	// takes about 6 s, in which the second starts.
	args := []string{"--db", db, "--feed", "coingecko", "--coingecko-url", up.URL, "--coingecko-coins", "20", "--coingecko-rate", "600", "--plans", generousPlans(t)}
	a := startServe(t, args...)
	b := startServe(t, args...)
	a.waitHistory(t)
	b.waitHistory(t)
	if n := up.Calls("chart"); n != 60 {
		t.Errorf("%d chart calls for two nodes of 20 coins, want 60: one backfill", n)
	}
	if !strings.Contains(a.stderr.String()+b.stderr.String(), "another node is at this feed's history") {
		t.Errorf("neither node logs waiting for the other:\n%s\n%s", a.stderr, b.stderr)
	}
}
