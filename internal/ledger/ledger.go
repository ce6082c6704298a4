// Package ledger does portfolio accounting in decimals: parsing amounts
// within bounds, buys and sells on the average-cost basis, and a
// portfolio's figures at market prices. It is pure: stores persist what it
// computes, under their own locks.
//
// The method: a holding keeps its quantity and the cost of that quantity
// (TotalCost). A buy adds quantity×price to the cost. A sell of q takes
// q/quantity of the cost away, and the profit realised is q×sell price
// minus that share; selling everything takes the whole cost, so a holding
// sold to zero is left with exactly zero quantity and zero cost. Products
// are exact; the one division (the cost share of a partial sell) is rounded
// half away from zero (shopspring's DivRound) to CostScale decimal places.
package ledger

import (
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
)

// Bounds on amounts a client sends.
const (
	// MaxScale is the most decimal places a quantity or a price may carry
	// (an ERC-20 token's 18).
	MaxScale = 18
	// MaxDigits bounds the integer digits of a quantity or a price:
	// amounts up to 10^15 - 1.
	MaxDigits = 15
	// CostScale is the scale a partial sell's share of the cost is rounded
	// to.
	CostScale = 18
	// PercentScale is the scale percentages are rounded to.
	PercentScale = 8
	// maxLen bounds the text of an amount before it is parsed.
	maxLen = 64
)

var (
	maxAmount = decimal.New(1, MaxDigits)
	hundred   = decimal.New(100, 0)
)

// Parse reads a decimal amount: digits with an optional fraction and
// exponent (JSON number syntax). It rejects anything else, negative
// amounts, more than MaxScale decimal places and amounts of 10^MaxDigits or
// more, with a message fit for a VALIDATION_ERROR detail.
func Parse(s string) (decimal.Decimal, error) {
	if s == "" {
		return decimal.Decimal{}, fmt.Errorf("must be a number")
	}
	if len(s) > maxLen {
		return decimal.Decimal{}, fmt.Errorf("must be a number of at most %d characters", maxLen)
	}
	if s[0] == '-' {
		if !jsonNumber(s[1:]) {
			return decimal.Decimal{}, fmt.Errorf("must be a number")
		}
		if d, err := decimal.NewFromString(s); err == nil && d.IsZero() {
			return decimal.Zero, nil
		}
		return decimal.Decimal{}, fmt.Errorf("must not be negative")
	}
	if !jsonNumber(s) {
		if numberSyntax(s, maxLen) {
			return decimal.Decimal{}, fmt.Errorf("must be a number with an exponent of at most 3 digits")
		}
		return decimal.Decimal{}, fmt.Errorf("must be a number")
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("must be a number")
	}
	// jsonNumber bounded the exponent, so these cannot blow up.
	if d.Cmp(maxAmount) >= 0 {
		return decimal.Decimal{}, fmt.Errorf("must be less than 10^%d", MaxDigits)
	}
	if !d.Truncate(MaxScale).Equal(d) {
		return decimal.Decimal{}, fmt.Errorf("must have at most %d decimal places", MaxScale)
	}
	return canonical(d), nil
}

// jsonNumber reports whether s is a non-negative JSON number whose
// exponent, if any, is at most three digits.
func jsonNumber(s string) bool { return numberSyntax(s, 3) }

// numberSyntax reports whether s is a JSON number without a sign whose
// exponent has at most expDigits digits.
func numberSyntax(s string, expDigits int) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	start := i
	if digits() == 0 {
		return false
	}
	if s[start] == '0' && i-start > 1 {
		return false // leading zero
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if n := digits(); n == 0 || n > expDigits {
			return false
		}
	}
	return i == len(s)
}

// canonical drops trailing fractional zeros, so that 0.30 is stored and
// shown as 0.3.
func canonical(d decimal.Decimal) decimal.Decimal {
	if d.IsZero() {
		return decimal.Zero
	}
	s := d.String() // plain digits, no exponent
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	c, _ := decimal.NewFromString(s)
	return c
}

// Lot is one buy or sell as the client asked for it.
type Lot struct {
	Quantity   decimal.Decimal // > 0
	Price      decimal.Decimal // >= 0
	Notes      string
	ExecutedAt time.Time
}

// BuyFunc returns the coinpulse.TradeFunc that adds lot to a holding
// (creating it when h.ID is 0).
func BuyFunc(lot Lot) coinpulse.TradeFunc {
	return func(h coinpulse.Holding) (coinpulse.Holding, coinpulse.Transaction, error) {
		return Buy(h, lot)
	}
}

// SellFunc returns the coinpulse.TradeFunc that sells lot from a holding.
func SellFunc(lot Lot) coinpulse.TradeFunc {
	return func(h coinpulse.Holding) (coinpulse.Holding, coinpulse.Transaction, error) {
		return Sell(h, lot)
	}
}

