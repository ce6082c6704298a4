package ratelimit

import (
	"context"
	"errors"
	"math/bits"
	"time"

	"coinpulse"
)

// Seed returns the number of calls account has made in the month of
// monthStart (the first instant of a calendar month, UTC), as the main
// database counts them. The limiters call it once per account and month,
// when they have no state for that month yet.
type Seed func(ctx context.Context, account string, monthStart time.Time) (int64, error)

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

// scale re-expresses b, the backlog (TAT − now) of a window whose TAT was
// built with emission interval from, in r's interval: b stands for b/from
// calls, which count against r as b/from of its own, rounded up so that
// none is lost, and at most a whole window of them (L·T: the window is
// then refused for one interval). A plan or tier change makes from and
// r.t differ; from 0 (not known) leaves b as it is.
func (r rate) scale(b, from int64) int64 {
	if r.limit == 0 || from <= 0 || from == r.t || b <= 0 {
		return b
	}
	full := r.limit * r.t // at most the window: no overflow
	hi, lo := bits.Mul64(uint64(b), uint64(r.t))
	if hi >= uint64(from) {
		return full // the quotient would not fit in 64 bits
	}
	q, rem := bits.Div64(hi, lo, uint64(from))
	if rem != 0 {
		q++
	}
	return int64(min(q, uint64(full)))
}

// check returns max(tat, now) and whether a call at now is admitted.
func (r rate) check(tat, now int64) (int64, bool) {
	if r.limit == 0 {
		return now, true
	}
	if tat < now {
		tat = now
	}
	return tat, tat-now <= r.tau
}

// state describes the window whose TAT is tat (>= now).
func (r rate) state(w coinpulse.Window, tat, now int64) coinpulse.WindowState {
	if r.limit == 0 {
		return unlimited(w)
	}
	if tat < now {
		tat = now
	}
	rem := (r.limit*r.t - (tat - now)) / r.t
	rem = max(0, min(rem, r.limit))
	return coinpulse.WindowState{Window: w, Limit: r.limit, Remaining: rem, Reset: time.Unix(0, tat).UTC()}
}

// held is what is left at now of the slot of a call whose TAT was end
// right after it was admitted: the call took [end−T, end) of the window's
// time, and the part before now has been used up (by the call, or by the
// idle time that a TAT behind now stands for). A refund gives back only
// this much, so it never frees a slot the window has moved past. from is
// the emission interval the window's TAT was built with (see scale): when
// the limits changed since, the slot's rest is re-expressed in r's terms,
// so that a refund gives back at most one call of the limits in force.
func (r rate) held(end time.Time, now, from int64) int64 {
	if r.limit == 0 || end.IsZero() {
		return 0
	}
	left := end.UnixNano() - now
	if from > 0 && from != r.t {
		left = r.scale(min(left, from), from)
	}
	return max(0, min(r.t, left))
}

// retryAfter is how long until a call refused at now with TAT tat would be
// admitted, rounded up to a whole millisecond and at least one.
func (r rate) retryAfter(tat, now int64) time.Duration {
	d := tat - r.tau - now
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
	// secTAT and minTAT are the windows' TATs after the check (>= now).
	secTAT, minTAT int64
	monthly        int64 // <= 0: does not limit
	count          int64 // the month's count after the check
	monthEnd       int64 // first instant of the next month
	secOK, minOK   bool  // whether each window admits the call
	monthOK        bool
	allowed        bool
}

// verdict builds the Verdict of r.
func (r *result) verdict() coinpulse.Verdict {
	v := coinpulse.Verdict{Allowed: r.allowed, Now: time.Unix(0, r.now).UTC()}
	v.Windows[0] = r.sec.state(coinpulse.WindowSecond, r.secTAT, r.now)
	v.Windows[1] = r.min.state(coinpulse.WindowMinute, r.minTAT, r.now)
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
		v.Exceeded, v.RetryAfter = coinpulse.WindowSecond, r.sec.retryAfter(r.secTAT, r.now)
	}
	if !r.minOK {
		if d := r.min.retryAfter(r.minTAT, r.now); d > v.RetryAfter {
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
