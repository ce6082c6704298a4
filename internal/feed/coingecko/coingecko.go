// Package coingecko is the market feed that reads CoinGecko's public API
// (https://docs.coingecko.com/v3.0.1/reference/introduction): the universe
// is the largest coins by market cap when the feed starts, their prices
// come from GET /coins/markets (250 coins a call) on every refresh, and
// their history from GET /coins/{id}/market_chart/range.
//
// CoinGecko limits the calls a key makes a minute (about 30 for a free
// "demo" key, 500 and more on paid plans), so the feed spaces its calls to
// Config.CallsPerMinute and waits out a 429 for as long as its Retry-After
// asks. A first start backfills every coin: three calls each (CoinGecko
// answers hourly points for a span of at most 90 days, so the 90 days of
// hourly history take two, the daily history a third). A gap since the
// last run takes one call a coin: the hourly points it brings give the
// daily ones too.
//
// CoinGecko's points lie off the grid the engine stores (hourly ones some
// minutes past the hour); Resample maps them onto it.
package coingecko

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
	"coinpulse/internal/feed/upstream"
)

// DefaultURL is CoinGecko's public API. A paid plan's is
// https://pro-api.coingecko.com/api/v3.
const DefaultURL = "https://api.coingecko.com/api/v3"

// Defaults and bounds of Config.
const (
	DefaultCoins = 100
	MaxCoins     = 5000
	// DefaultCallsPerMinute stays under a free demo key's 30, which
	// CoinGecko counts by the minute: calls spaced evenly at exactly 30
	// would meet a 429 on the first jitter.
	DefaultCallsPerMinute = 25
	DefaultHistoryDays    = 365
	// MinHistoryDays keeps the hourly window (90 days) and the 30-day
	// change within the history fetched.
	MinHistoryDays = 92
	MaxHistoryDays = 20 * 366
)

// perPage is the most coins GET /coins/markets answers in one call.
const perPage = 250

// version versions the way figures are derived from CoinGecko's: the
// engine's saved state is reused only by the same one (see String).
const version = 1

const day = 24 * time.Hour

// Config configures a Feed.
type Config struct {
	// BaseURL is the API's root (default DefaultURL).
	BaseURL string
	// APIKey is sent as x-cg-pro-api-key when BaseURL's host is
	// pro-api.coingecko.com, else as x-cg-demo-api-key. Empty: none.
	APIKey string
	// Coins is how many of the largest coins are served (default 100).
	Coins int
	// CallsPerMinute spaces the calls (default 25).
	CallsPerMinute int
	// HistoryDays is how far back a first start fetches daily history
	// (default 365: CoinGecko's free keys reach no further).
	HistoryDays int
	// HTTP is the client calls go through (default: one with a 30 s
	// timeout).
	HTTP *http.Client
	// RetryBase is the first pause before retrying a failed call, doubled
	// on each further attempt (default 2 s; tests shorten it).
	RetryBase time.Duration
	// Attempts is how many times a call is tried (default 6).
	Attempts int
	// Clock is the time (default time.Now).
	Clock func() time.Time
	// Log receives the feed's warnings: coins left out, 429s (default
	// slog.Default()).
	Log *slog.Logger
}

// Feed reads CoinGecko. Its methods are safe for concurrent use.
type Feed struct {
	c           *upstream.Client
	coins       int
	historyDays int
	now         func() time.Time
	log         *slog.Logger

	mu sync.Mutex
	// listedAt is where the history of every coin begins: the day
	// HistoryDays − 2 days before the day of the last Universe. The first
	// call asks from a day before it, and no call reaches HistoryDays
	// back (CoinGecko's free keys reach 365 days, to the second).
	listedAt time.Time
	universe []string           // ids, in the order Universe returned them
	charts   map[string]fetched // the hourly chart just fetched per coin, until its daily points are asked for
	// markets is CoinGecko's count of exchanges (0: not known yet), read
	// from /global at most every marketsEvery, by one read at a time.
	markets     int
	marketsAt   time.Time
	marketsRead bool
}

// marketsEvery is how often Quotes reads CoinGecko's count of markets:
// a call an hour, next to 60 for the quotes of 250 coins every minute; a
// read that failed is tried again marketsRetry later.
const (
	marketsEvery = time.Hour
	marketsRetry = 5 * time.Minute
)

// fetched is a chart CoinGecko answered for [from, to].
type fetched struct {
	from, to time.Time
	samples  []upstream.Sample
}

var (
	_ coinpulse.Feed            = (*Feed)(nil)
	_ coinpulse.MarketCounter   = (*Feed)(nil)
	_ coinpulse.UniverseAdopter = (*Feed)(nil)
)

