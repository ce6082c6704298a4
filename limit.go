package coinpulse

import (
	"context"
	"strconv"
	"time"
)

// Window names a rate-limit window.
type Window string

// The windows an account is limited by: two rolling ones and the calendar
// month (UTC, from 00:00 on the 1st).
const (
	WindowSecond Window = "second"
	WindowMinute Window = "minute"
	WindowMonth  Window = "month"
)

// Limits are the allowances a check is made against. A zero or Unlimited
// figure does not limit.
type Limits struct {
	PerSecond int
	PerMinute int
	Monthly   int64
}

// WindowState is one window after a check.
type WindowState struct {
	Window Window
	// Limit is the window's allowance; Unlimited when it does not limit.
	Limit int64
	// Remaining is what is left of it right after the check.
	Remaining int64
	// Reset is when the window is whole again: for the rolling windows
	// when the full burst is available, for the month the next 1st 00:00
	// UTC.
	Reset time.Time
}

// Verdict is the answer of a check.
type Verdict struct {
	Allowed bool
	// Exceeded names the window that refused; RetryAfter is when the call
	// would be admitted.
	Exceeded   Window
	RetryAfter time.Duration
	// Windows are second, minute and month, in that order.
	Windows [3]WindowState
	// Now is when the limiter decided, on the clock it decided by (the
	// Redis server's for the Redis store): the Windows' Reset and
	// RetryAfter are relative to it, not to the caller's clock. Zero when
	// the limiter does not say.
	Now time.Time
}

// LiveAccount names to the Limiter the account whose allowance a user's
// live calls draw on.
func LiveAccount(userID int64) string { return "u" + strconv.FormatInt(userID, 10) }

// Limiter checks calls against an account's limits. Implementations are
// exact under concurrency: with K calls left in a window, N concurrent
// Allows admit exactly min(N, K), also across processes that share the
// limiter's store.
type Limiter interface {
	// Allow counts one call for account if every window admits it, and
	// nothing if one does not.
	Allow(ctx context.Context, account string, l Limits) (Verdict, error)
	// Peek reports the windows without counting.
	Peek(ctx context.Context, account string, l Limits) (Verdict, error)
	// Refund gives back a call that Allow admitted, described by a, for
	// a call that then failed on the server's side (a 5xx does not count):
	// in each rolling window the part of the call's slot that is still
	// ahead at the refund (nothing once the window has moved past it), so
	// that no window admits more than its limit; and the call to the
	// month it was counted in (a month begun since gets nothing).
	Refund(ctx context.Context, account string, l Limits, a Admission) error
}

// Admission is what Refund needs to know of an admitted call.
type Admission struct {
	// At is when the call was admitted, on the limiter's clock
	// (Verdict.Now); its month is the month the call counted in.
	At time.Time
	// Second and Minute are the rolling windows' Reset right after the
	// call: each is the end of the call's slot in its window (zero when
	// the window does not limit).
	Second, Minute time.Time
}

// Admission describes the call v admitted, for Refund.
func (v *Verdict) Admission() Admission {
	return Admission{At: v.Now, Second: v.Windows[0].Reset, Minute: v.Windows[1].Reset}
}

// Slots caps what an account holds open at once: its WebSocket
// connections, which the limits bound in how fast they open but not in
// how many stay open. An in-process Slots counts one node's; a shared one
// (ratelimit.RedisSlots) counts every node's.
type Slots interface {
	// Take takes one of the account's slots if it holds fewer than max
	// (negative: no cap), and returns ok false, taking nothing, if it
	// holds max. release gives the slot back; it may be called more than
	// once. The error is the store's: nothing is held (a shared store
	// gives back what a failed take may have taken).
	Take(ctx context.Context, account int64, max int) (release func(), ok bool, err error)
}

// MonthStart returns the start of t's calendar month in UTC.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}
