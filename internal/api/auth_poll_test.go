package api

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
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
