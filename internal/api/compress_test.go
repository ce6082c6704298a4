package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"coinpulse/internal/feed/sim"
	"coinpulse/internal/market"
)

func TestParseAcceptEncoding(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   gzipAccept
	}{
		{[]string{"gzip"}, gzipYes},
		{[]string{"GZIP"}, gzipYes},
		{[]string{"x-gzip"}, gzipYes},
		{[]string{"gzip, deflate, br, zstd"}, gzipYes}, // browsers
		{[]string{"br;q=1.0, gzip;q=0.8, *;q=0.1"}, gzipYes},
		{[]string{"deflate", "gzip"}, gzipYes}, // two fields
		{[]string{"gzip;q=0.5"}, gzipYes},      // identity, not listed, is the least preferred
		{[]string{"gzip ; q=0.5 "}, gzipYes},
		{[]string{"gzip;Q=1"}, gzipYes},
		{[]string{"*"}, gzipYes},
		{[]string{"*;q=0, gzip"}, gzipOnly},        // identity refused by *
		{[]string{"gzip, identity;q=0"}, gzipOnly}, // refused by name
		{[]string{"*;q=0, identity, gzip"}, gzipYes},
		{[]string{"gzip;q=0"}, gzipNo},
		{[]string{"gzip;q=0.000"}, gzipNo},
		{[]string{"gzip;q=0, *"}, gzipNo}, // named beats *
		{[]string{"x-gzip;q=0"}, gzipNo},
		{[]string{""}, gzipNo}, // no coding wanted
		{[]string{"identity"}, gzipNo},
		{[]string{"br, deflate"}, gzipNo},
		{[]string{"deflate;q=0.5, identity;q=0"}, gzipNo}, // nothing acceptable: identity anyway
		{[]string{"identity;q=1, gzip;q=0.5"}, gzipNo},    // identity preferred
		{[]string{"*;q=0.5, gzip;q=0.3"}, gzipNo},
		{[]string{"gzip;q=0.5, identity;q=0.5"}, gzipYes},
		{[]string{"gzips"}, gzipNo},
		{[]string{"gzip;q=2"}, gzipNo}, // malformed weights: the element is ignored
		{[]string{"gzip;q=1.5"}, gzipNo},
		{[]string{"gzip;q=0.1234"}, gzipNo},
		{[]string{"gzip;q=.5"}, gzipNo},
		{[]string{"gzip;q="}, gzipNo},
		{[]string{"gzip;q=abc, *"}, gzipYes},
		{[]string{"gzip;q=1."}, gzipYes},
		{[]string{"gzip;level=1"}, gzipYes}, // other parameters are ignored
	} {
		if got := parseAcceptEncoding(tc.values); got != tc.want {
			t.Errorf("Accept-Encoding %q: %d, want %d", tc.values, got, tc.want)
		}
	}
}

// gzipClient serves srv's handler over HTTP (a real server) and returns its
// base URL and a client that sends Accept-Encoding as each request has it
// and hands the body over as it comes, still encoded.
func gzipClient(t *testing.T, srv *Server) (string, *http.Client) {
	t.Helper()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL, &http.Client{Transport: &http.Transport{DisableCompression: true}}
}

// fetch sends a request, headers alternating names and values, and
// returns the answer and its raw body.
func fetch(t *testing.T, c *http.Client, method, url string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// gunzip decodes b, which must be one gzip member and nothing more: a
// client that reads one member only must get the whole answer.
func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	src := bytes.NewReader(b)
	zr, err := gzip.NewReader(src)
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	zr.Multistream(false)
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gzip body: %v", err)
	}
	if src.Len() != 0 {
		t.Fatalf("%d bytes after the gzip member", src.Len())
	}
	return out
}

// wantGzip checks that res is a gzip-encoded answer of raw bytes, and
// returns them decoded.
func wantGzip(t *testing.T, what string, res *http.Response, raw []byte) []byte {
	t.Helper()
	if ce := res.Header.Values("Content-Encoding"); !slices.Equal(ce, []string{"gzip"}) {
		t.Fatalf("%s: Content-Encoding %q, want gzip", what, ce)
	}
	if v := res.Header.Values("Vary"); !slices.Equal(v, []string{"Accept-Encoding"}) {
		t.Errorf("%s: Vary %q, want Accept-Encoding", what, v)
	}
	// net/http sets no Content-Type of its own on an encoded answer.
	if ct := res.Header.Get("Content-Type"); ct == "" || strings.Contains(ct, "gzip") {
		t.Errorf("%s: Content-Type %q, want the decoded body's", what, ct)
	}
	if cl := res.Header.Get("Content-Length"); cl != strconv.Itoa(len(raw)) {
		t.Errorf("%s: Content-Length %q, want the %d bytes sent", what, cl, len(raw))
	}
	return gunzip(t, raw)
}

