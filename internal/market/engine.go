package market

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"coinpulse"
)

// Config configures an Engine.
type Config struct {
	Feed  coinpulse.Feed
	Store coinpulse.Store
	Clock coinpulse.Clock
	Log   *slog.Logger
	// Refresh is the time between quotes (default 60 s).
	Refresh time.Duration
	// MinMoverVolume is the top movers' 24 h volume floor (USD).
	MinMoverVolume float64
	// Retain is how long snapshots stay reachable by id (default 5 min).
	Retain time.Duration
	// Progress is how often a long backfill logs how far it is (default
	// 30 s).
	Progress time.Duration
	// Turn, when set, makes the nodes sharing Store take turns at a
	// costly feed's history (coinpulse.QuotedRollup): a node's turn
	// lapses Turn after its last renewal (see turn.go). Zero: one node
	// uses the store, and takes no turn.
	Turn time.Duration
}

// HourlyWindow is how far back hourly history is kept.
const HourlyWindow = 90 * 24 * time.Hour

// maxRetained bounds the retained snapshots whatever the refresh rate:
// each holds the universe's figures (about 0.9 MB for 1,000 coins), and
// at --refresh 1s five minutes of them took 270 MB. 61 keeps Retain's 5
// minutes whole down to a 5 s refresh (the ones replaced 0, 5, … 300 s
// ago).
const maxRetained = 61

// retainedSnapshot is a snapshot no longer current and when it stopped
// being so: the last moment a client could have received it, from which
// it stays reachable for Config.Retain.
type retainedSnapshot struct {
	*Snapshot
	replaced time.Time
}

// Engine turns a feed's quotes into snapshots, keeps history rolled up in
// the store, and persists its running state for a warm start.
type Engine struct {
	cfg Config
	// quotedRollup: a late tick rolls its hour up from the latest quotes
	// (see coinpulse.QuotedRollup).
	quotedRollup bool

	current atomic.Pointer[Snapshot]

	mu       sync.Mutex
	retained []retainedSnapshot
	subs     []chan *Snapshot

	// Owned by the goroutine that runs Load, then Run.
	coins    map[string]*coinState
	order    []string
	cfgHash  uint32 // configHash of order, set by load
	lastHour time.Time
	lastDay  time.Time
	// warming: Load is backfilling history for a quotedRollup feed and
	// publishes quotes meanwhile, every Refresh (see warm).
	warming bool
	warmed  bool // a snapshot was published while warming
	// pending: while Load backfills the coins new to the saved state,
	// those whose history is not yet stored. The others are saved with
	// the state from time to time (see saveProgress), so that a start
	// after a failure, a crash or a stop goes on from there.
	pending map[string]bool
	// node names this engine in turns at the feed's history.
	node string
}

// New returns an engine; call Load, then Run.
func New(cfg Config) *Engine {
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Minute
	}
	if cfg.Retain <= 0 {
		cfg.Retain = 5 * time.Minute
	}
	if cfg.Progress <= 0 {
		cfg.Progress = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	e := &Engine{cfg: cfg, coins: map[string]*coinState{}, node: newNode()}
	if q, ok := cfg.Feed.(coinpulse.QuotedRollup); ok {
		e.quotedRollup = q.RollupFromQuotes()
	}
	return e
}

// Current returns the latest snapshot, or nil before Load has finished.
func (e *Engine) Current() *Snapshot { return e.current.Load() }

