package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"coinpulse"
	"coinpulse/internal/feed/sim"
	"coinpulse/internal/market"
)

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI())
	if err != nil {
		t.Fatalf("load openapi.json: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("openapi.json is invalid: %v", err)
	}
	return doc
}

// Every route the server has is in the spec, and every operation of the
// spec is served.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := loadSpec(t)
	var inSpec []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			inSpec = append(inSpec, method+" "+path)
		}
	}
	var served []string
	for _, rt := range testServer(t).Routes() {
		served = append(served, rt.Method+" "+rt.Path)
		// Tier markers in the spec agree with the route table.
		if item := doc.Paths.Find(rt.Path); item != nil && rt.Access != Public {
			op := item.GetOperation(rt.Method)
			want := "premium"
			if rt.Basic {
				want = "free"
			}
			if got, _ := op.Extensions["x-coinpulse-tier"].(string); got != want {
				t.Errorf("%s %s: spec says tier %q, route table %q", rt.Method, rt.Path, got, want)
			}
		}
	}
	slices.Sort(inSpec)
	slices.Sort(served)
	for _, r := range served {
		if !slices.Contains(inSpec, r) {
			t.Errorf("served but not in openapi.json: %s", r)
		}
	}
	for _, r := range inSpec {
		if !slices.Contains(served, r) {
			t.Errorf("in openapi.json but not served: %s", r)
		}
	}
}