// wantIdentity checks that res is not encoded and adds no header of
// compression.
func wantIdentity(t *testing.T, what string, res *http.Response) {
	t.Helper()
	if ce, v := res.Header.Values("Content-Encoding"), res.Header.Values("Vary"); ce != nil || v != nil {
		t.Errorf("%s: Content-Encoding %q, Vary %q; want neither", what, ce, v)
	}
}

// fixedMarket is a market engine over the shared store that never
// refreshes: its snapshot, the answers it keeps, and the prices in
// portfolios stay the same for as long as a test or benchmark needs them
// (the shared engine refreshes every 200 ms, and a slow run, under -race,
// can take longer than that between two requests, or than the 5 minutes
// a replaced snapshot is kept).
var fixedMarket struct {
	once   sync.Once
	engine *market.Engine
	err    error
}

func fixedEngine(tb testing.TB) *market.Engine {
	tb.Helper()
	testServer(&testing.T{})
	fixedMarket.once.Do(func() {
		feed, err := sim.New(1, 0)
		if err != nil {
			fixedMarket.err = err
			return
		}
		fixedMarket.engine = market.New(market.Config{Feed: feed, Store: shared.store, Log: quiet, Refresh: time.Hour, MinMoverVolume: 50_000})
		fixedMarket.err = fixedMarket.engine.Load(context.Background())
	})
	if fixedMarket.err != nil {
		tb.Fatalf("fixed market: %v", fixedMarket.err)
	}
	return fixedMarket.engine
}

// fixedServer is a server over fixedEngine whose clock stands still, so
// that two answers to one request id are the same bytes.
func fixedServer(t *testing.T) *Server {
	t.Helper()
	engine := fixedEngine(t)
	now := time.Now()
	return New(Config{Store: shared.store, Market: engine, Clock: func() time.Time { return now }, Log: quiet})
}

// Large answers go out gzip-encoded to a request that takes gzip, and
// decode to exactly the bytes a request without Accept-Encoding gets:
// memoised market answers, a search (never kept), the embedded documents,
// and the answers compressed as they are sent (a portfolio). The ETag is
// the same with and without gzip.
func TestGzipAnswers(t *testing.T) {
	srv := fixedServer(t)
	doc := loadSpec(t)
	key := proKey(t)
	long := strings.Repeat("A long description, ", 50)[:1000]
	p := want[jsonPortfolio](t, send(t, srv, "POST", "/api/v1/portfolio", key, `{"name":"Gzip","description":"`+long+`"}`), http.StatusCreated)
	base, c := gzipClient(t, srv)
	for _, tc := range []struct{ route, target string }{
		{"/coins/{idOrSymbol}/history", "/api/v1/coins/bitcoin/history?days=max"},
		{"/markets", "/api/v1/markets?per_page=250"},
		{"/markets", "/api/v1/markets?per_page=250&order=volume_desc&snapshot=" + srv.market.Current().ID},
		{"/markets/search", "/api/v1/markets/search?q=co&limit=100"},
		{"/markets/top-movers", "/api/v1/markets/top-movers?type=both&limit=20"},
		{"/portfolio/{id}", fmt.Sprintf("/v1/portfolio/%d", p.ID)},
		{"", "/api/v1/openapi.json"},
		{"", "/docs"},
		{"", "/docs/docs.js"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			headers := []string{"Authorization", "Bearer " + key, "X-Request-Id", "gzip-test"}
			plain, identity := fetch(t, c, "GET", base+tc.target, headers...)
			if plain.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", plain.StatusCode, identity)
			}
			wantIdentity(t, "without Accept-Encoding", plain)
			for i := range 2 { // the second one from the memo
				res, raw := fetch(t, c, "GET", base+tc.target, append(headers, "Accept-Encoding", "gzip")...)
				d := wantGzip(t, "with Accept-Encoding: gzip", res, raw)
				if len(raw) >= len(identity) {
					t.Errorf("gzip: %d bytes, identity %d", len(raw), len(identity))
				}
				if !bytes.Equal(d, identity) {
					t.Fatalf("gzip answer %d decodes to %d bytes unlike the %d of identity:\n%s\n%s", i+1, len(d), len(identity), truncate(string(d), 300), truncate(string(identity), 300))
				}
				if res.Header.Get("ETag") != plain.Header.Get("ETag") {
					t.Errorf("ETag %q without gzip, %q with: the tag is the same whatever the coding", plain.Header.Get("ETag"), res.Header.Get("ETag"))
				}
				if tc.route != "" {
					checkResponse(t, doc, "GET", tc.route, decodeResponse(t, res, d))
				}
			}
		})
	}
}

