package binance

import (
	"fmt"
	"strings"
	"testing"
)

// Every refresh reads the tickers of every pair: about 3,000 on Binance.
func BenchmarkParseTickers(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[")
	for i := range 3000 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"symbol":"C%dUSDT","openPrice":"1.00000000","highPrice":"1.20000000","lowPrice":"0.80000000","lastPrice":"%d.01000000","volume":"12345.67000000","quoteVolume":"98765.43210000","openTime":1764201600000,"closeTime":1764288000000,"firstId":1,"lastId":100,"count":100}`, i, i+1)
	}
	sb.WriteString("]")
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if ts, err := ParseTickers(body); err != nil || len(ts) != 3000 {
			b.Fatal(err, len(ts))
		}
	}
}

// A backfill reads 1,000 candles a call.
func BenchmarkParseKlines(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[")
	for i := range 1000 {
		if i > 0 {
			sb.WriteString(",")
		}
		open := int64(1764288000000) + int64(i)*3600000
		fmt.Fprintf(&sb, `[%d,"90000.01000000","90100.00000000","89900.00000000","90050.00000000","12.34500000",%d,"1111111.11000000",1000,"6.00000000","540000.00000000","0"]`, open, open+3599999)
	}
	sb.WriteString("]")
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if pg, err := ParseKlines(body); err != nil || len(pg.Klines) != 1000 {
			b.Fatal(err, len(pg.Klines))
		}
	}
}
