package ratelimit

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"time"

	"coinpulse"
)

// Seed returns the number of calls account has made in the month of
// monthStart (the first instant of a calendar month, UTC), as the main
// database counts them. The limiters call it once per account and month,
// when they have no state for that month yet.
type Seed func(ctx context.Context, account string, monthStart time.Time) (int64, error)

// Seen records, in the main database, that account's month starting at
// monthStart has been seeded, and reports whether it had been before. The
// Redis limiter asks it when Seed says a month has no call yet: a month
// seeded before has had calls the meters may not have written (see
// WithSeen).
type Seen func(ctx context.Context, account string, monthStart time.Time) (before bool, err error)

var (
	_ coinpulse.Limiter = (*Memory)(nil)
	_ coinpulse.Limiter = (*Redis)(nil)
)

// errSeedPanicked stands for the result of a Seed call that panicked, so
// that nothing is installed from it.
var errSeedPanicked = errors.New("ratelimit: Seed panicked")

// The rolling windows, in nanoseconds.
const (
	secondNS = int64(time.Second)
	minuteNS = int64(time.Minute)
	msNS     = int64(time.Millisecond)
)

// rate is one rolling window's GCRA parameters, in nanoseconds. limit 0
// means the window does not limit.
type rate struct {
	limit int64 // L
	t     int64 // emission interval T
	tau   int64 // burst tolerance τ = (L−1)·T
}

// newRate returns the parameters for limit calls per window, with T rounded
// down to a multiple of unit (and at least one unit). The window is taken
// as L·T rather than W, so that a burst is exactly L calls.
func newRate(limit, window, unit int64) rate {
	if limit <= 0 {
		return rate{}
	}
	t := window / unit / limit
	if t < 1 {
		t = 1
	}
	t *= unit
	return rate{limit: limit, t: t, tau: (limit - 1) * t}
}

// A window's state is its TAT and the emission interval its calls were
// charged at, its unit: T, unless the limits changed since (a plan reload,
// a tier change), and 0 when not known (no state yet, or a Redis key of a
// version that did not keep it), which stands for T. A backlog b = TAT −
// now stands for b/unit calls, which count against the limits in force as
// calls, and age out at the pace they were charged at; the first call
// admitted under the new limits re-expresses them in T (see next). So no
// sequence of changes forgets or adds a call, and after a lowering a
// window holding more calls than the new limit allows is refused until
// enough of them have aged out.

// unit is the interval the window's calls were charged at.
func (r rate) unit(from int64) int64 {
	if from > 0 {
		return from
	}
	return r.t
}

