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

// KeyUsage is one key's call count.
type KeyUsage struct {
	KeyID    int64
	Calls    int64
	LastCall time.Time
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
	// Keys are per-key totals of all metered calls, by key id.
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
	// MonthCalls returns the user's counted calls since monthStart.
	MonthCalls(ctx context.Context, userID int64, monthStart time.Time) (int64, error)
	// Usage returns the user's usage as of now.
	Usage(ctx context.Context, userID int64, now time.Time) (*Usage, error)
}
