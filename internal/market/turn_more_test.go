package market

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
)

// gateFeed is quotedFeed whose first Quotes call signals entered and waits
// for gate: it holds a Load between its loadState and its historyTurn.
type gateFeed struct {
	quotedFeed
	once    *sync.Once
	entered chan struct{}
	gate    chan struct{}
}

func (g gateFeed) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	g.once.Do(func() { close(g.entered); <-g.gate })
	return g.quotedFeed.Quotes(ctx, now)
}

// A node that read the saved state before another node took a turn,
// backfilled and gave it up, loads again what that node stored rather
// than backfill everything again from what it read (a review's case).
func TestEngineTurnThatCameAndWent(t *testing.T) {
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	bf := gateFeed{quotedFeed{smallSpy(t)}, &sync.Once{}, make(chan struct{}), make(chan struct{})}
	b := turnEngine(bf, store, 10*time.Second)
	bDone := make(chan error, 1)
	go func() { bDone <- b.Load(context.Background()) }()
	<-bf.entered // B has read the state, and warms
	af := quotedFeed{smallSpy(t)}
	if err := turnEngine(af, store, 10*time.Second).Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("A: %d History calls", len(af.take()))
	close(bf.gate)
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if n := len(bf.take()); n != 0 {
		t.Errorf("B made %d History calls after A had stored the whole history: a second backfill", n)
	}
}

// turnFaultStore fails (fail) or stalls (stall) GetKV of keys equal to key.
type turnFaultStore struct {
	coinpulse.Store
	key   string
	fail  atomic.Bool
	stall atomic.Bool
}

func (s *turnFaultStore) GetKV(ctx context.Context, key string) ([]byte, error) {
	if key == s.key {
		if s.fail.Swap(false) {
			return nil, errors.New("connection reset by peer")
		}
		if s.stall.Load() {
			select {
			case <-time.After(2 * time.Second):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return s.Store.GetKV(ctx, key)
}

// A failed read of the turn while a node waits does not make it backfill
// alone while the other node holds the turn (a review's case).
func TestEngineTurnReadFailsWhileWaiting(t *testing.T) {
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	af := blockedFeed{quotedFeed{smallSpy(t)}, make(chan struct{})}
	a := turnEngine(af, store, 10*time.Second)
	aDone := make(chan error, 1)
	go func() { aDone <- a.Load(context.Background()) }()
	defer func() { close(af.release); <-aDone }()
	waitFor(t, "A's turn", func() bool { return holds(store, a) })
	fs := &turnFaultStore{Store: store, key: a.turnKey()}
	bf := quotedFeed{smallSpy(t)}
	b := turnEngine(bf, fs, 10*time.Second)
	bDone := make(chan error, 1)
	go func() { bDone <- b.Load(context.Background()) }()
	waitFor(t, "B waiting", func() bool { s := b.Current(); return s != nil && s.Backfilling })
	time.Sleep(200 * time.Millisecond)
	fs.fail.Store(true)
	select {
	case <-bDone:
		t.Errorf("B loaded (%d History calls) while A held the turn, after one failed read", len(bf.take()))
	case <-time.After(2 * time.Second):
	}
}

// A node whose renewals run late (a slow store) loses its turn, which
// another node takes: it stops its work rather than both backfilling (a
// review's case).
func TestEngineTurnLost(t *testing.T) {
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	const lapse = 600 * time.Millisecond
	af := blockedFeed{quotedFeed{smallSpy(t)}, make(chan struct{})}
	fs := &turnFaultStore{Store: store}
	a := turnEngine(af, fs, lapse)
	fs.key = a.turnKey()
	aDone := make(chan error, 1)
	go func() { aDone <- a.Load(context.Background()) }()
	waitFor(t, "A's turn", func() bool { return holds(store, a) })
	fs.stall.Store(true) // A's renewals' reads now take 2 s
	bf := quotedFeed{smallSpy(t)}
	// (The other node's own turn lapses later: under the race detector
	// its renewals can be slow too.)
	if err := turnEngine(bf, store, 5*lapse).Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	fs.stall.Store(false)
	close(af.release)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	na, nb := len(af.take()), len(bf.take())
	if na > 0 && nb > 0 {
		t.Errorf("both nodes backfilled: A %d History calls, B %d", na, nb)
	}
}

// When the hour turns while a node waits, its load of the other node's
// work leaves that hour to its first quotes' rollup rather than a
// History call a coin (a review's case).
func TestEngineTurnHourTurnsWhileWaiting(t *testing.T) {
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	af := blockedFeed{quotedFeed{smallSpy(t)}, make(chan struct{})}
	a := turnEngine(af, store, 10*time.Second)
	aDone := make(chan error, 1)
	go func() { aDone <- a.Load(context.Background()) }()
	waitFor(t, "A's turn", func() bool { return holds(store, a) })
	clock := &fakeClock{t: start}
	bf := quotedFeed{smallSpy(t)}
	b := New(Config{Feed: bf, Store: store, Clock: clock.Now, Turn: 10 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: 50 * time.Millisecond})
	bDone := make(chan error, 1)
	go func() { bDone <- b.Load(context.Background()) }()
	waitFor(t, "B waiting", func() bool { s := b.Current(); return s != nil && s.Backfilling })
	clock.Set(start.Truncate(time.Hour).Add(time.Hour + time.Minute))
	time.Sleep(200 * time.Millisecond)
	close(af.release)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if n := len(bf.take()); n != 0 {
		t.Errorf("B made %d History calls to fill the hour that turned while it waited", n)
	}
	// The hour is rolled up from B's first quotes.
	h := start.Truncate(time.Hour).Add(time.Hour)
	if pts := storedHistory(t, store, "bitcoin", coinpulse.Hourly, h, h); len(pts) != 1 || !pts[0].Timestamp.Equal(h) {
		t.Errorf("bitcoin's point of the hour that turned: %v", pts)
	}
}

// holds reports whether e holds the turn at its feed's history in store.
func holds(store coinpulse.KVStore, e *Engine) bool {
	raw, err := store.GetKV(context.Background(), e.turnKey())
	var tn turn
	return err == nil && json.Unmarshal(raw, &tn) == nil && tn.Node == e.node
}