// threshold is the largest backlog, in the unit from, at which a call is
// admitted: L − 1 calls (τ when from is T).
func (r rate) threshold(from int64) int64 {
	hi, lo := bits.Mul64(uint64(r.limit-1), uint64(r.unit(from)))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// check returns max(tat, now) and whether a call at now is admitted.
func (r rate) check(tat, now, from int64) (int64, bool) {
	if r.limit == 0 {
		return now, true
	}
	if tat < now {
		tat = now
	}
	return tat, tat-now <= r.threshold(from)
}

// next is the TAT after admitting a call at now to a window whose TAT,
// after check, is tat (>= now): the backlog re-expressed in T, rounded up
// (it is at most τ, having been admitted), plus T.
func (r rate) next(tat, now, from int64) int64 {
	b := tat - now
	if u := r.unit(from); u != r.t && b > 0 {
		hi, lo := bits.Mul64(uint64(b), uint64(r.t))
		q, rem := bits.Div64(hi, lo, uint64(u)) // b·T/u <= τ: no overflow
		if rem != 0 {
			q++
		}
		b = int64(q)
	}
	return now + b + r.t
}

// state describes the window whose TAT is tat (>= now): Remaining is L
// less the calls the backlog stands for (rounded up), Reset when the
// backlog has run out.
func (r rate) state(w coinpulse.Window, tat, now, from int64) coinpulse.WindowState {
	if r.limit == 0 {
		return unlimited(w)
	}
	if tat < now {
		tat = now
	}
	u := r.unit(from)
	calls := (tat - now + u - 1) / u
	rem := max(0, min(r.limit-calls, r.limit))
	return coinpulse.WindowState{Window: w, Limit: r.limit, Remaining: rem, Reset: time.Unix(0, tat).UTC()}
}

// held is what is left at now of the slot of a call whose TAT was end
// right after it was admitted: the call took [end−T, end) of the window's
// time, and the part before now has been used up (by the call, or by the
// idle time that a TAT behind now stands for). A refund gives back only
// this much, so it never frees a slot the window has moved past; under
// limits changed since, a slot of the unit the window's calls are charged
// at, from: one call. When the window's backlog was re-expressed after
// the call (moved), end is on another scale, which says nothing of where
// the slot is now: nothing is given back.
func (r rate) held(end time.Time, now, from int64, moved bool) int64 {
	if r.limit == 0 || end.IsZero() || moved {
		return 0
	}
	return max(0, min(r.unit(from), end.UnixNano()-now))
}

// retryAfter is how long until a call refused at now with TAT tat would be
// admitted, rounded up to a whole millisecond and at least one.
func (r rate) retryAfter(tat, now, from int64) time.Duration {
	d := tat - r.threshold(from) - now
	d = (d + msNS - 1) / msNS * msNS
	return time.Duration(max(d, msNS))
}

func unlimited(w coinpulse.Window) coinpulse.WindowState {
	return coinpulse.WindowState{Window: w, Limit: coinpulse.Unlimited, Remaining: coinpulse.Unlimited}
}

// result is what a check found, the same for both stores; times are in
// nanoseconds since the epoch.
type result struct {
	now      int64
	sec, min rate
	// secTAT and minTAT are the windows' TATs after the check (>= now),
	// in the units secFrom and minFrom (see rate.unit).
	secTAT, minTAT   int64
	secFrom, minFrom int64
	monthly          int64 // <= 0: does not limit
	count            int64 // the month's count after the check
	monthEnd         int64 // first instant of the next month
	secOK, minOK     bool  // whether each window admits the call
	monthOK          bool
	allowed          bool
}

// verdict builds the Verdict of r.
func (r *result) verdict() coinpulse.Verdict {
	v := coinpulse.Verdict{Allowed: r.allowed, Now: time.Unix(0, r.now).UTC()}
	v.Windows[0] = r.sec.state(coinpulse.WindowSecond, r.secTAT, r.now, r.secFrom)
	v.Windows[1] = r.min.state(coinpulse.WindowMinute, r.minTAT, r.now, r.minFrom)
	if r.monthly <= 0 {
		v.Windows[2] = unlimited(coinpulse.WindowMonth)
	} else {
		v.Windows[2] = coinpulse.WindowState{
			Window:    coinpulse.WindowMonth,
			Limit:     r.monthly,
			Remaining: max(0, r.monthly-r.count),
			Reset:     time.Unix(0, r.monthEnd).UTC(),
		}
	}
	if r.allowed {
		return v
	}
	if !r.secOK {
		v.Exceeded, v.RetryAfter = coinpulse.WindowSecond, r.sec.retryAfter(r.secTAT, r.now, r.secFrom)
	}
	if !r.minOK {
		if d := r.min.retryAfter(r.minTAT, r.now, r.minFrom); d > v.RetryAfter {
			v.Exceeded, v.RetryAfter = coinpulse.WindowMinute, d
		}
	}
	if !r.monthOK {
		if d := time.Duration(r.monthEnd - r.now); d > v.RetryAfter {
			v.Exceeded, v.RetryAfter = coinpulse.WindowMonth, d
		}
	}
	return v
}

// monthBounds returns the start of t's month and of the next one, UTC.
func monthBounds(t time.Time) (start, end time.Time) {
	start = coinpulse.MonthStart(t)
	return start, start.AddDate(0, 1, 0)
}

// timeUnix returns the UTC time ns nanoseconds after the epoch.
func timeUnix(ns int64) time.Time { return time.Unix(0, ns).UTC() }
