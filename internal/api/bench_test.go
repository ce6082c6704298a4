package api

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/ledger"
	"coinpulse/internal/market"
	"coinpulse/internal/meter"
	"coinpulse/internal/ratelimit"
)

// discard is a ResponseWriter that keeps nothing, so the benchmark measures
// the handler rather than a recorder's buffer.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func benchmarkGet(b *testing.B, target string, auth bool) {
	t := &testing.T{}
	srv := testServer(t)
	h := srv.Handler()
	req := httptest.NewRequest("GET", target, nil)
	if auth {
		req.Header.Set("Authorization", "Bearer "+proKey(t))
	}
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, req) // warm the key cache and the page memo
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

// The hot path: an authenticated page of 100 coins.
func BenchmarkMarketsPage100(b *testing.B) { benchmarkGet(b, "/api/v1/markets?per_page=100", true) }

func BenchmarkGlobal(b *testing.B) { benchmarkGet(b, "/api/v1/markets/global", true) }

// A watch list of 20 coins, one unknown: parsed, selected and looked up in
// the memo on every call.
func BenchmarkMarketsIDs20(b *testing.B) {
	benchmarkGet(b, "/api/v1/markets?ids=bitcoin,ethereum,solana,cardano,ripple,dogecoin,tron,chainlink,polkadot,litecoin,"+
		"stellar,monero,uniswap,aave,cosmos,near,aptos,sui,arbitrum,no-such-coin", true)
}

func BenchmarkCoinDetail(b *testing.B) { benchmarkGet(b, "/api/v1/coins/btc", true) }

func BenchmarkSearch(b *testing.B) { benchmarkGet(b, "/api/v1/markets/search?q=bit&limit=20", true) }

func BenchmarkHistory30d(b *testing.B) {
	benchmarkGet(b, "/api/v1/coins/bitcoin/history?days=30", true)
}

func BenchmarkHealthz(b *testing.B) { benchmarkGet(b, "/healthz", false) }

