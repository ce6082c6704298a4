package api

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/ledger"
	"coinpulse/internal/market"
)

// num is a decimal written as a JSON number with every digit it has: no
// float conversion on the way out.
type num decimal.Decimal

func (n num) MarshalJSON() ([]byte, error) { return []byte(decimal.Decimal(n).String()), nil }

func optNum(d decimal.Decimal, ok bool) *num {
	if !ok {
		return nil
	}
	n := num(d)
	return &n
}

type holdingView struct {
	ID                   int64     `json:"id"`
	PortfolioID          int64     `json:"portfolio_id"`
	CoinID               string    `json:"coin_id"`
	CoinSymbol           string    `json:"coin_symbol"`
	CoinName             string    `json:"coin_name"`
	Quantity             num       `json:"quantity"`
	AverageBuyPrice      *num      `json:"average_buy_price"`
	TotalCost            num       `json:"total_cost"`
	CurrentPrice         *num      `json:"current_price"`
	CurrentValue         *num      `json:"current_value"`
	ProfitLoss           *num      `json:"profit_loss"`
	ProfitLossPercentage *num      `json:"profit_loss_percentage"`
	Notes                string    `json:"notes"`
	CreatedAt            time.Time `json:"created_at"`
	UpdatedAt            time.Time `json:"updated_at"`
}

type portfolioView struct {
	ID                   int64         `json:"id"`
	Name                 string        `json:"name"`
	Description          string        `json:"description"`
	TotalValue           *num          `json:"total_value"`
	TotalCost            num           `json:"total_cost"`
	ProfitLoss           *num          `json:"profit_loss"`
	ProfitLossPercentage *num          `json:"profit_loss_percentage"`
	RealizedProfitLoss   num           `json:"realized_profit_loss"`
	HoldingsCount        int           `json:"holdings_count"`
	CreatedAt            time.Time     `json:"created_at"`
	UpdatedAt            time.Time     `json:"updated_at"`
	SyncedAt             *time.Time    `json:"synced_at"`
	Holdings             []holdingView `json:"holdings"`
}

type transactionView struct {
	ID                 int64     `json:"id"`
	PortfolioID        int64     `json:"portfolio_id"`
	HoldingID          int64     `json:"holding_id"`
	CoinID             string    `json:"coin_id"`
	CoinSymbol         string    `json:"coin_symbol"`
	Type               string    `json:"type"`
	Quantity           num       `json:"quantity"`
	Price              num       `json:"price"`
	Total              num       `json:"total"`
	RealizedProfitLoss *num      `json:"realized_profit_loss"`
	Notes              string    `json:"notes"`
	ExecutedAt         time.Time `json:"executed_at"`
	CreatedAt          time.Time `json:"created_at"`
}

// price returns a coin's current price in snap as a decimal; false when
// there is no snapshot yet or the coin is not in it.
func price(snap *market.Snapshot, coinID string) (decimal.Decimal, bool) {
	if snap == nil {
		return decimal.Decimal{}, false
	}
	prices, _ := market.Memo(snap, "decimal-prices", func() (map[string]decimal.Decimal, error) {
		return decimalPrices(snap), nil
	})
	d, ok := prices[coinID]
	return d, ok
}

// decimalPrices converts every price of snap to a decimal once, for all
// the portfolios priced at it.
func decimalPrices(snap *market.Snapshot) map[string]decimal.Decimal {
	coins, _ := snap.Page(market.MarketCapDesc, 1, snap.Len())
	out := make(map[string]decimal.Decimal, len(coins))
	for _, c := range coins {
		out[c.ID] = decimal.NewFromFloat(c.CurrentPrice)
	}
	return out
}