// withDefaults fills in the fields left zero.
func (cfg Config) withDefaults() Config {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultURL
	}
	if cfg.Coins == 0 {
		cfg.Coins = DefaultCoins
	}
	if cfg.CallsPerMinute == 0 {
		cfg.CallsPerMinute = DefaultCallsPerMinute
	}
	if cfg.HistoryDays == 0 {
		cfg.HistoryDays = DefaultHistoryDays
	}
	return cfg
}

// Validate checks cfg as it is, zeros included (New fills them in
// first): an *upstream.ConfigError names the field refused.
func (cfg Config) Validate() error {
	switch {
	case !upstream.ValidURL(cfg.BaseURL):
		return upstream.Refuse("BaseURL", "URL %q: want http(s)://host/path, such as %s", cfg.BaseURL, DefaultURL)
	case cfg.Coins < 1 || cfg.Coins > MaxCoins:
		return upstream.Refuse("Coins", "coins %d: 1 to %d", cfg.Coins, MaxCoins)
	case cfg.CallsPerMinute < 1 || cfg.CallsPerMinute > 60_000:
		return upstream.Refuse("CallsPerMinute", "calls a minute %d: 1 to 60000", cfg.CallsPerMinute)
	case cfg.HistoryDays < MinHistoryDays || cfg.HistoryDays > MaxHistoryDays:
		return upstream.Refuse("HistoryDays", "history days %d: %d to %d", cfg.HistoryDays, MinHistoryDays, MaxHistoryDays)
	case strings.ContainsAny(cfg.APIKey, "\r\n"):
		return upstream.Refuse("APIKey", "the API key holds a line break")
	}
	return nil
}

// New returns a feed for cfg, its zero fields set to their defaults; it
// makes no call.
func New(cfg Config) (*Feed, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.BaseURL)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	header := http.Header{}
	if cfg.APIKey != "" {
		name := "x-cg-demo-api-key"
		if strings.HasPrefix(u.Hostname(), "pro-api.") {
			name = "x-cg-pro-api-key"
		}
		header.Set(name, cfg.APIKey)
	}
	return &Feed{
		c: upstream.New(upstream.Config{
			Name: "coingecko", BaseURL: cfg.BaseURL, Header: header, CallsPerMinute: cfg.CallsPerMinute,
			RetryBase: cfg.RetryBase, Attempts: cfg.Attempts, HTTP: cfg.HTTP, Log: cfg.Log, Message: upstreamError,
		}),
		coins:       cfg.Coins,
		historyDays: cfg.HistoryDays,
		now:         cfg.Clock,
		log:         cfg.Log,
		charts:      map[string]fetched{},
	}, nil
}

// Name is "coingecko".
func (f *Feed) Name() string { return "coingecko" }

// Simulated is false: the figures are the market's.
func (f *Feed) Simulated() bool { return false }

// String identifies the way figures are derived, for the engine's saved
// state: not the coins served, whose count an operator may change and
// keep the history of those it still serves.
func (f *Feed) String() string { return "coingecko/v" + strconv.Itoa(version) }

// RollupFromQuotes tells the engine to take an hour's point from the
// latest quotes when a refresh came late, rather than ask History for
// every coin: a call a coin at CoinGecko's rate.
func (f *Feed) RollupFromQuotes() bool { return true }

// BackfillCalls is how many calls a first start's backfill of n coins
// makes.
func BackfillCalls(n int) int { return 3 * n }

// Universe returns the Config.Coins largest coins by market cap.
func (f *Feed) Universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	var all []Market
	var skipped []string
	seen := map[string]bool{}
	for page := 1; len(all) < f.coins && page <= MaxCoins/perPage+2; page++ {
		q := url.Values{
			"vs_currency": {"usd"}, "order": {"market_cap_desc"},
			"per_page": {strconv.Itoa(min(perPage, f.coins))}, "page": {strconv.Itoa(page)},
			"precision": {"full"},
		}
		body, err := f.c.Get(ctx, "/coins/markets", q)
		if err != nil {
			return nil, err
		}
		ms, skip, err := ParseMarkets(body)
		if err != nil {
			return nil, fmt.Errorf("GET /coins/markets page %d: %w", page, err)
		}
		skipped = append(skipped, skip...)
		for _, m := range ms {
			if !seen[m.ID] && len(all) < f.coins {
				seen[m.ID] = true
				all = append(all, m)
			}
		}
		if len(ms)+len(skip) < min(perPage, f.coins) {
			break // the last page
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("GET /coins/markets: no coin")
	}
	if len(skipped) > 0 {
		f.log.Warn("coingecko: coins left out of the universe (an id that cannot be a path segment, an empty name or symbol, a malformed entry)",
			"coins", len(skipped), "first", skipped[:min(len(skipped), 5)])
	}
	infos := make([]coinpulse.CoinInfo, len(all))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listedAt = f.historyStart()
	f.universe = f.universe[:0]
	for i, m := range all {
		infos[i] = coinpulse.CoinInfo{
			ID: m.ID, Symbol: m.Symbol, Name: m.Name,
			TotalSupply: m.TotalSupply, MaxSupply: m.MaxSupply,
			ListedAt: f.listedAt,
		}
		if m.CirculatingSupply != nil {
			infos[i].CirculatingSupply = *m.CirculatingSupply
		}
		f.universe = append(f.universe, m.ID)
	}
	return infos, nil
}