// Snapshot returns a retained snapshot by id, or nil.
func (e *Engine) Snapshot(id string) *Snapshot {
	if cur := e.current.Load(); cur != nil && cur.ID == id {
		return cur
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.retained {
		if s.ID == id {
			return s.Snapshot
		}
	}
	return nil
}

// Refresh returns the configured refresh interval.
func (e *Engine) Refresh() time.Duration { return e.cfg.Refresh }

// savedState is what the engine persists for a warm start.
type savedState struct {
	Fingerprint string
	LastHour    time.Time
	LastDay     time.Time
	Coins       map[string]*coinState
}

func (e *Engine) stateKey() string { return "market:state:" + e.cfg.Feed.Name() }

// historyKey holds the fingerprint of the feed whose figures the stored
// history holds: that of the coins in the saved state, the others being
// backfilled whole when they are next asked for. It is "incomplete" while
// a backfill that replaces another feed's history (or starts on an empty
// store) has saved nothing yet, and names the new feed from its first
// progress save on (see saveProgress). History is stored by coin id,
// whatever the feed: a database played by another feed since this one
// last ran (replay after sim, then sim again) holds the other feed's
// points, so the saved state is not reused and every coin is backfilled,
// replacing them. A database from before the key was written holds the
// one feed it ever had. The key is read at start only: nodes sharing a
// database must run one feed.
const historyKey = "market:history-feed"

// fingerprint identifies the feed's configuration: a saved state from
// another one (another seed, another universe) is not reused.
func (e *Engine) fingerprint() string {
	if s, ok := e.cfg.Feed.(fmt.Stringer); ok {
		return s.String()
	}
	return e.cfg.Feed.Name()
}

// Load restores the saved state (or backfills history from the feed on a
// first start), fills any gap since the last run, takes the first quotes
// and publishes the first snapshot. With Config.Turn, another node's
// backfill of a costly feed is waited for, and its work loaded.
func (e *Engine) Load(ctx context.Context) error {
	start := time.Now()
	for waited := false; ; waited = true {
		again, err := e.load(ctx, start, waited)
		if !again {
			return err
		}
	}
}

// load is one attempt of Load: again when another node was at the feed's
// history meanwhile, and what it stored is to be loaded; waited, when an
// attempt before this one was.
func (e *Engine) load(ctx context.Context, start time.Time, waited bool) (again bool, err error) {
	// A Load that failed part way is run again from the start.
	e.order, e.coins = e.order[:0], map[string]*coinState{}
	now := e.aligned(e.cfg.Clock())
	universe, err := e.cfg.Feed.Universe(ctx)
	if err != nil {
		return false, fmt.Errorf("feed universe: %w", err)
	}
	// The turn at the history as it is before the saved state is read:
	// a turn that comes and goes meanwhile leaves a saved state to read
	// again (see historyTurn).
	turns := e.cfg.Turn > 0 && e.quotedRollup
	var before []byte
	if turns {
		if before, err = e.readTurn(ctx); err != nil {
			e.cfg.Log.Warn("cannot read whether another node is at the feed's history; this node goes on alone", "err", err)
			turns = false
		}
	}
	saved := e.loadState(ctx)
	var missing []coinpulse.CoinInfo
	for _, info := range universe {
		e.order = append(e.order, info.ID)
		if c := saved.Coins[info.ID]; c != nil {
			c.Info = info
			e.coins[info.ID] = c
		} else {
			missing = append(missing, info)
		}
	}
	e.cfgHash = e.configHash()
	e.lastHour, e.lastDay = saved.LastHour, saved.LastDay
	hour := now.Truncate(time.Hour)
	filled := len(missing) > 0 || e.lastHour.Before(hour)
	// The history is filled up to fillTo: the present hour, but after
	// waiting for another node's turn, when the hour turned since its
	// save, the hour before it: the first quotes roll the last one up,
	// as a late refresh's do, rather than a call a coin.
	fillTo := hour
	if waited && e.quotedRollup && e.lastHour.Equal(hour.Add(-time.Hour)) {
		fillTo = e.lastHour
	}
	for _, info := range missing {
		e.coins[info.ID] = newCoinState(info)
	}
	e.warmed = false
	if e.quotedRollup && filled {
		// History from such a feed costs a call a coin at the upstream's
		// rate: minutes for a first start. Serve its quotes meanwhile,
		// refreshed every Refresh, and say the history is incomplete.
		e.warming = true
		defer func() { e.warming = false }()
		e.warm(ctx)
		if turns {
			t, wait, terr := e.historyTurn(ctx, before)
			if terr != nil || wait {
				return wait, terr
			}
			if t != nil {
				defer t.release()
				// The work runs under the turn: one lost stops it, and
				// the node waits for the node that took it over.
				outer := ctx
				ctx = t.ctx
				defer func() {
					if err != nil && t.lost.Load() && outer.Err() == nil {
						again, err = true, nil
					}
				}()
			}
		}
	}
	if len(e.coins) > len(missing) && e.lastHour.Before(fillTo) {
		// Fill the gap since the last run for the coins we know (the
		// saved state's; the missing ones are backfilled whole below).
		var known []coinpulse.CoinInfo
		for _, id := range e.order {
			if c := saved.Coins[id]; c != nil {
				known = append(known, c.Info)
			}
		}
		if err := e.backfill(ctx, known, e.lastHour.Add(time.Hour), e.lastDay.Add(24*time.Hour), now); err != nil {
			return false, err
		}
	}
	if len(missing) > 0 {
		e.cfg.Log.Info("backfilling history", "coins", len(missing), "kept", len(e.coins)-len(missing), "feed", e.cfg.Feed.Name())
		// Without a saved state of this feed the stored history may be
		// another's: it is no feed's until the first progress save, so a
		// start after this one failed before that backfills again,
		// whatever its feed (see historyKey). With one, it is this feed's
		// already, and stays so.
		if len(saved.Coins) == 0 {
			if err := e.cfg.Store.PutKV(ctx, historyKey, []byte("incomplete")); err != nil {
				return false, fmt.Errorf("record the history's feed: %w", err)
			}
		}
		// The known coins' history is whole up to fillTo (the gap is
		// filled above): the progress saved says so.
		e.lastHour, e.lastDay = fillTo, fillTo.Truncate(24*time.Hour)
		e.pending = make(map[string]bool, len(missing))
		for _, info := range missing {
			e.pending[info.ID] = true
		}
		// An hour more than the window: History's first point is the one at
		// or before now − 90 days.
		err := e.backfill(ctx, missing, now.Add(-HourlyWindow-time.Hour), time.Time{}, now)
		e.pending = nil
		if err != nil {
			return false, err
		}
	}
	e.lastHour, e.lastDay = fillTo, fillTo.Truncate(24*time.Hour)
	if e.warmed {
		// Snapshots of later instants are out: go on from the present.
		// A backfill that took over an hour left hours behind it: fill
		// them from history while still serving quotes, until at most
		// one is left, which quote rolls up.
		for {
			now = e.aligned(e.cfg.Clock())
			h := now.Truncate(time.Hour)
			if h.Sub(e.lastHour) <= time.Hour {
				break
			}
			var all []coinpulse.CoinInfo
			for _, id := range e.order {
				all = append(all, e.coins[id].Info)
			}
			if err := e.backfill(ctx, all, e.lastHour.Add(time.Hour), e.lastDay.Add(24*time.Hour), h); err != nil {
				return false, err
			}
			e.lastHour, e.lastDay = h, h.Truncate(24*time.Hour)
		}
	}
	e.warming = false
	if err := e.quote(ctx, now); err != nil {
		return false, err
	}
	// Save before publishing: once the first snapshot is out the server
	// reports ready, and a shutdown from then on must find the state saved.
	// A warm start within the hour it stopped in has nothing new to save.
	if filled {
		if err := e.saveState(ctx); err != nil {
			return false, err
		}
	}
	if len(missing) > 0 {
		if err := e.cfg.Store.PutKV(ctx, historyKey, []byte(e.fingerprint())); err != nil {
			return false, fmt.Errorf("record the history's feed: %w", err)
		}
	}
	e.publish(now)
	e.cfg.Log.Info("market data ready", "feed", e.cfg.Feed.Name(), "simulated", e.cfg.Feed.Simulated(),
		"coins", len(e.coins), "backfilled", len(missing), "took", time.Since(start).Round(time.Millisecond))
	return false, nil
}

// warm publishes the feed's quotes of the present while Load backfills
// (see warming). A failure is logged: the backfill goes on, and the node
// stays unready until a snapshot is out.
func (e *Engine) warm(ctx context.Context) {
	now := e.aligned(e.cfg.Clock())
	if cur := e.current.Load(); cur != nil && !now.After(cur.AsOf) {
		return
	}
	quotes, err := e.cfg.Feed.Quotes(ctx, now)
	if err != nil {
		e.cfg.Log.Warn("quotes while backfilling failed", "feed", e.cfg.Feed.Name(), "err", err)
		return
	}
	for _, q := range quotes {
		if c := e.coins[q.CoinID]; c != nil {
			c.apply(q)
		}
	}
	if !e.warmed {
		e.cfg.Log.Info("serving quotes while history backfills", "feed", e.cfg.Feed.Name(), "coins", len(quotes))
	}
	e.warmed = true
	e.publish(now)
}

func (e *Engine) loadState(ctx context.Context) savedState {
	var s savedState
	blob, err := e.cfg.Store.GetKV(ctx, e.stateKey())
	if err != nil {
		if !coinpulse.IsNotFound(err) {
			e.cfg.Log.Warn("market state unreadable; backfilling", "err", err)
		} else if by, err := e.cfg.Store.GetKV(ctx, historyKey); err == nil && string(by) == "incomplete" {
			// A first backfill under way on another node (whose turn
			// this node then waits for), or one cut short.
			e.cfg.Log.Info("stored history is incomplete: a first backfill is under way or was cut short", "feed", e.fingerprint())
		} else if err == nil && string(by) != e.fingerprint() {
			// This feed's first start on a database another has played:
			// the backfill replaces its points.
			e.cfg.Log.Info("stored history is another feed's; backfilling", "stored_by", string(by), "feed", e.fingerprint())
		}
		return savedState{}
	}
	s, err = decodeState(blob)
	switch {
	case err != nil:
		e.cfg.Log.Warn("market state unreadable; backfilling", "err", err)
		return savedState{}
	case s.Fingerprint != e.fingerprint():
		e.cfg.Log.Info("market state is from another feed configuration; backfilling", "saved", s.Fingerprint, "feed", e.fingerprint())
		return savedState{}
	}
	if by, err := e.cfg.Store.GetKV(ctx, historyKey); err == nil && string(by) != e.fingerprint() {
		e.cfg.Log.Info("stored history is another feed's; backfilling", "stored_by", string(by), "feed", e.fingerprint())
		return savedState{}
	} else if err != nil && !coinpulse.IsNotFound(err) {
		e.cfg.Log.Warn("market history's feed unreadable; backfilling", "err", err)
		return savedState{}
	}
	return s
}

// saveState persists the running state. A cancelled ctx does not abort
// it: a shutdown is exactly when it must finish.
func (e *Engine) saveState(ctx context.Context) error {
	return e.writeState(ctx, e.order)
}

// writeState persists the state of the coins of order (see saveState).
func (e *Engine) writeState(ctx context.Context, order []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	s := savedState{Fingerprint: e.fingerprint(), LastHour: e.lastHour, LastDay: e.lastDay, Coins: e.coins}
	return e.cfg.Store.PutKV(ctx, e.stateKey(), encodeState(&s, order))
}

// saveProgress saves, during Load's backfill of the coins new to the
// saved state, the state of every coin whose history is stored (the
// pending ones left out, to be backfilled whole by the next start), then
// marks the stored history as this feed's: in that order, so that a
// crash between the two leaves the history "incomplete" and the next
// start backfills everything, as before. A failure is logged: the
// backfill goes on, and the next save, or Load's own, tries again.
func (e *Engine) saveProgress(ctx context.Context) {
	order := make([]string, 0, len(e.order))
	for _, id := range e.order {
		if !e.pending[id] {
			order = append(order, id)
		}
	}
	err := e.writeState(ctx, order)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err = e.cfg.Store.PutKV(ctx, historyKey, []byte(e.fingerprint()))
	}
	if err != nil {
		e.cfg.Log.Warn("saving the backfill's progress failed", "feed", e.cfg.Feed.Name(), "err", err)
		return
	}
	e.cfg.Log.Debug("backfill progress saved", "feed", e.cfg.Feed.Name(), "coins_saved", len(order), "coins_pending", len(e.pending))
}

