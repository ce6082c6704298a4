package alerting

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	"coinpulse"
)

var (
	inf = math.Inf(1)
	nan = math.NaN()
)

func above(id int64, coin string, target float64) Entry {
	return Entry{ID: id, ArmedSeq: id * 10, CoinID: coin, Target: target, Cond: coinpulse.Above}
}

func below(id int64, coin string, target float64) Entry {
	return Entry{ID: id, ArmedSeq: id * 10, CoinID: coin, Target: target, Cond: coinpulse.Below}
}

func ids(es []Entry) []int64 {
	out := []int64{}
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func TestCross(t *testing.T) {
	for _, c := range []struct {
		name    string
		entries []Entry
		coin    string
		price   float64
		want    []int64 // ids crossed, in order
	}{
		{"above at the target", []Entry{above(1, "btc", 100)}, "btc", 100, nil},
		{"above past the target", []Entry{above(1, "btc", 100)}, "btc", math.Nextafter(100, inf), []int64{1}},
		{"above under the target", []Entry{above(1, "btc", 100)}, "btc", 99, nil},
		{"below at the target", []Entry{below(1, "btc", 100)}, "btc", 100, nil},
		{"below past the target", []Entry{below(1, "btc", 100)}, "btc", math.Nextafter(100, 0), []int64{1}},
		{"below over the target", []Entry{below(1, "btc", 100)}, "btc", 101, nil},
		{"zero targets, negative zero price", []Entry{above(1, "btc", 0), below(2, "btc", math.Copysign(0, -1))}, "btc", math.Copysign(0, -1), nil},
		{"another coin", []Entry{above(1, "btc", 100)}, "eth", 1000, nil},
		{"an unknown coin", nil, "btc", 1, nil},
		{"NaN price", []Entry{above(1, "btc", -inf), below(2, "btc", inf)}, "btc", nan, nil},
		{"+Inf price", []Entry{above(1, "btc", -inf), above(2, "btc", 100), below(3, "btc", inf)}, "btc", inf, nil},
		{"-Inf price", []Entry{above(1, "btc", -inf), below(2, "btc", 100), below(3, "btc", inf)}, "btc", -inf, nil},
		{"infinite targets, finite price", []Entry{above(1, "btc", -inf), above(2, "btc", inf), below(3, "btc", inf), below(4, "btc", -inf)}, "btc", 5, []int64{1, 3}},
		{"NaN target", []Entry{above(1, "btc", nan), below(2, "btc", nan)}, "btc", 5, nil},
		{"duplicate targets by id", []Entry{above(7, "btc", 10), above(3, "btc", 10), above(5, "btc", 10), above(1, "btc", 11)}, "btc", 10.5, []int64{3, 5, 7}},
		{
			"above ascending, then below descending",
			[]Entry{above(1, "btc", 3), above(2, "btc", 1), above(3, "btc", 2), below(4, "btc", 7), below(5, "btc", 9), below(6, "btc", 8), above(7, "btc", 6), below(8, "btc", 4)},
			"btc", 5,
			[]int64{2, 3, 1, 5, 6, 4},
		},
		{"crossed prefix only", []Entry{above(1, "btc", 1), above(2, "btc", 2), above(3, "btc", 3), below(4, "btc", 4), below(5, "btc", 3)}, "btc", 2.5, []int64{1, 2, 4, 5}},
		{"other condition taken as below", []Entry{{ID: 1, CoinID: "btc", Target: 10, Cond: "sideways"}}, "btc", 9, []int64{1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := NewIndex()
			m := newModel()
			for _, e := range c.entries {
				ix.Add(e)
				m.add(e)
			}
			got := ix.Cross(nil, c.coin, c.price)
			if !slices.Equal(ids(got), append([]int64{}, c.want...)) {
				t.Fatalf("Cross(%q, %v) = %v, want %v", c.coin, c.price, ids(got), c.want)
			}
			if want := m.cross(c.coin, c.price); !sameEntries(got, want) {
				t.Fatalf("Cross(%q, %v) = %+v, model says %+v", c.coin, c.price, got, want)
			}
			checkIndex(t, ix)
			checkModel(t, ix, m)
			// Crossed once: the same price again crosses nothing.
			if again := ix.Cross(nil, c.coin, c.price); len(again) != 0 {
				t.Fatalf("second Cross = %v, want none", ids(again))
			}
		})
	}
}

func TestCrossReportsEntries(t *testing.T) {
	ix := NewIndex()
	ix.Add(Entry{ID: 1, ArmedSeq: 42, CoinID: "btc", Target: 100, Cond: coinpulse.Above})
	ix.Add(Entry{ID: 2, ArmedSeq: 43, CoinID: "btc", Target: 200, Cond: coinpulse.Below})
	dst := []Entry{{ID: 99}}
	got := ix.Cross(dst, "btc", 150)
	want := []Entry{
		{ID: 99},
		{ID: 1, ArmedSeq: 42, CoinID: "btc", Target: 100, Cond: coinpulse.Above},
		{ID: 2, ArmedSeq: 43, CoinID: "btc", Target: 200, Cond: coinpulse.Below},
	}
	if !sameEntries(got, want) {
		t.Fatalf("Cross = %+v, want %+v", got, want)
	}
	if ix.Len() != 0 {
		t.Fatalf("Len() = %d after crossing everything", ix.Len())
	}
	checkIndex(t, ix)
}

func TestAddReplaces(t *testing.T) {
	for _, c := range []struct {
		name     string
		old, new Entry
		coin     string
		price    float64
		want     []Entry // what the price crosses
	}{
		{"newer arming in place", above(1, "btc", 10), Entry{ID: 1, ArmedSeq: 11, CoinID: "btc", Target: 10, Cond: coinpulse.Above}, "btc", 11,
			[]Entry{{ID: 1, ArmedSeq: 11, CoinID: "btc", Target: 10, Cond: coinpulse.Above}}},
		{"other target, old one not crossed", above(1, "btc", 10), above(1, "btc", 20), "btc", 15, nil},
		{"other target, new one crossed", above(1, "btc", 20), above(1, "btc", 10), "btc", 15, []Entry{above(1, "btc", 10)}},
		{"other condition", above(1, "btc", 10), below(1, "btc", 10), "btc", 11, nil},
		{"other condition, crossed", above(1, "btc", 10), below(1, "btc", 10), "btc", 9, []Entry{below(1, "btc", 10)}},
		{"other coin, old coin not crossed", above(1, "btc", 10), above(1, "eth", 10), "btc", 11, nil},
		{"other coin, crossed", above(1, "btc", 10), above(1, "eth", 10), "eth", 11, []Entry{above(1, "eth", 10)}},
		{"zero's sign", below(1, "btc", 0), below(1, "btc", math.Copysign(0, -1)), "btc", -1, []Entry{below(1, "btc", math.Copysign(0, -1))}},
		{"NaN to NaN", above(1, "btc", nan), Entry{ID: 1, ArmedSeq: 3, CoinID: "btc", Target: nan, Cond: coinpulse.Above}, "btc", 1e300, nil},
		{"NaN to a number", above(1, "btc", nan), above(1, "btc", 5), "btc", 6, []Entry{above(1, "btc", 5)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := NewIndex()
			ix.Add(above(2, "btc", inf)) // a neighbour, never crossed
			ix.Add(c.old)
			ix.Add(c.new)
			checkIndex(t, ix)
			if ix.Len() != 2 {
				t.Fatalf("Len() = %d, want 2", ix.Len())
			}
			if got, _ := ix.Get(1); !sameEntry(got, c.new) {
				t.Fatalf("Get(1) = %+v, want %+v", got, c.new)
			}
			if got := ix.Cross(nil, c.coin, c.price); !sameEntries(got, c.want) {
				t.Fatalf("Cross(%q, %v) = %+v, want %+v", c.coin, c.price, got, c.want)
			}
			checkIndex(t, ix)
		})
	}
}

func TestRemove(t *testing.T) {
	ix := NewIndex()
	for i := range int64(1000) {
		ix.Add(above(i, "btc", float64(i%10))) // duplicate targets
	}
	// From the middle, by id.
	for i := int64(100); i < 900; i += 2 {
		if !ix.Remove(i) {
			t.Fatalf("Remove(%d) = false", i)
		}
	}
	if ix.Remove(100) || ix.Remove(5000) {
		t.Fatal("Remove of an absent id = true")
	}
	checkIndex(t, ix)
	if got := ix.Len(); got != 600 {
		t.Fatalf("Len() = %d, want 600", got)
	}
	// Removed, then added back.
	ix.Add(above(100, "btc", 0))
	got := ix.Cross(nil, "btc", 0.5)
	var want []int64
	for i := int64(0); i < 1000; i += 10 {
		if i < 100 || i >= 900 || i%2 == 1 || i == 100 {
			want = append(want, i)
		}
	}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("Cross = %v, want %v", ids(got), want)
	}
	checkIndex(t, ix)
	// Removing the last entry forgets the coin.
	for i := range int64(1000) {
		ix.Remove(i)
	}
	if ix.Len() != 0 || len(ix.coins) != 0 {
		t.Fatalf("Len() = %d, %d coins after removing everything", ix.Len(), len(ix.coins))
	}
	ix.Add(below(1, "btc", 5))
	if got := ix.Cross(nil, "btc", 4); !slices.Equal(ids(got), []int64{1}) {
		t.Fatalf("Cross after re-adding = %v, want [1]", ids(got))
	}
}

