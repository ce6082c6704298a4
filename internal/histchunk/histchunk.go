// Package histchunk is the storage encoding of price history that both
// store engines share. History is kept as chunk rows rather than a row per
// point, so that a backfill of ten thousand coins writes about two hundred
// thousand rows instead of tens of millions.
//
// A chunk holds one coin's points at one interval within one bucket:
//
//   - hourly chunks span one week: 168 slots, one per hour, starting on a
//     multiple of 168 hours since the Unix epoch (Thursdays, 00:00 UTC);
//   - daily chunks span 256 days: 256 slots, one per day, starting on a
//     multiple of 256 days since the Unix epoch.
//
// Its blob is a presence bitmap (ceil(slots/64) uint64 words, little-endian,
// bit i%64 of word i/64 set when slot i holds a point) followed, for each
// present slot in ascending order, by the point's price, market cap and
// total volume as little-endian IEEE 754 float64s. Values round-trip bit
// for bit. (Chunks were a day and 64 days until the first release; larger
// ones cut a 10,000-coin backfill's rows eightfold.)
package histchunk

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"coinpulse"
)

const (
	// HourlySlots is the number of points an hourly chunk holds.
	HourlySlots = 168
	// DailySlots is the number of points a daily chunk holds.
	DailySlots = 256

	maxSlots = DailySlots
	slotLen  = 3 * 8  // price, market cap, total volume
	daySecs  = 86_400 // seconds in a UTC day
)

// words is the number of bitmap words of a chunk of that many slots.
func words(slots int64) int { return int(slots+63) / 64 }

// Check returns nil when interval is Hourly or Daily, and a
// VALIDATION_ERROR naming the field "interval" otherwise.
func Check(interval coinpulse.Interval) error {
	if interval != coinpulse.Hourly && interval != coinpulse.Daily {
		return coinpulse.ValidationError("interval", "must be hourly or daily")
	}
	return nil
}

// layout returns the step between slots and the slot count, in seconds
// and slots. Any interval other than Hourly is laid out as Daily, like
// Interval.Step.
func layout(interval coinpulse.Interval) (step, slots int64) {
	if interval == coinpulse.Hourly {
		return 3600, HourlySlots
	}
	return daySecs, DailySlots
}

// Span returns the length of time a chunk of interval covers: a week for
// Hourly, 256 days for Daily (and for any other value, as Interval.Step
// does). It returns no error.
func Span(interval coinpulse.Interval) time.Duration {
	step, slots := layout(interval)
	return time.Duration(step*slots) * time.Second
}

// Bucket returns the start (UTC, whole seconds) of the chunk of interval
// that holds time t. Any interval other than Hourly is treated as Daily,
// as Interval.Step does; call Check first when the interval comes from
// outside. It returns no error.
func Bucket(interval coinpulse.Interval, t time.Time) time.Time {
	step, slots := layout(interval)
	span := step * slots
	return time.Unix(floorDiv(t.Unix(), span)*span, 0).UTC()
}

// floorDiv divides rounding towards negative infinity, so that times
// before 1970 fall in the right bucket too.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// checkBucket reports an error unless bucket is the start of a chunk.
func checkBucket(interval coinpulse.Interval, bucket time.Time) error {
	if err := Check(interval); err != nil {
		return err
	}
	if !Bucket(interval, bucket).Equal(bucket) {
		return fmt.Errorf("histchunk: %v is not the start of a %s chunk", bucket, interval)
	}
	return nil
}

// slot returns the index of t in the chunk of interval starting at bucket,
// or a VALIDATION_ERROR when t is not on the interval's step or not inside
// the chunk.
func slot(interval coinpulse.Interval, bucket, t time.Time) (int, error) {
	step, slots := layout(interval)
	off := t.Unix() - bucket.Unix()
	if t.Nanosecond() != 0 || off%step != 0 {
		return 0, coinpulse.ValidationError("timestamp",
			fmt.Sprintf("%s is not a multiple of the %s step", t.UTC().Format(time.RFC3339Nano), interval))
	}
	if off < 0 || off/step >= slots {
		return 0, coinpulse.ValidationError("timestamp",
			fmt.Sprintf("%s is outside the %s chunk starting %s", t.UTC().Format(time.RFC3339), interval, bucket.Format(time.RFC3339)))
	}
	return int(off / step), nil
}

// chunk is a decoded blob: which slots are present and their values.
type chunk struct {
	present [maxSlots / 64]uint64
	values  [maxSlots][3]float64
}

func (c *chunk) has(i int) bool { return c.present[i/64]&(1<<(i%64)) != 0 }

func (c *chunk) count() int {
	n := 0
	for _, w := range c.present {
		n += bits.OnesCount64(w)
	}
	return n
}

