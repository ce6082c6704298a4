package coingecko

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"coinpulse"
	"coinpulse/internal/feed/upstream"
)

// Market is the part of an element of GET /coins/markets the feed reads.
// Pointers are nil where CoinGecko sent null or a figure that cannot be.
type Market struct {
	ID                string
	Symbol            string
	Name              string
	CurrentPrice      *float64
	MarketCap         *float64
	TotalVolume       *float64
	CirculatingSupply *float64
	TotalSupply       *float64
	MaxSupply         *float64
	LastUpdated       time.Time // zero when not sent
}

// marketJSON is an element of GET /coins/markets as CoinGecko sends it
// (../shared/fixtures/coingecko/coins_markets.json); the fields the feed
// does not read are left out.
type marketJSON struct {
	ID                string   `json:"id"`
	Symbol            string   `json:"symbol"`
	Name              string   `json:"name"`
	CurrentPrice      *float64 `json:"current_price"`
	MarketCap         *float64 `json:"market_cap"`
	TotalVolume       *float64 `json:"total_volume"`
	CirculatingSupply *float64 `json:"circulating_supply"`
	TotalSupply       *float64 `json:"total_supply"`
	MaxSupply         *float64 `json:"max_supply"`
	LastUpdated       *string  `json:"last_updated"`
}

// ParseMarkets reads an answer of GET /coins/markets. An answer that is
// not an array of objects is an error; an element whose id, symbol or name
// cannot be served (see validID) is left out, and reported in skipped, so
// that one odd coin does not stop the feed.
func ParseMarkets(body []byte) (markets []Market, skipped []string, err error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, nil, fmt.Errorf("want a JSON array of coins: %w", err)
	}
	seen := make(map[string]bool, len(raw))
	for i, r := range raw {
		var m marketJSON
		if err := json.Unmarshal(r, &m); err != nil {
			// One element of the wrong shape (a number where a figure
			// is out of float64's range, a string for a number): left
			// out, named by its position.
			skipped = append(skipped, fmt.Sprintf("element %d: %v", i, err))
			continue
		}
		symbol := strings.ToLower(strings.TrimSpace(m.Symbol))
		name := strings.TrimSpace(m.Name)
		switch {
		case !validID(m.ID):
			skipped = append(skipped, fmt.Sprintf("element %d: id %q", i, clip(m.ID)))
			continue
		case !validText(symbol, 64) || !validText(name, 200):
			skipped = append(skipped, fmt.Sprintf("%s: symbol %q or name %q", m.ID, clip(m.Symbol), clip(m.Name)))
			continue
		case seen[m.ID]:
			continue // CoinGecko pages can repeat a coin that moved between them
		}
		seen[m.ID] = true
		out := Market{
			ID: m.ID, Symbol: symbol, Name: name,
			CurrentPrice:      price(m.CurrentPrice),
			MarketCap:         amount(m.MarketCap),
			TotalVolume:       amount(m.TotalVolume),
			CirculatingSupply: amount(m.CirculatingSupply),
			TotalSupply:       amount(m.TotalSupply),
			MaxSupply:         amount(m.MaxSupply),
		}
		if m.LastUpdated != nil {
			if t, err := time.Parse(time.RFC3339Nano, *m.LastUpdated); err == nil && t.Year() >= 2009 && t.Year() <= 9999 {
				out.LastUpdated = t.UTC()
			}
		}
		markets = append(markets, out)
	}
	return markets, skipped, nil
}