func TestTick(t *testing.T) {
	ix := NewIndex()
	// Armed while the price was already past: crossed by the first tick.
	ix.Add(above(1, "btc", 50_000))
	ix.Add(below(2, "eth", 2_000))
	ix.Add(above(3, "eth", 3_000))
	ix.Add(below(4, "sol", 100))
	ix.Add(above(5, "sol", 150))
	got := ix.Tick(nil, []Price{
		{"btc", 60_000},
		{"eth", nan},
		{"sol", 120},
		{"eth", 1_900},
		{"eth", 1_800}, // 2 went with the first
		{"doge", 1},
		{"sol", 160},
		{"sol", inf},
	})
	if want := []int64{1, 2, 5}; !slices.Equal(ids(got), want) {
		t.Fatalf("Tick = %v, want %v", ids(got), want)
	}
	if got := ix.Tick(nil, []Price{{"btc", 70_000}, {"eth", 1_000}, {"sol", 140}}); len(got) != 0 {
		t.Fatalf("second Tick = %v, want none", ids(got))
	}
	if ix.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", ix.Len())
	}
	checkIndex(t, ix)
}

// A coin with a million entries is four levels deep, and a price that
// crosses them all leaves it empty.
func TestLargeCoin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a million entries")
	}
	ix := NewIndex()
	r := rand.New(rand.NewPCG(1, 2))
	const n = 1_000_000
	for i := range int64(n) {
		ix.Add(above(i, "btc", r.Float64()))
	}
	if h := ix.maxHeight(); h > 4 {
		t.Errorf("height %d for %d entries, want at most 4", h, n)
	}
	checkIndex(t, ix)
	for i := int64(0); i < n; i += 3 {
		ix.Remove(i)
	}
	checkIndex(t, ix)
	got := ix.Cross(nil, "btc", 0.5)
	for i, e := range got {
		if e.Target >= 0.5 || i > 0 && e.Target < got[i-1].Target {
			t.Fatalf("crossed %+v after %+v", e, got[i-1])
		}
	}
	checkIndex(t, ix)
	rest := ix.Len()
	if got := ix.Cross(nil, "btc", 1); len(got) != rest || ix.Len() != 0 {
		t.Fatalf("crossed %d of %d; %d left", len(got), rest, ix.Len())
	}
	checkIndex(t, ix)
}

