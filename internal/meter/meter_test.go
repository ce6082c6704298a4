package meter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/meter"
	"coinpulse/internal/sqlite"
	"coinpulse/internal/testlog"
)

// now is the time of the tests' calls.
var now = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

// openStore opens a SQLite store in a temporary file, closed when t ends.
func openStore(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "coinpulse.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// account is a user and their keys.
type account struct {
	user *coinpulse.User
	keys []*coinpulse.APIKey
}

// newAccounts creates n users with two keys each.
func newAccounts(t *testing.T, db *sqlite.DB, n int) []account {
	t.Helper()
	accounts := make([]account, n)
	for i := range accounts {
		u := &coinpulse.User{Email: fmt.Sprintf("user%d@example.com", i)}
		if err := db.CreateUser(t.Context(), u); err != nil {
			t.Fatal(err)
		}
		accounts[i].user = u
		for range 2 {
			_, k, err := coinpulse.NewAPIKey(u.ID, "key", coinpulse.ModeLive, coinpulse.Permissions{Read: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.CreateKey(t.Context(), k); err != nil {
				t.Fatal(err)
			}
			accounts[i].keys = append(accounts[i].keys, k)
		}
	}
	return accounts
}

// call returns a counted call of key k.
func call(k *coinpulse.APIKey, i int) coinpulse.Call {
	return coinpulse.Call{
		UserID:    k.UserID,
		KeyID:     k.ID,
		Mode:      k.Mode,
		Time:      now.Add(time.Duration(i) * time.Millisecond),
		Method:    "GET",
		Route:     "/api/v1/coins",
		Status:    200,
		Duration:  time.Duration(100+i%1000) * time.Microsecond,
		RequestID: fmt.Sprintf("req-%d", i),
		Counted:   true,
	}
}

// stored returns the store's counted calls this month and its key totals,
// over accounts, checking that MonthCalls and Usage agree: call it when
// nothing writes.
func stored(t *testing.T, db *sqlite.DB, accounts []account) (month, keys int64) {
	t.Helper()
	for _, a := range accounts {
		u, err := db.Usage(t.Context(), a.user.ID, now)
		if err != nil {
			t.Fatalf("Usage: %v", err)
		}
		n, err := db.MonthCalls(t.Context(), a.user.ID, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatalf("MonthCalls: %v", err)
		}
		if n != u.MonthCalls {
			t.Errorf("MonthCalls = %d, Usage.MonthCalls = %d", n, u.MonthCalls)
		}
		month += n
		for _, k := range u.Keys {
			keys += k.Calls
		}
	}
	return month, keys
}

// monthCalls returns the store's counted calls this month over accounts.
func monthCalls(t *testing.T, db *sqlite.DB, accounts []account) int64 {
	t.Helper()
	var month int64
	for _, a := range accounts {
		n, err := db.MonthCalls(t.Context(), a.user.ID, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatalf("MonthCalls: %v", err)
		}
		month += n
	}
	return month
}

// waitFor polls cond until it holds, failing t after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// start runs m's batcher until t ends, and checks it returns nil after
// Close.
func start(t *testing.T, m *meter.Meter) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	t.Cleanup(func() {
		m.Close(context.Background())
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil after Close", err)
		}
	})
}

// newLogger returns a logger and what it writes.
func newLogger() (*slog.Logger, *testlog.Buffer) {
	l := &testlog.Buffer{}
	return slog.New(slog.NewTextHandler(l, nil)), l
}

func TestCloseDrainsEverything(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 5)
	m := meter.New(db, nil, meter.Options{Interval: 5 * time.Millisecond, MaxBatch: 500, QueueSize: 1 << 14})
	start(t, m)

	const goroutines, per = 50, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				a := accounts[(g+i)%len(accounts)]
				m.Record(call(a.keys[i%2], g*per+i))
			}
		})
	}
	wg.Wait()
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if m.Dropped() != 0 || m.Pending() != 0 {
		t.Errorf("Dropped, Pending = %d, %d; want 0, 0", m.Dropped(), m.Pending())
	}
	month, keys := stored(t, db, accounts)
	if month != goroutines*per || keys != goroutines*per {
		t.Errorf("stored: %d counted calls, %d by key; want %d", month, keys, goroutines*per)
	}
}

