// Package cgtest stands in for CoinGecko's API in tests, which must not
// depend on a live upstream: it answers GET /coins/markets and
// GET /coins/{id}/market_chart/range in CoinGecko's shapes (as
// ../shared/fixtures/coingecko records them), at CoinGecko's documented
// granularity (5-minute points for a day up to the present, hourly ones,
// a few minutes past the hour, for a day in the past and up to 90 days,
// daily ones at 00:00 UTC beyond; the latest price last when the span
// reaches the present), with its
// refusals (an unknown coin, a span beyond a free key's 365 days, a
// missing key, 429 when told to), and figures that are a pure function of
// the coin and the instant, so that a test knows what the feed must serve.
package cgtest

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Coin is a coin the stand-in serves.
type Coin struct {
	ID, Symbol, Name string
	Price            float64 // around which the price moves
	Supply           float64 // circulating
	MaxSupply        float64 // 0: none
}

// Coins returns n coins, the first ones real (bitcoin, ethereum, …), the
// rest named coin-<i>, in decreasing market cap.
func Coins(n int) []Coin {
	real := []Coin{
		{"bitcoin", "btc", "Bitcoin", 77000, 20_000_000, 21_000_000},
		{"ethereum", "eth", "Ethereum", 3000, 120_000_000, 0},
		{"tether", "usdt", "Tether", 1, 150_000_000_000, 0},
		{"solana", "sol", "Solana", 150, 500_000_000, 0},
	}
	var out []Coin
	for i := range n {
		if i < len(real) {
			out = append(out, real[i])
			continue
		}
		out = append(out, Coin{fmt.Sprintf("coin-%d", i), fmt.Sprintf("c%d", i), fmt.Sprintf("Coin %d", i), 10 / float64(i), 1e9, 2e9})
	}
	return out
}

// Upstream is a running stand-in.
type Upstream struct {
	URL string // the API's root, as Config.BaseURL takes it
	// Key, when set, must come in x-cg-demo-api-key.
	Key string
	// MaxDays is how far back a range may start (default 365).
	MaxDays int
	// Now is the upstream's clock (default time.Now).
	Now func() time.Time
	// ChartDelay slows every chart answer down, as CoinGecko's rate
	// does a backfill.
	ChartDelay time.Duration
	// GlobalStatus, when set, is GET /global's status, with CoinGecko's
	// error body; GlobalGate, when set, holds each /global answer until
	// it is closed. Set them before the first call.
	GlobalStatus int
	GlobalGate   chan struct{}

	srv   *httptest.Server
	coins []Coin

	mu      sync.Mutex
	calls   map[string]int // by kind: "markets", "chart", "global"
	tooMany int            // the next calls answered 429
	broken  map[string]int // coin id → 500s still to answer
	gone    map[string]bool
	nullPx  map[string]bool
	nullVol map[string]bool
	noCap   map[string]bool
}

