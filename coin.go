package coinpulse

import (
	"context"
	"time"
)

// CoinInfo is what a feed knows of a coin apart from its price.
type CoinInfo struct {
	ID                string
	Symbol            string // lower case, as CoinGecko
	Name              string
	CirculatingSupply float64  // 0: unknown
	TotalSupply       *float64 // nil: unknown
	MaxSupply         *float64 // nil: no cap, or unknown
	// ListedAt is where the coin's history begins.
	ListedAt time.Time
}

// Bounds of what a feed's figures can be, in USD: wide enough for any
// coin (a price of 1e-18 is a billionth of shiba-inu's), narrow enough
// that a price times any supply they imply, and their interpolations,
// stay finite. The feeds read a figure beyond them as unknown.
const (
	MinPrice  = 1e-18
	MaxPrice  = 1e15
	MaxAmount = 1e18 // a market cap, a volume or a supply
)

// Quote is a feed's latest figures for one coin.
type Quote struct {
	CoinID      string
	Price       float64
	TotalVolume float64 // 24 h, in USD
	// NoVolume: the feed does not know the volume (TotalVolume is 0).
	NoVolume bool
	// MarketCap in USD; 0 means price × circulating supply, and the
	// market cap is unknown when that is 0 too.
	MarketCap float64
	Time      time.Time
}

// MarketItem is one element of GET /markets: the description's full market
// item plus volume_24h (the short variant's name for total_volume), so both
// item variants are served. Pointers are null when the value is not known:
// a coin whose market cap is not known has no market cap rank either.
type MarketItem struct {
	ID                       string    `json:"id"`
	Symbol                   string    `json:"symbol"`
	Name                     string    `json:"name"`
	CurrentPrice             float64   `json:"current_price"`
	MarketCap                *float64  `json:"market_cap"`
	MarketCapRank            *int      `json:"market_cap_rank"`
	TotalVolume              *float64  `json:"total_volume"`
	Volume24h                *float64  `json:"volume_24h"`
	PriceChange24h           *float64  `json:"price_change_24h"`
	PriceChangePercentage24h *float64  `json:"price_change_percentage_24h"`
	CirculatingSupply        *float64  `json:"circulating_supply"`
	ATH                      float64   `json:"ath"`
	ATL                      float64   `json:"atl"`
	LastUpdated              time.Time `json:"last_updated"`
	// Place is the coin's place in the default order, from 1: by market
	// cap, the coins of unknown market cap last, ties by id. It is the
	// market cap rank where that is known, and the order's tie-breaker.
	Place int `json:"-"`
}

// CoinDetail is GET /coins/{idOrSymbol}: every market item field and more.
type CoinDetail struct {
	MarketItem
	High24h                      *float64  `json:"high_24h"`
	Low24h                       *float64  `json:"low_24h"`
	MarketCapChange24h           *float64  `json:"market_cap_change_24h"`
	MarketCapChangePercentage24h *float64  `json:"market_cap_change_percentage_24h"`
	PriceChangePercentage7d      *float64  `json:"price_change_percentage_7d"`
	PriceChangePercentage30d     *float64  `json:"price_change_percentage_30d"`
	PriceChangePercentage1y      *float64  `json:"price_change_percentage_1y"`
	ATHChangePercentage          float64   `json:"ath_change_percentage"`
	ATHDate                      time.Time `json:"ath_date"`
	ATLChangePercentage          float64   `json:"atl_change_percentage"`
	ATLDate                      time.Time `json:"atl_date"`
	TotalSupply                  *float64  `json:"total_supply"`
	MaxSupply                    *float64  `json:"max_supply"`
	FullyDilutedValuation        *float64  `json:"fully_diluted_valuation"`
	HistoryStart                 time.Time `json:"history_start"`
	ResolvedBy                   string    `json:"resolved_by"`
	Alternatives                 []CoinRef `json:"alternatives"`
}

// CoinRef names another coin that shares a symbol.
type CoinRef struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	MarketCapRank *int   `json:"market_cap_rank"`
}