func TestCloseWithoutRun(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 1)
	m := meter.New(db, nil, meter.Options{MaxBatch: 7})
	for i := range 50 {
		m.Record(call(accounts[0].keys[0], i))
	}
	if m.Pending() != 50 {
		t.Errorf("Pending = %d, want 50", m.Pending())
	}
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if month, _ := stored(t, db, accounts); month != 50 {
		t.Errorf("stored %d calls, want 50", month)
	}
	// Run after Close returns at once.
	if err := m.Run(t.Context()); err != nil {
		t.Errorf("Run after Close = %v, want nil", err)
	}
}

func TestIntervalFlush(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 1)
	m := meter.New(db, nil, meter.Options{Interval: 20 * time.Millisecond})
	start(t, m)
	m.Record(call(accounts[0].keys[0], 1))
	// Far below MaxBatch: only the interval writes it.
	waitFor(t, "the call to be written", func() bool {
		return monthCalls(t, db, accounts) == 1
	})
	waitFor(t, "nothing pending", func() bool { return m.Pending() == 0 })
	// And again, for a second batch.
	m.Record(call(accounts[0].keys[1], 2))
	waitFor(t, "the second call to be written", func() bool {
		return monthCalls(t, db, accounts) == 2
	})
}

func TestMaxBatchFlush(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 1)
	m := meter.New(db, nil, meter.Options{Interval: time.Hour, MaxBatch: 100})
	start(t, m)
	for i := range 250 {
		m.Record(call(accounts[0].keys[0], i))
	}
	// Two full batches go without waiting for the interval.
	waitFor(t, "two full batches", func() bool {
		return monthCalls(t, db, accounts) == 200
	})
	if p := m.Pending(); p != 50 {
		t.Errorf("Pending = %d, want 50", p)
	}
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if month, _ := stored(t, db, accounts); month != 250 {
		t.Errorf("after Close stored %d calls, want 250", month)
	}
}

// slowStore holds each write until the test lets it go, and tells when
// each begins.
type slowStore struct {
	coinpulse.UsageStore
	began   chan time.Time
	release chan struct{}
}

func (s *slowStore) RecordCalls(ctx context.Context, calls []coinpulse.Call) error {
	s.began <- time.Now()
	<-s.release
	return s.UsageStore.RecordCalls(ctx, calls)
}

// A call queued while a batch is being written waits at most an Interval
// in all, not through the write and then a whole Interval more: the
// next batch's timer counts from when the queue was last seen empty.
func TestCallsQueuedDuringAWriteWaitOneInterval(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 1)
	const interval = 2 * time.Second
	store := &slowStore{UsageStore: db, began: make(chan time.Time, 2), release: make(chan struct{}, 2)}
	m := meter.New(store, nil, meter.Options{Interval: interval})
	start(t, m)
	m.Record(call(accounts[0].keys[0], 1))
	<-store.began // the first batch's write
	m.Record(call(accounts[0].keys[0], 2))
	// The write takes longer than the Interval: the second call's batch is
	// due at once when it ends.
	time.Sleep(interval + 100*time.Millisecond)
	released := time.Now()
	store.release <- struct{}{}
	second := <-store.began
	store.release <- struct{}{}
	// Seconds apart: at once (a poll, 20 ms) against a whole Interval (2 s)
	// after the first write, as the timer counted before.
	if waited := second.Sub(released); waited > interval/2 {
		t.Errorf("the second batch's write began %v after the first ended, want at once (its call had waited %v)", waited, interval)
	}
	waitFor(t, "both calls written", func() bool { return monthCalls(t, db, accounts) == 2 })
}

