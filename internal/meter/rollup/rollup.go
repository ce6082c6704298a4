// Package rollup is what both storage engines share to keep metered calls:
// the latency histogram's bucket scheme, and the aggregation of a batch of
// calls into the rows a store writes (one per user and UTC day, one per
// key, one per key and UTC day, and each user's newest calls). It does no
// I/O.
//
// # Histogram buckets
//
// A latency histogram has Buckets = 40 buckets, log-spaced by a factor of
// √2 from 50 µs. Bucket i (0 ≤ i < 39) holds durations d with
// Edge(i-1) < d ≤ Edge(i), where Edge(i) = 50 µs × 2^(i/2) rounded to the
// microsecond (50 µs, 71 µs, 100 µs, 141 µs, 200 µs, … 1.131 ms (i = 9) …
// 102.4 ms (i = 22) … 26.2144 s (i = 38)); bucket 0 also holds zero and
// negative durations, and bucket 39 holds everything above 26.2144 s.
//
// A percentile is reported as the upper edge of the bucket holding it: an
// upper bound, at most √2 (41 %) above the true value and never below it.
// In the last bucket, which has no upper edge, it is its lower edge
// (26.2144 s), and so a lower bound.
package rollup

import (
	"cmp"
	"math"
	"slices"
	"time"

	"coinpulse"
)

const (
	// Buckets is the number of buckets of a latency histogram.
	Buckets = 40
	// RecentCalls is how many of each user's newest calls a store keeps.
	RecentCalls = 50
	// RetainDays is how many days of daily usage a store keeps per user,
	// counted back from the newest day it has recorded.
	RetainDays = 400
)

// edges are the upper edges of the buckets but the last.
var edges = func() [Buckets - 1]time.Duration {
	var e [Buckets - 1]time.Duration
	for i := range e {
		us := math.Round(50 * math.Pow(2, float64(i)/2))
		e[i] = time.Duration(us) * time.Microsecond
	}
	return e
}()

// Edge returns the upper edge of bucket i, for 0 ≤ i < Buckets-1. The last
// bucket has none; Edge(Buckets-1) returns its lower edge.
func Edge(i int) time.Duration {
	if i >= len(edges) {
		return edges[len(edges)-1]
	}
	return edges[i]
}