// TestRandom holds Index to the model over random operations: coins
// whose prices walk on a grid, alerts set a little above and below the
// price (and now and then anywhere, at the price, or at NaN or ±Inf),
// re-arming, replacing and removing alerts, and single crossings and whole
// ticks. Every arming is crossed at most once, and only strictly.
func TestRandom(t *testing.T) {
	ops := 200_000
	if testing.Short() {
		ops = 20_000
	}
	r := rand.New(rand.NewPCG(3, 4))
	coins := []string{"btc", "eth", "sol"}
	price := []float64{500, 500, 500}
	ix, m := NewIndex(), newModel()
	var everAdded []int64
	seq := int64(0)
	fired := make(map[int64]bool) // armings crossed
	const maxID = 40_000
	var adds, removes, crossed, maxLen, maxHeight int

	record := func(got []Entry, prices map[string]float64) {
		for _, e := range got {
			if fired[e.ArmedSeq] {
				t.Fatalf("arming %d of alert %d crossed twice", e.ArmedSeq, e.ID)
			}
			fired[e.ArmedSeq] = true
			if p := prices[e.CoinID]; !e.Cond.Crossed(p, e.Target) {
				t.Fatalf("%+v crossed by %v", e, p)
			}
		}
		crossed += len(got)
	}
	for op := range ops {
		switch x := r.IntN(100); {
		case x < 55:
			var id int64
			if len(everAdded) > 0 && r.IntN(4) == 0 {
				id = everAdded[r.IntN(len(everAdded))] // re-arm or replace
			} else {
				id = r.Int64N(maxID)
			}
			ci := r.IntN(len(coins))
			seq++
			e := Entry{ID: id, ArmedSeq: seq, CoinID: coins[ci], Cond: coinpulse.Above}
			d := float64(1 + r.IntN(60))
			if r.IntN(2) == 0 {
				e.Cond = coinpulse.Below
				d = -d
			}
			e.Target = price[ci] + d
			switch r.IntN(50) {
			case 0:
				e.Target = float64(r.IntN(1000))
			case 1:
				e.Target = price[ci]
			case 2:
				e.Target = []float64{nan, inf, -inf, math.Copysign(0, -1), 0}[r.IntN(5)]
			}
			ix.Add(e)
			m.add(e)
			everAdded = append(everAdded, id)
			adds++
		case x < 80:
			id := r.Int64N(maxID)
			if len(everAdded) > 0 && r.IntN(2) == 0 {
				id = everAdded[r.IntN(len(everAdded))]
			}
			if got, want := ix.Remove(id), m.remove(id); got != want {
				t.Fatalf("op %d: Remove(%d) = %v, want %v", op, id, got, want)
			}
			removes++
		case x < 97:
			ci := r.IntN(len(coins))
			price[ci] = max(0, price[ci]+float64(r.IntN(7)-3))
			p := price[ci]
			if r.IntN(100) == 0 {
				p = []float64{nan, inf, -inf, p + 0.5}[r.IntN(4)]
			}
			got := ix.Cross(nil, coins[ci], p)
			if want := m.cross(coins[ci], p); !sameEntries(got, want) {
				t.Fatalf("op %d: Cross(%q, %v) = %v, want %v", op, coins[ci], p, ids(got), ids(want))
			}
			record(got, map[string]float64{coins[ci]: p})
		default:
			var prices []Price
			for ci := range coins {
				price[ci] = max(0, price[ci]+float64(r.IntN(7)-3))
				prices = append(prices, Price{coins[ci], price[ci]})
			}
			prices = append(prices, Price{"doge", 1}, Price{coins[0], nan})
			got := ix.Tick(nil, prices)
			if want := m.tick(prices); !sameEntries(got, want) {
				t.Fatalf("op %d: Tick(%v) = %v, want %v", op, prices, ids(got), ids(want))
			}
			pm := make(map[string]float64)
			for ci, c := range coins {
				pm[c] = price[ci]
			}
			record(got, pm)
		}
		if ix.Len() != len(m.m) {
			t.Fatalf("op %d: Len() = %d, want %d", op, ix.Len(), len(m.m))
		}
		maxLen = max(maxLen, len(m.m))
		if op%5000 == 0 {
			checkIndex(t, ix)
			checkModel(t, ix, m)
			maxHeight = max(maxHeight, ix.maxHeight())
		}
	}
	checkIndex(t, ix)
	checkModel(t, ix, m)
	t.Logf("%d adds, %d removes, %d crossed; at most %d entries, trees %d deep", adds, removes, crossed, maxLen, maxHeight)
	if !testing.Short() && maxHeight < 3 {
		t.Errorf("trees at most %d deep: the test does not reach inner-node rebalancing", maxHeight)
	}
}

