package market

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"coinpulse"
	"coinpulse/internal/feed/sim"
	"coinpulse/internal/sqlite"
	"coinpulse/internal/testlog"
)

// start is the engine tests' first clock reading: off every grid.
var start = time.Date(2026, 3, 10, 12, 34, 56, 0, time.UTC)

// fakeClock is a settable coinpulse.Clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// historyCall is one History request made of the feed.
type historyCall struct {
	id       string
	interval coinpulse.Interval
	from, to time.Time
}

// spyFeed is the sim feed, recording the History requests. String and
// Markets are sim's, so the engine's fingerprint is the sim's.
type spyFeed struct {
	*sim.Feed
	mu    sync.Mutex
	calls []historyCall
	// symbols, when set, are the symbols Universe reports instead of the
	// feed's, by coin id: a build of sim that named coins otherwise.
	symbols map[string]string
	// only, when set, keeps the universe to its first only coins.
	only int
}

func (s *spyFeed) Universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	u, err := s.Feed.Universe(ctx)
	if s.only > 0 && len(u) > s.only {
		u = u[:s.only]
	}
	for i := range u {
		if sym, ok := s.symbols[u[i].ID]; ok {
			u[i].Symbol = sym
		}
	}
	return u, err
}

func (s *spyFeed) History(ctx context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	s.mu.Lock()
	s.calls = append(s.calls, historyCall{info.ID, interval, from, to})
	s.mu.Unlock()
	return s.Feed.History(ctx, info, interval, from, to)
}

// take returns and forgets the calls made so far.
func (s *spyFeed) take() []historyCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

func newSpy(t testing.TB, seed int64) *spyFeed {
	t.Helper()
	f, err := sim.New(seed, 0)
	if err != nil {
		t.Fatalf("sim.New(%d, 0): %v", seed, err)
	}
	return &spyFeed{Feed: f, only: simCoins()}
}

// simCoins is the size of the engine tests' universe: sim's 1000 coins,
// or its first 100 under -short. The race pass of .ci/run is -short: the
// detector watches the same paths on a tenth of the coins, where the full
// universe's backfills under it took five minutes of the run.
func simCoins() int {
	if testing.Short() {
		return 100
	}
	return sim.MinCoins
}

// openStore opens the SQLite database at path, closed at the end of the
// test.
func openStore(t testing.TB, path string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("sqlite.Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return db
}

type engineEnv struct {
	engine *Engine
	feed   *spyFeed
	store  *sqlite.DB
	clock  *fakeClock
}

// loadEngine makes an engine over feed and store at the clock's time and
// loads it.
func loadEngine(t testing.TB, feed *spyFeed, store *sqlite.DB, clock *fakeClock, retain time.Duration) *Engine {
	t.Helper()
	e := New(Config{
		Feed: feed, Store: store, Clock: clock.Now,
		Log:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		MinMoverVolume: 50_000, Retain: retain,
		// Quotes are taken on Refresh boundaries: a millisecond grid keeps
		// the clock's readings as they are.
		Refresh: time.Millisecond,
	})
	if e.Current() != nil {
		t.Fatalf("Current() before Load = %v, want nil", e.Current())
	}
	if err := e.Load(context.Background()); err != nil {
		t.Fatalf("Load at %v: %v", clock.Now(), err)
	}
	return e
}

// newEnv loads an engine over sim.New(seed, 0) and a fresh store.
func newEnv(t testing.TB, seed int64) engineEnv {
	t.Helper()
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	clock := &fakeClock{t: start}
	feed := newSpy(t, seed)
	return engineEnv{engine: loadEngine(t, feed, store, clock, 0), feed: feed, store: store, clock: clock}
}

// A full backfill of the 1000-coin universe takes seconds, so the tests
// that need a loaded store but do not test the backfill itself start from
// a copy of one made once: sim seed 1 loaded at start on a fresh store.
var template struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if template.dir != "" {
		os.RemoveAll(template.dir)
	}
	os.Exit(code)
}

func makeTemplate() (string, error) {
	dir, err := os.MkdirTemp("", "market-engine-test-")
	if err != nil {
		return "", err
	}
	template.dir = dir
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "db"))
	if err != nil {
		return "", err
	}
	f, err := sim.New(1, 0)
	if err != nil {
		db.Close()
		return "", err
	}
	feed := &spyFeed{Feed: f, only: simCoins()}
	e := New(Config{Feed: feed, Store: db, Clock: func() time.Time { return start }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := e.Load(ctx); err != nil {
		db.Close()
		return "", fmt.Errorf("load the template store: %w", err)
	}
	return filepath.Join(dir, "db"), db.Close()
}

// loadedStore returns the path of a private copy of a store that a seed 1
// engine has loaded (backfilled) at start and then closed.
func loadedStore(t testing.TB) string {
	t.Helper()
	template.once.Do(func() { _, template.err = makeTemplate() })
	if template.err != nil {
		t.Fatalf("template store: %v", template.err)
	}
	dst := filepath.Join(t.TempDir(), "db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(filepath.Join(template.dir, "db"+suffix))
		if os.IsNotExist(err) && suffix != "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// loadedEnv is an engine over sim seed 1 that warm-starts at start from a
// copy of the template store, with the given snapshot retention.
func loadedEnv(t testing.TB, retain time.Duration) engineEnv {
	t.Helper()
	store := openStore(t, loadedStore(t))
	clock := &fakeClock{t: start}
	feed := newSpy(t, 1)
	e := loadEngine(t, feed, store, clock, retain)
	if calls := feed.take(); len(calls) != 0 {
		t.Fatalf("Load at the time of the saved state asked the feed for %d histories (%+v ...), want none", len(calls), calls[0])
	}
	return engineEnv{engine: e, feed: feed, store: store, clock: clock}
}

func (env engineEnv) tick(t testing.TB, now time.Time) *Snapshot {
	t.Helper()
	env.clock.Set(now)
	if err := env.engine.tick(context.Background(), now); err != nil {
		t.Fatalf("tick(%v): %v", now, err)
	}
	s := env.engine.Current()
	if s == nil || !s.AsOf.Equal(now) {
		t.Fatalf("after tick(%v), Current() = %v", now, s)
	}
	return s
}

func lookup(t testing.TB, s *Snapshot, id string) coinpulse.CoinDetail {
	t.Helper()
	d, ok := s.Lookup(id)
	if !ok {
		t.Fatalf("Lookup(%q) in snapshot %s: not found", id, s.ID)
	}
	return d
}

func storedHistory(t testing.TB, store coinpulse.HistoryStore, id string, interval coinpulse.Interval, from, to time.Time) []coinpulse.HistoryPoint {
	t.Helper()
	pts, err := store.History(context.Background(), id, interval, from, to)
	if err != nil {
		t.Fatalf("store History(%s, %s): %v", id, interval, err)
	}
	return pts
}

func engineHistory(t testing.TB, e *Engine, id string, days int, interval coinpulse.Interval) []coinpulse.HistoryPoint {
	t.Helper()
	pts, err := e.History(context.Background(), e.Current(), id, days, interval)
	if err != nil {
		t.Fatalf("engine History(%s, %d, %s): %v", id, days, interval, err)
	}
	return pts
}

func timestamps(pts []coinpulse.HistoryPoint) []time.Time {
	out := make([]time.Time, len(pts))
	for i, p := range pts {
		out[i] = p.Timestamp
	}
	return out
}

func hoursFrom(from time.Time, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = from.Add(time.Duration(i) * time.Hour)
	}
	return out
}

func feedHistory(t testing.TB, f coinpulse.Feed, id string, interval coinpulse.Interval, from, to time.Time) []coinpulse.HistoryPoint {
	t.Helper()
	u, err := f.Universe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range u {
		if info.ID == id {
			pts, err := f.History(context.Background(), info, interval, from, to)
			if err != nil {
				t.Fatalf("feed History(%s): %v", id, err)
			}
			return pts
		}
	}
	t.Fatalf("feed has no coin %q", id)
	return nil
}

// samePoints compares history points with a relative float tolerance.
func samePoints(t testing.TB, what string, want, got []coinpulse.HistoryPoint) {
	t.Helper()
	approx := cmp.Comparer(func(a, b float64) bool {
		return a == b || math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b))
	})
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// flakyFeed is a spyFeed whose History fails once, at call failAt.
type flakyFeed struct {
	*spyFeed
	mu     sync.Mutex
	calls  int
	failAt int
}

func (f *flakyFeed) History(ctx context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	f.mu.Lock()
	f.calls++
	fail := f.calls == f.failAt
	f.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("flaky feed: call %d fails", f.failAt)
	}
	return f.spyFeed.History(ctx, info, interval, from, to)
}

