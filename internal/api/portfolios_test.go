package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/ledger"
)

// send sends a request with a JSON body through the server's handler.
func send(t *testing.T, srv *Server, method, target, key, body string) *response {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return serve(t, srv, req)
}

// want checks a success response's status and unmarshals its data, with
// numbers as json.Number so that their digits are compared exactly.
func want[T any](t *testing.T, res *response, status int) T {
	t.Helper()
	if res.Status != status {
		t.Fatalf("status %d, want %d: %s", res.Status, status, res.Raw)
	}
	var v T
	dec := json.NewDecoder(strings.NewReader(string(res.Data)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("data: %v\n%s", err, res.Data)
	}
	return v
}

type jsonHolding struct {
	ID                   int64        `json:"id"`
	PortfolioID          int64        `json:"portfolio_id"`
	CoinID               string       `json:"coin_id"`
	CoinSymbol           string       `json:"coin_symbol"`
	CoinName             string       `json:"coin_name"`
	Quantity             json.Number  `json:"quantity"`
	AverageBuyPrice      *json.Number `json:"average_buy_price"`
	TotalCost            json.Number  `json:"total_cost"`
	CurrentPrice         *json.Number `json:"current_price"`
	CurrentValue         *json.Number `json:"current_value"`
	ProfitLoss           *json.Number `json:"profit_loss"`
	ProfitLossPercentage *json.Number `json:"profit_loss_percentage"`
	Notes                string       `json:"notes"`
}

type jsonPortfolio struct {
	ID                   int64         `json:"id"`
	Name                 string        `json:"name"`
	Description          string        `json:"description"`
	TotalValue           *json.Number  `json:"total_value"`
	TotalCost            json.Number   `json:"total_cost"`
	ProfitLoss           *json.Number  `json:"profit_loss"`
	ProfitLossPercentage *json.Number  `json:"profit_loss_percentage"`
	RealizedProfitLoss   json.Number   `json:"realized_profit_loss"`
	HoldingsCount        int           `json:"holdings_count"`
	SyncedAt             *string       `json:"synced_at"`
	Holdings             []jsonHolding `json:"holdings"`
}

type jsonTransaction struct {
	ID                 int64        `json:"id"`
	HoldingID          int64        `json:"holding_id"`
	CoinID             string       `json:"coin_id"`
	Type               string       `json:"type"`
	Quantity           json.Number  `json:"quantity"`
	Price              json.Number  `json:"price"`
	Total              json.Number  `json:"total"`
	RealizedProfitLoss *json.Number `json:"realized_profit_loss"`
	ExecutedAt         string       `json:"executed_at"`
}

type jsonTrade struct {
	Transaction jsonTransaction `json:"transaction"`
	Holding     jsonHolding     `json:"holding"`
}

func numIs(t *testing.T, what string, got *json.Number, want string) {
	t.Helper()
	switch {
	case want == "null" && got != nil:
		t.Errorf("%s = %s, want null", what, *got)
	case want != "null" && got == nil:
		t.Errorf("%s = null, want %s", what, want)
	case got != nil && string(*got) != want:
		t.Errorf("%s = %s, want exactly %s", what, *got, want)
	}
}

// newHolding buys into portfolio pid with body (a HoldingAdd).
func newHolding(t *testing.T, srv *Server, key string, pid int64, body string) jsonHolding {
	t.Helper()
	return want[jsonHolding](t, send(t, srv, "POST", fmt.Sprintf("/api/v1/portfolio/%d/holdings", pid), key, body), http.StatusCreated)
}

func newPortfolio(t *testing.T, srv *Server, key, name string) jsonPortfolio {
	t.Helper()
	return want[jsonPortfolio](t, send(t, srv, "POST", "/api/v1/portfolio", key, `{"name":"`+name+`"}`), http.StatusCreated)
}

// The hand calculation: buy 0.1 and 0.2 at 100, sell 0.1 at 150
// (realised +5), sell the remaining 0.2 at 50 (realised -10).
func TestPortfolioLifecycle(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	key := proKey(t)

	p := newPortfolio(t, srv, key, "Long term")
	if p.Name != "Long term" || p.HoldingsCount != 0 || p.Holdings == nil || p.TotalValue == nil || string(*p.TotalValue) != "0" || p.SyncedAt != nil {
		t.Fatalf("new portfolio = %+v", p)
	}
	base := fmt.Sprintf("/api/v1/portfolio/%d", p.ID)

	h := want[jsonHolding](t, send(t, srv, "POST", base+"/holdings", key, `{"coin_id":"bitcoin","quantity":0.1,"buy_price":100,"notes":"first"}`), http.StatusCreated)
	// A buy dated before later buys only is taken (RFC 3339 allows t and z).
	h2 := want[jsonHolding](t, send(t, srv, "POST", base+"/holdings", key, `{"coin_id":"bitcoin","quantity":"0.2","buy_price":"100","executed_at":"2026-01-02t03:04:05z"}`), http.StatusCreated)
	if h2.ID != h.ID || string(h2.Quantity) != "0.3" || string(h2.TotalCost) != "30" || h2.CoinSymbol != "btc" || h2.CoinName != "Bitcoin" {
		t.Fatalf("after two buys: %+v, want holding %d with quantity 0.3, cost 30", h2, h.ID)
	}
	numIs(t, "average_buy_price", h2.AverageBuyPrice, "100")
	if h2.Notes != "first" {
		t.Errorf("holding notes %q, want the first buy's", h2.Notes)
	}
	if h2.CurrentPrice == nil || h2.CurrentValue == nil || h2.ProfitLoss == nil {
		t.Fatalf("holding not priced: %+v", h2)
	}

	sell := want[jsonTrade](t, send(t, srv, "POST", fmt.Sprintf("/api/v1/holdings/%d/sell", h.ID), key, `{"quantity":0.1,"sell_price":150}`), http.StatusCreated)
	if sell.Transaction.Type != "sell" || string(sell.Transaction.Total) != "15" || string(sell.Holding.Quantity) != "0.2" || string(sell.Holding.TotalCost) != "20" {
		t.Fatalf("first sell = %+v", sell)
	}
	numIs(t, "realized_profit_loss of the first sell", sell.Transaction.RealizedProfitLoss, "5")

	// A sell dated before the holding's latest trade is refused: it would
	// sell what the holding held then.
	wantField(t, send(t, srv, "POST", "/v1/portfolio/transactions", key,
		fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"sell","quantity":0.2,"price":50,"executed_at":"2026-01-02T03:04:06Z"}`, p.ID)), "executed_at", "before this holding's latest trade")
	sell = want[jsonTrade](t, send(t, srv, "POST", "/v1/portfolio/transactions", key,
		fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"sell","quantity":0.2,"price":50}`, p.ID)), http.StatusCreated)

	numIs(t, "realized_profit_loss of the second sell", sell.Transaction.RealizedProfitLoss, "-10")
	if string(sell.Holding.Quantity) != "0" || string(sell.Holding.TotalCost) != "0" || sell.Transaction.ExecutedAt <= "2026-01-02T03:04:05Z" {
		t.Fatalf("sold out = %+v", sell)
	}
	numIs(t, "average_buy_price of an empty holding", sell.Holding.AverageBuyPrice, "null")

	got := want[jsonPortfolio](t, do(t, srv, "GET", base, key), http.StatusOK)
	if string(got.RealizedProfitLoss) != "-5" || got.HoldingsCount != 1 || string(got.Holdings[0].Quantity) != "0" || string(got.TotalCost) != "0" {
		t.Fatalf("portfolio after selling out = %+v", got)
	}

	// Newest first: the backdated buy sorts last.
	txs := want[[]jsonTransaction](t, do(t, srv, "GET", base+"/transactions?per_page=2", key), http.StatusOK)
	res := do(t, srv, "GET", base+"/transactions?per_page=2&page=2", key)
	txs = append(txs, want[[]jsonTransaction](t, res, http.StatusOK)...)
	var types []string
	for _, tx := range txs {
		types = append(types, tx.Type)
	}
	if strings.Join(types, ",") != "sell,sell,buy,buy" || res.Meta["total"] != 4.0 || res.Meta["total_pages"] != 2.0 || txs[3].ExecutedAt != "2026-01-02T03:04:05Z" {
		t.Errorf("transactions newest first = %v (meta %v), want sell,sell,buy,buy of 4, the last at 2026-01-02T03:04:05Z", types, res.Meta)
	}

	synced := want[jsonPortfolio](t, send(t, srv, "POST", base+"/sync", key, ""), http.StatusOK)
	if synced.SyncedAt == nil {
		t.Errorf("sync returned no synced_at")
	}
	hist := want[struct {
		Points []map[string]any `json:"points"`
	}](t, do(t, srv, "GET", base+"/history?days=1", key), http.StatusOK)
	if len(hist.Points) != 1 {
		t.Errorf("history after one sync = %v, want one point", hist.Points)
	}

	patched := want[jsonPortfolio](t, send(t, srv, "PATCH", base, key, `{"name":"Renamed","description":"d"}`), http.StatusOK)
	if patched.Name != "Renamed" || patched.Description != "d" {
		t.Errorf("patched = %+v", patched)
	}

	want[map[string]any](t, do(t, srv, "DELETE", fmt.Sprintf("/api/v1/holdings/%d", h.ID), key), http.StatusOK)
	got = want[jsonPortfolio](t, do(t, srv, "GET", base, key), http.StatusOK)
	if got.HoldingsCount != 0 || string(got.RealizedProfitLoss) != "-5" {
		t.Errorf("after deleting the holding: %+v, want no holdings and realised -5 kept", got)
	}
	del := want[map[string]any](t, do(t, srv, "DELETE", base, key), http.StatusOK)
	if del["deleted"] != true {
		t.Errorf("delete = %v", del)
	}
	wantError(t, do(t, srv, "GET", base, key), http.StatusNotFound, coinpulse.CodeNotFound)
}