// TestTreeRandom holds a single tree to a sorted slice over larger sizes
// than TestRandom reaches (four levels), with runs of inserts, deletes and
// crossings.
func TestTreeRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var tr tree
	tr.init(new(float64))
	var want []key // sorted
	nextID := int64(0)
	rounds := 200
	if testing.Short() {
		rounds = 30
	}
	maxH := 0
	for round := range rounds {
		switch r.IntN(5) {
		case 0, 1: // a run of inserts, duplicate k's
			for range r.IntN(40_000) {
				x := key{float64(r.IntN(5000)), nextID}
				nextID++
				tr.insert(x)
				want = append(want, x)
			}
			slices.SortFunc(want, cmpKey)
		case 2, 3: // a run of deletes, some absent
			gone := make(map[int64]bool)
			for range r.IntN(min(len(want), 30_000) + 1) {
				x := want[r.IntN(len(want))]
				if r.IntN(10) == 0 {
					x.id = -1 - x.id
				}
				if got := tr.delete(x); got != (x.id >= 0 && !gone[x.id]) {
					t.Fatalf("round %d: delete(%+v) = %v", round, x, got)
				}
				gone[x.id] = true
			}
			want = slices.DeleteFunc(want, func(x key) bool { return gone[x.id] })
		case 4: // a crossing, small or large
			p := float64(r.IntN(5000)) * math.Pow(r.Float64(), 4)
			if r.IntN(2) == 0 {
				p = float64(int(p))
			}
			got := tr.popLess(p, nil)
			n, _ := slices.BinarySearchFunc(want, key{p, math.MinInt64}, cmpKey)
			if !slices.Equal(got, want[:n]) {
				t.Fatalf("round %d: popLess(%v) = %d keys, want %d", round, p, len(got), n)
			}
			want = want[n:]
		}
		keys, err := tr.check()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !slices.Equal(keys, want) {
			t.Fatalf("round %d: tree holds %d keys, want %d", round, len(keys), len(want))
		}
		maxH = max(maxH, tr.height())
	}
	if !testing.Short() && maxH < 4 {
		t.Errorf("tree at most %d deep", maxH)
	}
	t.Logf("at most %d levels; %d keys at the end", maxH, len(want))
}

