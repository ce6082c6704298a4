// Package binance is the market feed that reads Binance's public spot
// market data (https://developers.binance.com/docs/binance-spot-api-docs/rest-api):
// the prices of the bundled real coins (internal/feed/sim's universe.csv)
// that trade against USDT there. Binance knows pairs, not coins: their
// CoinGecko-style ids, names and circulating supplies come from the
// bundled list, and a market cap is Binance's price times that supply.
// Prices are in USDT, served as USD.
//
// Every refresh reads the 24 h tickers of every pair in one call
// (GET /api/v3/ticker/24hr?type=MINI), so that a pair delisted since the
// start makes no call fail. History comes from GET /api/v3/klines, whose
// candles open on the grid: a point is the price a candle opened at, and
// its volume the quote volume of the 24 hours before it.
package binance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"coinpulse"
	"coinpulse/internal/feed/sim"
	"coinpulse/internal/feed/upstream"
)

// DefaultURL is Binance's API; Binance.US, for clients in the United
// States, is https://api.binance.us.
const DefaultURL = "https://api.binance.com"

// Defaults and bounds of Config.
const (
	DefaultCallsPerMinute = 600 // Binance allows 6,000 request weight a minute; a candle call weighs 2, the tickers 80
	MaxCallsPerMinute     = 2500
	DefaultHistoryDays    = 365
	MinHistoryDays        = 92
	MaxHistoryDays        = 20 * 366
	// perCall is the most candles a call answers.
	perCall = 1000
	// WeightPerMinute is the request weight Binance lets an address
	// spend a minute; TickerWeight is what it counts a call of every
	// pair's 24 h tickers, KlineWeight a call of candles.
	WeightPerMinute = 6000
	TickerWeight    = 80
	KlineWeight     = 2
)

// version versions the way figures are derived: the engine's saved state
// is reused only by the same one.
const version = 1

const day = 24 * time.Hour

// Config configures a Feed.
type Config struct {
	BaseURL        string // default DefaultURL
	Quote          string // the quote asset (default USDT)
	CallsPerMinute int    // default 600
	HistoryDays    int    // days of daily history a first start fetches (default 365)
	RetryBase      time.Duration
	Attempts       int
	HTTP           *http.Client
	Clock          func() time.Time // default time.Now
	Log            *slog.Logger     // default slog.Default()
}

func (cfg Config) withDefaults() Config {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultURL
	}
	if cfg.Quote == "" {
		cfg.Quote = "USDT"
	}
	if cfg.CallsPerMinute == 0 {
		cfg.CallsPerMinute = DefaultCallsPerMinute
	}
	if cfg.HistoryDays == 0 {
		cfg.HistoryDays = DefaultHistoryDays
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return cfg
}

// Validate checks cfg as it is, zeros included.
func (cfg Config) Validate() error {
	switch {
	case !upstream.ValidURL(cfg.BaseURL):
		return upstream.Refuse("BaseURL", "URL %q: want http(s)://host, such as %s", cfg.BaseURL, DefaultURL)
	case !slices.Contains(USDQuotes, cfg.Quote):
		return upstream.Refuse("Quote", "quote asset %q: one of %s, whose prices are served as USD", cfg.Quote, strings.Join(USDQuotes, ", "))
	case cfg.CallsPerMinute < 1 || cfg.CallsPerMinute > MaxCallsPerMinute:
		return upstream.Refuse("CallsPerMinute", "calls a minute %d: 1 to %d (a candle call weighs 2 of the 6,000 an address may spend a minute)", cfg.CallsPerMinute, MaxCallsPerMinute)
	case cfg.HistoryDays < MinHistoryDays || cfg.HistoryDays > MaxHistoryDays:
		return upstream.Refuse("HistoryDays", "history days %d: %d to %d", cfg.HistoryDays, MinHistoryDays, MaxHistoryDays)
	}
	return nil
}

// USDQuotes are the quote assets whose prices can be served as USD: the
// dollar (Binance.US) and dollar stablecoins.
var USDQuotes = []string{"USDT", "USDC", "FDUSD", "TUSD", "USDP", "DAI", "USD"}

// renamed maps the bundled coins that trade on Binance under another ticker
// than their symbol: the pair's base asset, and how many tokens one unit
// of it is (Binance quotes Baby Doge per million).
var renamed = map[string]struct {
	base string
	per  float64
}{
	"ronin":          {"RONIN", 1},
	"beam-2":         {"BEAMX", 1},
	"bittorrent":     {"BTTC", 1},
	"baby-doge-coin": {"1MBABYDOGE", 1e6},
}

