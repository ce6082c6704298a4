package storetest

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"coinpulse"
)

// Contract tests of coinpulse.UsageStore. Percentiles are checked against
// the resolution stores document (internal/meter/rollup): the reported
// value is at least the true one and at most √2 times it.

// usageNow is "now" for the usage tests: t0's day is the last of Daily.
var usageNow = t0

// call returns a live, counted call of key k at time at.
func call(k *coinpulse.APIKey, at time.Time, d time.Duration, requestID string) coinpulse.Call {
	return coinpulse.Call{
		UserID:    k.UserID,
		KeyID:     k.ID,
		Mode:      k.Mode,
		Time:      at,
		Method:    "GET",
		Route:     "/api/v1/coins/{idOrSymbol}",
		Status:    200,
		Duration:  d,
		RequestID: requestID,
		Counted:   true,
	}
}

// record stores calls or fails t.
func record(t *testing.T, s coinpulse.Store, calls ...coinpulse.Call) {
	t.Helper()
	if err := s.RecordCalls(t.Context(), calls); err != nil {
		t.Fatalf("RecordCalls(%d calls): %v", len(calls), err)
	}
}

// usage returns the user's usage as of now or fails t; it checks the
// shape every Usage has: 30 consecutive UTC days ending with now's,
// times in UTC.
func usage(t *testing.T, s coinpulse.Store, userID int64, now time.Time) *coinpulse.Usage {
	t.Helper()
	u, err := s.Usage(t.Context(), userID, now)
	if err != nil {
		t.Fatalf("Usage(%d): %v", userID, err)
	}
	if len(u.Daily) != 30 {
		t.Fatalf("Usage: %d days, want 30", len(u.Daily))
	}
	y, m, d := now.UTC().Date()
	today := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	for i, day := range u.Daily {
		if want := today.AddDate(0, 0, i-29); !day.Day.Equal(want) || day.Day.Location() != time.UTC {
			t.Errorf("Daily[%d].Day = %v, want %v (UTC)", i, day.Day, want)
		}
	}
	if len(u.Recent) > 50 {
		t.Errorf("Usage: %d recent calls, want at most 50", len(u.Recent))
	}
	for i := range u.Recent {
		wantUTC(t, "recent call", &u.Recent[i].Time)
	}
	for i := range u.Keys {
		wantUTC(t, "key usage", &u.Keys[i].LastCall)
	}
	return u
}

// monthCalls returns MonthCalls or fails t.
func monthCalls(t *testing.T, s coinpulse.Store, userID int64, monthStart time.Time) int64 {
	t.Helper()
	n, err := s.MonthCalls(t.Context(), userID, monthStart)
	if err != nil {
		t.Fatalf("MonthCalls: %v", err)
	}
	return n
}

// dailyCalls returns Daily's counts, oldest first.
func dailyCalls(u *coinpulse.Usage) []int64 {
	n := make([]int64, len(u.Daily))
	for i, d := range u.Daily {
		n[i] = d.Calls
	}
	return n
}

// ignoreKeyPercentiles leaves KeyUsage's percentiles out of a cmp.Diff:
// they are checked with wantPercentile.
var ignoreKeyPercentiles = cmpopts.IgnoreFields(coinpulse.KeyUsage{}, "P50", "P95")

// wantPercentile fails t unless got reports want at the documented
// resolution: want ≤ got ≤ √2 × want (plus a microsecond of rounding).
func wantPercentile(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	hi := time.Duration(float64(want)*math.Sqrt2) + time.Microsecond
	if got < want || got > hi {
		t.Errorf("%s = %v, want between %v and %v", what, got, want, hi)
	}
}

