package notify

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func fixed(r float64) func() float64 { return func() float64 { return r } }

func TestNextAttemptSchedule(t *testing.T) {
	want := []time.Duration{
		5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 16 * time.Hour,
	}
	for i, d := range want {
		attempts := i + 1
		// rnd 0.5 is the nominal delay, 0 the shortest, just under 1 the longest.
		for _, c := range []struct {
			r      float64
			lo, hi time.Duration
		}{
			{0.5, d, d},
			{0, d * 8 / 10, d * 8 / 10},
			{math.Nextafter(1, 0), d * 12 / 10, d * 12 / 10},
			{0.25, d * 9 / 10, d * 9 / 10},
		} {
			next, giveUp := NextAttempt(attempts, t0, fixed(c.r))
			if giveUp {
				t.Fatalf("NextAttempt(%d) gave up", attempts)
			}
			if got := next.Sub(t0); got < c.lo || got > c.hi {
				t.Errorf("NextAttempt(%d, rnd=%v) = now+%v, want now+%v..%v", attempts, c.r, got, c.lo, c.hi)
			}
		}
	}
	for _, attempts := range []int{MaxAttempts, MaxAttempts + 1, 1000} {
		if next, giveUp := NextAttempt(attempts, t0, fixed(0.5)); !giveUp || !next.IsZero() {
			t.Errorf("NextAttempt(%d) = %v, %v; want give up", attempts, next, giveUp)
		}
	}
	// Fewer than one attempt is taken as one.
	for _, attempts := range []int{0, -1} {
		if next, giveUp := NextAttempt(attempts, t0, fixed(0.5)); giveUp || next.Sub(t0) != 5*time.Second {
			t.Errorf("NextAttempt(%d) = now+%v, %v; want now+5s", attempts, next.Sub(t0), giveUp)
		}
	}
	// The whole schedule: 31 h 42 min 35 s nominal, about 1.3 days.
	if got, want := nominalSpan(MaxAttempts), 31*time.Hour+42*time.Minute+35*time.Second; got != want {
		t.Errorf("nominal span = %v, want %v", got, want)
	}
	if got := nominalSpan(1); got != 0 {
		t.Errorf("nominalSpan(1) = %v", got)
	}
	// With the extreme jitter the whole schedule stays within ±20 %.
	var lo, hi time.Duration
	for a := 1; a < MaxAttempts; a++ {
		n, _ := NextAttempt(a, t0, fixed(0))
		lo += n.Sub(t0)
		n, _ = NextAttempt(a, t0, fixed(math.Nextafter(1, 0)))
		hi += n.Sub(t0)
	}
	if span := nominalSpan(MaxAttempts); lo != span*8/10 || hi != span*12/10 {
		t.Errorf("total between %v and %v, want %v and %v", lo, hi, span*8/10, span*12/10)
	}
}

func TestNextAttemptJitterBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for a := 1; a < MaxAttempts; a++ {
		d := retryDelays[a-1]
		lo, hi := time.Duration(float64(d)*(1-Jitter)), time.Duration(float64(d)*(1+Jitter))
		seen := map[time.Duration]bool{}
		for range 2000 {
			next, giveUp := NextAttempt(a, t0, rng.Float64)
			got := next.Sub(t0)
			if giveUp || got < lo || got > hi {
				t.Fatalf("NextAttempt(%d) = now+%v (give up %v), want within %v..%v", a, got, giveUp, lo, hi)
			}
			seen[got] = true
		}
		if len(seen) < 100 {
			t.Errorf("NextAttempt(%d): only %d distinct delays in 2000 draws", a, len(seen))
		}
	}
	// The default source (nil) and out-of-range values stay within bounds.
	for _, rnd := range []func() float64{nil, fixed(-1), fixed(2), fixed(math.NaN()), fixed(math.Inf(1))} {
		for a := 1; a < MaxAttempts; a++ {
			d := retryDelays[a-1]
			next, _ := NextAttempt(a, t0, rnd)
			if got := next.Sub(t0); got < d*8/10 || got > d*12/10 {
				t.Errorf("NextAttempt(%d) = now+%v, want within ±20 %% of %v", a, got, d)
			}
		}
	}
}

func TestApprox(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "1 second"},
		{35 * time.Second, "35 seconds"},
		{155 * time.Second, "3 minutes"},
		{42*time.Minute + 35*time.Second, "43 minutes"},
		{31*time.Hour + 42*time.Minute + 35*time.Second, "32 hours"},
		{100 * time.Hour, "4 days"},
	} {
		if got := approx(tt.d); got != tt.want {
			t.Errorf("approx(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
