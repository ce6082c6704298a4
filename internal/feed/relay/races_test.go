package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
)

// hookKV runs hooks around reads and swaps.
type hookKV struct {
	coinpulse.KVStore
	afterGet   func(key string)
	beforeSwap func(key string, value []byte) (skip bool, err error)
	afterSwap  func(key string, value []byte, ok bool) error
}

func (k *hookKV) GetKV(ctx context.Context, key string) ([]byte, error) {
	b, err := k.KVStore.GetKV(ctx, key)
	if k.afterGet != nil {
		k.afterGet(key)
	}
	return b, err
}

func (k *hookKV) SwapKV(ctx context.Context, key string, old, value []byte) (bool, error) {
	if k.beforeSwap != nil {
		if skip, err := k.beforeSwap(key, value); skip {
			return false, err
		}
	}
	ok, err := k.KVStore.SwapKV(ctx, key, old, value)
	if err == nil && k.afterSwap != nil {
		if e := k.afterSwap(key, value, ok); e != nil {
			return false, e
		}
	}
	return ok, err
}

// A node that read no record just before another stored it and marked its
// claim stored takes the stored quotes, not the refresh (a review found it
// fetching again: it read the record before the claim).
func TestStoredBetweenTheReads(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	upA, upB := newUpstream(t), newUpstream(t)
	a := node(t, upA, db, time.Minute)
	var once sync.Once
	hk := &hookKV{KVStore: db}
	hk.afterGet = func(key string) {
		if strings.HasSuffix(key, ":quotes") {
			once.Do(func() { // A's whole refresh lands between B's two reads
				if _, err := a.Quotes(ctx, t0); err != nil {
					t.Error(err)
				}
			})
		}
	}
	b := node(t, upB, hk, time.Minute)
	if _, err := b.Quotes(ctx, t0); err != nil {
		t.Fatal(err)
	}
	t.Logf("upstream calls: A %d, B %d", upA.calls.Load(), upB.calls.Load())
	if upB.calls.Load() != 0 {
		t.Errorf("B fetched t0 again although A had stored it (claim Stored, record there)")
	}
}

// When the fetching node cannot mark its claim stored, the waiting nodes
// find the quotes by looking at the record now and then, well before the
// claim lapses.
func TestClaimNotMarkedStored(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	upA, upB := newUpstream(t), newUpstream(t)
	upA.gate = make(chan struct{})
	hk := &hookKV{KVStore: db, beforeSwap: func(key string, value []byte) (bool, error) {
		if bytes.Contains(value, []byte(`"stored":true`)) {
			return true, errors.New("database blip")
		}
		return false, nil
	}}
	wait := 10 * time.Second
	a := node(t, upA, hk, wait)
	b := node(t, upB, db, wait)
	go a.Quotes(ctx, t0)
	for upA.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan time.Time)
	go func() {
		if _, err := b.Quotes(ctx, t0); err != nil {
			t.Error(err)
		}
		done <- time.Now()
	}()
	time.Sleep(50 * time.Millisecond)
	released := time.Now()
	close(upA.gate)
	got := <-done
	if got.Sub(released) > wait/2 || upB.calls.Load() != 0 {
		t.Errorf("B got the quotes %s after A stored them, with %d calls of its own; want them before the claim lapses (Wait %s), fetched by A", got.Sub(released).Round(time.Millisecond), upB.calls.Load(), wait)
	}
}

// A renewal the database applied but reported failed does not lose the
// claim: the node finds its claim by node and instant, renews it on, and
// no other node takes the refresh over within Hold.
func TestAmbiguousRenewal(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	upA, upB := newUpstream(t), newUpstream(t)
	upA.gate = make(chan struct{})
	var renewals atomic.Int32
	hk := &hookKV{KVStore: db, afterSwap: func(key string, value []byte, ok bool) error {
		if strings.HasSuffix(key, ":claim") && ok && !bytes.Contains(value, []byte(`"stored"`)) {
			if renewals.Add(1) == 2 { // the first renewal (1 is the claim)
				return errors.New("timeout after commit")
			}
		}
		return nil
	}}
	wait := time.Second
	a := New(Config{Feed: upA, KV: hk, Wait: wait, Hold: time.Minute, Poll: 5 * time.Millisecond, Log: quiet})
	a.Universe(ctx)
	b := node(t, upB, db, wait)
	go func() { a.Quotes(ctx, t0) }()
	for upA.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() { time.Sleep(2500 * time.Millisecond); close(upA.gate) }()
	start := time.Now()
	if _, err := b.Quotes(ctx, t0); err != nil {
		t.Fatal(err)
	}
	if upB.calls.Load() != 0 {
		t.Errorf("B took over, after %s, a claim whose node was fetching within Hold", time.Since(start).Round(time.Millisecond))
	}
}

