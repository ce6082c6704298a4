package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
)

// The limits of the benchmarks admit every call.
var benchLimits = coinpulse.Limits{PerSecond: 1 << 30, PerMinute: 1 << 30, Monthly: 1 << 50}

func benchAccounts(n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = "acct-" + strconv.Itoa(i)
	}
	return a
}

func BenchmarkMemoryAllow(b *testing.B) {
	m := NewMemory(time.Now, nil)
	ctx := context.Background()
	if _, err := m.Allow(ctx, acct, benchLimits); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := m.Allow(ctx, acct, benchLimits); !v.Allowed {
			b.Fatal("refused")
		}
	}
}

func BenchmarkMemoryAllowParallel(b *testing.B) {
	m := NewMemory(time.Now, nil)
	ctx := context.Background()
	accounts := benchAccounts(10_000)
	for _, a := range accounts {
		if _, err := m.Allow(ctx, a, benchLimits); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			if v, _ := m.Allow(ctx, accounts[i%len(accounts)], benchLimits); !v.Allowed {
				b.Fatal("refused")
			}
		}
	})
}

func BenchmarkMemoryPeek(b *testing.B) {
	m := NewMemory(time.Now, nil)
	ctx := context.Background()
	if _, err := m.Allow(ctx, acct, benchLimits); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Peek(ctx, acct, benchLimits)
	}
}

func BenchmarkRedisAllow(b *testing.B) {
	lim := NewRedis(newTestClient(b), nil, WithPrefix(testPrefix(b)))
	ctx := context.Background()
	if _, err := lim.Allow(ctx, acct, benchLimits); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if v, err := lim.Allow(ctx, acct, benchLimits); err != nil || !v.Allowed {
			b.Fatal(v, err)
		}
	}
}

func BenchmarkRedisAllowParallel(b *testing.B) {
	lim := NewRedis(newTestClient(b), nil, WithPrefix(testPrefix(b)))
	ctx := context.Background()
	accounts := benchAccounts(1000)
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			if v, err := lim.Allow(ctx, accounts[i%len(accounts)], benchLimits); err != nil || !v.Allowed {
				b.Fatal(v, err)
			}
		}
	})
}

// BenchmarkRedisAllowRequests is the Redis limiter as the API server uses
// it: many concurrent checks of one account (a busy key), each with its
// own cancellable context, as an HTTP request's is.
func BenchmarkRedisAllowRequests(b *testing.B) {
	lim := NewRedis(newTestClient(b), nil, WithPrefix(testPrefix(b)))
	base := context.Background()
	if _, err := lim.Allow(base, acct, benchLimits); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx, cancel := context.WithCancel(base)
			v, err := lim.Allow(ctx, acct, benchLimits)
			cancel()
			if err != nil || !v.Allowed {
				b.Fatal(v, err)
			}
		}
	})
}