// A Load that failed part way, as on a dropped database connection, can
// be run again (serve retries it): the second loads every coin once (an
// audit: a failed first load left the node unready for good).
func TestEngineLoadAgainAfterAFailure(t *testing.T) {
	t.Parallel()
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	clock := &fakeClock{t: start}
	e := New(Config{
		Feed: &flakyFeed{spyFeed: newSpy(t, 1), failAt: 20}, Store: store, Clock: clock.Now,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MinMoverVolume: 50_000, Refresh: time.Millisecond,
	})
	if err := e.Load(context.Background()); err == nil || e.Current() != nil {
		t.Fatalf("Load with a failing feed: %v, snapshot %v; want an error and none", err, e.Current())
	}
	if err := e.Load(context.Background()); err != nil {
		t.Fatalf("Load again: %v", err)
	}
	if n, s := simCoins(), e.Current(); s == nil || s.Len() != n || len(e.order) != n || len(e.coins) != n {
		t.Fatalf("after the second Load: snapshot %v, %d coins in order, %d known; want %d", s, len(e.order), len(e.coins), n)
	}
}

func TestEngineLoadBackfills(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	s := env.engine.Current()
	if s == nil {
		t.Fatal("Current() after Load = nil")
	}
	if got, want := s.Len(), simCoins(); got != want {
		t.Errorf("snapshot has %d coins, want %d", got, want)
	}
	if !s.AsOf.Equal(start) || s.Feed != "sim" || !s.Simulated || s.MinMoverVolume != 50_000 {
		t.Errorf("snapshot AsOf %v feed %q simulated %v floor %v; want %v sim true 50000", s.AsOf, s.Feed, s.Simulated, s.MinMoverVolume, start)
	}
	if env.engine.Snapshot(s.ID) != s {
		t.Errorf("Snapshot(%q) is not the current snapshot", s.ID)
	}
	if s.Global.Markets == nil || s.Global.BitcoinDominance == nil || s.Global.MarketCapChangePercentage24h == nil {
		t.Errorf("Global = %+v, want markets, bitcoin dominance and market cap change known", s.Global)
	}

	// Every coin was backfilled: hourly from 90 days back, daily from its
	// listing.
	calls := env.feed.take()
	hourlyFrom := map[string]time.Time{}
	dailyFrom := map[string]time.Time{}
	for _, c := range calls {
		if c.interval == coinpulse.Hourly {
			hourlyFrom[c.id] = c.from
		} else {
			dailyFrom[c.id] = c.from
		}
	}
	if n := simCoins(); len(hourlyFrom) != n || len(dailyFrom) != n {
		t.Errorf("backfill asked hourly history of %d coins and daily of %d, want %d each", len(hourlyFrom), len(dailyFrom), n)
	}
	if got, want := hourlyFrom["bitcoin"], start.Add(-HourlyWindow-time.Hour); !got.Equal(want) {
		t.Errorf("bitcoin hourly backfill from %v, want %v", got, want)
	}

	btc := lookup(t, s, "bitcoin")
	if btc.MarketCapRank == nil || *btc.MarketCapRank != 1 || btc.ResolvedBy != "id" {
		t.Errorf("bitcoin rank %v resolved by %q, want 1, id", btc.MarketCapRank, btc.ResolvedBy)
	}
	if dailyFrom["bitcoin"] != btc.HistoryStart {
		t.Errorf("bitcoin daily backfill from %v, want its listing %v", dailyFrom["bitcoin"], btc.HistoryStart)
	}
	for name, p := range map[string]*float64{
		"price_change_24h": btc.PriceChange24h, "price_change_percentage_24h": btc.PriceChangePercentage24h,
		"7d": btc.PriceChangePercentage7d, "30d": btc.PriceChangePercentage30d, "1y": btc.PriceChangePercentage1y,
		"high_24h": btc.High24h, "low_24h": btc.Low24h, "market_cap_change_24h": btc.MarketCapChange24h,
		"fully_diluted_valuation": btc.FullyDilutedValuation,
	} {
		if p == nil {
			t.Errorf("bitcoin %s = nil, want a value after the backfill", name)
		}
	}
	price := btc.CurrentPrice
	if !(btc.ATH >= price && price >= btc.ATL && btc.ATL > 0) {
		t.Errorf("bitcoin ath %v, price %v, atl %v: want ath >= price >= atl > 0", btc.ATH, price, btc.ATL)
	}
	if btc.High24h != nil && btc.Low24h != nil && !(*btc.High24h >= price && price >= *btc.Low24h) {
		t.Errorf("bitcoin high_24h %v, price %v, low_24h %v: want high >= price >= low", *btc.High24h, price, *btc.Low24h)
	}
	// The range takes in the price 24 h ago the change is measured from
	// (an audit: on the hour, the point exactly 24 h back was left out of
	// it, and the change came from a price under low_24h).
	if btc.High24h != nil && btc.Low24h != nil && btc.PriceChange24h != nil {
		if then := price - *btc.PriceChange24h; !(*btc.High24h >= then*(1-1e-12) && then*(1+1e-12) >= *btc.Low24h) {
			t.Errorf("bitcoin high_24h %v, price 24 h ago %v, low_24h %v: want high >= then >= low", *btc.High24h, then, *btc.Low24h)
		}
	}
	if btc.ATLDate.Before(btc.HistoryStart) || btc.ATHDate.After(start) {
		t.Errorf("bitcoin atl date %v, ath date %v, outside [%v, %v]", btc.ATLDate, btc.ATHDate, btc.HistoryStart, start)
	}

	// The 24 h change is measured against the feed's own history, at
	// exactly 24 h ago: between the hourly points either side of it.
	dayAgoAt := start.Add(-24 * time.Hour)
	dayAgoHour := dayAgoAt.Truncate(time.Hour)
	dayAgo := feedHistory(t, env.feed.Feed, "bitcoin", coinpulse.Hourly, dayAgoHour, dayAgoHour.Add(time.Hour))
	f := float64(dayAgoAt.Sub(dayAgoHour)) / float64(time.Hour)
	then := dayAgo[0].Price + (dayAgo[1].Price-dayAgo[0].Price)*f
	if want := (price - then) / then * 100; btc.PriceChangePercentage24h == nil || math.Abs(*btc.PriceChangePercentage24h-want) > 1e-9 {
		t.Errorf("bitcoin 24 h change = %v %%, want %v %% (against %v at %v)", btc.PriceChangePercentage24h, want, then, dayAgoAt)
	}

	for _, tt := range []struct {
		days     int
		interval coinpulse.Interval
		want     int
	}{
		// 31 midnights from 2026-02-08 (the one at or before now − 30
		// days) to 2026-03-10, then the current price
		{30, coinpulse.Daily, 32},
		// 25 hours from 12:00 yesterday to 12:00, then the current price
		{1, coinpulse.Hourly, 26},
		{7, coinpulse.Hourly, 7*24 + 2},
		{90, coinpulse.Hourly, 90*24 + 2},
		{365, coinpulse.Daily, 367},
	} {
		pts := engineHistory(t, env.engine, "bitcoin", tt.days, tt.interval)
		if len(pts) != tt.want {
			t.Errorf("History(bitcoin, %d days, %s) = %d points, want %d", tt.days, tt.interval, len(pts), tt.want)
			continue
		}
		if from := start.Add(-time.Duration(tt.days) * 24 * time.Hour); pts[0].Timestamp.After(from) || !pts[1].Timestamp.After(from) {
			t.Errorf("History(bitcoin, %d days, %s) starts at %v, then %v; want the last point at or before %v first", tt.days, tt.interval, pts[0].Timestamp, pts[1].Timestamp, from)
		}
		last := pts[len(pts)-1]
		if !last.Timestamp.Equal(start) || last.Price != price || last.MarketCap != *btc.MarketCap {
			t.Errorf("History(bitcoin, %d days, %s) ends with %+v, want the current price %v at %v", tt.days, tt.interval, last, price, start)
		}
		for i := 1; i < len(pts)-1; i++ {
			if pts[i].Timestamp.Sub(pts[i-1].Timestamp) != tt.interval.Step() {
				t.Errorf("History(bitcoin, %d days, %s): point %d at %v after %v", tt.days, tt.interval, i, pts[i].Timestamp, pts[i-1].Timestamp)
			}
		}
		// Stored points are the feed's.
		want := feedHistory(t, env.feed.Feed, "bitcoin", tt.interval, pts[0].Timestamp, pts[len(pts)-2].Timestamp)
		samePoints(t, "stored history vs feed", want, pts[:len(pts)-1])
	}
	full := engineHistory(t, env.engine, "bitcoin", 0, coinpulse.Daily)
	if len(full) == 0 || !full[0].Timestamp.Equal(btc.HistoryStart) {
		t.Errorf("History(bitcoin, max, daily) starts %v, want at listing %v", timestamps(full[:1]), btc.HistoryStart)
	}
	if _, err := env.engine.History(context.Background(), s, "no-such-coin", 1, coinpulse.Daily); !coinpulse.IsNotFound(err) {
		t.Errorf("History of an unknown coin: err = %v, want RESOURCE_NOT_FOUND", err)
	}
}

