package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/ledger"
)

var fuzzPaths = []string{
	"/api/v1/markets", "/api/v1/markets/search", "/api/v1/markets/global",
	"/api/v1/markets/top-movers", "/api/v1/coins/bitcoin", "/api/v1/coins/bitcoin/history",
	"/v1/markets/eth/history",
}

// FuzzQuery sends arbitrary query strings (and coin path segments) to every
// market endpoint: the answer is always the JSON envelope with 200, 404 or
// 422, never a 500.
func FuzzQuery(f *testing.F) {
	for _, s := range []struct {
		path uint8
		q    string
	}{
		{0, "page=2&per_page=50&order=volume_desc"},
		{0, "per_page=0"},
		{0, "page=1&page=2"},
		{0, "snapshot=%ff%00"},
		{0, "ids=bitcoin,%20ethereum,nope&order=price_desc&per_page=1&page=2"},
		{0, "ids=,&ids=a"},
		{1, "q=bit&limit=5"},
		{1, "q=%20%20"},
		{3, "type=both&limit=100"},
		{5, "days=max&interval=hourly"},
		{6, "days=90&interval=hourly"},
		{2, "x=%zz"},
		{4, ";;;&&&==="},
	} {
		f.Add(s.path, s.q)
	}
	srv := testServer(&testing.T{})
	key := proKey(&testing.T{})
	// And the transactions of a portfolio of the key's, which page by
	// number and by cursor, its alerts and its portfolios.
	call := func(method, target, body string) []byte {
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if rec.Code >= 300 {
			f.Fatalf("%s %s: %d %s", method, target, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	var created struct {
		Data struct{ ID int64 } `json:"data"`
	}
	if err := json.Unmarshal(call("POST", "/api/v1/portfolio", `{"name":"fuzz"}`), &created); err != nil {
		f.Fatal(err)
	}
	txs := fmt.Sprintf("/api/v1/portfolio/%d", created.Data.ID)
	for range 3 {
		call("POST", txs+"/holdings", `{"coin_id":"bitcoin","quantity":1,"buy_price":1}`)
	}
	call("POST", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":1,"condition":"below"}`)
	paths := append(slices.Clone(fuzzPaths), txs+"/transactions", "/api/v1/alerts", "/api/v1/portfolio")
	for _, q := range []string{"per_page=2&starting_after=1", "page=2&per_page=1", "starting_after=9223372036854775807", "page=1&starting_after=1"} {
		f.Add(uint8(len(paths)-3), q)
	}
	for _, q := range []string{"is_active=true&limit=1", "limit=1000&starting_after=1", "is_active=", "limit=-1"} {
		f.Add(uint8(len(paths)-2), q)
	}
	for _, q := range []string{"limit=1", "limit=100&starting_after=1", "starting_after=", "limit=1e2"} {
		f.Add(uint8(len(paths)-1), q)
	}
	f.Fuzz(func(t *testing.T, path uint8, q string) {
		target := paths[int(path)%len(paths)]
		if strings.ContainsAny(q, " \t\r\n#") {
			q = strings.NewReplacer(" ", "%20", "\t", "%09", "\r", "%0D", "\n", "%0A", "#", "%23").Replace(q)
		}
		req := httptest.NewRequest("GET", "/", nil)
		req.URL.Path = target
		req.URL.RawQuery = q
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 404, 422:
		default:
			t.Fatalf("GET %s?%s = %d: %s", target, q, rec.Code, rec.Body)
		}
		var env struct {
			Success *bool           `json:"success"`
			Error   *map[string]any `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Success == nil || *env.Success != (rec.Code == 200) || (rec.Code != 200) != (env.Error != nil) {
			t.Fatalf("GET %s?%s: not an envelope: %s", target, q, rec.Body)
		}
	})
}

// FuzzParseIDs: /markets' ids parse into at most 250 distinct, trimmed,
// non-empty ids of at most 128 characters, in the order given, or are
// refused as a VALIDATION_ERROR on ids.
func FuzzParseIDs(f *testing.F) {
	for _, s := range []string{"bitcoin,ethereum", " bitcoin , bitcoin ", ",", "a,,b", "", "\u00e9,x", strings.Repeat("a,", 251)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		ids, err := parseIDs(text)
		if err != nil {
			var e *coinpulse.Error
			if !errors.As(err, &e) || e.Code != coinpulse.CodeValidation || len(e.Details) != 1 || e.Details[0].Field != "ids" {
				t.Fatalf("parseIDs(%q): %v, want a VALIDATION_ERROR on ids", text, err)
			}
			return
		}
		if len(ids) == 0 || len(ids) > maxIDs {
			t.Fatalf("parseIDs(%q): %d ids", text, len(ids))
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if id == "" || id != strings.TrimSpace(id) || strings.Contains(id, ",") || utf8.RuneCountInString(id) > 128 || seen[id] {
				t.Fatalf("parseIDs(%q): id %q", text, id)
			}
			seen[id] = true
		}
	})
}

// FuzzTradeBodies sends arbitrary bodies to the holding, sell and
// transaction endpoints of one portfolio: the answer is always 201 or 422
// in the envelope, never a 500, and no sequence of them leaves a negative
// or inexact holding.
func FuzzTradeBodies(f *testing.F) {
	for _, s := range []struct {
		endpoint uint8
		body     string
	}{
		{0, `{"coin_id":"bitcoin","quantity":0.1,"buy_price":100}`},
		{0, `{"coin_id":"eth","quantity":"2.5","buy_price":"0","notes":"n","executed_at":"2024-02-29T12:00:00Z"}`},
		{0, `{"coin_id":"eth","quantity":"2.5","buy_price":"0","executed_at":"2024-02-29t12:00:00.5z"}`},
		{2, `{"portfolio_id":1,"coin_id":"bitcoin","type":"buy","quantity":1,"price":1,"executed_at":"t"}`},
		{0, `{"coin_id":"bitcoin","quantity":1e-18,"buy_price":999999999999999.999999999999999999}`},
		{1, `{"quantity":0.05,"sell_price":120}`},
		{1, `{"quantity":1e308,"sell_price":1}`},
		{1, `{"quantity":-0,"sell_price":-0}`},
		{2, `{"portfolio_id":1,"coin_id":"bitcoin","type":"sell","quantity":0.01,"price":1}`},
		{2, `{"portfolio_id":1,"coin_id":"bitcoin","type":"buy","quantity":"1","price":"1","extra":null}`},
		{0, `{"coin_id":null,"quantity":{},"buy_price":[]}`},
		{1, `[]`},
		{2, `{"type":"sell"`},
		{0, "{\"coin_id\":\"bitcoin\",\"quantity\":1,\"buy_price\":1,\"notes\":\"\\u0000\"}"},
	} {
		f.Add(s.endpoint, s.body)
	}
	srv := testServer(&testing.T{})
	ctx := context.Background()
	u := &coinpulse.User{Email: fmt.Sprintf("fuzz-trade-%d@example.com", userSeq.Add(1)), Tier: coinpulse.TierPro}
	if err := shared.store.CreateUser(ctx, u); err != nil {
		f.Fatal(err)
	}
	key, rec, err := coinpulse.NewAPIKey(u.ID, "fuzz", coinpulse.ModeLive, rw)
	if err != nil {
		f.Fatal(err)
	}
	if err := shared.store.CreateKey(ctx, rec); err != nil {
		f.Fatal(err)
	}
	o := coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}
	p := &coinpulse.Portfolio{Owner: o, Name: "fuzz", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := shared.store.CreatePortfolio(ctx, p, coinpulse.Unlimited); err != nil {
		f.Fatal(err)
	}
	h, _, err := shared.store.Trade(ctx, o, coinpulse.Trade{PortfolioID: p.ID, CoinID: "bitcoin", CoinSymbol: "btc", CoinName: "Bitcoin", Now: time.Now()},
		ledger.BuyFunc(ledger.Lot{Quantity: decimal.NewFromInt(1000), Price: decimal.NewFromInt(1), ExecutedAt: time.Now()}))
	if err != nil {
		f.Fatal(err)
	}
	targets := []string{
		fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID),
		fmt.Sprintf("/api/v1/holdings/%d/sell", h.ID),
		"/api/v1/portfolio/transactions",
	}
	f.Fuzz(func(t *testing.T, endpoint uint8, body string) {
		target := targets[int(endpoint)%len(targets)]
		body = strings.ReplaceAll(body, `"portfolio_id":1`, fmt.Sprintf(`"portfolio_id":%d`, p.ID))
		req := httptest.NewRequest("POST", target, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		switch rec.Code {
		case 201, 422:
		default:
			t.Fatalf("POST %s %s = %d: %s", target, body, rec.Code, rec.Body)
		}
		var env struct {
			Success *bool           `json:"success"`
			Error   *map[string]any `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Success == nil || *env.Success != (rec.Code == 201) || (rec.Code != 201) != (env.Error != nil) {
			t.Fatalf("POST %s %s: not an envelope: %s", target, body, rec.Body)
		}
		got, err := shared.store.Portfolio(ctx, o, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range got.Holdings {
			if h.Quantity.IsNegative() || h.TotalCost.IsNegative() || h.Quantity.IsZero() != h.TotalCost.IsZero() && h.Quantity.IsZero() {
				t.Fatalf("after POST %s %s: holding %s quantity %s cost %s", target, body, h.CoinID, h.Quantity, h.TotalCost)
			}
		}
	})
}
