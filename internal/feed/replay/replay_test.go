package replay

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"coinpulse"
)

// dataset is the real recording the feed was made for; tests of it skip
// when ../shared is absent (a clone on its own).
const dataset = "../../../../shared/datasets/coingecko-2021"

var ctx = context.Background()

// needDataset skips tb when the real recording is absent.
func needDataset(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat(dataset); err != nil {
		tb.Skipf("no recording at %s (../shared is absent): %v", dataset, err)
	}
}

func TestParseCoin(t *testing.T) {
	in := "\ufefftimestamp,readableTimestamp,coinId,price,marketCap,totalVolume\n" +
		`1609459200000,"1/1/2021, 12:00:00 AM",bitcoin,29022.41,539438036435.67,43503516563.29` + "\n" +
		`1609545600000,"1/2/2021, 12:00:00 AM",bitcoin,29352.12,,0` + "\n"
	rows, err := ParseCoin(strings.NewReader(in), "bitcoin")
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC), 29022.41, 539438036435.67, 43503516563.29},
		{time.Date(2021, 1, 2, 0, 0, 0, 0, time.UTC), 29352.12, 0, 0},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i := range want {
		if !rows[i].Time.Equal(want[i].Time) || rows[i].Price != want[i].Price || rows[i].MarketCap != want[i].MarketCap || rows[i].TotalVolume != want[i].TotalVolume {
			t.Errorf("row %d: %+v, want %+v", i, rows[i], want[i])
		}
	}

	const head = "timestamp,readableTimestamp,coinId,price,marketCap,totalVolume\n"
	// Figures that cannot be are unknown (0): veritaseum's price of 1e-35.
	for _, in := range []string{"0,0,0", "1.0239229664654485e-35,1e300,2e18", "2e15,1e19,1e300", "1e400,1e400,1e-400", "1e-400,,"} {
		rows, err := ParseCoin(strings.NewReader(head+"1609459200000,x,bitcoin,"+in+"\n"), "bitcoin")
		if err != nil || len(rows) != 1 || rows[0].Price != 0 || rows[0].MarketCap != 0 || rows[0].TotalVolume != 0 {
			t.Errorf("%s: %+v %v, want a row of unknown figures", in, rows, err)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"", "empty file"},
		{head, "no rows after the header"},
		{"time,readable,coin,price,cap,volume\n", `line 1: header is "time,readable,coin,price,cap,volume"`},
		{head + "1609459200000,x,bitcoin,1,2\n", "wrong number of fields"},
		{head + "1609459200000,x,ethereum,1,2,3\n", `line 2: coinId "ethereum": the file is bitcoin's`},
		{head + "soon,x,bitcoin,1,2,3\n", `line 2: timestamp "soon": want Unix milliseconds`},
		{head + "-1,x,bitcoin,1,2,3\n", `line 2: timestamp "-1"`},
		{head + "99999999999999999,x,bitcoin,1,2,3\n", "from 1970 to 9999"},
		{head + "1609459200000,x,bitcoin,-1,2,3\n", `line 2: price "-1": want a number, 0 or more`},
		{head + "1609459200000,x,bitcoin,-1e400,2,3\n", `line 2: price "-1e400": want a number, 0 or more`},
		{head + "1609459200000,x,bitcoin,,2,3\n", `price "": want a finite number`},
		{head + "1609459200000,x,bitcoin,NaN,2,3\n", `price "NaN": want a finite number`},
		{head + "1609459200000,x,bitcoin,1,-2,3\n", `marketCap "-2": want a number, 0 or more, or nothing`},
		{head + "1609459200000,x,bitcoin,1,2,-3\n", `totalVolume "-3": want a number, 0 or more, or nothing`},
		{head + "1609459200000,x,bitcoin,1,2,Inf\n", `totalVolume "Inf": want a finite number`},
		{head + "1609459200000,x,bitcoin,1,2,3\n1609459200000,x,bitcoin,1,2,3\n", "line 3: timestamp 1609459200000 is not after the previous row's"},
		{head + "1609545600000,x,bitcoin,1,2,3\n1609459200000,x,bitcoin,1,2,3\n", "line 3: timestamp 1609459200000 is not after"},
		{head + `1609459200000,"x,bitcoin,1,2,3` + "\n", "extraneous or missing \" in quoted-field"},
	} {
		_, err := ParseCoin(strings.NewReader(tt.in), "bitcoin")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.60q: %v, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func TestParseCoinList(t *testing.T) {
	list, err := ParseCoinList(strings.NewReader("id,symbol,name\nbitcoin,BTC,Bitcoin\nthorchain,rune, THORChain \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0] != (CoinList{"bitcoin", "btc", "Bitcoin"}) || list[1] != (CoinList{"thorchain", "rune", "THORChain"}) {
		t.Errorf("%+v", list)
	}
	for _, tt := range []struct{ in, want string }{
		{"", "empty file"},
		{"id,symbol,name\n", "no coins after the header"},
		{"id,ticker,name\nbitcoin,btc,Bitcoin\n", `line 1: header is "id,ticker,name"`},
		{"id,symbol,name\n../../etc/passwd,x,X\n", `line 2: id "../../etc/passwd": want 1 to 100 of a-z`},
		{"id,symbol,name\nBitcoin,btc,Bitcoin\n", `id "Bitcoin"`},
		{"id,symbol,name\n.hidden,x,X\n", `id ".hidden"`},
		{"id,symbol,name\nbitcoin, ,Bitcoin\n", `line 2: symbol " "`},
		{"id,symbol,name\nbitcoin,btc,\n", `line 2: name ""`},
		{"id,symbol,name\nbitcoin,b\x01c,Bitcoin\n", `line 2: symbol "b\x01c": want 1 to 50 printable characters`},
		{"id,symbol,name\nbitcoin,btc,Bit\xffcoin\n", `line 2: name "Bit\xffcoin": want 1 to 200 printable characters`},
		{"id,symbol,name\nbitcoin,btc,Bitcoin\nbitcoin,xbt,Bitcoin\n", `line 3: id "bitcoin" is listed already on line 2`},
		{"id,symbol,name\nbitcoin,btc\n", "wrong number of fields"},
	} {
		_, err := ParseCoinList(strings.NewReader(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.60q: %v, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

// recording writes a recording to a new directory: the coin list, then a
// file a coin, each row "offset,price,marketCap,volume" with offset a Go
// duration after 2021-01-01.
func recording(t *testing.T, list string, coins map[string][]string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "coins"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("coinlist.csv", list)
	base := time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)
	for id, rows := range coins {
		var b strings.Builder
		b.WriteString("timestamp,readableTimestamp,coinId,price,marketCap,totalVolume\n")
		for _, r := range rows {
			f := strings.Split(r, ",")
			d, err := time.ParseDuration(f[0])
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(strings.Join([]string{strconv.FormatInt(base.Add(d).UnixMilli(), 10), `"a date, readable"`, id, f[1], f[2], f[3]}, ",") + "\n")
		}
		write(filepath.Join("coins", id+".csv"), b.String())
	}
	return dir
}

// three days: a whole one, one listed late, one delisted early, one
// without a file.
func threeDays(t *testing.T) string {
	return recording(t, "id,symbol,name\nalpha,ALP,Alpha\nlate,lat,Late\nearly,ear,Early\nghost,gho,Ghost\n", map[string][]string{
		"alpha": {"0s,100,1000,10", "24h,400,0,0", "48h,200,4000,40", "60h,300,0,30"},
		"late":  {"24h,1,1,1", "48h,1,1,1"},
		"early": {"0s,1,1,1", "24h,1,1,1"},
	})
}

func TestLoad(t *testing.T) {
	f, err := Load(threeDays(t))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)
	if !f.Start().Equal(start) || f.Period() != 72*time.Hour {
		t.Errorf("start %s, period %s; want %s, 72h", f.Start(), f.Period(), start)
	}
	u, _ := f.Universe(ctx)
	if len(u) != 1 || u[0].ID != "alpha" || u[0].Symbol != "alp" || u[0].Name != "Alpha" || !u[0].ListedAt.Equal(start) {
		t.Fatalf("universe %+v", u)
	}
	// The last known market cap over the price then: 4000 / 200.
	if u[0].CirculatingSupply != 20 {
		t.Errorf("supply %v, want 20", u[0].CirculatingSupply)
	}
	if got := strings.Join(f.LeftOut(), " "); got != "early ghost late" {
		t.Errorf("left out %q", got)
	}
	if !strings.HasPrefix(f.String(), "replay/v1(1 coins, 2021-01-01 to 2021-01-03, ") {
		t.Errorf("String %q", f.String())
	}
	// Another recording is another configuration for the engine.
	g, err := Load(recording(t, "id,symbol,name\nalpha,alp,Alpha\n", map[string][]string{"alpha": {"0s,100,1000,10", "48h,201,4000,40"}}))
	if err != nil {
		t.Fatal(err)
	}
	if g.String() == f.String() {
		t.Errorf("two recordings, one description %q", f.String())
	}
}

func TestLoadRefusals(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "coinlist.csv")) {
		t.Errorf("no coinlist.csv: %v", err)
	}
	bad := recording(t, "id,symbol,name\nalpha,alp,Alpha\n", map[string][]string{"alpha": {"0s,100,1000,10", "24h,-1,1,1"}})
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), filepath.Join(bad, "coins", "alpha.csv")+": line 3: price") {
		t.Errorf("a bad price: %v", err)
	}
	none := recording(t, "id,symbol,name\nalpha,alp,Alpha\n", nil)
	if _, err := Load(none); err == nil || !strings.Contains(err.Error(), "none of the 1 coins") {
		t.Errorf("no files: %v", err)
	}
	if _, err := Load(recording(t, "id,symbol,name\nalpha,alp,Alpha\nbeta,bet,Beta\n", map[string][]string{
		"alpha": {"0s,1,1,1"}, "beta": {"48h,1,1,1"},
	})); err == nil || !strings.Contains(err.Error(), "no coin is recorded from the first day (2021-01-01, alpha's first row) to the last (2021-01-03, beta's last)") {
		t.Errorf("no coin for the whole span: %v", err)
	}
	// A century at most: a stray row far away names its coin.
	if _, err := Load(recording(t, "id,symbol,name\nalpha,alp,Alpha\nbeta,bet,Beta\n", map[string][]string{
		"alpha": {"0s,1,1,1", "24h,1,1,1"}, "beta": {"0s,1,1,1", "900000h,1,1,1"},
	})); err == nil || !strings.Contains(err.Error(), "to 2123-09-04 (beta's last): at most 100 years") {
		t.Errorf("a span of 102 years: %v", err)
	}
	// Not a regular file (a FIFO would block the start, a device fill the
	// memory).
	fifo := recording(t, "id,symbol,name\nalpha,alp,Alpha\n", nil)
	if err := os.Symlink("/dev/zero", filepath.Join(fifo, "coins", "alpha.csv")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(fifo); err == nil || !strings.Contains(err.Error(), "alpha.csv: want a regular file of at most 64 MiB") {
		t.Errorf("/dev/zero as a coin's file: %v", err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func TestFigures(t *testing.T) {
	f, err := Load(threeDays(t))
	if err != nil {
		t.Fatal(err)
	}
	start := f.Start()
	at := func(d time.Duration) coinpulse.Quote {
		t.Helper()
		q, err := f.Quotes(ctx, start.Add(d))
		if err != nil || len(q) != 1 {
			t.Fatalf("quotes at %s: %v %v", d, q, err)
		}
		if !q[0].Time.Equal(start.Add(d)) || q[0].CoinID != "alpha" {
			t.Fatalf("quote %+v", q[0])
		}
		return q[0]
	}
	for _, tt := range []struct {
		at                 time.Duration
		price, volume, cap float64
	}{
		{0, 100, 10, 2000}, // recorded points, exactly; the cap from the supply (20)
		{24 * time.Hour, 400, 0, 8000},
		{12 * time.Hour, 200, 5, 4000}, // geometric between 100 and 400; linear from a volume of 0
		{36 * time.Hour, math.Sqrt(400 * 200), 20, math.Sqrt(400*200) * 20}, // linear volume from 0 to 40
		{54 * time.Hour, math.Sqrt(200 * 300), math.Sqrt(40 * 30), math.Sqrt(200*300) * 20},
		// After the last point, toward the first a period later: 60 h to
		// 72 h, halfway at 66 h.
		{66 * time.Hour, math.Sqrt(300 * 100), math.Sqrt(30 * 10), math.Sqrt(300*100) * 20},
		// The loop: a period later, the same figures.
		{72*time.Hour + 12*time.Hour, 200, 5, 4000},
		{100*72*time.Hour + 66*time.Hour, math.Sqrt(300 * 100), math.Sqrt(30 * 10), math.Sqrt(300*100) * 20},
	} {
		q := at(tt.at)
		if !near(q.Price, tt.price) || !near(q.TotalVolume, tt.volume) || !near(q.MarketCap, tt.cap) || q.NoVolume != (tt.volume == 0) {
			t.Errorf("at %s: price %v volume %v cap %v, want %v %v %v", tt.at, q.Price, q.TotalVolume, q.MarketCap, tt.price, tt.volume, tt.cap)
		}
	}
	if q, err := f.Quotes(ctx, start.Add(-time.Second)); err != nil || len(q) != 0 {
		t.Errorf("before the recording: %v %v", q, err)
	}
}

// A row of unknown price is no point: the price moves over it. A coin
// whose prices are all unknown is left out.
func TestUnknownPrices(t *testing.T) {
	f, err := Load(recording(t, "id,symbol,name\nalpha,alp,Alpha\nnone,non,None\n", map[string][]string{
		"alpha": {"0s,100,0,10", "24h,1e-35,0,0", "48h,400,0,40", "72h,400,0,40"},
		"none":  {"0s,0,0,0", "72h,0,0,0"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.UnknownPrices(), " "); got != "alpha (1) none (2)" {
		t.Errorf("unknown prices %q", got)
	}
	if got := strings.Join(f.LeftOut(), " "); got != "none" {
		t.Errorf("left out %q", got)
	}
	q, _ := f.Quotes(ctx, f.Start().Add(24*time.Hour))
	if len(q) != 1 || !near(q[0].Price, 200) || !near(q[0].TotalVolume, 20) {
		t.Errorf("over the unknown row: %+v, want 200 (geometric from 100 to 400) and a volume of 20", q)
	}
}

// A coin whose first point is after the loop's start interpolates from
// its last point, a period earlier.
func TestBeforeTheFirstPoint(t *testing.T) {
	f, err := Load(recording(t, "id,symbol,name\nalpha,alp,Alpha\n", map[string][]string{"alpha": {"6h,100,0,10", "24h,200,0,20", "30h,50,0,5"}}))
	if err != nil {
		t.Fatal(err)
	}
	// Period 48 h: from 30 h (50) to 54 h (100), the loop's start 18 h
	// of 24 in.
	q, _ := f.Quotes(ctx, f.Start())
	if want := 50 * math.Pow(2, 0.75); !near(q[0].Price, want) || q[0].MarketCap != 0 {
		t.Errorf("at the start: %v (cap %v), want %v (cap 0: no market cap recorded)", q[0].Price, q[0].MarketCap, want)
	}
}

func TestHistory(t *testing.T) {
	f, err := Load(threeDays(t))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := f.Universe(ctx)
	start := f.Start()
	pts, err := f.History(ctx, u[0], coinpulse.Hourly, start.Add(-5*time.Hour), start.Add(3*time.Hour+30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 4 {
		t.Fatalf("%d hourly points from before the start to 3:30, want 4 (0:00 to 3:00)", len(pts))
	}
	for i, p := range pts {
		q, _ := f.Quotes(ctx, start.Add(time.Duration(i)*time.Hour))
		if !p.Timestamp.Equal(start.Add(time.Duration(i)*time.Hour)) || p.Price != q[0].Price || p.MarketCap != q[0].MarketCap || p.TotalVolume != q[0].TotalVolume {
			t.Errorf("point %d %+v, quote %+v", i, p, q[0])
		}
	}
	pts, _ = f.History(ctx, u[0], coinpulse.Daily, start.Add(time.Minute), start.Add(5*24*time.Hour))
	if len(pts) != 5 || !pts[0].Timestamp.Equal(start.Add(24*time.Hour)) || pts[0].Price != 400 || pts[2].Price != 100 || pts[3].Price != 400 {
		t.Errorf("daily points %+v", pts)
	}
	if _, err := f.History(ctx, coinpulse.CoinInfo{ID: "nope"}, coinpulse.Daily, start, start); !coinpulse.IsNotFound(err) {
		t.Errorf("an unknown coin: %v", err)
	}
}

// The recording the feed was made for: every coin recorded all year
// plays each day's real figures on that day, in 2021 and in every loop
// after it, and the loop's turn has no jump.
func TestDataset(t *testing.T) {
	needDataset(t)
	f, err := Load(dataset)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := f.Universe(ctx)
	if len(u) < 300 || f.Period() != 365*24*time.Hour || !f.Start().Equal(time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("%d coins, period %s, start %s", len(u), f.Period(), f.Start())
	}
	if len(u)+len(f.LeftOut()) != 500 {
		t.Errorf("%d served and %d left out of coinlist.csv's 500", len(u), len(f.LeftOut()))
	}
	b, err := os.ReadFile(filepath.Join(dataset, "coins", "bitcoin.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ParseCoin(strings.NewReader(string(b)), "bitcoin")
	if err != nil {
		t.Fatal(err)
	}
	var may Row
	for _, r := range rows {
		if r.Time.Equal(time.Date(2021, 5, 1, 0, 0, 0, 0, time.UTC)) {
			may = r
		}
	}
	for loop := range 7 {
		at := may.Time.Add(time.Duration(loop) * f.Period())
		pts, err := f.History(ctx, u[0], coinpulse.Daily, at, at)
		if err != nil || len(pts) != 1 || pts[0].Price != may.Price || pts[0].TotalVolume != may.TotalVolume {
			t.Errorf("loop %d (%s): %+v %v, want bitcoin's 2021-05-01 price %v", loop, at.Format(time.DateOnly), pts, err, may.Price)
		}
	}
	// At the loop's turn every coin is back at its first day's figures,
	// having moved there geometrically from its last point (the
	// afternoon of 2021-12-31): every hour between is between the two.
	turn := f.Start().Add(5 * f.Period())
	for _, c := range u {
		pts, err := f.History(ctx, c, coinpulse.Hourly, turn.Add(-6*time.Hour), turn)
		if err != nil || len(pts) != 7 {
			t.Fatalf("%s: %d points, %v", c.ID, len(pts), err)
		}
		rec := f.byID[c.ID]
		last, first := rec.price[len(rec.price)-1], rec.price[0]
		if lastAt := f.Start().Add(time.Duration(rec.at[len(rec.at)-1]) * time.Millisecond); lastAt.After(turn.Add(-6*time.Hour - 4*f.Period())) {
			t.Fatalf("%s: last point at %s, after 18:00", c.ID, lastAt)
		}
		if pts[6].Price != first {
			t.Errorf("%s: %v at the turn, want the first day's %v", c.ID, pts[10].Price, first)
		}
		for _, p := range pts[:6] {
			if lo, hi := min(last, first), max(last, first); !(lo <= p.Price && p.Price <= hi) && last != first {
				t.Errorf("%s: %v at %s, not between the last point's %v and the first's %v", c.ID, p.Price, p.Timestamp, last, first)
				break
			}
		}
	}
}

// BenchmarkQuotes is one refresh of the real recording: every coin's
// figures at an instant (a binary search and an interpolation a coin).
func BenchmarkQuotes(b *testing.B) {
	needDataset(b)
	f, err := Load(dataset)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 15, 30, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Minute)
		if _, err := f.Quotes(ctx, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad reads and checks the real recording: a start's cost.
func BenchmarkLoad(b *testing.B) {
	needDataset(b)
	for b.Loop() {
		if _, err := Load(dataset); err != nil {
			b.Fatal(err)
		}
	}
}