// Real responses validate against the spec's schemas (JSON Schema 2020-12,
// formats on), successes and errors alike, and name no member the spec does
// not describe; the portfolio walk checks request bodies against the
// documented request schemas too.
func TestResponsesMatchSpec(t *testing.T) {
	doc := loadSpec(t)
	srv := testServer(t)
	key := proKey(t)
	free, _ := newKey(t, newUser(t, "free", nil), "live", rw, nil)
	cases := []struct{ route, target, key string }{
		{"/markets", "/api/v1/markets?per_page=3", key},
		{"/markets", "/api/v1/markets?per_page=0", key},
		{"/markets", "/api/v1/markets", ""},
		{"/markets/search", "/api/v1/markets/search?q=bit&limit=2", key},
		{"/markets/global", "/api/v1/markets/global", key},
		{"/markets/top-movers", "/api/v1/markets/top-movers?type=both&limit=2", key},
		{"/markets/top-movers", "/api/v1/markets/top-movers", free},
		{"/markets/{id}", "/api/v1/markets/ethereum", key},
		{"/markets/{id}/history", "/api/v1/markets/ethereum/history?days=1&interval=hourly", key},
		{"/coins/{idOrSymbol}", "/api/v1/coins/ton", key},
		{"/coins/{idOrSymbol}", "/api/v1/coins/nope-nope", key},
		{"/coins/{idOrSymbol}/history", "/api/v1/coins/bitcoin/history?days=max", key},
		{"/healthz", "/healthz", ""},
		{"/readyz", "/readyz", ""},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			checkResponse(t, doc, "GET", tc.route, do(t, srv, "GET", tc.target, tc.key))
		})
	}
	t.Run("portfolios", func(t *testing.T) { portfoliosMatchSpec(t, doc, srv) })
	// The spec and docs are served as they are embedded.
	for _, path := range []string{"/api/v1/openapi.json", "/v1/openapi.json"} {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK || rec.Body.String() != string(OpenAPI()) || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d, %d bytes, %s", path, rec.Code, rec.Body.Len(), rec.Header().Get("Content-Type"))
		}
	}
	for path, ct := range map[string]string{"/docs": "text/html", "/docs/docs.js": "text/javascript", "/metrics": "text/plain"} {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), ct) {
			t.Errorf("%s: %d %s", path, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`coinpulse_http_requests_total{route="/api/v1/markets",status="200"}`,
		`coinpulse_http_request_duration_seconds_bucket{route="/api/v1/markets",le="0.001"}`,
		"coinpulse_market_snapshot_age_seconds ",
		"coinpulse_market_coins 1000",
		"coinpulse_key_cache_entries ",
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// checkResponse checks a real response against the spec of method route:
// the status is documented, the body validates against the schema for it
// (JSON Schema 2020-12, formats on), every member of the body is one the
// schema names, and the documented headers are sent.
func checkResponse(t *testing.T, doc *openapi3.T, method, route string, res *response) {
	t.Helper()
	op := specOperation(t, doc, method, route)
	ref := op.Responses.Status(res.Status)
	if ref == nil {
		t.Fatalf("spec documents no %d for %s %s\n%s", res.Status, method, route, truncate(string(res.Raw), 2000))
	}
	media := ref.Value.Content.Get("application/json")
	if media == nil || media.Schema == nil {
		t.Fatalf("no JSON schema for %d of %s %s", res.Status, method, route)
	}
	var body any
	if err := json.Unmarshal(res.Raw, &body); err != nil {
		t.Fatal(err)
	}
	if err := media.Schema.Value.VisitJSON(body, openapi3.EnableJSONSchema2020(), openapi3.EnableFormatValidation()); err != nil {
		t.Errorf("%s %s: %d body does not match the spec: %v\n%s", method, route, res.Status, err, truncate(string(res.Raw), 2000))
	}
	if extra := undocumented(media.Schema.Value, body, ""); len(extra) > 0 {
		t.Errorf("%s %s: %d body has members the spec does not describe: %v", method, route, res.Status, extra)
	}
	for name := range ref.Value.Headers {
		if name != "Retry-After" && name != "Allow" && res.Header.Get(name) == "" {
			t.Errorf("%s %s: documented header %s missing from the %d response", method, route, name, res.Status)
		}
	}
}

func specOperation(t *testing.T, doc *openapi3.T, method, route string) *openapi3.Operation {
	t.Helper()
	item := doc.Paths.Find(route)
	if item == nil || item.GetOperation(method) == nil {
		t.Fatalf("no %s %s in the spec", method, route)
	}
	return item.GetOperation(method)
}

// checkRequestBody checks body (JSON; "" for none) against the request
// schema of method route: it must validate exactly when valid.
func checkRequestBody(t *testing.T, doc *openapi3.T, method, route, body string, valid bool) {
	t.Helper()
	op := specOperation(t, doc, method, route)
	if op.RequestBody == nil {
		if body != "" {
			t.Errorf("%s %s documents no request body; sent %s", method, route, truncate(body, 200))
		}
		return
	}
	if body == "" {
		if op.RequestBody.Value.Required == valid {
			t.Errorf("%s %s: spec says body required=%v, but a request without one is valid=%v", method, route, op.RequestBody.Value.Required, valid)
		}
		return
	}
	media := op.RequestBody.Value.Content.Get("application/json")
	if media == nil || media.Schema == nil {
		t.Fatalf("%s %s: no JSON schema for the request body", method, route)
	}
	var v any
	err := json.Unmarshal([]byte(body), &v)
	if err == nil {
		err = media.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.EnableFormatValidation())
	}
	switch {
	case valid && err != nil:
		t.Errorf("%s %s: the body the server accepts breaks the documented request schema: %v\n%s", method, route, err, truncate(body, 500))
	case !valid && err == nil:
		t.Errorf("%s %s: the documented request schema accepts a body the server rejects: %s", method, route, truncate(body, 500))
	}
}

// undocumented lists the members of v, at any depth, that schema s does
// not name. The schemas do not forbid more, but a member the spec does not
// describe is a gap in it.
func undocumented(s *openapi3.Schema, v any, at string) []string {
	if s == nil {
		return nil
	}
	switch v := v.(type) {
	case map[string]any:
		props := map[string]*openapi3.Schema{}
		collectProperties(s, props)
		if len(props) == 0 {
			return nil // a free-form object
		}
		var out []string
		for name, member := range v {
			p, ok := props[name]
			if !ok {
				out = append(out, at+"."+name)
				continue
			}
			out = append(out, undocumented(p, member, at+"."+name)...)
		}
		slices.Sort(out)
		return out
	case []any:
		items := itemsOf(s)
		var out []string
		for i, member := range v {
			out = append(out, undocumented(items, member, fmt.Sprintf("%s[%d]", at, i))...)
		}
		return out
	}
	return nil
}

func collectProperties(s *openapi3.Schema, into map[string]*openapi3.Schema) {
	for name, p := range s.Properties {
		into[name] = p.Value
	}
	for _, group := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
		for _, sub := range group {
			collectProperties(sub.Value, into)
		}
	}
}

func itemsOf(s *openapi3.Schema) *openapi3.Schema {
	if s.Items != nil {
		return s.Items.Value
	}
	for _, sub := range s.AllOf {
		if items := itemsOf(sub.Value); items != nil {
			return items
		}
	}
	return nil
}

// specCall is one request of the portfolio walk and what must come of it.
type specCall struct {
	method, route, target, key, body string
	status                           int
	code                             coinpulse.Code // the error code, on errors
	bodyInvalid                      bool           // the body breaks the documented request schema
}

