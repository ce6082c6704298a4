package histchunk

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"coinpulse"
)

func date(y int, m time.Month, d, h int) time.Time {
	return time.Date(y, m, d, h, 0, 0, 0, time.UTC)
}

// hourlyBucket is the start of the hourly chunk (a week) the tests use.
var hourlyBucket = date(2024, 2, 29, 0)

func point(t time.Time, price float64) coinpulse.HistoryPoint {
	return coinpulse.HistoryPoint{Timestamp: t, Price: price, MarketCap: price * 1e6, TotalVolume: price * 1e3}
}

// wantCode fails t unless err is of kind code.
func wantCode(t *testing.T, err error, code coinpulse.Code) {
	t.Helper()
	if got := coinpulse.ErrorCode(err); got != code {
		t.Fatalf("error = %v (code %q), want code %q", err, got, code)
	}
}

func TestBucket(t *testing.T) {
	// Hourly buckets are weeks from the epoch (a Thursday): 2024-03-05, a
	// Tuesday, is in the week of Thursday 2024-02-29. 2024-03-05 is Unix day
	// 19787; 19787 / 256 = 77 rem 75, so its daily bucket starts on day
	// 77*256 = 19712, 2023-12-21.
	paris := time.FixedZone("CET", 3600)
	tests := []struct {
		name     string
		interval coinpulse.Interval
		t        time.Time
		want     time.Time
	}{
		{"hourly week start", coinpulse.Hourly, date(2024, 2, 29, 0), date(2024, 2, 29, 0)},
		{"hourly inside", coinpulse.Hourly, date(2024, 3, 5, 13), date(2024, 2, 29, 0)},
		{"hourly last second", coinpulse.Hourly, date(2024, 3, 7, 0).Add(-time.Second), date(2024, 2, 29, 0)},
		{"hourly next week", coinpulse.Hourly, date(2024, 3, 7, 0), date(2024, 3, 7, 0)},
		{"hourly other zone", coinpulse.Hourly, time.Date(2024, 3, 7, 0, 30, 0, 0, paris), date(2024, 2, 29, 0)},
		{"hourly before 1970", coinpulse.Hourly, date(1969, 12, 31, 5), date(1969, 12, 25, 0)},
		{"daily inside", coinpulse.Daily, date(2024, 3, 5, 0), date(2023, 12, 21, 0)},
		{"daily start", coinpulse.Daily, date(2023, 12, 21, 0), date(2023, 12, 21, 0)},
		{"daily end", coinpulse.Daily, date(2023, 12, 21, 0).Add(256*24*time.Hour - time.Nanosecond), date(2023, 12, 21, 0)},
		{"daily epoch", coinpulse.Daily, time.Unix(0, 0), time.Unix(0, 0).UTC()},
		{"daily before 1970", coinpulse.Daily, date(1969, 12, 31, 0), time.Unix(-256*86400, 0).UTC()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Bucket(tt.interval, tt.t)
			if !got.Equal(tt.want) || got.Location() != time.UTC {
				t.Errorf("Bucket(%s, %v) = %v, want %v (UTC)", tt.interval, tt.t, got, tt.want)
			}
		})
	}
}

func TestSpan(t *testing.T) {
	if got, want := Span(coinpulse.Hourly), 7*24*time.Hour; got != want {
		t.Errorf("Span(hourly) = %v, want %v", got, want)
	}
	if got, want := Span(coinpulse.Daily), 256*24*time.Hour; got != want {
		t.Errorf("Span(daily) = %v, want %v", got, want)
	}
}

