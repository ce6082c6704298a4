package market

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"coinpulse"
)

// The saved state is a compact binary record, not gob: a warm start of
// 10,000 coins reads and decodes it on the way to ready. Little-endian:
//
//	"CPS1" fingerprint lastHour lastDay count coin*
//	coin: id flags price mcap volume updated ath atl athDate atlDate hourly daily
//	hourly: start step keep n price[n]f64 cap[n]f64
//	daily:  start step keep n price[n]f32
//
// Strings are a uvarint length and bytes; times are Unix nanoseconds
// (int64, 0 for the zero time); counts are uvarints. A coin's info is not
// saved: it comes from the feed at start.
const stateMagic = "CPS1"

type stateWriter struct{ b []byte }

func (w *stateWriter) str(s string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(s)))
	w.b = append(w.b, s...)
}
func (w *stateWriter) u(v uint64)    { w.b = binary.AppendUvarint(w.b, v) }
func (w *stateWriter) i64(v int64)   { w.b = binary.LittleEndian.AppendUint64(w.b, uint64(v)) }
func (w *stateWriter) f64(v float64) { w.i64(int64(math.Float64bits(v))) }
func (w *stateWriter) t(v time.Time) {
	if v.IsZero() {
		w.i64(0)
		return
	}
	w.i64(v.UnixNano())
}

func writeRing[T float32 | float64](w *stateWriter, r *ring[T]) {
	w.i64(r.Start)
	w.i64(r.Step)
	w.u(uint64(r.Keep))
	w.u(uint64(len(r.Price)))
	put := func(vs []T) {
		for _, v := range vs {
			switch x := any(v).(type) {
			case float64:
				w.f64(x)
			case float32:
				w.b = binary.LittleEndian.AppendUint32(w.b, math.Float32bits(x))
			}
		}
	}
	put(r.Price)
	if r.Caps {
		put(r.Cap)
	}
}

// encodeState renders s.
func encodeState(s *savedState, order []string) []byte {
	w := &stateWriter{b: make([]byte, 0, 64+len(s.Coins)*2200)}
	w.b = append(w.b, stateMagic...)
	w.str(s.Fingerprint)
	w.t(s.LastHour)
	w.t(s.LastDay)
	w.u(uint64(len(order)))
	for _, id := range order {
		c := s.Coins[id]
		w.str(id)
		var flags byte
		if c.HasQuote {
			flags |= 1
		}
		if c.HasExtreme {
			flags |= 2
		}
		if c.NoVolume {
			flags |= 4
		}
		w.b = append(w.b, flags)
		for _, v := range []float64{c.Price, c.MarketCap, c.Volume} {
			w.f64(v)
		}
		w.t(c.Updated)
		w.f64(c.ATH)
		w.f64(c.ATL)
		w.t(c.ATHDate)
		w.t(c.ATLDate)
		writeRing(w, &c.Hourly)
		writeRing(w, &c.Daily)
	}
	return w.b
}

var errStateCorrupt = errors.New("saved market state is corrupt")

type stateReader struct {
	b   []byte
	err error
}

func (r *stateReader) take(n int) []byte {
	if r.err != nil || n < 0 || len(r.b) < n {
		r.err = errStateCorrupt
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}
func (r *stateReader) u() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errStateCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}
func (r *stateReader) count(max uint64) int {
	v := r.u()
	if v > max {
		r.err = errStateCorrupt
		return 0
	}
	return int(v)
}
func (r *stateReader) str() string { return string(r.take(r.count(1 << 20))) }
func (r *stateReader) i64() int64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(b))
}
func (r *stateReader) f64() float64 { return math.Float64frombits(uint64(r.i64())) }
func (r *stateReader) t() time.Time {
	if ns := r.i64(); ns != 0 {
		return time.Unix(0, ns).UTC()
	}
	return time.Time{}
}

func readRing[T float32 | float64](r *stateReader, dst *ring[T]) {
	dst.Start, dst.Step = r.i64(), r.i64()
	dst.Keep = r.count(1 << 16)
	n := r.count(uint64(dst.Keep))
	if dst.Step <= 0 && r.err == nil {
		r.err = errStateCorrupt
	}
	get := func() []T {
		vs := make([]T, n, dst.Keep)
		for i := range vs {
			var zero T
			switch any(zero).(type) {
			case float64:
				vs[i] = T(r.f64())
			case float32:
				if b := r.take(4); b != nil {
					vs[i] = T(math.Float32frombits(binary.LittleEndian.Uint32(b)))
				}
			}
		}
		return vs
	}
	dst.Price = get()
	if dst.Caps {
		dst.Cap = get()
	}
}

// decodeState parses a record made by encodeState; rings keep their Caps
// setting from newCoinState.
func decodeState(b []byte) (savedState, error) {
	var s savedState
	r := &stateReader{b: b}
	if string(r.take(len(stateMagic))) != stateMagic {
		return s, errStateCorrupt
	}
	s.Fingerprint = r.str()
	s.LastHour, s.LastDay = r.t(), r.t()
	n := r.count(10_000_000)
	s.Coins = make(map[string]*coinState, min(n, 1<<20))
	for range n {
		if r.err != nil {
			break
		}
		id := r.str()
		c := newCoinState(coinpulse.CoinInfo{ID: id})
		flags := r.take(1)
		if flags != nil {
			c.HasQuote, c.HasExtreme, c.NoVolume = flags[0]&1 != 0, flags[0]&2 != 0, flags[0]&4 != 0
		}
		c.Price, c.MarketCap, c.Volume = r.f64(), r.f64(), r.f64()
		c.Updated = r.t()
		c.ATH, c.ATL = r.f64(), r.f64()
		c.ATHDate, c.ATLDate = r.t(), r.t()
		readRing(r, &c.Hourly)
		readRing(r, &c.Daily)
		s.Coins[id] = c
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", errStateCorrupt, len(r.b))
	}
	return s, r.err
}
