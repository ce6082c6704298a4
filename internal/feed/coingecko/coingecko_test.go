package coingecko

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/feed/coingecko/cgtest"
	"coinpulse/internal/feed/upstream"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// newFeed returns a feed on up that calls as fast as it likes and retries
// at once.
func newFeed(t *testing.T, up *cgtest.Upstream, cfg Config) *Feed {
	t.Helper()
	cfg.BaseURL = up.URL
	if cfg.CallsPerMinute == 0 {
		cfg.CallsPerMinute = 60_000
	}
	cfg.RetryBase = time.Millisecond
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-4*math.Abs(b) }

// Universe takes the largest coins by market cap, across pages; quotes
// are CoinGecko's figures of the moment.
func TestUniverseAndQuotes(t *testing.T) {
	coins := cgtest.Coins(600)
	up := cgtest.Start(t, coins)
	ctx := context.Background()

	f := newFeed(t, up, Config{Coins: 3})
	u, err := f.Universe(ctx)
	if err != nil || len(u) != 3 || u[0].ID != "bitcoin" || u[0].Symbol != "btc" || u[0].CirculatingSupply != 20e6 || *u[0].MaxSupply != 21e6 || u[1].MaxSupply != nil {
		t.Fatalf("%v %+v", err, u)
	}
	if want := time.Now().UTC().Truncate(day).AddDate(0, 0, -(DefaultHistoryDays - 2)); !u[0].ListedAt.Equal(want) {
		t.Errorf("listed at %s, want %s", u[0].ListedAt, want)
	}
	now := time.Now()
	q, err := f.Quotes(ctx, now)
	if err != nil || len(q) != 3 {
		t.Fatalf("%v %+v", err, q)
	}
	btc := q[0]
	if btc.CoinID != "bitcoin" || !near(btc.Price, cgtest.Price(coins[0], now)) || !near(btc.MarketCap, btc.Price*20e6) || !near(btc.TotalVolume, cgtest.Volume(coins[0], now)) || btc.Time.After(now) || now.Sub(btc.Time) > time.Minute {
		t.Errorf("%+v", btc)
	}

	// 520 coins: three pages of 250 for the universe, three calls of 250
	// ids for the quotes.
	f = newFeed(t, up, Config{Coins: 520})
	before := up.Calls("markets")
	if u, err = f.Universe(ctx); err != nil || len(u) != 520 {
		t.Fatalf("%v %d", err, len(u))
	}
	seen := map[string]bool{}
	for _, c := range u {
		if seen[c.ID] {
			t.Fatalf("%s twice", c.ID)
		}
		seen[c.ID] = true
	}
	if q, err = f.Quotes(ctx, time.Now()); err != nil || len(q) != 520 {
		t.Fatalf("%v %d", err, len(q))
	}
	if n := up.Calls("markets") - before; n != 6 {
		t.Errorf("%d calls, want 6", n)
	}

	// A coin gone from CoinGecko, or sent without a price, has no quote.
	up.Delist(coins[5].ID)
	up.NullPrice(coins[6].ID)
	up.NullVolume(coins[7].ID)
	if q, err = f.Quotes(ctx, time.Now()); err != nil || len(q) != 518 {
		t.Fatalf("%v %d", err, len(q))
	}
	for _, x := range q {
		if x.CoinID == coins[5].ID || x.CoinID == coins[6].ID {
			t.Errorf("a quote for %s", x.CoinID)
		}
		if x.NoVolume != (x.CoinID == coins[7].ID) {
			t.Errorf("%s: NoVolume %v", x.CoinID, x.NoVolume)
		}
	}
	// Fewer coins than asked for: all there are.
	f = newFeed(t, up, Config{Coins: 1000})
	if u, err = f.Universe(ctx); err != nil || len(u) != 599 {
		t.Errorf("%v %d", err, len(u))
	}
}