// decodeResponse reads an envelope from a decoded body.
func decodeResponse(t *testing.T, res *http.Response, body []byte) *response {
	t.Helper()
	out := &response{Status: res.StatusCode, Header: res.Header, Raw: body}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	return out
}

// Answers go out as they are, with no header added, when the request does
// not take gzip, or when they are small, a HEAD's, or a 304; gzip when
// the request refuses identity, whatever their size.
func TestGzipNotTaken(t *testing.T) {
	srv := fixedServer(t)
	key := proKey(t)
	base, c := gzipClient(t, srv)
	snap := srv.market.Current().ID
	large := base + "/api/v1/markets?per_page=250&snapshot=" + snap
	auth := []string{"Authorization", "Bearer " + key, "X-Request-Id", "gzip-test"}
	_, identity := fetch(t, c, "GET", large, auth...)
	for _, ae := range []string{"gzip;q=0", "identity", "br, deflate", "identity;q=1, gzip;q=0.5", "", "gzip;q=2"} {
		res, raw := fetch(t, c, "GET", large, append(auth, "Accept-Encoding", ae)...)
		wantIdentity(t, "Accept-Encoding "+ae, res)
		if !bytes.Equal(raw, identity) {
			t.Errorf("Accept-Encoding %q: %d bytes, want identity's %d", ae, len(raw), len(identity))
		}
	}
	for _, ae := range []string{"*", "x-gzip", "deflate, gzip;q=0.1", "*;q=0, gzip"} {
		res, raw := fetch(t, c, "GET", large, append(auth, "Accept-Encoding", ae)...)
		if d := wantGzip(t, "Accept-Encoding "+ae, res, raw); !bytes.Equal(d, identity) {
			t.Errorf("Accept-Encoding %q: decodes to %d bytes, want identity's %d", ae, len(d), len(identity))
		}
	}

	// Small: below gzipMin, the answer, the hot path's, is as it is
	// without Accept-Encoding, header for header.
	global := base + "/api/v1/markets/global"
	plain, small := fetch(t, c, "GET", global, auth...)
	if len(small) >= gzipMin {
		t.Fatalf("/markets/global is %d bytes: not small", len(small))
	}
	res, raw := fetch(t, c, "GET", global, append(auth, "Accept-Encoding", "gzip, deflate, br")...)
	wantIdentity(t, "small", res)
	if !bytes.Equal(raw, small) && res.Header.Get("ETag") == plain.Header.Get("ETag") {
		t.Errorf("small answer with Accept-Encoding: %s, want %s", raw, small)
	}
	if got, want := slices.Sorted(maps.Keys(res.Header)), slices.Sorted(maps.Keys(plain.Header)); !slices.Equal(got, want) {
		t.Errorf("small answer with Accept-Encoding has headers %q, without %q", got, want)
	}
	// Unless the request refuses identity (RFC 9110 §12.5.3).
	res, raw = fetch(t, c, "GET", global, append(auth, "Accept-Encoding", "gzip, identity;q=0")...)
	if d := wantGzip(t, "identity;q=0", res, raw); !bytes.HasPrefix(d, []byte(`{"success":true,`)) {
		t.Errorf("identity;q=0: decodes to %s", d)
	}

	// HEAD: the identity answer's headers, nothing encoded.
	res, raw = fetch(t, c, "HEAD", large, append(auth, "Accept-Encoding", "gzip")...)
	wantIdentity(t, "HEAD", res)
	if res.StatusCode != http.StatusOK || len(raw) != 0 || res.Header.Get("Content-Length") != strconv.Itoa(len(identity)) {
		t.Errorf("HEAD: %d, Content-Length %q, %d bytes; want 200, %d, none", res.StatusCode, res.Header.Get("Content-Length"), len(raw), len(identity))
	}
}

