package postgres

import (
	"fmt"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/storetest"
)

// BenchmarkPutHistoryBackfill measures a fresh start's hourly backfill:
// 100 coins × 2,160 points (90 days) in one call, into an empty schema.
func BenchmarkPutHistoryBackfill(b *testing.B) {
	const coins, points = 100, 2160
	end := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	series := make([]coinpulse.Series, coins)
	for c := range series {
		s := coinpulse.Series{CoinID: fmt.Sprintf("coin-%04d", c), Points: make([]coinpulse.HistoryPoint, points)}
		for i := range s.Points {
			price := float64(c+1) * (1 + float64(i%97)/1000)
			s.Points[i] = coinpulse.HistoryPoint{
				Timestamp:   end.Add(time.Duration(i-points) * time.Hour),
				Price:       price,
				MarketCap:   price * 1e9,
				TotalVolume: price * 1e7,
			}
		}
		series[c] = s
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := openTest(b)
		b.StartTimer()
		if err := db.PutHistory(b.Context(), coinpulse.Hourly, series); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(coins*points*b.N)/b.Elapsed().Seconds(), "points/s")
}

// BenchmarkKeyByHash measures a key look-up (a key cache miss) among
// 1,000 keys.
func BenchmarkKeyByHash(b *testing.B) {
	ctx := b.Context()
	db := openTest(b)
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

// BenchmarkAddAdmitted measures the admission counts a busy node's meter
// writes with a batch: 1,000 users (see storetest.BenchAddAdmitted).
func BenchmarkAddAdmitted(b *testing.B) {
	storetest.BenchAddAdmitted(b, openTest(b))
}