// Adopt serves a set chosen before (by another node) without a call: its
// quotes are those coins', its history begins where this node's would,
// whatever the chooser's; a set the feed could not have chosen is
// refused.
func TestAdopt(t *testing.T) {
	coins := cgtest.Coins(20)
	up := cgtest.Start(t, coins)
	ctx := context.Background()
	chooser := newFeed(t, up, Config{Coins: 5})
	set, err := chooser.Universe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	set = append(set[1:], coinpulse.CoinInfo{ID: coins[9].ID, Symbol: coins[9].Symbol, Name: coins[9].Name, ListedAt: set[0].ListedAt})
	set[0].ListedAt = set[0].ListedAt.AddDate(0, 0, -3)  // chosen three days ago
	set[1].ListedAt = set[1].ListedAt.AddDate(0, 0, 300) // by a node fetching less history
	f := newFeed(t, up, Config{Coins: 5})
	if f.UniverseKey() != chooser.UniverseKey() || f.UniverseKey() == newFeed(t, up, Config{Coins: 6}).UniverseKey() {
		t.Errorf("universe keys: %q, %q", f.UniverseKey(), chooser.UniverseKey())
	}
	before := up.Calls("markets")
	got, err := f.Adopt(set)
	if err != nil || len(got) != 5 || up.Calls("markets") != before {
		t.Fatalf("Adopt: %v, %d coins, %d calls", err, len(got), up.Calls("markets")-before)
	}
	start := time.Now().UTC().Truncate(day).AddDate(0, 0, -(DefaultHistoryDays - 2))
	for _, c := range got {
		if !c.ListedAt.Equal(start) {
			t.Errorf("%s listed at %s, want %s", c.ID, c.ListedAt, start)
		}
	}
	q, err := f.Quotes(ctx, time.Now())
	if err != nil || len(q) != 5 {
		t.Fatalf("quotes: %v %d", err, len(q))
	}
	for i, x := range q {
		if x.CoinID != set[i].ID {
			t.Errorf("quote %d of %s, want %s", i, x.CoinID, set[i].ID)
		}
	}
	six := append(slices.Clone(set), coinpulse.CoinInfo{ID: coins[10].ID, Symbol: "x", Name: "X"})
	twice := append(slices.Clone(set[:4]), set[0])
	bad := slices.Clone(set)
	bad[2].ID = "Not/An/Id"
	noName := slices.Clone(set)
	noName[1].Name = ""
	control := slices.Clone(set)
	control[1].Name = "evil\x1b[31m name"
	upper := slices.Clone(set)
	upper[2].Symbol = "UPPER"
	huge, negative := 1e300, -5.0
	bigSupply := slices.Clone(set)
	bigSupply[0].CirculatingSupply = huge
	bigTotal := slices.Clone(set)
	bigTotal[0].TotalSupply = &huge
	negMax := slices.Clone(set)
	negMax[3].MaxSupply = &negative
	for name, s := range map[string][]coinpulse.CoinInfo{"none": nil, "six": six, "twice": twice, "bad id": bad, "no name": noName,
		"control character": control, "upper-case symbol": upper, "supply": bigSupply, "total supply": bigTotal, "max supply": negMax} {
		if _, err := f.Adopt(s); err == nil {
			t.Errorf("%s: adopted", name)
		}
	}
	if q, err := f.Quotes(ctx, time.Now()); err != nil || len(q) != 5 || q[4].CoinID != coins[9].ID {
		t.Errorf("after the refusals the set changed: %v %v", err, q)
	}
}