// gatedStore blocks RecordCalls until open is closed.
type gatedStore struct {
	coinpulse.UsageStore
	open    chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (s *gatedStore) RecordCalls(ctx context.Context, calls []coinpulse.Call) error {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.UsageStore.RecordCalls(ctx, calls)
}

// While the store blocks, calls wait in the queue, then in the overflow;
// past both they are dropped, without blocking Record. Once the store
// answers, Run writes them all.
func TestQueueAndOverflowFullDrops(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 1)
	store := &gatedStore{UsageStore: db, open: make(chan struct{}), entered: make(chan struct{})}
	log, logged := newLogger()
	m := meter.New(store, log, meter.Options{Interval: time.Hour, MaxBatch: 5, QueueSize: 10, Overflow: 50})
	start(t, m)

	// Fill a batch, which blocks in the store.
	for i := range 5 {
		m.Record(call(accounts[0].keys[0], i))
	}
	<-store.entered
	// The queue holds 10 more, the overflow 50; the rest are dropped,
	// without blocking.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 5; i < 100; i++ {
			m.Record(call(accounts[0].keys[0], i))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked on a full queue")
	}
	if d := m.Dropped(); d != 35 {
		t.Errorf("Dropped = %d, want 35", d)
	}
	if p := m.Pending(); p != 65 {
		t.Errorf("Pending = %d, want 65", p)
	}
	if n := logged.Count("overflow full"); n != 1 {
		t.Errorf("%d overflow-full logs, want 1", n)
	}
	close(store.open)
	// 65 calls are 13 full batches: Run writes them without waiting for
	// the (hour-long) interval.
	waitFor(t, "Run to write the queue and the overflow", func() bool { return m.Pending() == 0 })
	if month, _ := stored(t, db, accounts); month != 65 {
		t.Errorf("stored %d calls, want the 65 not dropped", month)
	}
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// Close writes the overflow too.
func TestCloseDrainsTheOverflow(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 1)
	m := meter.New(db, nil, meter.Options{MaxBatch: 7, QueueSize: 10, Overflow: 100})
	for i := range 60 { // no Run: 10 queued, 50 in the overflow
		m.Record(call(accounts[0].keys[0], i))
	}
	if m.Pending() != 60 || m.Dropped() != 0 {
		t.Fatalf("Pending, Dropped = %d, %d; want 60, 0", m.Pending(), m.Dropped())
	}
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if month, _ := stored(t, db, accounts); month != 60 || m.Pending() != 0 {
		t.Errorf("stored %d calls, %d pending; want 60, 0", month, m.Pending())
	}
}

// march is the month of now.
var march = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)

// admitted returns the store's admitted calls of a's user in March.
func admitted(t *testing.T, db *sqlite.DB, a account) int64 {
	t.Helper()
	n, err := db.MonthAdmitted(t.Context(), a.user.ID, march)
	if err != nil {
		t.Fatalf("MonthAdmitted: %v", err)
	}
	return n
}

// Admission counts are written within an Interval, with or without calls
// to write, and summed by user and month; Close writes those left.
func TestAdmittedWritten(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 2)
	m := meter.New(db, nil, meter.Options{Interval: 10 * time.Millisecond})
	start(t, m)
	for range 3 {
		m.Admitted(accounts[0].user.ID, march, 1)
	}
	m.Admitted(accounts[0].user.ID, march, -1)
	m.Admitted(accounts[1].user.ID, march, 1)
	waitFor(t, "the counts to be written", func() bool {
		return admitted(t, db, accounts[0]) == 2 && admitted(t, db, accounts[1]) == 1
	})
	m.Admitted(accounts[1].user.ID, march, 1)
	m.Record(call(accounts[1].keys[0], 1))
	waitFor(t, "the counts to be written with a call", func() bool {
		return admitted(t, db, accounts[1]) == 2 && monthCalls(t, db, accounts) == 1
	})
	m.Admitted(accounts[0].user.ID, march, 5)
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if a, b := admitted(t, db, accounts[0]), admitted(t, db, accounts[1]); a != 7 || b != 2 {
		t.Errorf("admitted %d and %d after Close, want 7 and 2", a, b)
	}
}

