package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/feed/sim"
	"coinpulse/internal/market"
)

func TestEnvelopeAndPagination(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	res := do(t, srv, "GET", "/api/v1/markets?per_page=7&page=2", key)
	items := decode[[]map[string]any](t, res)
	if len(items) != 7 {
		t.Fatalf("got %d items, want 7", len(items))
	}
	for _, f := range []string{"current_page", "total_pages", "total_results", "page", "per_page", "total", "as_of", "snapshot", "feed", "simulated"} {
		if _, ok := res.Meta[f]; !ok {
			t.Errorf("meta lacks %s: %v", f, res.Meta)
		}
	}
	if res.Meta["current_page"] != 2.0 || res.Meta["page"] != 2.0 || res.Meta["per_page"] != 7.0 || res.Meta["total"] != res.Meta["total_results"] {
		t.Errorf("pagination meta %v", res.Meta)
	}
	if res.Meta["total_pages"] != float64((1000+6)/7) || res.Meta["total"] != 1000.0 {
		t.Errorf("totals %v, want 1000 coins in %d pages", res.Meta, (1000+6)/7)
	}
	for _, f := range []string{"id", "symbol", "name", "current_price", "market_cap", "market_cap_rank", "total_volume", "volume_24h", "price_change_24h", "price_change_percentage_24h", "circulating_supply", "ath", "atl", "last_updated"} {
		if _, ok := items[0][f]; !ok {
			t.Errorf("item lacks %s: %v", f, items[0])
		}
	}
	if items[0]["volume_24h"] != items[0]["total_volume"] {
		t.Errorf("volume_24h %v != total_volume %v", items[0]["volume_24h"], items[0]["total_volume"])
	}
	if items[0]["market_cap_rank"] != 8.0 {
		t.Errorf("first item of page 2 has rank %v, want 8", items[0]["market_cap_rank"])
	}
	if cc := res.Header.Get("Cache-Control"); !strings.HasPrefix(cc, "private, max-age=") {
		t.Errorf("Cache-Control %q", cc)
	}
}

func TestRequestID(t *testing.T) {
	srv := testServer(t)
	for _, tc := range []struct {
		in   string
		echo bool
	}{
		{"abc-123_X.y", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"has space", false},
		{"bad/slash", false},
		{"", false},
	} {
		res := do(t, srv, "GET", "/healthz", "", "X-Request-Id", tc.in)
		got := res.Header.Get("X-Request-Id")
		if (got == tc.in) != tc.echo || got == "" {
			t.Errorf("X-Request-Id %q → %q, echo=%v", tc.in, got, tc.echo)
		}
	}
	a := do(t, srv, "GET", "/healthz", "").Header.Get("X-Request-Id")
	b := do(t, srv, "GET", "/healthz", "").Header.Get("X-Request-Id")
	if a == b {
		t.Errorf("two generated request ids are equal: %q", a)
	}
	// Generated ids are the process's prefix and random bits: they do not
	// count the requests the server answers.
	form := regexp.MustCompile(`^req_[0-9a-f]{12}[0-9a-z]{1,13}$`)
	if !form.MatchString(a) || !form.MatchString(b) || a[:16] != b[:16] {
		t.Errorf("generated ids %q and %q", a, b)
	}
	seen := map[string]bool{}
	var prev uint64
	follows := 0
	for range 1000 {
		id := newRequestID()
		if seen[id] {
			t.Fatalf("%q generated twice", id)
		}
		seen[id] = true
		n, _ := strconv.ParseUint(id[16:], 36, 64)
		if n == prev+1 {
			follows++
		}
		prev = n
	}
	if follows > 0 {
		t.Errorf("%d of 1000 generated ids follow the one before", follows)
	}
}

func TestPrefixesAndAliases(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	snap := shared.engine.Current().ID
	a := do(t, srv, "GET", "/api/v1/markets?per_page=5&snapshot="+snap, key)
	b := do(t, srv, "GET", "/v1/markets?per_page=5&snapshot="+snap, key)
	if !bytes.Equal(a.Data, b.Data) {
		t.Errorf("/api/v1 and /v1 differ:\n%s\n%s", a.Data, b.Data)
	}
	c := decode[map[string]any](t, do(t, srv, "GET", "/api/v1/coins/bitcoin", key))
	d := decode[map[string]any](t, do(t, srv, "GET", "/v1/markets/bitcoin", key))
	if c["id"] != "bitcoin" || d["id"] != "bitcoin" || c["name"] != d["name"] {
		t.Errorf("/coins/bitcoin %v vs /markets/bitcoin %v", c["id"], d["id"])
	}
	h := decode[historyData](t, do(t, srv, "GET", "/api/v1/markets/ethereum/history?days=7", key))
	if h.ID != "ethereum" || len(h.Points) < 7 {
		t.Errorf("/markets/ethereum/history: id %s, %d points", h.ID, len(h.Points))
	}
	// The fixed paths win over the {id} alias.
	if g := decode[map[string]any](t, do(t, srv, "GET", "/api/v1/markets/global", key)); g["total_market_cap"] == nil {
		t.Errorf("/markets/global answered %v", g)
	}
}

