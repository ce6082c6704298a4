package api

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
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
	f.Fuzz(func(t *testing.T, path uint8, q string) {
		target := fuzzPaths[int(path)%len(fuzzPaths)]
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
