package relay

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
)

// chooser stands in for an upstream whose universe is a choice of the
// moment (coinpulse.UniverseAdopter), as CoinGecko's top list is: its own
// choice leaves out drop; it counts its choices and keeps what it adopted.
type chooser struct {
	*upstream
	choices atomic.Int32
	refuse  bool
	during  func() // when set, runs in Universe, as another node's choice at the same moment
	adopted []coinpulse.CoinInfo
}

func (c *chooser) Universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	c.choices.Add(1)
	if c.during != nil {
		c.during()
	}
	return c.upstream.Universe(ctx)
}

func (c *chooser) UniverseKey() string { return "test:coins=50" }

func (c *chooser) Adopt(coins []coinpulse.CoinInfo) ([]coinpulse.CoinInfo, error) {
	if c.refuse {
		return nil, errors.New("not this set")
	}
	c.adopted = slices.Clone(coins)
	return coins, nil
}

// clock is a settable time.
type clock struct{ now atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()).UTC() }
func (c *clock) Set(t time.Time)         { c.now.Store(t.UnixNano()) }
func (c *clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// startNode is a relay over up and db on clk, its universe read.
func startNode(t *testing.T, up coinpulse.Feed, db coinpulse.KVStore, clk *clock) (*Feed, []string) {
	t.Helper()
	f := New(Config{Feed: up, KV: db, Poll: 5 * time.Millisecond, Clock: clk.Now, Log: quiet})
	u, err := f.Universe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(u))
	for i, c := range u {
		ids[i] = c.ID
	}
	return f, ids
}

func newChooser(t *testing.T, drop string) *chooser {
	up := newUpstream(t)
	up.drop = drop
	return &chooser{upstream: up}
}

// A node that starts after another serves the other's coin set, though
// its own choice would differ: while it was chosen within a day, or while
// a node serves it; else it chooses again, and the nodes after it serve
// the new set.
func TestUniverseShared(t *testing.T) {
	db := openStore(t)
	clk := &clock{}
	clk.Set(t0)
	a := newChooser(t, "")
	na, first := startNode(t, a, db, clk)
	if a.choices.Load() != 1 || a.adopted != nil {
		t.Fatalf("the first node: %d choices, adopted %d coins; want its own choice", a.choices.Load(), len(a.adopted))
	}
	drop := first[7] // a coin of the first set, which the later nodes' own choices leave out

	t.Run("within a day", func(t *testing.T) {
		clk.Set(t0.Add(23 * time.Hour))
		b := newChooser(t, drop)
		nb, ids := startNode(t, b, db, clk)
		if b.choices.Load() != 0 || !slices.Equal(ids, first) || nb.key != na.key {
			t.Fatalf("%d choices, %d coins (same as the first: %v), key %s vs %s; want the first node's set", b.choices.Load(), len(ids), slices.Equal(ids, first), nb.key, na.key)
		}
	})

	t.Run("served now, chosen days ago", func(t *testing.T) {
		clk.Set(t0.Add(72 * time.Hour))
		at := clk.Now().Truncate(time.Minute)
		if _, err := na.Quotes(context.Background(), at); err != nil {
			t.Fatal(err)
		}
		clk.Advance(90 * time.Second) // within two refreshes and 30 s of the quotes
		b := newChooser(t, drop)
		if _, ids := startNode(t, b, db, clk); b.choices.Load() != 0 || !slices.Equal(ids, first) {
			t.Fatalf("%d choices, same set %v; want the set a node serves", b.choices.Load(), slices.Equal(ids, first))
		}
	})

	t.Run("neither", func(t *testing.T) {
		clk.Advance(2 * time.Minute) // the quotes are 3.5 minutes old: nobody serves the set
		b := newChooser(t, drop)
		_, ids := startNode(t, b, db, clk)
		if b.choices.Load() != 1 || slices.Contains(ids, drop) {
			t.Fatalf("%d choices, the old set's coin in it %v; want a choice of its own", b.choices.Load(), slices.Contains(ids, drop))
		}
		c := newChooser(t, "")
		if _, again := startNode(t, c, db, clk); c.choices.Load() != 0 || !slices.Equal(again, ids) {
			t.Fatalf("the node after it: %d choices, same set %v; want the new set", c.choices.Load(), slices.Equal(again, ids))
		}
	})

	t.Run("refused", func(t *testing.T) {
		b := newChooser(t, "")
		b.refuse = true
		if _, ids := startNode(t, b, db, clk); b.choices.Load() != 1 || len(ids) != 50 {
			t.Fatalf("%d choices, %d coins; want its own choice of 50", b.choices.Load(), len(ids))
		}
	})
}

