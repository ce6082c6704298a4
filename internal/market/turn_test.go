package market

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/testlog"
)

// turnEngine is an engine over feed and store that takes turns at the
// feed's history, lapsing after lapse.
func turnEngine(feed coinpulse.Feed, store coinpulse.Store, lapse time.Duration) *Engine {
	return New(Config{Feed: feed, Store: store, Clock: func() time.Time { return start }, Turn: lapse,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refresh: 50 * time.Millisecond})
}

// Two nodes that start at once on an empty store take turns at a costly
// feed's history: the second serves quotes while the first backfills,
// makes no History call, and loads what the first stored.
func TestEngineNodesTakeTurns(t *testing.T) {
	t.Parallel()
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	first := blockedFeed{quotedFeed{smallSpy(t)}, make(chan struct{})}
	a := turnEngine(first, store, 10*time.Second)
	aDone := make(chan error, 1)
	go func() { aDone <- a.Load(context.Background()) }()
	waitFor(t, "the first node's turn", func() bool {
		raw, err := store.GetKV(context.Background(), a.turnKey())
		var tn turn
		return err == nil && json.Unmarshal(raw, &tn) == nil && tn.Node == a.node
	})

	second := quotedFeed{smallSpy(t)}
	b := turnEngine(second, store, 10*time.Second)
	var bLog testlog.Buffer
	b.cfg.Log = slog.New(slog.NewTextHandler(&bLog, nil))
	bDone := make(chan error, 1)
	go func() { bDone <- b.Load(context.Background()) }()
	waitFor(t, "the second node's quotes while it waits", func() bool { s := b.Current(); return s != nil && s.Backfilling })
	time.Sleep(time.Second) // the second waits while the first is at the history
	select {
	case err := <-bDone:
		t.Fatalf("the second node loaded while the first backfilled: %v", err)
	default:
	}
	close(first.release)
	for _, done := range []chan error{aDone, bDone} {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Load did not end")
		}
	}
	if calls := second.take(); len(calls) != 0 {
		t.Errorf("the second node made %d History calls, want none", len(calls))
	}
	if out := bLog.String(); !strings.Contains(out, "a first backfill is under way") || strings.Contains(out, "another feed's") ||
		!strings.Contains(out, "another node is at this feed's history") {
		t.Errorf("the second node's log:\n%s", out)
	}
	if s := b.Current(); s == nil || s.Backfilling || s.Len() != smallCoins || lookup(t, s, "bitcoin").PriceChangePercentage24h == nil {
		t.Errorf("the second node after loading: %+v", s)
	}
	raw, _ := store.GetKV(context.Background(), a.turnKey())
	var tn turn
	if json.Unmarshal(raw, &tn); tn.Node != "" {
		t.Errorf("the turn is still %s's after both loaded", tn.Node)
	}
}

// A node that dies at the feed's history loses its turn once it lapses,
// and the next node goes on; one that is stopped gives it up at once.
func TestEngineTurnOfADeadNode(t *testing.T) {
	t.Parallel()
	store := openStore(t, filepath.Join(t.TempDir(), "db"))
	const lapse = 2 * time.Second
	dead, _ := json.Marshal(turn{Node: "dead", Since: time.Now().UnixMilli()})
	feed := quotedFeed{smallSpy(t)}
	e := turnEngine(feed, store, lapse)
	if err := store.PutKV(context.Background(), e.turnKey(), dead); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < lapse-50*time.Millisecond {
		t.Errorf("loaded %s after a dead node's turn, want after it lapsed (%s)", took, lapse)
	}
	// (A few more when a slow store made it lose its own turn for a
	// moment, and do the coins in flight again.)
	if n := fullBackfills(feed.spyFeed, start); n < smallCoins {
		t.Errorf("%d coins backfilled, want %d", n, smallCoins)
	}

	// A node stopped at its turn gives it up: the next does not wait.
	store2 := openStore(t, filepath.Join(t.TempDir(), "db"))
	blocked := blockedFeed{quotedFeed{smallSpy(t)}, make(chan struct{})}
	stopped := turnEngine(blocked, store2, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stopped.Load(ctx) }()
	waitFor(t, "the node's turn", func() bool {
		raw, err := store2.GetKV(context.Background(), stopped.turnKey())
		var tn turn
		return err == nil && json.Unmarshal(raw, &tn) == nil && tn.Node == stopped.node
	})
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a stopped Load did not fail")
	}
	began = time.Now()
	if err := turnEngine(quotedFeed{smallSpy(t)}, store2, time.Minute).Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 30*time.Second {
		t.Errorf("loaded %s after a stopped node's turn, want at once", took)
	}
}

// smallCoins is the universe of the turn tests' feeds: they backfill it
// many times over.
const smallCoins = 100

// smallSpy is a spy of sim seed 1 serving its first smallCoins coins.
func smallSpy(t testing.TB) *spyFeed {
	s := newSpy(t, 1)
	s.only = smallCoins
	return s
}

// waitFor polls cond for 10 s at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}