func TestEngineWarmStart(t *testing.T) {
	t.Parallel()
	// The store as a first run left it at start (12:34:56); then the
	// process stopped.
	store := openStore(t, loadedStore(t))
	// A mark the feed would overwrite if the next engine backfilled again.
	mark := start.Truncate(time.Hour).Add(-10 * 24 * time.Hour)
	err := store.PutHistory(context.Background(), coinpulse.Hourly, []coinpulse.Series{{
		CoinID: "bitcoin", Points: []coinpulse.HistoryPoint{{Timestamp: mark, Price: 42, MarketCap: 42, TotalVolume: 42}},
	}})
	if err != nil {
		t.Fatal(err)
	}

	later := start.Add(3 * time.Hour) // 15:34:56: 13:00, 14:00 and 15:00 are missing
	clock := &fakeClock{t: later}
	feed := newSpy(t, 1)
	second := loadEngine(t, feed, store, clock, 0)

	t.Run("only the gap is asked of the feed", func(t *testing.T) {
		gapStart := start.Truncate(time.Hour).Add(time.Hour)
		for _, c := range feed.take() {
			switch {
			case c.interval == coinpulse.Hourly && !c.from.Equal(gapStart):
				t.Fatalf("feed asked for hourly %s from %v, want only the gap from %v", c.id, c.from, gapStart)
			case c.interval == coinpulse.Daily && !c.from.After(later):
				t.Fatalf("feed asked for daily %s from %v, want nothing before %v (no day passed)", c.id, c.from, later)
			}
		}
		got := storedHistory(t, store, "bitcoin", coinpulse.Hourly, mark, mark)
		if len(got) != 1 || got[0].Price != 42 {
			t.Errorf("marked point at %v = %+v, want it kept (no new backfill)", mark, got)
		}
	})

	t.Run("gap filled once", func(t *testing.T) {
		pts := engineHistory(t, second, "bitcoin", 1, coinpulse.Hourly)
		if len(pts) != 26 {
			t.Fatalf("History(bitcoin, 1 day, hourly) = %d points, want 26", len(pts))
		}
		// 15:00 yesterday .. 15:00 today, each once, then the current price.
		want := append(hoursFrom(later.Truncate(time.Hour).Add(-24*time.Hour), 25), later)
		if diff := cmp.Diff(want, timestamps(pts)); diff != "" {
			t.Errorf("hourly timestamps (-want +got):\n%s", diff)
		}
		gap := storedHistory(t, store, "bitcoin", coinpulse.Hourly, start, later)
		samePoints(t, "gap-filled hours", feedHistory(t, feed.Feed, "bitcoin", coinpulse.Hourly, start, later), gap)
		if len(gap) != 3 {
			t.Errorf("stored hourly points in [%v, %v] = %v, want 3", start, later, timestamps(gap))
		}
	})

	t.Run("state carried over", func(t *testing.T) {
		s := second.Current()
		if s == nil || s.Len() != simCoins() || !s.AsOf.Equal(later) {
			t.Fatalf("Current() after warm start = %v", s)
		}
		btc := lookup(t, s, "bitcoin")
		if !(btc.ATH >= btc.CurrentPrice && btc.CurrentPrice >= btc.ATL && btc.ATLDate.Before(start)) {
			t.Errorf("warm ath %v (%v), price %v, atl %v (%v): want the extremes of the whole history", btc.ATH, btc.ATHDate, btc.CurrentPrice, btc.ATL, btc.ATLDate)
		}
		if btc.PriceChangePercentage24h == nil || btc.PriceChangePercentage1y == nil || btc.High24h == nil {
			t.Errorf("bitcoin 24 h, 1 y change, high after warm start = %v, %v, %v; want known", btc.PriceChangePercentage24h, btc.PriceChangePercentage1y, btc.High24h)
		}
	})
}

