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
// turnover (24 h volume / market cap) and, for a wrapped, bridged or staked
// token, the id of the coin it tracks (pegged_to; see peg).
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
	peg       *peg // nil: the coin walks on its own
}

// peg makes a coin track another: a wrapped, bridged or (liquid-)staked
// token of a coin in the universe. Its price is the underlying's simulated
// price times ratio, times 1 + a small deterministic deviation (see
// deviation), so it can never drift away from what it tracks.
//
// ratio is the ratio of the two reference prices in universe.csv (1 for a
// plain wrapper, about 1.22 for wstETH), so that the coin still trades at
// its reference price at Anchor. It is fixed: the slow accrual of staking
// yield is not modelled. The underlying must walk on its own (no chains)
// and be listed no later than the pegged coin, whose annual_volatility and
// listing_price_usd are left empty: both come from the underlying.
type peg struct {
	under    *coin
	ratio    float64
	logRatio float64
	// maxDev bounds the deviation: maxPegDeviation, or one hourly standard
	// deviation of the underlying if that is less (a staked stablecoin
	// must not jitter more than the stablecoin does).
	maxDev float64
}

// maxPegDeviation is the largest relative deviation of a pegged coin's
// price from ratio × its underlying's.
const maxPegDeviation = 0.003

var universeColumns = []string{"id", "symbol", "name", "price_usd", "circulating_supply", "total_supply", "max_supply", "annual_volatility", "listed", "listing_price_usd", "turnover", "pegged_to"}

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
	peggedTo := map[*coin]string{}
	lineOf := map[*coin]int{}
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
		pegged := strings.TrimSpace(row[11])
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
		if vol, _, err = num(7, pegged != ""); err != nil {
			return nil, err
		}
		if c.info.ListedAt, err = time.Parse("2006-01-02", row[8]); err != nil {
			return nil, fmt.Errorf("universe.csv line %d: listed: %w", line, err)
		}
		if c.listPrice, _, err = num(9, pegged != ""); err != nil {
			return nil, err
		}
		if c.turnover, _, err = num(10, false); err != nil {
			return nil, err
		}
		if pegged != "" {
			if vol != 0 || c.listPrice != 0 {
				return nil, fmt.Errorf("universe.csv line %d: %s is pegged to %s: leave annual_volatility and listing_price_usd empty, they come from %s", line, c.info.ID, pegged, pegged)
			}
			peggedTo[c], lineOf[c] = pegged, line
		} else {
			c.setVolatility(vol)
		}
		c.key = hashString(c.info.ID)
		coins = append(coins, c)
	}
	if err := resolvePegs(coins, peggedTo, lineOf); err != nil {
		return nil, err
	}
	return coins, nil
}

// resolvePegs links each pegged coin to its underlying.
func resolvePegs(coins []*coin, peggedTo map[*coin]string, lineOf map[*coin]int) error {
	byID := make(map[string]*coin, len(coins))
	for _, c := range coins {
		byID[c.info.ID] = c
	}
	for _, c := range coins {
		id, ok := peggedTo[c]
		if !ok {
			continue
		}
		u := byID[id]
		switch {
		case u == nil:
			return fmt.Errorf("universe.csv line %d: %s is pegged to %q, which is not in the universe", lineOf[c], c.info.ID, id)
		case u == c:
			return fmt.Errorf("universe.csv line %d: %s is pegged to itself", lineOf[c], c.info.ID)
		case peggedTo[u] != "":
			return fmt.Errorf("universe.csv line %d: %s is pegged to %s, which is itself pegged (to %s)", lineOf[c], c.info.ID, id, peggedTo[u])
		case c.info.ListedAt.Before(u.info.ListedAt):
			return fmt.Errorf("universe.csv line %d: %s (listed %s) is pegged to %s, listed later (%s)", lineOf[c], c.info.ID, c.info.ListedAt.Format(time.DateOnly), id, u.info.ListedAt.Format(time.DateOnly))
		}
		ratio := c.ref / u.ref
		c.peg = &peg{under: u, ratio: ratio, logRatio: math.Log(ratio), maxDev: math.Min(maxPegDeviation, u.sigmaH)}
		c.sigmaD, c.sigmaH = u.sigmaD, u.sigmaH // its volatility; the path uses the underlying's
	}
	return nil
}

func (c *coin) setVolatility(annual float64) {
	c.sigmaD = annual / math.Sqrt(365)
	c.sigmaH = annual / math.Sqrt(365*24)
}

var (
	syllables = []string{"ka", "zo", "ri", "mu", "ne", "ta", "vo", "li", "qu", "xa", "be", "do", "fi", "gu", "ho", "ji", "la", "mo", "nu", "pe", "ra", "si", "tu", "ve", "wy", "ze", "cor", "lux", "nex", "tri", "vel", "zen"}
	suffixes  = []string{"Coin", "Token", "Chain", "Network", "Protocol", "Finance", "Swap", "AI", "DAO", "Verse"}
)

