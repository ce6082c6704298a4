package sqlite

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"coinpulse"
)

// benchCalls returns n calls spread over users (whose ids are userIDs),
// two keys each, over the day before t0, with log-spread durations.
func benchCalls(userIDs []int64, n int, t0 time.Time) []coinpulse.Call {
	calls := make([]coinpulse.Call, n)
	for i := range calls {
		u := userIDs[i%len(userIDs)]
		calls[i] = coinpulse.Call{
			UserID:    u,
			KeyID:     u*10 + int64(i%2),
			Mode:      coinpulse.ModeLive,
			Time:      t0.Add(-time.Duration(i) * 50 * time.Millisecond),
			Method:    "GET",
			Route:     "/api/v1/coins/{idOrSymbol}",
			Status:    200,
			Duration:  time.Duration(100+(i*7919)%50000) * time.Microsecond,
			RequestID: fmt.Sprintf("req-%016x", i),
			Counted:   i%10 != 0,
		}
	}
	return calls
}

// BenchmarkRecordCalls1000 measures a metering batch of 1,000 calls, in
// the steady state (every user already has 50 recent calls to prune),
// from one user, 100 users and 1,000 users.
func BenchmarkRecordCalls1000(b *testing.B) {
	for _, users := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("users=%d", users), func(b *testing.B) {
			ctx := b.Context()
			db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ids := make([]int64, users)
			for i := range ids {
				u := &coinpulse.User{Email: fmt.Sprintf("user%d@example.com", i)}
				if err := db.CreateUser(ctx, u); err != nil {
					b.Fatal(err)
				}
				ids[i] = u.ID
			}
			t0 := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
			calls := benchCalls(ids, 1000, t0)
			if err := db.RecordCalls(ctx, calls); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := db.RecordCalls(ctx, calls); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}

// BenchmarkUsage measures reading a busy user's usage: 50 recent calls,
// two keys, 400 days.
func BenchmarkUsage(b *testing.B) {
	ctx := b.Context()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	u := &coinpulse.User{Email: "busy@example.com"}
	if err := db.CreateUser(ctx, u); err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	for d := range 400 {
		if err := db.RecordCalls(ctx, benchCalls([]int64{u.ID}, 60, t0.AddDate(0, 0, -d))); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := db.Usage(ctx, u.ID, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKeyUsageDailyRetention checks that key_usage_daily is pruned as
// usage_daily is: a batch drops its users' days (of every key of theirs)
// older than 400 days before its newest day.
func TestKeyUsageDailyRetention(t *testing.T) {
	ctx := t.Context()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	u := &coinpulse.User{Email: "retention@example.com"}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	rows := func() (keyDays, days int) {
		t.Helper()
		if err := db.db.QueryRowContext(ctx, `SELECT count(*) FROM key_usage_daily WHERE user_id = ?`, u.ID).Scan(&keyDays); err != nil {
			t.Fatal(err)
		}
		if err := db.db.QueryRowContext(ctx, `SELECT count(*) FROM usage_daily WHERE user_id = ?`, u.ID).Scan(&days); err != nil {
			t.Fatal(err)
		}
		return keyDays, days
	}
	// Two keys on the oldest day, one on the next.
	old := benchCalls([]int64{u.ID}, 2, t0.AddDate(0, 0, -400))
	kept := benchCalls([]int64{u.ID}, 1, t0.AddDate(0, 0, -399))
	if err := db.RecordCalls(ctx, append(old, kept...)); err != nil {
		t.Fatal(err)
	}
	if kd, d := rows(); kd != 3 || d != 2 {
		t.Fatalf("before pruning: %d key days, %d days; want 3, 2", kd, d)
	}
	// A call of one key 400 days later: both keys' oldest day goes.
	if err := db.RecordCalls(ctx, benchCalls([]int64{u.ID}, 1, t0)); err != nil {
		t.Fatal(err)
	}
	if kd, d := rows(); kd != 2 || d != 2 {
		t.Errorf("after pruning: %d key days, %d days; want 2, 2", kd, d)
	}
}