func testUsageRoundTrip(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-rt@example.com")
	k := newKey(t, s, u.ID, t0)
	zone := time.FixedZone("X", -5*3600)
	calls := []coinpulse.Call{
		{
			UserID: u.ID, KeyID: k.ID, Mode: coinpulse.ModeLive,
			Time:   t0.Add(-time.Hour).In(zone),
			Method: "GET", Route: "/api/v1/coins/{idOrSymbol}", Status: 200,
			Duration: 1234567 * time.Nanosecond, RequestID: "req-1", Counted: true,
		},
		{
			UserID: u.ID, KeyID: k.ID + 1000, Mode: coinpulse.ModeTest,
			Time:   t0.Add(-time.Minute),
			Method: "POST", Route: "/api/v1/portfolios", Status: 503,
			Duration: 2 * time.Second, RequestID: "req-2", Counted: false,
		},
		{
			UserID: u.ID, KeyID: k.ID, Mode: coinpulse.ModeLive,
			Time:   t0,
			Method: "GET", Route: "/api/v1/coins", Status: 304,
			Duration: 0, RequestID: "", Counted: true,
		},
	}
	record(t, s, calls...)
	got := usage(t, s, u.ID, usageNow)

	want := make([]coinpulse.Call, len(calls))
	for i, c := range calls {
		c.Time = us(c.Time)
		c.Duration = c.Duration.Truncate(time.Microsecond)
		want[len(calls)-1-i] = c
	}
	if diff := cmp.Diff(want, got.Recent); diff != "" {
		t.Errorf("Recent mismatch (-want +got):\n%s", diff)
	}
	wantKeys := []coinpulse.KeyUsage{
		{KeyID: k.ID, Calls: 2, LastCall: us(t0), CallsToday: 2, CallsMonth: 2},
		{KeyID: k.ID + 1000, Calls: 1, LastCall: us(t0.Add(-time.Minute)), CallsToday: 1, CallsMonth: 1, ErrorsMonth: 1},
	}
	if diff := cmp.Diff(wantKeys, got.Keys, ignoreKeyPercentiles); diff != "" {
		t.Errorf("Keys mismatch (-want +got):\n%s", diff)
	} else {
		// Nearest rank: k's median is its 0 s call (bucket 0's edge).
		wantPercentile(t, "key P50", got.Keys[0].P50, 50*time.Microsecond)
		wantPercentile(t, "key P95", got.Keys[0].P95, 1234*time.Microsecond)
		wantPercentile(t, "other key P50", got.Keys[1].P50, 2*time.Second)
	}
	if got.MonthCalls != 2 {
		t.Errorf("MonthCalls = %d, want 2", got.MonthCalls)
	}
	if n := got.Daily[29].Calls; n != 2 {
		t.Errorf("today's calls = %d, want 2", n)
	}
	// An empty batch is no error.
	if err := s.RecordCalls(t.Context(), nil); err != nil {
		t.Errorf("RecordCalls(nil): %v", err)
	}
}

func testUsageRecent(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-recent@example.com")
	k := newKey(t, s, u.ID, t0)
	// Three batches of 30: the 50 newest are the last recorded.
	var n int
	for range 3 {
		var batch []coinpulse.Call
		for range 30 {
			batch = append(batch, call(k, t0.Add(time.Duration(n)*time.Second-time.Hour), time.Millisecond, fmt.Sprintf("r-%d", n)))
			n++
		}
		record(t, s, batch...)
		got := usage(t, s, u.ID, usageNow)
		if len(got.Recent) != min(n, 50) {
			t.Fatalf("after %d calls: %d recent, want %d", n, len(got.Recent), min(n, 50))
		}
		for i, c := range got.Recent {
			if want := fmt.Sprintf("r-%d", n-1-i); c.RequestID != want {
				t.Fatalf("after %d calls: Recent[%d] = %s, want %s", n, i, c.RequestID, want)
			}
		}
	}
	// One batch of 120 for another user: its last 50, newest first.
	v := newUser(t, s, "usage-recent2@example.com")
	kv := newKey(t, s, v.ID, t0)
	var batch []coinpulse.Call
	for i := range 120 {
		batch = append(batch, call(kv, t0.Add(-time.Hour), time.Millisecond, fmt.Sprintf("v-%d", i)))
	}
	record(t, s, batch...)
	got := usage(t, s, v.ID, usageNow)
	if len(got.Recent) != 50 {
		t.Fatalf("%d recent, want 50", len(got.Recent))
	}
	for i, c := range got.Recent {
		if want := fmt.Sprintf("v-%d", 119-i); c.RequestID != want {
			t.Fatalf("Recent[%d] = %s, want %s", i, c.RequestID, want)
		}
	}
	// The first user's are untouched.
	if got := usage(t, s, u.ID, usageNow); len(got.Recent) != 50 || got.Recent[0].RequestID != "r-89" {
		t.Errorf("first user's recent calls changed")
	}
	if got.Keys[0].Calls != 120 || got.MonthCalls != 120 {
		t.Errorf("key calls, MonthCalls = %d, %d; want 120, 120", got.Keys[0].Calls, got.MonthCalls)
	}
}

func testUsageCounted(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-counted@example.com")
	k := newKey(t, s, u.ID, t0)
	var batch []coinpulse.Call
	for i := range 10 {
		c := call(k, t0.Add(-time.Duration(i)*time.Minute), 100*time.Millisecond, "")
		c.Counted = i%2 == 0 // 5 counted
		batch = append(batch, c)
	}
	yesterday := call(k, t0.Add(-24*time.Hour), 100*time.Millisecond, "")
	yesterday.Counted = false
	record(t, s, append(batch, yesterday)...)
	got := usage(t, s, u.ID, usageNow)
	if got.MonthCalls != 5 {
		t.Errorf("Usage MonthCalls = %d, want 5", got.MonthCalls)
	}
	if n := monthCalls(t, s, u.ID, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)); n != 5 {
		t.Errorf("MonthCalls = %d, want 5", n)
	}
	want := make([]int64, 30)
	want[29] = 5
	if diff := cmp.Diff(want, dailyCalls(got)); diff != "" {
		t.Errorf("Daily mismatch (-want +got):\n%s", diff)
	}
	if len(got.Keys) != 1 || got.Keys[0].Calls != 11 {
		t.Errorf("Keys = %+v, want one key with 11 calls (counted or not)", got.Keys)
	}
	if len(got.Recent) != 11 {
		t.Errorf("%d recent calls, want 11 (counted or not)", len(got.Recent))
	}
	// Percentiles take every call.
	wantPercentile(t, "P50", got.P50, 100*time.Millisecond)
}

