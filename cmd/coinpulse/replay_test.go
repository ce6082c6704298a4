package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recording is the real one the replay feed was made for; the tests that
// play it skip when ../shared is absent.
const recording = "../../../shared/datasets/coingecko-2021"

// serve --feed replay plays the recording: bitcoin's history starts with
// its price of 2021-01-01, market answers say the feed and that the data
// is not the market's of the moment, and a restart on the same data
// directory is a warm start.
func TestServeReplay(t *testing.T) {
	if _, err := os.Stat(recording); err != nil {
		t.Skipf("no recording at %s (../shared is absent): %v", recording, err)
	}
	args := []string{"--data-dir", t.TempDir(), "--feed", "replay", "--replay-dir", recording, "--plans", generousPlans(t)}
	s := startServe(t, args...)
	m := demoKey.FindStringSubmatch(s.stdout.String())
	if m == nil {
		t.Fatalf("no demo key:\n%s", s.stdout)
	}
	key := m[2]
	if !strings.Contains(s.stderr.String(), "market data is REPLAYED") || !strings.Contains(s.stderr.String(), "coins=166") || !strings.Contains(s.stderr.String(), "veritaseum (3)") {
		t.Errorf("the log does not say the data is replayed, how many coins are left out, or which have rows of unknown price:\n%s", s.stderr)
	}
	status, body := s.get(t, "/api/v1/markets/global", key)
	meta, _ := body["meta"].(map[string]any)
	data, _ := body["data"].(map[string]any)
	if status != 200 || meta["feed"] != "replay" || meta["simulated"] != true || data["active_cryptocurrencies"] != 334.0 {
		t.Fatalf("global: %d %v", status, body)
	}
	status, body = s.get(t, "/api/v1/coins/bitcoin/history?days=max&interval=daily", key)
	data, _ = body["data"].(map[string]any)
	pts, _ := data["points"].([]any)
	if status != 200 || len(pts) < 365 {
		t.Fatalf("history: %d, %d points", status, len(pts))
	}
	// The first row of coins/bitcoin.csv: 1609459200000 (2021-01-01),
	// 29022.41839530417.
	if first := pts[0].(map[string]any); first["timestamp"] != "2021-01-01T00:00:00Z" || first["price"] != 29022.41839530417 {
		t.Errorf("bitcoin's first point %v, want the recording's first row (2021-01-01, 29022.41839530417)", first)
	}
	// coins/cdai.csv records a volume of 0 (unknown) on 2021-10-01: the
	// history point of that day has a null volume.
	status, body = s.get(t, "/api/v1/coins/cdai/history?days=max&interval=daily", key)
	data, _ = body["data"].(map[string]any)
	pts, _ = data["points"].([]any)
	found := false
	for _, p := range pts {
		if pt := p.(map[string]any); pt["timestamp"] == "2021-10-01T00:00:00Z" {
			found = true
			if pt["total_volume"] != nil || pt["market_cap"] == nil {
				t.Errorf("cdai on 2021-10-01: %v, want a null volume and a market cap", pt)
			}
		}
	}
	if status != 200 || !found {
		t.Errorf("cdai history: %d, %d points, none of 2021-10-01", status, len(pts))
	}
	if status, body := s.get(t, "/api/v1/coins/sim-aaaa", key); status != 404 {
		t.Errorf("a sim coin under replay: %d %v", status, body)
	}
	s.stop(t)

	s = startServe(t, args...)
	if strings.Contains(s.stderr.String(), "backfilling history") {
		t.Errorf("a restart on the same recording backfilled again:\n%s", s.stderr)
	}
}

// A recording that does not load fails the start, naming the file, before
// the data directory is created.
func TestServeReplayRefusals(t *testing.T) {
	rec := t.TempDir()
	os.Mkdir(filepath.Join(rec, "coins"), 0o755)
	os.WriteFile(filepath.Join(rec, "coinlist.csv"), []byte("id,symbol,name\nalpha,alp,Alpha\n"), 0o644)
	os.WriteFile(filepath.Join(rec, "coins", "alpha.csv"), []byte("timestamp,readableTimestamp,coinId,price,marketCap,totalVolume\n1609459200000,x,alpha,-1,2,3\n"), 0o644)
	future := t.TempDir()
	os.Mkdir(filepath.Join(future, "coins"), 0o755)
	os.WriteFile(filepath.Join(future, "coinlist.csv"), []byte("id,symbol,name\nalpha,alp,Alpha\n"), 0o644)
	os.WriteFile(filepath.Join(future, "coins", "alpha.csv"), []byte("timestamp,readableTimestamp,coinId,price,marketCap,totalVolume\n4102444800000,x,alpha,1,2,3\n"), 0o644)
	refusals(t, []refusal{
		{[]string{"--feed", "replay"}, "--feed replay needs --replay-dir"},
		{[]string{"--replay-dir", rec}, "--replay-dir is for --feed replay; the feed is sim"},
		{[]string{"--feed", "coin"}, `--feed "coin": sim, replay, coingecko or binance`},
		{[]string{"--feed", "replay", "--replay-dir", rec, "--seed", "2"}, "--seed is for --feed sim; the feed is replay"},
		{[]string{"--feed", "replay", "--replay-dir", rec, "--sim-coins", "2000"}, "--sim-coins is for --feed sim; the feed is replay"},
		{[]string{"--feed", "replay", "--replay-dir", t.TempDir()}, "coinlist.csv: no such file or directory"},
		{[]string{"--feed", "replay", "--replay-dir", rec}, filepath.Join(rec, "coins", "alpha.csv") + `: line 2: price "-1": want a number, 0 or more`},
		{[]string{"--feed", "replay", "--replay-dir", future}, "the recording starts on 2100-01-01, in the future: there is nothing to play yet"},
	})
	// A sim flag left in the environment names its variable.
	_, _, err := cli(t, map[string]string{"COINPULSE_SEED": "7"}, "serve", "--addr", freeAddr(t), "--data-dir", filepath.Join(t.TempDir(), "data"), "--feed", "replay", "--replay-dir", rec)
	if err == nil || !strings.HasSuffix(err.Error(), "--seed is for --feed sim; the feed is replay (set by COINPULSE_SEED)") {
		t.Errorf("COINPULSE_SEED with the replay feed: %v", err)
	}
}

// refusal is serve's arguments and the error they must fail with.
type refusal struct {
	args []string
	want string
}

// refusals runs serve with each refusal's arguments and checks that it
// fails with the error, before creating the data directory.
func refusals(t *testing.T, cases []refusal) {
	t.Helper()
	for _, tt := range cases {
		dir := filepath.Join(t.TempDir(), "data")
		_, _, err := cli(t, nil, append([]string{"serve", "--addr", freeAddr(t), "--data-dir", dir}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%v: refused after creating the data directory", tt.args)
		}
	}
}
