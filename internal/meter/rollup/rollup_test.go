package rollup

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"coinpulse"
)

func TestBuckets(t *testing.T) {
	if Edge(0) != 50*time.Microsecond || Edge(9) != 1131*time.Microsecond || Edge(22) != 102400*time.Microsecond ||
		Edge(Buckets-2) != 26214400*time.Microsecond || Edge(Buckets-1) != Edge(Buckets-2) {
		t.Errorf("edges 0, 9, 22, 38, 39 = %v, %v, %v, %v, %v", Edge(0), Edge(9), Edge(22), Edge(Buckets-2), Edge(Buckets-1))
	}
	for i := range Buckets - 1 {
		if i > 0 {
			if r := float64(Edge(i)) / float64(Edge(i-1)); math.Abs(r-math.Sqrt2) > 0.03 {
				t.Errorf("Edge(%d)/Edge(%d) = %v, want √2", i, i-1, r)
			}
		}
		if b := Bucket(Edge(i)); b != i {
			t.Errorf("Bucket(Edge(%d)) = %d", i, b)
		}
		if b := Bucket(Edge(i) + 1); b != i+1 {
			t.Errorf("Bucket(Edge(%d)+1ns) = %d, want %d", i, b, i+1)
		}
	}
	for _, d := range []time.Duration{-time.Second, 0, 1} {
		if b := Bucket(d); b != 0 {
			t.Errorf("Bucket(%v) = %d, want 0", d, b)
		}
	}
	if b := Bucket(time.Hour); b != Buckets-1 {
		t.Errorf("Bucket(1h) = %d, want %d", b, Buckets-1)
	}
	// Every duration's bucket reports it within [d, √2·d].
	for d := 50 * time.Microsecond; d < 26*time.Second; d = d * 9 / 8 {
		var h Histogram
		h.Add(d)
		if p := h.Percentile(0.5); p < d || float64(p) > float64(d)*math.Sqrt2+float64(time.Microsecond) {
			t.Errorf("percentile of %v = %v", d, p)
		}
	}
}

func TestPercentile(t *testing.T) {
	var h Histogram
	if h.Percentile(0.5) != 0 {
		t.Errorf("empty histogram: percentile %v, want 0", h.Percentile(0.5))
	}
	for range 95 {
		h.Add(time.Millisecond)
	}
	for range 5 {
		h.Add(time.Second)
	}
	// Rank 95 is the last 1 ms call; rank 96 the first 1 s one.
	if p := h.Percentile(0.95); p != Edge(Bucket(time.Millisecond)) {
		t.Errorf("P95 = %v, want %v", p, Edge(Bucket(time.Millisecond)))
	}
	if p := h.Percentile(0.96); p != Edge(Bucket(time.Second)) {
		t.Errorf("P96 = %v, want %v", p, Edge(Bucket(time.Second)))
	}
}

// Recent keeps each user's newest calls by time, not the last recorded:
// a call's time is when it was admitted, and a long call is recorded
// after newer ones.
func TestAggregateRecentByTime(t *testing.T) {
	at := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	var calls []coinpulse.Call
	calls = append(calls, coinpulse.Call{UserID: 1, Time: at.Add(time.Hour), RequestID: "slow"}) // newest, recorded first
	for i := range RecentCalls + 10 {
		calls = append(calls, coinpulse.Call{UserID: 1, Time: at.Add(time.Duration(i) * time.Second), RequestID: fmt.Sprint(i)})
	}
	calls = append(calls, coinpulse.Call{UserID: 2, Time: at, RequestID: "other"})
	b := Aggregate(calls, nil)
	var got []string
	for _, c := range b.Recent {
		got = append(got, c.RequestID)
	}
	want := []string{"slow"}
	for i := 11; i < RecentCalls+10; i++ {
		want = append(want, fmt.Sprint(i))
	}
	want = append(want, "other")
	if !slices.Equal(got, want) {
		t.Errorf("Recent = %v\nwant %v", got, want)
	}
}