func TestEngineRollup(t *testing.T) {
	t.Parallel()
	env := loadedEnv(t, 0)
	hour := start.Truncate(time.Hour) // 12:00, the last hourly point stored by Load
	midnight := start.Truncate(24 * time.Hour).Add(24 * time.Hour)
	allHourly := func() []time.Time {
		return timestamps(storedHistory(t, env.store, "bitcoin", coinpulse.Hourly, hour.Add(-2*time.Hour), midnight.Add(2*time.Hour)))
	}
	allDaily := func() []time.Time {
		return timestamps(storedHistory(t, env.store, "bitcoin", coinpulse.Daily, midnight.AddDate(0, 0, -3), midnight.AddDate(0, 0, 2)))
	}
	if diff := cmp.Diff(hoursFrom(hour.Add(-2*time.Hour), 3), allHourly()); diff != "" {
		t.Fatalf("hourly points after Load (-want +got):\n%s", diff)
	}
	dailyBefore := allDaily()

	t.Run("within the hour", func(t *testing.T) {
		env.tick(t, start.Add(time.Minute))
		env.tick(t, hour.Add(59*time.Minute+59*time.Second))
		if diff := cmp.Diff(hoursFrom(hour.Add(-2*time.Hour), 3), allHourly()); diff != "" {
			t.Errorf("hourly points after ticks within the hour (-want +got):\n%s", diff)
		}
	})
	t.Run("hour boundary", func(t *testing.T) {
		// A tick on the hour: the point is its quote, and the feed's
		// history is not asked.
		now := hour.Add(time.Hour)
		s := env.tick(t, now)
		if diff := cmp.Diff(hoursFrom(hour.Add(-2*time.Hour), 4), allHourly()); diff != "" {
			t.Errorf("hourly points after crossing %v (-want +got):\n%s", hour.Add(time.Hour), diff)
		}
		p := storedHistory(t, env.store, "bitcoin", coinpulse.Hourly, hour.Add(time.Hour), hour.Add(time.Hour))
		btc := lookup(t, s, "bitcoin")
		if len(p) != 1 || p[0].Price != btc.CurrentPrice || p[0].MarketCap != *btc.MarketCap || p[0].TotalVolume != *btc.TotalVolume {
			t.Errorf("rolled-up point = %+v, want the latest quote %v / %v / %v", p, btc.CurrentPrice, *btc.MarketCap, *btc.TotalVolume)
		}
		if calls := env.feed.take(); len(calls) != 0 {
			t.Errorf("rollup of one hour asked the feed for %d histories (%+v ...), want none", len(calls), calls[0])
		}
		env.tick(t, now.Add(time.Minute))
		if got := len(allHourly()); got != 4 {
			t.Errorf("another tick in the same hour: %d hourly points, want 4", got)
		}
		if diff := cmp.Diff(dailyBefore, allDaily()); diff != "" {
			t.Errorf("daily points changed within the day (-before +after):\n%s", diff)
		}
	})
	t.Run("hour boundary passed by the tick", func(t *testing.T) {
		// A tick after the hour (a refresh that does not divide it, a
		// missed tick): the hour's point comes from the feed's history,
		// not from a later quote stamped with the hour.
		h := hour.Add(2 * time.Hour)
		s := env.tick(t, h.Add(7*time.Minute))
		got := storedHistory(t, env.store, "bitcoin", coinpulse.Hourly, h, h)
		samePoints(t, "the point of an hour ticked late", feedHistory(t, env.feed.Feed, "bitcoin", coinpulse.Hourly, h, h), got)
		if btc := lookup(t, s, "bitcoin"); len(got) == 1 && got[0].Price == btc.CurrentPrice {
			t.Errorf("the point at %v holds the price of %v", h, btc.LastUpdated)
		}
		env.feed.take()
	})
	t.Run("day boundary", func(t *testing.T) {
		for h := hour.Add(3 * time.Hour); !h.After(midnight); h = h.Add(time.Hour) {
			env.tick(t, h)
		}
		want := hoursFrom(hour.Add(-2*time.Hour), 15) // 10:00 .. 00:00
		if diff := cmp.Diff(want, allHourly()); diff != "" {
			t.Errorf("hourly points up to midnight (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(append(dailyBefore, midnight), allDaily()); diff != "" {
			t.Errorf("daily points after midnight (-want +got):\n%s", diff)
		}
		btc := lookup(t, env.engine.Current(), "bitcoin")
		d := storedHistory(t, env.store, "bitcoin", coinpulse.Daily, midnight, midnight)
		if len(d) != 1 || d[0].Price != btc.CurrentPrice {
			t.Errorf("daily point at %v = %+v, want the latest price %v", midnight, d, btc.CurrentPrice)
		}
		if calls := env.feed.take(); len(calls) != 0 {
			t.Errorf("hourly ticks asked the feed for %d histories, want none", len(calls))
		}
		// Hourly points older than the window are pruned at the new day.
		old := storedHistory(t, env.store, "bitcoin", coinpulse.Hourly, time.Time{}, midnight.Add(-HourlyWindow-2*time.Hour))
		if len(old) != 0 {
			t.Errorf("hourly points before %v kept after the day turned: %v", midnight.Add(-HourlyWindow-time.Hour), timestamps(old))
		}
	})
	t.Run("gap filled from the feed", func(t *testing.T) {
		now := midnight.Add(3*time.Hour + 10*time.Second) // 01:00, 02:00, 03:00 missing
		env.tick(t, now)
		got := storedHistory(t, env.store, "bitcoin", coinpulse.Hourly, midnight.Add(time.Hour), now)
		samePoints(t, "hours after a gap", feedHistory(t, env.feed.Feed, "bitcoin", coinpulse.Hourly, midnight.Add(time.Hour), now), got)
		if len(got) != 3 {
			t.Errorf("hourly points after the gap: %v, want 3", timestamps(got))
		}
	})
}

// A snapshot stays reachable for Retain after it was replaced, the last
// moment a client could have received it, with refreshes that divide
// Retain (a minute) or not (7 s), down to the fastest refresh
// maxRetained keeps whole (5 s).
func TestEngineSnapshotRetention(t *testing.T) {
	t.Parallel()
	for _, refresh := range []time.Duration{time.Minute, 7 * time.Second, 5 * time.Second} {
		t.Run(refresh.String(), func(t *testing.T) { testSnapshotRetention(t, refresh) })
	}
}

func testSnapshotRetention(t *testing.T, refresh time.Duration) {
	env := loadedEnv(t, 5*time.Minute)

	type snap struct {
		id             string
		asOf, replaced time.Time
	}
	snaps := []snap{{id: env.engine.Current().ID, asOf: start}}
	steps := int(10 * time.Minute / refresh)
	for i := 1; i <= steps; i++ {
		now := start.Add(time.Duration(i) * refresh)
		s := env.tick(t, now)
		for _, p := range snaps {
			if p.id == s.ID {
				t.Fatalf("snapshot id %q reused at %v", s.ID, now)
			}
		}
		snaps[len(snaps)-1].replaced = now
		snaps = append(snaps, snap{id: s.ID, asOf: now})
	}
	now := start.Add(time.Duration(steps) * refresh)
	for _, p := range snaps {
		t.Run(p.asOf.Format("15:04:05"), func(t *testing.T) {
			got := env.engine.Snapshot(p.id)
			keep := p.replaced.IsZero() || now.Sub(p.replaced) <= 5*time.Minute
			switch {
			case keep && (got == nil || got.ID != p.id || !got.AsOf.Equal(p.asOf)):
				t.Errorf("Snapshot(%q) from %v = %v, want it kept (age %v)", p.id, p.asOf, got, now.Sub(p.asOf))
			case !keep && got != nil:
				t.Errorf("Snapshot(%q) from %v still reachable %v after it was replaced, want nil after Retain", p.id, p.asOf, now.Sub(p.replaced))
			case got != nil && got.retired.Load() == p.replaced.IsZero():
				t.Errorf("Snapshot(%q) from %v: retired %v, want it retired once replaced", p.id, p.asOf, got.retired.Load())
			}
		})
	}
	if got := env.engine.Snapshot("no-such-snapshot"); got != nil {
		t.Errorf("Snapshot(unknown) = %v, want nil", got)
	}
}

// With a fast refresh, at most maxRetained replaced snapshots stay
// reachable, the newest ones, however many Retain would keep.
func TestEngineRetainsAtMostMaxRetained(t *testing.T) {
	t.Parallel()
	env := loadedEnv(t, 5*time.Minute)
	var ids []string
	for i := 1; i <= 2*maxRetained; i++ {
		ids = append(ids, env.tick(t, start.Add(time.Duration(i)*time.Second)).ID)
	}
	// The current one and the maxRetained before it are reachable.
	for i, id := range ids {
		kept := i >= len(ids)-1-maxRetained
		if got := env.engine.Snapshot(id) != nil; got != kept {
			t.Errorf("snapshot %d of %d reachable %v, want %v", i+1, len(ids), got, kept)
		}
	}
}

// A coin's info is not saved with the state: a warm start takes it from
// the feed. So a build of sim that changes symbols but no price path (an
// audit: synthetic coins had real coins' tickers, sim-zecorxa zcash's zec)
// keeps the fingerprint and the history, and shows the new symbols at once.
// algorand stands in for sim-zecorxa: it is among the first 100 coins
// of -short, and its market cap is below zcash's.
func TestEngineWarmStartTakesSymbolsFromTheFeed(t *testing.T) {
	t.Parallel()
	store := openStore(t, loadedStore(t))
	// The build before: algorand's symbol was zec.
	old := newSpy(t, 1)
	old.symbols = map[string]string{"algorand": "zec"}
	if got := lookup(t, loadEngine(t, old, store, &fakeClock{t: start}, 0).Current(), "zec"); len(got.Alternatives) != 1 || got.Alternatives[0].ID != "algorand" {
		t.Fatalf("before: zec = %s with alternatives %+v, want zcash with algorand", got.ID, got.Alternatives)
	}
	if calls := old.take(); len(calls) != 0 {
		t.Fatalf("the old build asked the feed for %d histories, want none", len(calls))
	}

	later := start.Add(3 * time.Hour)
	feed := newSpy(t, 1)
	e := loadEngine(t, feed, store, &fakeClock{t: later}, 0)
	gapStart := start.Truncate(time.Hour).Add(time.Hour)
	for _, c := range feed.take() {
		if c.interval == coinpulse.Hourly && !c.from.Equal(gapStart) {
			t.Fatalf("feed asked for hourly %s from %v, want only the gap from %v (no backfill)", c.id, c.from, gapStart)
		}
	}
	s := e.Current()
	if got := lookup(t, s, "zec"); got.ID != "zcash" || len(got.Alternatives) != 0 {
		t.Errorf("after: zec = %s with alternatives %+v, want zcash alone", got.ID, got.Alternatives)
	}
	if got := lookup(t, s, "algorand"); got.Symbol != "algo" || got.PriceChangePercentage1y == nil {
		t.Errorf("after: algorand symbol %q, 1 y change %v; want algo and its history kept", got.Symbol, got.PriceChangePercentage1y)
	}
}

func TestEngineOtherSeedBackfillsAgain(t *testing.T) {
	t.Parallel()
	// The store as a seed 1 run left it.
	store := openStore(t, loadedStore(t))
	later := start.Add(3 * time.Hour)
	clock := &fakeClock{t: later}
	feed := newSpy(t, 2)
	e := loadEngine(t, feed, store, clock, 0)

	hourly := map[string]time.Time{}
	for _, c := range feed.take() {
		if c.interval == coinpulse.Hourly {
			hourly[c.id] = c.from
		}
	}
	if len(hourly) != simCoins() {
		t.Errorf("seed 2 backfilled hourly history of %d coins, want all %d", len(hourly), simCoins())
	}
	if got, want := hourly["bitcoin"], later.Add(-HourlyWindow-time.Hour); !got.Equal(want) {
		t.Errorf("seed 2 bitcoin hourly backfill from %v, want a full backfill from %v", got, want)
	}
	// The store now holds seed 2's path, not seed 1's.
	from := later.Add(-5 * 24 * time.Hour)
	stored := storedHistory(t, store, "bitcoin", coinpulse.Hourly, from, later)
	samePoints(t, "bitcoin hourly history after the seed changed", feedHistory(t, feed.Feed, "bitcoin", coinpulse.Hourly, from, later), stored)
	btc := lookup(t, e.Current(), "bitcoin")
	if btc.PriceChangePercentage24h == nil || btc.PriceChangePercentage1y == nil {
		t.Errorf("bitcoin 24 h / 1 y change after re-backfill = %v / %v, want known", btc.PriceChangePercentage24h, btc.PriceChangePercentage1y)
	}
}

// oldSimFeed is the sim feed as a build before pegging (algorithm 3) saw
// it: its fingerprint, and wrapped bitcoin walking on its own far above
// bitcoin, as the audit found it.
type oldSimFeed struct{ *spyFeed }

const oldWBTCScale = 1.9

func (o oldSimFeed) String() string { return "sim/v3(seed=1, coins=1000, universe=227c5a90)" }

func (o oldSimFeed) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	qs, err := o.spyFeed.Quotes(ctx, now)
	for i := range qs {
		if qs[i].CoinID == "wrapped-bitcoin" {
			qs[i].Price *= oldWBTCScale
			qs[i].MarketCap *= oldWBTCScale
		}
	}
	return qs, err
}

