package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
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
// formats on), successes and errors alike.
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
			res := do(t, srv, "GET", tc.target, tc.key)
			item := doc.Paths.Find(tc.route)
			if item == nil || item.Get == nil {
				t.Fatalf("no GET %s in the spec", tc.route)
			}
			ref := item.Get.Responses.Status(res.Status)
			if ref == nil {
				t.Fatalf("spec documents no %d for GET %s", res.Status, tc.route)
			}
			media := ref.Value.Content.Get("application/json")
			if media == nil || media.Schema == nil {
				t.Fatalf("no JSON schema for %d of GET %s", res.Status, tc.route)
			}
			var body any
			if err := json.Unmarshal(res.Raw, &body); err != nil {
				t.Fatal(err)
			}
			if err := media.Schema.Value.VisitJSON(body, openapi3.EnableJSONSchema2020(), openapi3.EnableFormatValidation()); err != nil {
				t.Errorf("%d body does not match the spec: %v\n%s", res.Status, err, truncate(string(res.Raw), 2000))
			}
			for name := range ref.Value.Headers {
				if name != "Retry-After" && name != "Allow" && res.Header.Get(name) == "" {
					t.Errorf("documented header %s missing from the %d response", name, res.Status)
				}
			}
		})
	}
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