// viewHolding prices h at snap; value, price and P/L are null when the
// coin has no price there.
func viewHolding(h *coinpulse.Holding, snap *market.Snapshot) holdingView {
	v := holdingView{
		ID: h.ID, PortfolioID: h.PortfolioID, CoinID: h.CoinID, CoinSymbol: h.CoinSymbol, CoinName: h.CoinName,
		Quantity: num(h.Quantity), TotalCost: num(h.TotalCost), Notes: h.Notes,
		CreatedAt: h.CreatedAt.UTC(), UpdatedAt: h.UpdatedAt.UTC(),
	}
	v.AverageBuyPrice = optNum(ledger.AverageBuyPrice(*h))
	if p, ok := price(snap, h.CoinID); ok {
		value := h.Quantity.Mul(p)
		pl := value.Sub(h.TotalCost)
		v.CurrentPrice, v.CurrentValue = optNum(p, true), optNum(value, true)
		v.ProfitLoss, v.ProfitLossPercentage = optNum(pl, true), optNum(ledger.Percent(pl, h.TotalCost), true)
	}
	return v
}

// viewPortfolio prices p's holdings at snap. Its value and P/L are null
// while a holding that holds some quantity has no price (see unpriced): a
// sum that left it out would be a made-up figure.
func viewPortfolio(p *coinpulse.Portfolio, snap *market.Snapshot) portfolioView {
	v := portfolioView{
		ID: p.ID, Name: p.Name, Description: p.Description,
		RealizedProfitLoss: num(p.RealizedPL), HoldingsCount: len(p.Holdings),
		CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(), SyncedAt: p.SyncedAt,
		Holdings: make([]holdingView, len(p.Holdings)),
	}
	value, cost := decimal.Zero, decimal.Zero
	for i := range p.Holdings {
		h := viewHolding(&p.Holdings[i], snap)
		v.Holdings[i] = h
		cost = cost.Add(p.Holdings[i].TotalCost)
		if h.CurrentValue != nil {
			value = value.Add(decimal.Decimal(*h.CurrentValue))
		}
	}
	v.TotalCost = num(cost)
	if v.unpriced() == nil {
		pl := value.Sub(cost)
		v.TotalValue, v.ProfitLoss, v.ProfitLossPercentage = optNum(value, true), optNum(pl, true), optNum(ledger.Percent(pl, cost), true)
	}
	if v.SyncedAt != nil {
		t := v.SyncedAt.UTC()
		v.SyncedAt = &t
	}
	return v
}

// unpriced returns the first holding that holds some quantity of a coin
// without a market price, nil if none. A sold-out holding is worth 0
// whatever the price.
func (v *portfolioView) unpriced() *holdingView {
	for i := range v.Holdings {
		if h := &v.Holdings[i]; h.CurrentValue == nil && !decimal.Decimal(h.Quantity).IsZero() {
			return h
		}
	}
	return nil
}

func viewTransaction(t *coinpulse.Transaction) transactionView {
	v := transactionView{
		ID: t.ID, PortfolioID: t.PortfolioID, HoldingID: t.HoldingID, CoinID: t.CoinID, CoinSymbol: t.CoinSymbol,
		Type: string(t.Type), Quantity: num(t.Quantity), Price: num(t.Price), Total: num(t.Total),
		Notes: t.Notes, ExecutedAt: t.ExecutedAt.UTC(), CreatedAt: t.CreatedAt.UTC(),
	}
	v.RealizedProfitLoss = optNum(t.RealizedPL.Decimal, t.RealizedPL.Valid)
	return v
}

// The hand encoders below write the same bytes as encoding/json would for
// holdingView and portfolioView (a test pins them), without reflection: a
// portfolio of 1,000 holdings is 15,000 fields.