func TestAggregate(t *testing.T) {
	day := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	var calls []coinpulse.Call
	for i := range 120 {
		calls = append(calls, coinpulse.Call{UserID: int64(1 + i%2), KeyID: int64(10 + i%3), Mode: coinpulse.ModeLive,
			Time: day.Add(time.Duration(i) * time.Hour / 4), Duration: time.Millisecond, Counted: i%4 != 0, RequestID: string(rune('A' + i%60))})
	}
	calls = append(calls, coinpulse.Call{UserID: 3, KeyID: 99, Mode: coinpulse.ModeTest, Time: day})
	b := Aggregate(calls, func(id int64) bool { return id != 3 })
	if len(b.Users) != 2 || b.Users[0] != 1 || b.Users[1] != 2 {
		t.Errorf("Users = %v", b.Users)
	}
	// 60 calls each: the newest 50 of each, in batch order.
	if len(b.Recent) != 100 || b.Recent[0].Time != calls[20].Time || b.Recent[99].Time != calls[119].Time {
		t.Errorf("Recent: %d calls, first %v, last %v", len(b.Recent), b.Recent[0].Time, b.Recent[len(b.Recent)-1].Time)
	}
	var n, counted int64
	for i, d := range b.Days {
		n += d.Latency.Count()
		counted += d.Calls
		if i > 0 && (d.UserID < b.Days[i-1].UserID || d.UserID == b.Days[i-1].UserID && !d.Day.After(b.Days[i-1].Day)) {
			t.Errorf("Days not sorted at %d", i)
		}
	}
	if n != 120 || counted != 90 || len(b.Days) != 4 || !b.Newest.Equal(day.AddDate(0, 0, 1)) {
		t.Errorf("days: %d rows, %d calls, %d counted, newest %v", len(b.Days), n, counted, b.Newest)
	}
	if len(b.Keys) != 3 || b.Keys[0].KeyID != 10 || b.Keys[0].Calls != 40 {
		t.Errorf("Keys = %+v", b.Keys)
	}
	// Three keys over two days (96 calls the first, 24 the second), every
	// call counted or not.
	n = 0
	for i, d := range b.KeyDays {
		n += d.Calls
		if d.Latency.Count() != d.Calls || d.Errors != 0 {
			t.Errorf("KeyDays[%d] = %+v", i, d)
		}
		if i > 0 && (d.KeyID < b.KeyDays[i-1].KeyID || d.KeyID == b.KeyDays[i-1].KeyID && !d.Day.After(b.KeyDays[i-1].Day)) {
			t.Errorf("KeyDays not sorted at %d", i)
		}
	}
	if n != 120 || len(b.KeyDays) != 6 {
		t.Errorf("key days: %d rows, %d calls", len(b.KeyDays), n)
	}
}

func TestResultKeys(t *testing.T) {
	now := time.Date(2025, 3, 14, 15, 0, 0, 0, time.UTC)
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	kd := func(key int64, d time.Time, calls, errs int64, lat time.Duration) KeyDay {
		k := KeyDay{KeyID: key, UserID: 1, Day: d, Calls: calls, Errors: errs}
		k.Latency[Bucket(lat)] = calls
		return k
	}
	keys := []coinpulse.KeyUsage{{KeyID: 1, Calls: 1000}, {KeyID: 2, Calls: 5}}
	u := Result(now, nil, keys, nil, []KeyDay{
		kd(1, day(2025, 2, 28), 500, 500, time.Second), // last month
		kd(1, day(2025, 3, 1), 10, 1, 100*time.Millisecond),
		kd(1, day(2025, 3, 14), 90, 9, time.Millisecond),
		kd(1, day(2025, 4, 1), 400, 0, time.Second), // next month
		kd(3, day(2025, 3, 14), 7, 7, time.Second),  // no total: left out
	})
	k := u.Keys[0]
	if k.CallsToday != 90 || k.CallsMonth != 100 || k.ErrorsMonth != 10 || k.ErrorRate() != 0.1 ||
		k.P50 != Edge(Bucket(time.Millisecond)) || k.P95 != Edge(Bucket(100*time.Millisecond)) {
		t.Errorf("key 1 = %+v", k)
	}
	if k := u.Keys[1]; k != (coinpulse.KeyUsage{KeyID: 2, Calls: 5}) || k.ErrorRate() != 0 {
		t.Errorf("key 2 = %+v, want its total only", k)
	}
	if len(u.Keys) != 2 {
		t.Errorf("%d keys, want 2", len(u.Keys))
	}
}

// BenchmarkAggregate is a full meter batch (8,192 calls, a millisecond
// apart): of one user, as under bench/limits.sh, and of 1,000 users.
func BenchmarkAggregate(b *testing.B) {
	at := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	for _, users := range []int{1, 1000} {
		b.Run(fmt.Sprint("users=", users), func(b *testing.B) {
			calls := make([]coinpulse.Call, 8192)
			for i := range calls {
				calls[i] = coinpulse.Call{UserID: int64(1 + i%users), KeyID: int64(1 + i%users), Mode: coinpulse.ModeLive,
					Time: at.Add(time.Duration(i) * time.Millisecond), Duration: time.Millisecond, Status: 200, Counted: true}
			}
			b.ReportAllocs()
			for b.Loop() {
				Aggregate(calls, nil)
			}
		})
	}
}