// pairOf returns the base asset of coin c's pair and the tokens a unit of
// it is.
func pairOf(c coinpulse.CoinInfo) (string, float64) {
	if r, ok := renamed[c.ID]; ok {
		return r.base, r.per
	}
	return strings.ToUpper(c.Symbol), 1
}

// Feed reads Binance. Its methods are safe for concurrent use.
type Feed struct {
	c           *upstream.Client
	quote       string
	historyDays int
	now         func() time.Time
	known       []coinpulse.CoinInfo // the bundled real coins

	base string // the API's host, for String

	mu       sync.Mutex
	listedAt time.Time        // where history begins at the earliest: HistoryDays before the day of the last Universe
	pairs    map[string]*pair // pair ("BTCUSDT") → the coin it prices, for the coins served
	byID     map[string]*pair
}

// pair is a coin served and the pair that prices it.
type pair struct {
	id, symbol string
	per        float64 // tokens a unit of the pair's base asset is
	supply     float64 // circulating
}

var _ coinpulse.Feed = (*Feed)(nil)

// New returns a feed for cfg, its zero fields set to their defaults; it
// makes no call.
func New(cfg Config) (*Feed, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	known, err := sim.RealCoins()
	if err != nil {
		return nil, err
	}
	return &Feed{
		c: upstream.New(upstream.Config{
			Name: "binance", BaseURL: cfg.BaseURL, CallsPerMinute: cfg.CallsPerMinute,
			RetryBase: cfg.RetryBase, Attempts: cfg.Attempts, HTTP: cfg.HTTP, Log: cfg.Log, Message: apiError,
		}),
		quote: cfg.Quote, historyDays: cfg.HistoryDays, now: cfg.Clock, known: known,
		base: strings.TrimSuffix(cfg.BaseURL, "/"),
	}, nil
}

// Name is "binance".
func (f *Feed) Name() string { return "binance" }

// Simulated is false: the figures are the market's.
func (f *Feed) Simulated() bool { return false }

// String identifies the way figures are derived, for the engine's saved
// state.
func (f *Feed) String() string {
	return "binance/v" + strconv.Itoa(version) + "(" + f.quote + " at " + f.base + ")"
}

// RollupFromQuotes: History is a call a coin (see coinpulse.QuotedRollup).
func (f *Feed) RollupFromQuotes() bool { return true }

// tickers reads the 24 h tickers of every pair.
func (f *Feed) tickers(ctx context.Context) ([]Ticker, error) {
	body, err := f.c.Get(ctx, "/api/v3/ticker/24hr", url.Values{"type": {"MINI"}})
	if err != nil {
		return nil, err
	}
	ts, err := ParseTickers(body)
	if err != nil {
		return nil, fmt.Errorf("GET /api/v3/ticker/24hr: %w", err)
	}
	return ts, nil
}

// Universe returns the bundled real coins that trade against the quote
// asset now, in the bundled order (largest first). A symbol shared by
// several bundled coins is the largest one's. A pair whose last trade is
// over a day old is not trading. A coin's history begins at its bundled
// listing, or HistoryDays ago if that is later.
func (f *Feed) Universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	ts, err := f.tickers(ctx)
	if err != nil {
		return nil, err
	}
	now := f.now()
	live := map[string]bool{}
	for _, t := range ts {
		if t.LastPrice > 0 && now.Sub(t.CloseTime) < day {
			live[t.Symbol] = true
		}
	}
	listedAt := now.UTC().Truncate(day).Add(-time.Duration(f.historyDays) * day)
	var out []coinpulse.CoinInfo
	pairs, byID := map[string]*pair{}, map[string]*pair{}
	for _, c := range f.known {
		base, per := pairOf(c)
		symbol := base + f.quote
		if _, taken := pairs[symbol]; taken || !live[symbol] {
			continue
		}
		p := &pair{id: c.ID, symbol: symbol, per: per, supply: c.CirculatingSupply}
		pairs[symbol], byID[c.ID] = p, p
		if c.ListedAt.Before(listedAt) {
			c.ListedAt = listedAt
		} else {
			c.ListedAt = c.ListedAt.UTC().Truncate(day).Add(day) // its first whole day
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("GET /api/v3/ticker/24hr: no bundled coin trades against %s", f.quote)
	}
	f.mu.Lock()
	f.listedAt, f.pairs, f.byID = listedAt, pairs, byID
	f.mu.Unlock()
	return out, nil
}