// Close writes the calls and counts there were when it began, and none
// of those that come meanwhile: a call of the overflow written without
// its admission would be counted twice once its month's count is made
// (from the calls metered before it, and from the admission).
func TestCloseLeavesWhatCameAfter(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 2)
	a, b := accounts[0], accounts[1]
	store := &gatedStore{UsageStore: db, open: make(chan struct{}), entered: make(chan struct{})}
	m := meter.New(store, nil, meter.Options{QueueSize: 2, MaxBatch: 1})
	for i := range 2 { // the queue is full
		m.Admitted(a.user.ID, march, 1)
		m.Record(call(a.keys[0], i))
	}
	closed := make(chan error)
	go func() { closed <- m.Close(t.Context()) }()
	<-store.entered    // Close writes its first batch
	for i := range 2 { // one to the queue, one to the overflow
		m.Admitted(b.user.ID, march, 1)
		m.Record(call(b.keys[0], 10+i))
	}
	close(store.open)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n, calls := admitted(t, db, a), monthCalls(t, db, accounts[:1]); n != 2 || calls != 2 {
		t.Errorf("a: admitted %d, metered %d after Close; want 2 and 2", n, calls)
	}
	if n, calls := admitted(t, db, b), monthCalls(t, db, accounts[1:]); n != 0 || calls != 0 {
		t.Errorf("b: admitted %d, metered %d after Close; want 0 and 0 (they came after it began)", n, calls)
	}
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n, calls := admitted(t, db, b), monthCalls(t, db, accounts[1:]); n != 2 || calls != 2 {
		t.Errorf("b: admitted %d, metered %d after a second Close; want 2 and 2", n, calls)
	}
}

// admitStore fails its first failures AddAdmitted and records whether
// RecordCalls ever ran before them.
type admitStore struct {
	coinpulse.UsageStore
	failures atomic.Int32
	admits   atomic.Int32
	early    atomic.Bool // RecordCalls ran while an AddAdmitted had failed last
	failing  atomic.Bool
}

func (s *admitStore) AddAdmitted(ctx context.Context, changes []coinpulse.Admitted) error {
	s.admits.Add(1)
	if s.failures.Add(-1) >= 0 {
		s.failing.Store(true)
		return errors.New("database is locked")
	}
	s.failing.Store(false)
	return s.UsageStore.AddAdmitted(ctx, changes)
}

func (s *admitStore) RecordCalls(ctx context.Context, calls []coinpulse.Call) error {
	if s.failing.Load() {
		s.early.Store(true)
	}
	return s.UsageStore.RecordCalls(ctx, calls)
}