// bigPortfolio makes a portfolio holding each of the first n coins of the
// market (two buys each) and returns a key of its owner and its id.
func bigPortfolio(b *testing.B, n int) (string, int64) {
	ctx := context.Background()
	t := &testing.T{}
	srv := testServer(t)
	u := newUser(t, coinpulse.TierPro, nil)
	key, rec := newKey(t, u, coinpulse.ModeLive, rw, nil)
	o := coinpulse.Owner{UserID: u.ID, Mode: rec.Mode}
	p := &coinpulse.Portfolio{Owner: o, Name: "bench", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := srv.store.CreatePortfolio(ctx, p, coinpulse.Unlimited); err != nil {
		b.Fatal(err)
	}
	coins, _ := srv.market.Current().Page(market.MarketCapDesc, 1, n)
	if len(coins) < n {
		b.Fatalf("the market has %d coins, want %d", len(coins), n)
	}
	for _, c := range coins {
		for _, q := range []string{"1.5", "0.25"} {
			lot := ledger.Lot{Quantity: decimal.RequireFromString(q), Price: decimal.NewFromFloat(c.CurrentPrice), ExecutedAt: time.Now()}
			tr := coinpulse.Trade{PortfolioID: p.ID, CoinID: c.ID, CoinSymbol: c.Symbol, CoinName: c.Name, Now: time.Now()}
			if _, _, err := srv.store.Trade(ctx, o, tr, ledger.BuyFunc(lot)); err != nil {
				b.Fatal(err)
			}
		}
	}
	return key, p.ID
}

// benchmarkLatency runs req and reports the 50th and 99th percentile of
// the iterations' latencies beside the mean.
func benchmarkLatency(b *testing.B, method, target, key string) {
	srv := testServer(&testing.T{})
	h := srv.Handler()
	w := &discard{h: http.Header{}}
	serveOnce := func() {
		req := httptest.NewRequest(method, target, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		clear(w.h)
		h.ServeHTTP(w, req)
	}
	serveOnce()
	var lat []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		serveOnce()
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// Reading a portfolio of 1,000 holdings: two queries, however many
// holdings, then pricing and encoding each.
func BenchmarkPortfolioRead1000(b *testing.B) {
	key, id := bigPortfolio(b, 1000)
	benchmarkLatency(b, "GET", fmt.Sprintf("/api/v1/portfolio/%d", id), key)
}

// Syncing the same portfolio: the read, plus recording a value point.
func BenchmarkPortfolioSync1000(b *testing.B) {
	key, id := bigPortfolio(b, 1000)
	benchmarkLatency(b, "POST", fmt.Sprintf("/api/v1/portfolio/%d/sync", id), key)
}

// The parts of a read the cache saves: the store's read of 1,000
// holdings, and pricing and encoding them.
func BenchmarkPortfolioStoreRead1000(b *testing.B) {
	key, id := bigPortfolio(b, 1000)
	srv := testServer(&testing.T{})
	o := ownerOfKey(b, key)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := srv.store.Portfolio(context.Background(), o, id); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPortfolioPriceEncode1000(b *testing.B) {
	key, id := bigPortfolio(b, 1000)
	srv := testServer(&testing.T{})
	p, err := srv.store.Portfolio(context.Background(), ownerOfKey(b, key), id)
	if err != nil {
		b.Fatal(err)
	}
	snap := srv.market.Current()
	b.ReportAllocs()
	for b.Loop() {
		v := viewPortfolio(p, snap)
		v.appendJSON(nil)
	}
}

func ownerOfKey(b *testing.B, key string) coinpulse.Owner {
	k, err := shared.store.KeyByHash(context.Background(), coinpulse.HashKey(key))
	if err != nil {
		b.Fatal(err)
	}
	return coinpulse.Owner{UserID: k.UserID, Mode: k.Mode}
}

// limitedBenchServer is the test server with rate limits (in process) and
// metering on, and enterprise figures that never throttle; the meter stops
// when b ends.
func limitedBenchServer(b *testing.B) *Server {
	plans := plansWith(coinpulse.TierEnterprise, func(p *coinpulse.Plan) {
		p.PerSecond, p.PerMinute, p.MonthlyCalls = 100_000_000, 100_000_000, coinpulse.Unlimited
	})
	base := testServer(&testing.T{})
	m := meter.New(shared.store, quiet, meter.Options{Interval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	go m.Run(ctx)
	b.Cleanup(func() {
		m.Close(context.Background())
		cancel()
	})
	return New(Config{
		Store: shared.store, Market: base.market, Log: quiet, Plans: plans,
		Limiter: ratelimit.NewMemory(time.Now, nil), Meter: m,
	})
}

// BenchmarkGlobalLimited is BenchmarkGlobal with rate limits (in process)
// and metering on, for an enterprise key whose figures never throttle:
// the difference between the two is what limits and metering cost a call.
func BenchmarkGlobalLimited(b *testing.B) {
	t := &testing.T{}
	srv := limitedBenchServer(b)
	key, _ := newKey(t, newUser(t, coinpulse.TierEnterprise, nil), coinpulse.ModeLive, rw, nil)
	h := srv.Handler()
	req := httptest.NewRequest("GET", "/api/v1/markets/global", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, req)
	if w.h.Get("X-RateLimit-Limit") == "" {
		b.Fatal("no X-RateLimit-Limit: limits are off")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

// headerWork is a ResponseWriter that does to the header map what
// net/http does for every answer, and nothing else: a fresh map per
// request, a Clone when the handler writes the header after asking for
// the map, and Header.Write with its sort. With it the difference between
// BenchmarkGlobalServed's "off" and "limited" cases is what limits and
// metering cost a call, net/http's part included (bench/README.md, limits).
type headerWork struct {
	h, sent http.Header
	out     *bufio.Writer
}

func (w *headerWork) Header() http.Header { return w.h }
func (w *headerWork) WriteHeader(int) {
	if w.sent == nil {
		w.sent = w.h.Clone()
	}
}
func (w *headerWork) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(b), nil
}

func (w *headerWork) serve(h http.Handler, req *http.Request) {
	w.h, w.sent = make(http.Header), nil
	h.ServeHTTP(w, req)
	w.sent.Write(w.out)
	w.out.Reset(io.Discard)
}

// BenchmarkGlobalServed is BenchmarkGlobal ("off") against
// BenchmarkGlobalLimited ("limited"), both through headerWork, and
// between them "off+headers": the server without limits, with five fixed
// values under the rate-limit headers' names set before it runs, which is
// what those five map entries alone cost.
func BenchmarkGlobalServed(b *testing.B) {
	t := &testing.T{}
	fixed := []string{"1"}
	for _, name := range []string{"off", "off+headers", "limited"} {
		srv, key := testServer(t), proKey(t)
		h := srv.Handler()
		switch name {
		case "off+headers":
			off := h
			h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hdr := w.Header()
				hdr["X-Ratelimit-Limit"], hdr["X-Ratelimit-Remaining"], hdr["X-Ratelimit-Reset"] = fixed, fixed, fixed
				hdr["Ratelimit"], hdr["Ratelimit-Policy"] = fixed, fixed
				off.ServeHTTP(w, r)
			})
		case "limited":
			h = limitedBenchServer(b).Handler()
			key, _ = newKey(t, newUser(t, coinpulse.TierEnterprise, nil), coinpulse.ModeLive, rw, nil)
		}
		b.Run(name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/api/v1/markets/global", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			w := &headerWork{out: bufio.NewWriter(io.Discard)}
			w.serve(h, req)
			if got := w.sent.Get("X-RateLimit-Limit"); (got != "") != (name != "off") || len(w.sent) != 9 && name != "off" {
				b.Fatalf("%s: X-RateLimit-Limit %q, %d header entries", name, got, len(w.sent))
			}
			b.ReportAllocs()
			for b.Loop() {
				w.serve(h, req)
			}
		})
	}
}

// BenchmarkHeaderWrite is what net/http does with an answer's header map:
// a fresh http.Header, the handler's assignments, then Header.Write, for
// the entries of a small market answer without limits (4), 8, and with
// limits (9; Content-Length is net/http's, outside the map). Past 8
// entries Go's map leaves its small form and allocates a table; this is
// most of what the rate-limit headers cost (bench/README.md, limits).
func BenchmarkHeaderWrite(b *testing.B) {
	names := []string{"Cache-Control", "Content-Type", "Etag", "X-Request-Id",
		"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit", "Ratelimit-Policy"}
	value := []string{"1"}
	for _, n := range []int{4, 8, 9} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			w := bufio.NewWriter(io.Discard)
			b.ReportAllocs()
			for b.Loop() {
				h := make(http.Header)
				for _, k := range names[:n] {
					h[k] = value
				}
				if err := h.Write(w); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchmarkBuy buys into one holding of a portfolio, with a new
// Idempotency-Key each time when keyed: what a key adds to a write is a
// claim and the answer kept, two more statements on SQLite.
func benchmarkBuy(b *testing.B, keyed bool) {
	t := &testing.T{}
	srv := testServer(t)
	h := srv.Handler()
	key := proKey(t)
	p := newPortfolio(t, srv, key, "bench")
	target := fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID)
	buy := `{"coin_id":"bitcoin","quantity":"0.001","buy_price":"50000"}`
	if res := sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "bench-0"); res.Status != http.StatusCreated {
		b.Fatalf("a buy: %d %s", res.Status, res.Raw)
	}
	w := &discard{h: http.Header{}}
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest("POST", target, strings.NewReader(buy))
		req.Header.Set("Authorization", "Bearer "+key)
		if keyed {
			n++
			req.Header.Set("Idempotency-Key", "bench-"+strconv.Itoa(n))
		}
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

func BenchmarkBuy(b *testing.B) { benchmarkBuy(b, false) }

func BenchmarkBuyIdempotent(b *testing.B) { benchmarkBuy(b, true) }

// fixedBenchServer is a server over fixedEngine, which never refreshes:
// its snapshot, and the answers it keeps, last the whole benchmark (the
// shared engine refreshes every 200 ms, and a history's first answer
// after a refresh reads the store).
func fixedBenchServer(b *testing.B) *Server {
	b.Helper()
	return New(Config{Store: shared.store, Market: fixedEngine(b), Log: quiet})
}

// countingDiscard is discard that counts the body's bytes.
type countingDiscard struct {
	discard
	n int
}

func (d *countingDiscard) Write(b []byte) (int, error) { d.n += len(b); return len(b), nil }

// Large answers with and without gzip, through the handler (no network):
// the largest history (about 640 KB) and the largest page of /markets
// (about 105 KB). With gzip, each answer after a snapshot's first copies
// the bytes deflated once for the snapshot and appends its meta; the
// bytes sent are reported as B/answer.
func BenchmarkHistoryGzip(b *testing.B) {
	srv := fixedBenchServer(b)
	h := srv.Handler()
	key := proKey(&testing.T{})
	for _, bc := range []struct{ name, target string }{
		{"history-max", "/api/v1/coins/bitcoin/history?days=max"},
		{"markets-250", "/api/v1/markets?per_page=250"},
	} {
		for _, ae := range []string{"", "gzip"} {
			name := bc.name + "/identity"
			if ae != "" {
				name = bc.name + "/gzip"
			}
			b.Run(name, func(b *testing.B) {
				req := httptest.NewRequest("GET", bc.target, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				if ae != "" {
					req.Header.Set("Accept-Encoding", ae)
				}
				w := &countingDiscard{discard: discard{h: http.Header{}}}
				h.ServeHTTP(w, req) // warm the key cache and the memo
				if enc := w.h.Get("Content-Encoding"); enc != ae {
					b.Fatalf("Content-Encoding %q, want %q", enc, ae)
				}
				w.n = 0
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					clear(w.h)
					h.ServeHTTP(w, req)
				}
				b.ReportMetric(float64(w.n)/float64(b.N), "B/answer")
			})
		}
	}
}

// Compressing a whole answer as it is sent, by level: what an answer that
// is not memoised costs (portfolios, alerts, a snapshot's first answer
// to a key), on the largest history and page of /markets.
func BenchmarkGzipLevels(b *testing.B) {
	srv := fixedBenchServer(b)
	key := proKey(&testing.T{})
	for _, bc := range []struct{ name, target string }{
		{"history-max", "/api/v1/coins/bitcoin/history?days=max"},
		{"markets-250", "/api/v1/markets?per_page=250"},
	} {
		res := do(&testing.T{}, srv, "GET", bc.target, key)
		for _, level := range []struct {
			name  string
			level int
		}{{"best-speed", gzip.BestSpeed}, {"default", gzip.DefaultCompression}, {"best", gzip.BestCompression}} {
			b.Run(bc.name+"/"+level.name, func(b *testing.B) {
				var buf bytes.Buffer
				zw, _ := gzip.NewWriterLevel(&buf, level.level)
				b.SetBytes(int64(len(res.Raw)))
				b.ReportAllocs()
				for b.Loop() {
					buf.Reset()
					zw.Reset(&buf)
					zw.Write(res.Raw)
					zw.Close()
				}
				b.ReportMetric(float64(buf.Len()), "B/answer")
			})
		}
	}
}
