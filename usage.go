package coinpulse

import (
	"context"
	"time"
)

// Call is one admitted API call, as metered.
type Call struct {
	UserID    int64
	KeyID     int64
	Mode      Mode
	Time      time.Time
	Method    string
	Route     string // the route pattern, e.g. "/api/v1/coins/{idOrSymbol}"
	Status    int
	Duration  time.Duration
	RequestID string
	// Counted calls count against the monthly allowance: live calls whose
	// status is below 500, to any route but /usage.
	Counted bool
}

// Admitted is a change to the calls the rate limiter has admitted to a
// user's plan in a calendar month: calls admitted (positive), or given
// back for failing with a 5xx (negative).
type Admitted struct {
	UserID int64
	Month  time.Time // the month's first instant, UTC
	Calls  int64
}

// KeyUsage is one key's metered calls: every call of the key, counted or
// not (live and sandbox, /usage and 5xx answers included).
type KeyUsage struct {
	KeyID int64
	// Calls is the key's all-time total, LastCall its latest call.
	Calls    int64
	LastCall time.Time
	// CallsToday and CallsMonth are the key's calls on the UTC day and in
	// the UTC calendar month of Usage's now.
	CallsToday, CallsMonth int64
	// ErrorsMonth are the month's calls answered with a status of 400 or
	// above (4xx and 5xx): see ErrorRate.
	ErrorsMonth int64
	// P50 and P95 are response-time percentiles of the month's calls (zero
	// when there were none), at the resolution of the daily histograms.
	P50, P95 time.Duration
}

// ErrorRate returns the share of the month's calls that were errors,
// ErrorsMonth / CallsMonth, from 0 to 1 (0 when there were no calls).
func (k KeyUsage) ErrorRate() float64 {
	if k.CallsMonth <= 0 {
		return 0
	}
	return float64(k.ErrorsMonth) / float64(k.CallsMonth)
}

// DayUsage is one UTC day's counted calls.
type DayUsage struct {
	Day   time.Time
	Calls int64
	// P50 and P95 are response-time percentiles of all the day's metered
	// calls, counted or not (zero when there were none).
	P50, P95 time.Duration
}

// Usage is what an account's metering keeps.
type Usage struct {
	// MonthCalls is this calendar month's counted calls.
	MonthCalls int64
	// Recent are the account's last 50 calls, newest first.
	Recent []Call
	// Keys are per-key figures of all metered calls, by key id: all-time
	// totals, and today's and this month's calls, errors and percentiles.
	Keys []KeyUsage
	// Daily are the last 30 UTC days' counted calls, oldest first, days
	// without calls included.
	Daily []DayUsage
	// P50, P95 and P99 are response-time percentiles of the last 30 days'
	// calls (zero when there are none).
	P50, P95, P99 time.Duration
}

// UsageStore keeps metered calls.
type UsageStore interface {
	// RecordCalls stores a batch of calls in one transaction.
	RecordCalls(ctx context.Context, calls []Call) error
	// MonthCalls returns the user's counted calls in the calendar month
	// starting at monthStart.
	MonthCalls(ctx context.Context, userID int64, monthStart time.Time) (int64, error)
	// AddAdmitted adds each change to its user's month of admitted calls,
	// in one transaction. Changes of users that do not exist are left
	// out. Each user of the changes keeps two months: those before the
	// one preceding the newest month of the user's changes are removed.
	AddAdmitted(ctx context.Context, changes []Admitted) error
	// MonthAdmitted returns the user's admitted calls in the calendar
	// month starting at monthStart: the sum of the changes added, plus
	// the month's calls MonthCalls counted when its first change was
	// added (those of a month begun before the meters counted
	// admissions; none otherwise, since the meters add a call's
	// admission before they meter the call), never below 0. Calls that
	// meters of a build that does not count admissions meter after that
	// are in neither. The meters add a call when it is admitted, before
	// it is answered and metered, so it counts calls MonthCalls does not
	// yet.
	MonthAdmitted(ctx context.Context, userID int64, monthStart time.Time) (int64, error)
	// MarkMonth records that the rate limiter has seeded the user's
	// calendar month starting at monthStart, and reports whether it had
	// been recorded before: a month seeded again (Redis lost its count)
	// may have calls the meters have not written yet, even when
	// MonthCalls says none. Marks of the user's months before the
	// previous one are removed.
	MarkMonth(ctx context.Context, userID int64, monthStart time.Time) (before bool, err error)
	// Usage returns the user's usage as of now, read in one snapshot: no
	// batch of RecordCalls counts in some of its figures and not others.
	Usage(ctx context.Context, userID int64, now time.Time) (*Usage, error)
}