// checkFinite returns a VALIDATION_ERROR when a value of p is NaN or
// infinite: JSON cannot carry those, so they are never stored.
func checkFinite(p coinpulse.HistoryPoint) error {
	if !finite(p.Price) || !finite(p.MarketCap) || !finite(p.TotalVolume) {
		return coinpulse.ValidationError("history",
			fmt.Sprintf("the point at %s holds a value that is not a finite number", p.Timestamp.UTC().Format(time.RFC3339)))
	}
	return nil
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func (c *chunk) set(i int, p coinpulse.HistoryPoint) error {
	if err := checkFinite(p); err != nil {
		return err
	}
	c.present[i/64] |= 1 << (i % 64)
	c.values[i] = [3]float64{p.Price, p.MarketCap, p.TotalVolume}
	return nil
}

func (c *chunk) encode(interval coinpulse.Interval) []byte {
	_, slots := layout(interval)
	nw := words(slots)
	out := make([]byte, 0, 8*nw+slotLen*c.count())
	for _, w := range c.present[:nw] {
		out = binary.LittleEndian.AppendUint64(out, w)
	}
	for i := range int(slots) {
		if !c.has(i) {
			continue
		}
		for _, v := range c.values[i] {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
	}
	return out
}

func decode(interval coinpulse.Interval, blob []byte) (*chunk, error) {
	_, slots := layout(interval)
	nw := words(slots)
	if len(blob) < 8*nw {
		return nil, fmt.Errorf("histchunk: blob of %d bytes is shorter than its %d-byte header", len(blob), 8*nw)
	}
	c := &chunk{}
	for i := range nw {
		c.present[i] = binary.LittleEndian.Uint64(blob[8*i:])
	}
	if rem := slots % 64; rem != 0 && c.present[nw-1]>>rem != 0 {
		return nil, fmt.Errorf("histchunk: bitmap marks slots beyond the %d of a %s chunk", slots, interval)
	}
	if want := 8*nw + slotLen*c.count(); len(blob) != want {
		return nil, fmt.Errorf("histchunk: blob is %d bytes, its bitmap calls for %d", len(blob), want)
	}
	b := blob[8*nw:]
	for i := range int(slots) {
		if !c.has(i) {
			continue
		}
		for j := range 3 {
			c.values[i][j] = math.Float64frombits(binary.LittleEndian.Uint64(b))
			b = b[8:]
		}
	}
	return c, nil
}

// Encode returns the blob of the chunk of interval starting at bucket that
// holds points; of two points at one timestamp the later in the slice
// wins. It returns a VALIDATION_ERROR when interval is unknown, when a
// timestamp is not a multiple of the interval's step or lies outside the
// chunk, or when a value is NaN or infinite; and a plain error when bucket
// is not the start of a chunk.
func Encode(interval coinpulse.Interval, bucket time.Time, points []coinpulse.HistoryPoint) ([]byte, error) {
	return Merge(interval, bucket, nil, points)
}

// Decode returns the points of a blob made by Encode or Merge for the
// chunk of interval starting at bucket, oldest first, with timestamps in
// UTC. A malformed blob is an error (never a panic); an unknown interval is
// a VALIDATION_ERROR.
func Decode(interval coinpulse.Interval, bucket time.Time, blob []byte) ([]coinpulse.HistoryPoint, error) {
	if err := checkBucket(interval, bucket); err != nil {
		return nil, err
	}
	c, err := decode(interval, blob)
	if err != nil {
		return nil, err
	}
	step, slots := layout(interval)
	start := bucket.Unix()
	points := make([]coinpulse.HistoryPoint, 0, c.count())
	for i := range int(slots) {
		if !c.has(i) {
			continue
		}
		v := c.values[i]
		points = append(points, coinpulse.HistoryPoint{
			Timestamp:   time.Unix(start+int64(i)*step, 0).UTC(),
			Price:       v[0],
			MarketCap:   v[1],
			TotalVolume: v[2],
		})
	}
	return points, nil
}

// Merge returns the blob of the chunk holding the points of existing (a
// blob as Encode makes; nil or empty for none) and newPoints, a new point
// replacing an existing one at the same timestamp. It returns the errors of
// Encode, and a plain error when existing is malformed.
func Merge(interval coinpulse.Interval, bucket time.Time, existing []byte, newPoints []coinpulse.HistoryPoint) ([]byte, error) {
	if err := checkBucket(interval, bucket); err != nil {
		return nil, err
	}
	c := &chunk{}
	if len(existing) > 0 {
		var err error
		if c, err = decode(interval, existing); err != nil {
			return nil, err
		}
	}
	for _, p := range newPoints {
		i, err := slot(interval, bucket, p.Timestamp)
		if err != nil {
			return nil, err
		}
		if err := c.set(i, p); err != nil {
			return nil, err
		}
	}
	return c.encode(interval), nil
}

// TrimBefore returns existing without its points older than before, and
// how many points remain (when none do, the caller should delete the
// chunk). It returns the errors of Decode.
func TrimBefore(interval coinpulse.Interval, bucket time.Time, existing []byte, before time.Time) ([]byte, int, error) {
	points, err := Decode(interval, bucket, existing)
	if err != nil {
		return nil, 0, err
	}
	i := 0
	for i < len(points) && points[i].Timestamp.Before(before) {
		i++
	}
	points = points[i:]
	blob, err := Encode(interval, bucket, points)
	return blob, len(points), err
}

// Chunk is the points of one series that fall in one chunk.
type Chunk struct {
	Bucket time.Time // the chunk's start, UTC
	Points []coinpulse.HistoryPoint
}

// Group splits points into the chunks of interval they fall in, ordered by
// bucket; within a chunk points keep their order. When points are in
// chronological order (as feeds give them) each chunk's Points is a slice
// of points, not a copy. It returns a VALIDATION_ERROR when interval is
// unknown, a timestamp is not a multiple of the interval's step, or a value
// is NaN or infinite.
func Group(interval coinpulse.Interval, points []coinpulse.HistoryPoint) ([]Chunk, error) {
	if err := Check(interval); err != nil {
		return nil, err
	}
	step, slots := layout(interval)
	span := step * slots
	bucketOf := func(p coinpulse.HistoryPoint) int64 { return floorDiv(p.Timestamp.Unix(), span) * span }

	ordered := true
	for i, p := range points {
		sec := p.Timestamp.Unix()
		if p.Timestamp.Nanosecond() != 0 || sec-floorDiv(sec, step)*step != 0 {
			return nil, coinpulse.ValidationError("timestamp",
				fmt.Sprintf("%s is not a multiple of the %s step", p.Timestamp.UTC().Format(time.RFC3339Nano), interval))
		}
		if err := checkFinite(p); err != nil {
			return nil, err
		}
		if i > 0 && bucketOf(p) < bucketOf(points[i-1]) {
			ordered = false
		}
	}

	var chunks []Chunk
	if ordered {
		// Cut points into runs of one bucket each.
		for i := 0; i < len(points); {
			b := bucketOf(points[i])
			j := i + 1
			for j < len(points) && bucketOf(points[j]) == b {
				j++
			}
			chunks = append(chunks, Chunk{Bucket: time.Unix(b, 0).UTC(), Points: points[i:j:j]})
			i = j
		}
		return chunks, nil
	}

	index := make(map[int64]int) // bucket seconds → position in chunks
	for _, p := range points {
		b := bucketOf(p)
		i, ok := index[b]
		if !ok {
			i = len(chunks)
			index[b] = i
			chunks = append(chunks, Chunk{Bucket: time.Unix(b, 0).UTC()})
		}
		chunks[i].Points = append(chunks[i].Points, p)
	}
	slices.SortFunc(chunks, func(a, b Chunk) int { return a.Bucket.Compare(b.Bucket) })
	return chunks, nil
}

// SeriesChunks is the points of one coin grouped by chunk.
type SeriesChunks struct {
	CoinID string
	Chunks []Chunk // ordered by bucket
}

// GroupSeries groups the points of every series by coin and chunk, coins
// in order of first appearance; series of the same coin are joined, so
// that of two points at one timestamp the later wins. Coins without
// points are left out. It returns Group's VALIDATION_ERRORs.
func GroupSeries(interval coinpulse.Interval, series []coinpulse.Series) ([]SeriesChunks, error) {
	if err := Check(interval); err != nil {
		return nil, err
	}
	index := make(map[string]int)
	var coins []string
	var points [][]coinpulse.HistoryPoint
	for _, s := range series {
		i, ok := index[s.CoinID]
		if !ok {
			i = len(coins)
			index[s.CoinID] = i
			coins = append(coins, s.CoinID)
			points = append(points, nil)
		}
		if points[i] == nil {
			points[i] = s.Points // no copy in the usual case of one series a coin
		} else {
			points[i] = append(slices.Clip(points[i]), s.Points...)
		}
	}
	out := make([]SeriesChunks, 0, len(coins))
	for i, coin := range coins {
		chunks, err := Group(interval, points[i])
		if err != nil {
			return nil, err
		}
		if len(chunks) > 0 {
			out = append(out, SeriesChunks{CoinID: coin, Chunks: chunks})
		}
	}
	return out, nil
}
