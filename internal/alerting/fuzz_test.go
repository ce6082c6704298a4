package alerting

import (
	"math"
	"testing"

	"coinpulse"
)

// The values fuzzed targets and prices are drawn from: duplicates, both
// zeros, neighbours, extremes, NaN and the infinities.
var fuzzValues = []float64{
	0, math.Copysign(0, -1), 1, 2, 2, 3, 5, 8, 10, 10.5, -1, -2.5, 1e9,
	math.Nextafter(2, 3), math.Nextafter(2, 1), math.SmallestNonzeroFloat64,
	math.MaxFloat64, -math.MaxFloat64, math.NaN(), math.Inf(1), math.Inf(-1),
}

var fuzzCoins = []string{"btc", "eth", ""}

// fuzzOps reads operations from a fuzzer's bytes.
type fuzzOps struct{ b []byte }

func (f *fuzzOps) next() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *fuzzOps) value() float64 { return fuzzValues[int(f.next())%len(fuzzValues)] }
func (f *fuzzOps) coin() string   { return fuzzCoins[int(f.next())%len(fuzzCoins)] }

// FuzzIndex runs operations read from the input on an Index and on the
// model, and fails on any difference: in what a Cross, Tick or Remove
// returns, in Len, in the entries held at the end, or in the trees'
// invariants. Single adds use ids 0-31, so that replacing is frequent;
// bulk adds put up to 2048 entries at a time on a coin, on grid targets,
// so that trees grow to three levels and crossings take long prefixes.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 0, 3, 0, 4, 0, 6})                                                              // add, cross at the target: nothing
	f.Add([]byte{0, 1, 0, 3, 1, 4, 0, 7, 3, 1, 4, 0, 9})                                               // add, remove, cross
	f.Add([]byte{6, 200, 7, 0, 0, 4, 0, 10, 4, 1, 2})                                                  // bulk add, crossings
	f.Add([]byte{6, 255, 1, 0, 0, 6, 255, 2, 0, 1, 6, 255, 3, 0, 2, 7, 5, 9, 5, 3, 0, 6, 0, 5, 1, 13}) // bulk adds, bulk removes, tick
	f.Add([]byte{0, 1, 0, 18, 0, 4, 0, 5, 0, 1, 0, 19, 1, 4, 0, 5, 5, 3, 0, 5, 1, 5, 2, 20})
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, m := NewIndex(), newModel()
		ops := &fuzzOps{data}
		seq := int64(0)
		for op := 0; len(ops.b) > 0; op++ {
			switch ops.next() % 8 {
			case 0, 1, 2: // add
				seq++
				e := Entry{ID: int64(ops.next() % 32), ArmedSeq: seq}
				e.CoinID = ops.coin()
				e.Target = ops.value()
				e.Cond = coinpulse.Above
				if ops.next()%2 == 1 {
					e.Cond = coinpulse.Below
				}
				ix.Add(e)
				m.add(e)
			case 3: // remove
				id := int64(ops.next() % 32)
				if got, want := ix.Remove(id), m.remove(id); got != want {
					t.Fatalf("op %d: Remove(%d) = %v, want %v", op, id, got, want)
				}
			case 4: // cross
				coin, p := ops.coin(), ops.value()
				got := ix.Cross(nil, coin, p)
				if want := m.cross(coin, p); !sameEntries(got, want) {
					t.Fatalf("op %d: Cross(%q, %v) = %+v, want %+v", op, coin, p, got, want)
				}
			case 5: // tick
				prices := make([]Price, ops.next()%5)
				for i := range prices {
					prices[i] = Price{ops.coin(), ops.value()}
				}
				got := ix.Tick(nil, prices)
				if want := m.tick(prices); !sameEntries(got, want) {
					t.Fatalf("op %d: Tick(%v) = %+v, want %+v", op, prices, got, want)
				}
			case 6: // bulk add: 8-2048 entries of ids 32-8223 on grid targets 0-63
				n, x, coin, mode := 8*(int(ops.next())+1), uint32(ops.next())+1, ops.coin(), ops.next()%3
				for range n {
					x ^= x << 13 // xorshift32
					x ^= x >> 17
					x ^= x << 5
					seq++
					e := Entry{ID: 32 + int64(x%8192), ArmedSeq: seq, CoinID: coin, Target: float64(x >> 13 % 64), Cond: coinpulse.Above}
					if mode == 1 || mode == 2 && x>>19%2 == 1 {
						e.Cond = coinpulse.Below
					}
					ix.Add(e)
					m.add(e)
				}
			case 7: // bulk remove: every id from a to b
				a, b := int64(ops.next())*32, int64(ops.next())*32+64
				for id := a; id < b; id++ {
					if got, want := ix.Remove(id), m.remove(id); got != want {
						t.Fatalf("op %d: Remove(%d) = %v, want %v", op, id, got, want)
					}
				}
			}
			if ix.Len() != len(m.m) {
				t.Fatalf("op %d: Len() = %d, want %d", op, ix.Len(), len(m.m))
			}
		}
		checkIndex(t, ix)
		checkModel(t, ix, m)
	})
}