// Quotes returns the latest price and 24 h volume of every coin served
// whose pair still trades; a coin whose pair does not has none.
func (f *Feed) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	ts, err := f.tickers(ctx)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	pairs := f.pairs
	f.mu.Unlock()
	out := make([]coinpulse.Quote, 0, len(pairs))
	for _, t := range ts {
		p, ok := pairs[t.Symbol]
		if !ok || t.LastPrice == 0 || now.Sub(t.CloseTime) >= day {
			continue
		}
		// A pair that trades has a volume: 0 is one Binance did not send
		// as a decimal.
		q := coinpulse.Quote{CoinID: p.id, Price: t.LastPrice / p.per, TotalVolume: t.QuoteVolume, NoVolume: t.QuoteVolume == 0, Time: now}
		if !t.CloseTime.After(now) {
			q.Time = t.CloseTime
		}
		out = append(out, q)
	}
	return out, nil
}

// History returns a coin's points at interval in [from, to]: the opening
// price of the candle opening on each grid point (a missing candle is
// interpolated between its neighbours, or left out past one step), with
// the quote volume of the candles of the 24 hours before it and a market
// cap of price × circulating supply.
func (f *Feed) History(ctx context.Context, coin coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	f.mu.Lock()
	p := f.byID[coin.ID]
	if from.Before(f.listedAt) {
		from = f.listedAt
	}
	f.mu.Unlock()
	if p == nil {
		return nil, nil
	}
	step := interval.Step()
	if g := from.UTC().Truncate(step); g.Before(from) {
		from = g.Add(step)
	}
	if to.Before(from) {
		return nil, nil
	}
	// The volume of the 24 hours before the first point: a day more;
	// and a step after the last, to interpolate over a missing candle.
	ks, err := f.klines(ctx, p.symbol, interval, from.Add(-day), to.Add(step))
	if err != nil {
		return nil, err
	}
	samples := make([]upstream.Sample, len(ks))
	for i, k := range ks {
		samples[i] = upstream.Sample{T: k.Open, Price: k.OpenPrice / p.per}
	}
	pts := upstream.Resample(samples, step, from, to)
	// Each point's volume: the candles opening in [t − 24 h, t).
	lo, hi, vol := 0, 0, 0.0
	for i := range pts {
		t := pts[i].Timestamp.UnixMilli()
		for ; hi < len(ks) && ks[hi].Open < t; hi++ {
			vol += ks[hi].QuoteVolume
		}
		for ; lo < hi && ks[lo].Open < t-day.Milliseconds(); lo++ {
			vol -= ks[lo].QuoteVolume
		}
		pts[i].TotalVolume = max(vol, 0)
		pts[i].MarketCap = pts[i].Price * p.supply
	}
	return pts, nil
}

// klines fetches a pair's candles opening in [from, to], 1,000 a call.
// A pair Binance does not know (delisted since Universe) has none.
func (f *Feed) klines(ctx context.Context, pair string, interval coinpulse.Interval, from, to time.Time) ([]Kline, error) {
	iv := "1h"
	if interval == coinpulse.Daily {
		iv = "1d"
	}
	var out []Kline
	for start := from.UnixMilli(); start <= to.UnixMilli(); {
		q := url.Values{"symbol": {pair}, "interval": {iv}, "startTime": {strconv.FormatInt(start, 10)},
			"endTime": {strconv.FormatInt(to.UnixMilli(), 10)}, "limit": {strconv.Itoa(perCall)}}
		body, err := f.c.Get(ctx, "/api/v3/klines", q)
		if se := (*upstream.StatusError)(nil); errors.As(err, &se) && se.Status == http.StatusBadRequest && strings.Contains(se.Message, "-1121") {
			return nil, nil // Invalid symbol: delisted
		}
		if err != nil {
			return nil, err
		}
		page, err := ParseKlines(body)
		if err != nil {
			return nil, fmt.Errorf("GET /api/v3/klines %s: %w", pair, err)
		}
		ks := page.Klines
		for len(out) > 0 && len(ks) > 0 && ks[0].Open <= out[len(out)-1].Open {
			ks = ks[1:]
		}
		out = append(out, ks...)
		if page.Sent < perCall || page.LastOpen < start {
			break
		}
		start = page.LastOpen + 1
	}
	return out, nil
}