func TestPortfolioValues(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	key := proKey(t)
	p := newPortfolio(t, srv, key, "Values")
	base := fmt.Sprintf("/api/v1/portfolio/%d", p.ID)
	want[jsonHolding](t, send(t, srv, "POST", base+"/holdings", key, `{"coin_id":"ethereum","quantity":2,"buy_price":1000}`), http.StatusCreated)
	want[jsonHolding](t, send(t, srv, "POST", base+"/holdings", key, `{"coin_id":"bitcoin","quantity":1,"buy_price":0}`), http.StatusCreated)
	got := want[jsonPortfolio](t, do(t, srv, "GET", base, key), http.StatusOK)
	sum, cost := decimal.Zero, decimal.Zero
	for _, h := range got.Holdings {
		sum = sum.Add(decimal.RequireFromString(h.CurrentValue.String()))
		cost = cost.Add(decimal.RequireFromString(h.TotalCost.String()))
	}
	if got.TotalValue == nil || got.ProfitLoss == nil {
		t.Fatalf("portfolio %+v: null total_value or profit_loss while every coin is priced", got)
	}
	tv, pl := decimal.RequireFromString(got.TotalValue.String()), decimal.RequireFromString(got.ProfitLoss.String())
	if got.HoldingsCount != 2 || cost.String() != "2000" || string(got.TotalCost) != "2000" || !tv.Equal(sum) || !pl.Equal(tv.Sub(cost)) {
		t.Errorf("portfolio %+v: want total_value the exact sum of values %s and profit_loss total_value - 2000", got, sum)
	}
	// A free-of-cost holding has a zero cost and a 0 % P/L, not a division
	// by zero.
	for _, h := range got.Holdings {
		if h.CoinID == "bitcoin" {
			numIs(t, "P/L % of a free holding", h.ProfitLossPercentage, "0")
		}
	}
}

