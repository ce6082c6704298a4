package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"coinpulse"
)

// fakeClock is a settable clock. It answers in a zone other than UTC, so
// that the months are seen to be UTC ones whatever the clock's zone.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

var plus5 = time.FixedZone("UTC+5", 5*3600)

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t.In(plus5)
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// seeder is a Seed that records its calls and answers with fn's figure
// (0 when fn is nil).
type seeder struct {
	mu    sync.Mutex
	fn    func(account string, monthStart time.Time) (int64, error)
	calls []time.Time // the monthStart of each call
}

func (s *seeder) Seed(_ context.Context, account string, monthStart time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, monthStart)
	if s.fn == nil {
		return 0, nil
	}
	return s.fn(account, monthStart)
}

func (s *seeder) Calls() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.calls...)
}

// env is a limiter under test with its clock and seed.
type env struct {
	t     *testing.T
	lim   coinpulse.Limiter
	clock *fakeClock
	seed  *seeder
}

// store makes a limiter reading the given clock and seed.
type store struct {
	name string
	new  func(t *testing.T, clock coinpulse.Clock, seed Seed) coinpulse.Limiter
}

func stores() []store {
	return []store{
		{"memory", func(t *testing.T, clock coinpulse.Clock, seed Seed) coinpulse.Limiter {
			return NewMemory(clock, seed)
		}},
		{"redis", func(t *testing.T, clock coinpulse.Clock, seed Seed) coinpulse.Limiter {
			return NewRedis(newTestClient(t), seed, WithPrefix(testPrefix(t)), withClock(clock))
		}},
	}
}

const acct = "acct-1"

func (e *env) allow(l coinpulse.Limits) coinpulse.Verdict {
	e.t.Helper()
	v, err := e.lim.Allow(context.Background(), acct, l)
	if err != nil {
		e.t.Fatalf("Allow: %v", err)
	}
	return v
}

func (e *env) peek(l coinpulse.Limits) coinpulse.Verdict {
	e.t.Helper()
	v, err := e.lim.Peek(context.Background(), acct, l)
	if err != nil {
		e.t.Fatalf("Peek: %v", err)
	}
	return v
}

// refund gives back the call that v admitted.
func (e *env) refund(l coinpulse.Limits, v coinpulse.Verdict) {
	e.t.Helper()
	if err := e.lim.Refund(context.Background(), acct, l, v.Admission()); err != nil {
		e.t.Fatalf("Refund: %v", err)
	}
}

// Helpers to spell the expected windows.
func ws(w coinpulse.Window, limit, remaining int64, reset time.Time) coinpulse.WindowState {
	return coinpulse.WindowState{Window: w, Limit: limit, Remaining: remaining, Reset: reset}
}

func none(w coinpulse.Window) coinpulse.WindowState {
	return coinpulse.WindowState{Window: w, Limit: coinpulse.Unlimited, Remaining: coinpulse.Unlimited}
}

var (
	noSecond = none(coinpulse.WindowSecond)
	noMinute = none(coinpulse.WindowMinute)
	noMonth  = none(coinpulse.WindowMonth)
)

func admitted(windows ...coinpulse.WindowState) coinpulse.Verdict {
	return coinpulse.Verdict{Allowed: true, Windows: [3]coinpulse.WindowState(windows)}
}

func refused(w coinpulse.Window, retry time.Duration, windows ...coinpulse.WindowState) coinpulse.Verdict {
	return coinpulse.Verdict{Exceeded: w, RetryAfter: retry, Windows: [3]coinpulse.WindowState(windows)}
}

// want compares got with want; a want without Now expects the env's
// clock, the instant every check decides at.
func (e *env) want(what string, got, want coinpulse.Verdict) {
	e.t.Helper()
	if want.Now.IsZero() {
		want.Now = e.clock.Now()
	}
	if d := cmp.Diff(want, got); d != "" {
		e.t.Errorf("%s: verdict (-want +got):\n%s", what, d)
	}
}

// t0 is the start of the clock cases: whole milliseconds, so that the
// nanosecond and microsecond stores agree.
var t0 = time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)

var (
	march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	april = time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	may   = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
)

