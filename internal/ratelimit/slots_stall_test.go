package ratelimit

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A renewal that Redis applies after the node gave up waiting for it (its
// 2 s) adds back a slot given back meanwhile: the account is refused a
// connection it is owed, for a whole lease.
func TestRedisSlotsLateRenewal(t *testing.T) {
	direct := newTestClient(t)
	loadScripts(t, direct) // so that the stalled script is run, not refused
	stalled := make(chan struct{}, 1)
	var once sync.Once
	p := newFaultProxy(t, direct.Options().Addr, func(b []byte) time.Duration {
		d := time.Duration(0)
		if bytes.Contains(b, []byte(renewSlotsScript.Hash())) || bytes.Contains(b, []byte("for i = 3, #ARGV")) { // the renewal script
			once.Do(func() { d = slotTimeout + 500*time.Millisecond; stalled <- struct{}{} })
		}
		return d
	})
	const lease = 9 * time.Second // a renewal every 3 s
	s := NewRedisSlots(p.client(t), SlotsConfig{Prefix: testPrefix(t), Lease: lease, Log: testLog(t)})
	defer s.Close()
	release := take(t, s, 1, 1)
	if release == nil {
		t.Fatal("refused")
	}
	<-stalled // the first renewal is on its way, stalled
	release()
	eventually(t, "the slot given back", func() bool { return held(t, direct, s, 1) == 0 })
	time.Sleep(slotTimeout + time.Second) // the renewal fails on the node, then lands in Redis
	if n := held(t, direct, s, 1); n != 0 {
		ttl, _ := direct.PTTL(context.Background(), s.key(1)).Result()
		t.Errorf("no connection open, yet Redis holds %d slot(s) for another %s", n, ttl)
	}
	if r := take(t, s, 1, 1); r == nil {
		t.Errorf("a cap of 1 and no connection open: refused")
	} else {
		r()
	}
}

// With Redis stalled (it accepts but does not answer), connections that end
// while a renewal waits are removed one after another after it, 2 s each,
// in the renewal goroutine; Close waits for all of that, without a bound.
func TestRedisSlotsCloseWithRedisStalled(t *testing.T) {
	direct := newTestClient(t)
	p := newFaultProxy(t, direct.Options().Addr, nil)
	const lease = 3 * time.Second // a renewal every second
	s := NewRedisSlots(p.client(t), SlotsConfig{Prefix: testPrefix(t), Lease: lease, Log: testLog(t)})
	const n = 6
	var releases []func()
	for range n {
		r := take(t, s, 1, 100)
		if r == nil {
			t.Fatal("refused")
		}
		releases = append(releases, r)
	}
	p.swallow.Store(true)
	time.Sleep(1500 * time.Millisecond) // a renewal is waiting on Redis
	var wg sync.WaitGroup
	for _, r := range releases {
		wg.Go(r) // the hub closing the connections at shutdown
	}
	wg.Wait()
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > closeWait+500*time.Millisecond {
		t.Errorf("Close took %s with %d connections given back during a stalled renewal", d.Round(time.Millisecond), n)
	}
}

// A Take whose script reaches Redis after the node gave up (its 2 s; the
// ZREM sent then comes first) leaves a slot no connection holds, for a
// whole lease: the client, told 503 "retry in a second", is then refused
// with 429 at a cap of 1.
func TestRedisSlotsLateTake(t *testing.T) {
	direct := newTestClient(t)
	loadScripts(t, direct) // so that the stalled script is run, not refused
	var once sync.Once
	p := newFaultProxy(t, direct.Options().Addr, func(b []byte) time.Duration {
		d := time.Duration(0)
		if bytes.Contains(b, []byte(takeSlotScript.Hash())) || bytes.Contains(b, []byte("ZCARD")) { // the take script
			once.Do(func() { d = slotTimeout + 500*time.Millisecond })
		}
		return d
	})
	s := NewRedisSlots(p.client(t), SlotsConfig{Prefix: testPrefix(t), Lease: 9 * time.Second, Log: testLog(t)})
	defer s.Close()
	if _, _, err := s.Take(context.Background(), 1, 1); err == nil {
		t.Fatal("want the stalled Take to fail")
	}
	time.Sleep(time.Second) // the client retries after Retry-After: 1
	if r := take(t, s, 1, 1); r == nil {
		ttl, _ := direct.PTTL(context.Background(), s.key(1)).Result()
		t.Errorf("no connection open, a cap of 1: refused; Redis holds %d slot(s) for another %s", held(t, direct, s, 1), ttl)
	} else {
		r()
	}
}

// loadScripts loads the slots' scripts into Redis.
func loadScripts(t *testing.T, c *redis.Client) {
	t.Helper()
	for _, sc := range []*redis.Script{takeSlotScript, renewSlotsScript} {
		if err := sc.Load(context.Background(), c).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