// ETags are weak and shared by both codings: If-None-Match with the tag
// of either answer gets a 304 with or without gzip; a 304 is never
// encoded, and carries the Vary the 200 would have (RFC 9110 §15.4.5).
// The requests are metered with their status.
func TestGzipConditional(t *testing.T) {
	srv := fixedServer(t)
	key := proKey(t)
	base, c := gzipClient(t, srv)
	auth := []string{"Authorization", "Bearer " + key}
	gz := append(slices.Clip(auth), "Accept-Encoding", "gzip")
	target := base + "/api/v1/markets?per_page=250&snapshot=" + srv.market.Current().ID
	plain, _ := fetch(t, c, "GET", target, auth...)
	res, raw := fetch(t, c, "GET", target, gz...)
	wantGzip(t, "gzip", res, raw)
	etag := plain.Header.Get("ETag")
	if !strings.HasPrefix(etag, `W/"`) || res.Header.Get("ETag") != etag {
		t.Fatalf("ETag %q without gzip, %q with; want one weak tag for both (RFC 9110 §8.8.1)", etag, res.Header.Get("ETag"))
	}
	for _, tc := range []struct {
		name    string
		headers []string
		vary    bool
	}{
		{"identity", auth, false},
		{"gzip", gz, true},
		{"gzip;q=0", append(slices.Clip(auth), "Accept-Encoding", "gzip;q=0"), false},
	} {
		for _, inm := range []string{etag, strings.TrimPrefix(etag, "W/")} {
			res, raw := fetch(t, c, "GET", target, append(tc.headers, "If-None-Match", inm)...)
			if res.StatusCode != http.StatusNotModified || len(raw) != 0 || res.Header.Get("ETag") != etag {
				t.Errorf("%s, If-None-Match %s: %d, %d bytes, ETag %q; want 304, none, %q", tc.name, inm, res.StatusCode, len(raw), res.Header.Get("ETag"), etag)
			}
			if ce := res.Header.Get("Content-Encoding"); ce != "" {
				t.Errorf("%s: 304 with Content-Encoding %q", tc.name, ce)
			}
			if v := res.Header.Values("Vary"); tc.vary != slices.Equal(v, []string{"Accept-Encoding"}) || !tc.vary && v != nil {
				t.Errorf("%s: 304 with Vary %q; want Accept-Encoding: %v", tc.name, v, tc.vary)
			}
		}
	}
	// A small answer's 304 varies with nothing: its 200 is never encoded.
	global := base + "/api/v1/markets/global"
	res, _ = fetch(t, c, "GET", global, gz...)
	res, _ = fetch(t, c, "GET", global, append(gz, "If-None-Match", res.Header.Get("ETag"))...)
	if res.StatusCode == http.StatusNotModified && res.Header.Get("Vary") != "" {
		t.Errorf("small answer's 304: Vary %q", res.Header.Get("Vary"))
	}

	// Each call is metered with its status, encoded or not.
	wantMetrics(t, srv.Handler(),
		`coinpulse_http_requests_total{route="/api/v1/markets",status="200"} 2`,
		`coinpulse_http_requests_total{route="/api/v1/markets",status="304"} 6`,
	)
}