// A holding of a coin without a market price (one that has left the feed)
// leaves the portfolio's value and P/L unknown: null, not a sum that
// leaves it out. Its cost still counts, a sold-out holding of it does not
// matter, and a sync refuses to record a value it does not know.
func TestPortfolioUnpriced(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	u := newUser(t, coinpulse.TierPro, nil)
	key, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	p := newPortfolio(t, srv, key, "Unpriced")
	base := fmt.Sprintf("/api/v1/portfolio/%d", p.ID)
	want[jsonHolding](t, send(t, srv, "POST", base+"/holdings", key, `{"coin_id":"bitcoin","quantity":1,"buy_price":100}`), http.StatusCreated)
	gone, _, err := shared.store.Trade(context.Background(), coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive},
		coinpulse.Trade{PortfolioID: p.ID, CoinID: "left-the-feed", CoinSymbol: "ltf", CoinName: "Left", Now: time.Now().UTC()},
		ledger.BuyFunc(ledger.Lot{Quantity: decimal.NewFromInt(2), Price: decimal.NewFromInt(5), ExecutedAt: time.Now().UTC()}))
	if err != nil {
		t.Fatal(err)
	}

	got := want[jsonPortfolio](t, do(t, srv, "GET", base, key), http.StatusOK)
	numIs(t, "total_value", got.TotalValue, "null")
	numIs(t, "profit_loss", got.ProfitLoss, "null")
	numIs(t, "profit_loss_percentage", got.ProfitLossPercentage, "null")
	if string(got.TotalCost) != "110" {
		t.Errorf("total_cost %s, want 110: the unpriced holding's cost counts", got.TotalCost)
	}
	for _, h := range got.Holdings {
		if h.CoinID == "bitcoin" && h.CurrentValue == nil {
			t.Error("the priced holding lost its value")
		}
		if h.CoinID == "left-the-feed" && (h.CurrentPrice != nil || h.CurrentValue != nil || h.ProfitLoss != nil) {
			t.Errorf("unpriced holding %+v: want null price, value and P/L", h)
		}
	}
	list := want[[]jsonPortfolio](t, do(t, srv, "GET", "/api/v1/portfolio", key), http.StatusOK)
	if len(list) != 1 || list[0].TotalValue != nil {
		t.Errorf("GET /portfolio = %+v, want the one portfolio with a null total_value", list)
	}

	res := send(t, srv, "POST", base+"/sync", key, "")
	wantError(t, res, http.StatusConflict, coinpulse.CodeConflict)
	if !strings.Contains(res.Error.Message, fmt.Sprintf("Holding %d (left-the-feed)", gone.ID)) {
		t.Errorf("sync refused with %q, want the holding named", res.Error.Message)
	}
	if h := want[struct {
		Points []map[string]any `json:"points"`
	}](t, do(t, srv, "GET", base+"/history", key), http.StatusOK); len(h.Points) != 0 {
		t.Errorf("a refused sync recorded %d points", len(h.Points))
	}

	// It is sold by its id through POST /portfolio/transactions too, as
	// the sync's message advises; a coin never held nor listed is not, and
	// is bought neither.
	sold := want[jsonTrade](t, send(t, srv, "POST", "/api/v1/portfolio/transactions", key,
		fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"Left-The-Feed","type":"sell","quantity":1,"price":6}`, p.ID)), http.StatusCreated)
	if sold.Holding.ID != gone.ID || string(sold.Holding.Quantity) != "1" || sold.Holding.CoinSymbol != "ltf" {
		t.Errorf("sold by id: %+v, want holding %d with 1 left", sold.Holding, gone.ID)
	}
	wantField(t, send(t, srv, "POST", "/api/v1/portfolio/transactions", key,
		fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"never-listed","type":"sell","quantity":1,"price":6}`, p.ID)), "coin_id", "holds no never-listed")
	wantField(t, send(t, srv, "POST", "/api/v1/portfolio/transactions", key,
		fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"left-the-feed","type":"buy","quantity":1,"price":6}`, p.ID)), "coin_id", "unknown coin")

	// Sold out, the holding is worth 0 whatever its price: the totals are
	// known again, and a sync records them.
	want[jsonTrade](t, send(t, srv, "POST", fmt.Sprintf("/api/v1/holdings/%d/sell", gone.ID), key, `{"quantity":1,"sell_price":6}`), http.StatusCreated)
	got = want[jsonPortfolio](t, send(t, srv, "POST", base+"/sync", key, ""), http.StatusOK)
	if got.TotalValue == nil || got.ProfitLoss == nil || got.ProfitLossPercentage == nil || got.SyncedAt == nil {
		t.Errorf("after selling the unpriced holding: %+v, want known totals and a sync", got)
	}
}

// Paging through transactions with starting_after neither repeats nor
// skips one when trades are recorded meanwhile, as page numbers would;
// meta.has_more says when to stop.
func TestTransactionsCursor(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	key := proKey(t)
	p := newPortfolio(t, srv, key, "Cursor")
	base := fmt.Sprintf("/api/v1/portfolio/%d", p.ID)
	buy := func(qty int) {
		t.Helper()
		want[jsonHolding](t, send(t, srv, "POST", base+"/holdings", key, fmt.Sprintf(`{"coin_id":"bitcoin","quantity":%d,"buy_price":1}`, qty)), http.StatusCreated)
	}
	for i := 1; i <= 5; i++ {
		buy(i)
	}
	var seen []string
	next := base + "/transactions?per_page=2"
	for pages := 0; ; pages++ {
		res := do(t, srv, "GET", next, key)
		txs := want[[]jsonTransaction](t, res, http.StatusOK)
		for _, tx := range txs {
			seen = append(seen, string(tx.Quantity))
		}
		if pages == 0 {
			if res.Meta["page"] != 1.0 || res.Meta["total_pages"] != 3.0 {
				t.Errorf("first page meta %v, want page 1 of 3", res.Meta)
			}
			buy(6) // newest of all: a page number would now repeat one
		} else if _, numbered := res.Meta["page"]; numbered {
			t.Errorf("a cursor's page has a number: %v", res.Meta)
		}
		if res.Meta["per_page"] != 2.0 || res.Meta["total"] == nil {
			t.Errorf("meta %v: want per_page 2 and a total", res.Meta)
		}
		more, _ := res.Meta["has_more"].(bool)
		if !more {
			break
		}
		if pages > 5 || len(txs) == 0 {
			t.Fatalf("has_more after %d pages, the last of %d transactions", pages+1, len(txs))
		}
		next = fmt.Sprintf("%s/transactions?per_page=2&starting_after=%d", base, txs[len(txs)-1].ID)
	}
	if got := strings.Join(seen, ","); got != "5,4,3,2,1" {
		t.Errorf("paged through %s, want 5,4,3,2,1: each transaction once, newest first", got)
	}

	last := want[[]jsonTransaction](t, do(t, srv, "GET", base+"/transactions?per_page=250", key), http.StatusOK)
	for _, c := range []struct{ query, field string }{
		{"page=1&starting_after=1", "starting_after"},
		{"starting_after=0", "starting_after"},
		{"starting_after=abc", "starting_after"},
		{"starting_after=999999999999", "starting_after"},
	} {
		res := do(t, srv, "GET", base+"/transactions?"+c.query, key)
		wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
		if len(res.Error.Details) != 1 || res.Error.Details[0].Field != c.field {
			t.Errorf("?%s: details %+v, want the field %s", c.query, res.Error.Details, c.field)
		}
	}
	// Another portfolio's transaction is no cursor here.
	other := newPortfolio(t, srv, key, "Other")
	want[jsonHolding](t, send(t, srv, "POST", fmt.Sprintf("/api/v1/portfolio/%d/holdings", other.ID), key, `{"coin_id":"bitcoin","quantity":1,"buy_price":1}`), http.StatusCreated)
	ot := want[[]jsonTransaction](t, do(t, srv, "GET", fmt.Sprintf("/api/v1/portfolio/%d/transactions", other.ID), key), http.StatusOK)
	wantError(t, do(t, srv, "GET", fmt.Sprintf("%s/transactions?starting_after=%d", base, ot[0].ID), key), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	res := do(t, srv, "GET", fmt.Sprintf("%s/transactions?starting_after=%d", base, last[len(last)-1].ID), key)
	if txs := want[[]jsonTransaction](t, res, http.StatusOK); len(txs) != 0 || res.Meta["has_more"] != false {
		t.Errorf("after the oldest: %d transactions, meta %v; want none and has_more false", len(txs), res.Meta)
	}
}

// GET /portfolio pages by cursor (limit, starting_after, meta.has_more);
// without them it lists every portfolio.
func TestPortfolioListPaging(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	key := proKey(t)
	var all []int64
	for i := range 3 {
		all = append(all, newPortfolio(t, srv, key, fmt.Sprint("P", i)).ID)
	}
	ids := func(res *response) []int64 {
		var out []int64
		for _, p := range want[[]jsonPortfolio](t, res, http.StatusOK) {
			out = append(out, p.ID)
		}
		return out
	}
	res := do(t, srv, "GET", "/api/v1/portfolio?limit=2", key)
	first := ids(res)
	if len(first) != 2 || res.Meta["has_more"] != true || res.Meta["total"] != 3.0 {
		t.Fatalf("first page %v, meta %v; want 2 of 3 and more", first, res.Meta)
	}
	res = do(t, srv, "GET", fmt.Sprintf("/api/v1/portfolio?limit=2&starting_after=%d", first[1]), key)
	if got := append(first, ids(res)...); !slices.Equal(got, all) || res.Meta["has_more"] != false {
		t.Errorf("paged through %v (meta %v), want %v", got, res.Meta, all)
	}
	res = do(t, srv, "GET", "/api/v1/portfolio", key)
	if got := ids(res); !slices.Equal(got, all) || res.Meta["has_more"] != false || res.Meta["total"] != 3.0 {
		t.Errorf("every portfolio: %v, meta %v; want %v", got, res.Meta, all)
	}
	for _, q := range []string{"limit=0", "limit=101", "starting_after=0", "starting_after=999999999", "page=1"} {
		wantError(t, do(t, srv, "GET", "/api/v1/portfolio?"+q, key), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	}
}

func TestPortfolioValidation(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	key := proKey(t)
	p := newPortfolio(t, srv, key, "V")
	holdings := fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID)
	h := want[jsonHolding](t, send(t, srv, "POST", holdings, key, `{"coin_id":"bitcoin","quantity":1,"buy_price":10}`), http.StatusCreated)
	sellURL := fmt.Sprintf("/api/v1/holdings/%d/sell", h.ID)

	long := strings.Repeat("x", 101)
	tests := []struct {
		name, method, target, body string
		field                      string
	}{
		{"no body", "POST", "/api/v1/portfolio", ``, "name"},
		{"empty name", "POST", "/api/v1/portfolio", `{"name":"  "}`, "name"},
		{"long name", "POST", "/api/v1/portfolio", `{"name":"` + long + `"}`, "name"},
		{"long description", "POST", "/api/v1/portfolio", `{"name":"a","description":"` + strings.Repeat("d", 1001) + `"}`, "description"},
		{"name not a string", "POST", "/api/v1/portfolio", `{"name":5}`, "name"},
		{"unknown field", "POST", "/api/v1/portfolio", `{"name":"a","colour":"red"}`, "colour"},
		{"empty patch", "PATCH", fmt.Sprintf("/api/v1/portfolio/%d", p.ID), `{}`, "name"},
		{"zero quantity", "POST", holdings, `{"coin_id":"bitcoin","quantity":0,"buy_price":1}`, "quantity"},
		{"negative quantity", "POST", holdings, `{"coin_id":"bitcoin","quantity":-1,"buy_price":1}`, "quantity"},
		{"text quantity", "POST", holdings, `{"coin_id":"bitcoin","quantity":"lots","buy_price":1}`, "quantity"},
		{"exponent in a string", "POST", holdings, `{"coin_id":"bitcoin","quantity":"1e3","buy_price":1}`, "quantity"},
		{"capital exponent in a string", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":"1E2"}`, "buy_price"},
		{"minus zero in a string", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":"-0"}`, "buy_price"},
		{"plus in a string", "POST", holdings, `{"coin_id":"bitcoin","quantity":"+1","buy_price":1}`, "quantity"},
		{"exponent in a sell's strings", "POST", sellURL, `{"quantity":"1e-1","sell_price":"2e1"}`, "quantity"},
		{"type given twice", "POST", "/api/v1/portfolio/transactions", fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"buy","quantity":0.5,"price":1,"type":"sell"}`, p.ID), "type"},
		{"type given twice, once escaped", "POST", "/api/v1/portfolio/transactions", fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"buy","quantity":0.5,"price":1,"typ\u0065":"sell"}`, p.ID), "type"},
		{"name given twice", "POST", "/api/v1/portfolio", `{"name":"a","name":"b"}`, "name"},
		// Not JSON's white space around the object (a review: a Unicode
		// trim took them off).
		{"no-break space after the object", "POST", "/api/v1/portfolio", "{\"name\":\"a\"}\u00a0", "body"},
		{"next line before the object", "POST", "/api/v1/portfolio", "\u0085{\"name\":\"a\"}", "body"},
		// Refused at the ends too, which the trim would take off (an audit).
		{"control characters at the ends", "POST", "/api/v1/portfolio", `{"name":"\r\u000bX\u0085"}`, "name"},
		{"form feed before a description", "POST", "/api/v1/portfolio", `{"name":"a","description":"\fD"}`, "description"},
		// encoding/json turns these into U+FFFD (an audit).
		{"lone high surrogate", "POST", "/api/v1/portfolio", `{"name":"a\ud800b"}`, "name"},
		{"lone low surrogate in notes", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"notes":"\udc00"}`, "notes"},
		{"surrogates reversed", "POST", "/api/v1/portfolio", `{"name":"x","description":"\ude80\ud83d"}`, "description"},
		{"lone surrogate after an escaped U+FFFD (review)", "POST", "/api/v1/portfolio", `{"name":"\\ufffd\ud800"}`, "name"},
		{"high surrogate before a plain character", "POST", "/api/v1/portfolio", `{"name":"a\ud83dx"}`, "name"},
		{"a field where none is taken", "POST", fmt.Sprintf("/api/v1/portfolio/%d/sync", p.ID), `{"x":1}`, "x"},
		{"bool quantity", "POST", holdings, `{"coin_id":"bitcoin","quantity":true,"buy_price":1}`, "quantity"},
		{"huge quantity", "POST", holdings, `{"coin_id":"bitcoin","quantity":1e15,"buy_price":1}`, "quantity"},
		{"absurd exponent", "POST", holdings, `{"coin_id":"bitcoin","quantity":1e999999999,"buy_price":1}`, "quantity"},
		{"too precise", "POST", holdings, `{"coin_id":"bitcoin","quantity":0.1234567890123456789,"buy_price":1}`, "quantity"},
		{"negative price", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":-0.01}`, "buy_price"},
		{"missing price", "POST", holdings, `{"coin_id":"bitcoin","quantity":1}`, "buy_price"},
		{"unknown coin", "POST", holdings, `{"coin_id":"no-such-coin","quantity":1,"buy_price":1}`, "coin_id"},
		{"bad executed_at", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"executed_at":"yesterday"}`, "executed_at"},
		// time.Parse takes these, and shifts the time (an audit).
		{"offset of 24 hours", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"executed_at":"2026-01-02T10:00:00+24:00"}`, "executed_at"},
		{"offset of 60 minutes", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"executed_at":"2026-01-02T10:00:00+00:60"}`, "executed_at"},
		{"comma before the fraction", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"executed_at":"2026-01-02T10:00:00,5Z"}`, "executed_at"},
		{"fraction without digits", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"executed_at":"2026-01-02T10:00:00.Z"}`, "executed_at"},
		{"future executed_at", "POST", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"executed_at":"2999-01-01T00:00:00Z"}`, "executed_at"},
		{"oversell", "POST", sellURL, `{"quantity":1.5,"sell_price":10}`, "quantity"},
		{"sell price missing", "POST", sellURL, `{"quantity":0.5}`, "sell_price"},
		{"unknown type", "POST", "/api/v1/portfolio/transactions", fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"swap","quantity":1,"price":1}`, p.ID), "type"},
		{"portfolio_id not an id", "POST", "/api/v1/portfolio/transactions", `{"portfolio_id":"x","coin_id":"bitcoin","type":"buy","quantity":1,"price":1}`, "portfolio_id"},
		{"sell of a coin not held", "POST", "/api/v1/portfolio/transactions", fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"ethereum","type":"sell","quantity":1,"price":1}`, p.ID), "coin_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := send(t, srv, tt.method, tt.target, key, tt.body)
			wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
			found := false
			for _, d := range res.Error.Details {
				found = found || d.Field == tt.field
			}
			if !found || !strings.Contains(res.Error.Message, tt.field) {
				t.Errorf("error %q, details %v: want one naming %s", res.Error.Message, res.Error.Details, tt.field)
			}
		})
	}
	// A pair is one character; U+FFFD sent as such, escaped or not, is
	// kept.
	for body, want := range map[string]string{
		`{"name":"rocket \ud83d\ude80"}`:    "rocket \U0001F680",
		`{"name":"sent \ufffd and \uFFFD"}`: "sent \uFFFD and \uFFFD",
		`{"name":"a \\ud800 b"}`:            "a \\ud800 b", // an escaped backslash, then text
		"{\"name\":\"raw \uFFFD\"}":         "raw \uFFFD",
	} {
		res := send(t, srv, "POST", "/api/v1/portfolio", key, body)
		var got struct{ Name string }
		json.Unmarshal(res.Data, &got)
		if res.Status != http.StatusCreated || got.Name != want {
			t.Errorf("%s: %d, name %q, want %q", body, res.Status, got.Name, want)
		}
	}
	// A body that is not UTF-8 is refused, not stored with U+FFFD.
	for _, method := range []string{"POST", "PATCH"} {
		target := "/api/v1/portfolio"
		if method == "PATCH" {
			target = fmt.Sprintf("/api/v1/portfolio/%d", p.ID)
		}
		res := send(t, srv, method, target, key, "{\"name\":\"\xff\xfe\"}")
		wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
		if !strings.Contains(res.Error.Message, "UTF-8") {
			t.Errorf("%s with a name not in UTF-8: %q", method, res.Error.Message)
		}
	}
	// A string that is not a plain decimal is told what one is.
	if res := send(t, srv, "POST", holdings, key, `{"coin_id":"bitcoin","quantity":"007","buy_price":1}`); res.Status != http.StatusUnprocessableEntity || !strings.Contains(res.Error.Message, "leading zeros") {
		t.Errorf("a quantity of \"007\": %d %q", res.Status, res.Error.Message)
	}
	if res := send(t, srv, "POST", fmt.Sprintf("/api/v1/portfolio/%d/sync", p.ID), key, `{"x":1}`); res.Error.Message != "invalid x: unknown field; this endpoint takes no fields (send {} or no body)" {
		t.Errorf("a field where none is taken: %+v", res.Error)
	}
	wantError(t, send(t, srv, "PATCH", fmt.Sprintf("/api/v1/portfolio/%d", p.ID), key, `{"name":null}`), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	wantError(t, send(t, srv, "POST", fmt.Sprintf("/api/v1/portfolio/%d/sync", p.ID), key, `{"force":true}`), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	wantError(t, send(t, srv, "POST", "/api/v1/portfolio?name=x", key, `{"name":"a"}`), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	for _, body := range []string{`[1]`, `{"name":`, `"x"`, `{"name":"a"}{}`} {
		wantError(t, send(t, srv, "POST", "/api/v1/portfolio", key, body), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	}

	// Nothing a failed request sent was written.
	got := want[jsonPortfolio](t, do(t, srv, "GET", fmt.Sprintf("/api/v1/portfolio/%d", p.ID), key), http.StatusOK)
	if got.HoldingsCount != 1 || string(got.Holdings[0].Quantity) != "1" || string(got.RealizedProfitLoss) != "0" || got.Name != "V" {
		t.Errorf("after the failures: %+v, want the one holding of 1 untouched", got)
	}
	txs := want[[]jsonTransaction](t, do(t, srv, "GET", fmt.Sprintf("/api/v1/portfolio/%d/transactions", p.ID), key), http.StatusOK)
	if len(txs) != 1 {
		t.Errorf("transactions after the failures = %d, want 1", len(txs))
	}
	for _, target := range []string{"/api/v1/portfolio/abc", "/api/v1/portfolio/0", "/api/v1/portfolio/-1", "/api/v1/portfolio/007", "/api/v1/portfolio/99999999999999999999"} {
		wantError(t, do(t, srv, "GET", target, key), http.StatusNotFound, coinpulse.CodeNotFound)
	}
	wantError(t, do(t, srv, "POST", fmt.Sprintf("/api/v1/portfolio/%d", p.ID), key), http.StatusMethodNotAllowed, coinpulse.CodeMethodNotAllowed)
}

func TestPortfolioAccess(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	owner := newUser(t, coinpulse.TierPremium, nil)
	live, _ := newKey(t, owner, coinpulse.ModeLive, rw, nil)
	sandbox, _ := newKey(t, owner, coinpulse.ModeTest, rw, nil)
	readOnly, _ := newKey(t, owner, coinpulse.ModeLive, coinpulse.Permissions{Read: true}, nil)
	p := newPortfolio(t, srv, live, "Mine")
	url := fmt.Sprintf("/api/v1/portfolio/%d", p.ID)

	t.Run("free tier", func(t *testing.T) {
		free, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeLive, rw, nil)
		wantError(t, do(t, srv, "GET", "/api/v1/portfolio", free), http.StatusForbidden, coinpulse.CodePermissionDenied)
	})
	t.Run("read-only key", func(t *testing.T) {
		want[jsonPortfolio](t, do(t, srv, "GET", url, readOnly), http.StatusOK)
		wantError(t, send(t, srv, "POST", "/api/v1/portfolio", readOnly, `{"name":"x"}`), http.StatusForbidden, coinpulse.CodePermissionDenied)
		wantError(t, do(t, srv, "DELETE", url, readOnly), http.StatusForbidden, coinpulse.CodePermissionDenied)
		// The message names the route, as the plan check's does, whichever
		// prefix and id the call used.
		res := send(t, srv, "POST", strings.Replace(url, "/api/v1", "/v1", 1)+"/sync", readOnly, "")
		wantError(t, res, http.StatusForbidden, coinpulse.CodePermissionDenied)
		if !strings.Contains(res.Error.Message, "that POST /api/v1/portfolio/{id}/sync needs") {
			t.Errorf("read-only sync: %q, want the route named", res.Error.Message)
		}
	})
	t.Run("another account", func(t *testing.T) {
		other := proKey(t)
		wantError(t, do(t, srv, "GET", url, other), http.StatusNotFound, coinpulse.CodeNotFound)
		wantError(t, do(t, srv, "DELETE", url, other), http.StatusNotFound, coinpulse.CodeNotFound)
		wantError(t, send(t, srv, "POST", url+"/holdings", other, `{"coin_id":"bitcoin","quantity":1,"buy_price":1}`), http.StatusNotFound, coinpulse.CodeNotFound)
	})
	t.Run("sandbox is separate", func(t *testing.T) {
		wantError(t, do(t, srv, "GET", url, sandbox), http.StatusNotFound, coinpulse.CodeNotFound)
		if list := want[[]jsonPortfolio](t, do(t, srv, "GET", "/api/v1/portfolio", sandbox), http.StatusOK); len(list) != 0 {
			t.Errorf("sandbox lists %d portfolios, want 0", len(list))
		}
	})
	t.Run("limit", func(t *testing.T) {
		// Premium allows 10 per mode: the sandbox has its own 10.
		for i := 0; i < 10; i++ {
			newPortfolio(t, srv, sandbox, fmt.Sprint("s", i))
		}
		wantError(t, send(t, srv, "POST", "/api/v1/portfolio", sandbox, `{"name":"eleventh"}`), http.StatusForbidden, coinpulse.CodePortfolioLimitReached)
		newPortfolio(t, srv, live, "second live")
	})
}

// After a plan lowers max_portfolios (serve's SIGHUP) the portfolios
// beyond it stay, and PORTFOLIO_LIMIT_REACHED does not claim the mode
// holds only the new maximum ("you have 2" with 5); a plan with none says
// so. From an audit.
func TestPortfolioLimitMessageAfterALowering(t *testing.T) {
	fast := func(p *coinpulse.Plan) { p.PerSecond, p.PerMinute = 1000, 1000 }
	ls := newLimitedServer(t, plansWith(coinpulse.TierPremium, fast)) // its own plans
	srv := ls.Server
	key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	for i := 0; i < 5; i++ {
		newPortfolio(t, srv, key, fmt.Sprint("p", i))
	}
	for max, want := range map[int]string{
		2: "The premium plan allows 2 portfolios per mode (live and sandbox each), and this mode has reached that; delete one or upgrade at /user/api.",
		0: "The premium plan includes no portfolios; upgrade at /user/api.",
	} {
		srv.SetPlans(t.Context(), plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) { fast(p); p.MaxPortfolios = max }))
		res := send(t, srv, "POST", "/api/v1/portfolio", key, `{"name":"sixth"}`)
		wantError(t, res, http.StatusForbidden, coinpulse.CodePortfolioLimitReached)
		if res.Error.Message != want {
			t.Errorf("max %d: message %q\nwant %q", max, res.Error.Message, want)
		}
	}
}