func TestUnroutedRequests(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	wantError(t, do(t, srv, "GET", "/api/v2/markets", key), 404, coinpulse.CodeNotFound)
	wantError(t, do(t, srv, "GET", "/nope", ""), 404, coinpulse.CodeNotFound)
	wantError(t, do(t, srv, "GET", "/api/v1/portfolio-nope", key), 404, coinpulse.CodeNotFound)
	// An escaped slash is no slash: the message names the path as sent,
	// not a route that exists (an audit).
	res := do(t, srv, "GET", "/api/v1/markets%2Fglobal", key)
	wantError(t, res, 404, coinpulse.CodeNotFound)
	if !strings.Contains(res.Error.Message, "/api/v1/markets%2Fglobal") {
		t.Errorf("404 of an escaped slash: %q", res.Error.Message)
	}
	res = do(t, srv, "POST", "/api/v1/markets", key)
	wantError(t, res, 405, coinpulse.CodeMethodNotAllowed)
	if allow := res.Header.Get("Allow"); !strings.Contains(allow, "GET") {
		t.Errorf("Allow %q", allow)
	}
	wantError(t, do(t, srv, "DELETE", "/v1/coins/bitcoin", key), 405, coinpulse.CodeMethodNotAllowed)
	// A literal path is not taken for a wildcard's value: GET
	// /portfolio/transactions is not portfolio "transactions".
	for _, m := range []string{"GET", "HEAD", "PATCH", "DELETE", "PUT", "OPTIONS", "TRACE"} {
		res := do(t, srv, m, "/api/v1/portfolio/transactions", key)
		if res.Status != 405 || res.Header.Get("Allow") != "POST" {
			t.Errorf("%s /api/v1/portfolio/transactions: %d, Allow %q: %s", m, res.Status, res.Header.Get("Allow"), res.Raw)
		}
	}
	// A path that is not clean is sent to the clean one, in JSON, with the
	// rate-limit headers of a valid key; nothing is counted.
	for _, target := range []string{"/api/v1//markets/global", "/api/v1/./markets/global", "/api/v1/x/../markets/global", "//api/v1/markets/global"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.URL.Path = target // as a client sending it as is
		req.Header.Set("Authorization", "Bearer "+key)
		res := serve(t, srv, req)
		if res.Status/100 != 3 || res.Header.Get("Location") != "/api/v1/markets/global" ||
			!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || res.Header.Get("X-Request-Id") == "" {
			t.Errorf("GET %s: %d, Location %q, Content-Type %q: %s", target, res.Status, res.Header.Get("Location"), res.Header.Get("Content-Type"), res.Raw)
		}
	}
	// An escaped segment stays as it was sent: not escaped again.
	for target, want := range map[string]string{
		"/api/v1/./coins/bit%20coin?x=%41": "/api/v1/coins/bit%20coin?x=%41",
		"/./%2Fevil.com":                   "/%2Fevil.com",
		"//evil.com/":                      "/evil.com/",
	} {
		res := serve(t, srv, httptest.NewRequest("GET", target, nil))
		if res.Status/100 != 3 || res.Header.Get("Location") != want {
			t.Errorf("GET %s: %d, Location %q, want %q", target, res.Status, res.Header.Get("Location"), want)
		}
	}
	req := httptest.NewRequest("OPTIONS", "/", nil)
	req.URL.Path, req.RequestURI = "*", "*"
	wantError(t, serve(t, srv, req), 404, coinpulse.CodeNotFound)
	for _, p := range []string{"/", "/api/v1/markets", "/api/v1/markets/", "/user/api/"} {
		if !isCleanPath(p) {
			t.Errorf("isCleanPath(%q) = false", p)
		}
	}
	// HEAD is served wherever GET is.
	req = httptest.NewRequest("HEAD", "/healthz", nil)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("HEAD /healthz = %d", rec.Code)
	}
}