// A store that loses its swap to a slow node's earlier record looks again
// and stores its own: the record does not go back, and the claim is
// marked stored only with its quotes there.
func TestLostStoreSwap(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	upA, upB := newUpstream(t), newUpstream(t)
	var once sync.Once
	var aKey string
	hk := &hookKV{KVStore: db, beforeSwap: func(key string, value []byte) (bool, error) {
		if strings.HasSuffix(key, ":quotes") {
			once.Do(func() { // a slow node's t0-1min record lands between A's get and swap
				slow, _ := json.Marshal(record{At: t0.Add(-time.Minute).UnixMilli(), Node: "slow"})
				db.PutKV(ctx, aKey+":quotes", slow)
			})
		}
		return false, nil
	}}
	a := node(t, upA, hk, time.Minute)
	aKey = a.key
	b := node(t, upB, db, time.Minute)
	a.Quotes(ctx, t0)
	rec, _ := a.read(ctx, a.key+":quotes")
	raw, _ := db.GetKV(ctx, a.key+":claim")
	t.Logf("record at %s by %s; claim %s", time.UnixMilli(rec.At).UTC(), rec.Node, raw)
	b.Quotes(ctx, t0)
	t.Logf("B's calls %d", upB.calls.Load())
	if upB.calls.Load() != 0 {
		t.Errorf("B fetched again after A's claim said Stored")
	}
}

// No loop spins: this node's own live claim (a restart with a fixed name)
// is taken over at once, and so is a claim marked stored of a later
// instant whose record is not there, in a few reads and writes.
func TestNoSpin(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	up := newUpstream(t)
	gets := &countAllKV{KVStore: db}
	a := node(t, up, gets, time.Minute)
	own, _ := json.Marshal(claim{At: t0.UnixMilli(), Node: a.cfg.Node, Since: time.Now().UnixMilli()})
	db.PutKV(ctx, a.key+":claim", own)
	start := time.Now()
	if _, err := a.Quotes(ctx, t0); err != nil {
		t.Fatal(err)
	}
	if up.calls.Load() != 1 || gets.n.Load() > 20 {
		t.Errorf("own claim: %s, %d calls, %d reads and writes; want 1 call in a few", time.Since(start).Round(time.Millisecond), up.calls.Load(), gets.n.Load())
	}
	later, _ := json.Marshal(claim{At: time.Now().Add(5 * time.Second).UnixMilli(), Node: "x", Since: time.Now().UnixMilli(), Stored: true})
	db.PutKV(ctx, a.key+":claim", later)
	gets.n.Store(0)
	start = time.Now()
	if _, err := a.Quotes(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if up.calls.Load() != 2 || gets.n.Load() > 20 {
		t.Errorf("a stored later claim without its record: %s, %d calls, %d reads and writes; want 2 calls in a few", time.Since(start).Round(time.Millisecond), up.calls.Load(), gets.n.Load())
	}
}

type countAllKV struct {
	coinpulse.KVStore
	n atomic.Int32
}

func (k *countAllKV) GetKV(ctx context.Context, key string) ([]byte, error) {
	k.n.Add(1)
	return k.KVStore.GetKV(ctx, key)
}
func (k *countAllKV) SwapKV(ctx context.Context, key string, old, value []byte) (bool, error) {
	k.n.Add(1)
	return k.KVStore.SwapKV(ctx, key, old, value)
}

// No goroutine is left after fetches, failed fetches, and a cancelled one.
func TestNoGoroutineLeft(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	up := newUpstream(t)
	a := node(t, up, db, 30*time.Millisecond)
	before := runtime.NumGoroutine()
	for i := range 20 {
		up.fail.Store(i%2 == 1)
		a.Quotes(ctx, t0.Add(time.Duration(i)*time.Minute))
	}
	up.fail.Store(false)
	up.gate = make(chan struct{})
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	a.Quotes(cctx, t0.Add(time.Hour))
	cancel()
	time.Sleep(100 * time.Millisecond)
	after := runtime.NumGoroutine()
	t.Logf("goroutines before %d after %d", before, after)
	if after > before+1 {
		t.Errorf("leak")
	}
}