// historyStart is where the history of the coins of a universe taken now
// begins: HistoryDays − 2 days before today.
func (f *Feed) historyStart() time.Time {
	return f.now().UTC().Truncate(day).Add(-time.Duration(f.historyDays-2) * day)
}

// UniverseKey is the feed's fingerprint and its count of coins: nodes
// asking for as many coins may serve one set (coinpulse.UniverseAdopter),
// each with the history it is set to fetch (HistoryDays).
func (f *Feed) UniverseKey() string { return f.String() + ":coins=" + strconv.Itoa(f.coins) }

// Adopt serves coins, a universe another node (or an earlier start) took
// from CoinGecko, instead of taking one now (coinpulse.UniverseAdopter).
// Their history begins where this node's would (HistoryDays back from
// today), whatever the chooser's settings. It refuses, changing nothing,
// a set of more coins than Config.Coins, or with a coin ParseMarkets
// would have left out (an id, a symbol or a name it refuses, a supply
// past what a figure can be).
func (f *Feed) Adopt(coins []coinpulse.CoinInfo) ([]coinpulse.CoinInfo, error) {
	if len(coins) == 0 || len(coins) > f.coins {
		return nil, fmt.Errorf("coingecko: a universe of %d coins, not 1 to %d", len(coins), f.coins)
	}
	out := slices.Clone(coins)
	seen := make(map[string]bool, len(coins))
	for _, c := range out {
		supply := c.CirculatingSupply
		ok := validID(c.ID) && !seen[c.ID] && validText(c.Name, 200) && validText(c.Symbol, 64) &&
			c.Symbol == strings.ToLower(c.Symbol) && c.Name == strings.TrimSpace(c.Name) && c.Symbol == strings.TrimSpace(c.Symbol) &&
			amount(&supply) != nil && (c.TotalSupply == nil || amount(c.TotalSupply) != nil) && (c.MaxSupply == nil || amount(c.MaxSupply) != nil)
		if !ok {
			return nil, fmt.Errorf("coingecko: a universe with coin %q, which CoinGecko's answers cannot hold", upstream.Cut(c.ID, 40))
		}
		seen[c.ID] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listedAt = f.historyStart()
	f.universe = f.universe[:0]
	for i := range out {
		out[i].ListedAt = f.listedAt
		f.universe = append(f.universe, out[i].ID)
	}
	return out, nil
}

// Quotes returns the latest figures of the universe's coins, 250 a call.
// A coin CoinGecko no longer answers for, or answers with no price, has
// no quote: it keeps its last one.
func (f *Feed) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	f.mu.Lock()
	ids := append([]string(nil), f.universe...)
	f.mu.Unlock()
	var out []coinpulse.Quote
	for len(ids) > 0 {
		n := min(perPage, len(ids))
		q := url.Values{
			"vs_currency": {"usd"}, "ids": {strings.Join(ids[:n], ",")},
			"per_page": {strconv.Itoa(perPage)}, "page": {"1"}, "precision": {"full"},
		}
		ids = ids[n:]
		body, err := f.c.Get(ctx, "/coins/markets", q)
		if err != nil {
			return nil, err
		}
		ms, _, err := ParseMarkets(body)
		if err != nil {
			return nil, fmt.Errorf("GET /coins/markets: %w", err)
		}
		for _, m := range ms {
			if m.CurrentPrice == nil {
				continue
			}
			qt := coinpulse.Quote{CoinID: m.ID, Price: *m.CurrentPrice, Time: now}
			if m.TotalVolume != nil {
				qt.TotalVolume = *m.TotalVolume
			} else {
				qt.NoVolume = true
			}
			if m.MarketCap != nil {
				qt.MarketCap = *m.MarketCap
			}
			if !m.LastUpdated.IsZero() && !m.LastUpdated.After(now) {
				qt.Time = m.LastUpdated
			}
			out = append(out, qt)
		}
	}
	f.readMarkets(ctx, now)
	return out, nil
}

