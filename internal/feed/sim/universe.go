package sim

import (
	_ "embed"
	"encoding/csv"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"coinpulse"
)

// universe.csv lists the few hundred largest real coins with reference
// figures written by us from public knowledge (late 2025): price, supplies,
// annualised volatility, the date their history begins and the price then,
// and turnover (24 h volume / market cap).
//
//go:embed universe.csv
var universeCSV string

// MinCoins is the size of the default universe: the real coins topped up
// with synthetic sim- coins. MaxCoins is the largest --sim-coins allows.
const (
	MinCoins = 1000
	MaxCoins = 100_000
)

// coin is one simulated coin: its public info and the parameters of its
// price path.
type coin struct {
	info      coinpulse.CoinInfo
	key       uint64  // stream key derived from the id
	ref       float64 // price at the anchor
	sigmaH    float64 // volatility per hour (log)
	sigmaD    float64 // volatility per day (log)
	listPrice float64
	turnover  float64
}

var universeColumns = []string{"id", "symbol", "name", "price_usd", "circulating_supply", "total_supply", "max_supply", "annual_volatility", "listed", "listing_price_usd", "turnover"}

// parseUniverse reads the bundled CSV.
func parseUniverse(text string) ([]*coin, error) {
	r := csv.NewReader(strings.NewReader(text))
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("universe.csv: %w", err)
	}
	if len(rows) < 2 || strings.Join(rows[0], ",") != strings.Join(universeColumns, ",") {
		return nil, fmt.Errorf("universe.csv: header must be %s", strings.Join(universeColumns, ","))
	}
	seen := map[string]bool{}
	var coins []*coin
	for i, row := range rows[1:] {
		line := i + 2
		num := func(col int, optional bool) (float64, *float64, error) {
			s := strings.TrimSpace(row[col])
			if s == "" && optional {
				return 0, nil, nil
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || !(v > 0) || math.IsInf(v, 0) { // !(v > 0) also rejects NaN
				return 0, nil, fmt.Errorf("universe.csv line %d: %s %q is not a positive number", line, universeColumns[col], s)
			}
			return v, &v, nil
		}
		c := &coin{info: coinpulse.CoinInfo{ID: row[0], Symbol: strings.ToLower(row[1]), Name: row[2]}}
		if c.info.ID == "" || seen[c.info.ID] {
			return nil, fmt.Errorf("universe.csv line %d: empty or duplicate id %q", line, c.info.ID)
		}
		seen[c.info.ID] = true
		var vol float64
		if c.ref, _, err = num(3, false); err != nil {
			return nil, err
		}
		if c.info.CirculatingSupply, _, err = num(4, false); err != nil {
			return nil, err
		}
		if _, c.info.TotalSupply, err = num(5, true); err != nil {
			return nil, err
		}
		if _, c.info.MaxSupply, err = num(6, true); err != nil {
			return nil, err
		}
		if vol, _, err = num(7, false); err != nil {
			return nil, err
		}
		if c.info.ListedAt, err = time.Parse("2006-01-02", row[8]); err != nil {
			return nil, fmt.Errorf("universe.csv line %d: listed: %w", line, err)
		}
		if c.listPrice, _, err = num(9, false); err != nil {
			return nil, err
		}
		if c.turnover, _, err = num(10, false); err != nil {
			return nil, err
		}
		c.setVolatility(vol)
		c.key = hashString(c.info.ID)
		coins = append(coins, c)
	}
	return coins, nil
}

func (c *coin) setVolatility(annual float64) {
	c.sigmaD = annual / math.Sqrt(365)
	c.sigmaH = annual / math.Sqrt(365*24)
}

var (
	syllables = []string{"ka", "zo", "ri", "mu", "ne", "ta", "vo", "li", "qu", "xa", "be", "do", "fi", "gu", "ho", "ji", "la", "mo", "nu", "pe", "ra", "si", "tu", "ve", "wy", "ze", "cor", "lux", "nex", "tri", "vel", "zen"}
	suffixes  = []string{"Coin", "Token", "Chain", "Network", "Protocol", "Finance", "Swap", "AI", "DAO", "Verse"}
)

// synthetic returns n made-up coins (ids sim-<name>), ranked below the
// smallest real coin by construction, derived only from the seed.
func synthetic(seed uint64, n int, smallestCap float64, taken map[string]bool, anchor time.Time) []*coin {
	coins := make([]*coin, 0, n)
	for i := 0; len(coins) < n; i++ {
		u := func(j int64) float64 { return uniform(mix(seed, uint64(i), streamParams, j)) }
		var word strings.Builder
		parts := 2 + int(u(0)*2)
		for p := 0; p < parts; p++ {
			word.WriteString(syllables[int(u(int64(1+p))*float64(len(syllables)))])
		}
		base := word.String()
		id := "sim-" + base
		if taken[id] {
			id = fmt.Sprintf("%s-%d", id, i)
		}
		taken[id] = true
		symLen := 3 + int(u(5)*2)
		sym := strings.ToLower(base)
		if len(sym) > symLen {
			sym = sym[:symLen]
		}
		name := strings.ToUpper(base[:1]) + base[1:] + " " + suffixes[int(u(6)*float64(len(suffixes)))]
		// Market caps fall off with rank, below the smallest real coin.
		rank := float64(len(coins) + 1)
		mcap := smallestCap * 0.95 * math.Pow(rank, -0.9) * (0.9 + 0.1*u(7))
		price := math.Exp(math.Log(0.0001) + u(8)*(math.Log(500)-math.Log(0.0001)))
		c := &coin{
			info: coinpulse.CoinInfo{
				ID:                id,
				Symbol:            sym,
				Name:              name,
				CirculatingSupply: mcap / price,
				ListedAt:          anchor.AddDate(0, 0, -60-int(u(9)*1900)),
			},
			key:       hashString(id),
			ref:       price,
			listPrice: price * math.Exp(1.2*normal(seed, uint64(i), streamParams, 10)),
			turnover:  0.01 + u(11)*0.3,
		}
		total := c.info.CirculatingSupply * (1 + u(12))
		c.info.TotalSupply = &total
		if u(13) < 0.5 {
			maxS := total * (1 + u(14))
			c.info.MaxSupply = &maxS
		}
		c.setVolatility(0.8 + u(15)*1.2)
		coins = append(coins, c)
	}
	return coins
}
