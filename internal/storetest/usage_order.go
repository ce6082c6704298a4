package storetest

import (
	"fmt"
	"testing"
	"time"

	"coinpulse"
)

// wantRecent checks that u's recent calls are the calls named want, in
// that order, and that their times never increase.
func wantRecent(t *testing.T, u *coinpulse.Usage, want []string) {
	t.Helper()
	if len(u.Recent) != len(want) {
		t.Fatalf("%d recent calls, want %d", len(u.Recent), len(want))
	}
	for i, c := range u.Recent {
		if c.RequestID != want[i] {
			t.Fatalf("Recent[%d] = %s at %v, want %s", i, c.RequestID, c.Time, want[i])
		}
		if i > 0 && c.Time.After(u.Recent[i-1].Time) {
			t.Fatalf("Recent[%d] at %v is newer than Recent[%d] at %v", i, c.Time, i-1, u.Recent[i-1].Time)
		}
	}
}

// testUsageRecentByTime: the recent calls are the newest by time, whatever
// order batches are written in (nodes flush up to a second apart, so a
// batch written later can hold older calls).
func testUsageRecentByTime(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-recent-time@example.com")
	k := newKey(t, s, u.ID, t0)
	sec := t0.Truncate(time.Second).Add(-time.Hour)
	batch := func(prefix string, from time.Duration, n int) []coinpulse.Call {
		calls := make([]coinpulse.Call, n)
		for i := range calls {
			calls[i] = call(k, sec.Add(from+time.Duration(i)*time.Millisecond), time.Millisecond, fmt.Sprintf("%s-%d", prefix, i))
		}
		return calls
	}
	// Node A writes 50 calls at .900–.949, then node B 50 at .100–.149.
	record(t, s, batch("a", 900*time.Millisecond, 50)...)
	record(t, s, batch("b", 100*time.Millisecond, 50)...)
	var want []string
	for i := 49; i >= 0; i-- {
		want = append(want, fmt.Sprintf("a-%d", i))
	}
	got := usage(t, s, u.ID, usageNow)
	wantRecent(t, got, want)
	if got.Recent[0].Time != sec.Add(949*time.Millisecond) || got.Recent[49].Time != sec.Add(900*time.Millisecond) {
		t.Errorf("recent calls from %v to %v, want .949 to .900", got.Recent[0].Time, got.Recent[49].Time)
	}
	// A batch of 5 calls newer than all, then 5 older than all: the 5
	// newer ones push out A's 5 oldest, the older ones are dropped.
	mixed := append(batch("n", 950*time.Millisecond, 5), batch("o", 0, 5)...)
	record(t, s, mixed...)
	want = append([]string{"n-4", "n-3", "n-2", "n-1", "n-0"}, want[:45]...)
	wantRecent(t, usage(t, s, u.ID, usageNow), want)
	// One newer call pushes out the oldest kept.
	record(t, s, batch("late", 960*time.Millisecond, 1)...)
	wantRecent(t, usage(t, s, u.ID, usageNow), append([]string{"late-0"}, want[:49]...))
}

// testUsageRecentTies: calls at equal times come back the last recorded
// first, within a batch and across batches.
func testUsageRecentTies(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "usage-recent-ties@example.com")
	k := newKey(t, s, u.ID, t0)
	at := t0.Add(-time.Hour).Truncate(time.Microsecond)
	batch := func(prefix string, at time.Time, n int) []coinpulse.Call {
		calls := make([]coinpulse.Call, n)
		for i := range calls {
			calls[i] = call(k, at, time.Millisecond, fmt.Sprintf("%s-%d", prefix, i))
		}
		return calls
	}
	record(t, s, batch("x", at, 30)...)
	record(t, s, batch("y", at, 30)...)
	var want []string
	for i := 29; i >= 0; i-- {
		want = append(want, fmt.Sprintf("y-%d", i))
	}
	for i := 29; i >= 10; i-- {
		want = append(want, fmt.Sprintf("x-%d", i))
	}
	wantRecent(t, usage(t, s, u.ID, usageNow), want)
	// An older call is pruned at once; a newer one comes first.
	record(t, s, batch("old", at.Add(-time.Second), 1)...)
	wantRecent(t, usage(t, s, u.ID, usageNow), want)
	record(t, s, batch("new", at.Add(time.Microsecond), 1)...)
	wantRecent(t, usage(t, s, u.ID, usageNow), append([]string{"new-0"}, want[:49]...))
}