// pricedRoutes are the operations whose answers carry prices, and so
// as_of, feed and simulated in meta once market data has loaded.
var pricedRoutes = map[string]bool{
	"GET /portfolio": true, "POST /portfolio": true, "GET /portfolio/{id}": true, "PATCH /portfolio/{id}": true,
	"POST /portfolio/{id}/holdings": true, "POST /portfolio/{id}/sync": true, "POST /portfolio/transactions": true,
	"POST /holdings/{id}/sell": true,
}

// specCaller sends calls through srv and checks them against doc; loaded
// says whether srv's market data has loaded.
func specCaller(t *testing.T, doc *openapi3.T, srv *Server, loaded bool, succeeded map[string]bool) func(c specCall) *response {
	return func(c specCall) *response {
		t.Helper()
		var res *response
		if c.body == "" {
			res = do(t, srv, c.method, c.target, c.key)
		} else {
			res = send(t, srv, c.method, c.target, c.key, c.body)
		}
		if res.Status != c.status || (c.code != "" && res.Error.Code != string(c.code)) {
			t.Fatalf("%s %s: got %d %s, want %d %s\n%s", c.method, c.target, res.Status, res.Error.Code, c.status, c.code, truncate(string(res.Raw), 2000))
		}
		checkResponse(t, doc, c.method, c.route, res)
		checkRequestBody(t, doc, c.method, c.route, c.body, !c.bodyInvalid)
		if res.Status == http.StatusUnprocessableEntity && strings.HasPrefix(c.body, "{") && len(res.Error.Details) == 0 {
			t.Errorf("%s %s: 422 without details", c.method, c.target)
		}
		if res.Status < 400 {
			succeeded[c.method+" "+c.route] = true
			_, hasAsOf := res.Meta["as_of"]
			_, hasFeed := res.Meta["feed"]
			_, hasSim := res.Meta["simulated"]
			priced := pricedRoutes[c.method+" "+c.route] && loaded
			if hasAsOf != priced || hasFeed != priced || hasSim != priced {
				t.Errorf("%s %s: meta %v; want as_of, feed and simulated: %v", c.method, c.target, res.Meta, priced)
			}
		}
		return res
	}
}