func (o oldSimFeed) History(ctx context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	pts, err := o.spyFeed.History(ctx, info, interval, from, to)
	if info.ID == "wrapped-bitcoin" {
		for i := range pts {
			pts[i].Price *= oldWBTCScale
			pts[i].MarketCap *= oldWBTCScale
		}
	}
	return pts, err
}

// An upgrade to the pegged simulation: the saved state's fingerprint is
// another, so the engine backfills every coin instead of mixing the old
// paths with the new, and a wrapped token's stored history, price and
// extremes all follow what it wraps.
func TestEngineUpgradeToPeggedBackfills(t *testing.T) {
	t.Parallel()
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	old := New(Config{Feed: oldSimFeed{newSpy(t, 1)}, Store: store, Clock: func() time.Time { return start }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := old.Load(context.Background()); err != nil {
		t.Fatalf("load the old build: %v", err)
	}
	if wbtc, btc := lookup(t, old.Current(), "wrapped-bitcoin"), lookup(t, old.Current(), "bitcoin"); wbtc.CurrentPrice < 1.5*btc.CurrentPrice {
		t.Fatalf("old build: wrapped bitcoin %v, bitcoin %v; want the old drift", wbtc.CurrentPrice, btc.CurrentPrice)
	}

	later := start.Add(3 * time.Hour)
	feed := newSpy(t, 1)
	if old, cur := (oldSimFeed{}).String(), feed.String(); old == cur || !strings.HasPrefix(cur, "sim/v4(") {
		t.Fatalf("fingerprint %q after pegging, %q before; want a new version", cur, old)
	}
	e := loadEngine(t, feed, store, &fakeClock{t: later}, 0)
	hourly := map[string]time.Time{}
	for _, c := range feed.take() {
		if c.interval == coinpulse.Hourly {
			hourly[c.id] = c.from
		}
	}
	if got, want := hourly["wrapped-bitcoin"], later.Add(-HourlyWindow-time.Hour); len(hourly) != simCoins() || !got.Equal(want) {
		t.Errorf("backfilled hourly history of %d coins, wrapped bitcoin's from %v; want all %d from %v", len(hourly), got, simCoins(), want)
	}
	wbtcInfo, _ := e.Current().Lookup("wrapped-bitcoin")
	for _, iv := range []coinpulse.Interval{coinpulse.Hourly, coinpulse.Daily} {
		from := later.Add(-HourlyWindow)
		if iv == coinpulse.Daily {
			from = wbtcInfo.HistoryStart
		}
		samePoints(t, "wrapped bitcoin "+string(iv)+" history after the upgrade",
			feedHistory(t, feed.Feed, "wrapped-bitcoin", iv, from, later),
			storedHistory(t, store, "wrapped-bitcoin", iv, from, later))
	}
	wbtc, btc := lookup(t, e.Current(), "wrapped-bitcoin"), lookup(t, e.Current(), "bitcoin")
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got/want-1) > 0.003+1e-9 {
			t.Errorf("wrapped bitcoin %s %v, bitcoin's %v; want within 0.3 %%", what, got, want)
		}
	}
	near("price", wbtc.CurrentPrice, btc.CurrentPrice)
	// Bitcoin's all-time high (of seed 1) is after wrapped bitcoin's
	// listing, so the two highs are the same within the deviation; its low
	// is long before, so wrapped bitcoin's is higher.
	near("all-time high", wbtc.ATH, btc.ATH)
	if wbtc.ATL < btc.ATL || wbtc.ATLDate.Before(wbtcInfo.HistoryStart) {
		t.Errorf("wrapped bitcoin all-time low %v on %v, bitcoin's %v; want one since its listing", wbtc.ATL, wbtc.ATLDate, btc.ATL)
	}
}

// Nodes sharing a feed and a refresh interval publish the same snapshots,
// with the same ids, whenever each started: one that has been running and
// rolled an hour up agrees with one that just started and filled that hour
// from the feed.
func TestEngineNodesAgree(t *testing.T) {
	t.Parallel()
	node := func(at time.Time) (*Engine, *fakeClock) {
		clock := &fakeClock{t: at}
		e := New(Config{
			Feed: newSpy(t, 1), Store: openStore(t, loadedStore(t)), Clock: clock.Now,
			Log:            slog.New(slog.NewTextHandler(io.Discard, nil)),
			MinMoverVolume: 50_000, Refresh: time.Minute,
		})
		if err := e.Load(context.Background()); err != nil {
			t.Fatalf("Load at %v: %v", at, err)
		}
		return e, clock
	}
	hour := start.Truncate(time.Hour).Add(time.Hour) // 13:00, after the template's 12:34:56
	early, clock := node(hour.Add(-50 * time.Second))
	if got, want := early.Current().AsOf, hour.Add(-time.Minute); !got.Equal(want) {
		t.Fatalf("as_of after Load at %v = %v, want the refresh boundary %v", clock.Now(), got, want)
	}
	clock.Set(hour)
	if err := early.tick(context.Background(), hour); err != nil {
		t.Fatal(err)
	}
	late, _ := node(hour.Add(40 * time.Second))

	a, b := early.Current(), late.Current()
	if a.ID != b.ID || !a.AsOf.Equal(b.AsOf) {
		t.Fatalf("snapshots %s at %v and %s at %v, want one id and time", a.ID, a.AsOf, b.ID, b.AsOf)
	}
	pa, _ := a.Page(MarketCapDesc, 1, a.Len())
	pb, _ := b.Page(MarketCapDesc, 1, b.Len())
	if diff := cmp.Diff(pa, pb); diff != "" {
		t.Errorf("coins of the running node (-) and the new one (+) differ:\n%s", diff)
	}
}

// Subscribe hands a reader the current snapshot at once, then the latest
// one: a reader that falls behind skips to it, and publishing never waits.
func TestEngineSubscribe(t *testing.T) {
	t.Parallel()
	env := loadedEnv(t, 5*time.Minute)
	c := env.engine.Subscribe()
	if got := <-c; got != env.engine.Current() {
		t.Fatalf("first snapshot %v, want the current one", got.ID)
	}
	var last *Snapshot
	for i := 1; i <= 3; i++ { // nobody reads meanwhile
		last = env.tick(t, start.Add(time.Duration(i)*time.Minute))
	}
	select {
	case got := <-c:
		if got != last {
			t.Fatalf("after three unread ticks got %s, want the latest %s", got.ID, last.ID)
		}
	default:
		t.Fatal("no snapshot waiting after three ticks")
	}
	select {
	case got := <-c:
		t.Fatalf("a second snapshot %s waited; want only the latest", got.ID)
	default:
	}
}