// A first start's backfill: 90 days and an hour of hourly points on the
// grid, from two calls (CoinGecko answers a span of more than 90 days with
// daily points), and the daily points since the listing from a third; a
// gap's daily points come from its hourly call.
func TestHistory(t *testing.T) {
	coins := cgtest.Coins(2)
	up := cgtest.Start(t, coins)
	ctx := context.Background()
	f := newFeed(t, up, Config{})
	u, err := f.Universe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	btc := u[0]
	now := time.Now().UTC().Truncate(time.Minute)
	check := func(pts []coinpulse.HistoryPoint, step time.Duration, from, to time.Time) {
		t.Helper()
		first := from.Truncate(step)
		if first.Before(from) {
			first = first.Add(step)
		}
		n := int(to.Sub(first)/step) + 1
		if len(pts) != n {
			t.Fatalf("%d points, want %d", len(pts), n)
		}
		for i, p := range pts {
			at := first.Add(time.Duration(i) * step)
			if want := cgtest.Price(coins[0], at); !p.Timestamp.Equal(at) || !near(p.Price, want) || !near(p.MarketCap, want*20e6) {
				t.Fatalf("point %d: %+v, want %s %v", i, p, at, want)
			}
		}
	}

	calls := up.Calls("chart")
	from := now.Add(-90*day - time.Hour)
	pts, err := f.History(ctx, btc, coinpulse.Hourly, from, now)
	if err != nil {
		t.Fatal(err)
	}
	check(pts, time.Hour, from, now)
	if n := up.Calls("chart") - calls; n != 2 {
		t.Errorf("hourly: %d calls, want 2", n)
	}
	calls = up.Calls("chart")
	pts, err = f.History(ctx, btc, coinpulse.Daily, btc.ListedAt, now)
	if err != nil {
		t.Fatal(err)
	}
	check(pts, day, btc.ListedAt, now)
	if n := up.Calls("chart") - calls; n != 1 {
		t.Errorf("daily: %d calls, want 1", n)
	}

	// A gap of two days: one call.
	calls = up.Calls("chart")
	gapFrom := now.Truncate(time.Hour).Add(-50 * time.Hour)
	pts, err = f.History(ctx, btc, coinpulse.Hourly, gapFrom, now)
	if err != nil {
		t.Fatal(err)
	}
	check(pts, time.Hour, gapFrom, now)
	daily, err := f.History(ctx, btc, coinpulse.Daily, gapFrom.Truncate(day).Add(day), now)
	if err != nil {
		t.Fatal(err)
	}
	check(daily, day, gapFrom.Truncate(day).Add(day), now)
	if n := up.Calls("chart") - calls; n != 1 {
		t.Errorf("a gap: %d calls, want 1", n)
	}
	if len(f.charts) != 0 {
		t.Errorf("%d charts kept after use", len(f.charts))
	}

	// Before the listing: nothing; a delisted coin: no points, no error.
	if pts, err := f.History(ctx, btc, coinpulse.Daily, btc.ListedAt.AddDate(-1, 0, 0), btc.ListedAt.Add(-time.Hour)); err != nil || len(pts) != 0 {
		t.Errorf("before the listing: %v %d", err, len(pts))
	}
	up.Delist("bitcoin")
	if pts, err := f.History(ctx, btc, coinpulse.Hourly, gapFrom, now); err != nil || len(pts) != 0 {
		t.Errorf("delisted: %v %d", err, len(pts))
	}
}

// 429s are waited out for as long as Retry-After says; 5xx retried; what
// a retry cannot mend is reported with CoinGecko's message.
func TestRefusals(t *testing.T) {
	up := cgtest.Start(t, cgtest.Coins(3))
	ctx := context.Background()
	f := newFeed(t, up, Config{Attempts: 3})
	start := time.Now()
	up.TooMany(2)
	if _, err := f.Universe(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("two 429s with Retry-After: 1 waited out in %s", took)
	}
	u, _ := f.Universe(ctx)

	up.Break("bitcoin", 2)
	if _, err := f.History(ctx, u[0], coinpulse.Hourly, time.Now().Add(-time.Hour), time.Now()); err != nil {
		t.Errorf("two 500s, three attempts: %v", err)
	}
	up.Break("bitcoin", 3)
	_, err := f.History(ctx, u[0], coinpulse.Hourly, time.Now().Add(-time.Hour), time.Now())
	if err == nil || !strings.Contains(err.Error(), "500 Internal Server Error: internal error (gave up after 3 attempts)") {
		t.Errorf("three 500s: %v", err)
	}

	up.Key = "secret"
	calls := up.Calls("markets")
	_, err = f.Universe(ctx)
	var se *upstream.StatusError
	if !errors.As(err, &se) || se.Status != 401 || !strings.Contains(err.Error(), "401 Unauthorized: API Key Missing") || up.Calls("markets")-calls != 1 {
		t.Errorf("no key: %v, after %d calls", err, up.Calls("markets")-calls)
	}
	f = newFeed(t, up, Config{APIKey: "secret"})
	if _, err := f.Universe(ctx); err != nil {
		t.Errorf("with the key: %v", err)
	}

	// A free key reaches 365 days back: a feed set to 400 is told so.
	f = newFeed(t, up, Config{APIKey: "secret", HistoryDays: 400})
	u, _ = f.Universe(ctx)
	_, err = f.History(ctx, u[0], coinpulse.Daily, u[0].ListedAt, time.Now())
	if err == nil || !strings.Contains(err.Error(), "exceeds the allowed time range") {
		t.Errorf("400 days: %v", err)
	}

	// A cancelled call stops waiting.
	f = newFeed(t, up, Config{APIKey: "secret", CallsPerMinute: 1})
	f.Universe(ctx)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := f.Quotes(cctx, time.Now()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled: %v", err)
	}
}