// maxSymbolLen is the longest a synthetic symbol grows by taking more
// letters of its name (see uniqueSymbol).
const maxSymbolLen = 6

// synthetic returns n made-up coins (ids sim-<name>) to follow the real
// ones, derived only from the seed. At anchor their market caps fall off
// with rank from below the smallest real coin's; from there every coin,
// real or synthetic, walks on its own, so a synthetic coin may later
// outrank real ones.
//
// A synthetic coin's symbol is shared with no other coin and is no real
// coin's id (case-insensitive), so that it never stands in the way of a
// real ticker or id (GET /coins/{idOrSymbol}, coin_id of a trade or an
// alert), and its name is no other coin's. When the symbol drawn (the
// first 3 or 4 letters of the name) or the name is taken, an alternative
// is derived from it without a further draw (uniqueSymbol, uniqueName), in
// coin order: the first coin to draw a symbol keeps it, and a larger
// universe extends a smaller one.
func synthetic(seed uint64, n int, realCoins []*coin, anchor time.Time) []*coin {
	smallestCap := math.Inf(1)
	all := len(realCoins) + n
	ids := make(map[string]bool, all)
	symbols := make(map[string]bool, all+len(realCoins)) // lower case: taken as a symbol, or a real coin's id
	names := make(map[string]bool, all)                  // lower case
	for _, c := range realCoins {
		smallestCap = math.Min(smallestCap, c.ref*c.info.CirculatingSupply)
		ids[c.info.ID] = true
		symbols[strings.ToLower(c.info.ID)] = true
		symbols[strings.ToLower(c.info.Symbol)] = true
		names[strings.ToLower(c.info.Name)] = true
	}
	next := map[string]int{} // the next number to try after a symbol or name stem
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
		if ids[id] {
			id = fmt.Sprintf("%s-%d", id, i)
		}
		ids[id] = true
		symLen := 3 + int(u(5)*2)
		sym := uniqueSymbol(strings.ToLower(base), symLen, symbols, next)
		symbols[sym] = true
		name := uniqueName(strings.ToUpper(base[:1])+base[1:], int(u(6)*float64(len(suffixes))), names, next)
		names[strings.ToLower(name)] = true
		// Market caps at anchor fall off with rank, below the smallest real
		// coin's.
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

// uniqueSymbol returns the first of these that is not taken: word's first
// symLen letters (the symbol drawn), then its first symLen+1, … up to
// maxSymbolLen letters, then the symbol drawn followed by 2, 3, …
// (zec: zeco, zecor, zecorx, zec2). next remembers, per symbol drawn, the
// number to try first: taken only grows, so no smaller one is free.
func uniqueSymbol(word string, symLen int, taken map[string]bool, next map[string]int) string {
	stem := word[:min(symLen, len(word))]
	for l := len(stem); l <= min(len(word), maxSymbolLen); l++ {
		if !taken[word[:l]] {
			return word[:l]
		}
	}
	return numbered(stem, "", taken, next)
}

// uniqueName returns the first of these that is not taken (lower case):
// word with the suffix drawn, then with each other suffix in turn, then
// with the suffix drawn followed by 2, 3, … ("Zomo Token", "Zomo Chain",
// …, "Zomo Token 2").
func uniqueName(word string, suffix int, taken map[string]bool, next map[string]int) string {
	for k := range suffixes {
		name := word + " " + suffixes[(suffix+k)%len(suffixes)]
		if !taken[strings.ToLower(name)] {
			return name
		}
	}
	return numbered(word+" "+suffixes[suffix], " ", taken, next)
}

// numbered returns stem, sep and the first number from 2 (or from where
// the last call for stem left off) that makes a string not taken (lower
// case). Stems end in a letter, so no two stems make the same string.
func numbered(stem, sep string, taken map[string]bool, next map[string]int) string {
	key := sep + "\x00" + stem
	k := max(next[key], 2)
	for ; ; k++ {
		if s := stem + sep + strconv.Itoa(k); !taken[strings.ToLower(s)] {
			next[key] = k + 1
			return s
		}
	}
}

// RealCoins returns the bundled real coins' info (CoinGecko-style ids,
// symbols, names and supplies as of late 2025), in universe.csv's order,
// largest first: for a feed that prices real coins but knows no more of
// them than their ticker symbol (binance).
func RealCoins() ([]coinpulse.CoinInfo, error) {
	coins, err := parseUniverse(universeCSV)
	if err != nil {
		return nil, err
	}
	out := make([]coinpulse.CoinInfo, len(coins))
	for i, c := range coins {
		out[i] = c.info
	}
	return out, nil
}