func testUsageMonthBoundary(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-month@example.com")
	k := newKey(t, s, u.ID, t0)
	march := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	zone := time.FixedZone("Y", 3*3600) // 1 March 02:59 here is still February in UTC
	record(t, s,
		call(k, march.Add(-time.Microsecond), time.Millisecond, "feb-last"),
		call(k, march.Add(-time.Microsecond).In(zone), time.Millisecond, "feb-last-zoned"),
		call(k, march.Add(-48*time.Hour), time.Millisecond, "feb-27"),
		call(k, march, time.Millisecond, "mar-first"),
		call(k, march.Add(13*24*time.Hour), time.Millisecond, "mar-14"),
	)
	if n := monthCalls(t, s, u.ID, march); n != 2 {
		t.Errorf("MonthCalls(March) = %d, want 2", n)
	}
	if n := monthCalls(t, s, u.ID, march.AddDate(0, -1, 0)); n != 3 {
		t.Errorf("MonthCalls(February) = %d, want 3 (not March's)", n)
	}
	// A node whose clock is still in February sees February's calls.
	if got := usage(t, s, u.ID, march.Add(-time.Millisecond)); got.MonthCalls != 3 {
		t.Errorf("Usage(28 February) MonthCalls = %d, want 3 (not March's)", got.MonthCalls)
	}
	if n := monthCalls(t, s, u.ID, march.AddDate(0, 1, 0)); n != 0 {
		t.Errorf("MonthCalls(April) = %d, want 0", n)
	}
	got := usage(t, s, u.ID, usageNow) // 14 March: Daily starts 13 February
	if got.MonthCalls != 2 {
		t.Errorf("Usage MonthCalls = %d, want 2", got.MonthCalls)
	}
	want := make([]int64, 30)
	want[29-13] = 1 // 1 March
	want[29-14] = 2 // 28 February
	want[29-15] = 1 // 27 February
	want[29] = 1    // 14 March
	if diff := cmp.Diff(want, dailyCalls(got)); diff != "" {
		t.Errorf("Daily mismatch (-want +got):\n%s", diff)
	}
	// On 31 March the window starts 2 March, after the month's start: the
	// month still counts 1 March.
	end := time.Date(2025, 3, 31, 23, 59, 59, 0, time.UTC)
	if got := usage(t, s, u.ID, end); got.MonthCalls != 2 {
		t.Errorf("Usage(31 March) MonthCalls = %d, want 2", got.MonthCalls)
	}
}