// settled waits for the read of the count of markets under way, if any.
func settled(t *testing.T, f *Feed) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		reading := f.marketsRead
		f.mu.Unlock()
		if !reading {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the read of the count of markets did not end in 10 s")
		}
	}
}

// Quotes read CoinGecko's count of markets at once, then hourly, on their
// own: a read held up does not hold the quotes. One that fails leaves the
// count as it was, and is tried again five minutes later.
func TestMarketsCount(t *testing.T) {
	up := cgtest.Start(t, cgtest.Coins(3))
	up.GlobalGate = make(chan struct{})
	f := newFeed(t, up, Config{Coins: 3})
	ctx := context.Background()
	if _, err := f.Universe(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	// The first read is held: the quotes come all the same.
	for range 2 {
		if q, err := f.Quotes(ctx, now); err != nil || len(q) != 3 {
			t.Fatalf("Quotes while /global is held: %v, %d quotes", err, len(q))
		}
	}
	if n, ok := f.Markets(); ok {
		t.Errorf("Markets() before /global answered = %d, want unknown", n)
	}
	close(up.GlobalGate)
	settled(t, f)
	for i, tt := range []struct {
		after time.Duration
		calls int
	}{{0, 1}, {time.Minute, 1}, {59 * time.Minute, 1}, {time.Hour, 2}, {time.Hour + time.Minute, 2}} {
		if q, err := f.Quotes(ctx, now.Add(tt.after)); err != nil || len(q) != 3 {
			t.Fatalf("Quotes %d: %v, %d quotes", i, err, len(q))
		}
		settled(t, f)
		if n, ok := f.Markets(); n != cgtest.Markets || !ok || up.Calls("global") != tt.calls {
			t.Errorf("after Quotes at +%s: Markets() = %d, %v after %d calls; want %d after %d", tt.after, n, ok, up.Calls("global"), cgtest.Markets, tt.calls)
		}
	}

	up = cgtest.Start(t, cgtest.Coins(3))
	up.GlobalStatus = http.StatusBadGateway // retried, then failed
	f = newFeed(t, up, Config{Coins: 3})
	if _, err := f.Universe(ctx); err != nil {
		t.Fatal(err)
	}
	for i, tt := range []struct {
		after time.Duration
		calls int
	}{{0, 6}, {4 * time.Minute, 6}, {5 * time.Minute, 12}} {
		if q, err := f.Quotes(ctx, now.Add(tt.after)); err != nil || len(q) != 3 {
			t.Fatalf("Quotes %d without /global: %v, %d quotes", i, err, len(q))
		}
		settled(t, f)
		if n, ok := f.Markets(); ok || up.Calls("global") != tt.calls {
			t.Errorf("without /global, at +%s: Markets() = %d, %v after %d calls; want unknown after %d (6 attempts a read, a read 5 minutes after a failure)", tt.after, n, ok, up.Calls("global"), tt.calls)
		}
	}
}

// Calls are spaced to the rate: a lower bound only, which a slow machine
// cannot break.
func TestPacing(t *testing.T) {
	up := cgtest.Start(t, cgtest.Coins(3))
	f := newFeed(t, up, Config{CallsPerMinute: 600}) // one each 100 ms
	before := up.Calls("markets")
	start := time.Now()
	for range 5 {
		if _, err := f.Universe(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Errorf("5 calls at 600 a minute in %s", took)
	}
	if n := up.Calls("markets") - before; n != 5 {
		t.Errorf("%d calls made, want 5", n)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{BaseURL: "ftp://x"}, `URL "ftp://x": want http(s)://host/path`},
		{Config{BaseURL: "https://x/?a=b"}, "want http(s)://host/path"},
		{Config{Coins: -1}, "coins -1: 1 to 5000"},
		{Config{Coins: 5001}, "coins 5001: 1 to 5000"},
		{Config{CallsPerMinute: -3}, "calls a minute -3"},
		{Config{HistoryDays: 91}, "history days 91: 92 to"},
		{Config{APIKey: "a\nb"}, "line break"},
	} {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.cfg, err, tt.want)
		}
	}
	f, _ := New(Config{BaseURL: "https://pro-api.coingecko.com/api/v3/", APIKey: "k"})
	if h := f.c.Header(); h.Get("x-cg-pro-api-key") != "k" || len(h) != 1 || f.c.Base() != "https://pro-api.coingecko.com/api/v3" {
		t.Errorf("pro: %v %s", h, f.c.Base())
	}
	f, _ = New(Config{APIKey: "k"})
	if h := f.c.Header(); h.Get("x-cg-demo-api-key") != "k" || len(h) != 1 || f.c.Base() != DefaultURL || f.Simulated() || f.Name() != "coingecko" {
		t.Errorf("default: %v %s", h, f.c.Base())
	}
}