// Start serves coins until the test ends.
func Start(t testing.TB, coins []Coin) *Upstream {
	u := &Upstream{coins: coins, MaxDays: 365, Now: time.Now, calls: map[string]int{}, broken: map[string]int{}, gone: map[string]bool{}, nullPx: map[string]bool{}, nullVol: map[string]bool{}, noCap: map[string]bool{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	u.URL = u.srv.URL + "/api/v3"
	return u
}

// Calls returns how many calls of a kind ("markets" or "chart") were
// answered, refusals included.
func (u *Upstream) Calls(kind string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[kind]
}

// TooMany makes the next n calls answer 429 with Retry-After: 1.
func (u *Upstream) TooMany(n int) {
	u.mu.Lock()
	u.tooMany = n
	u.mu.Unlock()
}

// Break makes the next n chart calls of coin id answer 500.
func (u *Upstream) Break(id string, n int) {
	u.mu.Lock()
	u.broken[id] = n
	u.mu.Unlock()
}

// Delist makes CoinGecko forget coin id: its chart is a 404, and markets
// leave it out.
func (u *Upstream) Delist(id string) { u.mark(u.gone, id) }

// NullPrice makes markets send coin id's current_price as null.
func (u *Upstream) NullPrice(id string) { u.mark(u.nullPx, id) }

// NullVolume makes markets send coin id's total_volume as null.
func (u *Upstream) NullVolume(id string) { u.mark(u.nullVol, id) }

// NoCap makes coin id one whose market cap CoinGecko does not know, as
// it sends some small coins: a market cap of 0 and a null circulating
// supply in markets, market caps of 0 in charts.
func (u *Upstream) NoCap(id string) { u.mark(u.noCap, id) }

func (u *Upstream) mark(set map[string]bool, id string) {
	u.mu.Lock()
	set[id] = true
	u.mu.Unlock()
}

// Price is coin c's price at t: a weekly and a daily wave around
// c.Price, different for each coin.
func Price(c Coin, t time.Time) float64 {
	phase := 0.0
	for _, b := range []byte(c.ID) {
		phase += float64(b)
	}
	s := float64(t.UnixMilli()) / 1000
	return c.Price * math.Exp(0.1*math.Sin(2*math.Pi*s/(7*86400)+phase)+0.02*math.Sin(2*math.Pi*s/86400+2*phase))
}

// Markets is the count of exchanges GET /global answers.
const Markets = 1476

// Volume is coin c's 24 h volume at t.
func Volume(c Coin, t time.Time) float64 { return 0.03 * Price(c, t) * c.Supply }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, "/api/v3/")
	if !ok {
		writeJSON(w, 404, map[string]string{"error": "Not Found"})
		return
	}
	kind := "chart"
	switch path {
	case "coins/markets":
		kind = "markets"
	case "global":
		kind = "global"
	}
	u.mu.Lock()
	u.calls[kind]++
	tooMany := u.tooMany > 0
	if tooMany {
		u.tooMany--
	}
	u.mu.Unlock()
	switch {
	case tooMany:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, map[string]any{"status": map[string]any{"error_code": 429, "error_message": "You've exceeded the Rate Limit. Please visit https://www.coingecko.com/en/api/pricing to subscribe to our API plans for higher rate limits."}})
	case u.Key != "" && r.Header.Get("x-cg-demo-api-key") != u.Key:
		writeJSON(w, 401, map[string]any{"status": map[string]any{"error_code": 10002, "error_message": "API Key Missing"}})
	case kind == "global" && u.GlobalStatus != 0:
		writeJSON(w, u.GlobalStatus, map[string]string{"error": http.StatusText(u.GlobalStatus)})
	case kind == "global":
		if u.GlobalGate != nil {
			<-u.GlobalGate
		}
		writeJSON(w, 200, map[string]any{"data": map[string]any{
			"active_cryptocurrencies": len(u.coins), "markets": Markets,
			"total_market_cap": map[string]float64{"usd": 2.6e12}, "updated_at": u.Now().Unix(),
		}})
	case r.URL.Query().Get("vs_currency") != "usd":
		writeJSON(w, 400, map[string]any{"error": "invalid vs_currency"})
	case kind == "markets":
		u.markets(w, r)
	default:
		id, ok := strings.CutSuffix(strings.TrimPrefix(path, "coins/"), "/market_chart/range")
		if !ok || strings.Contains(id, "/") {
			writeJSON(w, 404, map[string]string{"error": "Not Found"})
			return
		}
		u.chart(w, r, id)
	}
}

func (u *Upstream) coin(id string) (Coin, bool) {
	u.mu.Lock()
	gone := u.gone[id]
	u.mu.Unlock()
	for _, c := range u.coins {
		if c.ID == id && !gone {
			return c, true
		}
	}
	return Coin{}, false
}

func (u *Upstream) markets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := u.Now().UTC()
	perPage, err1 := strconv.Atoi(q.Get("per_page"))
	page, err2 := strconv.Atoi(q.Get("page"))
	if err1 != nil || err2 != nil || perPage < 1 || perPage > 250 || page < 1 {
		writeJSON(w, 400, map[string]any{"error": "invalid per_page or page"})
		return
	}
	var list []Coin
	for _, c := range u.coins {
		if _, ok := u.coin(c.ID); ok {
			list = append(list, c)
		}
	}
	if ids := q.Get("ids"); ids != "" {
		want := strings.Split(ids, ",")
		list = slices.DeleteFunc(list, func(c Coin) bool { return !slices.Contains(want, c.ID) })
	}
	mcap := func(c Coin) float64 { return Price(c, now) * c.Supply }
	slices.SortStableFunc(list, func(a, b Coin) int {
		switch x, y := mcap(a), mcap(b); {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return 0
	})
	items := []map[string]any{}
	for i := (page - 1) * perPage; i < min(page*perPage, len(list)); i++ {
		c := list[i]
		u.mu.Lock()
		null, nullVol, noCap := u.nullPx[c.ID], u.nullVol[c.ID], u.noCap[c.ID]
		u.mu.Unlock()
		p := Price(c, now)
		it := map[string]any{
			"id": c.ID, "symbol": c.Symbol, "name": c.Name,
			"image":                   "https://coin-images.coingecko.com/coins/images/1/large/" + c.ID + ".png",
			"current_price":           p,
			"market_cap":              p * c.Supply,
			"market_cap_rank":         i + 1,
			"total_volume":            Volume(c, now),
			"circulating_supply":      c.Supply,
			"total_supply":            c.Supply,
			"max_supply":              nil,
			"fully_diluted_valuation": nil,
			"roi":                     nil,
			"last_updated":            now.Add(-20 * time.Second).Format("2006-01-02T15:04:05.000Z"),
		}
		if null {
			it["current_price"] = nil
		}
		if nullVol {
			it["total_volume"] = nil
		}
		if noCap {
			it["market_cap"], it["market_cap_rank"], it["circulating_supply"] = 0, nil, nil
		}
		if c.MaxSupply > 0 {
			it["max_supply"] = c.MaxSupply
			it["fully_diluted_valuation"] = p * c.MaxSupply
		}
		items = append(items, it)
	}
	writeJSON(w, 200, items)
}

