package binance

import (
	"testing"

	"coinpulse"
)

// FuzzParseTickers and FuzzParseKlines: an answer either parses into
// figures within their bounds (or 0, unknown) or is refused with a
// message, never a panic. The corpora are in testdata/fuzz.
func FuzzParseTickers(f *testing.F) {
	f.Add(`[{"symbol":"BTCUSDT","lastPrice":"90000.01000000","quoteVolume":"1234.5","closeTime":1764288000000}]`)
	f.Add(`[{"symbol":"X","lastPrice":"1e5","quoteVolume":"-1","closeTime":5},{"symbol":""},3,null]`)
	f.Add(`{"code":-1121,"msg":"Invalid symbol."}`)
	f.Fuzz(func(t *testing.T, in string) {
		ts, err := ParseTickers([]byte(in))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty message")
			}
			return
		}
		for _, x := range ts {
			if x.Symbol == "" || x.LastPrice != 0 && !(x.LastPrice >= coinpulse.MinPrice && x.LastPrice <= coinpulse.MaxPrice) || !(x.QuoteVolume >= 0 && x.QuoteVolume <= coinpulse.MaxAmount) {
				t.Fatalf("%+v", x)
			}
		}
	})
}

func FuzzParseKlines(f *testing.F) {
	f.Add(`[[1764288000000,"1.5","2","1","1.7","10",1764291599999,"15.5",3,"0","0","0"]]`)
	f.Add(`[[1764288000000,"9"],[1764291600000.5,"1","2","1","1.7","10",0,"1",3],["a"],[]]`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, in string) {
		pg, err := ParseKlines([]byte(in))
		ks := pg.Klines
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty message")
			}
			return
		}
		for i, k := range ks {
			if i > 0 && k.Open <= ks[i-1].Open || k.Open < minMillis || k.Open > maxMillis || !(k.OpenPrice >= coinpulse.MinPrice && k.OpenPrice <= coinpulse.MaxPrice) || !(k.QuoteVolume >= 0 && k.QuoteVolume <= coinpulse.MaxAmount) {
				t.Fatalf("candle %d: %+v", i, k)
			}
		}
	})
}