// A portfolio's life through the API, and its errors, each answer checked
// against the spec of its operation and status, each request body against
// the documented request schema.
func portfoliosMatchSpec(t *testing.T, doc *openapi3.T, srv *Server) {
	me := newUser(t, coinpulse.TierPro, nil)
	key, _ := newKey(t, me, coinpulse.ModeLive, rw, nil)
	mySandbox, _ := newKey(t, me, coinpulse.ModeTest, rw, nil)
	other := proKey(t)
	premium := newUser(t, coinpulse.TierPremium, nil)
	readOnly, _ := newKey(t, premium, coinpulse.ModeLive, coinpulse.Permissions{Read: true}, nil)
	sandbox, _ := newKey(t, premium, coinpulse.ModeTest, rw, nil)
	free, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeLive, rw, nil)
	succeeded := map[string]bool{}
	call := specCaller(t, doc, srv, true, succeeded)
	id := func(res *response) int64 {
		t.Helper()
		var v struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(res.Data, &v); err != nil || v.ID == 0 {
			t.Fatalf("no id in %s", res.Data)
		}
		return v.ID
	}

	res := call(specCall{method: "POST", route: "/portfolio", target: "/api/v1/portfolio", key: key,
		body: `{"name":"  Spec walk  ","description":"checked against openapi.json"}`, status: http.StatusCreated})
	pid := id(res)
	base := fmt.Sprintf("/api/v1/portfolio/%d", pid)
	holdings := base + "/holdings"

	btc := id(call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
		body: `{"coin_id":"bitcoin","quantity":0.1,"buy_price":100,"notes":"first"}`, status: http.StatusCreated}))
	eth := id(call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
		body: `{"coin_id":"Ethereum","quantity":"2.5","buy_price":"1999.999999999999999999","notes":null,"executed_at":"2025-01-02T03:04:05.5+01:00"}`, status: http.StatusCreated}))
	call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
		body: `{"coin_id":"bitcoin","quantity":"0.000000000000000001","buy_price":0,"executed_at":null}`, status: http.StatusCreated})
	call(specCall{method: "POST", route: "/holdings/{id}/sell", target: fmt.Sprintf("/api/v1/holdings/%d/sell", btc), key: key,
		body: `{"quantity":"0.05","sell_price":150.5,"notes":"some profit"}`, status: http.StatusCreated})
	call(specCall{method: "POST", route: "/portfolio/transactions", target: "/v1/portfolio/transactions", key: key,
		body: fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"buy","quantity":0.2,"price":"100"}`, pid), status: http.StatusCreated})
	// Sold out: average_buy_price null, quantity and cost 0.
	call(specCall{method: "POST", route: "/portfolio/transactions", target: "/v1/portfolio/transactions", key: key,
		body: fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"sell","quantity":"0.250000000000000001","price":50,"executed_at":"2024-12-31T23:59:59Z"}`, pid), status: http.StatusCreated})

	call(specCall{method: "GET", route: "/portfolio", target: "/api/v1/portfolio", key: key, status: http.StatusOK})
	call(specCall{method: "GET", route: "/portfolio/{id}", target: base, key: key, status: http.StatusOK})
	call(specCall{method: "GET", route: "/portfolio/{id}/transactions", target: base + "/transactions", key: key, status: http.StatusOK})
	call(specCall{method: "GET", route: "/portfolio/{id}/transactions", target: base + "/transactions?per_page=2&page=2", key: key, status: http.StatusOK})
	call(specCall{method: "GET", route: "/portfolio/{id}/transactions", target: base + "/transactions?page=1000000", key: key, status: http.StatusOK})
	call(specCall{method: "GET", route: "/portfolio/{id}/history", target: base + "/history", key: key, status: http.StatusOK})
	call(specCall{method: "POST", route: "/portfolio/{id}/sync", target: base + "/sync", key: key, status: http.StatusOK})
	call(specCall{method: "POST", route: "/portfolio/{id}/sync", target: base + "/sync", key: key, body: `{}`, status: http.StatusOK})
	call(specCall{method: "GET", route: "/portfolio/{id}/history", target: base + "/history?days=1", key: key, status: http.StatusOK})
	call(specCall{method: "GET", route: "/portfolio/{id}/history", target: base + "/history?days=max", key: key, status: http.StatusOK})
	call(specCall{method: "PATCH", route: "/portfolio/{id}", target: base, key: key, body: `{"name":"Renamed","description":null}`, status: http.StatusOK})
	call(specCall{method: "PATCH", route: "/portfolio/{id}", target: base, key: key, body: `{"description":"line one\nline two"}`, status: http.StatusOK})
	call(specCall{method: "DELETE", route: "/holdings/{id}", target: fmt.Sprintf("/api/v1/holdings/%d", eth), key: key, status: http.StatusOK})

	// Before market data has loaded: prices are null, meta has no as_of,
	// a sync is 503 and a coin cannot be resolved.
	cold := func() *Server {
		feed, err := sim.New(1, 0)
		if err != nil {
			t.Fatal(err)
		}
		return New(Config{Store: shared.store, Market: market.New(market.Config{Feed: feed, Store: shared.store, Log: quiet}), Log: quiet})
	}()
	coldCall := specCaller(t, doc, cold, false, succeeded)
	call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
		body: `{"coin_id":"bitcoin","quantity":1,"buy_price":"104000.5"}`, status: http.StatusCreated})
	res = coldCall(specCall{method: "GET", route: "/portfolio/{id}", target: base, key: key, status: http.StatusOK})
	if !strings.Contains(string(res.Data), `"current_price":null`) {
		t.Errorf("unpriced portfolio: %s", res.Data)
	}
	coldCall(specCall{method: "GET", route: "/portfolio", target: "/api/v1/portfolio", key: key, status: http.StatusOK})
	coldCall(specCall{method: "POST", route: "/holdings/{id}/sell", target: fmt.Sprintf("/api/v1/holdings/%d/sell", btc), key: key,
		body: `{"quantity":0.5,"sell_price":"110000"}`, status: http.StatusCreated})
	if res := coldCall(specCall{method: "POST", route: "/portfolio/{id}/sync", target: base + "/sync", key: key, status: http.StatusServiceUnavailable, code: coinpulse.CodeUnavailable}); res.Header.Get("Retry-After") == "" {
		t.Error("sync 503 without Retry-After")
	}
	coldCall(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
		body: `{"coin_id":"bitcoin","quantity":1,"buy_price":1}`, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})

	// Errors.
	badBodies := []struct{ method, route, target, body string }{
		{"POST", "/portfolio", "/api/v1/portfolio", `{"name":"a","colour":"red"}`},
		{"POST", "/portfolio", "/api/v1/portfolio", `{"name":"   "}`},
		{"POST", "/portfolio", "/api/v1/portfolio", `{"name":"` + strings.Repeat("n", 101) + `"}`},
		{"POST", "/portfolio", "/api/v1/portfolio", `{"name":"bell\u0007"}`},
		{"POST", "/portfolio", "/api/v1/portfolio", `[{"name":"a"}]`},
		{"POST", "/portfolio", "/api/v1/portfolio", ``},
		{"PATCH", "/portfolio/{id}", base, `{}`},
		{"PATCH", "/portfolio/{id}", base, `{"name":""}`},
		{"POST", "/portfolio/{id}/holdings", holdings, `{"coin_id":"bitcoin","quantity":0,"buy_price":"1.0000000000000000001"}`},
		{"POST", "/portfolio/{id}/holdings", holdings, `{"coin_id":"bitcoin","quantity":"0","buy_price":1}`},
		{"POST", "/portfolio/{id}/holdings", holdings, `{"coin_id":"bitcoin","quantity":1000000000000000,"buy_price":1}`},
		{"POST", "/portfolio/{id}/holdings", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":-1}`},
		{"POST", "/portfolio/{id}/holdings", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":"01"}`},
		{"POST", "/portfolio/{id}/holdings", holdings, `{"coin_id":"bitcoin","quantity":1}`},
		{"POST", "/portfolio/{id}/holdings", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"executed_at":"yesterday"}`},
		{"POST", "/holdings/{id}/sell", fmt.Sprintf("/api/v1/holdings/%d/sell", btc), `{"quantity":1,"price":1}`},
		{"POST", "/portfolio/transactions", "/api/v1/portfolio/transactions", fmt.Sprintf(`{"portfolio_id":"%d","coin_id":"bitcoin","type":"buy","quantity":1,"price":1}`, pid)},
		{"POST", "/portfolio/transactions", "/api/v1/portfolio/transactions", fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"swap","quantity":1,"price":1}`, pid)},
		{"POST", "/portfolio/{id}/sync", base + "/sync", `[]`},
		// An unknown field, and nothing else wrong, in each kind of body.
		{"PATCH", "/portfolio/{id}", base, `{"title":"x"}`},
		{"POST", "/portfolio/{id}/holdings", holdings, `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"note":"typo"}`},
		{"POST", "/holdings/{id}/sell", fmt.Sprintf("/api/v1/holdings/%d/sell", btc), `{"quantity":0.1,"sell_price":1,"coin_id":"bitcoin"}`},
		{"POST", "/portfolio/transactions", "/api/v1/portfolio/transactions", fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"buy","quantity":1,"price":1,"fee":0}`, pid)},
	}
	for _, b := range badBodies {
		call(specCall{method: b.method, route: b.route, target: b.target, key: key, body: b.body,
			status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation, bodyInvalid: true})
	}
	// Bodies the schema allows that the server refuses for what they mean.
	if sym := sharedSymbol(); sym != "" {
		res := call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
			body: `{"coin_id":"` + sym + `","quantity":1,"buy_price":1}`, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
		if !strings.Contains(res.Error.Message, "shared by") {
			t.Errorf("ambiguous symbol %s: %s", sym, res.Error.Message)
		}
	} else {
		t.Error("no symbol shared by several coins in the sim universe")
	}
	call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
		body: `{"coin_id":"no-such-coin","quantity":1,"buy_price":1}`, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
		body: `{"coin_id":"bitcoin","quantity":1,"buy_price":1,"executed_at":"2008-12-31T23:59:59Z"}`, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "POST", route: "/holdings/{id}/sell", target: fmt.Sprintf("/api/v1/holdings/%d/sell", btc), key: key,
		body: `{"quantity":100,"sell_price":1}`, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "POST", route: "/portfolio/transactions", target: "/api/v1/portfolio/transactions", key: key,
		body: fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"ethereum","type":"sell","quantity":1,"price":1}`, pid), status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/portfolio/{id}", target: base + "?expand=holdings", key: key, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/portfolio", target: "/api/v1/portfolio?page=1", key: key, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/portfolio/{id}/transactions", target: base + "/transactions?per_page=251", key: key, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/portfolio/{id}/history", target: base + "/history?days=2", key: key, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})

	notFound := []specCall{
		{method: "GET", route: "/portfolio/{id}", target: "/api/v1/portfolio/999999999999"},
		{method: "GET", route: "/portfolio/{id}", target: "/api/v1/portfolio/abc"},
		{method: "GET", route: "/portfolio/{id}", target: base, key: other},
		{method: "GET", route: "/portfolio/{id}", target: base, key: mySandbox},
		{method: "PATCH", route: "/portfolio/{id}", target: base, key: other, body: `{"name":"mine"}`},
		{method: "GET", route: "/portfolio/{id}/transactions", target: base + "/transactions", key: other},
		{method: "GET", route: "/portfolio/{id}/history", target: base + "/history", key: other},
		{method: "POST", route: "/portfolio/{id}/sync", target: base + "/sync", key: other},
		{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: other, body: `{"coin_id":"bitcoin","quantity":1,"buy_price":1}`},
		{method: "POST", route: "/portfolio/transactions", target: "/api/v1/portfolio/transactions", key: other,
			body: fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"buy","quantity":1,"price":1}`, pid)},
		{method: "POST", route: "/holdings/{id}/sell", target: fmt.Sprintf("/api/v1/holdings/%d/sell", btc), key: other, body: `{"quantity":0.1,"sell_price":1}`},
		{method: "DELETE", route: "/holdings/{id}", target: fmt.Sprintf("/api/v1/holdings/%d", btc), key: other},
		{method: "DELETE", route: "/holdings/{id}", target: "/api/v1/holdings/999999999999"},
		{method: "DELETE", route: "/portfolio/{id}", target: base, key: other},
	}
	for _, c := range notFound {
		if c.key == "" {
			c.key = key
		}
		c.status, c.code = http.StatusNotFound, coinpulse.CodeNotFound
		call(c)
	}

	call(specCall{method: "GET", route: "/portfolio", target: "/api/v1/portfolio", key: free, status: http.StatusForbidden, code: coinpulse.CodePermissionDenied})
	call(specCall{method: "POST", route: "/portfolio", target: "/api/v1/portfolio", key: free, body: `{"name":"x"}`, status: http.StatusForbidden, code: coinpulse.CodePermissionDenied})
	call(specCall{method: "POST", route: "/portfolio", target: "/api/v1/portfolio", key: readOnly, body: `{"name":"x"}`, status: http.StatusForbidden, code: coinpulse.CodePermissionDenied})
	call(specCall{method: "DELETE", route: "/portfolio/{id}", target: base, key: readOnly, status: http.StatusForbidden, code: coinpulse.CodePermissionDenied})
	call(specCall{method: "POST", route: "/portfolio", target: "/api/v1/portfolio", body: `{"name":"x"}`, status: http.StatusUnauthorized, code: coinpulse.CodeInvalidAPIKey})
	call(specCall{method: "POST", route: "/portfolio", target: "/api/v1/portfolio", key: key, body: `{"name":"` + strings.Repeat("x", 70_000) + `"}`,
		status: http.StatusRequestEntityTooLarge, code: coinpulse.CodePayloadTooLarge, bodyInvalid: true})
	// Premium keeps 10 portfolios per mode.
	for i := 0; i < 10; i++ {
		if res := send(t, srv, "POST", "/api/v1/portfolio", sandbox, fmt.Sprintf(`{"name":"p%d"}`, i)); res.Status != http.StatusCreated {
			t.Fatalf("portfolio %d: %d %s", i, res.Status, res.Raw)
		}
	}
	call(specCall{method: "POST", route: "/portfolio", target: "/api/v1/portfolio", key: sandbox, body: `{"name":"eleventh"}`,
		status: http.StatusForbidden, code: coinpulse.CodePortfolioLimitReached})

	call(specCall{method: "DELETE", route: "/portfolio/{id}", target: base, key: key, status: http.StatusOK})
	call(specCall{method: "GET", route: "/portfolio/{id}/history", target: base + "/history", key: key, status: http.StatusNotFound, code: coinpulse.CodeNotFound})

	// Every portfolio operation of the spec was seen to succeed.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if slices.Contains(op.Tags, "Portfolios") && !succeeded[method+" "+path] {
				t.Errorf("the walk never saw %s %s succeed", method, path)
			}
		}
	}
}

// sharedSymbol returns a symbol that several coins of the market data
// share, "" when none does.
func sharedSymbol() string {
	snap := shared.engine.Current()
	coins, _ := snap.Page(market.MarketCapDesc, 1, snap.Len())
	for _, c := range coins {
		if d, ok := snap.Lookup(c.Symbol); ok && d.ResolvedBy == "symbol" && len(d.Alternatives) > 0 {
			return c.Symbol
		}
	}
	return ""
}
