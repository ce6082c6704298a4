package ratelimit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newTestSlots returns RedisSlots on c under the test's prefix, closed when
// the test ends: one "node".
func newTestSlots(t *testing.T, c *redis.Client, lease time.Duration) *RedisSlots {
	t.Helper()
	s := NewRedisSlots(c, SlotsConfig{Prefix: testPrefix(t), Lease: lease, Log: testLog(t)})
	t.Cleanup(s.Close)
	return s
}

// testLog logs to the test's output.
func testLog(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// take takes a slot of account on s, failing the test on an error; nil
// when refused.
func take(t *testing.T, s *RedisSlots, account int64, max int) func() {
	t.Helper()
	release, ok, err := s.Take(context.Background(), account, max)
	if err != nil {
		t.Fatalf("Take(%d, %d): %v", account, max, err)
	}
	if !ok {
		return nil
	}
	return release
}

// held is how many slots of account Redis counts, lapsed ones included.
func held(t *testing.T, c *redis.Client, s *RedisSlots, account int64) int64 {
	t.Helper()
	n, err := c.ZCard(context.Background(), s.key(account)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually polls cond for 5 s at most (slots are deleted in the
// background).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	within(t, 5*time.Second, what, cond)
}

// within polls cond for d at most.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
	}
}

// Two nodes share each account's cap; a slot given back is taken again,
// on either node; another account is not held back.
func TestRedisSlotsShareTheCap(t *testing.T) {
	c := newTestClient(t)
	a, b := newTestSlots(t, c, time.Minute), newTestSlots(t, c, time.Minute)
	a1, b1, a2 := take(t, a, 1, 3), take(t, b, 1, 3), take(t, a, 1, 3)
	if a1 == nil || b1 == nil || a2 == nil {
		t.Fatal("a cap of 3: three slots refused")
	}
	if take(t, a, 1, 3) != nil || take(t, b, 1, 3) != nil {
		t.Fatal("a cap of 3 over two nodes: a fourth slot taken")
	}
	other := take(t, b, 2, 3)
	if other == nil {
		t.Fatal("another account is held back by the first's slots")
	}
	a1()
	a1() // twice gives back nothing more
	var b2 func()
	eventually(t, "a slot given back on one node taken on the other", func() bool {
		b2 = take(t, b, 1, 3)
		return b2 != nil
	})
	if take(t, a, 1, 3) != nil {
		t.Fatal("a slot released twice was given back twice")
	}
	b1()
	a2()
	b2()
	other()
	eventually(t, "every slot given back", func() bool { return held(t, c, a, 1) == 0 })
	for i := range 100 {
		if take(t, a, 1, -1) == nil {
			t.Fatalf("no cap: slot %d refused", i+1)
		}
	}
	if n := held(t, c, a, 1); n != 0 {
		t.Errorf("without a cap nothing is counted, yet Redis holds %d", n)
	}
}

// With K slots left, 4K takes at once on two nodes take exactly K.
func TestRedisSlotsExactUnderConcurrency(t *testing.T) {
	c := newTestClient(t)
	nodes := []*RedisSlots{newTestSlots(t, c, time.Minute), newTestSlots(t, c, time.Minute)}
	const k = 25
	var taken atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 * k {
		wg.Go(func() {
			if take(t, nodes[i%2], 7, k) != nil {
				taken.Add(1)
			}
		})
	}
	wg.Wait()
	if taken.Load() != k || held(t, c, nodes[0], 7) != k {
		t.Fatalf("%d taken, %d held; want exactly %d of %d", taken.Load(), held(t, c, nodes[0], 7), k, 4*k)
	}
}

// A node's open slots outlive their lease while it renews them; a node
// that stops renewing (it died) frees them within a lease.
func TestRedisSlotsLapse(t *testing.T) {
	c := newTestClient(t)
	const lease = 300 * time.Millisecond
	live, dead, other := newTestSlots(t, c, lease), newTestSlots(t, c, lease), newTestSlots(t, c, lease)
	if take(t, live, 1, 2) == nil || take(t, dead, 1, 2) == nil {
		t.Fatal("a cap of 2: slots refused")
	}
	dead.Close() // it never gives its slot back
	time.Sleep(3 * lease)
	if take(t, other, 1, 2) == nil {
		t.Fatal("the dead node's slot has not lapsed after three leases")
	}
	if take(t, other, 1, 2) != nil {
		t.Fatal("the live node's slot lapsed although renewed")
	}
}

// Slots that Redis lost (a restart) are added back by their nodes'
// next renewal: they are still open, so they count.
func TestRedisSlotsRedisLost(t *testing.T) {
	c := newTestClient(t)
	const lease = 300 * time.Millisecond
	a, b := newTestSlots(t, c, lease), newTestSlots(t, c, lease)
	if take(t, a, 1, 2) == nil || take(t, a, 1, 2) == nil {
		t.Fatal("a cap of 2: slots refused")
	}
	if err := c.Del(context.Background(), a.key(1)).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * lease)
	for held(t, c, a, 1) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("Redis holds %d slots five leases after losing them; want the 2 open", held(t, c, a, 1))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if take(t, b, 1, 2) != nil {
		t.Fatal("a slot taken past the cap after the open ones were added back")
	}
}

// Slots given back while renewals run stay given back: a renewal that
// was on its way never leaves one counted.
func TestRedisSlotsReleaseDuringRenewal(t *testing.T) {
	c := newTestClient(t)
	s := newTestSlots(t, c, 1500*time.Millisecond) // a renewal every 500 ms
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
				if release := take(t, s, 1, 1000); release != nil {
					time.Sleep(time.Millisecond)
					release()
				}
			}
		})
	}
	wg.Wait()
	// A slot a renewal added back would stay a second or more.
	within(t, 300*time.Millisecond, "every slot given back", func() bool { return held(t, c, s, 1) == 0 })
}

// A Redis that cannot be reached is an error, and nothing is taken.
func TestRedisSlotsError(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	s := NewRedisSlots(c, SlotsConfig{Log: testLog(t)})
	defer s.Close()
	if release, ok, err := s.Take(context.Background(), 1, 3); err == nil || ok || release != nil {
		t.Fatalf("Take with no server: %v, %v; want an error", ok, err)
	}
}