func appendKey(b []byte, name string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendNum(b []byte, name string, n num) []byte {
	return appendDecimal(appendKey(b, name), decimal.Decimal(n))
}

// appendDecimal appends d.String() without allocating when d's
// coefficient fits in an int64 (nearly always): shopspring formats
// through big.Int.
func appendDecimal(b []byte, d decimal.Decimal) []byte {
	if d.NumDigits() > 18 {
		return append(b, d.String()...)
	}
	c, exp := d.CoefficientInt64(), int(d.Exponent())
	if c == 0 {
		return append(b, '0')
	}
	if c < 0 {
		b = append(b, '-')
		c = -c
	}
	start := len(b)
	b = strconv.AppendInt(b, c, 10)
	if exp >= 0 {
		for range exp {
			b = append(b, '0')
		}
		return b
	}
	digits := len(b) - start
	if lead := -exp - digits; lead >= 0 { // 0.00ddd
		b = append(b, make([]byte, lead+2)...)
		copy(b[start+lead+2:], b[start:start+digits])
		b[start], b[start+1] = '0', '.'
		for i := range lead {
			b[start+2+i] = '0'
		}
	} else { // ddd.ddd
		point := start + digits + exp
		b = append(b, 0)
		copy(b[point+1:], b[point:len(b)-1])
		b[point] = '.'
	}
	for b[len(b)-1] == '0' {
		b = b[:len(b)-1]
	}
	if b[len(b)-1] == '.' {
		b = b[:len(b)-1]
	}
	return b
}

func appendOptNum(b []byte, name string, n *num) []byte {
	if n == nil {
		return append(appendKey(b, name), "null"...)
	}
	return appendNum(b, name, *n)
}

func appendStr(b []byte, name, s string) []byte {
	b = appendKey(b, name)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendTime(b []byte, name string, t time.Time) []byte {
	b = append(appendKey(b, name), '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func (v *holdingView) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, v.ID, 10)
	b = append(appendKey(b, "portfolio_id"), strconv.FormatInt(v.PortfolioID, 10)...)
	b = appendStr(b, "coin_id", v.CoinID)
	b = appendStr(b, "coin_symbol", v.CoinSymbol)
	b = appendStr(b, "coin_name", v.CoinName)
	b = appendNum(b, "quantity", v.Quantity)
	b = appendOptNum(b, "average_buy_price", v.AverageBuyPrice)
	b = appendNum(b, "total_cost", v.TotalCost)
	b = appendOptNum(b, "current_price", v.CurrentPrice)
	b = appendOptNum(b, "current_value", v.CurrentValue)
	b = appendOptNum(b, "profit_loss", v.ProfitLoss)
	b = appendOptNum(b, "profit_loss_percentage", v.ProfitLossPercentage)
	b = appendStr(b, "notes", v.Notes)
	b = appendTime(b, "created_at", v.CreatedAt)
	b = appendTime(b, "updated_at", v.UpdatedAt)
	return append(b, '}')
}

func (v *portfolioView) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, v.ID, 10)
	b = appendStr(b, "name", v.Name)
	b = appendStr(b, "description", v.Description)
	b = appendOptNum(b, "total_value", v.TotalValue)
	b = appendNum(b, "total_cost", v.TotalCost)
	b = appendOptNum(b, "profit_loss", v.ProfitLoss)
	b = appendOptNum(b, "profit_loss_percentage", v.ProfitLossPercentage)
	b = appendNum(b, "realized_profit_loss", v.RealizedProfitLoss)
	b = append(appendKey(b, "holdings_count"), strconv.Itoa(v.HoldingsCount)...)
	b = appendTime(b, "created_at", v.CreatedAt)
	b = appendTime(b, "updated_at", v.UpdatedAt)
	if v.SyncedAt == nil {
		b = append(appendKey(b, "synced_at"), "null"...)
	} else {
		b = appendTime(b, "synced_at", *v.SyncedAt)
	}
	b = append(appendKey(b, "holdings"), '[')
	for i := range v.Holdings {
		if i > 0 {
			b = append(b, ',')
		}
		b = v.Holdings[i].appendJSON(b)
	}
	return append(b, ']', '}')
}

// MarshalJSON makes encoding/json (a list of portfolios) use the hand
// encoder too.
func (v portfolioView) MarshalJSON() ([]byte, error) { return v.appendJSON(nil), nil }
