package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"coinpulse"
)

// testCoins is the market of the tests: id → symbol.
var testCoins = map[string]string{
	"bitcoin":  "btc",
	"ethereum": "eth",
	"solana":   "sol",
	"cardano":  "ada",
	"ripple":   "xrp",
}

func testResolve(s string) (string, error) {
	s = strings.ToLower(s)
	if _, ok := testCoins[s]; ok {
		return s, nil
	}
	for id, sym := range testCoins {
		if sym == s {
			return id, nil
		}
	}
	return "", coinpulse.Errorf(coinpulse.CodeNotFound, "Coin %q was not found.", s)
}

// testKeys are the keys the tests know; "user2-live" and so on.
var testKeys = map[string]Principal{
	"sk_user1_live": {UserID: 1, Mode: "live", KeyID: 11},
	"sk_user1_test": {UserID: 1, Mode: "test", KeyID: 12},
	"sk_user2_live": {UserID: 2, Mode: "live", KeyID: 21},
}

func testAuthenticate(ctx context.Context, key string) (Principal, error) {
	if key == "sk_broken" {
		return Principal{}, errors.New("database is down")
	}
	if key == "sk_busy" {
		return Principal{}, coinpulse.Errorf(coinpulse.CodeRateLimitExceeded, "Your plan's limit of 5 calls per second is reached; retry in 200ms.")
	}
	p, ok := testKeys[key]
	if !ok {
		return Principal{}, coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "The API key is not valid.")
	}
	return p, nil
}

// env is a hub behind an httptest server whose handler plays the API
// layer: an X-API-Key header is checked, and its absence passes nil.
type env struct {
	hub  *Hub
	srv  *httptest.Server
	url  string
	errs chan error // what Serve returned, one per connection
}

// newEnv starts a hub with cfg (Resolve and Authenticate filled in when
// nil) and checks, at clean-up, that it leaves no goroutine behind.
func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	checkGoroutines(t)
	if cfg.Resolve == nil {
		cfg.Resolve = testResolve
	}
	if cfg.Authenticate == nil {
		cfg.Authenticate = testAuthenticate
	}
	if cfg.MessageRate == 0 { // the tests send many messages at once; TestMessagesArePaced paces them
		cfg.MessageRate, cfg.MessageBurst = 1e9, 1e9
	}
	e := &env{hub: NewHub(cfg), errs: make(chan error, 10000)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p *Principal
		if key := r.Header.Get("X-API-Key"); key != "" {
			pr, ok := testKeys[key]
			if !ok {
				http.Error(w, "bad key", http.StatusUnauthorized)
				return
			}
			p = &pr
		}
		e.errs <- e.hub.Serve(w, r, p)
	}))
	e.url = "ws" + strings.TrimPrefix(e.srv.URL, "http")
	t.Cleanup(func() {
		e.hub.Close()
		e.srv.Close()
	})
	return e
}

// checkGoroutines fails the test if, at its end, more goroutines run than
// at its start (retrying for a while: closing takes a moment).
func checkGoroutines(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutines: %d before, %d after\n%s", before, n, buf)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// client is a test client that checks the sequence numbers.
type client struct {
	t   testing.TB
	ws  *websocket.Conn
	seq int64
}

// dial connects with key in X-API-Key ("" for none).
func (e *env) dial(t testing.TB, key string) *client {
	t.Helper()
	var opts websocket.DialOptions
	if key != "" {
		opts.HTTPHeader = http.Header{"X-API-Key": {key}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, e.url, &opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	ws.SetReadLimit(-1)
	c := &client{t: t, ws: ws}
	t.Cleanup(func() { ws.CloseNow() })
	return c
}

// dialWelcome connects with a header key and reads the welcome.
func (e *env) dialWelcome(t testing.TB, key string) *client {
	t.Helper()
	c := e.dial(t, key)
	c.expect("welcome")
	return c
}

func (c *client) send(msg string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		c.t.Fatalf("send %s: %v", msg, err)
	}
}

// read returns the next message, or the read error.
func (c *client) read(timeout time.Duration) (map[string]any, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	typ, data, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		c.t.Fatalf("message type %v", typ)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		c.t.Fatalf("bad JSON from server: %v: %s", err, data)
	}
	seq, ok := m["sequence"].(float64)
	if !ok || int64(seq) != c.seq+1 {
		c.t.Fatalf("sequence %v after %d: %s", m["sequence"], c.seq, data)
	}
	c.seq++
	if _, ok := m["type"].(string); !ok {
		c.t.Fatalf("no type: %s", data)
	}
	return m, nil
}

// next returns the next message that is not a heartbeat.
func (c *client) next() map[string]any {
	c.t.Helper()
	for {
		m, err := c.read(5 * time.Second)
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		if m["type"] != "heartbeat" {
			return m
		}
	}
}

// expect returns the next message, which must be of type typ.
func (c *client) expect(typ string) map[string]any {
	c.t.Helper()
	m := c.next()
	if m["type"] != typ {
		c.t.Fatalf("got %v, want a %s message", m, typ)
	}
	return m
}

// expectError returns the next message, which must be an error of code.
func (c *client) expectError(code string) map[string]any {
	c.t.Helper()
	m := c.expect("error")
	if m["code"] != code {
		c.t.Fatalf("error %v, want code %s", m, code)
	}
	if msg, _ := m["message"].(string); msg == "" {
		c.t.Fatalf("error without a message: %v", m)
	}
	return m
}

// quiet checks that nothing but heartbeats is pending: a ping's pong
// comes next.
func (c *client) quiet() {
	c.t.Helper()
	c.send(`{"type":"ping","id":"quiet"}`)
	m := c.next()
	if m["type"] != "pong" || m["id"] != "quiet" {
		c.t.Fatalf("got %v, want the pong", m)
	}
}

// expectClose reads until the connection closes and checks the status
// and reason ("" reason: any).
func (c *client) expectClose(code websocket.StatusCode, reason string) {
	c.t.Helper()
	for {
		_, err := c.read(15 * time.Second)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			c.t.Fatalf("connection ended with %v, want close status %d", err, code)
		}
		if ce.Code != code || (reason != "" && ce.Reason != reason) {
			c.t.Fatalf("closed with %d %q, want %d %q", ce.Code, ce.Reason, code, reason)
		}
		return
	}
}

// serveErr returns the next error Serve returned.
func (e *env) serveErr(t testing.TB) error {
	t.Helper()
	select {
	case err := <-e.errs:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return")
		return nil
	}
}

func pf(f float64) *float64 { return &f }

// tick builds the updates of every test coin, prices offset by n.
func tick(n int) []PriceUpdate {
	var us []PriceUpdate
	for _, id := range []string{"bitcoin", "ethereum", "solana", "cardano", "ripple"} {
		u := PriceUpdate{
			CoinID: id, Symbol: testCoins[id], Price: 100 + float64(n),
			MarketCap: pf(1e9), TotalVolume: pf(5e6),
			LastUpdated: time.Date(2025, 1, 1, 12, 0, n, 0, time.UTC),
		}
		if id != "solana" {
			u.PriceChangePercentage24h = pf(-1.5)
		}
		us = append(us, u)
	}
	return us
}

// coinsOf returns the coin ids of a prices message's updates.
func coinsOf(t testing.TB, m map[string]any) []string {
	t.Helper()
	us, ok := m["updates"].([]any)
	if !ok {
		t.Fatalf("no updates: %v", m)
	}
	var ids []string
	for _, u := range us {
		ids = append(ids, fmt.Sprint(u.(map[string]any)["coin_id"]))
	}
	return ids
}