// Run after a Load that ran past a refresh boundary (a first start's
// backfill crossing a minute) quotes that boundary at once; after one
// that did not, it waits for the next boundary.
func TestRunQuotesTheBoundaryLoadRanPast(t *testing.T) {
	for _, tt := range []struct {
		name     string
		loadTook time.Duration // the clock's advance from Load to Run
		want     time.Time     // the AsOf of the first snapshot Run publishes; zero: none soon
	}{
		{"past a boundary", 10 * time.Second, start.Truncate(time.Minute).Add(time.Minute)},
		{"within the minute", 2 * time.Second, time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{t: start}
			e := New(Config{
				Feed: newSpy(t, 1), Store: openStore(t, loadedStore(t)), Clock: clock.Now,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: time.Minute,
			})
			if err := e.Load(context.Background()); err != nil {
				t.Fatal(err)
			}
			loaded := e.Current().AsOf
			if want := start.Truncate(time.Minute); !loaded.Equal(want) {
				t.Fatalf("Load's snapshot as of %v, want %v", loaded, want)
			}
			clock.Set(start.Add(tt.loadTook))
			snaps := e.Subscribe()
			<-snaps // Load's
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			if tt.want.IsZero() {
				// The next boundary is 2 s of real time away: Run
				// publishes nothing before.
				select {
				case s := <-snaps:
					t.Fatalf("a snapshot as of %v right after Load; want none before %v", s.AsOf, start.Truncate(time.Minute).Add(time.Minute))
				case <-time.After(300 * time.Millisecond):
				}
				return
			}
			select {
			case s := <-snaps:
				if !s.AsOf.Equal(tt.want) {
					t.Errorf("first snapshot of Run as of %v, want %v", s.AsOf, tt.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no snapshot within 10 s; want one as of %v at once", tt.want)
			}
		})
	}
}

// otherFeed is another feed on the same coin ids, as replay is to sim:
// its own name and fingerprint, every price doubled, and bitcoin listed
// ten days before start.
type otherFeed struct{ *spyFeed }

func (o otherFeed) Name() string   { return "other" }
func (o otherFeed) String() string { return "other/v1" }

var otherListing = start.Add(-10 * 24 * time.Hour)

func (o otherFeed) Universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	u, err := o.spyFeed.Universe(ctx)
	for i := range u {
		if u[i].ID == "bitcoin" {
			u[i].ListedAt = otherListing
		}
	}
	return u, err
}

func (o otherFeed) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	qs, err := o.spyFeed.Quotes(ctx, now)
	for i := range qs {
		qs[i].Price *= 2
		qs[i].MarketCap *= 2
	}
	return qs, err
}

func (o otherFeed) History(ctx context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	pts, err := o.spyFeed.History(ctx, info, interval, from, to)
	for i := range pts {
		pts[i].Price *= 2
		pts[i].MarketCap *= 2
	}
	return pts, err
}

// History is stored by coin id whatever the feed: a database played by
// another feed since (replay after sim) holds that feed's points, so sim's
// next start backfills every coin rather than serve them, although its
// own saved state is intact. And a coin's history never reaches before
// its listing in the feed that serves it, where the store may hold
// another feed's points.
func TestEngineAnotherFeedsHistoryIsReplaced(t *testing.T) {
	t.Parallel()
	store := openStore(t, loadedStore(t)) // sim seed 1, loaded at start
	other := otherFeed{newSpy(t, 1)}
	later := start.Add(2 * time.Hour)
	var log strings.Builder
	e := New(Config{Feed: other, Store: store, Clock: func() time.Time { return later }, Log: slog.New(slog.NewTextHandler(&log, nil)), Refresh: time.Millisecond})
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Its first start on the database: the log says whose points it replaces.
	if !strings.Contains(log.String(), `msg="stored history is another feed's; backfilling" stored_by="sim/v4(`) {
		t.Errorf("the other feed's first start logged:\n%s", log.String())
	}
	pts := engineHistory(t, e, "bitcoin", 30, coinpulse.Daily)
	if len(pts) == 0 || pts[0].Timestamp.Before(otherListing) {
		t.Errorf("bitcoin's 30 days under a feed that lists it 10 days ago start at %v, before %v: the store's older points are the other feed's", pts[0].Timestamp, otherListing)
	}
	stored := storedHistory(t, store, "bitcoin", coinpulse.Hourly, later.Add(-24*time.Hour), later)
	samePoints(t, "bitcoin's hourly history stored by the other feed", feedHistory(t, other, "bitcoin", coinpulse.Hourly, later.Add(-24*time.Hour), later), stored)

	// sim again: its saved state (from start) matches its fingerprint,
	// but the history is the other feed's.
	evenLater := later.Add(time.Hour)
	feed := newSpy(t, 1)
	sim := loadEngine(t, feed, store, &fakeClock{t: evenLater}, 0)
	if backfilled := fullBackfills(feed, evenLater); backfilled != simCoins() {
		t.Errorf("sim after the other feed backfilled %d coins' hourly history in full, want all %d", backfilled, simCoins())
	}
	stored = storedHistory(t, store, "bitcoin", coinpulse.Hourly, evenLater.Add(-24*time.Hour), evenLater)
	samePoints(t, "bitcoin's hourly history after sim came back", feedHistory(t, feed.Feed, "bitcoin", coinpulse.Hourly, evenLater.Add(-24*time.Hour), evenLater), stored)
	got := engineHistory(t, sim, "bitcoin", 1, coinpulse.Hourly)
	got = got[:len(got)-1] // the last is the current price
	samePoints(t, "bitcoin's last day served by sim", feedHistory(t, feed.Feed, "bitcoin", coinpulse.Hourly, got[0].Timestamp, got[len(got)-1].Timestamp), got)
	// And a warm start of sim after that is warm again.
	feed = newSpy(t, 1)
	loadEngine(t, feed, store, &fakeClock{t: evenLater}, 0)
	if n := fullBackfills(feed, evenLater); n != 0 {
		t.Errorf("sim's second start backfilled %d coins in full", n)
	}
}

// fullBackfills counts, and forgets, the coins whose hourly history feed
// was asked for in full (the 90-day window, and an hour) at now.
func fullBackfills(feed *spyFeed, now time.Time) int {
	n := 0
	for _, c := range feed.take() {
		if c.interval == coinpulse.Hourly && c.from.Equal(now.Add(-HourlyWindow-time.Hour)) {
			n++
		}
	}
	return n
}

// failingOther is otherFeed whose History fails from call failAt on.
type failingOther struct {
	otherFeed
	calls  atomic.Int32
	failAt int32
}

func (f *failingOther) History(ctx context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	if f.calls.Add(1) >= f.failAt {
		return nil, errors.New("failing feed: down")
	}
	return f.otherFeed.History(ctx, info, interval, from, to)
}

// A backfill by another feed that fails part way has replaced some of
// sim's points: sim's next start backfills every coin, although its own
// saved state is intact, and the failure names the feed's error, not the
// writes it cancelled.
func TestEngineAnotherFeedsFailedBackfillIsReplaced(t *testing.T) {
	t.Parallel()
	store := openStore(t, loadedStore(t)) // sim seed 1, loaded at start
	later := start.Add(2 * time.Hour)
	other := &failingOther{otherFeed: otherFeed{newSpy(t, 1)}, failAt: int32(simCoins()) * 6 / 5}
	e := New(Config{Feed: other, Store: store, Clock: func() time.Time { return later }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: time.Millisecond})
	if err := e.Load(context.Background()); err == nil || !strings.Contains(err.Error(), "failing feed: down") {
		t.Fatalf("Load with a feed failing part way: %v, want its error", err)
	}
	feed := newSpy(t, 1)
	loadEngine(t, feed, store, &fakeClock{t: later}, 0)
	if backfilled := fullBackfills(feed, later); backfilled != simCoins() {
		t.Errorf("sim after another feed's failed backfill backfilled %d coins in full, want all %d", backfilled, simCoins())
	}
	stored := storedHistory(t, store, "bitcoin", coinpulse.Hourly, later.Add(-24*time.Hour), later)
	samePoints(t, "bitcoin's hourly history", feedHistory(t, feed.Feed, "bitcoin", coinpulse.Hourly, later.Add(-24*time.Hour), later), stored)
}