// Two nodes that choose at the same moment serve one set: the one stored
// first.
func TestUniverseChosenAtOnce(t *testing.T) {
	db := openStore(t)
	clk := &clock{}
	clk.Set(t0)
	a := newChooser(t, "")
	var first []string
	b := newChooser(t, "ethereum") // its own choice would differ
	b.during = func() { _, first = startNode(t, a, db, clk) }
	_, ids := startNode(t, b, db, clk)
	if b.choices.Load() != 1 || !slices.Equal(ids, first) || slices.Equal(first, nil) {
		t.Fatalf("%d choices; same set as the node that stored first: %v", b.choices.Load(), slices.Equal(ids, first))
	}
}

// A feed whose universe is not a choice (sim, binance) is asked as before,
// and nothing is stored for it.
func TestUniverseNotAdopter(t *testing.T) {
	db := openStore(t)
	clk := &clock{}
	clk.Set(t0)
	startNode(t, newUpstream(t), db, clk)
	if _, err := db.GetKV(context.Background(), "relay:test:coins=50:universe"); !coinpulse.IsNotFound(err) {
		t.Fatalf("a universe stored: %v", err)
	}
}

// A set another node serves is adopted however long ago it was chosen;
// the quotes of this node's own run before a restart (the same node name)
// do not count; a store that cannot say whether a node serves it counts
// as one, so that a failed read never replaces the others' set.
func TestUniverseServed(t *testing.T) {
	db := openStore(t)
	clk := &clock{}
	clk.Set(t0)
	na := New(Config{Feed: newChooser(t, ""), KV: db, Host: "h1/127.0.0.1:8080", Clock: clk.Now, Log: quiet})
	u0, err := na.Universe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first := ids(u0)
	drop := first[7]
	clk.Set(t0.Add(30 * 24 * time.Hour))
	if _, err := na.Quotes(context.Background(), clk.Now().Truncate(time.Minute)); err != nil {
		t.Fatal(err)
	}

	b := newChooser(t, drop)
	if _, ids := startNode(t, b, db, clk); b.choices.Load() != 0 || !slices.Equal(ids, first) {
		t.Errorf("30 days after the choice, served by another node: %d choices; want the set adopted", b.choices.Load())
	}

	// The same node, restarted (the same Host, another Node): its own
	// quotes are not another node's.
	again := newChooser(t, drop)
	f := New(Config{Feed: again, KV: &hookKV{KVStore: db}, Host: "h1/127.0.0.1:8080", Clock: clk.Now, Log: quiet})
	stored, err := f.Universe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if again.choices.Load() != 1 {
		t.Errorf("restarted, with only its own quotes of the set: %d choices; want a choice of its own", again.choices.Load())
	}

	// A failed read of whether a node serves it: adopted, not replaced.
	clk.Advance(time.Hour)
	flaky := &hookKV{KVStore: db}
	failing := errors.New("read timed out")
	c := newChooser(t, "")
	g := New(Config{Feed: c, KV: flakyGets{flaky, ":quotes", failing}, Clock: clk.Now, Log: quiet})
	u, err := g.Universe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.choices.Load() != 0 || !slices.Equal(ids(u), ids(stored)) {
		t.Errorf("a failed read: %d choices, the stored set %v; want the stored set adopted", c.choices.Load(), slices.Equal(ids(u), ids(stored)))
	}
}

// flakyGets fails the reads of keys ending in suffix.
type flakyGets struct {
	coinpulse.KVStore
	suffix string
	err    error
}

func (k flakyGets) GetKV(ctx context.Context, key string) ([]byte, error) {
	if strings.HasSuffix(key, k.suffix) {
		return nil, k.err
	}
	return k.KVStore.GetKV(ctx, key)
}

func ids(u []coinpulse.CoinInfo) []string {
	out := make([]string, len(u))
	for i, c := range u {
		out[i] = c.ID
	}
	return out
}