// Admission counts add up per user and month, whatever their order; a
// month's first count starts from its calls metered before; a user keeps
// the two newest months of its changes.
func testUsageAdmitted(t *testing.T, s coinpulse.Store) {
	a := newUser(t, s, "admitted-a@example.com")
	b := newUser(t, s, "admitted-b@example.com")
	march := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	april, may := march.AddDate(0, 1, 0), march.AddDate(0, 2, 0)
	add := func(changes ...coinpulse.Admitted) {
		t.Helper()
		if err := s.AddAdmitted(t.Context(), changes); err != nil {
			t.Fatalf("AddAdmitted(%v): %v", changes, err)
		}
	}
	want := func(u *coinpulse.User, month time.Time, n int64) {
		t.Helper()
		got, err := s.MonthAdmitted(t.Context(), u.ID, month)
		if err != nil || got != n {
			t.Errorf("MonthAdmitted(%s, %s) = %d, %v; want %d", u.Email, month.Format("2006-01"), got, err, n)
		}
	}
	want(a, march, 0)
	add() // nothing to add
	// Changes add up, also within one batch, whatever instant of the
	// month they name; a user that does not exist is left out.
	add(coinpulse.Admitted{UserID: a.ID, Month: march, Calls: 3},
		coinpulse.Admitted{UserID: b.ID, Month: march.Add(40 * time.Hour), Calls: 5},
		coinpulse.Admitted{UserID: a.ID, Month: march, Calls: 2},
		coinpulse.Admitted{UserID: 1 << 40, Month: march, Calls: 7})
	want(a, march, 5)
	want(b, march, 5)
	add(coinpulse.Admitted{UserID: a.ID, Month: march, Calls: -1}, coinpulse.Admitted{UserID: a.ID, Month: april, Calls: 4})
	want(a, march, 4)
	want(a, april, 4)
	want(b, april, 0)
	// More given back than admitted reads as 0.
	add(coinpulse.Admitted{UserID: b.ID, Month: march, Calls: -9})
	want(b, march, 0)
	// A change of May removes a's months before April; b's stay.
	add(coinpulse.Admitted{UserID: a.ID, Month: may, Calls: 1})
	want(a, march, 0)
	want(a, april, 4)
	want(a, may, 1)
	add(coinpulse.Admitted{UserID: b.ID, Month: march, Calls: 10})
	want(b, march, 6) // the sum, 5 − 9 + 10

	// Concurrent batches over the same rows, in any order, lose nothing
	// and do not deadlock.
	c := newUser(t, s, "admitted-c@example.com")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			changes := []coinpulse.Admitted{{UserID: c.ID, Month: march, Calls: 1}, {UserID: a.ID, Month: may, Calls: 1}}
			if i%2 == 1 {
				changes[0], changes[1] = changes[1], changes[0]
			}
			for range 5 {
				if err := s.AddAdmitted(t.Context(), changes); err != nil {
					t.Errorf("AddAdmitted: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	want(c, march, 40)
	want(a, may, 41)

	// A month with calls metered before its first count (metered before
	// the meters counted admissions) starts from them; calls metered
	// after do not add to it, being counted when admitted.
	d := newUser(t, s, "admitted-d@example.com")
	k := newKey(t, s, d.ID, march)
	record(t, s, call(k, march.Add(time.Hour), 0, "d-1"), call(k, march.Add(30*24*time.Hour), 0, "d-2"),
		call(k, april, 0, "d-april")) // another month
	add(coinpulse.Admitted{UserID: d.ID, Month: march, Calls: 1})
	want(d, march, 3)
	record(t, s, call(k, march.Add(2*time.Hour), 0, "d-3"))
	add(coinpulse.Admitted{UserID: d.ID, Month: march, Calls: 1})
	want(d, march, 4)
}

// A month is marked once per user: the first MarkMonth says it was not
// before, every later one that it was, for that user and month only. A
// mark lives through the next month and goes in the one after.
func testUsageMarkMonth(t *testing.T, s coinpulse.Store) {
	a := newUser(t, s, "mark-a@example.com")
	b := newUser(t, s, "mark-b@example.com")
	march := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	mark := func(u *coinpulse.User, month time.Time, want bool) {
		t.Helper()
		before, err := s.MarkMonth(t.Context(), u.ID, month)
		if err != nil {
			t.Fatalf("MarkMonth(%s, %s): %v", u.Email, month.Format("2006-01"), err)
		}
		if before != want {
			t.Errorf("MarkMonth(%s, %s) = %v, want %v", u.Email, month.Format("2006-01"), before, want)
		}
	}
	mark(a, march, false)
	mark(a, march, true)
	mark(a, march, true)
	mark(b, march, false)                  // another user
	mark(a, march.AddDate(0, 1, 0), false) // another month; March's mark stays
	mark(a, march, true)
	mark(a, march.AddDate(0, 2, 0), false) // May: March's mark goes, April's stays
	mark(a, march.AddDate(0, 1, 0), true)
	mark(a, march, false)
	mark(b, march, true) // b's marks are b's

	// Concurrent marks of one month: exactly one finds none before it.
	c := newUser(t, s, "mark-c@example.com")
	var wg sync.WaitGroup
	var firsts, errs atomic.Int64
	for range 8 {
		wg.Go(func() {
			before, err := s.MarkMonth(t.Context(), c.ID, march)
			switch {
			case err != nil:
				errs.Add(1)
				t.Errorf("MarkMonth: %v", err)
			case !before:
				firsts.Add(1)
			}
		})
	}
	wg.Wait()
	if n := firsts.Load(); n != 1 && errs.Load() == 0 {
		t.Errorf("8 concurrent MarkMonths: %d found no mark before, want 1", n)
	}
}

func testUsageDaily(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-daily@example.com")
	k := newKey(t, s, u.ID, t0)
	day := func(back int) time.Time { return t0.AddDate(0, 0, -back) }
	var batch []coinpulse.Call
	add := func(back, n int, d time.Duration) {
		for range n {
			batch = append(batch, call(k, day(back), d, ""))
		}
	}
	add(0, 3, time.Millisecond)
	add(1, 1, time.Millisecond)
	add(10, 4, time.Millisecond)
	add(29, 2, time.Millisecond)
	add(30, 7, 10*time.Second) // outside the window, also for percentiles
	add(-1, 5, 10*time.Second) // tomorrow: not in Daily either
	record(t, s, batch...)
	got := usage(t, s, u.ID, usageNow)
	want := make([]int64, 30)
	want[29], want[28], want[19], want[0] = 3, 1, 4, 2
	if diff := cmp.Diff(want, dailyCalls(got)); diff != "" {
		t.Errorf("Daily mismatch (-want +got):\n%s", diff)
	}
	wantPercentile(t, "P99", got.P99, time.Millisecond)
	// Now at the very end of the day, and in another zone: the same days.
	y, m, d := t0.Date()
	late := time.Date(y, m, d, 23, 59, 59, 999999999, time.UTC).In(time.FixedZone("Z", 10*3600))
	if diff := cmp.Diff(want, dailyCalls(usage(t, s, u.ID, late))); diff != "" {
		t.Errorf("Daily at the end of the day mismatch (-want +got):\n%s", diff)
	}
	// A day later, everything shifts by one and the oldest day drops out.
	later := usage(t, s, u.ID, t0.AddDate(0, 0, 1))
	want = make([]int64, 30)
	want[29], want[28], want[27], want[18] = 5, 3, 1, 4
	if diff := cmp.Diff(want, dailyCalls(later)); diff != "" {
		t.Errorf("Daily a day later mismatch (-want +got):\n%s", diff)
	}
}

func testUsagePercentiles(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-pct@example.com")
	k := newKey(t, s, u.ID, t0)
	var batch []coinpulse.Call
	for i := range 100 {
		d := time.Millisecond
		if i%10 == 0 {
			d = 100 * time.Millisecond
		}
		// Spread over several days and two batches: the histogram merges.
		batch = append(batch, call(k, t0.AddDate(0, 0, -(i%5)), d, ""))
	}
	record(t, s, batch[:37]...)
	record(t, s, batch[37:]...)
	got := usage(t, s, u.ID, usageNow)
	wantPercentile(t, "P50", got.P50, time.Millisecond)
	wantPercentile(t, "P95", got.P95, 100*time.Millisecond)
	wantPercentile(t, "P99", got.P99, 100*time.Millisecond)

	// A single fast call.
	v := newUser(t, s, "usage-pct2@example.com")
	kv := newKey(t, s, v.ID, t0)
	record(t, s, call(kv, t0, 300*time.Microsecond, ""))
	got = usage(t, s, v.ID, usageNow)
	for _, p := range []time.Duration{got.P50, got.P95, got.P99} {
		wantPercentile(t, "percentile of one call", p, 300*time.Microsecond)
	}
}

func testUsageKeys(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-keys@example.com")
	a := newKey(t, s, u.ID, t0)
	b := newKey(t, s, u.ID, t0)
	newKey(t, s, u.ID, t0) // no calls: not listed
	var batch []coinpulse.Call
	for i := range 7 {
		batch = append(batch, call(a, t0.Add(-time.Duration(i)*time.Hour), time.Millisecond, ""))
	}
	for i := range 3 {
		batch = append(batch, call(b, t0.Add(-time.Duration(i+10)*time.Hour), time.Millisecond, ""))
	}
	record(t, s, batch...)
	// A later batch with earlier times: LastCall does not go back.
	record(t, s, call(a, t0.Add(-48*time.Hour), time.Millisecond, ""), call(b, t0.Add(time.Minute), time.Millisecond, ""))
	got := usage(t, s, u.ID, usageNow.Add(time.Hour))
	want := []coinpulse.KeyUsage{
		{KeyID: a.ID, Calls: 8, LastCall: us(t0), CallsToday: 7, CallsMonth: 8},
		{KeyID: b.ID, Calls: 4, LastCall: us(t0.Add(time.Minute)), CallsToday: 4, CallsMonth: 4},
	}
	if diff := cmp.Diff(want, got.Keys, ignoreKeyPercentiles); diff != "" {
		t.Errorf("Keys mismatch (-want +got):\n%s", diff)
	}
	for _, k := range got.Keys {
		wantPercentile(t, "key P50", k.P50, time.Millisecond)
		wantPercentile(t, "key P95", k.P95, time.Millisecond)
	}
}

// testUsageKeyDaily checks the per-key figures of today and this month:
// calls across day and month boundaries (in UTC, whatever the zones of the
// calls and of now), errors (status 400 and above) and percentiles.
func testUsageKeyDaily(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-keydaily@example.com")
	a := newKey(t, s, u.ID, t0)
	b := newKey(t, s, u.ID, t0)
	c := newKey(t, s, u.ID, t0) // calls last month only
	march := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	april := march.AddDate(0, 1, 0)
	today := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC) // t0's day
	east := time.FixedZone("E", 3*3600)                   // 28 February 23:59 UTC is 1 March here
	west := time.FixedZone("W", -5*3600)                  // 14 March 00:00 UTC is 13 March here
	var batch []coinpulse.Call
	add := func(k *coinpulse.APIKey, n int, at time.Time, d time.Duration, status func(i int) int) {
		for i := range n {
			cl := call(k, at, d, "")
			cl.Status = status(i)
			cl.Counted = i%3 != 0 // counted or not, every call is a key's
			if i%2 == 0 {
				cl.Mode = coinpulse.ModeTest
			}
			batch = append(batch, cl)
		}
	}
	ok := func(int) int { return 200 }
	// Last month, the last microsecond of it: 10 s, all 500s.
	add(a, 19, march.Add(-time.Microsecond), 10*time.Second, func(int) int { return 500 })
	add(a, 1, march.Add(-time.Microsecond).In(east), 10*time.Second, func(int) int { return 500 })
	add(c, 4, march.AddDate(0, 0, -10), time.Millisecond, ok)
	// This month: 100 calls of a, 10 of them 100 ms, 10 of them errors.
	add(a, 10, march, 100*time.Millisecond, ok)
	add(a, 30, today.Add(-time.Microsecond), time.Millisecond, func(i int) int { return []int{200, 404}[min(i/25, 1)] }) // 5 × 404
	add(a, 20, today.In(west), time.Millisecond, func(i int) int { return []int{500, 200}[min(i/3, 1)] })                // 3 × 500
	add(a, 40, t0, time.Millisecond, func(i int) int { return []int{429, 499, 200, 304, 399}[min(i, 4)] })               // 2 errors
	// b: 3 fast calls today.
	add(b, 3, t0.Add(-time.Hour), 300*time.Microsecond, ok)
	// Next month: 1 slow error.
	add(a, 1, april, 10*time.Second, func(int) int { return 503 })
	// In three batches, out of order: the days add up.
	record(t, s, batch[60:]...)
	record(t, s, batch[:24]...)
	record(t, s, batch[24:60]...)

	byKey := func(got *coinpulse.Usage) map[int64]coinpulse.KeyUsage {
		m := map[int64]coinpulse.KeyUsage{}
		for _, k := range got.Keys {
			m[k.KeyID] = k
		}
		return m
	}
	got := byKey(usage(t, s, u.ID, t0))
	want := map[int64]coinpulse.KeyUsage{
		a.ID: {KeyID: a.ID, Calls: 121, LastCall: us(april), CallsToday: 60, CallsMonth: 100, ErrorsMonth: 10},
		b.ID: {KeyID: b.ID, Calls: 3, LastCall: us(t0.Add(-time.Hour)), CallsToday: 3, CallsMonth: 3},
		c.ID: {KeyID: c.ID, Calls: 4, LastCall: us(march.AddDate(0, 0, -10))},
	}
	if diff := cmp.Diff(want, got, ignoreKeyPercentiles); diff != "" {
		t.Errorf("Keys as of 14 March mismatch (-want +got):\n%s", diff)
	}
	if r := got[a.ID].ErrorRate(); math.Abs(r-0.1) > 1e-12 {
		t.Errorf("a's ErrorRate = %v, want 0.1", r)
	}
	if r := got[b.ID].ErrorRate(); r != 0 {
		t.Errorf("b's ErrorRate = %v, want 0", r)
	}
	if r := got[c.ID].ErrorRate(); r != 0 {
		t.Errorf("c's ErrorRate (no calls this month) = %v, want 0", r)
	}
	// a: 90 calls of 1 ms, 10 of 100 ms (last month's and next month's
	// 10 s calls left out).
	wantPercentile(t, "a's P50", got[a.ID].P50, time.Millisecond)
	wantPercentile(t, "a's P95", got[a.ID].P95, 100*time.Millisecond)
	wantPercentile(t, "b's P50", got[b.ID].P50, 300*time.Microsecond)
	wantPercentile(t, "b's P95", got[b.ID].P95, 300*time.Microsecond)
	if got[c.ID].P50 != 0 || got[c.ID].P95 != 0 {
		t.Errorf("c's P50, P95 = %v, %v; want 0 (no calls this month)", got[c.ID].P50, got[c.ID].P95)
	}

	// At the very end of 14 March, seen from another zone: the same.
	late := today.Add(24*time.Hour - time.Nanosecond).In(east)
	if diff := cmp.Diff(want, byKey(usage(t, s, u.ID, late)), ignoreKeyPercentiles); diff != "" {
		t.Errorf("Keys at the end of 14 March mismatch (-want +got):\n%s", diff)
	}
	// At the start of the next day: nothing today, the same month.
	got = byKey(usage(t, s, u.ID, today.AddDate(0, 0, 1)))
	if got[a.ID].CallsToday != 0 || got[a.ID].CallsMonth != 100 || got[b.ID].CallsToday != 0 || got[b.ID].CallsMonth != 3 {
		t.Errorf("15 March: a today %d month %d, b today %d month %d; want 0, 100, 0, 3",
			got[a.ID].CallsToday, got[a.ID].CallsMonth, got[b.ID].CallsToday, got[b.ID].CallsMonth)
	}
	// At the last instant of February, in a zone where it is 1 March
	// already: February's figures.
	got = byKey(usage(t, s, u.ID, march.Add(-time.Nanosecond).In(east)))
	if k := got[a.ID]; k.CallsToday != 20 || k.CallsMonth != 20 || k.ErrorsMonth != 20 || k.ErrorRate() != 1 {
		t.Errorf("28 February: a = %+v, want 20 calls today and this month, all errors", k)
	} else {
		wantPercentile(t, "a's February P50", k.P50, 10*time.Second)
	}
	if k := got[c.ID]; k.CallsToday != 0 || k.CallsMonth != 4 || k.ErrorsMonth != 0 {
		t.Errorf("28 February: c = %+v, want 0 calls today, 4 this month", k)
	}
	// 1 March: today is that day's 10 calls; the month is the calendar
	// month, every day of it.
	got = byKey(usage(t, s, u.ID, march))
	if k := got[a.ID]; k.CallsToday != 10 || k.CallsMonth != 100 || k.ErrorsMonth != 10 {
		t.Errorf("1 March: a = %+v, want 10 calls today, 100 this month with 10 errors", k)
	}
	// April: the one call of the new month.
	got = byKey(usage(t, s, u.ID, april.Add(time.Second)))
	if k := got[a.ID]; k.CallsToday != 1 || k.CallsMonth != 1 || k.ErrorsMonth != 1 {
		t.Errorf("1 April: a = %+v, want 1 call today and this month, an error", k)
	}
	if k := got[b.ID]; k.CallsMonth != 0 || k.P95 != 0 {
		t.Errorf("1 April: b = %+v, want nothing this month", k)
	}
}

func testUsageIsolated(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-iso1@example.com")
	v := newUser(t, s, "usage-iso2@example.com")
	ku := newKey(t, s, u.ID, t0)
	kv := newKey(t, s, v.ID, t0)
	var batch []coinpulse.Call
	for i := range 60 {
		batch = append(batch, call(ku, t0, time.Millisecond, fmt.Sprintf("u-%d", i)))
		if i < 4 {
			batch = append(batch, call(kv, t0, 100*time.Millisecond, fmt.Sprintf("v-%d", i)))
		}
	}
	record(t, s, batch...)
	gu, gv := usage(t, s, u.ID, usageNow), usage(t, s, v.ID, usageNow)
	if gu.MonthCalls != 60 || gv.MonthCalls != 4 {
		t.Errorf("MonthCalls = %d, %d; want 60, 4", gu.MonthCalls, gv.MonthCalls)
	}
	if len(gu.Recent) != 50 || len(gv.Recent) != 4 {
		t.Errorf("recent calls = %d, %d; want 50, 4", len(gu.Recent), len(gv.Recent))
	}
	for _, c := range gv.Recent {
		if c.UserID != v.ID || c.KeyID != kv.ID {
			t.Errorf("v's recent call %+v is not v's", c)
		}
	}
	if len(gu.Keys) != 1 || gu.Keys[0].KeyID != ku.ID || len(gv.Keys) != 1 || gv.Keys[0].KeyID != kv.ID {
		t.Errorf("Keys = %+v, %+v; want each user's own", gu.Keys, gv.Keys)
	}
	wantPercentile(t, "u's P99", gu.P99, time.Millisecond)
	wantPercentile(t, "v's P50", gv.P50, 100*time.Millisecond)
}

func testUsageEmpty(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-empty@example.com")
	for _, id := range []int64{u.ID, u.ID + 1000} { // also a user that does not exist
		got := usage(t, s, id, usageNow)
		if got.MonthCalls != 0 || len(got.Recent) != 0 || len(got.Keys) != 0 || got.P50 != 0 || got.P95 != 0 || got.P99 != 0 {
			t.Errorf("Usage(%d) = %+v, want zeros", id, got)
		}
		if diff := cmp.Diff(make([]int64, 30), dailyCalls(got)); diff != "" {
			t.Errorf("Daily mismatch (-want +got):\n%s", diff)
		}
		if n := monthCalls(t, s, id, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)); n != 0 {
			t.Errorf("MonthCalls = %d, want 0", n)
		}
	}
}

func testUsageUnknownUser(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-unknown@example.com")
	k := newKey(t, s, u.ID, t0)
	ghost := call(k, t0, time.Millisecond, "ghost")
	ghost.UserID = u.ID + 1000
	ghost.KeyID = k.ID + 1000
	// A call of a user that does not exist is left out; the rest are kept.
	record(t, s, call(k, t0, time.Millisecond, "real"), ghost)
	if got := usage(t, s, u.ID, usageNow); got.MonthCalls != 1 || len(got.Recent) != 1 || got.Recent[0].RequestID != "real" {
		t.Errorf("Usage = %+v, want the one real call", got)
	}
	if got := usage(t, s, ghost.UserID, usageNow); got.MonthCalls != 0 || len(got.Recent) != 0 || len(got.Keys) != 0 {
		t.Errorf("unknown user's Usage = %+v, want nothing", got)
	}
	// Only unknown users: nothing to do, no error.
	record(t, s, ghost)
}

func testUsageInvalid(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-invalid@example.com")
	k := newKey(t, s, u.ID, t0)
	bad := call(k, t0, time.Millisecond, "bad")
	bad.Mode = "prod"
	err := s.RecordCalls(t.Context(), []coinpulse.Call{call(k, t0, time.Millisecond, "good"), bad})
	wantCode(t, err, coinpulse.CodeValidation)
	if got := usage(t, s, u.ID, usageNow); got.MonthCalls != 0 || len(got.Recent) != 0 || len(got.Keys) != 0 {
		t.Errorf("after a rejected batch Usage = %+v, want nothing", got)
	}
}

func testUsageRetention(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-retention@example.com")
	k := newKey(t, s, u.ID, t0)
	old := t0.AddDate(0, 0, -400)
	kept := t0.AddDate(0, 0, -399)
	record(t, s, call(k, old, time.Millisecond, ""), call(k, kept, time.Millisecond, ""))
	if n := monthCalls(t, s, u.ID, old.AddDate(0, 0, -1)); n != 2 {
		t.Fatalf("MonthCalls before pruning = %d, want 2", n)
	}
	// A call 400 days after the first: that day goes, the next stays.
	record(t, s, call(k, t0, time.Millisecond, ""))
	if n := monthCalls(t, s, u.ID, old.AddDate(0, 0, -1)); n != 1 {
		t.Errorf("MonthCalls after pruning = %d, want 1 (400 days kept: the oldest day goes)", n)
	}
	// Key totals are all-time.
	if got := usage(t, s, u.ID, usageNow); len(got.Keys) != 1 || got.Keys[0].Calls != 3 {
		t.Errorf("Keys = %+v, want 3 calls", got.Keys)
	}
}

func testUsageConcurrent(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-conc1@example.com")
	v := newUser(t, s, "usage-conc2@example.com")
	keys := []*coinpulse.APIKey{newKey(t, s, u.ID, t0), newKey(t, s, u.ID, t0), newKey(t, s, v.ID, t0)}
	const writers, batches, per = 8, 5, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*batches)
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				var batch []coinpulse.Call
				// Each writer goes through the keys in its own order.
				for i := range per {
					k := keys[(w+b+i)%len(keys)]
					batch = append(batch, call(k, t0.AddDate(0, 0, -(i%3)), time.Millisecond, ""))
				}
				if err := s.RecordCalls(t.Context(), batch); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("RecordCalls: %v", err)
	}
	gu, gv := usage(t, s, u.ID, usageNow), usage(t, s, v.ID, usageNow)
	var sum int64
	for _, k := range append(gu.Keys, gv.Keys...) {
		sum += k.Calls
	}
	if total := int64(writers * batches * per); sum != total || gu.MonthCalls+gv.MonthCalls != total {
		t.Errorf("key sums, MonthCalls = %d, %d; want %d each", sum, gu.MonthCalls+gv.MonthCalls, total)
	}
	if len(gu.Recent) != 50 || len(gv.Recent) != 50 {
		t.Errorf("recent calls = %d, %d; want 50 each", len(gu.Recent), len(gv.Recent))
	}
}

