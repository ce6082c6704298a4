package coingecko

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"coinpulse/internal/feed/upstream"
)

// marketsPage is a page of n markets in CoinGecko's shape, with every
// field its fixture has.
func marketsPage(n int) []byte {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":"coin-%d","symbol":"c%d","name":"Coin %d","image":"https://coin-images.coingecko.com/coins/images/1/large/c.png","current_price":%g,"market_cap":%g,"market_cap_rank":%d,"fully_diluted_valuation":null,"total_volume":%g,"high_24h":1.1,"low_24h":0.9,"price_change_24h":-0.01,"price_change_percentage_24h":-0.95,"market_cap_change_24h":-151844014.5,"market_cap_change_percentage_24h":-0.96,"circulating_supply":20030493.0,"total_supply":20030843.0,"max_supply":21000000.0,"ath":126080,"ath_change_percentage":-38.39,"ath_date":"2025-10-06T18:57:42.558Z","atl":67.81,"atl_change_percentage":114443.2,"atl_date":"2013-07-06T00:00:00.000Z","roi":null,"last_updated":"2026-05-18T12:49:21.599Z"}`,
			i, i, i, 77671/float64(i+1), 1.5e12/float64(i+1), i+1, 3.3e10/float64(i+1))
	}
	b.WriteString("]")
	return []byte(b.String())
}

// hourlyChart is a chart of 90 days of hourly samples, off the grid.
func hourlyChart() ([]byte, time.Time, time.Time) {
	to := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	from := to.Add(-90 * day)
	var p, c, v [][2]float64
	for t := from.Add(137 * time.Second); t.Before(to); t = t.Add(time.Hour) {
		ms := float64(t.UnixMilli())
		p = append(p, [2]float64{ms, 77953.82550382407})
		c = append(c, [2]float64{ms, 1560631481361.8042})
		v = append(v, [2]float64{ms, 18688431751.857048})
	}
	b, _ := json.Marshal(map[string]any{"prices": p, "market_caps": c, "total_volumes": v})
	return b, from, to
}

// A refresh reads one page of 250 markets per 250 coins.
func BenchmarkParseMarkets(b *testing.B) {
	page := marketsPage(250)
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		if ms, _, err := ParseMarkets(page); err != nil || len(ms) != 250 {
			b.Fatal(err, len(ms))
		}
	}
}

// A backfill reads 90 days of hourly samples a coin.
func BenchmarkParseChart(b *testing.B) {
	chart, _, _ := hourlyChart()
	b.SetBytes(int64(len(chart)))
	b.ReportAllocs()
	for b.Loop() {
		if s, err := ParseChart(chart); err != nil || len(s) != 90*24 {
			b.Fatal(err, len(s))
		}
	}
}

func BenchmarkResample(b *testing.B) {
	chart, from, to := hourlyChart()
	s, _ := ParseChart(chart)
	b.ReportAllocs()
	for b.Loop() {
		if pts := upstream.Resample(s, time.Hour, from, to); len(pts) != 90*24+1 {
			b.Fatal(len(pts))
		}
	}
}
