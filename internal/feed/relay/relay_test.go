package relay

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/feed/sim"
	"coinpulse/internal/sqlite"
	"coinpulse/internal/testlog"
)

// upstream stands in for a live feed: the simulation, counting its quote
// calls, which can be held (gate) or failed (fail).
type upstream struct {
	*sim.Feed
	calls atomic.Int32
	gate  chan struct{} // when set, each call waits for it
	fail  atomic.Bool
	drop  string // a coin left out of the universe
}

func (u *upstream) Universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	all, err := u.Feed.Universe(ctx)
	var out []coinpulse.CoinInfo
	for _, c := range all[:50] {
		if c.ID != u.drop {
			out = append(out, c)
		}
	}
	return out, err
}

func (u *upstream) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	u.calls.Add(1)
	if u.gate != nil {
		select {
		case <-u.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if u.fail.Load() {
		return nil, errors.New("upstream down")
	}
	qs, err := u.Feed.Quotes(ctx, now)
	if len(qs) > 50 {
		qs = qs[:50]
	}
	if len(qs) > 3 {
		qs[3].NoVolume, qs[3].TotalVolume = true, 0
	}
	return qs, err
}

// reversed lists an upstream's coins the other way round.
type reversed struct{ *upstream }

func (r reversed) Universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	u, err := r.upstream.Universe(ctx)
	slices.Reverse(u)
	return u, err
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	f, err := sim.New(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &upstream{Feed: f}
}

func openStore(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// node is a relay over up and db, its universe read.
func node(t *testing.T, up coinpulse.Feed, db coinpulse.KVStore, wait time.Duration) *Feed {
	t.Helper()
	f := New(Config{Feed: up, KV: db, Wait: wait, Poll: 5 * time.Millisecond, Log: quiet})
	if _, err := f.Universe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f
}

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// Three nodes asking for the same instants at once make one upstream call
// an instant, and get the same quotes, volumes unknown included, and the
// same count of markets.
func TestNodesShareQuotes(t *testing.T) {
	db := openStore(t)
	ups := []*upstream{newUpstream(t), newUpstream(t), newUpstream(t)}
	var nodes []*Feed
	for _, up := range ups {
		nodes = append(nodes, node(t, up, db, time.Minute))
	}
	for i := range 5 {
		at := t0.Add(time.Duration(i) * time.Minute)
		got := make([][]coinpulse.Quote, len(nodes))
		var wg sync.WaitGroup
		for j, n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				qs, err := n.Quotes(context.Background(), at)
				if err != nil {
					t.Errorf("node %d at %s: %v", j, at, err)
				}
				got[j] = qs
			}()
		}
		wg.Wait()
		calls := 0
		for _, up := range ups {
			calls += int(up.calls.Swap(0))
		}
		if calls != 1 {
			t.Errorf("at %s: %d upstream calls, want 1", at, calls)
		}
		want, _ := newUpstream(t).Quotes(context.Background(), at)
		for j := range got {
			if len(got[j]) != 50 || !reflect.DeepEqual(got[j], want) {
				t.Fatalf("node %d at %s: %d quotes, differing from the upstream's %d", j, at, len(got[j]), len(want))
			}
		}
		if !got[0][3].NoVolume {
			t.Errorf("an unknown volume came back known: %+v", got[0][3])
		}
	}
	fetched, relayed := 0, 0
	for _, n := range nodes {
		n.mu.Lock()
		fetched, relayed = fetched+n.fetched, relayed+n.relayed
		n.mu.Unlock()
		if m, ok := n.Markets(); !ok || m != 121 {
			t.Errorf("Markets() = %d, %v; want sim's 121", m, ok)
		}
	}
	if fetched != 5 || relayed != 10 {
		t.Errorf("%d refreshes fetched and %d relayed, want 5 and 10", fetched, relayed)
	}
}