// clockCases run on every store with a controlled clock.
var clockCases = []struct {
	name string
	seed func(account string, monthStart time.Time) (int64, error)
	run  func(e *env)
}{
	{name: "burst of L then refused", run: func(e *env) {
		l := coinpulse.Limits{PerSecond: 5}
		for i := range 5 {
			e.want("call", e.allow(l), admitted(
				ws(coinpulse.WindowSecond, 5, int64(4-i), t0.Add(time.Duration(i+1)*200*time.Millisecond)),
				noMinute, noMonth))
		}
		e.want("6th call", e.allow(l), refused(coinpulse.WindowSecond, 200*time.Millisecond,
			ws(coinpulse.WindowSecond, 5, 0, t0.Add(time.Second)), noMinute, noMonth))
	}},
	{name: "refill after T", run: func(e *env) {
		l := coinpulse.Limits{PerSecond: 5}
		for range 5 {
			e.allow(l)
		}
		e.clock.Advance(199 * time.Millisecond)
		e.want("199ms later", e.allow(l), refused(coinpulse.WindowSecond, time.Millisecond,
			ws(coinpulse.WindowSecond, 5, 0, t0.Add(time.Second)), noMinute, noMonth))
		e.clock.Advance(time.Millisecond)
		e.want("T later", e.allow(l), admitted(
			ws(coinpulse.WindowSecond, 5, 0, t0.Add(1200*time.Millisecond)), noMinute, noMonth))
		e.want("and again", e.allow(l), refused(coinpulse.WindowSecond, 200*time.Millisecond,
			ws(coinpulse.WindowSecond, 5, 0, t0.Add(1200*time.Millisecond)), noMinute, noMonth))
		e.clock.Advance(time.Second)
		now := t0.Add(1200 * time.Millisecond)
		e.want("idle until TAT", e.peek(l), admitted(
			ws(coinpulse.WindowSecond, 5, 5, now), noMinute, noMonth))
		for i := range 5 {
			if v := e.allow(l); !v.Allowed || v.Windows[0].Remaining != int64(4-i) {
				e.t.Fatalf("burst after refill, call %d: %+v", i+1, v)
			}
		}
		if v := e.allow(l); v.Allowed {
			e.t.Fatalf("6th call of the second burst admitted: %+v", v)
		}
	}},
	{name: "retry after rounds up to a millisecond", run: func(e *env) {
		l := coinpulse.Limits{PerSecond: 3} // T = 333.333… ms
		for i := range 3 {
			if v := e.allow(l); !v.Allowed || v.Windows[0].Remaining != int64(2-i) {
				e.t.Fatalf("call %d: %+v", i+1, v)
			}
		}
		v := e.allow(l)
		if v.Allowed || v.Exceeded != coinpulse.WindowSecond || v.RetryAfter != 334*time.Millisecond {
			e.t.Fatalf("4th call: %+v, want refused by second, retry after 334ms", v)
		}
		e.clock.Advance(333 * time.Millisecond)
		v = e.allow(l)
		if v.Allowed || v.RetryAfter != time.Millisecond {
			e.t.Fatalf("333ms later: %+v, want refused, retry after 1ms", v)
		}
		e.clock.Advance(time.Millisecond)
		if v := e.allow(l); !v.Allowed || v.Windows[0].Remaining != 0 {
			e.t.Fatalf("334ms later: %+v, want admitted, 0 remaining", v)
		}
	}},
	{name: "minute window", run: func(e *env) {
		l := coinpulse.Limits{PerMinute: 2}
		e.want("1st", e.allow(l), admitted(noSecond, ws(coinpulse.WindowMinute, 2, 1, t0.Add(30*time.Second)), noMonth))
		e.want("2nd", e.allow(l), admitted(noSecond, ws(coinpulse.WindowMinute, 2, 0, t0.Add(time.Minute)), noMonth))
		e.want("3rd", e.allow(l), refused(coinpulse.WindowMinute, 30*time.Second,
			noSecond, ws(coinpulse.WindowMinute, 2, 0, t0.Add(time.Minute)), noMonth))
		e.clock.Advance(30 * time.Second)
		e.want("30s later", e.allow(l), admitted(noSecond, ws(coinpulse.WindowMinute, 2, 0, t0.Add(90*time.Second)), noMonth))
	}},
	{name: "refusal by minute does not use up second", run: func(e *env) {
		l := coinpulse.Limits{PerSecond: 2, PerMinute: 3}
		e.want("1st", e.allow(l), admitted(
			ws(coinpulse.WindowSecond, 2, 1, t0.Add(500*time.Millisecond)),
			ws(coinpulse.WindowMinute, 3, 2, t0.Add(20*time.Second)), noMonth))
		e.allow(l)
		e.want("3rd, refused by second", e.allow(l), refused(coinpulse.WindowSecond, 500*time.Millisecond,
			ws(coinpulse.WindowSecond, 2, 0, t0.Add(time.Second)),
			ws(coinpulse.WindowMinute, 3, 1, t0.Add(40*time.Second)), noMonth))
		e.clock.Advance(time.Second)
		now := t0.Add(time.Second)
		e.want("1s later", e.allow(l), admitted(
			ws(coinpulse.WindowSecond, 2, 1, now.Add(500*time.Millisecond)),
			ws(coinpulse.WindowMinute, 3, 0, t0.Add(time.Minute)), noMonth))
		for _, what := range []string{"refused by minute", "again"} {
			e.want(what, e.allow(l), refused(coinpulse.WindowMinute, 19*time.Second,
				ws(coinpulse.WindowSecond, 2, 1, now.Add(500*time.Millisecond)),
				ws(coinpulse.WindowMinute, 3, 0, t0.Add(time.Minute)), noMonth))
		}
		e.want("peek", e.peek(l), refused(coinpulse.WindowMinute, 19*time.Second,
			ws(coinpulse.WindowSecond, 2, 1, now.Add(500*time.Millisecond)),
			ws(coinpulse.WindowMinute, 3, 0, t0.Add(time.Minute)), noMonth))
		// With a higher minute figure the second window still has its call.
		if v := e.allow(coinpulse.Limits{PerSecond: 2, PerMinute: 60}); !v.Allowed || v.Windows[0].Remaining != 0 {
			e.t.Fatalf("with room in the minute: %+v", v)
		}
	}},
	{name: "refusal by second does not use up minute", run: func(e *env) {
		l := coinpulse.Limits{PerSecond: 1, PerMinute: 10}
		e.want("1st", e.allow(l), admitted(
			ws(coinpulse.WindowSecond, 1, 0, t0.Add(time.Second)),
			ws(coinpulse.WindowMinute, 10, 9, t0.Add(6*time.Second)), noMonth))
		for _, what := range []string{"2nd", "3rd"} {
			e.want(what, e.allow(l), refused(coinpulse.WindowSecond, time.Second,
				ws(coinpulse.WindowSecond, 1, 0, t0.Add(time.Second)),
				ws(coinpulse.WindowMinute, 10, 9, t0.Add(6*time.Second)), noMonth))
		}
		// Nor does a refusal by the month.
		e.clock.Advance(time.Second)
		ml := coinpulse.Limits{PerSecond: 1, PerMinute: 10, Monthly: 1}
		if v := e.allow(ml); v.Allowed || v.Exceeded != coinpulse.WindowMonth ||
			v.Windows[0].Remaining != 1 || v.Windows[1].Remaining != 9 {
			e.t.Fatalf("refused by the month: %+v", v)
		}
		if v := e.allow(l); !v.Allowed || v.Windows[1].Remaining != 8 {
			e.t.Fatalf("after the month's refusal: %+v, want admitted with 8 left in the minute", v)
		}
	}},
	{name: "longest retry names the window", run: func(e *env) {
		end := april.Add(-30 * time.Second)
		e.clock.Set(end)
		l := coinpulse.Limits{PerSecond: 1, PerMinute: 1, Monthly: 1}
		e.allow(l)
		// second: 1s, month: 30s, minute: 60s.
		e.want("2nd", e.allow(l), refused(coinpulse.WindowMinute, time.Minute,
			ws(coinpulse.WindowSecond, 1, 0, end.Add(time.Second)),
			ws(coinpulse.WindowMinute, 1, 0, end.Add(time.Minute)),
			ws(coinpulse.WindowMonth, 1, 0, april)))
		e.clock.Advance(2 * time.Second)
		v := e.allow(coinpulse.Limits{PerSecond: 1, Monthly: 1})
		if v.Allowed || v.Exceeded != coinpulse.WindowMonth || v.RetryAfter != 28*time.Second {
			e.t.Fatalf("refused by the month alone: %+v", v)
		}
		e.clock.Advance(28 * time.Second) // April
		e.want("in April", e.allow(l), refused(coinpulse.WindowMinute, 30*time.Second,
			ws(coinpulse.WindowSecond, 1, 1, april),
			ws(coinpulse.WindowMinute, 1, 0, end.Add(time.Minute)),
			ws(coinpulse.WindowMonth, 1, 1, may)))
	}},
	{name: "month resets at 00:00 UTC on the 1st", seed: func(_ string, m time.Time) (int64, error) {
		if m.Equal(march) {
			return 1, nil
		}
		return 0, nil
	}, run: func(e *env) {
		start := april.Add(-2 * time.Microsecond)
		e.clock.Set(start)
		l := coinpulse.Limits{PerSecond: 1000, Monthly: 3}
		sec := func(n int64) coinpulse.WindowState {
			return ws(coinpulse.WindowSecond, 1000, 1000-n, e.clock.Now().Add(time.Duration(n)*time.Millisecond))
		}
		e.want("1st", e.allow(l), admitted(sec(1), noMinute, ws(coinpulse.WindowMonth, 3, 1, april)))
		e.want("2nd", e.allow(l), admitted(sec(2), noMinute, ws(coinpulse.WindowMonth, 3, 0, april)))
		e.want("3rd", e.allow(l), refused(coinpulse.WindowMonth, 2*time.Microsecond,
			sec(2), noMinute, ws(coinpulse.WindowMonth, 3, 0, april)))
		e.clock.Advance(time.Microsecond)
		if v := e.allow(l); v.Allowed || v.Exceeded != coinpulse.WindowMonth || v.RetryAfter != time.Microsecond {
			e.t.Fatalf("one microsecond before April: %+v", v)
		}
		e.clock.Advance(time.Microsecond)
		v := e.allow(l)
		if !v.Allowed || !cmp.Equal(v.Windows[2], ws(coinpulse.WindowMonth, 3, 2, may)) {
			e.t.Fatalf("at April 1st 00:00 UTC: %+v", v)
		}
		if got, want := e.seed.Calls(), []time.Time{march, april}; !cmp.Equal(got, want) {
			e.t.Errorf("seeded for %v, want %v", got, want)
		}
	}},
	{name: "seed is used once a month", seed: func(string, time.Time) (int64, error) { return 10, nil }, run: func(e *env) {
		l := coinpulse.Limits{Monthly: 20}
		e.want("peek", e.peek(l), admitted(noSecond, noMinute, ws(coinpulse.WindowMonth, 20, 10, april)))
		for i := range 3 {
			e.want("allow", e.allow(l), admitted(noSecond, noMinute, ws(coinpulse.WindowMonth, 20, int64(9-i), april)))
		}
		e.want("peek", e.peek(l), admitted(noSecond, noMinute, ws(coinpulse.WindowMonth, 20, 7, april)))
		if n := len(e.seed.Calls()); n != 1 {
			e.t.Errorf("%d Seed calls, want 1", n)
		}
		e.clock.Set(april)
		e.allow(l)
		e.allow(coinpulse.Limits{})
		e.want("April", e.peek(l), admitted(noSecond, noMinute, ws(coinpulse.WindowMonth, 20, 8, may)))
		if got, want := e.seed.Calls(), []time.Time{march, april}; !cmp.Equal(got, want) {
			e.t.Errorf("seeded for %v, want %v", got, want)
		}
	}},
	{name: "seed above the monthly figure", seed: func(string, time.Time) (int64, error) { return 7, nil }, run: func(e *env) {
		l := coinpulse.Limits{Monthly: 5}
		e.want("allow", e.allow(l), refused(coinpulse.WindowMonth, april.Sub(t0),
			noSecond, noMinute, ws(coinpulse.WindowMonth, 5, 0, april)))
		e.want("more allowance", e.allow(coinpulse.Limits{Monthly: 10}),
			admitted(noSecond, noMinute, ws(coinpulse.WindowMonth, 10, 2, april)))
	}},
	{name: "seed error", run: func(e *env) {
		boom := errors.New("boom")
		fail := true
		e.seed.mu.Lock()
		e.seed.fn = func(string, time.Time) (int64, error) {
			if fail {
				return 0, boom
			}
			return 4, nil
		}
		e.seed.mu.Unlock()
		l := coinpulse.Limits{PerSecond: 1, Monthly: 5}
		if _, err := e.lim.Allow(context.Background(), acct, l); !errors.Is(err, boom) {
			e.t.Fatalf("Allow: error %v, want %v", err, boom)
		}
		if _, err := e.lim.Peek(context.Background(), acct, l); !errors.Is(err, boom) {
			e.t.Fatalf("Peek: error %v, want %v", err, boom)
		}
		e.seed.mu.Lock()
		fail = false
		e.seed.mu.Unlock()
		e.want("after", e.allow(l), admitted(ws(coinpulse.WindowSecond, 1, 0, t0.Add(time.Second)),
			noMinute, ws(coinpulse.WindowMonth, 5, 0, april)))
	}},
	{name: "unlimited figures", run: func(e *env) {
		for _, l := range []coinpulse.Limits{{}, {PerSecond: coinpulse.Unlimited, PerMinute: coinpulse.Unlimited, Monthly: coinpulse.Unlimited}} {
			for range 100 {
				e.want("allow", e.allow(l), admitted(noSecond, noMinute, noMonth))
			}
			e.want("peek", e.peek(l), admitted(noSecond, noMinute, noMonth))
		}
		// The month still counted those calls.
		e.want("limited", e.peek(coinpulse.Limits{Monthly: 500}),
			admitted(noSecond, noMinute, ws(coinpulse.WindowMonth, 500, 300, april)))
	}},
	{name: "peek does not count", run: func(e *env) {
		l := coinpulse.Limits{PerSecond: 2, PerMinute: 60, Monthly: 5}
		for range 5 {
			e.want("peek", e.peek(l), admitted(ws(coinpulse.WindowSecond, 2, 2, t0),
				ws(coinpulse.WindowMinute, 60, 60, t0), ws(coinpulse.WindowMonth, 5, 5, april)))
		}
		e.allow(l)
		e.allow(l)
		for range 3 {
			e.want("peek when spent", e.peek(l), refused(coinpulse.WindowSecond, 500*time.Millisecond,
				ws(coinpulse.WindowSecond, 2, 0, t0.Add(time.Second)),
				ws(coinpulse.WindowMinute, 60, 58, t0.Add(2*time.Second)),
				ws(coinpulse.WindowMonth, 5, 3, april)))
		}
	}},
	{name: "refund gives one call back", run: func(e *env) {
		l := coinpulse.Limits{PerSecond: 2, PerMinute: 60, Monthly: 3}
		e.refund(l, coinpulse.Verdict{Now: e.clock.Now()}) // nothing counted yet: nothing to give back
		e.want("peek before", e.peek(l), admitted(ws(coinpulse.WindowSecond, 2, 2, t0),
			ws(coinpulse.WindowMinute, 60, 60, t0), ws(coinpulse.WindowMonth, 3, 3, april)))
		first := e.allow(l)
		second := e.allow(l)
		e.refund(l, second)
		third := e.allow(l)
		e.want("after two calls and a refund", third, admitted(
			ws(coinpulse.WindowSecond, 2, 0, t0.Add(time.Second)),
			ws(coinpulse.WindowMinute, 60, 58, t0.Add(2*time.Second)),
			ws(coinpulse.WindowMonth, 3, 1, april)))
		e.clock.Advance(time.Second)
		e.refund(l, third)
		e.refund(l, first)
		e.refund(l, first) // the month never goes below 0
		e.want("three refunds later", e.peek(l), admitted(ws(coinpulse.WindowSecond, 2, 2, t0.Add(time.Second)),
			ws(coinpulse.WindowMinute, 60, 60, t0.Add(time.Second)), ws(coinpulse.WindowMonth, 3, 3, april)))
	}},
	{name: "refund gives back only what is left of the call's slot", run: func(e *env) {
		l := coinpulse.Limits{PerSecond: 5, Monthly: 100}
		first := e.allow(l) // its slot: [t0, t0+200ms)
		e.clock.Advance(100 * time.Millisecond)
		second := e.allow(l) // its slot: [t0+200ms, t0+400ms)
		e.refund(l, first)   // half of its slot is behind
		e.want("half a slot back", e.peek(l), admitted(ws(coinpulse.WindowSecond, 5, 4, t0.Add(300*time.Millisecond)),
			noMinute, ws(coinpulse.WindowMonth, 100, 99, april)))
		// A call whose slot the window has moved past gets nothing back
		// there: after an idle gap and a burst of 5, a sixth call in the
		// same instant stays refused.
		e.clock.Advance(2 * time.Second)
		for range 5 {
			if v := e.allow(l); !v.Allowed {
				e.t.Fatalf("burst after an idle gap refused: %+v", v)
			}
		}
		e.refund(l, second)
		e.want("a sixth call after a late refund", e.allow(l), refused(coinpulse.WindowSecond, 200*time.Millisecond,
			ws(coinpulse.WindowSecond, 5, 0, t0.Add(3100*time.Millisecond)), noMinute,
			ws(coinpulse.WindowMonth, 100, 95, april)))
	}},
	{name: "refund after the month turned leaves the new month alone", run: func(e *env) {
		l := coinpulse.Limits{Monthly: 3}
		e.clock.Set(april.Add(-time.Millisecond))
		late := e.allow(l) // counted in March
		e.clock.Set(april.Add(50 * time.Millisecond))
		for range 3 {
			e.allow(l)
		}
		e.clock.Advance(50 * time.Millisecond)
		e.refund(l, late)
		now := april.Add(100 * time.Millisecond)
		e.want("a fourth April call", e.allow(l), refused(coinpulse.WindowMonth, may.Sub(now),
			noSecond, noMinute, ws(coinpulse.WindowMonth, 3, 0, may)))
	}},
	// A change of plan or tier mid-window: the calls made count as calls
	// of the new limits, and age at the pace they were charged at until
	// a call is admitted under the new ones, which re-expresses them.
	{name: "limits raised mid-window", run: func(e *env) {
		l := coinpulse.Limits{PerMinute: 60}
		for range 30 {
			e.allow(l)
		}
		raised := coinpulse.Limits{PerMinute: 600}
		e.want("a look after the raise", e.peek(raised), admitted(noSecond,
			ws(coinpulse.WindowMinute, 600, 570, t0.Add(30*time.Second)), noMonth))
		e.want("a call", e.allow(raised), admitted(noSecond,
			ws(coinpulse.WindowMinute, 600, 569, t0.Add(3100*time.Millisecond)), noMonth))
	}},
	{name: "limits lowered mid-window", run: func(e *env) {
		l := coinpulse.Limits{PerMinute: 600}
		for range 20 {
			e.allow(l)
		}
		lowered := coinpulse.Limits{PerMinute: 60}
		e.want("20 calls, then a look under 60 a minute", e.peek(lowered), admitted(noSecond,
			ws(coinpulse.WindowMinute, 60, 40, t0.Add(2*time.Second)), noMonth))
		for range 280 { // back to 600: 300 calls in all
			if v := e.allow(l); !v.Allowed {
				e.t.Fatalf("a call under 600 a minute refused: %+v", v)
			}
		}
		// 300 calls are more than 60 allow: refused until all but 59 have
		// aged, at the pace of 600 a minute they were charged at.
		e.want("a call under 60 a minute", e.allow(lowered), refused(coinpulse.WindowMinute, 24100*time.Millisecond, noSecond,
			ws(coinpulse.WindowMinute, 60, 0, t0.Add(30*time.Second)), noMonth))
		e.clock.Advance(24099 * time.Millisecond)
		e.want("1ms before", e.allow(lowered), refused(coinpulse.WindowMinute, time.Millisecond, noSecond,
			ws(coinpulse.WindowMinute, 60, 0, t0.Add(30*time.Second)), noMonth))
		e.clock.Advance(time.Millisecond)
		e.want("then", e.allow(lowered), admitted(noSecond,
			ws(coinpulse.WindowMinute, 60, 0, t0.Add(84100*time.Millisecond)), noMonth))
		e.want("and a call a second after", e.allow(lowered), refused(coinpulse.WindowMinute, time.Second, noSecond,
			ws(coinpulse.WindowMinute, 60, 0, t0.Add(84100*time.Millisecond)), noMonth))
	}},
	{name: "limits lowered and raised again forget no call", run: func(e *env) {
		l := coinpulse.Limits{PerMinute: 600}
		for range 600 {
			e.allow(l)
		}
		lowered := coinpulse.Limits{PerMinute: 60}
		if v := e.allow(lowered); v.Allowed {
			e.t.Fatalf("a call under 60 a minute after 600: %+v", v)
		}
		e.peek(lowered)
		e.want("600 a minute again", e.allow(l), refused(coinpulse.WindowMinute, 100*time.Millisecond, noSecond,
			ws(coinpulse.WindowMinute, 600, 0, t0.Add(time.Minute)), noMonth))
	}},
	{name: "refund after the limits changed gives back one call", run: func(e *env) {
		l := coinpulse.Limits{PerSecond: 5}
		v := e.allow(l)
		e.allow(l)
		raised := coinpulse.Limits{PerSecond: 50}
		e.refund(raised, v)
		e.want("raised: one of two calls given back", e.peek(raised), admitted(
			ws(coinpulse.WindowSecond, 50, 49, t0.Add(200*time.Millisecond)), noMinute, noMonth))
		e.clock.Advance(time.Second)
		e.allow(l)
		v = e.allow(l)
		lowered := coinpulse.Limits{PerSecond: 2}
		e.refund(lowered, v)
		e.want("lowered: one of two calls given back", e.peek(lowered), admitted(
			ws(coinpulse.WindowSecond, 2, 1, t0.Add(1200*time.Millisecond)), noMinute, noMonth))
	}},
	// A call that re-expressed the window (the first admitted under new
	// limits) moved every slot: a refund of a call admitted before it, or
	// of itself, cannot place its slot any more and gives nothing back.
	{name: "refund across a re-expression gives nothing back", run: func(e *env) {
		l := coinpulse.Limits{PerMinute: 2}
		e.allow(l)
		b := e.allow(l)
		raised := coinpulse.Limits{PerMinute: 120}
		c := e.allow(raised) // re-expresses the two calls: 1 s of backlog
		e.clock.Advance(2 * time.Second)
		for i := range 120 {
			if v := e.allow(raised); !v.Allowed {
				e.t.Fatalf("call %d of a whole window refused: %+v", i+1, v)
			}
		}
		e.refund(raised, b)
		e.refund(raised, c)
		now := t0.Add(2 * time.Second)
		e.want("a 121st call in the same instant", e.allow(raised), refused(coinpulse.WindowMinute, 500*time.Millisecond, noSecond,
			ws(coinpulse.WindowMinute, 120, 0, now.Add(time.Minute)), noMonth))
	}},
}

