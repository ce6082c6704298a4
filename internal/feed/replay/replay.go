// Package replay is the market feed that plays recorded daily prices: a
// directory laid out as ../shared/datasets/coingecko-2021 (coinlist.csv
// naming the coins, coins/<id>.csv holding each one's daily figures), on a
// loop, at the speed of the clock.
//
// The recording spans whole days from its first day to its last; its
// length is the loop's period (365 days for a calendar year). The feed's
// clock maps an instant t to the recording's instant start + ((t − start)
// mod period), so that t = start plays the first day: in the recording's
// own year the feed serves each day's real figures on that day, and every
// period after it plays the recording again. Between two recorded points
// the price moves geometrically (a constant rate of change), and after the
// last point it moves the same way toward the first one, one period
// later, so the loop has no jump. A row of unknown price (see Row) is no
// point: the price moves over it. The price is therefore a pure function
// of the recording and the instant: every node, and every restart, serves
// the same figures.
//
// A coin is served only when it was recorded for the whole span (a point
// on the first day and one on the last): a coin listed during the
// recording, or delisted before its end, has no figures for part of each
// loop. Its market cap is its price times its circulating supply, taken as
// the recording's last market cap over the price then (0 when the
// recording never knew its market cap): CoinGecko's daily market caps are
// missing (0) on many days.
package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"coinpulse"
)

// version versions the way figures are derived from a recording: the
// engine's saved state is reused only by the same one (see String).
const version = 1

const day = 24 * time.Hour

// maxSpan bounds a recording's span: a century, far within what a
// time.Duration holds.
const maxSpan = 100 * 366 * day

// Feed plays a recording. Its methods are safe for concurrent use: after
// Load it is read only.
type Feed struct {
	dir    string
	start  time.Time     // the recording's first instant, 00:00 UTC of its first day
	period time.Duration // its whole days
	coins  []*coin
	byID   map[string]*coin
	sum    uint64 // of every file read, for String
	left   []string
	// unknown names the coins with rows of unknown price, and how many.
	unknown []string
}

// coin is one coin's recording.
type coin struct {
	info   coinpulse.CoinInfo
	at     []int64 // milliseconds since the feed's start, increasing, in [0, period)
	price  []float64
	logP   []float64 // log(price), for interpolating
	volume []float64
}

var _ coinpulse.Feed = (*Feed)(nil)

// Load reads the recording in dir: coinlist.csv, then coins/<id>.csv for
// each coin it lists. A coin listed without a file is left out, as one
// not recorded for the whole span (see LeftOut); a file that does not
// parse is an error naming it and its line.
func Load(dir string) (*Feed, error) {
	f := &Feed{dir: dir, byID: map[string]*coin{}}
	h := fnv.New64a()
	listPath := filepath.Join(dir, "coinlist.csv")
	list, err := readList(listPath, h)
	if err != nil {
		return nil, err
	}
	type recorded struct {
		CoinList
		rows []Row
	}
	var all []recorded
	var first, last time.Time
	var firstBy, lastBy string // the coins whose rows set the span
	for _, c := range list {
		path := filepath.Join(dir, "coins", c.ID+".csv")
		rows, err := readCoin(path, c.ID, h)
		if errors.Is(err, fs.ErrNotExist) {
			f.left = append(f.left, c.ID)
			continue
		}
		if err != nil {
			return nil, err
		}
		// Rows of unknown price are not points: the price moves over them.
		known := rows[:0]
		for _, r := range rows {
			if r.Price > 0 {
				known = append(known, r)
			}
		}
		if n := len(rows) - len(known); n > 0 {
			f.unknown = append(f.unknown, fmt.Sprintf("%s (%d)", c.ID, n))
		}
		if rows = known; len(rows) == 0 {
			f.left = append(f.left, c.ID)
			continue
		}
		if first.IsZero() || rows[0].Time.Before(first) {
			first, firstBy = rows[0].Time, c.ID
		}
		if end := rows[len(rows)-1].Time; end.After(last) {
			last, lastBy = end, c.ID
		}
		all = append(all, recorded{c, rows})
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%s: none of the %d coins of %s has a file %s", dir, len(list), listPath, filepath.Join(dir, "coins", "<id>.csv"))
	}
	if last.Sub(first) > maxSpan {
		return nil, fmt.Errorf("%s: the recording spans from %s (%s's first row) to %s (%s's last): at most %d years", dir,
			first.Format(time.DateOnly), firstBy, last.Format(time.DateOnly), lastBy, maxSpan/(366*day))
	}
	f.start = first.Truncate(day)
	lastDay := last.Truncate(day)
	f.period = lastDay.Sub(f.start) + day
	for _, r := range all {
		// Recorded for the whole span: a point on the first day and one on
		// the last.
		if r.rows[0].Time.Sub(f.start) >= day || r.rows[len(r.rows)-1].Time.Before(lastDay) {
			f.left = append(f.left, r.ID)
			continue
		}
		c := newCoin(r.CoinList, r.rows, f.start)
		f.coins = append(f.coins, c)
		f.byID[c.info.ID] = c
	}
	if len(f.coins) == 0 {
		return nil, fmt.Errorf("%s: no coin is recorded from the first day (%s, %s's first row) to the last (%s, %s's last)", dir,
			f.start.Format(time.DateOnly), firstBy, lastDay.Format(time.DateOnly), lastBy)
	}
	sort.Strings(f.left)
	f.sum = h.Sum64()
	return f, nil
}

