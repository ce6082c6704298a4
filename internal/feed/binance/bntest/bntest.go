// Package bntest stands in for Binance's spot API in tests, which must
// not depend on a live upstream: it answers GET /api/v3/ticker/24hr (every
// pair) and GET /api/v3/klines in Binance's documented shapes (figures as
// decimal strings; candles as arrays opening on the interval's grid, at
// most 1,000 a call), with its refusals (an unknown pair, 429 when told
// to), and prices that are a pure function of the pair and the instant.
package bntest

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Pair is a pair the stand-in trades.
type Pair struct {
	Symbol string  // "BTCUSDT"
	Price  float64 // around which the price moves
	// Halted pairs keep a ticker whose last trade is two days old.
	Halted bool
}

// Upstream is a running stand-in.
type Upstream struct {
	URL string
	Now func() time.Time // default time.Now

	srv   *httptest.Server
	mu    sync.Mutex
	pairs []Pair
	calls map[string]int
	many  int
	odd   map[string]string // symbol and opening time (ms) → "drop" or "zero"
}

// Start serves pairs until the test ends.
func Start(t testing.TB, pairs []Pair) *Upstream {
	u := &Upstream{pairs: pairs, Now: time.Now, calls: map[string]int{}, odd: map[string]string{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	u.URL = u.srv.URL
	return u
}

// Calls returns how many calls of a kind ("ticker" or "klines") were
// answered, refusals included.
func (u *Upstream) Calls(kind string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[kind]
}

// TooMany makes the next n calls answer 429 with Retry-After: 1.
func (u *Upstream) TooMany(n int) {
	u.mu.Lock()
	u.many = n
	u.mu.Unlock()
}

// Drop leaves out the pair's candle opening at t, as Binance's candles
// have holes (maintenance, halts).
func (u *Upstream) Drop(symbol string, t time.Time) { u.mark(symbol, t, "drop") }

// Zero sends the pair's candle opening at t with an opening price of 0.
func (u *Upstream) Zero(symbol string, t time.Time) { u.mark(symbol, t, "zero") }

func (u *Upstream) mark(symbol string, t time.Time, how string) {
	u.mu.Lock()
	u.odd[symbol+"@"+strconv.FormatInt(t.UnixMilli(), 10)] = how
	u.mu.Unlock()
}

// Delist removes a pair: its klines are -1121 Invalid symbol, and the
// tickers leave it out.
func (u *Upstream) Delist(symbol string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, p := range u.pairs {
		if p.Symbol == symbol {
			u.pairs = append(u.pairs[:i:i], u.pairs[i+1:]...)
			return
		}
	}
}

// Price is a pair's price at t.
func Price(p Pair, t time.Time) float64 {
	phase := 0.0
	for _, b := range []byte(p.Symbol) {
		phase += float64(b)
	}
	s := float64(t.UnixMilli()) / 1000
	return p.Price * math.Exp(0.1*math.Sin(2*math.Pi*s/(7*86400)+phase)+0.02*math.Sin(2*math.Pi*s/86400+2*phase))
}

// QuoteVolume is a pair's quote volume over [from, from+d): a million
// quote units an hour at its price of from.
func QuoteVolume(p Pair, from time.Time, d time.Duration) float64 {
	return 1e6 * Price(p, from) / p.Price * d.Hours()
}

func dec(v float64) string { return strconv.FormatFloat(v, 'f', 8, 64) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	kind := map[string]string{"/api/v3/ticker/24hr": "ticker", "/api/v3/klines": "klines"}[r.URL.Path]
	u.mu.Lock()
	u.calls[kind]++
	many := u.many > 0
	if many {
		u.many--
	}
	pairs := append([]Pair(nil), u.pairs...)
	u.mu.Unlock()
	now := u.Now().UTC()
	switch {
	case many:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, map[string]any{"code": -1003, "msg": "Too many requests; current limit of IP is 6000 request weight per 1 MINUTE."})
	case kind == "ticker":
		var out []map[string]any
		for _, p := range pairs {
			close := now
			if p.Halted {
				close = now.Add(-48 * time.Hour)
			}
			out = append(out, map[string]any{
				"symbol": p.Symbol, "openPrice": dec(Price(p, close.Add(-24*time.Hour))), "highPrice": dec(p.Price * 1.2), "lowPrice": dec(p.Price * 0.8),
				"lastPrice": dec(Price(p, close)), "volume": dec(QuoteVolume(p, close.Add(-24*time.Hour), 24*time.Hour) / p.Price),
				"quoteVolume": dec(QuoteVolume(p, close.Add(-24*time.Hour), 24*time.Hour)),
				"openTime":    close.Add(-24 * time.Hour).UnixMilli(), "closeTime": close.UnixMilli(), "firstId": 1, "lastId": 100, "count": 100,
			})
		}
		writeJSON(w, 200, out)
	case kind == "klines":
		u.klines(w, r, pairs, now)
	default:
		writeJSON(w, 404, map[string]any{"code": -1, "msg": "Not found"})
	}
}

func (u *Upstream) klines(w http.ResponseWriter, r *http.Request, pairs []Pair, now time.Time) {
	q := r.URL.Query()
	var pair *Pair
	for i := range pairs {
		if pairs[i].Symbol == q.Get("symbol") {
			pair = &pairs[i]
		}
	}
	step := map[string]time.Duration{"1h": time.Hour, "1d": 24 * time.Hour}[q.Get("interval")]
	start, err1 := strconv.ParseInt(q.Get("startTime"), 10, 64)
	end, err2 := strconv.ParseInt(q.Get("endTime"), 10, 64)
	limit, err3 := strconv.Atoi(q.Get("limit"))
	switch {
	case pair == nil:
		writeJSON(w, 400, map[string]any{"code": -1121, "msg": "Invalid symbol."})
		return
	case step == 0 || err1 != nil || err2 != nil || err3 != nil || limit < 1 || limit > 1000 || end < start:
		writeJSON(w, 400, map[string]any{"code": -1100, "msg": "Illegal characters found in a parameter."})
		return
	}
	out := [][]any{}
	t := time.UnixMilli(start).UTC().Truncate(step)
	if t.UnixMilli() < start {
		t = t.Add(step)
	}
	for ; t.UnixMilli() <= end && !t.After(now) && len(out) < limit; t = t.Add(step) {
		u.mu.Lock()
		how := u.odd[pair.Symbol+"@"+strconv.FormatInt(t.UnixMilli(), 10)]
		u.mu.Unlock()
		if how == "drop" {
			continue
		}
		closeT := t.Add(step - time.Millisecond)
		qv := QuoteVolume(*pair, t, step)
		open := dec(Price(*pair, t))
		if how == "zero" {
			open = dec(0)
		}
		out = append(out, []any{t.UnixMilli(), open, dec(pair.Price * 1.2), dec(pair.Price * 0.8), dec(Price(*pair, closeT)),
			dec(qv / pair.Price), closeT.UnixMilli(), dec(qv), 100, "0", "0", "0"})
	}
	writeJSON(w, 200, out)
}