// backfill asks the feed for the coins' hourly points from hourlyFrom and
// daily points from dailyFrom (zero: each coin's listing) up to now, and
// stores them. Coins are computed by two workers while the store writes
// batches, so the feed and the database work at once. While e.pending is
// set, the coins stored are saved with the state every Progress, and
// when the backfill fails or is stopped (see saveProgress).
func (e *Engine) backfill(pctx context.Context, coins []coinpulse.CoinInfo, hourlyFrom, dailyFrom, now time.Time) error {
	type result struct {
		hourly, daily coinpulse.Series
		err           error
	}
	ctx, cancel := context.WithCancel(pctx)
	defer cancel()
	jobs := make(chan coinpulse.CoinInfo)
	results := make(chan result, 8)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for info := range jobs {
				var r result
				r.hourly.CoinID, r.daily.CoinID = info.ID, info.ID
				r.hourly.Points, r.err = e.cfg.Feed.History(ctx, info, coinpulse.Hourly, hourlyFrom, now)
				if r.err == nil {
					from := dailyFrom
					if from.IsZero() {
						from = info.ListedAt
					}
					r.daily.Points, r.err = e.cfg.Feed.History(ctx, info, coinpulse.Daily, from, now)
				}
				select {
				case results <- r:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for _, info := range coins {
			select {
			case jobs <- info:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(results) }()

	// A writer goroutine stores batches while the workers compute the next
	// coins: the feed and the database work at once. While progress is
	// kept (e.pending), it stores what the workers fetched even once a
	// feed error or a shutdown has stopped them, so that the progress
	// saved keeps it; its own error stops them. A batch with a stored
	// channel has it closed once the writer is done with it.
	type batch struct {
		hourly, daily []coinpulse.Series
		stored        chan struct{}
	}
	wbase := ctx
	if e.pending != nil {
		wbase = context.WithoutCancel(pctx)
	}
	batches := make(chan batch, 1)
	writeErr := make(chan error, 1)
	var (
		storedMu sync.Mutex
		stored   []string // coins whose batch is stored, not yet taken from e.pending
	)
	go func() {
		var err error
		for b := range batches {
			if err == nil { // else drain; the first error is reported
				err = e.storeBatch(wbase, b.hourly, b.daily)
				if err != nil {
					cancel()
				} else {
					storedMu.Lock()
					for _, s := range b.hourly {
						stored = append(stored, s.CoinID)
					}
					storedMu.Unlock()
				}
			}
			if b.stored != nil {
				close(b.stored)
			}
		}
		writeErr <- err
	}()
	// progress takes the coins stored since its last call out of
	// e.pending, and reports whether there were any.
	progress := func() bool {
		storedMu.Lock()
		defer storedMu.Unlock()
		for _, id := range stored {
			delete(e.pending, id)
		}
		n := len(stored)
		stored = stored[:0]
		return n > 0
	}
	var cur batch
	points, done := 0, 0
	started, logged := time.Now(), time.Now()
	var feedErr error
	// While Load warms (see warm), quotes are published every Refresh,
	// whether or not the history calls answer meanwhile.
	var refresh <-chan time.Time
	if e.warming {
		t := time.NewTicker(e.cfg.Refresh)
		defer t.Stop()
		refresh = t.C
	}
results:
	for {
		var r result
		select {
		case <-refresh:
			e.warm(ctx)
			continue
		case x, ok := <-results:
			if !ok {
				break results
			}
			r = x
		}
		if r.err != nil {
			if feedErr == nil {
				feedErr = fmt.Errorf("feed history of %s: %w", r.hourly.CoinID, r.err)
				cancel()
			}
			continue
		}
		c := e.coins[r.hourly.CoinID]
		c.addSeries(coinpulse.Daily, r.daily.Points)
		c.addSeries(coinpulse.Hourly, r.hourly.Points)
		cur.hourly, cur.daily = append(cur.hourly, r.hourly), append(cur.daily, r.daily)
		points += len(r.hourly.Points) + len(r.daily.Points)
		// A backfill from an upstream at its rate can take minutes (hours
		// for thousands of coins): say how far it is, and keep it.
		tick := false
		if done++; time.Since(logged) >= e.cfg.Progress {
			tick, logged = true, time.Now()
			e.cfg.Log.Info("backfilling history", "feed", e.cfg.Feed.Name(), "coins_done", done, "coins", len(coins),
				"took", time.Since(started).Round(time.Second), "left", (time.Since(started) / time.Duration(done) * time.Duration(len(coins)-done)).Round(time.Second))
		}
		switch {
		case tick && e.pending != nil:
			// Store what was fetched, wait for it, and save it all: a
			// crash loses at most the coins of one Progress.
			cur.stored = make(chan struct{})
			batches <- cur
			<-cur.stored
			if progress() {
				e.saveProgress(pctx)
			}
			cur, points = batch{}, 0
		case points >= 50_000:
			batches <- cur
			cur, points = batch{}, 0
		}
	}
	if len(cur.hourly) > 0 {
		batches <- cur
	}
	close(batches)
	werr := <-writeErr
	if e.pending != nil && progress() {
		// What was stored is kept: after a failure or a stop the next
		// start goes on from there, and after a success Load's steps
		// after the backfill may still fail.
		e.saveProgress(pctx)
	}
	// The feed's error first: it stopped the workers, and the writer's
	// error, if any, followed.
	if feedErr != nil {
		return feedErr
	} else if werr != nil {
		return werr
	}
	return ctx.Err()
}

// storeBatch stores a backfill batch's hourly and daily series, each
// write given a minute at most.
func (e *Engine) storeBatch(ctx context.Context, hourly, daily []coinpulse.Series) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.cfg.Store.PutHistory(ctx, coinpulse.Hourly, hourly); err != nil {
		return fmt.Errorf("store hourly history: %w", err)
	}
	if err := e.cfg.Store.PutHistory(ctx, coinpulse.Daily, daily); err != nil {
		return fmt.Errorf("store daily history: %w", err)
	}
	return nil
}

// Run quotes the feed on every Refresh boundary until ctx ends, then saves
// the state. A Load that ran past a boundary (a first start's backfill
// can take a few seconds) is followed at once by the quotes of the last
// boundary passed, not a refresh later.
func (e *Engine) Run(ctx context.Context) error {
	next := e.aligned(e.cfg.Clock())
	if s := e.current.Load(); s == nil || !s.AsOf.Before(next) {
		next = next.Add(e.cfg.Refresh)
	}
	t := time.NewTimer(next.Sub(e.cfg.Clock()))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return e.saveState(ctx)
		case <-t.C:
			if err := e.tick(ctx, next); err != nil && !errors.Is(err, context.Canceled) {
				e.cfg.Log.Error("market refresh failed", "err", err)
			}
			// A refresh that overran skips the boundaries it missed.
			now := e.cfg.Clock()
			next = e.aligned(now).Add(e.cfg.Refresh)
			t.Reset(next.Sub(now))
		}
	}
}

