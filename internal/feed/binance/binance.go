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
	DefaultHistoryDays    = 365
	MinHistoryDays        = 92
	MaxHistoryDays        = 20 * 366
	// perCall is the most candles a call answers.
	perCall = 1000
	// TickerWeight is what Binance counts a call of every pair's 24 h
	// tickers against an address's 6,000 a minute.
	TickerWeight = 80
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

// ConfigError is a Config that Validate refused: Field names the field.
type ConfigError struct {
	Field string // "BaseURL", "Quote", "CallsPerMinute" or "HistoryDays"
	Msg   string
}

func (e *ConfigError) Error() string { return e.Msg }

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
	u, err := url.Parse(cfg.BaseURL)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		return &ConfigError{"BaseURL", fmt.Sprintf("URL %q: want http(s)://host, such as %s", cfg.BaseURL, DefaultURL)}
	case !validAsset(cfg.Quote):
		return &ConfigError{"Quote", fmt.Sprintf("quote asset %q: 2 to 10 upper-case letters or digits, such as USDT", cfg.Quote)}
	case cfg.CallsPerMinute < 1 || cfg.CallsPerMinute > 6000:
		return &ConfigError{"CallsPerMinute", fmt.Sprintf("calls a minute %d: 1 to 6000", cfg.CallsPerMinute)}
	case cfg.HistoryDays < MinHistoryDays || cfg.HistoryDays > MaxHistoryDays:
		return &ConfigError{"HistoryDays", fmt.Sprintf("history days %d: %d to %d", cfg.HistoryDays, MinHistoryDays, MaxHistoryDays)}
	}
	return nil
}

func validAsset(s string) bool {
	if len(s) < 2 || len(s) > 10 {
		return false
	}
	for _, c := range []byte(s) {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// Feed reads Binance. Its methods are safe for concurrent use.
type Feed struct {
	c           *upstream.Client
	quote       string
	historyDays int
	now         func() time.Time
	log         *slog.Logger
	known       []coinpulse.CoinInfo // the bundled real coins

	mu       sync.Mutex
	listedAt time.Time         // where history begins: HistoryDays before the day of the last Universe
	pairs    map[string]string // pair ("BTCUSDT") → coin id, for the coins served
	supply   map[string]float64
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
		quote: cfg.Quote, historyDays: cfg.HistoryDays, now: cfg.Clock, log: cfg.Log, known: known,
	}, nil
}

// Name is "binance".
func (f *Feed) Name() string { return "binance" }

// Simulated is false: the figures are the market's.
func (f *Feed) Simulated() bool { return false }

// String identifies the way figures are derived, for the engine's saved
// state.
func (f *Feed) String() string { return "binance/v" + strconv.Itoa(version) + "(" + f.quote + ")" }

// RollupFromQuotes: History is a call a coin (see coinpulse.QuotedRollup).
func (f *Feed) RollupFromQuotes() bool { return true }

// Calls returns how many calls the feed has made.
func (f *Feed) Calls() int64 { return f.c.Calls() }

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
// over a day old is not trading.
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
	pairs, supply := map[string]string{}, map[string]float64{}
	for _, c := range f.known {
		pair := strings.ToUpper(c.Symbol) + f.quote
		if _, taken := pairs[pair]; taken || !live[pair] {
			continue
		}
		pairs[pair], supply[c.ID] = c.ID, c.CirculatingSupply
		c.ListedAt = listedAt
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("GET /api/v3/ticker/24hr: no bundled coin trades against %s", f.quote)
	}
	f.mu.Lock()
	f.listedAt, f.pairs, f.supply = listedAt, pairs, supply
	f.mu.Unlock()
	return out, nil
}

// Quotes returns the latest price and 24 h volume of every coin served
// whose pair still trades; a coin whose pair does not keeps its last
// quote.
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
		id, ok := pairs[t.Symbol]
		if !ok || t.LastPrice == 0 || now.Sub(t.CloseTime) >= day {
			continue
		}
		q := coinpulse.Quote{CoinID: id, Price: t.LastPrice, TotalVolume: t.QuoteVolume, Time: now}
		if !t.CloseTime.After(now) {
			q.Time = t.CloseTime
		}
		out = append(out, q)
	}
	return out, nil
}

// History returns a coin's points at interval in [from, to]: the opening
// price of the candle opening on each grid point, with the quote volume
// of the 24 hours before it (the day's candle before it, or the 24 hourly
// ones) and a market cap of price × circulating supply.
func (f *Feed) History(ctx context.Context, coin coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	f.mu.Lock()
	listedAt, supply := f.listedAt, f.supply[coin.ID]
	f.mu.Unlock()
	step := interval.Step()
	if from.Before(listedAt) {
		from = listedAt
	}
	from = from.UTC().Truncate(step)
	if to.Before(from) {
		return nil, nil
	}
	// The volume of the 24 hours before the first point: a day more.
	ks, err := f.klines(ctx, strings.ToUpper(coin.Symbol)+f.quote, interval, from.Add(-day), to)
	if err != nil {
		return nil, err
	}
	perDay := int(day / step)
	var out []coinpulse.HistoryPoint
	for i, k := range ks {
		t := time.UnixMilli(k.Open).UTC()
		if t.Before(from) || t.After(to) || !t.Equal(t.Truncate(step)) {
			continue
		}
		// The candles of the day before t, if they are all there.
		var vol float64
		if j := i - perDay; j >= 0 && ks[j].Open == k.Open-day.Milliseconds() {
			for _, x := range ks[j:i] {
				vol += x.QuoteVolume
			}
		}
		out = append(out, coinpulse.HistoryPoint{Timestamp: t, Price: k.OpenPrice, MarketCap: k.OpenPrice * supply, TotalVolume: vol})
	}
	return out, nil
}

// klines fetches a pair's candles opening in [from, to], 1,000 a call.
// A pair Binance does not know (delisted since Universe) has none.
func (f *Feed) klines(ctx context.Context, pair string, interval coinpulse.Interval, from, to time.Time) ([]Kline, error) {
	iv := map[coinpulse.Interval]string{coinpulse.Hourly: "1h", coinpulse.Daily: "1d"}[interval]
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
		ks := page
		for len(out) > 0 && len(ks) > 0 && ks[0].Open <= out[len(out)-1].Open {
			ks = ks[1:]
		}
		out = append(out, ks...)
		if len(page) < perCall || len(ks) == 0 {
			break
		}
		start = page[len(page)-1].Open + 1
	}
	return out, nil
}