// Offsets of the stand-in's points from the grid, as CoinGecko's lie off
// it.
const (
	HourlyOffset  = 137 * time.Second
	FiveMinOffset = 17 * time.Second
)

func (u *Upstream) chart(w http.ResponseWriter, r *http.Request, id string) {
	time.Sleep(u.ChartDelay)
	c, ok := u.coin(id)
	if !ok {
		writeJSON(w, 404, map[string]string{"error": "coin not found"})
		return
	}
	u.mu.Lock()
	broken, noCap := u.broken[id] > 0, u.noCap[id]
	if broken {
		u.broken[id]--
	}
	u.mu.Unlock()
	if broken {
		writeJSON(w, 500, map[string]string{"error": "internal error"})
		return
	}
	q := r.URL.Query()
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	to, err2 := strconv.ParseInt(q.Get("to"), 10, 64)
	now := u.Now().UTC()
	switch {
	case err1 != nil || err2 != nil || to < from:
		writeJSON(w, 400, map[string]any{"error": "invalid from or to"})
		return
	case time.Unix(from, 0).Before(now.AddDate(0, 0, -u.MaxDays)):
		writeJSON(w, 401, map[string]any{"error": map[string]any{"status": map[string]any{
			"timestamp": now.Format(time.RFC3339), "error_code": 10012,
			"error_message": "Your request exceeds the allowed time range. Public API users are limited to querying historical data within the past 365 days.",
		}}})
		return
	}
	a, b := time.Unix(from, 0).UTC(), time.Unix(to, 0).UTC()
	if b.After(now) {
		b = now
	}
	// CoinGecko's granularity: 5-minute points for a day up to the
	// present, hourly ones for a day in the past and up to 90 days,
	// daily ones (00:00 UTC) beyond; an answer reaching the present ends
	// with the latest price, at the moment asked.
	present := !time.Unix(to, 0).Before(now.Add(-time.Minute)) // to is in seconds: a call ending now asks a moment before it
	var times []time.Time
	switch span := b.Sub(a); {
	case span <= 24*time.Hour && present:
		for t := a.Truncate(5 * time.Minute).Add(FiveMinOffset); !t.After(b); t = t.Add(5 * time.Minute) {
			times = append(times, t)
		}
	case span <= 90*24*time.Hour:
		for t := a.Truncate(time.Hour).Add(HourlyOffset); !t.After(b); t = t.Add(time.Hour) {
			times = append(times, t)
		}
	default:
		for t := a.Truncate(24 * time.Hour); !t.After(b); t = t.Add(24 * time.Hour) {
			times = append(times, t)
		}
	}
	if present && (len(times) == 0 || b.After(times[len(times)-1])) {
		times = append(times, b)
	}
	times = slices.DeleteFunc(times, func(t time.Time) bool { return t.Before(a) })
	prices, caps, vols := [][2]float64{}, [][2]float64{}, [][2]float64{}
	for _, t := range times {
		ms := float64(t.UnixMilli())
		p := Price(c, t)
		prices = append(prices, [2]float64{ms, p})
		if noCap {
			caps = append(caps, [2]float64{ms, 0})
		} else {
			caps = append(caps, [2]float64{ms, p * c.Supply})
		}
		vols = append(vols, [2]float64{ms, Volume(c, t)})
	}
	writeJSON(w, 200, map[string]any{"prices": prices, "market_caps": caps, "total_volumes": vols})
}