func cmpKey(a, b key) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}

func TestConcurrent(t *testing.T) {
	ix := NewIndex()
	var wg sync.WaitGroup
	const workers, per = 4, 2000
	fired := make([][]Entry, workers)
	removed := make([]int, workers)
	for w := range workers {
		wg.Go(func() {
			coin := "c" + strconv.Itoa(w%2)
			for i := range per {
				id := int64(w*per + i)
				ix.Add(above(id, coin, float64(i%100)))
				if i%3 == 0 && ix.Remove(id) {
					removed[w]++
				}
				if i%50 == 0 {
					fired[w] = ix.Tick(fired[w], []Price{{coin, float64(i % 100)}})
				}
			}
		})
	}
	wg.Wait()
	checkIndex(t, ix)
	n := ix.Len()
	seen := make(map[int64]bool)
	for _, fs := range fired {
		for _, e := range fs {
			if seen[e.ID] {
				t.Fatalf("alert %d crossed twice", e.ID)
			}
			seen[e.ID] = true
		}
	}
	want := workers * per
	for _, r := range removed {
		want -= r
	}
	if n+len(seen) != want {
		t.Fatalf("%d held + %d crossed, want %d (added less removed)", n, len(seen), want)
	}
}

// Tick allocates nothing, crossing or not, once dst has room.
//
// Allocations are counted process-wide, so both checks go through
// testing.AllocsPerRun, whose average over its runs rounds a stray
// allocation of another goroutine (a test's lingering evaluator) down to
// 0; a crossing tick consumes what it crosses, so each run crossing has
// an index of its own.
func TestTickAllocs(t *testing.T) {
	build := func() (*Index, []Price) {
		ix := NewIndex()
		var prices []Price
		for i := range 100 {
			c := "c" + strconv.Itoa(i)
			for j := range 100 {
				ix.Add(above(int64(1000*i+j), c, float64(100+j)))
				ix.Add(below(int64(1000*i+500+j), c, float64(50-j)))
			}
			prices = append(prices, Price{c, 75})
		}
		return ix, prices
	}
	ix, prices := build()
	dst := make([]Entry, 0, 1000)
	if n := testing.AllocsPerRun(100, func() { dst = ix.Tick(dst[:0], prices) }); n != 0 {
		t.Errorf("%v allocations per tick crossing nothing, want 0", n)
	}

	const runs = 10
	ixs := make([]*Index, runs+1) // AllocsPerRun runs once more to warm up
	dsts := make([][]Entry, runs+1)
	for k := range ixs {
		ixs[k], _ = build()
		ixs[k].Tick(nil, []Price{{"c0", 1000}}) // the first crossing sizes the scratch buffer
		dsts[k] = make([]Entry, 0, 2000)
	}
	for i := range prices {
		prices[i].Price = 120 // 20 entries each
	}
	k := 0
	n := testing.AllocsPerRun(runs, func() {
		dsts[k] = ixs[k].Tick(dsts[k], prices)
		k++
	})
	const want = 99 * 20 // c0's went with the first crossing
	for k, dst := range dsts {
		if len(dst) != want {
			t.Fatalf("index %d crossed %d, want %d", k, len(dst), want)
		}
	}
	if n != 0 {
		t.Errorf("%v allocations per tick crossing %d entries, want 0", n, want)
	}
}