// maxFileSize bounds a file of the recording (coingecko-2021's largest
// is 60 KB): a mistaken path (a device, a huge file) does not take the
// server's memory.
const maxFileSize = 64 << 20

// readFile reads a regular file of at most maxFileSize bytes into h too.
func readFile(path string, h hash.Hash) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err // names the path
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxFileSize {
		return nil, fmt.Errorf("%s: want a regular file of at most %d MiB", path, maxFileSize>>20)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err == nil && len(b) > maxFileSize {
		err = fmt.Errorf("%s: want a regular file of at most %d MiB", path, maxFileSize>>20)
	}
	if err != nil {
		return nil, err
	}
	h.Write(b)
	return b, nil
}

func readList(path string, h hash.Hash) ([]CoinList, error) {
	b, err := readFile(path, h)
	if err != nil {
		return nil, err
	}
	list, err := ParseCoinList(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return list, nil
}

func readCoin(path, id string, h hash.Hash) ([]Row, error) {
	h.Write([]byte(id))
	b, err := readFile(path, h)
	if err != nil {
		return nil, err
	}
	rows, err := ParseCoin(bytes.NewReader(b), id)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// newCoin keeps a coin's rows (the intraday row CoinGecko's files end
// with too: it falls within the last day) and derives its supply.
func newCoin(l CoinList, rows []Row, start time.Time) *coin {
	c := &coin{info: coinpulse.CoinInfo{ID: l.ID, Symbol: l.Symbol, Name: l.Name, ListedAt: start}}
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].MarketCap > 0 {
			c.info.CirculatingSupply = rows[i].MarketCap / rows[i].Price
			break
		}
	}
	for _, r := range rows {
		c.at = append(c.at, r.Time.Sub(start).Milliseconds())
		c.price = append(c.price, r.Price)
		c.logP = append(c.logP, math.Log(r.Price))
		c.volume = append(c.volume, r.TotalVolume)
	}
	return c
}

// Name returns "replay".
func (f *Feed) Name() string { return "replay" }

// Simulated returns true: the figures are real, but not the market's at
// the instant they are served.
func (f *Feed) Simulated() bool { return true }

// String describes the recording for the engine's saved state and the
// log: a different recording (or way of playing it) backfills anew.
func (f *Feed) String() string {
	return fmt.Sprintf("replay/v%d(%d coins, %s to %s, %016x)", version, len(f.coins),
		f.start.Format(time.DateOnly), f.start.Add(f.period-day).Format(time.DateOnly), f.sum)
}

// Start is the recording's first instant; Period its length, the loop's.
func (f *Feed) Start() time.Time      { return f.start }
func (f *Feed) Period() time.Duration { return f.period }