// An answer kept under an Idempotency-Key is kept as it is, and sent again
// in the coding the request sent again takes.
func TestGzipIdempotentReplay(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	base, c := gzipClient(t, srv)
	body := `{"name":"Replayed","description":"` + strings.Repeat("x", 1000) + `"}`
	post := func(idem string, gzip bool) (*http.Response, *response) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/api/v1/portfolio", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", idem)
		if gzip {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if gzip {
			raw = wantGzip(t, "POST with gzip", res, raw)
		} else {
			wantIdentity(t, "POST without gzip", res)
		}
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("POST /portfolio: %d %s", res.StatusCode, raw)
		}
		return res, decodeResponse(t, res, raw)
	}
	for _, firstGzip := range []bool{true, false} {
		idem := fmt.Sprintf("gzip-replay-%v-%d", firstGzip, time.Now().UnixNano())
		firstRes, first := post(idem, firstGzip)
		for _, gzip := range []bool{false, true, firstGzip} {
			res, again := post(idem, gzip)
			if res.Header.Get("Idempotent-Replayed") != "true" || res.Header.Get("Original-Request") != firstRes.Header.Get("X-Request-Id") {
				t.Errorf("replay (first gzip %v, now %v): Idempotent-Replayed %q, Original-Request %q", firstGzip, gzip, res.Header.Get("Idempotent-Replayed"), res.Header.Get("Original-Request"))
			}
			if string(again.Data) != string(first.Data) || again.Meta["timestamp"] != first.Meta["timestamp"] || again.Meta["request_id"] != res.Header.Get("X-Request-Id") {
				t.Errorf("replay (first gzip %v, now %v): %s %v; want %s, this request's id", firstGzip, gzip, again.Data, again.Meta, first.Data)
			}
		}
	}
}

// A WebSocket upgrade asked with Accept-Encoding: gzip (as browsers send
// it) is upgraded as any other: nothing is encoded.
func TestGzipWebSocket(t *testing.T) {
	srv := testServer(t)
	key := proKey(t)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/api/v1/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + key}, "Accept-Encoding": {"gzip, deflate, br"}}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.CloseNow()
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Content-Encoding") != "" || res.Header.Get("Vary") != "" {
		t.Errorf("upgrade: %d, Content-Encoding %q, Vary %q", res.StatusCode, res.Header.Get("Content-Encoding"), res.Header.Get("Vary"))
	}
	_, msg, err := ws.Read(ctx)
	if err != nil || !strings.HasPrefix(string(msg), `{"type":"welcome",`) {
		t.Fatalf("first message %s, %v", msg, err)
	}
	ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribe","channel":"prices","coins":["bitcoin"],"id":"a"}`))
	if _, msg, err = ws.Read(ctx); err != nil || !json.Valid(msg) {
		t.Fatalf("after subscribing: %s, %v", msg, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

// serveCached's gzip form: the prefix memoised under the answer's key
// and reused, made again for an answer built again under the same key
// (its snapshot's memo full), made each time for an answer not memoised;
// and an answer whose meta would not fit a stored block (64 KiB; none
// does) compressed whole as it is sent.
func TestGzipCachedPrefix(t *testing.T) {
	srv := fixedServer(t)
	snap := srv.market.Current()
	serve := func(key string, c *cached, query string) {
		t.Helper()
		rec := httptest.NewRecorder()
		e := &exchange{ResponseWriter: rec, id: "prefix", status: http.StatusOK, gzip: gzipYes}
		m := Meta{RequestID: e.id, Query: query}
		if err := srv.serveCached(e, httptest.NewRequest("GET", "/", nil), snap, key, c, &m); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("key %q, meta of %d bytes", key, len(query))
		d := wantGzip(t, what, rec.Result(), rec.Body.Bytes())
		if want := envelopeHead + string(c.body) + envelopeMid + string(m.appendJSON(nil)) + envelopeEnd; string(d) != want {
			t.Errorf("%s: decodes to %d bytes, want %d", what, len(d), len(want))
		}
	}
	encode := func(v any) *cached {
		t.Helper()
		c, err := encodeCached(snap, "test", v)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	memoised := func(key string) *gzipPrefix {
		p, _ := market.Memo(snap, key+"|gzip", func() (*gzipPrefix, error) { return nil, nil })
		return p
	}
	key := fmt.Sprintf("test|gzip-prefix|%d", time.Now().UnixNano())
	first, again := encode(strings.Repeat("first ", 400)), encode(strings.Repeat("again ", 400))
	serve(key, first, "")
	kept := memoised(key)
	if kept == nil || kept.of != first {
		t.Fatalf("the prefix is not memoised: %v", kept)
	}
	serve(key, first, "another query")
	if memoised(key) != kept {
		t.Error("the memoised prefix was not reused")
	}
	serve(key, again, "") // the answer built again: its prefix too
	serve(key, first, "")
	for _, query := range []string{"short", strings.Repeat("q", 70_000)} {
		serve("", first, query)
	}
}