// MarketCounter is implemented by a feed that knows how many markets
// (exchanges) trade its coins: GET /markets/global's markets, null while
// ok is false.
type MarketCounter interface {
	Markets() (n int, ok bool)
}

// GlobalStats is GET /markets/global.
type GlobalStats struct {
	TotalMarketCap               float64  `json:"total_market_cap"`
	TotalVolume24h               float64  `json:"total_volume_24h"`
	BitcoinDominance             *float64 `json:"bitcoin_dominance"`
	EthereumDominance            *float64 `json:"ethereum_dominance"`
	ActiveCryptocurrencies       int      `json:"active_cryptocurrencies"`
	Markets                      *int     `json:"markets"`
	MarketCapChangePercentage24h *float64 `json:"market_cap_change_percentage_24h"`
}

// Interval is the spacing of history points.
type Interval string

// The two history intervals.
const (
	Hourly Interval = "hourly"
	Daily  Interval = "daily"
)

// Step returns the duration between points of the interval.
func (i Interval) Step() time.Duration {
	if i == Hourly {
		return time.Hour
	}
	return 24 * time.Hour
}

// HistoryPoint is one point of a coin's price history. A market cap or a
// volume of 0 is one the feed does not know (the API serves it as null).
type HistoryPoint struct {
	Timestamp   time.Time `json:"timestamp"`
	Price       float64   `json:"price"`
	MarketCap   float64   `json:"market_cap"`
	TotalVolume float64   `json:"total_volume"`
}

// Series is a run of one coin's points at one interval, oldest first.
type Series struct {
	CoinID string
	Points []HistoryPoint
}

// HistoryStore keeps price history: hourly points for the recent past and
// daily points back to each coin's start.
type HistoryStore interface {
	// PutHistory stores the points of every series at interval, replacing
	// any point already stored at the same coin and timestamp. Timestamps
	// must be multiples of the interval's step (UTC). All or nothing.
	PutHistory(ctx context.Context, interval Interval, series []Series) error
	// History returns coinID's points at interval with from <= timestamp <=
	// to, oldest first; none is an empty slice, not an error.
	History(ctx context.Context, coinID string, interval Interval, from, to time.Time) ([]HistoryPoint, error)
	// PruneHistory deletes points at interval older than before.
	PruneHistory(ctx context.Context, interval Interval, before time.Time) error
}

// Feed is a source of market data: sim (a deterministic simulation),
// replay, coingecko, binance.
type Feed interface {
	// Name is the feed's name as the operator chose it ("sim").
	Name() string
	// Simulated reports whether the feed's figures are not the market's
	// of the moment: made up (sim), or of another time (replay).
	Simulated() bool
	// Universe returns the coins the feed serves.
	Universe(ctx context.Context) ([]CoinInfo, error)
	// History returns a coin's points at interval in [from, to], oldest
	// first, for backfilling the store.
	History(ctx context.Context, coin CoinInfo, interval Interval, from, to time.Time) ([]HistoryPoint, error)
	// Quotes returns the figures of every coin as of now.
	Quotes(ctx context.Context, now time.Time) ([]Quote, error)
}

// QuotedRollup is implemented by a feed whose History is costly (an
// upstream API called once a coin, at a rate): when RollupFromQuotes is
// true, a refresh that comes after the hour turned, by less than an hour,
// records the hour's point from its own quotes rather than from History.
// A gap of more than an hour is still filled from History.
type QuotedRollup interface {
	RollupFromQuotes() bool
}

// UniverseAdopter is implemented by a feed whose Universe is a choice of
// the moment (coingecko: the N largest coins when it is asked), so that a
// node can serve the coin set another node chose rather than its own.
type UniverseAdopter interface {
	// UniverseKey names what Universe chooses from (the feed and the
	// settings that shape its choice): sets of the same key may be
	// adopted.
	UniverseKey() string
	// Adopt makes coins, a set Universe returned (on this node or
	// another), the feed's universe, in place of a call to Universe, and
	// returns them as this node serves them. It fails, changing nothing,
	// for a set it cannot serve.
	Adopt(coins []CoinInfo) ([]CoinInfo, error)
}