// Bucket returns the bucket holding d.
func Bucket(d time.Duration) int {
	lo, hi := 0, len(edges) // the answer is in [lo, hi]
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if d <= edges[mid] {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// Histogram counts durations per bucket.
type Histogram [Buckets]int64

// Add counts d.
func (h *Histogram) Add(d time.Duration) { h[Bucket(d)]++ }

// Merge adds the counts of o.
func (h *Histogram) Merge(o *Histogram) {
	for i := range h {
		h[i] += o[i]
	}
}

// Count returns the number of durations counted.
func (h *Histogram) Count() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// Percentile returns the q-quantile (0 < q ≤ 1) of the counted durations
// by the nearest-rank method, as the upper edge of the bucket holding it
// (see the package comment), or zero when the histogram is empty.
func (h *Histogram) Percentile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	// The epsilon keeps 0.95 × 100 at rank 95 despite rounding.
	rank := int64(math.Ceil(q*float64(n) - 1e-9))
	rank = max(1, min(rank, n))
	var seen int64
	for i, c := range h {
		seen += c
		if seen >= rank {
			return Edge(i)
		}
	}
	return Edge(Buckets - 1)
}

// Day is one user's calls on one UTC day.
type Day struct {
	UserID int64
	// Day is the day's start, in UTC.
	Day time.Time
	// Calls counts the day's counted calls.
	Calls int64
	// Latency counts the durations of all the day's calls.
	Latency Histogram
}

// KeyDay is one key's calls on one UTC day.
type KeyDay struct {
	KeyID, UserID int64
	// Day is the day's start, in UTC.
	Day time.Time
	// Calls counts all the key's calls that day, counted or not; Errors
	// those of them answered with a status of 400 or above.
	Calls, Errors int64
	// Latency counts the durations of the calls.
	Latency Histogram
}

// IsError reports whether a call's status counts as an error in
// KeyDay.Errors: 4xx and 5xx.
func IsError(status int) bool { return status >= 400 }

// Key is one key's calls.
type Key struct {
	KeyID, UserID int64
	Calls         int64
	// LastCall is the latest Time of the key's calls, in UTC.
	LastCall time.Time
}

// Batch is a batch of calls as a store writes it.
type Batch struct {
	// Users are the distinct users of the batch's calls, ascending.
	Users []int64
	// Recent are, of each user's calls, the RecentCalls newest by time,
	// batch order breaking ties (older ones would be pruned at once), in
	// batch order.
	Recent []coinpulse.Call
	// Days are per user and UTC day, by user then day.
	Days []Day
	// Keys are per key, by key id.
	Keys []Key
	// KeyDays are per key and UTC day, by key then day.
	KeyDays []KeyDay
	// Newest is the latest day of Days (zero when there are none).
	Newest time.Time
}

// UserIDs returns the distinct users of calls, ascending.
func UserIDs(calls []coinpulse.Call) []int64 {
	ids := make([]int64, 0, 8)
	for i := range calls {
		ids = append(ids, calls[i].UserID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// DayOf returns the start of t's UTC day.
func DayOf(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// dropOld marks, of the calls of users with more than RecentCalls of them
// in calls (perUser counts each user's kept calls), those older than the
// user's RecentCalls newest by time (microseconds, as stored), batch
// order breaking ties.
func dropOld(calls []coinpulse.Call, keep func(int64) bool, perUser map[int64]int) []bool {
	type stamp struct {
		us int64 // the call's time in µs
		i  int   // its index in calls
	}
	n := 0
	for u, c := range perUser {
		if c > RecentCalls && (keep == nil || keep(u)) {
			n += c
		}
	}
	order := make([]stamp, 0, n)
	for i := range calls {
		if u := calls[i].UserID; perUser[u] > RecentCalls && (keep == nil || keep(u)) {
			order = append(order, stamp{calls[i].Time.UnixMicro(), i})
		}
	}
	slices.SortFunc(order, func(x, y stamp) int {
		if x.us != y.us {
			return cmpInt(x.us, y.us)
		}
		return x.i - y.i
	})
	drop := make([]bool, len(calls))
	kept := make(map[int64]int)
	for j := len(order) - 1; j >= 0; j-- {
		i := order[j].i
		if u := calls[i].UserID; kept[u] < RecentCalls {
			kept[u]++
		} else {
			drop[i] = true
		}
	}
	return drop
}

// micro returns t in UTC, truncated to the microsecond.
func micro(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()).UTC() }

// Aggregate returns calls as a store writes them, leaving out the calls
// whose user keep rejects (keep nil keeps all). Times come out in UTC,
// truncated to microseconds, as are durations.
//
// A batch mostly holds runs of calls of one user, key and day, so each
// row's index is looked up in its map only when the run changes.
func Aggregate(calls []coinpulse.Call, keep func(userID int64) bool) *Batch {
	type dayKey struct {
		id  int64 // a user's or a key's
		day int64 // Unix seconds
	}
	b := &Batch{}
	days := make(map[dayKey]int)
	keyDays := make(map[dayKey]int)
	keys := make(map[int64]int)
	var (
		day          time.Time // the day of the last call
		dayLo, dayHi int64     // its bounds, in µs
		j, k, kj     = -1, -1, -1
	)
	for i := range calls {
		c := &calls[i]
		if keep != nil && !keep(c.UserID) {
			continue
		}
		t := micro(c.Time)
		us := t.UnixMicro()
		d := c.Duration.Truncate(time.Microsecond)
		newDay := us < dayLo || us >= dayHi
		if newDay {
			day = DayOf(t)
			dayLo = day.UnixMicro()
			dayHi = day.AddDate(0, 0, 1).UnixMicro()
		}
		if newDay || j < 0 || b.Days[j].UserID != c.UserID {
			dk := dayKey{c.UserID, day.Unix()}
			var ok bool
			if j, ok = days[dk]; !ok {
				j = len(b.Days)
				days[dk] = j
				b.Days = append(b.Days, Day{UserID: c.UserID, Day: day})
			}
		}
		if c.Counted {
			b.Days[j].Calls++
		}
		b.Days[j].Latency.Add(d)
		if k < 0 || b.Keys[k].KeyID != c.KeyID {
			var ok bool
			if k, ok = keys[c.KeyID]; !ok {
				k = len(b.Keys)
				keys[c.KeyID] = k
				b.Keys = append(b.Keys, Key{KeyID: c.KeyID, UserID: c.UserID, LastCall: t})
			}
		}
		b.Keys[k].Calls++
		if t.After(b.Keys[k].LastCall) {
			b.Keys[k].LastCall = t
		}
		if newDay || kj < 0 || b.KeyDays[kj].KeyID != c.KeyID {
			kk := dayKey{c.KeyID, day.Unix()}
			var ok bool
			if kj, ok = keyDays[kk]; !ok {
				kj = len(b.KeyDays)
				keyDays[kk] = kj
				b.KeyDays = append(b.KeyDays, KeyDay{KeyID: c.KeyID, UserID: c.UserID, Day: day})
			}
		}
		kd := &b.KeyDays[kj]
		kd.Calls++
		if IsError(c.Status) {
			kd.Errors++
		}
		kd.Latency.Add(d)
	}
	// Each user's calls, from their days.
	perUser := make(map[int64]int)
	for i := range b.Days {
		perUser[b.Days[i].UserID] += int(b.Days[i].Latency.Count())
	}
	b.Users = make([]int64, 0, len(perUser))
	for u := range perUser {
		b.Users = append(b.Users, u)
	}
	slices.Sort(b.Users)
	// Walk the calls again, keeping each user's RecentCalls newest by
	// time, batch order breaking ties. A call's time is when it was
	// admitted, so a long call is recorded after newer ones.
	var drop []bool
	recent := 0
	for _, n := range perUser {
		recent += min(n, RecentCalls)
		if n > RecentCalls && drop == nil {
			drop = dropOld(calls, keep, perUser)
		}
	}
	b.Recent = make([]coinpulse.Call, 0, recent)
	for i := range calls {
		c := calls[i]
		if keep != nil && !keep(c.UserID) || drop != nil && drop[i] {
			continue
		}
		c.Time = micro(c.Time)
		c.Duration = c.Duration.Truncate(time.Microsecond)
		b.Recent = append(b.Recent, c)
	}
	slices.SortFunc(b.Days, func(x, y Day) int {
		if x.UserID != y.UserID {
			return cmpInt(x.UserID, y.UserID)
		}
		return x.Day.Compare(y.Day)
	})
	for _, d := range b.Days {
		if d.Day.After(b.Newest) {
			b.Newest = d.Day
		}
	}
	slices.SortFunc(b.Keys, func(x, y Key) int { return cmpInt(x.KeyID, y.KeyID) })
	slices.SortFunc(b.KeyDays, func(x, y KeyDay) int {
		if x.KeyID != y.KeyID {
			return cmpInt(x.KeyID, y.KeyID)
		}
		return x.Day.Compare(y.Day)
	})
	return b
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Result assembles a Usage from what a store read for userID as of now:
// recent (newest first) and keys (the all-time totals) as they are, days
// (any order; those outside the month and the 30-day window are ignored)
// for MonthCalls, Daily and the percentiles, and keyDays (any order; those
// outside now's calendar month are ignored, see KeyMonth) for the keys'
// figures of today and this month.
func Result(now time.Time, recent []coinpulse.Call, keys []coinpulse.KeyUsage, days []Day, keyDays []KeyDay) *coinpulse.Usage {
	today := DayOf(now)
	first := today.AddDate(0, 0, -29)
	month := MonthStart(now)
	nextMonth := month.AddDate(0, 1, 0) // days past now's month (another node's clock) are not its
	u := &coinpulse.Usage{Recent: recent, Keys: keys, Daily: make([]coinpulse.DayUsage, 30)}
	if u.Recent == nil {
		u.Recent = []coinpulse.Call{}
	}
	if u.Keys == nil {
		u.Keys = []coinpulse.KeyUsage{}
	}
	for i := range u.Daily {
		u.Daily[i].Day = first.AddDate(0, 0, i)
	}
	var h Histogram
	var perDay [30]Histogram
	for i := range days {
		d := &days[i]
		if !d.Day.Before(month) && d.Day.Before(nextMonth) {
			u.MonthCalls += d.Calls
		}
		if d.Day.Before(first) || d.Day.After(today) {
			continue
		}
		// Days are whole UTC days apart; AddDate keeps that exact.
		idx := int(d.Day.Sub(first) / (24 * time.Hour))
		u.Daily[idx].Calls += d.Calls
		perDay[idx].Merge(&d.Latency)
		h.Merge(&d.Latency)
	}
	for i := range u.Daily {
		u.Daily[i].P50, u.Daily[i].P95 = perDay[i].Percentile(0.50), perDay[i].Percentile(0.95)
	}
	u.P50, u.P95, u.P99 = h.Percentile(0.50), h.Percentile(0.95), h.Percentile(0.99)
	keyMonth(now, u.Keys, keyDays)
	return u
}

// keyMonth fills keys' figures of now's UTC day and calendar month from
// keyDays. A key of keyDays that is not among keys is left out: every key
// with daily rows has a total.
func keyMonth(now time.Time, keys []coinpulse.KeyUsage, keyDays []KeyDay) {
	if len(keys) == 0 || len(keyDays) == 0 {
		return
	}
	today := DayOf(now)
	from, to := KeyMonth(now)
	idx := make(map[int64]int, len(keys))
	for i := range keys {
		idx[keys[i].KeyID] = i
	}
	hists := make([]Histogram, len(keys))
	for i := range keyDays {
		d := &keyDays[i]
		j, ok := idx[d.KeyID]
		if !ok || d.Day.Before(from) || !d.Day.Before(to) {
			continue
		}
		k := &keys[j]
		k.CallsMonth += d.Calls
		k.ErrorsMonth += d.Errors
		if d.Day.Equal(today) {
			k.CallsToday += d.Calls
		}
		hists[j].Merge(&d.Latency)
	}
	for j := range keys {
		keys[j].P50, keys[j].P95 = hists[j].Percentile(0.50), hists[j].Percentile(0.95)
	}
}

// KeyMonth returns the days a store must read for Result's per-key
// figures as of now: those from the start of now's UTC calendar month
// (inclusive) to the next month's (exclusive).
func KeyMonth(now time.Time) (from, to time.Time) {
	from = MonthStart(now)
	return from, from.AddDate(0, 1, 0)
}

// Since returns the first day a store must read for Result as of now: the
// earlier of the month's start and the 30-day window's.
func Since(now time.Time) time.Time {
	first := DayOf(now).AddDate(0, 0, -29)
	if m := MonthStart(now); m.Before(first) {
		return m
	}
	return first
}

// MonthStart returns the start of t's calendar month in UTC.
func MonthStart(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// AdmittedRows sums changes of admitted calls by user and month, as a
// store adds them: rows in (user, month) order (so concurrent writers
// lock them in one order), without the sums of 0; and, for each user of
// changes (ascending), the cutoff before which the user's months are
// removed: the month before the newest month of the user's changes.
func AdmittedRows(changes []coinpulse.Admitted) (rows []coinpulse.Admitted, users []int64, cutoffs []time.Time) {
	type month struct {
		user int64
		at   int64
	}
	sums := make(map[month]int64, len(changes))
	newest := make(map[int64]time.Time)
	for _, c := range changes {
		m := coinpulse.MonthStart(c.Month)
		sums[month{c.UserID, m.UnixMicro()}] += c.Calls
		if n, ok := newest[c.UserID]; !ok || m.After(n) {
			newest[c.UserID] = m
		}
	}
	for m, n := range sums {
		if n != 0 {
			rows = append(rows, coinpulse.Admitted{UserID: m.user, Month: time.UnixMicro(m.at).UTC(), Calls: n})
		}
	}
	slices.SortFunc(rows, func(a, b coinpulse.Admitted) int {
		if a.UserID != b.UserID {
			return cmp.Compare(a.UserID, b.UserID)
		}
		return a.Month.Compare(b.Month)
	})
	for u := range newest {
		users = append(users, u)
	}
	slices.Sort(users)
	for _, u := range users {
		cutoffs = append(cutoffs, newest[u].AddDate(0, -1, 0))
	}
	return rows, users, cutoffs
}