// A node whose claim lapses (a crash) is taken over after Wait; a node
// that renews its claim while its upstream call is slow is waited for.
func TestClaims(t *testing.T) {
	ctx := context.Background()
	t.Run("a lapsed claim is taken over", func(t *testing.T) {
		db := openStore(t)
		up := newUpstream(t)
		b := node(t, up, db, 100*time.Millisecond)
		// A node that claimed t0 and died, a moment ago.
		c, _ := json.Marshal(claim{At: t0.UnixMilli(), Node: "dead", Since: time.Now().UnixMilli()})
		if err := db.PutKV(ctx, b.key+":claim", c); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if qs, err := b.Quotes(ctx, t0); err != nil || len(qs) != 50 || up.calls.Load() != 1 {
			t.Fatalf("%v, %d quotes, %d calls", err, len(qs), up.calls.Load())
		}
		if waited := time.Since(start); waited < 100*time.Millisecond {
			t.Errorf("took the claim over after %s, before it lapsed", waited)
		}
	})
	t.Run("a renewed claim is waited for", func(t *testing.T) {
		db := openStore(t)
		slow, other := newUpstream(t), newUpstream(t)
		slow.gate = make(chan struct{})
		reads := &countingKV{KVStore: db}
		a, b := node(t, slow, db, time.Second), node(t, other, reads, time.Second)
		done := make(chan []coinpulse.Quote)
		go func() {
			qs, _ := a.Quotes(ctx, t0)
			done <- qs
		}()
		for slow.calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		go func() {
			time.Sleep(2500 * time.Millisecond) // past Wait: renewed meanwhile
			close(slow.gate)
		}()
		qs, err := b.Quotes(ctx, t0)
		if err != nil || other.calls.Load() != 0 || !reflect.DeepEqual(qs, <-done) {
			t.Errorf("%v, the waiting node's upstream called %d times", err, other.calls.Load())
		}
		// It polled the claim, and read the quotes record at one poll in
		// ten (in case a claim cannot be marked), before it waited, and
		// once they were stored.
		if q, c := reads.quotes.Load(), reads.claims.Load(); c < 100 || q > c/10+2 {
			t.Errorf("the waiting node read the claim %d times and the quotes record %d times, want one in ten", c, q)
		}
	})
	t.Run("a claim held past Hold is taken over", func(t *testing.T) {
		db := openStore(t)
		stuck, other := newUpstream(t), newUpstream(t)
		stuck.gate = make(chan struct{}) // a 429's wait, a ban, a hang
		defer close(stuck.gate)
		a := New(Config{Feed: stuck, KV: db, Wait: 150 * time.Millisecond, Hold: 300 * time.Millisecond, Poll: 5 * time.Millisecond, Log: quiet})
		a.Universe(ctx)
		b := node(t, other, db, 150*time.Millisecond)
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		go a.Quotes(actx, t0)
		for stuck.calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		start := time.Now()
		if qs, err := b.Quotes(ctx, t0); err != nil || len(qs) != 50 || other.calls.Load() != 1 {
			t.Fatalf("%v, %d quotes, %d calls", err, len(qs), other.calls.Load())
		}
		if waited := time.Since(start); waited < 300*time.Millisecond {
			t.Errorf("took over after %s, while the claim was renewed", waited)
		}
	})
	t.Run("a failed fetch is taken over at once", func(t *testing.T) {
		db := openStore(t)
		bad, good := newUpstream(t), newUpstream(t)
		bad.fail.Store(true)
		a, b := node(t, bad, db, time.Hour), node(t, good, db, time.Hour) // a lapse would fail the test by its timeout
		if _, err := a.Quotes(ctx, t0); err == nil {
			t.Fatal("a failed fetch returned no error")
		}
		if qs, err := b.Quotes(ctx, t0); err != nil || len(qs) != 50 || good.calls.Load() != 1 {
			t.Errorf("the other node: %v, %d quotes, %d calls", err, len(qs), good.calls.Load())
		}
	})
}

// countingKV counts the reads of the quotes record and of the claim.
type countingKV struct {
	coinpulse.KVStore
	quotes, claims atomic.Int32
}

func (k *countingKV) GetKV(ctx context.Context, key string) ([]byte, error) {
	switch {
	case strings.HasSuffix(key, ":quotes"):
		k.quotes.Add(1)
	case strings.HasSuffix(key, ":claim"):
		k.claims.Add(1)
	}
	return k.KVStore.GetKV(ctx, key)
}

// flakyKV fails the reads or the writes of keys with a suffix.
type flakyKV struct {
	coinpulse.KVStore
	failGets, failSwaps string
}

func (k flakyKV) GetKV(ctx context.Context, key string) ([]byte, error) {
	if k.failGets != "" && strings.HasSuffix(key, k.failGets) {
		return nil, errors.New("database down")
	}
	return k.KVStore.GetKV(ctx, key)
}

func (k flakyKV) SwapKV(ctx context.Context, key string, old, value []byte) (bool, error) {
	if k.failSwaps != "" && strings.HasSuffix(key, k.failSwaps) {
		return false, errors.New("database down")
	}
	return k.KVStore.SwapKV(ctx, key, old, value)
}

// When the database fails, a node fetches its quotes itself; when only
// storing them fails, it lets its claim go, and the next node takes the
// refresh over at once.
func TestDatabaseFailures(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	up := newUpstream(t)
	down := node(t, up, flakyKV{KVStore: db, failGets: ":quotes"}, time.Hour)
	if qs, err := down.Quotes(ctx, t0); err != nil || len(qs) != 50 || up.calls.Load() != 1 {
		t.Errorf("database down: %v, %d quotes, %d calls; want its own", err, len(qs), up.calls.Load())
	}
	a := node(t, up, flakyKV{KVStore: db, failSwaps: ":quotes"}, time.Hour)
	other := newUpstream(t)
	b := node(t, other, db, time.Hour) // a lapse would fail the test by its timeout
	if qs, err := a.Quotes(ctx, t0.Add(time.Minute)); err != nil || len(qs) != 50 {
		t.Fatalf("store failing: %v, %d quotes; want them all the same", err, len(qs))
	}
	if qs, err := b.Quotes(ctx, t0.Add(time.Minute)); err != nil || len(qs) != 50 || other.calls.Load() != 1 {
		t.Errorf("after a failed store: %v, %d quotes, %d calls; want the other node to fetch at once", err, len(qs), other.calls.Load())
	}
}

