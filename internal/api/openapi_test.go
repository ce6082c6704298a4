package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/shopspring/decimal"

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
		if strings.HasPrefix(path, "/user/api/") {
			// The dashboard's JSON endpoints: served by internal/dashboard,
			// not the route table (internal/dashboard's TestDashboardDocumented
			// checks them).
			continue
		}
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
			want = map[Access]string{Read: "read", Write: "write", AnyKey: "read or write"}[rt.Access]
			if got, _ := op.Extensions["x-coinpulse-permission"].(string); got != want {
				t.Errorf("%s %s: spec says permission %q, route table %q", rt.Method, rt.Path, got, want)
			}
			checkKeyedOperation(t, rt.Method+" "+rt.Path, op)
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

// rateLimitHeaders are the headers of every response to an authenticated
// call, when the server limits calls.
var rateLimitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy"}

// checkKeyedOperation checks what every keyed operation documents: the
// X-Sandbox-Simulate parameter, 429 with Retry-After and the rate-limit
// headers, the rate-limit headers on its successes, and 503 (the limiter
// may be unreachable; a sandbox key may simulate a timeout).
func checkKeyedOperation(t *testing.T, name string, op *openapi3.Operation) {
	t.Helper()
	simulate := false
	for _, p := range op.Parameters {
		if p.Value.In == "header" && p.Value.Name == "X-Sandbox-Simulate" {
			simulate = true
		}
	}
	if !simulate {
		t.Errorf("%s: no X-Sandbox-Simulate parameter", name)
	}
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		if op.Responses.Status(status) == nil {
			t.Errorf("%s: no %d response", name, status)
		}
	}
	if r := op.Responses.Status(http.StatusTooManyRequests); r != nil {
		for _, h := range append([]string{"Retry-After"}, rateLimitHeaders...) {
			if r.Value.Headers[h] == nil {
				t.Errorf("%s: the 429 does not document %s", name, h)
			}
		}
	}
	for code, r := range op.Responses.Map() {
		if !strings.HasPrefix(code, "2") {
			continue
		}
		for _, h := range rateLimitHeaders {
			if r.Value.Headers[h] == nil {
				t.Errorf("%s: the %s does not document %s", name, code, h)
			}
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
		{"/markets", "/api/v1/markets?ids=ethereum,nope,bitcoin&order=price_desc", key},
		{"/markets", "/api/v1/markets?ids=bitcoin,,x", key},
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
		{"/usage", "/api/v1/usage", key}, // no limiter: no windows
		{"/usage", "/api/v1/usage", free},
		{"/usage", "/api/v1/usage?days=7", key},
		{"/usage", "/api/v1/usage", ""},
		{"/healthz", "/healthz", ""},
		{"/readyz", "/readyz", ""},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			checkResponse(t, doc, "GET", tc.route, do(t, srv, "GET", tc.target, tc.key))
		})
	}
	t.Run("portfolios", func(t *testing.T) { portfoliosMatchSpec(t, doc, srv) })
	t.Run("alerts", func(t *testing.T) { alertsMatchSpec(t, doc, srv) })
	t.Run("limits", func(t *testing.T) { limitsMatchSpec(t, doc) })
	// The spec and docs are served as they are embedded.
	for _, path := range []string{"/api/v1/openapi.json", "/v1/openapi.json"} {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK || rec.Body.String() != string(OpenAPI()) || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d, %d bytes, %s", path, rec.Code, rec.Body.Len(), rec.Header().Get("Content-Type"))
		}
	}
	for path, ct := range map[string]string{"/docs": "text/html", "/docs/docs.js": "text/javascript", "/favicon.ico": "image/svg+xml", "/metrics": "text/plain"} {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), ct) {
			t.Errorf("%s: %d %s", path, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
	// Requests no route took, and the dashboard's, are counted too (an
	// audit: they were left out).
	dash := New(Config{Store: shared.store, Market: srv.market, Log: quiet,
		Dashboard: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })})
	for _, r := range []*http.Request{
		httptest.NewRequest("GET", "/nope", nil),
		httptest.NewRequest("POST", "/api/v1/markets", nil),
		httptest.NewRequest("PUT", "/api/v1/portfolio/transactions", nil),
		httptest.NewRequest("GET", "/user/api/login", nil),
	} {
		dash.Handler().ServeHTTP(httptest.NewRecorder(), r)
	}
	wantMetrics(t, dash.Handler(),
		`coinpulse_http_requests_total{route="unmatched",status="404"} 1`,
		`coinpulse_http_requests_total{route="unmatched",status="405"} 2`,
		`coinpulse_http_requests_total{route="/user/api",status="418"} 1`,
	)
	wantMetrics(t, srv.Handler(),
		`coinpulse_http_requests_total{route="/api/v1/markets",status="200"}`,
		`coinpulse_http_request_duration_seconds_bucket{route="/api/v1/markets",le="0.001"}`,
		"coinpulse_market_snapshot_age_seconds ",
		"coinpulse_market_coins 1000",
		"coinpulse_key_cache_entries ",
		"coinpulse_key_cache_unknown_entries ",
	)
}

// checkResponse checks a real response against the spec of method route:
// the status is documented, the body validates against the schema for it
// (JSON Schema 2020-12, formats on), every member of the body is one the
// schema names, and the documented headers are sent, their values valid.
// The rate-limit headers may be missing: the server may have no limiter.
func checkResponse(t *testing.T, doc *openapi3.T, method, route string, res *response) {
	t.Helper()
	checkResponseOf(t, doc, method, route, res, false)
}

// checkLimitedResponse is checkResponse for a server that limits calls:
// the documented rate-limit headers must be sent too, and Retry-After on a
// 429.
func checkLimitedResponse(t *testing.T, doc *openapi3.T, method, route string, res *response) {
	t.Helper()
	checkResponseOf(t, doc, method, route, res, true)
}