// Concurrent sells through the API never oversell: of 15 sells of 1 from
// a holding of 10, exactly 10 succeed.
func TestPortfolioConcurrentSells(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	key := proKey(t)
	p := newPortfolio(t, srv, key, "Race")
	h := newHolding(t, srv, key, p.ID, `{"coin_id":"bitcoin","quantity":10,"buy_price":3}`)
	var wg sync.WaitGroup
	statuses := make(chan int, 15)
	for i := 0; i < 15; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := send(t, srv, "POST", fmt.Sprintf("/api/v1/holdings/%d/sell", h.ID), key, `{"quantity":1,"sell_price":4}`)
			statuses <- res.Status
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[http.StatusCreated] != 10 || count[http.StatusUnprocessableEntity] != 5 {
		t.Errorf("statuses %v, want 10×201 and 5×422", count)
	}
	got := want[jsonPortfolio](t, do(t, srv, "GET", fmt.Sprintf("/api/v1/portfolio/%d", p.ID), key), http.StatusOK)
	if string(got.Holdings[0].Quantity) != "0" || string(got.RealizedProfitLoss) != "10" {
		t.Errorf("after the race: quantity %s, realised %s; want 0 and 10", got.Holdings[0].Quantity, got.RealizedProfitLoss)
	}
}