// aligned is the last Refresh boundary at or before t. Quotes are taken on
// the boundaries, so nodes sharing a feed and a refresh interval publish the
// same snapshots, with the same ids and ETags, whenever each one started.
func (e *Engine) aligned(t time.Time) time.Time {
	return t.UTC().Truncate(max(e.cfg.Refresh, time.Millisecond))
}

// tick takes quotes at now, rolls hourly and daily points up when a
// boundary has passed, and publishes a new snapshot.
func (e *Engine) tick(ctx context.Context, now time.Time) error {
	if err := e.quote(ctx, now); err != nil {
		return err
	}
	e.publish(now)
	return nil
}

// quote takes quotes at now and rolls history up.
func (e *Engine) quote(ctx context.Context, now time.Time) error {
	quotes, err := e.cfg.Feed.Quotes(ctx, now)
	if err != nil {
		return fmt.Errorf("feed quotes: %w", err)
	}
	for _, q := range quotes {
		if c := e.coins[q.CoinID]; c != nil {
			c.apply(q)
		}
	}
	return e.rollup(ctx, now)
}

// rollup records an hourly point when the hour has turned and a daily one
// when the day has: from the latest quotes when they were taken on the
// hour, else, and for a gap of more than one step (the process was
// stopped), from the feed's history.
func (e *Engine) rollup(ctx context.Context, now time.Time) error {
	hour, day := now.Truncate(time.Hour), now.Truncate(24*time.Hour)
	if !hour.After(e.lastHour) {
		return nil
	}
	// A tick on the hour has the hour's own quotes; any later one (a
	// refresh that does not divide the hour, a tick missed or failed)
	// takes the hour's point from the feed's history, so that a point
	// stamped on the grid holds the figures of that time, as a backfill's
	// — unless the feed's history costs an upstream call a coin
	// (quotedRollup): then the latest quotes stand for the hour, as long
	// as no hour was skipped.
	late := !now.Equal(hour) && !e.quotedRollup
	if hour.Sub(e.lastHour) > time.Hour || day.Sub(e.lastDay) > 24*time.Hour || late {
		var infos []coinpulse.CoinInfo
		for _, id := range e.order {
			infos = append(infos, e.coins[id].Info)
		}
		if err := e.backfill(ctx, infos, e.lastHour.Add(time.Hour), e.lastDay.Add(24*time.Hour), hour); err != nil {
			return err
		}
	} else {
		var hourly, daily []coinpulse.Series
		for _, id := range e.order {
			c := e.coins[id]
			// A coin the feed stopped quoting (a pair delisted since the
			// start) gets no point from a quote more than an hour old:
			// its history stops rather than repeat a frozen price.
			if !c.HasQuote || c.Updated.Before(hour.Add(-time.Hour)) {
				continue
			}
			p := coinpulse.HistoryPoint{Timestamp: hour, Price: c.Price, MarketCap: c.MarketCap, TotalVolume: c.Volume}
			c.addPoint(coinpulse.Hourly, p)
			hourly = append(hourly, coinpulse.Series{CoinID: id, Points: []coinpulse.HistoryPoint{p}})
			if day.After(e.lastDay) {
				p.Timestamp = day
				c.addPoint(coinpulse.Daily, p)
				daily = append(daily, coinpulse.Series{CoinID: id, Points: []coinpulse.HistoryPoint{p}})
			}
		}
		if err := e.cfg.Store.PutHistory(ctx, coinpulse.Hourly, hourly); err != nil {
			return fmt.Errorf("roll up hourly history: %w", err)
		}
		if err := e.cfg.Store.PutHistory(ctx, coinpulse.Daily, daily); err != nil {
			return fmt.Errorf("roll up daily history: %w", err)
		}
	}
	if day.After(e.lastDay) {
		if err := e.cfg.Store.PruneHistory(ctx, coinpulse.Hourly, now.Add(-HourlyWindow-time.Hour)); err != nil {
			return fmt.Errorf("prune hourly history: %w", err)
		}
	}
	e.lastHour, e.lastDay = hour, day
	return e.saveState(ctx)
}