func checkResponseOf(t *testing.T, doc *openapi3.T, method, route string, res *response, limited bool) {
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
	for name, h := range ref.Value.Headers {
		value := res.Header.Get(name)
		switch {
		case value == "" && name == "Retry-After" && limited && res.Status == http.StatusTooManyRequests:
			t.Errorf("%s %s: 429 without Retry-After", method, route)
		case value == "" && (name == "Retry-After" || name == "Allow" || name == "Idempotent-Replayed" || name == "Original-Request" ||
			name == "Content-Encoding" || name == "Vary"): // only on answers that are sent gzip-encoded
		case value == "" && slices.Contains(rateLimitHeaders, name) && !limited:
		case value == "":
			t.Errorf("%s %s: documented header %s missing from the %d response", method, route, name, res.Status)
		default:
			checkHeaderValue(t, fmt.Sprintf("%s %s: %d: header %s", method, route, res.Status, name), h.Value.Schema, value)
		}
	}
}

// checkHeaderValue checks a header's value against its documented schema;
// an integer header must be a decimal integer.
func checkHeaderValue(t *testing.T, what string, schema *openapi3.SchemaRef, value string) {
	t.Helper()
	if schema == nil || schema.Value == nil {
		return
	}
	var v any = value
	if schema.Value.Type.Is("integer") {
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			t.Errorf("%s: %q is not an integer", what, value)
			return
		}
		v = float64(n)
	}
	if err := schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.EnableFormatValidation()); err != nil {
		t.Errorf("%s: %q does not match the spec: %v", what, value, err)
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
	idempotencyKey                   string         // sent as Idempotency-Key, when set
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
		switch {
		case c.idempotencyKey != "":
			res = sendKeyed(t, srv, c.method, c.target, c.key, c.body, "Idempotency-Key", c.idempotencyKey)
		case c.body == "":
			res = do(t, srv, c.method, c.target, c.key)
		default:
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

	// Idempotency-Key: a replay, another request under the key, a key in
	// use (claimed as a request in progress would).
	buy := `{"coin_id":"bitcoin","quantity":0.05,"buy_price":100}`
	first := call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key, body: buy, status: http.StatusCreated, idempotencyKey: "spec-1"})
	replayed := call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key, body: buy, status: http.StatusCreated, idempotencyKey: "spec-1"})
	if replayed.Header.Get("Idempotent-Replayed") != "true" || string(replayed.Data) != string(first.Data) {
		t.Errorf("replay: %s %s", replayed.Header, replayed.Raw)
	}
	call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key, body: `{"coin_id":"bitcoin","quantity":0.06,"buy_price":100}`,
		status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation, idempotencyKey: "spec-1"})
	request, digest := requestDigest(httptest.NewRequest("POST", holdings, nil), []byte(buy))
	busy := &coinpulse.IdempotencyKey{UserID: me.ID, Mode: coinpulse.ModeLive, Key: "spec-busy", Request: request, Digest: digest,
		RequestID: "req_busy", Claim: "c", CreatedAt: time.Now(), LeaseUntil: time.Now().Add(idempotencyLease)}
	if _, ok, err := shared.store.ClaimIdempotencyKey(t.Context(), busy, time.Now().Add(-IdempotencyKeep)); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	call(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key, body: buy, status: http.StatusConflict, code: coinpulse.CodeConflict, idempotencyKey: "spec-busy"})

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
	// A sell dated before the holding's latest trade.
	call(specCall{method: "POST", route: "/portfolio/transactions", target: "/v1/portfolio/transactions", key: key,
		body: fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"sell","quantity":"0.25","price":50,"executed_at":"2024-12-31T23:59:59Z"}`, pid), status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	// Sold out: average_buy_price null, quantity and cost 0.
	call(specCall{method: "POST", route: "/portfolio/transactions", target: "/v1/portfolio/transactions", key: key,
		body: fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"sell","quantity":"0.250000000000000001","price":50}`, pid), status: http.StatusCreated})

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
	if res := coldCall(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
		body: `{"coin_id":"bitcoin","quantity":1,"buy_price":1}`, status: http.StatusServiceUnavailable, code: coinpulse.CodeUnavailable}); res.Header.Get("Retry-After") != "5" {
		t.Errorf("a buy while market data loads: Retry-After %q, want 5", res.Header.Get("Retry-After"))
	}
	// A body that can never succeed is told so at once (an audit: it was
	// 503 too).
	coldCall(specCall{method: "POST", route: "/portfolio/{id}/holdings", target: holdings, key: key,
		body: `{"coin_id":"bitcoin","quantity":0,"buy_price":1}`, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation, bodyInvalid: true})

	// Errors.
	badBodies := []struct{ method, route, target, body string }{
		{"POST", "/portfolio", "/api/v1/portfolio", `{"name":"a","colour":"red"}`},
		{"POST", "/portfolio", "/api/v1/portfolio", `{"name":"   "}`},
		{"POST", "/portfolio", "/api/v1/portfolio", `{"name":"` + strings.Repeat("n", 101) + `"}`},
		{"POST", "/portfolio", "/api/v1/portfolio", `{"name":"bell\u0007"}`},
		{"POST", "/portfolio", "/api/v1/portfolio", `{"name":"next\u0085line"}`}, // C1 controls too
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

	// A DELETE takes no body but {}: anything else is a 422 that deletes
	// nothing (an audit: a malformed body was ignored).
	for _, body := range []string{`{not json`, `[]`, `{"id":1}`} {
		call(specCall{method: "DELETE", route: "/portfolio/{id}", target: base, key: key, body: body,
			status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation, bodyInvalid: true})
	}
	call(specCall{method: "GET", route: "/portfolio/{id}", target: base, key: key, status: http.StatusOK})
	call(specCall{method: "DELETE", route: "/portfolio/{id}", target: base, key: key, body: `{}`, status: http.StatusOK})
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

// limitedCall sends c through srv, a server that limits calls, with
// headers (name, value pairs), and checks the answer against the spec of
// its operation and status, the rate-limit headers included.
func limitedCall(t *testing.T, doc *openapi3.T, srv *Server, c specCall, headers ...string) *response {
	t.Helper()
	res := do(t, srv, c.method, c.target, c.key, headers...)
	if res.Status != c.status || (c.code != "" && res.Error.Code != string(c.code)) {
		t.Fatalf("%s %s %v: got %d %s, want %d %s\n%s", c.method, c.target, headers, res.Status, res.Error.Code, c.status, c.code, truncate(string(res.Raw), 2000))
	}
	checkLimitedResponse(t, doc, c.method, c.route, res)
	return res
}

// usageWindows is what the limits tests read of a /usage answer.
type usageWindows struct {
	Endpoints    string `json:"endpoints"`
	Mode         string `json:"mode"`
	MonthCalls   int64  `json:"month_calls"`
	MonthlyLimit *int64 `json:"monthly_limit"`
	Windows      []struct {
		Window    string     `json:"window"`
		Limit     *int64     `json:"limit"`
		Remaining *int64     `json:"remaining"`
		ResetsAt  *time.Time `json:"resets_at"`
	} `json:"windows"`
}

// limitsMatchSpec walks the rate limits through servers that limit calls,
// each answer checked against the spec, rate-limit headers included: a
// free account's burst and its 429, /usage with live and sandbox keys,
// simulated failures, a monthly allowance used up, a plan without API
// access and an expired subscription.
func limitsMatchSpec(t *testing.T, doc *openapi3.T) {
	srv := newLimitedServer(t, nil)
	u := newUser(t, coinpulse.TierFree, nil)
	live, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	sandbox, _ := newKey(t, u, coinpulse.ModeTest, rw, nil)
	now := srv.clock()
	month := coinpulse.MonthStart(now)
	monthSeconds := int64(month.AddDate(0, 1, 0).Sub(month) / time.Second)
	global := specCall{method: "GET", route: "/markets/global", target: "/api/v1/markets/global"}
	usage := specCall{method: "GET", route: "/usage", target: "/api/v1/usage"}
	with := func(c specCall, key string, status int, code coinpulse.Code) specCall {
		c.key, c.status, c.code = key, status, code
		return c
	}

	// The free plan's burst: 5 calls at once, then 429 naming the second.
	wantPolicy := fmt.Sprintf(`"second";q=5;w=1, "minute";q=60;w=60, "month";q=1000;w=%d`, monthSeconds)
	for i := 1; i <= 5; i++ {
		res := limitedCall(t, doc, srv.Server, with(global, live, http.StatusOK, ""))
		if h := res.Header; h.Get("X-RateLimit-Limit") != "5" || h.Get("X-RateLimit-Remaining") != strconv.Itoa(5-i) || h.Get("RateLimit-Policy") != wantPolicy {
			t.Errorf("call %d: X-RateLimit-Limit %q, -Remaining %q, RateLimit-Policy %q; want 5, %d, %s",
				i, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("RateLimit-Policy"), 5-i, wantPolicy)
		}
	}
	res := limitedCall(t, doc, srv.Server, with(global, live, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded))
	if h := res.Header; h.Get("Retry-After") != "1" || h.Get("X-RateLimit-Remaining") != "0" || !strings.HasPrefix(h.Get("RateLimit"), `"second";r=0;t=`) ||
		!strings.Contains(res.Error.Message, "5 calls per second") {
		t.Errorf("429: Retry-After %q, X-RateLimit-Remaining %q, RateLimit %q, message %q", h.Get("Retry-After"), h.Get("X-RateLimit-Remaining"), h.Get("RateLimit"), res.Error.Message)
	}

	// /usage answers with nothing left in the second: it is held to an
	// abuse limit of its own; its headers, like its body, describe the
	// plan's windows, where the account stands.
	srv.flush(t)
	res = limitedCall(t, doc, srv.Server, with(usage, live, http.StatusOK, ""))
	if h := res.Header; h.Get("X-RateLimit-Limit") != "5" || h.Get("X-RateLimit-Remaining") != "0" || !strings.HasPrefix(h.Get("RateLimit"), `"second";r=0;t=`) ||
		h.Get("RateLimit-Policy") != wantPolicy {
		t.Errorf("/usage: X-RateLimit-Limit %q, -Remaining %q, RateLimit %q, RateLimit-Policy %q; want the plan's second window, empty",
			h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("RateLimit"), h.Get("RateLimit-Policy"))
	}
	v := decode[usageWindows](t, res)
	if v.Mode != "live" || v.Endpoints != "basic" || v.MonthCalls != 5 || v.MonthlyLimit == nil || *v.MonthlyLimit != 1000 || len(v.Windows) != 3 ||
		*v.Windows[0].Remaining != 0 || *v.Windows[1].Remaining != 55 || *v.Windows[2].Limit != 1000 || *v.Windows[2].Remaining != 995 ||
		!v.Windows[2].ResetsAt.Equal(month.AddDate(0, 1, 0)) {
		t.Errorf("/usage of the free account: %s", res.Data)
	}
	// A sandbox key sees the abuse limit: no monthly cap.
	res = limitedCall(t, doc, srv.Server, with(usage, sandbox, http.StatusOK, ""))
	v = decode[usageWindows](t, res)
	if v.Mode != "test" || len(v.Windows) != 3 || *v.Windows[0].Limit != 50 || *v.Windows[1].Limit != 3000 ||
		v.Windows[2].Limit != nil || v.Windows[2].Remaining != nil || v.Windows[2].ResetsAt != nil {
		t.Errorf("/usage of a sandbox key: %s", res.Data)
	}

	// Simulated failures, on a market endpoint and on /usage.
	res = limitedCall(t, doc, srv.Server, with(global, sandbox, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded), "X-Sandbox-Simulate", "rate_limit")
	// Its headers are those of a real refusal by the second window:
	// whole again in a second, at the second after that rounded up; the
	// minute as it stands.
	wantReset := srv.clock().Add(time.Second).Add(time.Second - 1).Truncate(time.Second).Unix()
	if h := res.Header; h.Get("Retry-After") != "1" || h.Get("X-RateLimit-Limit") != "50" || h.Get("X-RateLimit-Remaining") != "0" ||
		!strings.HasPrefix(h.Get("RateLimit"), `"second";r=0;t=1, "minute";r=`) || h.Get("X-RateLimit-Reset") != strconv.FormatInt(wantReset, 10) {
		t.Errorf("simulated 429: Retry-After %q, X-RateLimit-Limit %q, -Remaining %q, -Reset %q, RateLimit %q; want 1, 50, 0, %d, \"second\";r=0;t=1, \"minute\";…",
			h.Get("Retry-After"), h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"), h.Get("RateLimit"), wantReset)
	}
	res = limitedCall(t, doc, srv.Server, with(global, sandbox, http.StatusInternalServerError, coinpulse.CodeServerError), "X-Sandbox-Simulate", "server_error")
	if !strings.Contains(res.Error.Message, "Simulated") {
		t.Errorf("simulated 500: %q", res.Error.Message)
	}
	limitedCall(t, doc, srv.Server, with(usage, sandbox, http.StatusInternalServerError, coinpulse.CodeServerError), "X-Sandbox-Simulate", "server_error")
	limitedCall(t, doc, srv.Server, with(global, sandbox, http.StatusUnprocessableEntity, coinpulse.CodeValidation), "X-Sandbox-Simulate", "meteor")
	srv.advance(time.Second)
	limitedCall(t, doc, srv.Server, with(global, live, http.StatusUnprocessableEntity, coinpulse.CodeValidation), "X-Sandbox-Simulate", "rate_limit")
	limitedCall(t, doc, srv.Server, with(usage, live, http.StatusUnprocessableEntity, coinpulse.CodeValidation), "X-Sandbox-Simulate", "timeout")

	// A monthly allowance used up, on a read and on a write.
	monthly := newLimitedServer(t, plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) {
		p.MonthlyCalls, p.PerSecond, p.PerMinute = 2, 1000, 1000
	}))
	premium, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	list := specCall{method: "GET", route: "/portfolio", target: "/api/v1/portfolio"}
	limitedCall(t, doc, monthly.Server, with(list, premium, http.StatusOK, ""))
	limitedCall(t, doc, monthly.Server, with(list, premium, http.StatusOK, ""))
	res = limitedCall(t, doc, monthly.Server, with(list, premium, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded))
	next := month.AddDate(0, 1, 0)
	if h := res.Header; h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Reset") != strconv.FormatInt(next.Unix(), 10) ||
		!strings.HasSuffix(h.Get("RateLimit-Policy"), fmt.Sprintf(`"month";q=2;w=%d`, monthSeconds)) || !strings.Contains(res.Error.Message, "monthly allowance of 2") {
		t.Errorf("monthly 429: %v, message %q", h, res.Error.Message)
	}
	if after, err := strconv.ParseInt(res.Header.Get("Retry-After"), 10, 64); err != nil || after < int64(next.Sub(monthly.clock())/time.Second) {
		t.Errorf("monthly 429: Retry-After %q, want the seconds to %s", res.Header.Get("Retry-After"), next)
	}
	limitedCall(t, doc, monthly.Server, with(specCall{method: "POST", route: "/portfolio", target: "/api/v1/portfolio"}, premium, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded))
	monthly.flush(t)
	v = decode[usageWindows](t, limitedCall(t, doc, monthly.Server, with(usage, premium, http.StatusOK, "")))
	if v.MonthCalls != 2 || *v.MonthlyLimit != 2 || *v.Windows[2].Remaining != 0 {
		t.Errorf("/usage after the allowance: month_calls %d, monthly_limit %d, month remaining %d", v.MonthCalls, *v.MonthlyLimit, *v.Windows[2].Remaining)
	}

	// The shipped plan file that gives API access to pro alone.
	proOnly := newLimitedServer(t, proOnlyPlans(t))
	noAccess, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	res = limitedCall(t, doc, proOnly.Server, with(global, noAccess, http.StatusForbidden, coinpulse.CodePermissionDenied))
	if res.Header.Get("X-RateLimit-Limit") == "" || res.Header.Get("RateLimit-Policy") == "" {
		t.Errorf("403 of an authenticated call without rate-limit headers: %v", res.Header)
	}
	if v := decode[usageWindows](t, limitedCall(t, doc, proOnly.Server, with(usage, noAccess, http.StatusOK, ""))); v.Endpoints != "none" {
		t.Errorf("/usage without API access: endpoints %q", v.Endpoints)
	}
	res = limitedCall(t, doc, proOnly.Server, with(global, proKey(t), http.StatusOK, ""))
	if !strings.HasSuffix(res.Header.Get("RateLimit-Policy"), fmt.Sprintf(`"month";q=10000;w=%d`, monthSeconds)) {
		t.Errorf("pro on the pro-only plans: RateLimit-Policy %q", res.Header.Get("RateLimit-Policy"))
	}

	// /usage is free of charge, but not past a paid tier's expiry.
	past := now.Add(-time.Hour)
	expired, _ := newKey(t, newUser(t, coinpulse.TierPremium, &past), coinpulse.ModeLive, rw, nil)
	limitedCall(t, doc, srv.Server, with(usage, expired, http.StatusForbidden, coinpulse.CodeExpiredSubscription))
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

// Alerts and webhook endpoints through the API, and their errors, each
// answer checked against the spec of its operation and status, each request
// body against the documented request schema. The shared server runs no
// alert evaluator and no dispatcher: firings and delivery attempts are made
// through the store, as those would make them, and read through the API.
func alertsMatchSpec(t *testing.T, doc *openapi3.T, srv *Server) {
	ctx := context.Background()
	me := newUser(t, coinpulse.TierPro, nil)
	key, _ := newKey(t, me, coinpulse.ModeLive, rw, nil)
	mySandbox, _ := newKey(t, me, coinpulse.ModeTest, rw, nil)
	live := coinpulse.Owner{UserID: me.ID, Mode: coinpulse.ModeLive}
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
	type delivery struct {
		ID        int64  `json:"id"`
		EventType string `json:"event_type"`
		Status    string `json:"status"`
	}
	deliveries := func(res *response) []delivery {
		t.Helper()
		var ds []delivery
		if err := json.Unmarshal(res.Data, &ds); err != nil {
			t.Fatalf("deliveries: %v\n%s", err, res.Data)
		}
		return ds
	}
	record := func(id int64, a coinpulse.Attempt) {
		t.Helper()
		if err := shared.store.RecordAttempt(ctx, id, a); err != nil {
			t.Fatalf("RecordAttempt %d: %v", id, err)
		}
	}

	// Webhook endpoints first, so that the firing below has somewhere to go.
	// Literal public addresses: registration resolves no name then.
	res := call(specCall{method: "POST", route: "/webhooks", target: "/api/v1/webhooks", key: key,
		body: `{"url":"https://93.184.215.14/hooks/coinpulse","description":"spec walk"}`, status: http.StatusCreated})
	hook := id(res)
	if !strings.Contains(string(res.Data), `"secret":"whsec_`) {
		t.Errorf("POST /webhooks without the secret: %s", res.Data)
	}
	gone := id(call(specCall{method: "POST", route: "/webhooks", target: "/v1/webhooks", key: key,
		body: `{"url":"  HTTPS://93.184.215.14:8443/gone  ","events":["alert.triggered","alert.triggered"],"description":null}`, status: http.StatusCreated}))
	res = call(specCall{method: "GET", route: "/webhooks", target: "/api/v1/webhooks", key: key, status: http.StatusOK})
	if strings.Contains(string(res.Data), "secret") {
		t.Errorf("GET /webhooks shows a secret: %s", res.Data)
	}
	hookBase := fmt.Sprintf("/api/v1/webhooks/%d", hook)

	// Alerts.
	btc := id(call(specCall{method: "POST", route: "/alerts", target: "/api/v1/alerts", key: key,
		body: `{"coin_id":"bitcoin","target_price":1,"condition":"above","notify_email":true}`, status: http.StatusCreated}))
	eth := id(call(specCall{method: "POST", route: "/alerts", target: "/v1/alerts", key: key,
		body: `{"coin_id":"Ethereum","target_price":"2500.000000000000000001","condition":"below","notify_email":null}`, status: http.StatusCreated}))
	call(specCall{method: "POST", route: "/alerts", target: "/api/v1/alerts", key: key,
		body: `{"coin_id":"eth","target_price":"0.000000000000000001","condition":"below","notify_email":false}`, status: http.StatusCreated})
	// Zeros after the last significant digit are not decimal places that
	// count (an audit: the spec's patterns refused them).
	for _, target := range []string{`"0.0000000000000000010"`, `"1.0000000000000000000"`, `1.50000000000000000000`} {
		call(specCall{method: "POST", route: "/alerts", target: "/api/v1/alerts", key: key,
			body: `{"coin_id":"eth","target_price":` + target + `,"condition":"below"}`, status: http.StatusCreated})
	}
	btcPath := fmt.Sprintf("/api/v1/alerts/%d", btc)
	call(specCall{method: "GET", route: "/alerts", target: "/api/v1/alerts", key: key, status: http.StatusOK})
	call(specCall{method: "GET", route: "/alerts/{id}", target: btcPath, key: key, status: http.StatusOK})

	// The evaluator sees bitcoin above 1: the alert fires, its e-mail and
	// a delivery to each endpoint are queued.
	a, err := shared.store.Alert(ctx, live, btc)
	if err != nil {
		t.Fatal(err)
	}
	fired, err := shared.store.FireAlerts(ctx, []coinpulse.Firing{{AlertID: btc, ArmedSeq: a.ArmedSeq,
		Price: decimal.RequireFromString("104231.55"), At: time.Now()}}, AlertEvent)
	if err != nil || len(fired) != 1 {
		t.Fatalf("FireAlerts: %v, %d fired", err, len(fired))
	}
	res = call(specCall{method: "GET", route: "/alerts/{id}", target: btcPath, key: key, status: http.StatusOK})
	if !strings.Contains(string(res.Data), `"is_active":false`) || !strings.Contains(string(res.Data), `"email_status":"pending"`) {
		t.Errorf("fired alert: %s", res.Data)
	}
	call(specCall{method: "GET", route: "/alerts", target: "/api/v1/alerts", key: key, status: http.StatusOK})

	// Its deliveries: one attempt failed and to be retried; a test event,
	// delivered; the other endpoint answered 410 and was disabled.
	ds := deliveries(call(specCall{method: "GET", route: "/webhooks/{id}/deliveries", target: hookBase + "/deliveries", key: key, status: http.StatusOK}))
	if len(ds) != 1 || ds[0].EventType != coinpulse.EventAlertTriggered || ds[0].Status != "pending" {
		t.Fatalf("deliveries after the firing: %+v", ds)
	}
	now := time.Now()
	record(ds[0].ID, coinpulse.Attempt{At: now, Status: coinpulse.DeliveryPending, NextAttemptAt: now.Add(5 * time.Second),
		StatusCode: http.StatusServiceUnavailable, Error: "the endpoint answered 503 Service Unavailable"})
	test := id(call(specCall{method: "POST", route: "/webhooks/{id}/test", target: hookBase + "/test", key: key, status: http.StatusAccepted}))
	record(test, coinpulse.Attempt{At: now, Status: coinpulse.DeliveryDelivered, StatusCode: http.StatusNoContent})
	call(specCall{method: "POST", route: "/webhooks/{id}/test", target: hookBase + "/test", key: key, body: `{}`, status: http.StatusAccepted})
	ds = deliveries(call(specCall{method: "GET", route: "/webhooks/{id}/deliveries", target: hookBase + "/deliveries?limit=100", key: key, status: http.StatusOK}))
	if len(ds) != 3 {
		t.Errorf("deliveries: %+v", ds)
	}
	// Paged by cursor: meta.has_more says when to stop.
	var paged []delivery
	for after := int64(0); ; {
		target := hookBase + "/deliveries?limit=2"
		if after != 0 {
			target += fmt.Sprintf("&starting_after=%d", after)
		}
		res := call(specCall{method: "GET", route: "/webhooks/{id}/deliveries", target: target, key: key, status: http.StatusOK})
		page := deliveries(res)
		paged = append(paged, page...)
		if res.Meta["has_more"] != true {
			break
		}
		after = page[len(page)-1].ID
	}
	if len(paged) != len(ds) || paged[0].ID != ds[0].ID || paged[2].ID != ds[2].ID {
		t.Errorf("deliveries by cursor: %+v, want %+v", paged, ds)
	}
	gds := deliveries(call(specCall{method: "GET", route: "/webhooks/{id}/deliveries", target: fmt.Sprintf("/api/v1/webhooks/%d/deliveries", gone), key: key, status: http.StatusOK}))
	call(specCall{method: "GET", route: "/webhooks/{id}/deliveries", target: hookBase + fmt.Sprintf("/deliveries?starting_after=%d", gds[0].ID), key: key,
		status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	if len(gds) != 1 {
		t.Fatalf("deliveries of the second endpoint: %+v", gds)
	}
	record(gds[0].ID, coinpulse.Attempt{At: now, Status: coinpulse.DeliveryFailed, StatusCode: http.StatusGone,
		Error: "the endpoint answered 410 Gone", DisableEndpoint: "the endpoint answered 410 Gone"})
	call(specCall{method: "GET", route: "/webhooks/{id}/deliveries", target: fmt.Sprintf("/api/v1/webhooks/%d/deliveries", gone), key: key, status: http.StatusOK})
	res = call(specCall{method: "GET", route: "/webhooks", target: "/api/v1/webhooks", key: key, status: http.StatusOK})
	if !strings.Contains(string(res.Data), `"disabled_reason":"the endpoint answered 410 Gone"`) {
		t.Errorf("endpoint not disabled: %s", res.Data)
	}
	call(specCall{method: "POST", route: "/webhooks/{id}/test", target: fmt.Sprintf("/api/v1/webhooks/%d/test", gone), key: key, status: http.StatusAccepted})

	// Re-armed, disabled.
	res = call(specCall{method: "POST", route: "/alerts/{id}/toggle", target: btcPath + "/toggle", key: key, status: http.StatusOK})
	if !strings.Contains(string(res.Data), `"is_active":true`) || !strings.Contains(string(res.Data), `"triggered_at":null`) {
		t.Errorf("re-armed alert: %s", res.Data)
	}
	call(specCall{method: "POST", route: "/alerts/{id}/toggle", target: btcPath + "/toggle", key: key, body: `{}`, status: http.StatusOK})

	// Errors.
	badBodies := []struct{ route, target, body string }{
		{"/alerts", "/api/v1/alerts", `{}`},
		{"/alerts", "/api/v1/alerts", ``},
		{"/alerts", "/api/v1/alerts", `[{"coin_id":"bitcoin","target_price":1,"condition":"above"}]`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":0,"condition":"above"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":"0","condition":"above"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":"-1","condition":"above"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":1000000000000000,"condition":"above"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":"1.0000000000000000001","condition":"above"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":"0.00000000000000000110","condition":"above"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":"1.` + strings.Repeat("0", 63) + `","condition":"above"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":1,"condition":"sideways"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":1,"condition":"above","notify_email":"yes"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"","target_price":1,"condition":"above"}`},
		{"/alerts", "/api/v1/alerts", `{"coin_id":"bitcoin","target_price":1,"condition":"above","price":1}`},
		{"/alerts/{id}/toggle", btcPath + "/toggle", `[]`},
		{"/alerts/{id}/toggle", btcPath + "/toggle", `{"is_active":false}`},
		{"/webhooks", "/api/v1/webhooks", `{}`},
		{"/webhooks", "/api/v1/webhooks", `{"url":""}`},
		{"/webhooks", "/api/v1/webhooks", `{"url":"ftp://93.184.215.14/hook"}`},
		{"/webhooks", "/api/v1/webhooks", `{"url":"93.184.215.14/hook"}`},
		{"/webhooks", "/api/v1/webhooks", `{"url":"https://93.184.215.14/` + strings.Repeat("a", 2048) + `"}`},
		{"/webhooks", "/api/v1/webhooks", `{"url":"https://93.184.215.14/hook","events":[]}`},
		{"/webhooks", "/api/v1/webhooks", `{"url":"https://93.184.215.14/hook","events":["price.updated"]}`},
		{"/webhooks", "/api/v1/webhooks", `{"url":"https://93.184.215.14/hook","events":"alert.triggered"}`},
		{"/webhooks", "/api/v1/webhooks", `{"url":"https://93.184.215.14/hook","description":"` + strings.Repeat("d", 501) + `"}`},
		{"/webhooks", "/api/v1/webhooks", `{"url":"https://93.184.215.14/hook","secret":"whsec_mine"}`},
		{"/webhooks/{id}/test", hookBase + "/test", `"ping"`},
		{"/webhooks/{id}/test", hookBase + "/test", `{"event":"alert.triggered"}`},
	}
	for _, b := range badBodies {
		call(specCall{method: "POST", route: b.route, target: b.target, key: key, body: b.body,
			status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation, bodyInvalid: true})
	}
	// Bodies the schema allows that the server refuses for what they mean:
	// addresses webhooks may not reach, named in the detail on url.
	refused := map[string]string{
		`{"url":"http://127.0.0.1:8080/hook"}`:              "the host 127.0.0.1 is a loopback address",
		`{"url":"http://169.254.169.254/latest/meta-data"}`: "the host 169.254.169.254 is a cloud metadata address",
		`{"url":"https://10.1.2.3/hook"}`:                   "the host 10.1.2.3 is a private address",
		`{"url":"http://[::1]:9000/"}`:                      "the host ::1 is a loopback address",
		`{"url":"https://user:pw@93.184.215.14/hook"}`:      "the URL must not contain a user name or password",
		`{"url":"http://localhost/hook"}`:                   "",
	}
	for body, want := range refused {
		res := call(specCall{method: "POST", route: "/webhooks", target: "/api/v1/webhooks", key: key, body: body,
			status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
		if len(res.Error.Details) != 1 || res.Error.Details[0].Field != "url" || (want != "" && res.Error.Details[0].Message != want) {
			t.Errorf("%s: details %+v, want url: %q", body, res.Error.Details, want)
		}
	}
	call(specCall{method: "POST", route: "/alerts", target: "/api/v1/alerts", key: key,
		body: `{"coin_id":"no-such-coin","target_price":1,"condition":"above"}`, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/alerts", target: "/api/v1/alerts?page=1", key: key, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/webhooks/{id}/deliveries", target: hookBase + "/deliveries?limit=0", key: key, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/webhooks/{id}/deliveries", target: hookBase + "/deliveries?limit=101", key: key, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/ws", target: "/api/v1/ws", key: key, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/ws", target: "/api/v1/ws", status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})
	call(specCall{method: "GET", route: "/ws", target: "/api/v1/ws?coins=bitcoin", key: key, status: http.StatusUnprocessableEntity, code: coinpulse.CodeValidation})

	notFound := []specCall{
		{method: "GET", route: "/alerts/{id}", target: "/api/v1/alerts/999999999999"},
		{method: "GET", route: "/alerts/{id}", target: "/api/v1/alerts/abc"},
		{method: "GET", route: "/alerts/{id}", target: btcPath, key: other},
		{method: "GET", route: "/alerts/{id}", target: btcPath, key: mySandbox},
		{method: "POST", route: "/alerts/{id}/toggle", target: btcPath + "/toggle", key: other},
		{method: "DELETE", route: "/alerts/{id}", target: btcPath, key: other},
		{method: "DELETE", route: "/webhooks/{id}", target: "/api/v1/webhooks/999999999999"},
		{method: "DELETE", route: "/webhooks/{id}", target: hookBase, key: other},
		{method: "POST", route: "/webhooks/{id}/test", target: hookBase + "/test", key: mySandbox},
		{method: "GET", route: "/webhooks/{id}/deliveries", target: hookBase + "/deliveries", key: other},
		{method: "GET", route: "/webhooks/{id}/deliveries", target: "/api/v1/webhooks/01/deliveries"},
	}
	for _, c := range notFound {
		if c.key == "" {
			c.key = key
		}
		c.status, c.code = http.StatusNotFound, coinpulse.CodeNotFound
		call(c)
	}
	// The other mode's lists are apart.
	res = call(specCall{method: "GET", route: "/alerts", target: "/api/v1/alerts", key: mySandbox, status: http.StatusOK})
	if string(res.Data) != "[]" {
		t.Errorf("sandbox alerts: %s", res.Data)
	}
	call(specCall{method: "GET", route: "/webhooks", target: "/api/v1/webhooks", key: mySandbox, status: http.StatusOK})

	forbidden := []specCall{
		{method: "GET", route: "/alerts", target: "/api/v1/alerts", key: free},
		{method: "POST", route: "/alerts", target: "/api/v1/alerts", key: free, body: `{"coin_id":"bitcoin","target_price":1,"condition":"above"}`},
		{method: "GET", route: "/webhooks", target: "/api/v1/webhooks", key: free},
		{method: "POST", route: "/webhooks", target: "/api/v1/webhooks", key: free, body: `{"url":"https://93.184.215.14/hook"}`},
		{method: "GET", route: "/ws", target: "/api/v1/ws", key: free},
		{method: "POST", route: "/alerts", target: "/api/v1/alerts", key: readOnly, body: `{"coin_id":"bitcoin","target_price":1,"condition":"above"}`},
		{method: "DELETE", route: "/alerts/{id}", target: btcPath, key: readOnly},
		{method: "POST", route: "/alerts/{id}/toggle", target: btcPath + "/toggle", key: readOnly},
		{method: "POST", route: "/webhooks", target: "/api/v1/webhooks", key: readOnly, body: `{"url":"https://93.184.215.14/hook"}`},
		{method: "POST", route: "/webhooks/{id}/test", target: hookBase + "/test", key: readOnly},
		{method: "DELETE", route: "/webhooks/{id}", target: hookBase, key: readOnly},
	}
	for _, c := range forbidden {
		c.status, c.code = http.StatusForbidden, coinpulse.CodePermissionDenied
		call(c)
	}
	call(specCall{method: "GET", route: "/webhooks", target: "/api/v1/webhooks", key: readOnly, status: http.StatusOK})
	call(specCall{method: "POST", route: "/alerts", target: "/api/v1/alerts", body: `{"coin_id":"bitcoin","target_price":1,"condition":"above"}`,
		status: http.StatusUnauthorized, code: coinpulse.CodeInvalidAPIKey})
	call(specCall{method: "GET", route: "/ws", target: "/api/v1/ws", key: "sk_live_nope", status: http.StatusUnauthorized, code: coinpulse.CodeInvalidAPIKey})
	call(specCall{method: "POST", route: "/webhooks", target: "/api/v1/webhooks", key: key, body: `{"url":"https://93.184.215.14/` + strings.Repeat("x", 70_000) + `"}`,
		status: http.StatusRequestEntityTooLarge, code: coinpulse.CodePayloadTooLarge, bodyInvalid: true})

	// A plan that leaves webhooks out: alerts yes, webhooks and the stream no.
	noHooks := newLimitedServer(t, plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) { p.Webhooks = false }))
	premiumLive, _ := newKey(t, premium, coinpulse.ModeLive, rw, nil)
	limitedCall(t, doc, noHooks.Server, specCall{method: "GET", route: "/alerts", target: "/api/v1/alerts", key: premiumLive, status: http.StatusOK})
	for _, c := range []specCall{
		{method: "GET", route: "/webhooks", target: "/api/v1/webhooks"},
		{method: "GET", route: "/ws", target: "/api/v1/ws"},
	} {
		c.key, c.status, c.code = premiumLive, http.StatusForbidden, coinpulse.CodePermissionDenied
		if res := limitedCall(t, doc, noHooks.Server, c); !strings.Contains(res.Error.Message, "does not include webhooks") {
			t.Errorf("%s %s: %q", c.method, c.target, res.Error.Message)
		}
	}

	// Premium keeps 100 active alerts per mode: one more is refused, and so
	// is re-enabling one at the cap.
	po := coinpulse.Owner{UserID: premium.ID, Mode: coinpulse.ModeTest}
	for i := 0; i < 100; i++ {
		a := &coinpulse.Alert{Owner: po, CoinID: "bitcoin", CoinSymbol: "btc", TargetPrice: decimal.NewFromInt(int64(1000 + i)),
			Condition: coinpulse.Above, IsActive: true}
		if err := shared.store.CreateAlert(ctx, a, -1); err != nil {
			t.Fatal(err)
		}
	}
	alertBody := `{"coin_id":"bitcoin","target_price":1,"condition":"above"}`
	res = call(specCall{method: "POST", route: "/alerts", target: "/api/v1/alerts", key: sandbox, body: alertBody,
		status: http.StatusForbidden, code: coinpulse.CodeAlertLimitReached})
	if !strings.Contains(res.Error.Message, "100 active alerts") {
		t.Errorf("ALERT_LIMIT_REACHED: %q", res.Error.Message)
	}
	first := decode[[]struct {
		ID int64 `json:"id"`
	}](t, call(specCall{method: "GET", route: "/alerts", target: "/api/v1/alerts", key: sandbox, status: http.StatusOK}))[0].ID
	firstPath := fmt.Sprintf("/api/v1/alerts/%d", first)
	call(specCall{method: "POST", route: "/alerts/{id}/toggle", target: firstPath + "/toggle", key: sandbox, status: http.StatusOK})
	call(specCall{method: "POST", route: "/alerts", target: "/api/v1/alerts", key: sandbox, body: alertBody, status: http.StatusCreated})
	call(specCall{method: "POST", route: "/alerts/{id}/toggle", target: firstPath + "/toggle", key: sandbox,
		status: http.StatusForbidden, code: coinpulse.CodeAlertLimitReached})

	// 10 webhook endpoints per mode: an 11th is a conflict.
	for i := 0; i < 10; i++ {
		if res := send(t, srv, "POST", "/api/v1/webhooks", sandbox, fmt.Sprintf(`{"url":"https://93.184.215.14/hook/%d"}`, i)); res.Status != http.StatusCreated {
			t.Fatalf("endpoint %d: %d %s", i, res.Status, res.Raw)
		}
	}
	call(specCall{method: "POST", route: "/webhooks", target: "/api/v1/webhooks", key: sandbox, body: `{"url":"https://93.184.215.14/hook/10"}`,
		status: http.StatusConflict, code: coinpulse.CodeConflict})

	// The stream: a real upgrade, its documented headers and its welcome.
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(wctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/api/v1/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatalf("dial /api/v1/ws: %v", err)
	}
	defer ws.CloseNow()
	ref := specOperation(t, doc, "GET", "/ws").Responses.Status(http.StatusSwitchingProtocols)
	if resp.StatusCode != http.StatusSwitchingProtocols || ref == nil {
		t.Fatalf("/ws: status %d, documented 101: %v", resp.StatusCode, ref != nil)
	}
	for name, h := range ref.Value.Headers {
		switch value := resp.Header.Get(name); {
		case value == "" && slices.Contains(rateLimitHeaders, name): // no limiter
		case value == "":
			t.Errorf("/ws: documented header %s missing from the 101", name)
		default:
			checkHeaderValue(t, "/ws: 101: header "+name, h.Value.Schema, value)
		}
	}
	_, msg, err := ws.Read(wctx)
	if err != nil || !strings.HasPrefix(string(msg), `{"type":"welcome","sequence":1,"mode":"live",`) {
		t.Errorf("/ws: first message %s, %v", msg, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	succeeded["GET /ws"] = true

	// Deleted: an alert, an endpoint with its log.
	call(specCall{method: "DELETE", route: "/alerts/{id}", target: fmt.Sprintf("/api/v1/alerts/%d", eth), key: key, status: http.StatusOK})
	call(specCall{method: "DELETE", route: "/webhooks/{id}", target: hookBase, key: key, status: http.StatusOK})
	call(specCall{method: "GET", route: "/webhooks/{id}/deliveries", target: hookBase + "/deliveries", key: key, status: http.StatusNotFound, code: coinpulse.CodeNotFound})
	call(specCall{method: "GET", route: "/alerts/{id}", target: fmt.Sprintf("/api/v1/alerts/%d", eth), key: key, status: http.StatusNotFound, code: coinpulse.CodeNotFound})

	// Every alert, webhook and stream operation was seen to succeed.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if (slices.Contains(op.Tags, "Alerts") || slices.Contains(op.Tags, "Webhooks") || slices.Contains(op.Tags, "WebSocket")) && !succeeded[method+" "+path] {
				t.Errorf("the walk never saw %s %s succeed", method, path)
			}
		}
	}
}

// The document's example coins add up as the server's do: market_cap is
// current_price × circulating_supply (an audit: bitcoin's differed by 28
// million dollars from its price and supply).
func TestOpenAPIExampleMarketCaps(t *testing.T) {
	var doc any
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			price, ok1 := v["current_price"].(float64)
			supply, ok2 := v["circulating_supply"].(float64)
			mc, ok3 := v["market_cap"].(float64)
			if ok1 && ok2 && ok3 {
				n++
				if want := price * supply; math.Abs(mc-want) > 0.01*math.Max(1, want/1e12) {
					t.Errorf("example %v: market_cap %.2f, but current_price × circulating_supply is %.2f", v["id"], mc, want)
				}
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	if n < 5 {
		t.Errorf("checked %d example coins, want the document's (at least 5)", n)
	}
}

// The history examples follow the range rule of the days parameter: the
// first point is the last grid point at or before as_of − days, the last
// one as_of (an audit: they began a day late).
func TestOpenAPIExampleHistoryRange(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, item := range doc.Paths {
		if !strings.HasSuffix(path, "/history") || strings.HasPrefix(path, "/portfolio") {
			continue // a coin's history, not a portfolio's
		}
		var get struct {
			Responses map[string]struct {
				Content map[string]struct{ Example json.RawMessage }
			}
		}
		if err := json.Unmarshal(item["get"], &get); err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		var ex struct {
			Data struct {
				Days     int
				Interval string
				Points   []struct{ Timestamp time.Time }
			}
			Meta struct {
				AsOf time.Time `json:"as_of"`
			}
		}
		if err := json.Unmarshal(get.Responses["200"].Content["application/json"].Example, &ex); err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		pts, asOf := ex.Data.Points, ex.Meta.AsOf
		step := map[string]time.Duration{"daily": 24 * time.Hour, "hourly": time.Hour}[ex.Data.Interval]
		if len(pts) < 2 || step == 0 || asOf.IsZero() {
			t.Errorf("%s: example with %d points, interval %q, as_of %v", path, len(pts), ex.Data.Interval, asOf)
			continue
		}
		n++
		from := asOf.AddDate(0, 0, -ex.Data.Days)
		if first := pts[0].Timestamp; first.After(from) || !pts[1].Timestamp.After(from) || !first.Equal(from.Truncate(step)) {
			t.Errorf("%s: example starts at %v, want the %s grid point at or before as_of − %d days, %v", path, first, ex.Data.Interval, ex.Data.Days, from.Truncate(step))
		}
		if last := pts[len(pts)-1].Timestamp; !last.Equal(asOf) {
			t.Errorf("%s: example ends at %v, want as_of %v", path, last, asOf)
		}
	}
	if n != 2 {
		t.Errorf("checked %d history examples, want 2", n)
	}
}