func TestLimiterClock(t *testing.T) {
	for _, s := range stores() {
		t.Run(s.name, func(t *testing.T) {
			for _, c := range clockCases {
				t.Run(c.name, func(t *testing.T) {
					clock := &fakeClock{t: t0}
					seed := &seeder{fn: c.seed}
					e := &env{t: t, clock: clock, seed: seed, lim: s.new(t, clock.Now, seed.Seed)}
					c.run(e)
				})
			}
		})
	}
}

// Exactness: N concurrent calls against K left admit exactly K.

const (
	exactK = 300
	exactN = 4 * exactK
)

// hammer makes n concurrent Allows for account, spread over the limiters,
// and returns how many were admitted.
func hammer(t *testing.T, lims []coinpulse.Limiter, account string, l coinpulse.Limits, n int) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		lim := lims[i%len(lims)]
		wg.Go(func() {
			<-start
			v, err := lim.Allow(context.Background(), account, l)
			if err != nil {
				errs <- err
				return
			}
			if v.Allowed {
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Allow: %v", err)
	}
	return int(admitted.Load())
}

// exactCases run on every store, with several limiters sharing it.
var exactCases = []struct {
	name   string
	frozen bool // whether the clock stands still
	l      coinpulse.Limits
	seed   int64
	spent  int // the window that runs out
}{
	{name: "monthly", l: coinpulse.Limits{PerSecond: 1_000_000, Monthly: exactK}, spent: 2},
	{name: "monthly after seed", l: coinpulse.Limits{PerSecond: 1_000_000, PerMinute: 60_000_000, Monthly: 1000 + exactK}, seed: 1000, spent: 2},
	{name: "second, clock frozen", frozen: true, l: coinpulse.Limits{PerSecond: exactK}, spent: 0},
	{name: "minute, clock frozen", frozen: true, l: coinpulse.Limits{PerSecond: 100_000, PerMinute: exactK, Monthly: 1_000_000}, spent: 1},
}

func TestLimiterExact(t *testing.T) {
	for _, s := range stores() {
		t.Run(s.name, func(t *testing.T) {
			for _, c := range exactCases {
				t.Run(c.name, func(t *testing.T) {
					clock := coinpulse.Clock(time.Now)
					if c.frozen {
						clock = (&fakeClock{t: time.Now().UTC().Truncate(time.Millisecond)}).Now
					}
					var seeds atomic.Int64
					seed := func(ctx context.Context, account string, monthStart time.Time) (int64, error) {
						seeds.Add(1)
						time.Sleep(10 * time.Millisecond) // let the calls pile up
						return c.seed, nil
					}
					// Memory is exact within one limiter; Redis across
					// limiters with their own connection pools.
					lims := []coinpulse.Limiter{s.new(t, clock, seed)}
					if s.name == "redis" {
						lims = append(lims, s.new(t, clock, seed)) // same prefix, another pool
					}
					if got := hammer(t, lims, acct, c.l, exactN); got != exactK {
						t.Errorf("%d of %d concurrent calls admitted, want %d", got, exactN, exactK)
					}
					v, err := lims[0].Peek(context.Background(), acct, c.l)
					if err != nil {
						t.Fatal(err)
					}
					if spent := v.Windows[c.spent]; v.Allowed || v.Exceeded != spent.Window || spent.Remaining != 0 {
						t.Errorf("after: %+v, want the %s spent", v, spent.Window)
					}
					// One Seed per limiter (per process).
					if n := seeds.Load(); n < 1 || n > int64(len(lims)) {
						t.Errorf("%d Seed calls, want 1 to %d", n, len(lims))
					}
				})
			}
		})
	}
}

// Random sequences of checks, looks, refunds and clock steps, with limits
// that change between calls, get the same verdicts from both stores (to
// their time units: a nanosecond against a microsecond, which a
// re-expression can scale up to a few milliseconds), and every refused
// call's RetryAfter is honest: the call is admitted once it has passed.
func TestStoresAgreeUnderChangingLimits(t *testing.T) {
	near := cmp.Options{
		cmp.Comparer(func(x, y time.Duration) bool { return (x - y).Abs() < 50*time.Millisecond }),
		cmp.Comparer(func(x, y time.Time) bool { return x.Sub(y).Abs() < 50*time.Millisecond }),
	}
	perSecond := []int{0, 1, 2, 5, 10, 50, 100}
	perMinute := []int{0, 1, 3, 6, 60, 120, 600}
	ctx := context.Background()
	for seed := range int64(40) {
		rng := rand.New(rand.NewPCG(uint64(seed), 0))
		clock := &fakeClock{t: t0}
		ss := stores()
		mem, red := ss[0].new(t, clock.Now, nil), ss[1].new(t, clock.Now, nil)
		account := fmt.Sprintf("agree-%d", seed)
		var admitted []coinpulse.Admission
		for step := range 200 {
			l := coinpulse.Limits{PerSecond: perSecond[rng.IntN(len(perSecond))], PerMinute: perMinute[rng.IntN(len(perMinute))]}
			switch op := rng.IntN(10); {
			case op < 5:
				a, err := mem.Allow(ctx, account, l)
				if err != nil {
					t.Fatal(err)
				}
				b, err := red.Allow(ctx, account, l)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(a, b, near); d != "" {
					t.Fatalf("seed %d step %d: Allow %+v, memory against Redis (-+):\n%s", seed, step, l, d)
				}
				for _, w := range a.Windows {
					if w.Remaining > w.Limit {
						t.Fatalf("seed %d step %d: %+v left above the limit", seed, step, w)
					}
				}
				if a.Allowed {
					admitted = append(admitted, a.Admission())
					continue
				}
				// Honest RetryAfter, on both stores (each rounds its own
				// up to a millisecond): admitted once it has passed.
				wait := max(a.RetryAfter, b.RetryAfter)
				clock.Advance(wait)
				for _, lim := range []coinpulse.Limiter{mem, red} {
					if v, err := lim.Peek(ctx, account, l); err != nil || !v.Allowed {
						t.Fatalf("seed %d step %d: %+v still refused after RetryAfter %s: %+v, %v", seed, step, l, wait, v, err)
					}
				}
			case op < 6:
				a, _ := mem.Peek(ctx, account, l)
				b, err := red.Peek(ctx, account, l)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(a, b, near); d != "" {
					t.Fatalf("seed %d step %d: Peek %+v, memory against Redis (-+):\n%s", seed, step, l, d)
				}
			case op < 7 && len(admitted) > 0:
				i := rng.IntN(len(admitted))
				for _, lim := range []coinpulse.Limiter{mem, red} {
					if err := lim.Refund(ctx, account, l, admitted[i]); err != nil {
						t.Fatal(err)
					}
				}
				admitted = append(admitted[:i], admitted[i+1:]...)
			default:
				clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
			}
		}
	}
}