// configHash is a hash of what decides a snapshot's figures besides its
// time: the feed's fingerprint (its configuration), the set of coins it
// serves and the movers' volume floor. Every node of one configuration
// has the same.
func (e *Engine) configHash() uint32 {
	h := fnv.New32a()
	io.WriteString(h, e.fingerprint())
	h.Write([]byte{0})
	io.WriteString(h, strconv.FormatFloat(e.cfg.MinMoverVolume, 'g', -1, 64))
	for _, id := range slices.Sorted(slices.Values(e.order)) {
		h.Write([]byte{0})
		io.WriteString(h, id)
	}
	return h.Sum32()
}

// publish builds a snapshot from the coins' state and makes it current.
func (e *Engine) publish(now time.Time) {
	details := make([]coinpulse.CoinDetail, 0, len(e.order))
	for _, id := range e.order {
		if c := e.coins[id]; c.HasQuote {
			details = append(details, c.detail(now))
		}
	}
	id := snapshotID(now, e.cfgHash)
	if e.warming {
		// Its own id: the whole snapshot of the same instant, which may
		// follow when the backfill ends within the refresh, is another.
		id += "-b"
	}
	var markets *int
	if mc, ok := e.cfg.Feed.(coinpulse.MarketCounter); ok {
		if n, ok := mc.Markets(); ok {
			markets = &n
		}
	}
	s := Build(id, now, e.cfg.Feed.Name(), e.cfg.Feed.Simulated(), details, markets, e.cfg.MinMoverVolume)
	s.Backfilling = e.warming
	e.mu.Lock()
	if prev := e.current.Load(); prev != nil && prev.ID != s.ID {
		prev.Retire()
		e.retained = append(e.retained, retainedSnapshot{prev, now})
	}
	// Kept Retain after it was replaced, so at least Retain after a
	// client last received it, whatever the refresh interval.
	cut := 0
	for cut < len(e.retained) && (now.Sub(e.retained[cut].replaced) > e.cfg.Retain || len(e.retained)-cut > maxRetained) {
		cut++
	}
	e.retained = append(e.retained[:0], e.retained[cut:]...)
	e.current.Store(s)
	for _, c := range e.subs {
		select { // replace an unread older snapshot: readers want the latest
		case <-c:
		default:
		}
		c <- s
	}
	e.mu.Unlock()
}