func TestAuthentication(t *testing.T) {
	srv := testServer(t)
	u := newUser(t, coinpulse.TierPro, nil)
	key, rec := newKey(t, u, coinpulse.ModeLive, rw, nil)
	testKey, _ := newKey(t, u, coinpulse.ModeTest, rw, nil)
	other, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	unknown, _ := coinpulse.GenerateKey(coinpulse.ModeLive)
	typo := key[:20] + string(rune(key[20]^1)) + key[21:]
	past := time.Now().Add(-time.Hour)
	expiredKey, _ := newKey(t, u, coinpulse.ModeLive, rw, &past)

	ok := func(res *response) {
		t.Helper()
		if res.Status != 200 {
			t.Fatalf("status %d: %s", res.Status, res.Raw)
		}
	}
	ok(do(t, srv, "GET", "/api/v1/markets/global", key))
	ok(do(t, srv, "GET", "/api/v1/markets/global", testKey))
	ok(do(t, srv, "GET", "/api/v1/markets/global", "", "X-API-Key", key))
	ok(do(t, srv, "GET", "/api/v1/markets/global", key, "X-API-Key", key))
	twice := func(name string, values ...string) *response {
		req := httptest.NewRequest("GET", "/api/v1/markets/global", nil)
		for _, v := range values {
			req.Header.Add(name, v)
		}
		return serve(t, srv, req)
	}
	for name, res := range map[string]*response{
		"bearer twice":      twice("Authorization", "Bearer "+key, "Bearer "+other),
		"bearer same twice": twice("Authorization", "Bearer "+key, "Bearer "+key),
		"X-API-Key twice":   twice("X-API-Key", other, key),
		"missing":           do(t, srv, "GET", "/api/v1/markets/global", ""),
		"malformed":         do(t, srv, "GET", "/api/v1/markets/global", "sk_live_short"),
		"typo":              do(t, srv, "GET", "/api/v1/markets/global", typo),
		"unknown":           do(t, srv, "GET", "/api/v1/markets/global", unknown),
		"expired key":       do(t, srv, "GET", "/api/v1/markets/global", expiredKey),
		"two different":     do(t, srv, "GET", "/api/v1/markets/global", key, "X-API-Key", other),
		"basic auth scheme": do(t, srv, "GET", "/api/v1/markets/global", "", "Authorization", "Basic Zm9vOmJhcg=="),
	} {
		t.Run(name, func(t *testing.T) {
			wantError(t, res, 401, coinpulse.CodeInvalidAPIKey)
			if strings.Contains(string(res.Raw), key[8:]) {
				t.Error("the error echoes the key")
			}
			if got := res.Header.Get("WWW-Authenticate"); got != `Bearer realm="coinpulse"` {
				t.Errorf("WWW-Authenticate %q", got)
			}
		})
	}

	// A revocation (here through the store, as the CLI or another node
	// would) fails the key once the epoch poll has run.
	if err := shared.store.RevokeKey(context.Background(), u.ID, rec.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := do(t, srv, "GET", "/api/v1/markets/global", key)
		if res.Status == 401 {
			wantError(t, res, 401, coinpulse.CodeInvalidAPIKey)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("revoked key still accepted after 5 s: %d", res.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ok(do(t, srv, "GET", "/api/v1/markets/global", other))
}

func TestTiersAndExpiry(t *testing.T) {
	srv := testServer(t)
	free, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeLive, rw, nil)
	for _, path := range []string{"/api/v1/markets", "/api/v1/markets/search?q=bit", "/api/v1/markets/global", "/api/v1/coins/bitcoin", "/v1/markets/bitcoin"} {
		if res := do(t, srv, "GET", path, free); res.Status != 200 {
			t.Errorf("free tier GET %s = %d, want 200 (basic endpoint)", path, res.Status)
		}
	}
	for _, path := range []string{"/api/v1/markets/top-movers", "/api/v1/coins/bitcoin/history", "/v1/markets/bitcoin/history"} {
		res := do(t, srv, "GET", path, free)
		wantError(t, res, 403, coinpulse.CodePermissionDenied)
		if !strings.Contains(res.Error.Message, "/user/api") || !strings.Contains(res.Error.Message, "premium") {
			t.Errorf("free tier message does not prompt an upgrade at /user/api: %q", res.Error.Message)
		}
	}

	past := time.Now().Add(-time.Minute)
	expired, _ := newKey(t, newUser(t, coinpulse.TierPremium, &past), coinpulse.ModeLive, rw, nil)
	res := do(t, srv, "GET", "/api/v1/markets", expired)
	wantError(t, res, 403, coinpulse.CodeExpiredSubscription)
	future := time.Now().Add(time.Hour)
	current, _ := newKey(t, newUser(t, coinpulse.TierPremium, &future), coinpulse.ModeLive, rw, nil)
	if res := do(t, srv, "GET", "/api/v1/markets/top-movers", current); res.Status != 200 {
		t.Errorf("premium before expiry: %d %s", res.Status, res.Raw)
	}

	readOnly, _ := newKey(t, newUser(t, coinpulse.TierPro, nil), coinpulse.ModeLive, coinpulse.Permissions{Read: true}, nil)
	if res := do(t, srv, "GET", "/api/v1/markets", readOnly); res.Status != 200 {
		t.Errorf("read-only key on a read endpoint: %d", res.Status)
	}
	writeOnly, _ := newKey(t, newUser(t, coinpulse.TierPro, nil), coinpulse.ModeLive, coinpulse.Permissions{Write: true}, nil)
	wantError(t, do(t, srv, "GET", "/api/v1/markets", writeOnly), 403, coinpulse.CodePermissionDenied)
	// /usage answers a key of either permission: a backend holding a
	// write-only key can read its quota.
	for name, key := range map[string]string{"write-only": writeOnly, "read-only": readOnly} {
		if res := do(t, srv, "GET", "/api/v1/usage", key); res.Status != 200 {
			t.Errorf("%s key on /usage: %d %s", name, res.Status, res.Raw)
		}
	}
}

func TestValidation(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	for _, tc := range []struct{ path, field string }{
		{"/api/v1/markets?per_page=0", "per_page"},
		{"/api/v1/markets?per_page=251", "per_page"},
		{"/api/v1/markets?per_page=abc", "per_page"},
		{"/api/v1/markets?page=0", "page"},
		{"/api/v1/markets?page=-1", "page"},
		{"/api/v1/markets?page=99999999999999999999", "page"},
		{"/api/v1/markets?page=%2B1", "page"},
		{"/api/v1/markets?per_page=%201", "per_page"},
		{"/api/v1/markets?page=01", "page"},
		{"/api/v1/markets?order=name", "order"},
		{"/api/v1/markets?perpage=10", "perpage"},
		{"/api/v1/markets?page=1&page=2", "page"},
		{"/api/v1/markets?snapshot=nope", "snapshot"},
		{"/api/v1/markets?snapshot=", "snapshot"},
		{"/api/v1/markets/search", "q"},
		{"/api/v1/markets/search?q=%20b%20", "q"},
		{"/api/v1/markets/search?q=" + strings.Repeat("x", 101), "q"},
		{"/api/v1/markets/search?q=btc&limit=0", "limit"},
		{"/api/v1/markets/search?q=btc&limit=101", "limit"},
		{"/api/v1/markets/top-movers?type=all", "type"},
		{"/api/v1/markets/top-movers?limit=101", "limit"},
		{"/api/v1/markets/global?x=1", "x"},
		{"/api/v1/coins/bitcoin?x=1", "x"},
		{"/api/v1/coins/bitcoin/history?days=2", "days"},
		{"/api/v1/coins/bitcoin/history?interval=minutely", "interval"},
		{"/api/v1/coins/bitcoin/history?days=365&interval=hourly", "interval"},
		{"/api/v1/coins/bitcoin/history?days=max&interval=hourly", "interval"},
		// An audit's: not UTF-8 once unescaped, no name.
		{"/api/v1/markets/search?q=%ff%ff", "query"},
		{"/api/v1/markets?%ff=1", "query"},
		{"/api/v1/markets?=1", "query"},
		{"/api/v1/markets?%20=1", "query"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res := do(t, srv, "GET", tc.path, key)
			wantError(t, res, 422, coinpulse.CodeValidation)
			if len(res.Error.Details) != 1 || res.Error.Details[0].Field != tc.field || !strings.Contains(res.Error.Message, tc.field) {
				t.Errorf("details %+v, message %q; want field %s named", res.Error.Details, res.Error.Message, tc.field)
			}
		})
	}
	// A q given but of the wrong length says so, not that it is required.
	for q, want := range map[string]string{"": "is required", "%20b%20": "it has 1", strings.Repeat("x", 101): "it has 101"} {
		target := "/api/v1/markets/search?q=" + q
		if q == "" {
			target = "/api/v1/markets/search"
		}
		wantField(t, do(t, srv, "GET", target, key), "q", want)
	}
}

func TestMarketOrders(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	snap := shared.engine.Current().ID
	for _, tc := range []struct {
		order string
		less  func(a, b coinpulse.MarketItem) bool // a must not come after b
	}{
		{"market_cap_desc", func(a, b coinpulse.MarketItem) bool { return *a.MarketCap >= *b.MarketCap }},
		{"market_cap_asc", func(a, b coinpulse.MarketItem) bool { return *a.MarketCap <= *b.MarketCap }},
		{"volume_desc", func(a, b coinpulse.MarketItem) bool { return *a.TotalVolume >= *b.TotalVolume }},
		{"price_desc", func(a, b coinpulse.MarketItem) bool { return a.CurrentPrice >= b.CurrentPrice }},
	} {
		items := decode[[]coinpulse.MarketItem](t, do(t, srv, "GET", "/api/v1/markets?per_page=250&order="+tc.order+"&snapshot="+snap, key))
		if len(items) != 250 {
			t.Fatalf("%s: %d items", tc.order, len(items))
		}
		for i := 1; i < len(items); i++ {
			if !tc.less(items[i-1], items[i]) {
				t.Fatalf("%s: %s before %s", tc.order, items[i-1].ID, items[i].ID)
			}
		}
	}
	res := do(t, srv, "GET", "/api/v1/markets?page=1000&per_page=250", key)
	if items := decode[[]coinpulse.MarketItem](t, res); len(items) != 0 || res.Meta["total"] != 1000.0 || res.Meta["total_pages"] != 4.0 {
		t.Errorf("page past the end: %d items, meta %v", len(items), res.Meta)
	}
	if string(res.Data) != "[]" {
		t.Errorf("page past the end data %s, want []", res.Data)
	}
}

// ids selects coins: in the order asked for, paged and counted as the
// whole listing; an unknown id is named in meta, not an error; the
// answer is one whatever the spelling of the same set.
func TestMarketsIDs(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	snap := shared.engine.Current().ID
	get := func(query string) *response {
		return do(t, srv, "GET", "/api/v1/markets?snapshot="+snap+"&"+query, key)
	}
	ids := func(res *response) []string {
		var out []string
		for _, it := range decode[[]coinpulse.MarketItem](t, res) {
			out = append(out, it.ID)
		}
		return out
	}
	res := get("ids=solana,%20ethereum%20,nope,bitcoin,ethereum,sim-zzzz-none")
	if got, want := ids(res), []string{"bitcoin", "ethereum", "solana"}; !slices.Equal(got, want) {
		t.Errorf("ids: %v, want %v (by market cap)", got, want)
	}
	if res.Meta["total"] != 3.0 || res.Meta["total_pages"] != 1.0 || fmt.Sprint(res.Meta["unknown_ids"]) != "[nope sim-zzzz-none]" {
		t.Errorf("meta %v", res.Meta)
	}
	// Each coin as the whole listing shows it.
	all := decode[[]coinpulse.MarketItem](t, get("per_page=10"))
	if one := decode[[]coinpulse.MarketItem](t, get("ids=bitcoin")); len(one) != 1 || !reflect.DeepEqual(one[0], all[0]) {
		t.Errorf("ids=bitcoin: %+v, want %+v", one, all[0])
	}
	if got := ids(get("ids=bitcoin,ethereum,solana&order=price_desc")); !slices.Equal(got, []string{"bitcoin", "ethereum", "solana"}) {
		t.Errorf("price_desc: %v", got)
	}
	asc := get("ids=bitcoin,ethereum,solana&order=market_cap_asc&per_page=2&page=2")
	if got := ids(asc); !slices.Equal(got, []string{"bitcoin"}) || asc.Meta["total"] != 3.0 || asc.Meta["total_pages"] != 2.0 || asc.Meta["unknown_ids"] != nil {
		t.Errorf("market_cap_asc, page 2 of 2: %v, meta %v", got, asc.Meta)
	}
	if past := get("ids=bitcoin&page=2"); string(past.Data) != "[]" || past.Meta["total"] != 1.0 {
		t.Errorf("past the end: %s %v", past.Data, past.Meta)
	}
	if none := get("ids=nope"); string(none.Data) != "[]" || none.Meta["total"] != 0.0 || none.Meta["total_pages"] != 0.0 {
		t.Errorf("no known id: %s %v", none.Data, none.Meta)
	}
	// The same answer, spelt otherwise: the same ETag; another set, or
	// other unknown ids (which meta names), another.
	a, b := get("ids=bitcoin,ethereum,nope"), get("ids=ethereum,%20bitcoin,bitcoin,nope")
	if a.Header.Get("ETag") == "" || a.Header.Get("ETag") != b.Header.Get("ETag") || string(a.Data) != string(b.Data) {
		t.Errorf("ETags %q and %q", a.Header.Get("ETag"), b.Header.Get("ETag"))
	}
	for _, other := range []string{"ids=bitcoin,solana,nope", "ids=bitcoin,ethereum", "ids=bitcoin,ethereum,typo"} {
		if c := get(other); c.Header.Get("ETag") == a.Header.Get("ETag") {
			t.Errorf("%s: the ETag of ids=bitcoin,ethereum,nope, %q", other, c.Header.Get("ETag"))
		}
	}
	many := make([]string, 251)
	for i := range many {
		many[i] = fmt.Sprintf("coin-%d", i)
	}
	for query, part := range map[string]string{
		"ids=":                                             "an empty id",
		"ids=bitcoin,,ethereum":                            "an empty id",
		"ids=bitcoin,%20":                                  "an empty id",
		"ids=" + strings.Repeat("a", 129):                  "an id of 129 characters",
		"ids=" + strings.Repeat("é", 129):                  "an id of 129 characters",
		"ids=" + strings.Join(many, ","):                   "more than 250 ids",
		"ids=" + strings.Join(many[:250], ","):             "",
		"ids=bitcoin&ids=ethereum":                         "given more than once",
		"ids=" + strings.Join(many[:250], ",") + ",coin-0": "",
	} {
		res := get(query)
		if part == "" {
			if res.Status != 200 || res.Meta["total"] != 0.0 || len(res.Meta["unknown_ids"].([]any)) != 250 {
				t.Errorf("250 unknown ids: %d %v", res.Status, res.Meta["total"])
			}
			continue
		}
		wantField(t, res, "ids", part)
	}
	// 128 characters of two bytes each: an id, unknown.
	if res := get("ids=" + strings.Repeat("é", 128)); res.Status != 200 || len(res.Meta["unknown_ids"].([]any)) != 1 {
		t.Errorf("an id of 128 two-byte characters: %d %v", res.Status, res.Meta)
	}
}

// Paging with the snapshot a first page returned never skips or repeats a
// coin, though the engine refreshes every 200 ms meanwhile.
func TestSnapshotPaging(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	first := do(t, srv, "GET", "/api/v1/markets?per_page=100&order=volume_desc", key)
	snap, _ := first.Meta["snapshot"].(string)
	seen := map[string]bool{}
	for _, c := range decode[[]coinpulse.MarketItem](t, first) {
		seen[c.ID] = true
	}
	time.Sleep(500 * time.Millisecond) // let the engine publish newer snapshots
	if shared.engine.Current().ID == snap {
		t.Fatal("the engine did not refresh")
	}
	for page := 2; page <= 10; page++ {
		res := do(t, srv, "GET", "/api/v1/markets?per_page=100&order=volume_desc&page="+itoa(page)+"&snapshot="+snap, key)
		if res.Meta["snapshot"] != snap {
			t.Fatalf("page %d served snapshot %v, want %s", page, res.Meta["snapshot"], snap)
		}
		for _, c := range decode[[]coinpulse.MarketItem](t, res) {
			if seen[c.ID] {
				t.Fatalf("coin %s repeated on page %d", c.ID, page)
			}
			seen[c.ID] = true
		}
	}
	if len(seen) != 1000 {
		t.Errorf("paged through %d coins, want 1000", len(seen))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestConditionalGet(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	snap := shared.engine.Current().ID
	for _, path := range []string{"/api/v1/markets?snapshot=" + snap, "/api/v1/coins/bitcoin", "/api/v1/markets/global"} {
		res := do(t, srv, "GET", path, key)
		etag := res.Header.Get("ETag")
		if etag == "" {
			t.Fatalf("%s: no ETag", path)
		}
		again := do(t, srv, "GET", path, key, "If-None-Match", etag)
		// Unpinned paths may cross a refresh between the two requests.
		if again.Status != http.StatusNotModified && strings.Contains(path, "snapshot=") {
			t.Errorf("%s with If-None-Match: %d, want 304", path, again.Status)
		}
		if again.Status == http.StatusNotModified && again.Header.Get("ETag") != etag {
			t.Errorf("304 carries ETag %q, want %q", again.Header.Get("ETag"), etag)
		}
	}
	res := do(t, srv, "GET", "/api/v1/markets?snapshot="+snap, key, "If-None-Match", `"other"`)
	if res.Status != 200 {
		t.Errorf("non-matching If-None-Match: %d", res.Status)
	}
	// Weak, as meta differs from answer to answer; matched with or
	// without W/, among others.
	etag := res.Header.Get("ETag")
	if !strings.HasPrefix(etag, `W/"`) {
		t.Errorf("ETag %s, want a weak one", etag)
	}
	for _, inm := range []string{etag, strings.TrimPrefix(etag, "W/"), `"a", ` + etag + `, "b"`, "*"} {
		if res := do(t, srv, "GET", "/api/v1/markets?snapshot="+snap, key, "If-None-Match", inm); res.Status != http.StatusNotModified {
			t.Errorf("If-None-Match %s: %d, want 304", inm, res.Status)
		}
	}
}

func TestSearch(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	for _, tc := range []struct{ q, first string }{
		{"btc", "bitcoin"},
		{"BTC", "bitcoin"},
		{"  Bitcoin ", "bitcoin"},
		{"ethereum", "ethereum"},
		{"eth", "ethereum"},
	} {
		res := do(t, srv, "GET", "/api/v1/markets/search?q="+strings.ReplaceAll(tc.q, " ", "%20"), key)
		items := decode[[]coinpulse.MarketItem](t, res)
		if len(items) == 0 || items[0].ID != tc.first {
			t.Errorf("search %q: first %v, want %s", tc.q, items, tc.first)
		}
		if res.Meta["query"] != strings.TrimSpace(tc.q) {
			t.Errorf("meta.query %v", res.Meta["query"])
		}
	}
	res := do(t, srv, "GET", "/api/v1/markets/search?q=co&limit=3", key)
	items := decode[[]coinpulse.MarketItem](t, res)
	if len(items) != 3 {
		t.Errorf("limit=3 gave %d", len(items))
	}
	// meta.total counts every match, beyond the limit.
	res = do(t, srv, "GET", "/api/v1/markets/search?q=eth&limit=2", key)
	all := decode[[]coinpulse.MarketItem](t, do(t, srv, "GET", "/api/v1/markets/search?q=eth&limit=100", key))
	if total, _ := res.Meta["total"].(float64); len(all) <= 2 || len(all) == 100 || int(total) != len(all) {
		t.Errorf("q=eth&limit=2: meta.total %v, %d matches with limit=100", res.Meta["total"], len(all))
	}
	if items := decode[[]coinpulse.MarketItem](t, do(t, srv, "GET", "/api/v1/markets/search?q=zzzzqqq", key)); len(items) != 0 {
		t.Errorf("nonsense query matched %v", items)
	}
}

func TestCoinDetail(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	d := decode[coinpulse.CoinDetail](t, do(t, srv, "GET", "/api/v1/coins/BTC", key))
	if d.ID != "bitcoin" || d.ResolvedBy != "symbol" || d.MarketCapRank == nil || *d.MarketCapRank != 1 {
		t.Errorf("BTC resolved to %s by %s rank %v", d.ID, d.ResolvedBy, d.MarketCapRank)
	}
	if d.High24h == nil || *d.High24h < d.CurrentPrice || d.Low24h == nil || *d.Low24h > d.CurrentPrice || d.ATH < d.CurrentPrice || d.ATL > d.CurrentPrice {
		t.Errorf("bitcoin extremes inconsistent: %+v", d)
	}
	if d.PriceChangePercentage7d == nil || d.PriceChangePercentage30d == nil || d.PriceChangePercentage1y == nil || d.MaxSupply == nil || d.FullyDilutedValuation == nil {
		t.Errorf("bitcoin detail lacks figures: %+v", d)
	}
	// A shared symbol says so.
	ton := decode[coinpulse.CoinDetail](t, do(t, srv, "GET", "/api/v1/coins/ton", key))
	if ton.ResolvedBy != "symbol" || len(ton.Alternatives) == 0 {
		t.Errorf("ton: resolved_by %s, alternatives %v", ton.ResolvedBy, ton.Alternatives)
	}
	for _, a := range ton.Alternatives {
		if *a.MarketCapRank <= *ton.MarketCapRank {
			t.Errorf("alternative %s ranks above the chosen %s", a.ID, ton.ID)
		}
	}
	byID := decode[coinpulse.CoinDetail](t, do(t, srv, "GET", "/api/v1/coins/"+ton.Alternatives[0].ID, key))
	if byID.ResolvedBy != "id" || !slices.ContainsFunc(byID.Alternatives, func(r coinpulse.CoinRef) bool { return r.ID == ton.ID }) {
		t.Errorf("by id: %s %v", byID.ResolvedBy, byID.Alternatives)
	}
	// Unknown values are null, not 0.
	res := do(t, srv, "GET", "/api/v1/coins/ethereum", key)
	if !strings.Contains(string(res.Data), `"max_supply":null`) {
		t.Errorf("ethereum max_supply is not null: %s", res.Data)
	}
	wantError(t, do(t, srv, "GET", "/api/v1/coins/no-such-coin-xyz", key), 404, coinpulse.CodeNotFound)
	wantError(t, do(t, srv, "GET", "/api/v1/coins/"+strings.Repeat("x", 500), key), 404, coinpulse.CodeNotFound)
}

// A real coin's ticker or id finds the real coin, with no synthetic coin
// beside it (an audit: /coins/zec listed sim-zecorxa as an alternative, an
// alert on "zec" was a 422 naming it, and /coins/NEM was sim-nemula,
// whose symbol was nem).
func TestRealTickersFindRealCoins(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	for _, tc := range []struct{ path, id, by string }{
		{"zec", "zcash", "symbol"},
		{"ZEC", "zcash", "symbol"},
		{"zen", "zencash", "symbol"},
		{"mon", "monad", "symbol"},
		{"nem", "nem", "id"},
		{"NEM", "nem", "id"}, // no coin's symbol is nem: an id in another case
	} {
		d := decode[coinpulse.CoinDetail](t, do(t, srv, "GET", "/api/v1/coins/"+tc.path, key))
		if d.ID != tc.id || d.ResolvedBy != tc.by || len(d.Alternatives) != 0 {
			t.Errorf("/coins/%s = %s by %s, alternatives %v; want %s by %s alone", tc.path, d.ID, d.ResolvedBy, d.Alternatives, tc.id, tc.by)
		}
	}
	// No synthetic coin has a real coin's symbol or id as its symbol.
	snap := shared.engine.Current()
	realNames := map[string]string{}
	for _, c := range snap.Coins() {
		if !strings.HasPrefix(c.ID, "sim-") {
			realNames[c.Symbol], realNames[c.ID] = c.ID, c.ID
		}
	}
	for _, c := range snap.Coins() {
		if id, ok := realNames[c.Symbol]; ok && strings.HasPrefix(c.ID, "sim-") {
			t.Errorf("%s has the symbol %s, a symbol or the id of %s", c.ID, c.Symbol, id)
		}
	}

	env := newAlertEnv(t, alertEnvOptions{})
	a := env.createAlert(env.newKey(coinpulse.TierPro), `{"coin_id":"zec","target_price":1000,"condition":"above"}`)
	if a.CoinID != "zcash" || a.CoinSymbol != "zec" {
		t.Errorf("alert on zec is on %s (%s), want zcash", a.CoinID, a.CoinSymbol)
	}
}

func TestHistory(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	for _, tc := range []struct {
		query    string
		min, max int
	}{
		{"", 30, 32},
		{"?days=1", 1, 3},
		{"?days=7", 7, 9},
		{"?days=1&interval=hourly", 24, 26},
		{"?days=90&interval=hourly", 90 * 24, 90*24 + 2},
		{"?days=365", 365, 367},
		{"?days=max", 4000, 6000},
	} {
		h := decode[historyData](t, do(t, srv, "GET", "/api/v1/coins/bitcoin/history"+tc.query, key))
		if len(h.Points) < tc.min || len(h.Points) > tc.max {
			t.Errorf("%s: %d points, want %d..%d", tc.query, len(h.Points), tc.min, tc.max)
		}
		for i := 1; i < len(h.Points); i++ {
			if !h.Points[i].Timestamp.After(h.Points[i-1].Timestamp) {
				t.Fatalf("%s: points out of order at %d", tc.query, i)
			}
		}
		if h.ID != "bitcoin" || h.Symbol != "btc" {
			t.Errorf("%s: id %s symbol %s", tc.query, h.ID, h.Symbol)
		}
	}
	h := decode[map[string]any](t, do(t, srv, "GET", "/api/v1/coins/bitcoin/history?days=max", key))
	if h["days"] != "max" || h["interval"] != "daily" {
		t.Errorf("days=max echoes %v %v", h["days"], h["interval"])
	}
	wantError(t, do(t, srv, "GET", "/api/v1/coins/nope-nope/history", key), 404, coinpulse.CodeNotFound)
}

func TestGlobalAndMovers(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	res := do(t, srv, "GET", "/api/v1/markets/global", key)
	g := decode[coinpulse.GlobalStats](t, res)
	if g.ActiveCryptocurrencies != 1000 || g.TotalMarketCap <= 0 || g.BitcoinDominance == nil || *g.BitcoinDominance <= 0 || g.Markets == nil {
		t.Errorf("global %+v", g)
	}
	if res.Meta["simulated"] != true || res.Meta["feed"] != "sim" {
		t.Errorf("global meta does not label the data simulated: %v", res.Meta)
	}
	both := decode[map[string][]coinpulse.MarketItem](t, do(t, srv, "GET", "/api/v1/markets/top-movers?type=both&limit=5", key))
	if len(both["gainers"]) != 5 || len(both["losers"]) != 5 {
		t.Fatalf("movers %v", both)
	}
	for i, c := range both["gainers"] {
		if *c.PriceChangePercentage24h <= 0 || *c.TotalVolume < 50_000 || i > 0 && *c.PriceChangePercentage24h > *both["gainers"][i-1].PriceChangePercentage24h {
			t.Errorf("gainer %d %s: %v%%, volume %v", i, c.ID, *c.PriceChangePercentage24h, *c.TotalVolume)
		}
	}
	for i, c := range both["losers"] {
		if *c.PriceChangePercentage24h >= 0 || i > 0 && *c.PriceChangePercentage24h < *both["losers"][i-1].PriceChangePercentage24h {
			t.Errorf("loser %d %s: %v%%", i, c.ID, *c.PriceChangePercentage24h)
		}
	}
	only := decode[map[string]any](t, do(t, srv, "GET", "/api/v1/markets/top-movers?type=losers", key))
	if _, ok := only["gainers"]; ok || only["losers"] == nil {
		t.Errorf("type=losers gave keys %v", only)
	}
}

func TestBodyLimitAndPanics(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	req := httptest.NewRequest("GET", "/api/v1/markets/global", bytes.NewReader(make([]byte, 65<<10)))
	req.Header.Set("Authorization", "Bearer "+key)
	wantError(t, serve(t, srv, req), 413, coinpulse.CodePayloadTooLarge)

	// A panicking handler becomes SERVER_ERROR with the request id and no
	// internals.
	own := New(Config{Store: shared.store, Market: shared.engine, Log: quiet})
	own.mux.Handle("GET /api/v1/boom", own.wrap(Route{Method: "GET", Path: "/boom", Handler: func(http.ResponseWriter, *http.Request) error { panic("secret internals") }}))
	res := do(t, own, "GET", "/api/v1/boom", "", "X-Request-Id", "trace-1")
	wantError(t, res, 500, coinpulse.CodeServerError)
	if strings.Contains(string(res.Raw), "secret") || !strings.Contains(res.Error.Message, "trace-1") {
		t.Errorf("500 body %s", res.Raw)
	}
}

func TestNotReady(t *testing.T) {
	testServer(t)
	feed, _ := sim.New(1, 0)
	engine := market.New(market.Config{Feed: feed, Store: shared.store, Log: quiet})
	srv := New(Config{Store: shared.store, Market: engine, Log: quiet})
	wantError(t, do(t, srv, "GET", "/readyz", ""), 503, coinpulse.CodeUnavailable)
	key := proKey(t)
	res := do(t, srv, "GET", "/api/v1/markets", key)
	wantError(t, res, 503, coinpulse.CodeUnavailable)
	if res.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// A trade or an alert that names a coin is 503 too, not a 422 that
	// tells the client its request is wrong.
	for _, c := range []struct{ path, body string }{
		{"/api/v1/alerts", `{"coin_id":"bitcoin","target_price":1,"condition":"above"}`},
		{"/api/v1/portfolio/transactions", `{"portfolio_id":1,"coin_id":"bitcoin","type":"buy","quantity":1,"price":1}`},
		{"/api/v1/portfolio/1/holdings", `{"coin_id":"bitcoin","quantity":1,"buy_price":1}`},
	} {
		res := send(t, srv, "POST", c.path, key, c.body)
		wantError(t, res, 503, coinpulse.CodeUnavailable)
		if res.Header.Get("Retry-After") != "5" {
			t.Errorf("POST %s: Retry-After %q, want 5", c.path, res.Header.Get("Retry-After"))
		}
	}
	// A portfolio read while loading has no prices: its value and P/L are
	// null, not 0 and -100 %; a sync waits for them.
	loaded := testServer(t)
	p := newPortfolio(t, loaded, key, "Loading")
	base := fmt.Sprintf("/api/v1/portfolio/%d", p.ID)
	want[jsonHolding](t, send(t, loaded, "POST", base+"/holdings", key, `{"coin_id":"bitcoin","quantity":1,"buy_price":100}`), http.StatusCreated)
	got := want[jsonPortfolio](t, do(t, srv, "GET", base, key), http.StatusOK)
	if got.TotalValue != nil || got.ProfitLoss != nil || got.ProfitLossPercentage != nil || string(got.TotalCost) != "100" {
		t.Errorf("portfolio while loading: %+v, want null value and P/L, cost 100", got)
	}
	wantError(t, send(t, srv, "POST", base+"/sync", key, ""), 503, coinpulse.CodeUnavailable)
	// A sell names its holding by the coin's id while loading; by a
	// symbol, or a coin not held, it is a 503 to retry, not a 422.
	for _, coin := range []string{"btc", "ethereum"} {
		res := send(t, srv, "POST", "/api/v1/portfolio/transactions", key,
			fmt.Sprintf(`{"portfolio_id":%d,"coin_id":%q,"type":"sell","quantity":0.5,"price":1}`, p.ID, coin))
		wantError(t, res, 503, coinpulse.CodeUnavailable)
	}
	sold := want[jsonTrade](t, send(t, srv, "POST", "/api/v1/portfolio/transactions", key,
		fmt.Sprintf(`{"portfolio_id":%d,"coin_id":"bitcoin","type":"sell","quantity":0.5,"price":1}`, p.ID)), http.StatusCreated)
	if string(sold.Holding.Quantity) != "0.5" {
		t.Errorf("sold while loading: %+v, want 0.5 left", sold.Holding)
	}
	if res := do(t, srv, "GET", "/healthz", ""); res.Status != 200 {
		t.Errorf("healthz while loading: %d", res.Status)
	}
	if res := do(t, testServer(t), "GET", "/readyz", ""); res.Status != 200 {
		t.Errorf("readyz when loaded: %d %s", res.Status, res.Raw)
	}
}

// A client that declares a body and does not send it all gets 408
// REQUEST_TIMEOUT once the body timeout has passed, and its connection is
// closed, rather than holding the request open; a body sent in time lifts
// the deadline, so a keep-alive connection goes on serving afterwards.
func TestBodyTimeout(t *testing.T) {
	testServer(t)
	srv := New(Config{Store: shared.store, Market: shared.engine, Log: quiet, BodyTimeout: 300 * time.Millisecond})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	key := proKey(t)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second)) // the test fails rather than hangs
		return c, bufio.NewReader(c)
	}
	post := func(c net.Conn, declared int, body string) {
		fmt.Fprintf(c, "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, declared, body)
	}

	c, br := dial()
	defer c.Close()
	start := time.Now()
	post(c, 100, `{"name":"sl`) // 11 of 100 bytes, then nothing
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var env struct {
		Error struct{ Code, Message string }
	}
	if json.Unmarshal(raw, &env); res.StatusCode != http.StatusRequestTimeout || env.Error.Code != string(coinpulse.CodeRequestTimeout) {
		t.Fatalf("a stalled body: %d %s", res.StatusCode, raw)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("answered after %v, before the timeout", took)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Error("the connection stayed open after the timeout")
	}

	// In time, twice on one connection, the second after the timeout has
	// passed since the first began.
	c2, br2 := dial()
	defer c2.Close()
	for i, body := range []string{`{"name":"in time"}`, `{"name":"later"}`} {
		if i == 1 {
			time.Sleep(500 * time.Millisecond)
		}
		post(c2, len(body), body)
		res, err := http.ReadResponse(br2, nil)
		if err != nil {
			t.Fatalf("request %d on a keep-alive connection: %v", i+1, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("request %d: %d", i+1, res.StatusCode)
		}
	}
}

// With a metrics token, GET /metrics answers only a request carrying it.
func TestMetricsToken(t *testing.T) {
	const token = "0123456789abcdef-metrics"
	srv := New(Config{Store: shared.store, Market: testServer(t).market, Log: quiet, MetricsToken: token})
	for _, h := range [][]string{
		nil,
		{"Authorization", "Bearer wrong-token-wrong-token"},
		{"Authorization", "Bearer " + token[:len(token)-1]},
		{"Authorization", "Basic " + token},
		{"Authorization", token},
		{"X-API-Key", token},
	} {
		res := do(t, srv, "GET", "/metrics", "", h...)
		if res.Status != http.StatusUnauthorized || res.Error.Code != "INVALID_API_KEY" || !strings.Contains(res.Error.Message, "--metrics-token-file") ||
			res.Header.Get("WWW-Authenticate") == "" || strings.Contains(string(res.Raw), "coinpulse_") {
			t.Errorf("%v: %d %s", h, res.Status, res.Raw)
		}
	}
	for _, auth := range []string{"Bearer " + token, "bearer " + token} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Authorization", auth)
		srv.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "coinpulse_market_coins ") {
			t.Errorf("%q: %d %.200s", auth, rec.Code, rec.Body)
		}
	}
}