// A sync's point describes the portfolio as it is at the point's time,
// trades racing it included: its total cost is that of the trades made
// before it (an audit: a point read the portfolio, then trades committed,
// then it was stamped after them; a buys-only history went down).
func TestSyncPointsAreNotStale(t *testing.T) {
	t.Parallel()
	srv, key, base := holdingOneEther(t, "Racing")
	var wg sync.WaitGroup
	var synced atomic.Int64
	for i := range 90 {
		wg.Go(func() {
			if i%3 == 0 {
				if res := send(t, srv, "POST", base+"/sync", key, ""); res.Status == http.StatusOK {
					synced.Add(1)
				} else if res.Status != http.StatusConflict {
					t.Errorf("sync: %d %s", res.Status, res.Raw)
				}
				return
			}
			if res := send(t, srv, "POST", base+"/holdings", key, `{"coin_id":"ethereum","quantity":1,"buy_price":1}`); res.Status != http.StatusCreated {
				t.Errorf("buy: %d %s", res.Status, res.Raw)
			}
		})
	}
	wg.Wait()
	txs := want[[]jsonTransaction](t, do(t, srv, "GET", base+"/transactions?per_page=100", key), http.StatusOK)
	hist := want[struct {
		Points []struct {
			Timestamp time.Time   `json:"timestamp"`
			TotalCost json.Number `json:"total_cost"`
		} `json:"points"`
	}](t, do(t, srv, "GET", base+"/history?days=1", key), http.StatusOK)
	if len(txs) != 61 || int64(len(hist.Points)) != synced.Load() || synced.Load() == 0 {
		t.Fatalf("%d transactions, %d points for %d syncs; want 61 and a point a sync", len(txs), len(hist.Points), synced.Load())
	}
	for _, pt := range hist.Points {
		before, atOrBefore := 0, 0 // trades made before the point, and at or before it
		for _, tx := range txs {
			at, err := time.Parse(time.RFC3339Nano, tx.ExecutedAt)
			if err != nil {
				t.Fatal(err)
			}
			if at.Before(pt.Timestamp) {
				before++
			}
			if !at.After(pt.Timestamp) {
				atOrBefore++
			}
		}
		if cost, _ := pt.TotalCost.Int64(); cost < int64(before) || cost > int64(atOrBefore) {
			t.Errorf("the point at %s has a total cost of %s, but %d buys of 1 were made before it (%d at or before)", pt.Timestamp.Format(time.RFC3339Nano), pt.TotalCost, before, atOrBefore)
		}
	}
}