// A feed's first start logs that it replaces another feed's history only
// when the history is another's: here its saved state is gone but the
// history is its own.
func TestEngineOwnHistoryIsNotAnotherFeeds(t *testing.T) {
	t.Parallel()
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	feed := newSpy(t, 1)
	if err := store.PutKV(context.Background(), historyKey, []byte(feed.String())); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	e := New(Config{Feed: feed, Store: store, Clock: func() time.Time { return start }, Log: slog.New(slog.NewTextHandler(&log, nil)), Refresh: time.Millisecond})
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "another feed's") {
		t.Errorf("a start on the feed's own history logged:\n%s", log.String())
	}
}

// quotedFeed is the sim feed asking for its late hours to be rolled up
// from quotes, as the coingecko feed does.
type quotedFeed struct{ *spyFeed }

func (quotedFeed) RollupFromQuotes() bool { return true }

// A feed whose history costs a call a coin has a late tick's hour rolled
// up from the tick's quotes, without asking History; a skipped hour is
// still filled from History.
func TestEngineQuotedRollup(t *testing.T) {
	t.Parallel()
	store := openStore(t, loadedStore(t))
	clock := &fakeClock{t: start}
	feed := quotedFeed{newSpy(t, 1)}
	e := New(Config{Feed: feed, Store: store, Clock: clock.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: time.Millisecond})
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	feed.take()
	env := engineEnv{engine: e, feed: feed.spyFeed, store: store, clock: clock}
	h := start.Truncate(time.Hour).Add(time.Hour)
	s := env.tick(t, h.Add(7*time.Minute))
	got := storedHistory(t, store, "bitcoin", coinpulse.Hourly, h, h)
	btc := lookup(t, s, "bitcoin")
	if len(got) != 1 || got[0].Price != btc.CurrentPrice || got[0].MarketCap != *btc.MarketCap {
		t.Errorf("the point of an hour ticked late: %+v, want the tick's quote %v", got, btc.CurrentPrice)
	}
	if calls := feed.take(); len(calls) != 0 {
		t.Errorf("a late tick asked the feed for %d histories, want none", len(calls))
	}
	// 01:00 skipped: both hours come from History.
	env.tick(t, h.Add(2*time.Hour+5*time.Minute))
	got = storedHistory(t, store, "bitcoin", coinpulse.Hourly, h.Add(time.Hour), h.Add(2*time.Hour))
	samePoints(t, "hours after a skipped one", feedHistory(t, feed.Feed, "bitcoin", coinpulse.Hourly, h.Add(time.Hour), h.Add(2*time.Hour)), got)
	if calls := feed.take(); len(calls) == 0 {
		t.Error("a skipped hour was not filled from History")
	}
}

// droppingFeed is quotedFeed that stops quoting one coin, as a pair
// delisted since the start.
type droppingFeed struct {
	quotedFeed
	drop string
}

func (d droppingFeed) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	q, err := d.quotedFeed.Quotes(ctx, now)
	return slices.DeleteFunc(q, func(x coinpulse.Quote) bool { return x.CoinID == d.drop }), err
}

// A coin the feed stopped quoting gets no hourly point from a quote more
// than an hour old.
func TestEngineStaleQuoteNotRolledUp(t *testing.T) {
	t.Parallel()
	store := openStore(t, loadedStore(t))
	clock := &fakeClock{t: start}
	feed := droppingFeed{quotedFeed{newSpy(t, 1)}, "bitcoin"}
	e := New(Config{Feed: feed, Store: store, Clock: clock.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: time.Millisecond})
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	env := engineEnv{engine: e, feed: feed.spyFeed, store: store, clock: clock}
	h := start.Truncate(time.Hour)
	env.tick(t, h.Add(time.Hour))   // bitcoin's last quote is of 12:34:56, within the hour before 13:00
	env.tick(t, h.Add(2*time.Hour)) // more than an hour before 14:00
	if got := timestamps(storedHistory(t, store, "bitcoin", coinpulse.Hourly, h.Add(time.Hour), h.Add(2*time.Hour))); len(got) != 1 || !got[0].Equal(h.Add(time.Hour)) {
		t.Errorf("bitcoin's points after its quotes stopped: %v, want 13:00 only", got)
	}
	if got := storedHistory(t, store, "ethereum", coinpulse.Hourly, h.Add(2*time.Hour), h.Add(2*time.Hour)); len(got) != 1 {
		t.Errorf("ethereum's point at 14:00: %v", got)
	}
}

// A backfill says how far it is, every Progress.
func TestEngineBackfillProgress(t *testing.T) {
	t.Parallel()
	var log testlog.Buffer
	clock := &fakeClock{t: start}
	// (100 coins: a progress every coin saves the state every coin.)
	feed := quotedFeed{smallSpy(t)}
	e := New(Config{Feed: feed, Store: openStore(t, filepath.Join(t.TempDir(), "db")), Clock: clock.Now,
		Log: slog.New(slog.NewTextHandler(&log, nil)), Refresh: time.Millisecond, Progress: time.Nanosecond})
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := log.String()
	if !strings.Contains(out, "coins_done=1 coins=100") || !strings.Contains(out, "coins_done=100 coins=100") || !strings.Contains(out, "left=0s") {
		t.Errorf("no progress:\n%.2000s", out)
	}
}

// blockedFeed is quotedFeed whose History waits until release is closed.
type blockedFeed struct {
	quotedFeed
	release chan struct{}
}

func (b blockedFeed) History(ctx context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.quotedFeed.History(ctx, info, interval, from, to)
}

