package market

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func waitCurrent(t *testing.T, e *Engine) *Snapshot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.Current() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if e.Current() == nil {
		t.Fatal("no snapshot while backfilling")
	}
	return e.Current()
}

// A backfill shorter than the refresh: the snapshot warm published and
// Load's whole one, of the same instant, have ids of their own.
func TestWarmSnapshotHasItsOwnID(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: start}
	feed := blockedFeed{quotedFeed{newSpy(t, 1)}, make(chan struct{})}
	e := New(Config{Feed: feed, Store: openStore(t, filepath.Join(t.TempDir(), "db")), Clock: clock.Now, Log: quiet(), Refresh: time.Minute})
	done := make(chan error, 1)
	go func() { done <- e.Load(context.Background()) }()
	s1 := waitCurrent(t, e)
	close(feed.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s2 := e.Current()
	b1, b2 := lookup(t, s1, "bitcoin"), lookup(t, s2, "bitcoin")
	t.Logf("warm: id %s as of %v backfilling %v 24h %v; final: id %s as of %v backfilling %v 24h %v; Snapshot(%s)==final: %v",
		s1.ID, s1.AsOf, s1.Backfilling, b1.PriceChangePercentage24h, s2.ID, s2.AsOf, s2.Backfilling, b2.PriceChangePercentage24h != nil, s1.ID, e.Snapshot(s1.ID) == s2)
	if s1.ID == s2.ID && s1 != s2 {
		t.Errorf("two different snapshots share id %s (backfilling %v then %v)", s1.ID, s1.Backfilling, s2.Backfilling)
	}
}

type failFirstQuotes struct {
	quotedFeed
	n *atomic.Int32
}

func (f failFirstQuotes) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	if f.n.Add(1) == 1 {
		return nil, errors.New("upstream 429")
	}
	return f.quotedFeed.Quotes(ctx, now)
}

// Warm never published (its quotes failed): Load's whole snapshot is not
// marked Backfilling.
func TestWarmFailedFinalSnapshotWhole(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: start}
	feed := failFirstQuotes{quotedFeed{newSpy(t, 1)}, new(atomic.Int32)}
	e := New(Config{Feed: feed, Store: openStore(t, loadedStore(t)), Clock: clock.Now, Log: quiet(), Refresh: time.Minute})
	clock.Set(start.Add(2 * time.Hour)) // a restart after a gap: filled
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := e.Current(); s.Backfilling {
		t.Errorf("Load done, history complete, but its snapshot %s says Backfilling", s.ID)
	}
}

type quotedFlaky struct{ *flakyFeed }

func (quotedFlaky) RollupFromQuotes() bool { return true }

// A Load that failed after warm published, run again in the same refresh
// period: its whole snapshot has an id of its own and is not Backfilling.
func TestWarmLoadRetried(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: start}
	e := New(Config{Feed: quotedFlaky{&flakyFeed{spyFeed: newSpy(t, 1), failAt: 20}}, Store: openStore(t, filepath.Join(t.TempDir(), "db")),
		Clock: clock.Now, Log: quiet(), Refresh: time.Minute})
	err := e.Load(context.Background())
	s1 := e.Current()
	t.Logf("first Load: err %v, snapshot %v", err, s1 != nil)
	if err == nil || s1 == nil {
		t.Fatal("want a failed load that published")
	}
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := e.Current()
	t.Logf("warm id %s backfilling %v; final id %s backfilling %v", s1.ID, s1.Backfilling, s2.ID, s2.Backfilling)
	if s1.ID == s2.ID && s1 != s2 {
		t.Errorf("retry: two different snapshots share id %s", s1.ID)
	}
	if s2.Backfilling {
		t.Errorf("retry: complete snapshot says Backfilling")
	}
}

// A restart after 3 days: warm's snapshots give known coins no "24 h"
// change from a point 3 days old.
func TestWarmNoChangeFromStalePoint(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: start.Add(72 * time.Hour)}
	feed := blockedFeed{quotedFeed{newSpy(t, 1)}, make(chan struct{})}
	e := New(Config{Feed: feed, Store: openStore(t, loadedStore(t)), Clock: clock.Now, Log: quiet(), Refresh: time.Minute})
	done := make(chan error, 1)
	go func() { done <- e.Load(context.Background()) }()
	s1 := waitCurrent(t, e)
	b1 := lookup(t, s1, "bitcoin")
	close(feed.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b2 := lookup(t, e.Current(), "bitcoin")
	f := func(p *float64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	t.Logf("warm (backfilling %v): 24h %v%% high %v low %v price %v; after backfill: 24h %v%% high %v low %v",
		s1.Backfilling, f(b1.PriceChangePercentage24h), f(b1.High24h), f(b1.Low24h), b1.CurrentPrice, f(b2.PriceChangePercentage24h), f(b2.High24h), f(b2.Low24h))
	if b1.PriceChangePercentage24h != nil {
		t.Errorf("warm snapshot shows a 24 h change %v%% from a point 72 h old", *b1.PriceChangePercentage24h)
	}
}

// blockAfter blocks History calls starting after gate until release2.
type blockAfter struct {
	quotedFeed
	gate     time.Time
	release  chan struct{}
	release2 chan struct{}
	calls2   *atomic.Int32
}

func (b blockAfter) History(ctx context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	ch := b.release
	if from.After(b.gate) {
		b.calls2.Add(1)
		ch = b.release2
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.quotedFeed.History(ctx, info, interval, from, to)
}

// A first start whose backfill outlasted 2 hours catches up on the hours
// since from history, publishing quotes meanwhile, and ends with every
// hour stored.
func TestWarmLongBackfillCatchesUp(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: start}
	feed := blockAfter{quotedFeed{newSpy(t, 1)}, start, make(chan struct{}), make(chan struct{}), new(atomic.Int32)}
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	e := New(Config{Feed: feed, Store: store, Clock: clock.Now, Log: quiet(), Refresh: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- e.Load(context.Background()) }()
	waitCurrent(t, e)
	clock.Set(start.Add(2*time.Hour + 10*time.Minute))
	time.Sleep(150 * time.Millisecond)
	close(feed.release)
	for feed.calls2.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	a := e.Current()
	clock.Set(start.Add(3 * time.Hour))
	time.Sleep(300 * time.Millisecond) // 6 refreshes
	b := e.Current()
	t.Logf("second backfill (%d history calls so far): current as of %v backfilling %v, 300 ms later %v", feed.calls2.Load(), a.AsOf, a.Backfilling, b.AsOf)
	if a == b {
		t.Errorf("quotes not refreshed during Load's rollup backfill")
	}
	close(feed.release2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := e.Current()
	h0 := start.Truncate(time.Hour)
	got := storedHistory(t, store, "bitcoin", coinpulse.Hourly, h0.Add(-2*time.Hour), h0.Add(4*time.Hour))
	if want := hoursFrom(h0.Add(-2*time.Hour), int(s.AsOf.Truncate(time.Hour).Sub(h0)/time.Hour)+3); s.Backfilling || !e.lastHour.Equal(s.AsOf.Truncate(time.Hour)) || !slices.Equal(timestamps(got), want) {
		t.Errorf("final as of %v backfilling %v; lastHour %v; stored hourly %v, want %v", s.AsOf, s.Backfilling, e.lastHour, timestamps(got), want)
	}
}