// clock is a settable clock for the feed and the stand-in.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// A backfill that runs past midnight UTC never asks a free key for more
// than 365 days; a Universe taken again moves the listing with the day.
func TestHistoryAcrossMidnight(t *testing.T) {
	clk := &clock{t: time.Now().UTC().Truncate(day).Add(-10 * time.Minute)} // 23:50
	up := cgtest.Start(t, cgtest.Coins(2))
	up.Now = clk.Now
	f := newFeed(t, up, Config{Clock: clk.Now})
	u, err := f.Universe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(11 * time.Minute) // 00:01
	pts, err := f.History(context.Background(), u[0], coinpulse.Daily, u[0].ListedAt, clk.Now())
	if err != nil {
		t.Fatalf("daily history after midnight: %v", err)
	}
	if len(pts) < 363 || !pts[len(pts)-1].Timestamp.Equal(clk.Now().Truncate(day)) {
		t.Errorf("%d points, the last at %v", len(pts), pts[len(pts)-1].Timestamp)
	}
	u2, _ := f.Universe(context.Background())
	if !u2[0].ListedAt.Equal(u[0].ListedAt.Add(day)) {
		t.Errorf("listed at %v after midnight, %v before", u2[0].ListedAt, u[0].ListedAt)
	}
}

// A grid point at the end of a span in the past lies between two samples:
// the feed asks a step past it, rather than take the sample before it.
func TestHistoryPastEnd(t *testing.T) {
	coins := cgtest.Coins(1)
	up := cgtest.Start(t, coins)
	f := newFeed(t, up, Config{})
	u, _ := f.Universe(context.Background())
	to := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	pts, err := f.History(context.Background(), u[0], coinpulse.Hourly, to.Add(-3*time.Hour), to)
	if err != nil || len(pts) != 4 {
		t.Fatalf("%v %+v", err, pts)
	}
	for _, p := range pts {
		if want := cgtest.Price(coins[0], p.Timestamp); !near(p.Price, want) {
			t.Errorf("%v: %v, want %v", p.Timestamp, p.Price, want)
		}
	}
	// A gap within the day: the daily points asked for start after now,
	// and the hourly chart kept for them is let go.
	if pts, err := f.History(context.Background(), u[0], coinpulse.Daily, to.Truncate(day).Add(day), to); err != nil || len(pts) != 0 || len(f.charts) != 0 {
		t.Errorf("daily points of a same-day gap: %v %d, %d charts kept", err, len(pts), len(f.charts))
	}
}

// The feed's three callers (the engine's two backfill workers and its
// refresh) at once.
func TestConcurrentCalls(t *testing.T) {
	up := cgtest.Start(t, cgtest.Coins(10))
	f := newFeed(t, up, Config{Coins: 10})
	u, err := f.Universe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	now := time.Now()
	for w := range 2 {
		wg.Go(func() {
			for _, c := range u[w*5 : w*5+5] {
				if _, err := f.History(context.Background(), c, coinpulse.Hourly, now.Add(-50*time.Hour), now); err != nil {
					t.Error(err)
				}
				if _, err := f.History(context.Background(), c, coinpulse.Daily, now.Add(-48*time.Hour), now); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			if _, err := f.Quotes(context.Background(), time.Now()); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if n := up.Calls("chart"); n != 10 {
		t.Errorf("%d chart calls, want 10", n)
	}
}