// TestLayout pins the blob format byte for byte: other programs (and older
// rows) depend on it.
func TestLayout(t *testing.T) {
	b := hourlyBucket
	blob, err := Encode(coinpulse.Hourly, b, []coinpulse.HistoryPoint{
		{Timestamp: b.Add(3 * time.Hour), Price: 1.5, MarketCap: 2, TotalVolume: -0.25},
		{Timestamp: b.Add(1 * time.Hour), Price: 10, MarketCap: 20, TotalVolume: 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	want = binary.LittleEndian.AppendUint64(want, 1<<1|1<<3)
	want = binary.LittleEndian.AppendUint64(want, 0) // slots 64..127
	want = binary.LittleEndian.AppendUint64(want, 0) // slots 128..167
	for _, v := range []float64{10, 20, 30, 1.5, 2, -0.25} {
		want = binary.LittleEndian.AppendUint64(want, math.Float64bits(v))
	}
	if !bytes.Equal(blob, want) {
		t.Errorf("Encode = %x\nwant     %x", blob, want)
	}
}

func TestRoundTrip(t *testing.T) {
	hourly := hourlyBucket
	daily := Bucket(coinpulse.Daily, date(2024, 3, 5, 0))
	full := make([]coinpulse.HistoryPoint, DailySlots)
	for i := range full {
		full[i] = point(daily.Add(time.Duration(i)*24*time.Hour), float64(i)+0.1)
	}
	tests := []struct {
		name     string
		interval coinpulse.Interval
		bucket   time.Time
		points   []coinpulse.HistoryPoint
	}{
		{"empty", coinpulse.Hourly, hourly, []coinpulse.HistoryPoint{}},
		{"one hourly", coinpulse.Hourly, hourly, []coinpulse.HistoryPoint{point(hourly.Add(23*time.Hour), 42)}},
		{"extremes", coinpulse.Hourly, hourly, []coinpulse.HistoryPoint{
			{Timestamp: hourly, Price: math.MaxFloat64, MarketCap: math.SmallestNonzeroFloat64, TotalVolume: -math.MaxFloat64},
			{Timestamp: hourly.Add(time.Hour), Price: 0.1 + 0.2, MarketCap: 1e-300, TotalVolume: 0},
		}},
		{"full daily", coinpulse.Daily, daily, full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blob, err := Encode(tt.interval, tt.bucket, tt.points)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			header := 24 // three bitmap words for 168 hourly slots
			if tt.interval == coinpulse.Daily {
				header = 32 // four for 256 daily slots
			}
			if want := header + 24*len(tt.points); len(blob) != want {
				t.Errorf("len(blob) = %d, want %d", len(blob), want)
			}
			got, err := Decode(tt.interval, tt.bucket, blob)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tt.points, got); diff != "" {
				t.Errorf("Decode(Encode(points)) mismatch (-want +got):\n%s", diff)
			}
			for _, p := range got {
				if p.Timestamp.Location() != time.UTC {
					t.Errorf("timestamp %v is not in UTC", p.Timestamp)
				}
			}
		})
	}
}

func TestNegativeZeroKeepsItsBits(t *testing.T) {
	b := hourlyBucket
	blob, err := Encode(coinpulse.Hourly, b, []coinpulse.HistoryPoint{{Timestamp: b, Price: math.Copysign(0, -1)}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(coinpulse.Hourly, b, blob)
	if err != nil {
		t.Fatal(err)
	}
	if !math.Signbit(got[0].Price) {
		t.Errorf("price = %v, want -0", got[0].Price)
	}
}

func TestEncodeErrors(t *testing.T) {
	b := hourlyBucket
	tests := []struct {
		name     string
		interval coinpulse.Interval
		bucket   time.Time
		points   []coinpulse.HistoryPoint
		code     coinpulse.Code
	}{
		{"unknown interval", "weekly", b, nil, coinpulse.CodeValidation},
		{"bucket not a chunk start", coinpulse.Hourly, b.Add(time.Hour), nil, coinpulse.CodeServerError},
		{"off the step", coinpulse.Hourly, b, []coinpulse.HistoryPoint{point(b.Add(90*time.Minute), 1)}, coinpulse.CodeValidation},
		{"fraction of a second", coinpulse.Hourly, b, []coinpulse.HistoryPoint{point(b.Add(time.Millisecond), 1)}, coinpulse.CodeValidation},
		{"daily off the step", coinpulse.Daily, Bucket(coinpulse.Daily, b), []coinpulse.HistoryPoint{point(b.Add(time.Hour), 1)}, coinpulse.CodeValidation},
		{"after the chunk", coinpulse.Hourly, b, []coinpulse.HistoryPoint{point(b.Add(168*time.Hour), 1)}, coinpulse.CodeValidation},
		{"before the chunk", coinpulse.Hourly, b, []coinpulse.HistoryPoint{point(b.Add(-time.Hour), 1)}, coinpulse.CodeValidation},
		{"NaN", coinpulse.Hourly, b, []coinpulse.HistoryPoint{{Timestamp: b, Price: math.NaN()}}, coinpulse.CodeValidation},
		{"infinity", coinpulse.Hourly, b, []coinpulse.HistoryPoint{{Timestamp: b, TotalVolume: math.Inf(1)}}, coinpulse.CodeValidation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blob, err := Encode(tt.interval, tt.bucket, tt.points)
			if err == nil {
				t.Fatalf("Encode = %x, want an error", blob)
			}
			wantCode(t, err, tt.code)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	b := hourlyBucket
	valid, err := Encode(coinpulse.Hourly, b, []coinpulse.HistoryPoint{point(b, 1), point(b.Add(time.Hour), 2)})
	if err != nil {
		t.Fatal(err)
	}
	// Slot 168 (bit 40 of the third word) is past an hourly chunk.
	beyond := binary.LittleEndian.AppendUint64(nil, 0)
	beyond = binary.LittleEndian.AppendUint64(beyond, 0)
	beyond = binary.LittleEndian.AppendUint64(beyond, 1<<40)
	beyond = append(beyond, make([]byte, 24)...)
	tests := []struct {
		name     string
		interval coinpulse.Interval
		bucket   time.Time
		blob     []byte
	}{
		{"nil", coinpulse.Hourly, b, nil},
		{"short header", coinpulse.Hourly, b, valid[:7]},
		{"truncated values", coinpulse.Hourly, b, valid[:len(valid)-1]},
		{"trailing bytes", coinpulse.Hourly, b, append(append([]byte{}, valid...), 0)},
		{"slot beyond an hourly chunk", coinpulse.Hourly, b, beyond},
		{"bucket not a chunk start", coinpulse.Hourly, b.Add(time.Hour), valid},
		{"unknown interval", "minutely", b, valid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := Decode(tt.interval, tt.bucket, tt.blob); err == nil {
				t.Errorf("Decode = %v, want an error", got)
			}
		})
	}
	// Every bit of the four words is a slot of a 256-slot daily chunk.
	var all []byte
	for range 4 {
		all = binary.LittleEndian.AppendUint64(all, math.MaxUint64)
	}
	all = append(all, make([]byte, 256*24)...)
	got, err := Decode(coinpulse.Daily, Bucket(coinpulse.Daily, b), all)
	if err != nil || len(got) != 256 {
		t.Errorf("Decode(daily, all slots) = %d points, %v; want 256 points", len(got), err)
	}
}

func TestMerge(t *testing.T) {
	b := hourlyBucket
	old, err := Encode(coinpulse.Hourly, b, []coinpulse.HistoryPoint{point(b, 1), point(b.Add(time.Hour), 2), point(b.Add(5*time.Hour), 5)})
	if err != nil {
		t.Fatal(err)
	}
	merged, err := Merge(coinpulse.Hourly, b, old, []coinpulse.HistoryPoint{
		point(b.Add(time.Hour), 20), // replaces
		point(b.Add(3*time.Hour), 3),
		point(b.Add(3*time.Hour), 30), // the later of two wins
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(coinpulse.Hourly, b, merged)
	if err != nil {
		t.Fatal(err)
	}
	want := []coinpulse.HistoryPoint{point(b, 1), point(b.Add(time.Hour), 20), point(b.Add(3*time.Hour), 30), point(b.Add(5*time.Hour), 5)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged points mismatch (-want +got):\n%s", diff)
	}

	t.Run("empty existing", func(t *testing.T) {
		for _, existing := range [][]byte{nil, {}} {
			blob, err := Merge(coinpulse.Hourly, b, existing, []coinpulse.HistoryPoint{point(b, 1)})
			if err != nil {
				t.Fatal(err)
			}
			want, _ := Encode(coinpulse.Hourly, b, []coinpulse.HistoryPoint{point(b, 1)})
			if !bytes.Equal(blob, want) {
				t.Errorf("Merge(%v, …) = %x, want %x", existing, blob, want)
			}
		}
	})
	t.Run("corrupt existing", func(t *testing.T) {
		if _, err := Merge(coinpulse.Hourly, b, old[:9], nil); err == nil {
			t.Error("Merge of a corrupt blob succeeded, want an error")
		}
	})
	t.Run("bad new point", func(t *testing.T) {
		_, err := Merge(coinpulse.Hourly, b, old, []coinpulse.HistoryPoint{point(b.Add(30*time.Minute), 1)})
		wantCode(t, err, coinpulse.CodeValidation)
	})
}

func TestTrimBefore(t *testing.T) {
	b := hourlyBucket
	pts := []coinpulse.HistoryPoint{point(b, 1), point(b.Add(time.Hour), 2), point(b.Add(2*time.Hour), 3)}
	blob, err := Encode(coinpulse.Hourly, b, pts)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		before time.Time
		want   []coinpulse.HistoryPoint
	}{
		{"before all", b.Add(-time.Hour), pts},
		{"on the first", b, pts},
		{"between", b.Add(90 * time.Minute), pts[2:]},
		{"on the last", b.Add(2 * time.Hour), pts[2:]},
		{"after all", b.Add(3 * time.Hour), []coinpulse.HistoryPoint{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, n, err := TrimBefore(coinpulse.Hourly, b, blob, tt.before)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tt.want) {
				t.Errorf("remaining = %d, want %d", n, len(tt.want))
			}
			got, err := Decode(coinpulse.Hourly, b, out)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("trimmed points mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGroup(t *testing.T) {
	d1, d3 := date(2024, 3, 5, 0), date(2024, 3, 7, 0)
	in := []coinpulse.HistoryPoint{
		point(d3.Add(time.Hour), 7),
		point(d1.Add(23*time.Hour), 1),
		point(d3, 6),
		point(d1, 0),
	}
	got, err := Group(coinpulse.Hourly, in)
	if err != nil {
		t.Fatal(err)
	}
	want := []Chunk{
		{Bucket: Bucket(coinpulse.Hourly, d1), Points: []coinpulse.HistoryPoint{point(d1.Add(23*time.Hour), 1), point(d1, 0)}},
		{Bucket: d3, Points: []coinpulse.HistoryPoint{point(d3.Add(time.Hour), 7), point(d3, 6)}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Group mismatch (-want +got):\n%s", diff)
	}

	t.Run("no points", func(t *testing.T) {
		got, err := Group(coinpulse.Daily, nil)
		if err != nil || len(got) != 0 {
			t.Errorf("Group(nil) = %v, %v; want no chunks", got, err)
		}
	})
	t.Run("errors", func(t *testing.T) {
		_, err := Group(coinpulse.Hourly, []coinpulse.HistoryPoint{point(d1.Add(time.Minute), 1)})
		wantCode(t, err, coinpulse.CodeValidation)
		_, err = Group(coinpulse.Daily, []coinpulse.HistoryPoint{point(d1.Add(time.Hour), 1)})
		wantCode(t, err, coinpulse.CodeValidation)
		_, err = Group("yearly", nil)
		wantCode(t, err, coinpulse.CodeValidation)
		_, err = Group(coinpulse.Hourly, []coinpulse.HistoryPoint{{Timestamp: d1, MarketCap: math.NaN()}})
		wantCode(t, err, coinpulse.CodeValidation)
	})
}

func TestGroupOrdered(t *testing.T) {
	d1, d2 := date(2024, 3, 5, 0), date(2024, 3, 7, 0) // two weeks
	in := []coinpulse.HistoryPoint{point(d1.Add(22*time.Hour), 1), point(d1.Add(23*time.Hour), 2), point(d2, 3), point(d2.Add(5*time.Hour), 4)}
	got, err := Group(coinpulse.Hourly, in)
	if err != nil {
		t.Fatal(err)
	}
	want := []Chunk{{Bucket: Bucket(coinpulse.Hourly, d1), Points: in[:2]}, {Bucket: d2, Points: in[2:]}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Group mismatch (-want +got):\n%s", diff)
	}
	// Appending to a chunk's points must not overwrite the next chunk's.
	_ = append(got[0].Points, point(d1, 9))
	if in[2].Price != 3 {
		t.Errorf("appending to a chunk overwrote the input")
	}
}

func TestGroupSeries(t *testing.T) {
	d1, d2 := hourlyBucket, date(2024, 3, 7, 0) // two weeks
	series := []coinpulse.Series{
		{CoinID: "b", Points: []coinpulse.HistoryPoint{point(d2, 1)}},
		{CoinID: "a", Points: []coinpulse.HistoryPoint{point(d1, 2)}},
		{CoinID: "empty"},
		{CoinID: "b", Points: []coinpulse.HistoryPoint{point(d1, 3), point(d2, 4)}},
	}
	got, err := GroupSeries(coinpulse.Hourly, series)
	if err != nil {
		t.Fatal(err)
	}
	want := []SeriesChunks{
		{CoinID: "b", Chunks: []Chunk{
			{Bucket: d1, Points: []coinpulse.HistoryPoint{point(d1, 3)}},
			{Bucket: d2, Points: []coinpulse.HistoryPoint{point(d2, 1), point(d2, 4)}}, // the later wins in Merge
		}},
		{CoinID: "a", Chunks: []Chunk{{Bucket: d1, Points: []coinpulse.HistoryPoint{point(d1, 2)}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GroupSeries mismatch (-want +got):\n%s", diff)
	}
	if series[0].Points[0].Price != 1 || len(series[0].Points) != 1 {
		t.Errorf("GroupSeries changed its input: %v", series[0].Points)
	}

	_, err = GroupSeries(coinpulse.Daily, append(series, coinpulse.Series{CoinID: "c", Points: []coinpulse.HistoryPoint{point(d1.Add(time.Hour), 1)}}))
	wantCode(t, err, coinpulse.CodeValidation)
	_, err = GroupSeries("", nil)
	wantCode(t, err, coinpulse.CodeValidation)
}

// FuzzDecode feeds Decode arbitrary blobs: it must never panic, and what it
// accepts must be a canonical encoding of points inside the chunk.
func FuzzDecode(f *testing.F) {
	b := hourlyBucket
	empty, _ := Encode(coinpulse.Hourly, b, nil)
	two, _ := Encode(coinpulse.Hourly, b, []coinpulse.HistoryPoint{point(b, 1), point(b.Add(23*time.Hour), 2)})
	daily, _ := Encode(coinpulse.Daily, Bucket(coinpulse.Daily, b), []coinpulse.HistoryPoint{point(Bucket(coinpulse.Daily, b).Add(63*24*time.Hour), 3)})
	f.Add(false, b.Unix(), empty)
	f.Add(false, b.Unix(), two)
	f.Add(true, b.Unix(), daily)
	f.Add(false, b.Unix(), []byte{})
	f.Add(true, int64(-1), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, isDaily bool, sec int64, blob []byte) {
		interval := coinpulse.Hourly
		if isDaily {
			interval = coinpulse.Daily
		}
		// Keep the bucket within a few thousand years of 1970, where
		// Unix seconds cannot overflow.
		bucket := Bucket(interval, time.Unix(sec%(1<<40), 0))
		points, err := Decode(interval, bucket, blob)
		if err != nil {
			return
		}
		end := bucket.Add(Span(interval))
		finite := true
		for i, p := range points {
			if p.Timestamp.Before(bucket) || !p.Timestamp.Before(end) {
				t.Fatalf("point %d at %v is outside [%v, %v)", i, p.Timestamp, bucket, end)
			}
			if i > 0 && !points[i-1].Timestamp.Before(p.Timestamp) {
				t.Fatalf("points %d and %d are out of order", i-1, i)
			}
			if checkFinite(p) != nil {
				finite = false
			}
		}
		if !finite {
			return // Encode refuses these; Decode still must not panic
		}
		again, err := Encode(interval, bucket, points)
		if err != nil {
			t.Fatalf("Encode of decoded points: %v", err)
		}
		if !bytes.Equal(again, blob) {
			t.Fatalf("Encode(Decode(blob)) = %x, want %x", again, blob)
		}
	})
}
