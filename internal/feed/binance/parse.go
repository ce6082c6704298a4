package binance

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"coinpulse"
	"coinpulse/internal/feed/upstream"
)

// Ticker is the part of an element of GET /api/v3/ticker/24hr the feed
// reads.
type Ticker struct {
	Symbol      string
	LastPrice   float64 // 0: unknown
	QuoteVolume float64 // over the last 24 h, in the quote asset; 0: unknown
	CloseTime   time.Time
}

// tickerJSON is an element of GET /api/v3/ticker/24hr (type FULL or
// MINI): Binance sends figures as decimal strings.
type tickerJSON struct {
	Symbol      string `json:"symbol"`
	LastPrice   string `json:"lastPrice"`
	QuoteVolume string `json:"quoteVolume"`
	CloseTime   int64  `json:"closeTime"`
}

// ParseTickers reads an answer of GET /api/v3/ticker/24hr for every pair.
// An element of another shape, or with an empty symbol, is left out; a
// figure that is not a decimal within bounds is unknown (0).
func ParseTickers(body []byte) ([]Ticker, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("want a JSON array of tickers: %w", err)
	}
	out := make([]Ticker, 0, len(raw))
	for _, r := range raw {
		var t tickerJSON
		if json.Unmarshal(r, &t) != nil || t.Symbol == "" || len(t.Symbol) > 40 {
			continue
		}
		out = append(out, Ticker{
			Symbol:      t.Symbol,
			LastPrice:   decimal(t.LastPrice, coinpulse.MinPrice, coinpulse.MaxPrice),
			QuoteVolume: decimal(t.QuoteVolume, 0, coinpulse.MaxAmount),
			CloseTime:   millis(t.CloseTime),
		})
	}
	return out, nil
}

// decimal reads one of Binance's decimal strings: 0 when it is not a
// finite decimal in [lo, hi].
func decimal(s string, lo, hi float64) float64 {
	if len(s) == 0 || len(s) > 64 || s[0] == '+' {
		return 0
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || c == '.' || c == '-') {
			return 0 // no exponents, Inf, NaN or hex: Binance sends none
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= lo && v <= hi) {
		return 0
	}
	return v
}

// millis turns Unix milliseconds into a time: the zero time when they
// are before 2009 or after 9999.
func millis(ms int64) time.Time {
	if ms < minMillis || ms > maxMillis {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

var (
	minMillis = time.Date(2009, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	maxMillis = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).UnixMilli()
)

// Kline is one candle of GET /api/v3/klines: the interval opening at
// Open, its opening price and its volume in the quote asset.
type Kline struct {
	Open        int64 // Unix milliseconds
	OpenPrice   float64
	QuoteVolume float64
}

// Page is an answer of GET /api/v3/klines: the candles read, and how
// many Binance sent and the last one's opening time, which decide whether
// and where the next page starts (a candle left out must not end the
// paging).
type Page struct {
	Klines   []Kline
	Sent     int
	LastOpen int64 // 0 when the last candle's opening time is unreadable
}

// ParseKlines reads an answer of GET /api/v3/klines: an array of
// [openTime, open, high, low, close, volume, closeTime, quoteVolume, …].
// A candle of another shape, or of unknown opening price, is left out;
// the rest are returned by opening time, one per time.
func ParseKlines(body []byte) (Page, error) {
	var raw [][]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return Page{}, fmt.Errorf("want a JSON array of candles: %w", err)
	}
	out := make([]Kline, 0, len(raw))
	var last int64
	if n := len(raw); n > 0 && len(raw[n-1]) > 0 {
		var open float64
		if json.Unmarshal(raw[n-1][0], &open) == nil && open == math.Trunc(open) && open >= float64(minMillis) && open <= float64(maxMillis) {
			last = int64(open)
		}
	}
	for _, r := range raw {
		if len(r) < 8 {
			continue
		}
		var open float64
		var price, qv string
		if json.Unmarshal(r[0], &open) != nil || json.Unmarshal(r[1], &price) != nil || json.Unmarshal(r[7], &qv) != nil {
			continue
		}
		if open != math.Trunc(open) || open < float64(minMillis) || open > float64(maxMillis) {
			continue
		}
		k := Kline{Open: int64(open), OpenPrice: decimal(price, coinpulse.MinPrice, coinpulse.MaxPrice), QuoteVolume: decimal(qv, 0, coinpulse.MaxAmount)}
		if k.OpenPrice == 0 || len(out) > 0 && k.Open <= out[len(out)-1].Open {
			continue // Binance sends candles in order: one out of it is dropped
		}
		out = append(out, k)
	}
	return Page{Klines: out, Sent: len(raw), LastOpen: last}, nil
}

// apiError reads Binance's message out of an error answer:
// {"code": -1121, "msg": "Invalid symbol."}.
func apiError(body []byte) string {
	var e struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	}
	if json.Unmarshal(body, &e) != nil || e.Msg == "" {
		return ""
	}
	return upstream.CleanMessage(fmt.Sprintf("%s (code %d)", e.Msg, e.Code))
}