// Quotes stored for a later instant are taken as they are; unreadable
// ones, or none, are fetched anew; nodes with other coin sets do not
// share; Quotes before Universe is an error.
func TestRecords(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	up := newUpstream(t)
	a := node(t, up, db, time.Minute)
	later, _ := a.Quotes(ctx, t0.Add(time.Minute))
	if qs, err := a.Quotes(ctx, t0); err != nil || !reflect.DeepEqual(qs, later) || up.calls.Load() != 1 {
		t.Errorf("an earlier instant: %v, %d calls; want the later quotes, 1 call", err, up.calls.Load())
	}
	// A slow node's quotes of an earlier instant do not replace them.
	if stored, err := a.store(ctx, a.key+":quotes", &record{At: t0.UnixMilli(), Node: "slow"}); err != nil || !stored {
		t.Fatalf("a slow node's store: %v, %v; want the later record to serve its instant", stored, err)
	}
	if rec, _ := a.read(ctx, a.key+":quotes"); rec == nil || rec.At != t0.Add(time.Minute).UnixMilli() {
		t.Errorf("a slow node's earlier quotes replaced the later ones: %+v", rec)
	}
	// Quotes or a claim from a clock far ahead are not taken: they would
	// freeze every node's quotes.
	far, _ := json.Marshal(record{At: t0.Add(24 * time.Hour).UnixMilli(), Node: "skewed"})
	farClaim, _ := json.Marshal(claim{At: t0.Add(24 * time.Hour).UnixMilli(), Node: "skewed", Since: time.Now().Add(24 * time.Hour).UnixMilli()})
	db.PutKV(ctx, a.key+":quotes", far)
	db.PutKV(ctx, a.key+":claim", farClaim)
	if qs, err := a.Quotes(ctx, t0.Add(90*time.Second)); err != nil || len(qs) != 50 || up.calls.Load() != 2 {
		t.Errorf("after a skewed node's record: %v, %d quotes, %d calls; want its own 50, 2 calls", err, len(qs), up.calls.Load())
	}
	// A claim that says the quotes are stored when they are not is taken
	// over, not waited on.
	stored, _ := json.Marshal(claim{At: t0.Add(5 * time.Minute).UnixMilli(), Node: "liar", Since: time.Now().UnixMilli(), Stored: true})
	db.PutKV(ctx, a.key+":claim", stored)
	before := up.calls.Load()
	if qs, err := a.Quotes(ctx, t0.Add(5*time.Minute)); err != nil || len(qs) != 50 || up.calls.Load() != before+1 {
		t.Errorf("a stored claim without its quotes: %v, %d quotes, %d calls", err, len(qs), up.calls.Load()-before)
	}
	if err := db.PutKV(ctx, a.key+":quotes", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if err := db.PutKV(ctx, a.key+":claim", []byte("[]")); err != nil {
		t.Fatal(err)
	}
	if qs, err := a.Quotes(ctx, t0.Add(2*time.Minute)); err != nil || len(qs) != 50 || up.calls.Load() != 4 {
		t.Errorf("after unreadable records: %v, %d quotes, %d calls", err, len(qs), up.calls.Load())
	}
	// The same coins in another order (CoinGecko's ranks move) share.
	shuffled := node(t, reversed{up}, db, time.Minute)
	if shuffled.key != a.key {
		t.Errorf("the same coins in another order: key %s, not %s", shuffled.key, a.key)
	}
	other := newUpstream(t)
	other.drop = "bitcoin"
	b := node(t, other, db, time.Minute)
	if b.key == a.key {
		t.Fatalf("another coin set, the same key %s", a.key)
	}
	if _, err := b.Quotes(ctx, t0.Add(2*time.Minute)); err != nil || other.calls.Load() != 1 {
		t.Errorf("another coin set: %v, %d calls of its own; want 1", err, other.calls.Load())
	}
	if _, err := New(Config{Feed: up, KV: db}).Quotes(ctx, t0); err == nil {
		t.Error("Quotes before Universe: no error")
	}
	if a.String() != up.String() || a.Name() != "sim" || !a.Simulated() || a.RollupFromQuotes() {
		t.Errorf("the upstream's identity: %s %s %v %v", a.String(), a.Name(), a.Simulated(), a.RollupFromQuotes())
	}
}

// A node that reads its own stored quotes again (one instant asked for
// twice) does not count or log them as relayed from another node.
func TestOwnQuotesAreNotRelayed(t *testing.T) {
	var log testlog.Buffer
	f := New(Config{Feed: newUpstream(t), KV: openStore(t), Poll: 5 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&log, nil))})
	if _, err := f.Universe(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := f.Quotes(context.Background(), t0); err != nil {
			t.Fatal(err)
		}
	}
	if f.fetched != 1 || f.relayed != 0 || strings.Contains(log.String(), "relayed from another node") {
		t.Errorf("fetched %d, relayed %d; log:\n%s", f.fetched, f.relayed, log.String())
	}
}
