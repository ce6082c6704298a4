package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
)

func TestMemoryAllowZeroAllocs(t *testing.T) {
	clock := &fakeClock{t: t0}
	m := NewMemory(clock.Now, nil)
	ctx := context.Background()
	l := coinpulse.Limits{PerSecond: 1 << 30, PerMinute: 1 << 30, Monthly: 1 << 40}
	if _, err := m.Allow(ctx, acct, l); err != nil {
		t.Fatal(err)
	}
	refusing := coinpulse.Limits{PerSecond: 1, PerMinute: 1, Monthly: 1}
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"Allow", func() { m.Allow(ctx, acct, l) }},
		{"Allow refused", func() { m.Allow(ctx, acct, refusing) }},
		{"Peek", func() { m.Peek(ctx, acct, l) }},
	} {
		if n := testing.AllocsPerRun(1000, c.f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", c.name, n)
		}
	}
}

// One slow Seed does not hold up other accounts in the same shard, and
// calls for the account being seeded wait for that one Seed.
func TestMemorySeedOutsideLock(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	seed := func(ctx context.Context, account string, _ time.Time) (int64, error) {
		calls.Add(1)
		if account == "slow" {
			close(started) // (a second call would panic)
			<-release
		}
		return 0, nil
	}
	m := NewMemory(time.Now, seed)
	// Another account in the slow one's shard.
	other := ""
	for i := 0; other == ""; i++ {
		if a := "acct-" + strconv.Itoa(i); shardOf(a) == shardOf("slow") {
			other = a
		}
	}
	l := coinpulse.Limits{Monthly: 100}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if v, err := m.Allow(context.Background(), "slow", l); err != nil || !v.Allowed {
				t.Errorf("slow account: %+v, %v", v, err)
			}
		})
	}
	<-started
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := m.Allow(context.Background(), other, l); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("an account in the same shard waited for another's Seed")
	}
	// A waiter gives up with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := m.Peek(ctx, "slow", l); err != context.DeadlineExceeded {
		t.Errorf("Peek while seeding, context ended: %v", err)
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 2 {
		t.Errorf("%d Seed calls, want 2 (one per account)", n)
	}
	v, err := m.Peek(context.Background(), "slow", l)
	if err != nil || v.Windows[2].Remaining != 90 {
		t.Errorf("after: %+v, %v; want 90 left", v, err)
	}
}

func TestShardOfSpreads(t *testing.T) {
	var counts [shardCount]int
	for i := range 64 * 1000 {
		counts[shardOf("acct-"+strconv.Itoa(i))]++
	}
	for i, n := range counts {
		if n < 700 || n > 1300 {
			t.Errorf("shard %d has %d of 64000 accounts", i, n)
		}
	}
}

// A Seed that panics installs nothing: the next call seeds again.
func TestMemorySeedPanic(t *testing.T) {
	calls := 0
	m := NewMemory(time.Now, func(context.Context, string, time.Time) (int64, error) {
		calls++
		if calls == 1 {
			panic("boom")
		}
		return 9, nil
	})
	l := coinpulse.Limits{Monthly: 10}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		m.Allow(context.Background(), acct, l)
	}()
	v, err := m.Allow(context.Background(), acct, l)
	if err != nil || !v.Allowed || v.Windows[2].Remaining != 0 {
		t.Fatalf("after the panic: %+v, %v; want admitted with 0 left", v, err)
	}
}