// A batch's admission counts are written before its calls, so the store
// never counts fewer calls admitted than metered; a failed write of
// either is retried without counting an admission twice.
func TestAdmittedRetried(t *testing.T) {
	for _, failing := range []string{"admitted", "calls"} {
		t.Run(failing, func(t *testing.T) {
			db := openStore(t)
			accounts := newAccounts(t, db, 1)
			var store coinpulse.UsageStore
			as := &admitStore{UsageStore: db}
			fs := &flakyStore{UsageStore: as}
			if failing == "admitted" {
				as.failures.Store(2)
				store = as
			} else {
				fs.failures.Store(2)
				store = fs
			}
			m := meter.New(store, nil, meter.Options{Interval: 10 * time.Millisecond})
			start(t, m)
			for i := range 3 {
				m.Admitted(accounts[0].user.ID, march, 1)
				m.Record(call(accounts[0].keys[0], i))
			}
			waitFor(t, "the calls to be written", func() bool { return m.Pending() == 0 })
			if err := m.Close(t.Context()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if n, calls := admitted(t, db, accounts[0]), monthCalls(t, db, accounts); n != 3 || calls != 3 {
				t.Errorf("admitted %d, metered %d; want 3 and 3", n, calls)
			}
			if as.early.Load() {
				t.Error("calls written while their admissions were not")
			}
			if failing == "admitted" && as.admits.Load() < 3 {
				t.Errorf("%d AddAdmitted, want at least 3 (two failures)", as.admits.Load())
			}
		})
	}
}

// flakyStore fails its first failures writes.
type flakyStore struct {
	coinpulse.UsageStore
	failures atomic.Int32
	calls    atomic.Int32
}

func (s *flakyStore) RecordCalls(ctx context.Context, calls []coinpulse.Call) error {
	s.calls.Add(1)
	if s.failures.Add(-1) >= 0 {
		return errors.New("database is locked")
	}
	return s.UsageStore.RecordCalls(ctx, calls)
}

func TestRetryLosesNothing(t *testing.T) {
	for _, viaRun := range []bool{true, false} {
		t.Run(fmt.Sprintf("run=%v", viaRun), func(t *testing.T) {
			db := openStore(t)
			accounts := newAccounts(t, db, 2)
			store := &flakyStore{UsageStore: db}
			store.failures.Store(2)
			log, logged := newLogger()
			m := meter.New(store, log, meter.Options{Interval: 10 * time.Millisecond})
			if viaRun {
				start(t, m)
			}
			for i := range 30 {
				m.Record(call(accounts[i%2].keys[i%3%2], i))
			}
			if viaRun {
				waitFor(t, "the calls to be written", func() bool { return m.Pending() == 0 })
			}
			if err := m.Close(t.Context()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if month, keys := stored(t, db, accounts); month != 30 || keys != 30 {
				t.Errorf("stored %d calls, %d by key; want 30", month, keys)
			}
			if n := store.calls.Load(); n != 3 {
				t.Errorf("%d writes, want 3 (two failures, then one batch)", n)
			}
			if n := logged.Count("failed, retrying"); n != 2 {
				t.Errorf("%d retry logs, want 2", n)
			}
			if m.Dropped() != 0 {
				t.Errorf("Dropped = %d, want 0", m.Dropped())
			}
		})
	}
}

func TestCloseGivesUpWhenCtxEnds(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 1)
	store := &flakyStore{UsageStore: db}
	store.failures.Store(1 << 30) // always fails
	m := meter.New(store, slog.New(slog.DiscardHandler), meter.Options{Interval: 5 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	for i := range 20 {
		m.Record(call(accounts[0].keys[0], i))
	}
	waitFor(t, "a failed write", func() bool { return store.calls.Load() > 0 })
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := m.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want a deadline error", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if p := m.Pending(); p != 20 {
		t.Errorf("Pending = %d, want 20 (kept)", p)
	}
	// The store recovers: a second Close writes them.
	store.failures.Store(0)
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if month, _ := stored(t, db, accounts); month != 20 {
		t.Errorf("stored %d calls, want 20", month)
	}
}

func TestRunCanceledThenClose(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 1)
	m := meter.New(db, nil, meter.Options{Interval: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	for i := range 40 {
		m.Record(call(accounts[0].keys[0], i))
	}
	waitFor(t, "Run to take the calls", func() bool { return m.Pending() == 40 && len(done) == 0 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	m.Record(call(accounts[0].keys[0], 40))
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if month, _ := stored(t, db, accounts); month != 41 {
		t.Errorf("stored %d calls, want 41", month)
	}
}

func TestInvalidModeDropped(t *testing.T) {
	db := openStore(t)
	accounts := newAccounts(t, db, 1)
	m := meter.New(db, slog.New(slog.DiscardHandler), meter.Options{})
	bad := call(accounts[0].keys[0], 0)
	bad.Mode = ""
	m.Record(bad)
	for i := 1; i <= 3; i++ {
		m.Record(call(accounts[0].keys[0], i))
	}
	if err := m.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if month, _ := stored(t, db, accounts); month != 3 || m.Dropped() != 1 {
		t.Errorf("stored, dropped = %d, %d; want 3, 1", month, m.Dropped())
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	m := meter.New(nopStore{}, slog.New(slog.DiscardHandler), meter.Options{QueueSize: 1000, Overflow: -1})
	c := call(&coinpulse.APIKey{ID: 1, UserID: 1, Mode: coinpulse.ModeLive}, 1)
	if n := testing.AllocsPerRun(500, func() { m.Record(c) }); n != 0 {
		t.Errorf("Record: %v allocs, want 0", n)
	}
	// Nor when the queue is full and, without an overflow, the call is
	// dropped (but not logged).
	m.Record(c)
	if n := testing.AllocsPerRun(500, func() { m.Record(c) }); n != 0 {
		t.Errorf("Record, dropping: %v allocs, want 0", n)
	}
}

type nopStore struct{ coinpulse.UsageStore }

func (nopStore) RecordCalls(context.Context, []coinpulse.Call) error { return nil }

func (nopStore) AddAdmitted(context.Context, []coinpulse.Admitted) error { return nil }

// Admitted allocates nothing for a user and month it has counted since
// the last write.
func TestAdmittedDoesNotAllocate(t *testing.T) {
	m := meter.New(nopStore{}, slog.New(slog.DiscardHandler), meter.Options{})
	m.Admitted(1, march, 1)
	if n := testing.AllocsPerRun(500, func() { m.Admitted(1, march, 1) }); n != 0 {
		t.Errorf("Admitted: %v allocs, want 0", n)
	}
}

// BenchmarkAdmittedParallel measures counting admitted calls, the other
// hot path, from many goroutines over 1,000 users.
func BenchmarkAdmittedParallel(b *testing.B) {
	m := meter.New(nopStore{}, slog.New(slog.DiscardHandler), meter.Options{Interval: 10 * time.Millisecond})
	go m.Run(b.Context())
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		user := next.Add(1) * 997
		for pb.Next() {
			user++
			m.Admitted(user%1000, march, 1)
		}
	})
	b.StopTimer()
	m.Close(context.Background())
}

// BenchmarkRecord measures the hot path: one call into the queue, drained
// by Run into a store that does nothing; dropped/op should be 0.
func BenchmarkRecord(b *testing.B) {
	// A short Interval, so that the batcher writes what it holds within
	// milliseconds and the wait below is short.
	m := meter.New(nopStore{}, slog.New(slog.DiscardHandler), meter.Options{Interval: 10 * time.Millisecond})
	go m.Run(b.Context())
	c := call(&coinpulse.APIKey{ID: 1, UserID: 1, Mode: coinpulse.ModeLive}, 1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.Record(c)
		// Let the batcher empty the queue now and then, off the clock, so
		// that it never fills: this measures enqueuing, not dropping.
		if i++; i%(meter.DefaultQueueSize/2) == 0 {
			b.StopTimer()
			for m.Pending() > 0 {
				time.Sleep(100 * time.Microsecond)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	m.Close(context.Background())
	b.ReportMetric(float64(m.Dropped())/float64(b.N), "dropped/op")
}

// BenchmarkRecordParallel is BenchmarkRecord from many goroutines; they
// may outrun the one batcher and fill the queue, then the overflow:
// dropped/op says how often calls were dropped.
func BenchmarkRecordParallel(b *testing.B) {
	m := meter.New(nopStore{}, slog.New(slog.DiscardHandler), meter.Options{})
	go m.Run(b.Context())
	c := call(&coinpulse.APIKey{ID: 1, UserID: 1, Mode: coinpulse.ModeLive}, 1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Record(c)
		}
	})
	b.StopTimer()
	m.Close(context.Background())
	b.ReportMetric(float64(m.Dropped())/float64(b.N), "dropped/op")
}