// Buy adds lot to h: the quantity grows by lot.Quantity and the cost by
// lot.Quantity × lot.Price. A quantity that would reach 10^15 is a
// VALIDATION_ERROR on quantity.
func Buy(h coinpulse.Holding, lot Lot) (coinpulse.Holding, coinpulse.Transaction, error) {
	if !lot.Quantity.IsPositive() {
		return h, coinpulse.Transaction{}, coinpulse.ValidationError("quantity", "must be greater than 0")
	}
	if lot.Price.IsNegative() {
		return h, coinpulse.Transaction{}, coinpulse.ValidationError("price", "must not be negative")
	}
	if q := h.Quantity.Add(lot.Quantity); q.Cmp(maxAmount) >= 0 {
		// Each amount sent is under 10^15; so is what a holding holds.
		return h, coinpulse.Transaction{}, coinpulse.ValidationError("quantity",
			fmt.Sprintf("would take the holding to %s; a holding holds less than 10^15 (it holds %s)", q.String(), h.Quantity.String()))
	}
	total := lot.Quantity.Mul(lot.Price)
	if lot.Notes != "" {
		h.Notes = lot.Notes // a buy's notes describe the holding too
	}
	h.Quantity = canonical(h.Quantity.Add(lot.Quantity))
	h.TotalCost = canonical(h.TotalCost.Add(total))
	tx := coinpulse.Transaction{
		PortfolioID: h.PortfolioID, HoldingID: h.ID, CoinID: h.CoinID, CoinSymbol: h.CoinSymbol,
		Type: coinpulse.Buy, Quantity: lot.Quantity, Price: lot.Price, Total: canonical(total),
		Notes: lot.Notes, ExecutedAt: lot.ExecutedAt,
	}
	return h, tx, nil
}

// Sell takes lot from h at the average cost. Selling more than h holds is
// a VALIDATION_ERROR on quantity, and selling from a holding that does not
// exist (h.ID 0) one on coin_id; either way h is returned unchanged.
func Sell(h coinpulse.Holding, lot Lot) (coinpulse.Holding, coinpulse.Transaction, error) {
	if !lot.Quantity.IsPositive() {
		return h, coinpulse.Transaction{}, coinpulse.ValidationError("quantity", "must be greater than 0")
	}
	if lot.Price.IsNegative() {
		return h, coinpulse.Transaction{}, coinpulse.ValidationError("price", "must not be negative")
	}
	if h.ID == 0 {
		return h, coinpulse.Transaction{}, coinpulse.ValidationError("coin_id", fmt.Sprintf("the portfolio holds no %s to sell", h.CoinID))
	}
	if lot.Quantity.GreaterThan(h.Quantity) {
		return h, coinpulse.Transaction{}, coinpulse.ValidationError("quantity", fmt.Sprintf("must not exceed the %s held", h.Quantity.String()))
	}
	share := h.TotalCost
	if !lot.Quantity.Equal(h.Quantity) {
		share = h.TotalCost.Mul(lot.Quantity).DivRound(h.Quantity, CostScale)
		// A cost with more places than CostScale (a product of two
		// 18-place amounts) could round up past itself.
		share = decimal.Min(share, h.TotalCost)
	}
	proceeds := lot.Quantity.Mul(lot.Price)
	h.Quantity = canonical(h.Quantity.Sub(lot.Quantity))
	h.TotalCost = canonical(h.TotalCost.Sub(share))
	tx := coinpulse.Transaction{
		PortfolioID: h.PortfolioID, HoldingID: h.ID, CoinID: h.CoinID, CoinSymbol: h.CoinSymbol,
		Type: coinpulse.Sell, Quantity: lot.Quantity, Price: lot.Price, Total: canonical(proceeds),
		RealizedPL: decimal.NewNullDecimal(canonical(proceeds.Sub(share))),
		Notes:      lot.Notes, ExecutedAt: lot.ExecutedAt,
	}
	return h, tx, nil
}

// AverageBuyPrice is the cost per unit held, rounded to CostScale places;
// false when nothing is held.
func AverageBuyPrice(h coinpulse.Holding) (decimal.Decimal, bool) {
	if !h.Quantity.IsPositive() {
		return decimal.Decimal{}, false
	}
	return h.TotalCost.DivRound(h.Quantity, CostScale), true
}

// Percent is part/whole × 100 rounded to PercentScale places, 0 when whole
// is 0.
func Percent(part, whole decimal.Decimal) decimal.Decimal {
	if whole.IsZero() {
		return decimal.Zero
	}
	return part.Mul(hundred).DivRound(whole, PercentScale)
}
