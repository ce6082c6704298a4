package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/sqlite"
	"coinpulse/internal/testlog"
)

// epochStore fails AuthEpoch while down is set.
type epochStore struct {
	coinpulse.AccountStore
	mu   sync.Mutex
	down bool
}

func (s *epochStore) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *epochStore) AuthEpoch(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return 0, errors.New("connection refused")
	}
	return s.AccountStore.AuthEpoch(ctx)
}

// A store that stops answering the auth-epoch poll (40 a second) gets one
// warning, not one a poll, and one line when it answers again.
func TestAuthEpochPollLogsAnOutageOnce(t *testing.T) {
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "auth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := &epochStore{AccountStore: db, down: true}
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	c := newKeyCache(store, time.Now, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { c.run(ctx, log); close(done) }()

	time.Sleep(20 * epochPoll) // about 20 failed polls
	store.setDown(false)
	pollUntil(t, "the recovery's line", func() bool { return strings.Contains(logs.String(), "auth epoch poll answers again") })
	cancel()
	<-done
	if n := strings.Count(logs.String(), "poll auth epoch"); n != 1 {
		t.Errorf("%d warnings for one outage, want 1:\n%s", n, logs.String())
	}
}

// countingStore counts KeyByHash calls.
type countingStore struct {
	coinpulse.AccountStore
	lookups atomic.Int64
	gone    atomic.Bool // every key is unknown
}

func (s *countingStore) KeyByHash(ctx context.Context, hash string) (*coinpulse.APIKey, error) {
	s.lookups.Add(1)
	if s.gone.Load() {
		return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "no key")
	}
	return s.AccountStore.KeyByHash(ctx, hash)
}

// Made-up keys are remembered apart from real ones: however many a client
// sends, the real keys stay cached (an audit: past 100,000 made-up keys
// the whole cache was emptied, and every real key asked the store again).
func TestUnknownKeysLeaveKnownCached(t *testing.T) {
	u := newUser(t, coinpulse.TierPro, nil)
	key, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	store := &countingStore{AccountStore: shared.store}
	c := newKeyCache(store, time.Now, time.Minute)
	ctx := t.Context()
	known := sha256.Sum256([]byte(key))
	if p, err := c.lookup(ctx, known); err != nil || p == nil || p.user.ID != u.ID {
		t.Fatalf("lookup of a real key: %v, %v", p, err)
	}
	for i := range maxUnknown + 5 {
		made := sha256.Sum256([]byte(fmt.Sprintf("made-up %d", i)))
		if p, err := c.lookup(ctx, made); err != nil || p != nil {
			t.Fatalf("lookup of a made-up key: %v, %v", p, err)
		}
	}
	if n := store.lookups.Load(); n != maxUnknown+6 {
		t.Errorf("%d store lookups, want one a key", n)
	}
	again := sha256.Sum256([]byte("made-up 10004"))
	if p, _ := c.lookup(ctx, again); p != nil || store.lookups.Load() != maxUnknown+6 {
		t.Errorf("a made-up key asked twice: %v, %d lookups", p, store.lookups.Load())
	}
	if p, _ := c.lookup(ctx, known); p == nil || store.lookups.Load() != maxUnknown+6 {
		t.Errorf("the real key after the made-up ones: %v, %d lookups; want it cached", p, store.lookups.Load())
	}
	if len(c.entries) != 1 || len(c.unknown) > maxUnknown {
		t.Errorf("%d known and %d unknown entries", len(c.entries), len(c.unknown))
	}
}

// A known key whose entry expired and that the store no longer has is
// remembered as unknown, not asked for again on every call (review).
func TestExpiredKeyGoneIsUnknown(t *testing.T) {
	u := newUser(t, coinpulse.TierPro, nil)
	key, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	store := &countingStore{AccountStore: shared.store}
	c := newKeyCache(store, time.Now, time.Nanosecond)
	sum := sha256.Sum256([]byte(key))
	if p, _ := c.lookup(t.Context(), sum); p == nil {
		t.Fatal("the key is not found")
	}
	store.gone.Store(true)
	c.ttl = time.Minute
	c.lookup(t.Context(), sum) // expired: asks the store, which says unknown
	for range 3 {
		if p, _ := c.lookup(t.Context(), sum); p != nil {
			t.Fatal("a key the store no longer has is found")
		}
	}
	if n := store.lookups.Load(); n != 2 {
		t.Errorf("%d store lookups, want 2: the unknown answer remembered", n)
	}
}