// testUsageSnapshot reads Usage while batches land: every read must be
// one snapshot, its figures all counting the same batches.
func testUsageSnapshot(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-snap@example.com")
	k := newKey(t, s, u.ID, t0)
	const batches, per = 60, 7
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for b := range batches {
			batch := make([]coinpulse.Call, per)
			for i := range batch {
				batch[i] = call(k, t0.Add(time.Duration(b*per+i)*time.Millisecond), time.Millisecond, "")
			}
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := s.RecordCalls(t.Context(), batch); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	// check returns what is wrong with a read, "" when nothing is.
	check := func(got *coinpulse.Usage) string {
		if len(got.Keys) > 1 {
			return fmt.Sprintf("Keys = %+v, want one key", got.Keys)
		}
		var total, month, today int64
		if len(got.Keys) == 1 {
			total, month, today = got.Keys[0].Calls, got.Keys[0].CallsMonth, got.Keys[0].CallsToday
		}
		if got.MonthCalls != total || month != total || today != total || got.Daily[29].Calls != total ||
			len(got.Recent) != int(min(total, 50)) || total%per != 0 {
			return fmt.Sprintf("not one snapshot of whole batches of %d: key total %d, key month %d, key today %d, MonthCalls %d, today %d, %d recent calls",
				per, total, month, today, got.MonthCalls, got.Daily[29].Calls, len(got.Recent))
		}
		return ""
	}
	for reads := 1; ; reads++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("RecordCalls: %v", err)
			}
			got := usage(t, s, u.ID, usageNow)
			if msg := check(got); msg != "" || got.MonthCalls != batches*per {
				t.Fatalf("after the writes: MonthCalls = %d, want %d; %s", got.MonthCalls, batches*per, msg)
			}
			t.Logf("%d reads while %d batches were written", reads, batches)
			return
		default:
		}
		if msg := check(usage(t, s, u.ID, usageNow)); msg != "" {
			close(stop)
			<-done
			t.Fatalf("read %d: %s", reads, msg)
		}
	}
}