// Subscribe returns a channel that receives each new snapshot. A reader
// that falls behind skips to the latest: the channel holds one snapshot,
// replaced by the next, so publishing never waits on a reader. The
// current snapshot, if any, is sent at once.
func (e *Engine) Subscribe() <-chan *Snapshot {
	c := make(chan *Snapshot, 1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.current.Load(); s != nil {
		c <- s
	}
	e.subs = append(e.subs, c)
	return c
}

// History returns a coin's points at interval over the last days days (0:
// since its listing), oldest first, ending with the current price. The
// first is the grid point at or before now − days, so that the points span
// the whole range: a change over the range, interpolated as the snapshot's
// are, can be read from them.
func (e *Engine) History(ctx context.Context, s *Snapshot, coinID string, days int, interval coinpulse.Interval) ([]coinpulse.HistoryPoint, error) {
	c, ok := s.byID[coinID]
	if !ok {
		return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "No coin %q.", coinID)
	}
	from := c.HistoryStart
	if days > 0 {
		// The grid is UTC's: Truncate counts from the zero time, a UTC
		// midnight. Nothing before the coin's listing: a point stored
		// there is another feed's (see historyKey).
		from = s.AsOf.Add(-time.Duration(days) * 24 * time.Hour).Truncate(interval.Step())
		if from.Before(c.HistoryStart) {
			from = c.HistoryStart
		}
	}
	pts, err := e.cfg.Store.History(ctx, coinID, interval, from, s.AsOf)
	if err != nil {
		return nil, err
	}
	if n := len(pts); n == 0 || pts[n-1].Timestamp.Before(c.LastUpdated) {
		p := coinpulse.HistoryPoint{Timestamp: c.LastUpdated, Price: c.CurrentPrice}
		if c.MarketCap != nil { // a history point's figures are 0 when unknown
			p.MarketCap = *c.MarketCap
		}
		if c.TotalVolume != nil {
			p.TotalVolume = *c.TotalVolume
		}
		pts = append(pts, p)
	}
	return pts, nil
}