// holdingOneEther makes a portfolio named name that holds 1 ether bought
// at 1, and returns its server, key and path.
func holdingOneEther(t *testing.T, name string) (*Server, string, string) {
	t.Helper()
	srv := testServer(t)
	key := proKey(t)
	p := newPortfolio(t, srv, key, name)
	base := fmt.Sprintf("/api/v1/portfolio/%d", p.ID)
	want[jsonTrade](t, send(t, srv, "POST", base+"/holdings", key, `{"coin_id":"ethereum","quantity":1,"buy_price":1}`), http.StatusCreated)
	return srv, key, base
}

// Syncs racing each other (or a rename) change the portfolio's version but
// not its holdings: none of them is refused (a review: each counted the
// others' points as changes, and could run out of tries).
func TestConcurrentSyncsAllRecord(t *testing.T) {
	t.Parallel()
	srv, key, base := holdingOneEther(t, "Synced")
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			var res *response
			if i%10 == 0 {
				res = send(t, srv, "PATCH", base, key, fmt.Sprintf(`{"name":"Synced %d"}`, i))
			} else {
				res = send(t, srv, "POST", base+"/sync", key, "")
			}
			if res.Status != http.StatusOK {
				t.Errorf("call %d: %d %s", i, res.Status, res.Raw)
			}
		})
	}
	wg.Wait()
}
