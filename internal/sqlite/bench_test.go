package sqlite

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/ledger"
	"coinpulse/internal/storetest"
)

// benchSeries returns coins series of n hourly points each, ending at the
// start of 2025-03-14.
func benchSeries(coins, n int) []coinpulse.Series {
	end := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	start := end.Add(-time.Duration(n) * time.Hour)
	series := make([]coinpulse.Series, coins)
	for c := range series {
		points := make([]coinpulse.HistoryPoint, n)
		for i := range points {
			price := float64(c+1) * (1 + float64(i%97)/1000)
			points[i] = coinpulse.HistoryPoint{
				Timestamp:   start.Add(time.Duration(i) * time.Hour),
				Price:       price,
				MarketCap:   price * 1e9,
				TotalVolume: price * 1e7,
			}
		}
		series[c] = coinpulse.Series{CoinID: fmt.Sprintf("coin-%04d", c), Points: points}
	}
	return series
}

// BenchmarkPutHistoryBackfill measures a fresh start's hourly backfill:
// 100 coins × 2,160 points (90 days) in one call, into an empty database.
func BenchmarkPutHistoryBackfill(b *testing.B) {
	const coins, points = 100, 2160
	series := benchSeries(coins, points)
	dir := b.TempDir()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db, err := Open(b.Context(), filepath.Join(dir, fmt.Sprintf("bench-%d.db", i)))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := db.PutHistory(b.Context(), coinpulse.Hourly, series); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		db.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(coins*points*b.N)/b.Elapsed().Seconds(), "points/s")
}

// BenchmarkPutHistoryTick measures the steady state: one new hourly point
// for each of 1,000 coins whose chunks already exist.
func BenchmarkPutHistoryTick(b *testing.B) {
	const coins = 1000
	db, err := Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	series := benchSeries(coins, 24)
	if err := db.PutHistory(b.Context(), coinpulse.Hourly, series); err != nil {
		b.Fatal(err)
	}
	tick := make([]coinpulse.Series, coins)
	for c := range tick {
		tick[c] = coinpulse.Series{CoinID: series[c].CoinID, Points: series[c].Points[23:]}
	}
	for b.Loop() {
		if err := db.PutHistory(b.Context(), coinpulse.Hourly, tick); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHistory measures reading 90 days of one coin's hourly points.
func BenchmarkHistory(b *testing.B) {
	db, err := Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	series := benchSeries(10, 2160)
	if err := db.PutHistory(b.Context(), coinpulse.Hourly, series); err != nil {
		b.Fatal(err)
	}
	from, to := series[0].Points[0].Timestamp, series[0].Points[2159].Timestamp
	for b.Loop() {
		points, err := db.History(b.Context(), "coin-0005", coinpulse.Hourly, from, to)
		if err != nil || len(points) != 2160 {
			b.Fatalf("History = %d points, %v", len(points), err)
		}
	}
}

// BenchmarkKeyByHash measures a key look-up (a key cache miss) among
// 1,000 keys.
func BenchmarkKeyByHash(b *testing.B) {
	ctx := b.Context()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var hashes []string
	for u := range 200 {
		user := &coinpulse.User{Email: fmt.Sprintf("user%d@example.com", u)}
		if err := db.CreateUser(ctx, user); err != nil {
			b.Fatal(err)
		}
		for range coinpulse.MaxActiveKeys {
			_, k, err := coinpulse.NewAPIKey(user.ID, "bench", coinpulse.ModeLive, coinpulse.Permissions{Read: true})
			if err != nil {
				b.Fatal(err)
			}
			if err := db.CreateKey(ctx, k); err != nil {
				b.Fatal(err)
			}
			hashes = append(hashes, k.Hash)
		}
	}
	i := 0
	for b.Loop() {
		if _, err := db.KeyByHash(ctx, hashes[i%len(hashes)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkAuthEpoch measures the poll every node runs 40 times a second
// (internal/api's key cache).
func BenchmarkAuthEpoch(b *testing.B) {
	ctx := b.Context()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := db.AuthEpoch(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddAdmitted measures the admission counts a busy node's meter
// writes with a batch: 1,000 users (see storetest.BenchAddAdmitted).
func BenchmarkAddAdmitted(b *testing.B) {
	db, err := Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	storetest.BenchAddAdmitted(b, db)
}

// BenchmarkTransactionsDeepPage reads the 50 transactions 9,900 deep in a
// portfolio of 10,000, by offset and by cursor (starting_after): the
// offset walks past the 9,900 before, the cursor seeks in the index.
func BenchmarkTransactionsDeepPage(b *testing.B) {
	ctx := b.Context()
	db, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	u := &coinpulse.User{Email: "trader@example.com"}
	if err := db.CreateUser(ctx, u); err != nil {
		b.Fatal(err)
	}
	o := coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}
	p := &coinpulse.Portfolio{Owner: o, Name: "deep"}
	if err := db.CreatePortfolio(ctx, p, -1); err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	lot := ledger.Lot{Quantity: decimal.NewFromInt(1), Price: decimal.NewFromInt(1)}
	for i := range 10_000 {
		lot.ExecutedAt = t0.Add(time.Duration(i) * time.Minute)
		tr := coinpulse.Trade{PortfolioID: p.ID, CoinID: "bitcoin", CoinSymbol: "btc", CoinName: "Bitcoin", Now: t0}
		if _, _, err := db.Trade(ctx, o, tr, ledger.BuyFunc(lot)); err != nil {
			b.Fatal(err)
		}
	}
	before, _, err := db.Transactions(ctx, o, p.ID, coinpulse.TxPage{Offset: 9_899, Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		pg   coinpulse.TxPage
	}{
		{"offset", coinpulse.TxPage{Offset: 9_900, Limit: 50}},
		{"cursor", coinpulse.TxPage{StartingAfter: before[0].ID, Limit: 50}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				txs, _, err := db.Transactions(ctx, o, p.ID, bc.pg)
				if err != nil || len(txs) != 50 {
					b.Fatalf("%d transactions, %v", len(txs), err)
				}
			}
		})
	}
}