// validID reports whether id can be served as a coin id: CoinGecko's are
// lower-case ASCII letters, digits and "-", "_" or ".", and a path segment
// of /coins/{id} must hold it as it is.
func validID(id string) bool {
	if id == "" || len(id) > 128 || id == "." || id == ".." {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// validText reports whether s is a non-empty line of valid UTF-8 of at
// most n bytes.
func validText(s string, n int) bool {
	if s == "" || len(s) > n || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func clip(s string) string { return upstream.Cut(s, 40) }

// price and amount are p, or nil when it is past what a figure can be
// (coinpulse.MinPrice, MaxPrice and MaxAmount): CoinGecko has served
// 1e-35 USD prices for dead tokens.
func price(p *float64) *float64 {
	if p == nil || !(*p >= coinpulse.MinPrice && *p <= coinpulse.MaxPrice) {
		return nil
	}
	return p
}

func amount(p *float64) *float64 {
	if p == nil || !(*p >= 0 && *p <= coinpulse.MaxAmount) {
		return nil
	}
	return p
}

// ParseGlobal reads an answer of GET /global
// (../shared/fixtures/coingecko/global.json): the number of markets
// (exchanges) CoinGecko tracks, data.markets, a whole number from 1 to
// 1,000,000.
func ParseGlobal(body []byte) (int, error) {
	var g struct {
		Data struct {
			Markets *float64 `json:"markets"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &g); err != nil {
		return 0, fmt.Errorf("want a global object: %w", err)
	}
	if m := g.Data.Markets; m != nil && *m >= 1 && *m <= 1e6 && *m == math.Trunc(*m) {
		return int(*m), nil
	}
	return 0, errors.New("want data.markets, a count from 1 to 1,000,000")
}

// chartJSON is an answer of GET /coins/{id}/market_chart and
// /market_chart/range (../shared/fixtures/coingecko/coins_id_market_chart_range.json).
type chartJSON struct {
	Prices       [][]*float64 `json:"prices"`
	MarketCaps   [][]*float64 `json:"market_caps"`
	TotalVolumes [][]*float64 `json:"total_volumes"`
}

// ParseChart reads an answer of GET /coins/{id}/market_chart/range into
// samples ordered by time, one per timestamp. A pair that is not
// [milliseconds, number], or whose price cannot be, is left out; market
// caps and volumes are matched to prices by timestamp.
func ParseChart(body []byte) ([]upstream.Sample, error) {
	var c chartJSON
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("want a chart object (prices, market_caps, total_volumes): %w", err)
	}
	if c.Prices == nil {
		return nil, errors.New("want a chart object (prices, market_caps, total_volumes): no prices")
	}
	byT := make(map[int64]*upstream.Sample, len(c.Prices))
	for _, p := range c.Prices {
		t, v, ok := pair(p)
		if !ok || price(&v) == nil {
			continue
		}
		byT[t] = &upstream.Sample{T: t, Price: v}
	}
	for _, p := range c.MarketCaps {
		if t, v, ok := pair(p); ok && amount(&v) != nil {
			if s := byT[t]; s != nil {
				s.MarketCap = v
			}
		}
	}
	for _, p := range c.TotalVolumes {
		if t, v, ok := pair(p); ok && amount(&v) != nil {
			if s := byT[t]; s != nil {
				s.Volume = v
			}
		}
	}
	out := make([]upstream.Sample, 0, len(byT))
	for _, s := range byT {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b upstream.Sample) int { return cmp.Compare(a.T, b.T) })
	return out, nil
}

// Milliseconds from 2009 (the first coin) to 9999: a timestamp outside is
// no point.
var (
	minMillis = time.Date(2009, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	maxMillis = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).UnixMilli()
)

func pair(p []*float64) (int64, float64, bool) {
	if len(p) != 2 || p[0] == nil || p[1] == nil {
		return 0, 0, false
	}
	ms := *p[0]
	if !(ms >= float64(minMillis) && ms <= float64(maxMillis)) || ms != math.Trunc(ms) {
		return 0, 0, false
	}
	return int64(ms), *p[1], true
}

// upstreamError reads the message out of an error answer: CoinGecko sends
// {"error": "..."}, {"status": {"error_message": "..."}} or
// {"error": {"status": {...}}}.
func upstreamError(body []byte) string {
	var e struct {
		Error  json.RawMessage `json:"error"`
		Status *struct {
			Message string `json:"error_message"`
		} `json:"status"`
	}
	if json.Unmarshal(body, &e) == nil {
		var s string
		if json.Unmarshal(e.Error, &s) == nil && s != "" {
			return upstream.CleanMessage(s)
		}
		if e.Status != nil && e.Status.Message != "" {
			return upstream.CleanMessage(e.Status.Message)
		}
		if len(e.Error) > 0 {
			if m := upstreamError(e.Error); m != "" {
				return m
			}
		}
	}
	return ""
}