// A feed whose history costs a call a coin has its quotes served while
// Load backfills, marked Backfilling, refreshed every Refresh; the
// snapshot after the backfill is whole, and later than those.
func TestEngineServesQuotesWhileBackfilling(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: start}
	feed := blockedFeed{quotedFeed{newSpy(t, 1)}, make(chan struct{})}
	e := New(Config{Feed: feed, Store: openStore(t, filepath.Join(t.TempDir(), "db")), Clock: clock.Now,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- e.Load(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for e.Current() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	s := e.Current()
	if s == nil || !s.Backfilling || s.Len() != simCoins() {
		t.Fatalf("while backfilling: %+v", s)
	}
	if btc := lookup(t, s, "bitcoin"); btc.CurrentPrice <= 0 || btc.PriceChangePercentage24h != nil {
		t.Errorf("bitcoin while backfilling: price %v, 24 h change %v (want a price, no change yet)", btc.CurrentPrice, btc.PriceChangePercentage24h)
	}
	// The clock moves on: the quotes are refreshed while History waits.
	clock.Set(start.Add(time.Minute))
	time.Sleep(200 * time.Millisecond)
	close(feed.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s = e.Current()
	if s.Backfilling || !s.AsOf.Equal(start.Add(time.Minute).Truncate(50*time.Millisecond)) {
		t.Errorf("after the backfill: backfilling %v, as of %v", s.Backfilling, s.AsOf)
	}
	if btc := lookup(t, s, "bitcoin"); btc.PriceChangePercentage24h == nil {
		t.Error("no 24 h change after the backfill")
	}
}

// gapFills counts the calls for hourly points from after the hour of
// from on: a saved coin's gap being filled, not a coin backfilled whole.
func gapFills(calls []historyCall, from time.Time) int {
	n := 0
	for _, c := range calls {
		if c.interval == coinpulse.Hourly && c.from.Equal(from.Truncate(time.Hour).Add(time.Hour)) {
			n++
		}
	}
	return n
}

// A first backfill that fails part way keeps the coins it stored: the
// next start (two hours later here) backfills only the others in full and
// fills the gap of the ones kept, and every coin's history is whole.
func TestEngineFailedBackfillGoesOn(t *testing.T) {
	t.Parallel()
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	n := simCoins()
	e := New(Config{
		Feed: &flakyFeed{spyFeed: newSpy(t, 1), failAt: n + 1}, Store: store, Clock: func() time.Time { return start },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: time.Millisecond,
	})
	if err := e.Load(context.Background()); err == nil || !strings.Contains(err.Error(), "flaky feed") {
		t.Fatalf("Load with a feed failing part way: %v, want its error", err)
	}
	later := start.Add(2 * time.Hour)
	feed := newSpy(t, 1)
	e = loadEngine(t, feed, store, &fakeClock{t: later}, 0)
	calls := feed.take()
	full, gap := 0, gapFills(calls, start)
	for _, c := range calls {
		if c.interval == coinpulse.Hourly && c.from.Equal(later.Add(-HourlyWindow-time.Hour)) {
			full++
		}
	}
	// n calls succeeded (two a coin): about n/2 coins were whole when it
	// failed.
	if full+gap != n || gap < n/2-10 || full < 1 {
		t.Errorf("the second start backfilled %d coins in full and filled the gap of %d; want about %d each, %d in all", full, gap, n/2, n)
	}
	if s := e.Current(); s == nil || s.Len() != n {
		t.Fatalf("after the second start: %v", s)
	}
	for _, id := range []string{e.order[0], e.order[n/2], e.order[n-1]} {
		samePoints(t, id+"'s hourly history", feedHistory(t, feed.Feed, id, coinpulse.Hourly, later.Add(-26*time.Hour), later),
			storedHistory(t, store, id, coinpulse.Hourly, later.Add(-26*time.Hour), later))
		samePoints(t, id+"'s daily history", feedHistory(t, feed.Feed, id, coinpulse.Daily, later.Add(-400*24*time.Hour), later),
			storedHistory(t, store, id, coinpulse.Daily, later.Add(-400*24*time.Hour), later))
	}
}

// stallingFeed is a spyFeed whose History, from call stallAt on, waits
// for release and then fails.
type stallingFeed struct {
	*spyFeed
	calls   atomic.Int32
	stallAt int32
	stalled chan struct{} // closed when the first call stalls
	once    sync.Once
	release chan struct{}
}

func (f *stallingFeed) History(ctx context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	if f.calls.Add(1) >= f.stallAt {
		f.once.Do(func() { close(f.stalled) })
		<-f.release
		return nil, errors.New("stalling feed: gone")
	}
	return f.spyFeed.History(ctx, info, interval, from, to)
}

// While a first backfill runs, the coins stored are saved every Progress,
// with the history marked as the feed's: a crash then loses at most the
// coins of the last interval. Here the feed stalls, the test reads what
// is saved, as a start after a crash would, and a second engine on the
// store goes on from it.
func TestEngineBackfillSavesProgress(t *testing.T) {
	t.Parallel()
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	// It stalls at the call of the coin after the first 40 % (two calls a
	// coin).
	n := simCoins()
	want := 2 * n / 5
	f := &stallingFeed{spyFeed: newSpy(t, 1), stallAt: int32(2*want) + 1, stalled: make(chan struct{}), release: make(chan struct{})}
	e := New(Config{
		Feed: f, Store: store, Clock: func() time.Time { return start }, Progress: time.Nanosecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: time.Millisecond,
	})
	loaded := make(chan error, 1)
	go func() { loaded <- e.Load(context.Background()) }()
	<-f.stalled
	// The workers hold two stalled calls; every coin before them was
	// handed on, stored and saved at the next result, but for the last
	// one or two, whose save waits for a result after them.
	var s savedState
	deadline := time.Now().Add(10 * time.Second)
	for {
		blob, err := store.GetKV(context.Background(), e.stateKey())
		if err == nil {
			if s, err = decodeState(blob); err != nil {
				t.Fatal(err)
			}
		}
		if len(s.Coins) >= want-10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(s.Coins) < want-10 || len(s.Coins) > want || !s.LastHour.Equal(start.Truncate(time.Hour)) {
		t.Errorf("saved while stalled: %d coins, last hour %v; want about %d, %v", len(s.Coins), s.LastHour, want, start.Truncate(time.Hour))
	}
	if by, err := store.GetKV(context.Background(), historyKey); err != nil || string(by) != e.fingerprint() {
		t.Errorf("history marked %q, %v; want %q", by, err, e.fingerprint())
	}
	saved := len(s.Coins)
	close(f.release)
	if err := <-loaded; err == nil || !strings.Contains(err.Error(), "stalling feed") {
		t.Fatalf("Load: %v, want the feed's error", err)
	}
	feed := newSpy(t, 1)
	loadEngine(t, feed, store, &fakeClock{t: start}, 0)
	// Within the same hour: no gap to fill, the others backfilled whole.
	if full := fullBackfills(feed, start); full > n-saved || full < n-want-10 {
		t.Errorf("the second start backfilled %d coins in full; want the %d not saved, or fewer", full, n-saved)
	}
}

// A start that goes on from a saved backfill's progress keeps it when it
// fails, or is stopped, before it stores a coin of its own: the start
// after it goes on from the same point (a review found the second attempt
// marking the history "incomplete", so that the third backfilled all).
func TestEngineResumedBackfillKeepsProgressItSavedNothingTo(t *testing.T) {
	t.Parallel()
	for _, stop := range []bool{false, true} {
		store := openStore(t, filepath.Join(t.TempDir(), "db"))
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		e := New(Config{Feed: &flakyFeed{spyFeed: newSpy(t, 1), failAt: simCoins() + 1}, Store: store, Clock: func() time.Time { return start }, Log: quiet, Refresh: time.Millisecond})
		if err := e.Load(context.Background()); err == nil {
			t.Fatal("the first attempt did not fail")
		}
		// The second: every call fails at once (the upstream down), or
		// it is stopped while its first calls wait.
		f := &stallingFeed{spyFeed: newSpy(t, 1), stallAt: 1, stalled: make(chan struct{}), release: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		e = New(Config{Feed: f, Store: store, Clock: func() time.Time { return start }, Log: quiet, Refresh: time.Millisecond})
		done := make(chan error, 1)
		go func() { done <- e.Load(ctx) }()
		if stop {
			<-f.stalled
			cancel()
		}
		close(f.release)
		if err := <-done; err == nil {
			t.Fatal("the second attempt did not fail")
		}
		cancel()
		feed := newSpy(t, 1)
		loadEngine(t, feed, store, &fakeClock{t: start}, 0)
		if full, n := fullBackfills(feed, start), simCoins(); full > n/2+10 {
			t.Errorf("stopped %v: the third attempt backfilled %d coins in full; want the ~%d the first did not store", stop, full, n/2)
		}
	}
}

// Snapshots of one instant have one id on every node of one
// configuration, and another id under another feed configuration, coin
// set or movers' floor (an audit: a tag from the sim feed got a 304 from
// the replay one restarted in the same minute).
func TestSnapshotIDNamesTheConfiguration(t *testing.T) {
	engine := func(seed int64, floor float64, coins ...string) *Engine {
		f, err := sim.New(seed, 0)
		if err != nil {
			t.Fatal(err)
		}
		e := New(Config{Feed: f, MinMoverVolume: floor, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		e.order = coins
		return e
	}
	id := func(e *Engine) string { return snapshotID(start, e.configHash()) }
	base := id(engine(1, 0, "bitcoin", "ethereum"))
	if again := id(engine(1, 0, "ethereum", "bitcoin")); again != base {
		t.Errorf("one configuration, its coins in another order: id %q, then %q; want one", base, again)
	}
	for name, e := range map[string]*Engine{
		"another seed":        engine(2, 0, "bitcoin", "ethereum"),
		"another coin set":    engine(1, 0, "bitcoin", "tether"),
		"another mover floor": engine(1, 1e6, "bitcoin", "ethereum"),
	} {
		if got := id(e); got == base {
			t.Errorf("%s: snapshot id %q, the same as the first configuration's", name, got)
		}
	}
	if !strings.HasPrefix(base, strconv.FormatInt(start.UnixMilli(), 36)+"-") {
		t.Errorf("snapshot id %q does not begin with its time", base)
	}

	// A loaded engine's snapshots carry its configuration's hash (a
	// review: nothing failed when Load did not set it).
	env := loadedEnv(t, 0)
	s := env.tick(t, start.Add(time.Minute))
	if want := snapshotID(s.AsOf, env.engine.configHash()); s.ID != want {
		t.Errorf("snapshot id %q, want %q", s.ID, want)
	}
}