// readMarkets starts a read of CoinGecko's count of markets when the last
// is marketsEvery old, or none was made, and none is under way. It runs
// on its own, so that its call (retried, as every call, through a failing
// upstream: a minute or more) never holds the quotes up; the snapshots
// after it ends carry the count. A failure is logged, the last count
// kept, and the read tried again marketsRetry later.
func (f *Feed) readMarkets(ctx context.Context, now time.Time) {
	f.mu.Lock()
	due := !f.marketsRead && (f.marketsAt.IsZero() || now.Sub(f.marketsAt) >= marketsEvery)
	if due {
		f.marketsAt, f.marketsRead = now, true
	}
	f.mu.Unlock()
	if !due {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), marketsRetry)
		defer cancel()
		body, err := f.c.Get(ctx, "/global", nil)
		var n int
		if err == nil {
			n, err = ParseGlobal(body)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.marketsRead = false
		if err != nil {
			f.marketsAt = now.Add(marketsRetry - marketsEvery)
			f.log.Warn("coingecko: the count of markets (GET /global) failed; trying again in 5 minutes", "err", err)
			return
		}
		f.markets = n
	}()
}

// Markets returns CoinGecko's count of exchanges, as of the last hourly
// read (coinpulse.MarketCounter); ok is false before the first.
func (f *Feed) Markets() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.markets, f.markets > 0
}

// History returns a coin's points at interval in [from, to]. Daily points
// inside the last hourly chart fetched for the coin come from it, without
// a call: the engine asks for a gap's hourly points, then its daily ones.
// A coin CoinGecko does not know (delisted since Universe) has none.
func (f *Feed) History(ctx context.Context, coin coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	now := f.now()
	f.mu.Lock()
	from = maxTime(from, f.listedAt)
	cached, ok := f.charts[coin.ID]
	if interval == coinpulse.Daily {
		delete(f.charts, coin.ID) // asked for once; memory is the universe's otherwise
	}
	f.mu.Unlock()
	if to.Before(from) {
		return nil, nil
	}
	step := interval.Step()
	if interval == coinpulse.Daily && ok && !from.Before(cached.from) && !to.After(cached.to) {
		return upstream.Resample(cached.samples, step, from, to), nil
	}
	// Ask from a step before from and to a step after to (or now), so
	// that the grid points at both ends lie between two samples; but
	// never HistoryDays back or more, which a free key is refused.
	lo := maxTime(from.Add(-step), now.Add(-time.Duration(f.historyDays)*day+time.Minute))
	hi := minTime(to.Add(step), now)
	if hi.Before(lo) {
		return nil, nil
	}
	samples, err := f.chart(ctx, coin.ID, lo, hi, interval)
	if err != nil {
		return nil, err
	}
	if interval == coinpulse.Hourly {
		f.mu.Lock()
		f.charts[coin.ID] = fetched{from: lo.Add(step), to: hi, samples: samples}
		f.mu.Unlock()
	}
	return upstream.Resample(samples, step, from, to), nil
}

// maxChunk is the longest span asked for in one call when hourly points
// are wanted: CoinGecko answers a span of 2 to 90 days with hourly
// points, a longer one with daily points.
const maxChunk = 60 * day

// chart fetches a coin's samples over [from, to]: in spans of at most
// maxChunk (and at least 2 days) for hourly points, in one call for daily
// ones.
func (f *Feed) chart(ctx context.Context, id string, from, to time.Time, interval coinpulse.Interval) ([]upstream.Sample, error) {
	var spans [][2]time.Time
	if interval == coinpulse.Daily || to.Sub(from) <= maxChunk {
		spans = append(spans, [2]time.Time{from, to})
	} else {
		n := int((to.Sub(from) + maxChunk - 1) / maxChunk)
		size := to.Sub(from) / time.Duration(n)
		for i := range n {
			a, b := from.Add(time.Duration(i)*size), from.Add(time.Duration(i+1)*size)
			if i == n-1 {
				b = to
			}
			spans = append(spans, [2]time.Time{a, b})
		}
	}
	var out []upstream.Sample
	for _, s := range spans {
		q := url.Values{"vs_currency": {"usd"}, "from": {strconv.FormatInt(s[0].Unix(), 10)}, "to": {strconv.FormatInt(s[1].Unix(), 10)}, "precision": {"full"}}
		body, err := f.c.Get(ctx, "/coins/"+url.PathEscape(id)+"/market_chart/range", q)
		if se := (*upstream.StatusError)(nil); errors.As(err, &se) && se.Status == http.StatusNotFound {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		samples, err := ParseChart(body)
		if err != nil {
			return nil, fmt.Errorf("GET /coins/%s/market_chart/range: %w", id, err)
		}
		if len(out) > 0 && len(samples) > 0 && samples[0].T <= out[len(out)-1].T {
			// The spans meet: drop what the previous one already has.
			i := 0
			for i < len(samples) && samples[i].T <= out[len(out)-1].T {
				i++
			}
			samples = samples[i:]
		}
		out = append(out, samples...)
	}
	return out, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