// LeftOut lists, sorted, the coins of coinlist.csv not served: without a
// file, or not recorded for the whole span.
func (f *Feed) LeftOut() []string { return slices.Clone(f.left) }

// UnknownPrices lists the coins whose files have rows of unknown price
// (0, or beyond what a price can be), with how many: "veritaseum (3)".
func (f *Feed) UnknownPrices() []string { return slices.Clone(f.unknown) }

// Universe returns the coins served, in coinlist.csv's order.
func (f *Feed) Universe(context.Context) ([]coinpulse.CoinInfo, error) {
	out := make([]coinpulse.CoinInfo, len(f.coins))
	for i, c := range f.coins {
		out[i] = c.info
	}
	return out, nil
}

// Quotes returns every coin's figures at now (none before the recording's
// start).
func (f *Feed) Quotes(_ context.Context, now time.Time) ([]coinpulse.Quote, error) {
	if now.Before(f.start) {
		return nil, nil
	}
	phase := f.phase(now)
	out := make([]coinpulse.Quote, 0, len(f.coins))
	for _, c := range f.coins {
		p := c.point(phase, f.period)
		// A volume of 0 is one the recording does not know (see Row).
		out = append(out, coinpulse.Quote{CoinID: c.info.ID, Price: p.Price, MarketCap: p.MarketCap, TotalVolume: p.TotalVolume, NoVolume: p.TotalVolume == 0, Time: now})
	}
	return out, nil
}

// History returns a coin's points at interval in [from, to] (from the
// recording's start at the earliest), on the interval's UTC grid, oldest
// first.
func (f *Feed) History(_ context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	c := f.byID[info.ID]
	if c == nil {
		return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "no coin %q in the replay of %s", info.ID, f.dir)
	}
	step := interval.Step()
	if from.Before(f.start) {
		from = f.start
	}
	t := from.Truncate(step)
	if t.Before(from) {
		t = t.Add(step)
	}
	var out []coinpulse.HistoryPoint
	for ; !t.After(to); t = t.Add(step) {
		p := c.point(f.phase(t), f.period)
		p.Timestamp = t
		out = append(out, p)
	}
	return out, nil
}

// phase is how far into the loop the instant t is, in milliseconds.
func (f *Feed) phase(t time.Time) int64 {
	p := t.Sub(f.start).Milliseconds() % f.period.Milliseconds()
	if p < 0 {
		p += f.period.Milliseconds()
	}
	return p
}

// point is the coin's figures at phase milliseconds into the loop: between
// the recorded points around it, geometrically for the price (and so the
// market cap) and for a volume recorded on both sides, linearly for one
// missing (0) on a side. Past the last point the next one is the first,
// a period later; before the first, the previous one is the last, a
// period earlier.
func (c *coin) point(phase int64, period time.Duration) coinpulse.HistoryPoint {
	n := len(c.at)
	j, _ := slices.BinarySearch(c.at, phase) // c.at[j-1] < phase <= c.at[j]
	if j < n && c.at[j] == phase {
		return c.figures(c.price[j], c.volume[j])
	}
	ms := period.Milliseconds()
	a, b := j-1, j
	ta, tb := int64(0), int64(0)
	switch {
	case n == 1:
		return c.figures(c.price[0], c.volume[0])
	case j == 0:
		a, ta, tb = n-1, c.at[n-1]-ms, c.at[0]
	case j == n:
		b, ta, tb = 0, c.at[n-1], c.at[0]+ms
	default:
		ta, tb = c.at[a], c.at[b]
	}
	x := float64(phase-ta) / float64(tb-ta)
	price := math.Exp(c.logP[a] + x*(c.logP[b]-c.logP[a]))
	va, vb := c.volume[a], c.volume[b]
	v := va + x*(vb-va)
	if va > 0 && vb > 0 {
		v = math.Exp(math.Log(va) + x*(math.Log(vb)-math.Log(va)))
	}
	return c.figures(price, v)
}

func (c *coin) figures(price, volume float64) coinpulse.HistoryPoint {
	return coinpulse.HistoryPoint{Price: price, MarketCap: price * c.info.CirculatingSupply, TotalVolume: volume}
}
