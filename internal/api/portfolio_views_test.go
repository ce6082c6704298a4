package api

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// The hand encoder writes exactly what encoding/json writes.
func TestPortfolioEncoderMatchesEncodingJSON(t *testing.T) {
	d := func(s string) num { return num(decimal.RequireFromString(s)) }
	p := func(s string) *num { n := d(s); return &n }
	at := time.Date(2026, 1, 2, 3, 4, 5, 678900000, time.UTC)
	synced := at.Add(time.Hour)
	views := []portfolioView{
		{ID: 1, Name: "plain", TotalValue: p("0"), TotalCost: d("0"), ProfitLoss: p("0"), ProfitLossPercentage: p("0"), RealizedProfitLoss: d("0"), CreatedAt: at, UpdatedAt: at, Holdings: []holdingView{}},
		{ID: 2, Name: "unpriced", TotalCost: d("5"), RealizedProfitLoss: d("0"), HoldingsCount: 1, CreatedAt: at, UpdatedAt: at,
			Holdings: []holdingView{{ID: 9, PortfolioID: 2, CoinID: "gone", Quantity: d("1"), AverageBuyPrice: p("5"), TotalCost: d("5"), CreatedAt: at, UpdatedAt: at}}},
		{
			ID: 1 << 40, Name: `quotes " and \ and <b>&</b>`, Description: "ünïcödé\n\ttabs\u0001\u2028",
			TotalValue: p("123456789012345678901234567890.123456789012345678"), TotalCost: d("-0.000000000000000001"),
			ProfitLoss: p("1e3"), ProfitLossPercentage: p("-12.5"), RealizedProfitLoss: d("0.3"),
			HoldingsCount: 2, CreatedAt: at, UpdatedAt: at, SyncedAt: &synced,
			Holdings: []holdingView{
				{ID: 7, PortfolioID: 1 << 40, CoinID: "bitcoin", CoinSymbol: "btc", CoinName: "Bitcoin", Quantity: d("0.3"), AverageBuyPrice: p("100"),
					TotalCost: d("30"), CurrentPrice: p("111807.83579732238"), CurrentValue: p("33542.350739196714"), ProfitLoss: p("33512.350739196714"),
					ProfitLossPercentage: p("111707.83579732"), Notes: "first lot", CreatedAt: at, UpdatedAt: at},
				{ID: 8, PortfolioID: 1 << 40, CoinID: "sim-x", CoinSymbol: "x", CoinName: "X \"coin\"", Quantity: d("0"), TotalCost: d("0"), CreatedAt: at, UpdatedAt: at.In(time.FixedZone("x", 3600))},
			},
		},
	}
	type plain portfolioView // without the MarshalJSON method
	for _, v := range views {
		want, err := json.Marshal(plain(v))
		if err != nil {
			t.Fatal(err)
		}
		if got := v.appendJSON(nil); string(got) != string(want) {
			t.Errorf("hand encoder:\n%s\nencoding/json:\n%s", got, want)
		}
	}
}

func TestAppendDecimalMatchesString(t *testing.T) {
	cases := []string{"0", "-0", "1", "-1", "10", "100", "1e3", "0.1", "0.30", "-0.000000000000000001", "123.456000",
		"9223372036854775807", "-9223372036854775808", "99999999999999999999", "1.000000000000000001", "0.000000000000000000999",
		"33542.350739196714", "123456789012345678.9", "1e-40"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		c := r.Int64N(2_000_000_000_000_000_000) - 1_000_000_000_000_000_000
		cases = append(cases, decimal.New(c>>r.IntN(60), int32(r.IntN(50)-30)).String())
		cases = append(cases, decimal.New(c>>r.IntN(60), int32(r.IntN(50)-30)).Mul(decimal.New(int64(r.IntN(1000)), int32(-r.IntN(20)))).String())
	}
	for _, s := range cases {
		for _, d := range []decimal.Decimal{decimal.RequireFromString(s), decimal.RequireFromString(s).Mul(decimal.New(1, -3))} {
			if got := string(appendDecimal([]byte("x"), d)); got != "x"+d.String() {
				t.Fatalf("appendDecimal(%s) = %s, want x%s", s, got, d.String())
			}
		}
	}
}
