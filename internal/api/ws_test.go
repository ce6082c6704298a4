package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"coinpulse"
)

// The WebSocket at /api/v1/ws through the real API: the server's handler
// behind a real HTTP server, a real client (github.com/coder/websocket).

// wsServer serves env's API over HTTP, through its Listener as serve does,
// and returns the stream's URL.
func wsServer(t *testing.T, env *alertEnv) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(env.srv.Handler())
	ts.Listener = env.srv.Listener(ts.Listener)
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(env.hub.Close) // runs first: ends the hijacked connections
	return "ws" + strings.TrimPrefix(ts.URL, "http") + "/api/v1/ws"
}

type wsClient struct {
	t   *testing.T
	c   *websocket.Conn
	seq int64
}

// dialWS connects with key in the Authorization header (none when empty).
func dialWS(t *testing.T, url, key string) (*wsClient, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, res, err
	}
	t.Cleanup(func() { c.CloseNow() })
	return &wsClient{t: t, c: c}, res, nil
}

func mustDialWS(t *testing.T, url, key string) *wsClient {
	t.Helper()
	c, res, err := dialWS(t, url, key)
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("dial: %v (HTTP %d)", err, status)
	}
	return c
}

func (c *wsClient) send(msg string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		c.t.Fatalf("write %s: %v", msg, err)
	}
}

// read returns the next message, or the error that ended the connection.
func (c *wsClient) read() (map[string]any, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, b, err := c.c.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		c.t.Fatalf("a %v message", typ)
	}
	m := jsonObject(c.t, b)
	// Every message is numbered 1, 2, 3… in the order received.
	c.seq++
	if fmt.Sprint(m["sequence"]) != fmt.Sprint(c.seq) {
		c.t.Errorf("message %s has sequence %v, want %d", b, m["sequence"], c.seq)
	}
	return m, nil
}

// expect reads the next message, which must be of type typ.
func (c *wsClient) expect(typ string) map[string]any {
	c.t.Helper()
	m, err := c.read()
	if err != nil {
		c.t.Fatalf("waiting for %s: %v", typ, err)
	}
	if m["type"] != typ {
		c.t.Fatalf("got %v, want a %s message", m, typ)
	}
	return m
}

// expectSkippingPrices is expect, passing over prices messages: the
// engine keeps publishing while the test talks to the server.
func (c *wsClient) expectSkippingPrices(typ string) map[string]any {
	c.t.Helper()
	for {
		m, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", typ, err)
		}
		if m["type"] == "prices" && typ != "prices" {
			continue
		}
		if m["type"] != typ {
			c.t.Fatalf("got %v, want a %s message", m, typ)
		}
		return m
	}
}

// quiet checks that nothing is waiting before a pong: messages are sent
// in order, so whatever was queued before the ping comes first.
func (c *wsClient) quiet(what string) {
	c.t.Helper()
	c.send(`{"type":"ping","id":"q"}`)
	m, err := c.read()
	if err != nil || m["type"] != "pong" || m["id"] != "q" {
		c.t.Fatalf("%s: got %v (%v) before the pong", what, m, err)
	}
}

// closedFor reads an error message with code, then a close 1008 with
// reason, as a stream that stops passing its checks gets; it returns the
// error message.
func (c *wsClient) closedFor(what string, code coinpulse.Code, reason string) map[string]any {
	c.t.Helper()
	e := c.expect("error")
	if e["code"] != string(code) {
		c.t.Errorf("%s: %v, want %s", what, e, code)
	}
	if ce := c.closed(); ce.Code != websocket.StatusPolicyViolation || ce.Reason != reason {
		c.t.Errorf("%s: closed with %d %q, want 1008 %q", what, ce.Code, ce.Reason, reason)
	}
	return e
}

// closed reads until the server closes, and returns the close error.
func (c *wsClient) closed() websocket.CloseError {
	c.t.Helper()
	for {
		_, err := c.read()
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			c.t.Fatalf("the connection ended without a close frame: %v", err)
		}
		return ce
	}
}

func TestWSHeaderKeyAndPrices(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{pumpPrices: true})
	url := wsServer(t, env)
	c := mustDialWS(t, url, env.newKey(coinpulse.TierPremium))
	w := c.expect("welcome")
	if w["mode"] != "live" || w["heartbeat_interval_seconds"] == nil {
		t.Errorf("welcome %v", w)
	}
	c.send(`{"type":"subscribe","channel":"prices","coins":["BTC","bitcoin","eth"],"id":"a"}`)
	s := c.expect("subscribed")
	if s["id"] != "a" || s["channel"] != "prices" || fmt.Sprint(s["coins"]) != "[bitcoin ethereum]" || fmt.Sprint(s["subscription_count"]) != "2" {
		t.Errorf("subscribed %v", s)
	}
	// An unknown coin: an error, and nothing changes.
	c.send(`{"type":"subscribe","channel":"prices","coins":["no-such-coin"],"id":"b"}`)
	if e := c.expectSkippingPrices("error"); e["code"] != "RESOURCE_NOT_FOUND" || e["id"] != "b" {
		t.Errorf("unknown coin: %v", e)
	}
	// The engine's next snapshot brings the followed coins, and only them,
	// at the snapshot's prices.
	for range 2 {
		p := c.expect("prices")
		snap := shared.engine.Snapshot(fmt.Sprint(p["snapshot"]))
		if snap == nil {
			t.Fatalf("prices of unknown snapshot %v", p["snapshot"])
		}
		updates, _ := p["updates"].([]any)
		if len(updates) != 2 {
			t.Fatalf("updates %v, want bitcoin and ethereum", p["updates"])
		}
		for _, u := range updates {
			u := u.(map[string]any)
			coin := snap.Coin(fmt.Sprint(u["coin_id"]))
			if coin == nil || (coin.ID != "bitcoin" && coin.ID != "ethereum") || u["symbol"] != coin.Symbol {
				t.Fatalf("update %v", u)
			}
			if got, _ := u["price"].(json.Number).Float64(); got != coin.CurrentPrice {
				t.Errorf("%s at %v, the snapshot says %v", coin.ID, u["price"], coin.CurrentPrice)
			}
		}
		if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(p["as_of"])); err != nil || !at.Equal(snap.AsOf) {
			t.Errorf("as_of %v, snapshot %s", p["as_of"], snap.AsOf)
		}
	}
	// X-API-Key works as well as Authorization.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c2, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {env.newKey(coinpulse.TierPro)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.CloseNow()
	(&wsClient{t: t, c: c2}).expect("welcome")
}

func TestWSFirstMessageKey(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	url := wsServer(t, env)
	u := env.user(coinpulse.TierPro)
	c := mustDialWS(t, url, "")
	c.send(`{"type":"auth","api_key":"` + env.key(u, coinpulse.ModeTest, rw) + `","id":7}`)
	w := c.expect("welcome")
	if w["mode"] != "test" || fmt.Sprint(w["id"]) != "7" {
		t.Errorf("welcome %v", w)
	}
	c.send(`{"type":"subscribe","channel":"alerts"}`)
	if s := c.expect("subscribed"); s["channel"] != "alerts" {
		t.Errorf("subscribed %v", s)
	}
	c.send(`{"type":"auth","api_key":"x"}`) // once only
	if e := c.expect("error"); e["code"] != "VALIDATION_ERROR" {
		t.Errorf("second auth: %v", e)
	}
	c.quiet("after a second auth")
}

// An upgrade request that is not a valid handshake is a 422 in the
// error envelope (the WebSocket library would answer a plain-text 400 or
// 426), and counts as an admitted call.
func TestWSBadHandshake(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	url := "http" + strings.TrimPrefix(wsServer(t, env), "ws")
	key := env.newKey(coinpulse.TierPro)
	good := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	for _, tc := range []struct{ name, header, value string }{
		{"no Connection: Upgrade", "Connection", "keep-alive"},
		{"version 8", "Sec-WebSocket-Version", "8"},
		{"no key", "Sec-WebSocket-Key", ""},
		{"short key", "Sec-WebSocket-Key", "c2hvcnQ="},
	} {
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		for k, v := range good {
			req.Header.Set(k, v)
		}
		if tc.value == "" {
			req.Header.Del(tc.header)
		} else {
			req.Header.Set(tc.header, tc.value)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var env struct {
			Error struct {
				Code    string
				Details []struct{ Field string }
			}
		}
		if err := json.Unmarshal(body, &env); err != nil || res.StatusCode != 422 || env.Error.Code != string(coinpulse.CodeValidation) ||
			len(env.Error.Details) != 1 || env.Error.Details[0].Field != tc.header {
			t.Errorf("%s: %d %s", tc.name, res.StatusCode, body)
		}
	}
}

func TestWSRefused(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{plans: plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) { p.Webhooks = false })})
	url := wsServer(t, env)
	free, noHooks := env.newKey(coinpulse.TierFree), env.newKey(coinpulse.TierPremium)
	writeOnly := env.key(env.user(coinpulse.TierPro), coinpulse.ModeLive, coinpulse.Permissions{Write: true})
	valid := env.newKey(coinpulse.TierPro)

	// A key in the header: refused before the upgrade, with the HTTP
	// status and the error envelope.
	for _, tc := range []struct {
		name, key string
		status    int
		code      coinpulse.Code
	}{
		{"free", free, 403, coinpulse.CodePermissionDenied},
		{"plan without webhooks", noHooks, 403, coinpulse.CodePermissionDenied},
		{"write-only key", writeOnly, 403, coinpulse.CodePermissionDenied},
		{"malformed key", "sk_live_nope", 401, coinpulse.CodeInvalidAPIKey},
		{"unknown key", valid[:len(valid)-6] + "AAAAAA", 401, coinpulse.CodeInvalidAPIKey},
	} {
		c, res, err := dialWS(t, url, tc.key)
		if err == nil {
			c.c.CloseNow()
			t.Errorf("%s: connected", tc.name)
			continue
		}
		if res == nil || res.StatusCode != tc.status {
			t.Errorf("%s: %v, response %v; want HTTP %d", tc.name, err, res, tc.status)
			continue
		}
		body, _ := io.ReadAll(res.Body)
		var env struct {
			Success bool `json:"success"`
			Error   struct {
				Code, Message string
			} `json:"error"`
			Meta struct {
				RequestID string `json:"request_id"`
			} `json:"meta"`
		}
		if err := json.Unmarshal(body, &env); err != nil || env.Success || env.Error.Code != string(tc.code) || env.Meta.RequestID == "" ||
			!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: body %s", tc.name, body)
		}
		if tc.code == coinpulse.CodePermissionDenied && tc.key != writeOnly && !strings.Contains(env.Error.Message, "/user/api") {
			t.Errorf("%s: %q should say where to upgrade", tc.name, env.Error.Message)
		}
	}

	// A key in the first message: an error message, then a close.
	for _, tc := range []struct {
		name, first string
		code        coinpulse.Code
		reason      string
	}{
		{"free", `{"type":"auth","api_key":"` + free + `","id":1}`, coinpulse.CodePermissionDenied, "authentication failed"},
		{"plan without webhooks", `{"type":"auth","api_key":"` + noHooks + `","id":1}`, coinpulse.CodePermissionDenied, "authentication failed"},
		{"unknown key", `{"type":"auth","api_key":"sk_live_nope","id":1}`, coinpulse.CodeInvalidAPIKey, "authentication failed"},
		{"no auth first", `{"type":"subscribe","channel":"alerts","id":1}`, coinpulse.CodeInvalidAPIKey, "authentication required"},
		{"not JSON", `hello`, coinpulse.CodeValidation, "authentication required"},
	} {
		c := mustDialWS(t, url, "")
		c.send(tc.first)
		e := c.expect("error")
		if e["code"] != string(tc.code) || e["message"] == "" {
			t.Errorf("%s: error %v, want %s", tc.name, e, tc.code)
		}
		if ce := c.closed(); ce.Code != websocket.StatusPolicyViolation || ce.Reason != tc.reason {
			t.Errorf("%s: closed with %d %q, want 1008 %q", tc.name, ce.Code, ce.Reason, tc.reason)
		}
	}

	// Without Upgrade, GET /ws is a plain 422 envelope.
	wantError(t, do(t, env.srv, "GET", "/api/v1/ws", valid), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	wantError(t, do(t, env.srv, "GET", "/api/v1/ws", free), http.StatusForbidden, coinpulse.CodePermissionDenied)
}

// An account holds at most MaxStreamsPerAccount connections open, live
// and sandbox keys together: one more is 429 RATE_LIMIT_EXCEEDED before
// the upgrade (a key in the headers) or an error and a close 1013 (a key
// in the first message), and is not counted; another account is not held
// back, and a closed connection gives its slot back.
func TestWSConnectionCap(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{metered: true, maxStreams: 2})
	url := wsServer(t, env)
	u := env.user(coinpulse.TierPro)
	live, test := env.key(u, coinpulse.ModeLive, rw), env.key(u, coinpulse.ModeTest, rw)
	first := mustDialWS(t, url, live)
	first.expect("welcome")
	second := mustDialWS(t, url, "")
	second.send(`{"type":"auth","api_key":"` + test + `"}`)
	second.expect("welcome")

	c, res, err := dialWS(t, url, live)
	if err == nil {
		c.c.CloseNow()
		t.Fatal("a third connection was accepted")
	}
	if res == nil || res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "10" {
		t.Fatalf("third connection: %v, response %v; want HTTP 429 with Retry-After 10", err, res)
	}
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), `"code":"RATE_LIMIT_EXCEEDED"`) || !strings.Contains(string(body), "2 WebSocket connections open") {
		t.Errorf("third connection: body %s", body)
	}
	third := mustDialWS(t, url, "")
	third.send(`{"type":"auth","api_key":"` + live + `","id":3}`)
	if e := third.expect("error"); e["code"] != "RATE_LIMIT_EXCEEDED" {
		t.Errorf("third connection, key in the first message: %v", e)
	}
	if ce := third.closed(); ce.Code != websocket.StatusTryAgainLater {
		t.Errorf("third connection, key in the first message: closed with %d %q, want 1013", ce.Code, ce.Reason)
	}

	other := mustDialWS(t, url, env.newKey(coinpulse.TierPro))
	other.expect("welcome")

	// Only the first connection counted: the sandbox one never does, the
	// refused ones are not counted.
	monthCalls := func() int64 {
		time.Sleep(20 * time.Millisecond) // under /usage's abuse limit of 50 a second
		return decode[struct {
			MonthCalls int64 `json:"month_calls"`
		}](t, do(t, env.srv, "GET", "/api/v1/usage", live)).MonthCalls
	}
	pollUntil(t, "the first connection metered", func() bool { return monthCalls() > 0 })
	time.Sleep(50 * time.Millisecond) // five meter intervals: nothing more comes
	if n := monthCalls(); n != 1 {
		t.Errorf("month_calls %d, want 1", n)
	}

	first.c.Close(websocket.StatusNormalClosure, "bye")
	var again *wsClient
	pollUntil(t, "a slot given back", func() bool {
		c, _, err := dialWS(t, url, live)
		again = c
		return err == nil
	})
	again.expect("welcome")
	second.quiet("the sandbox connection after all that")
}

// unreachableSlots are shared slots whose store cannot be reached.
type unreachableSlots struct{}

func (unreachableSlots) Take(context.Context, int64, int) (func(), bool, error) {
	return nil, false, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

// Shared slots that cannot be counted refuse the connection with 503 and
// Retry-After 1 (the error and a close in the first-message auth), and
// count nothing.
func TestWSSlotsUnavailable(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{metered: true, slots: unreachableSlots{}})
	url := wsServer(t, env)
	live := env.newKey(coinpulse.TierPro)
	_, res, err := dialWS(t, url, live)
	if err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("connection: %v, response %v; want HTTP 503 with Retry-After 1", err, res)
	}
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), `"code":"SERVICE_UNAVAILABLE"`) || !strings.Contains(string(body), "cannot be counted") || strings.Contains(string(body), "refused") {
		t.Errorf("connection: body %s", body)
	}
	c := mustDialWS(t, url, "")
	c.send(`{"type":"auth","api_key":"` + live + `","id":1}`)
	if e := c.expect("error"); e["code"] != "SERVICE_UNAVAILABLE" {
		t.Errorf("key in the first message: %v", e)
	}
	if ce := c.closed(); ce.Code != websocket.StatusTryAgainLater && ce.Code != websocket.StatusInternalError {
		t.Errorf("key in the first message: closed with %d %q, want 1013 or 1011", ce.Code, ce.Reason)
	}
	time.Sleep(50 * time.Millisecond) // five meter intervals
	if n := decode[struct {
		MonthCalls int64 `json:"month_calls"`
	}](t, do(t, env.srv, "GET", "/api/v1/usage", live)).MonthCalls; n != 0 {
		t.Errorf("month_calls %d, want 0", n)
	}
}

// An alert's firing reaches its owner's connections in its mode that
// follow alerts, and no one else's.
func TestWSAlertFirings(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	url := wsServer(t, env)
	ann := env.user(coinpulse.TierPremium)
	live, sandbox := env.key(ann, coinpulse.ModeLive, rw), env.key(ann, coinpulse.ModeTest, rw)
	bob := env.newKey(coinpulse.TierPremium)

	conns := map[string]*wsClient{}
	for name, key := range map[string]string{"ann": live, "ann-sandbox": sandbox, "bob": bob, "ann-unsubscribed": live} {
		var c *wsClient
		if name == "ann-sandbox" { // this one authenticates in its first message
			c = mustDialWS(t, url, "")
			c.send(`{"type":"auth","api_key":"` + key + `"}`)
		} else {
			c = mustDialWS(t, url, key)
		}
		c.expect("welcome")
		if name != "ann-unsubscribed" {
			c.send(`{"type":"subscribe","channel":"alerts"}`)
			c.expect("subscribed")
		}
		conns[name] = c
	}

	a := env.createAlert(live, `{"coin_id":"bitcoin","target_price":100,"condition":"above"}`)
	if fired := env.tick(map[string]float64{"bitcoin": 150}); len(fired) != 1 {
		t.Fatalf("fired %+v", fired)
	}
	m := conns["ann"].expect("alert.triggered")
	alert, _ := m["alert"].(map[string]any)
	rest := jsonObject(t, do(t, env.srv, "GET", fmt.Sprintf("/api/v1/alerts/%d", a.ID), live).Data)
	if fmt.Sprint(m["alert_id"]) != fmt.Sprint(a.ID) || fmt.Sprint(alert) != fmt.Sprint(rest) || alert["is_active"] != false || alert["triggered_price"] != jsonNum("150") {
		t.Errorf("alert.triggered %v\nwant the alert as GET shows it: %v", m, rest)
	}
	for _, name := range []string{"ann-sandbox", "bob", "ann-unsubscribed"} {
		conns[name].quiet(name + " after ann's live alert fired")
	}

	// A sandbox alert reaches the sandbox connection only.
	s := env.createAlert(sandbox, `{"coin_id":"ethereum","target_price":10,"condition":"below"}`)
	if fired := env.tick(map[string]float64{"ethereum": 9}); len(fired) != 1 {
		t.Fatalf("fired %+v", fired)
	}
	if m := conns["ann-sandbox"].expect("alert.triggered"); fmt.Sprint(m["alert_id"]) != fmt.Sprint(s.ID) {
		t.Errorf("sandbox got %v", m)
	}
	for _, name := range []string{"ann", "bob", "ann-unsubscribed"} {
		conns[name].quiet(name + " after ann's sandbox alert fired")
	}
	// Unsubscribing stops them.
	conns["ann"].send(`{"type":"unsubscribe","channel":"alerts"}`)
	conns["ann"].expect("unsubscribed")
	env.createAlert(live, `{"coin_id":"bitcoin","target_price":100,"condition":"above"}`)
	if fired := env.tick(map[string]float64{"bitcoin": 150}); len(fired) != 1 {
		t.Fatalf("fired %+v", fired)
	}
	conns["ann"].quiet("after unsubscribing")
}

// A connection is one call, whichever way it authenticates: metered as
// soon as it is admitted, while it is still open (status 101, the time
// its upgrade took), and not again when it ends, whatever it sent
// meanwhile.
func TestWSMeteredAsOneCall(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{metered: true})
	url := wsServer(t, env)
	type call struct {
		Method     string  `json:"method"`
		Route      string  `json:"route"`
		Status     int     `json:"status"`
		DurationMS float64 `json:"duration_ms"`
		RequestID  string  `json:"request_id"`
	}
	type usage struct {
		MonthCalls int64  `json:"month_calls"`
		Recent     []call `json:"recent"`
	}
	wsCalls := func(u usage) []call {
		var out []call
		for _, r := range u.Recent {
			if r.Route == "/api/v1/ws" {
				out = append(out, r)
			}
		}
		return out
	}
	for _, header := range []bool{true, false} {
		key := env.newKey(coinpulse.TierPremium)
		var c *wsClient
		if header {
			c = mustDialWS(t, url, key)
		} else {
			c = mustDialWS(t, url, "")
			c.send(`{"type":"auth","api_key":"` + key + `"}`)
		}
		c.expect("welcome")

		// Metered while the connection is open.
		var u usage
		pollUntil(t, "the open connection metered", func() bool {
			time.Sleep(20 * time.Millisecond) // under /usage's abuse limit of 50 a second
			u = decode[usage](t, do(t, env.srv, "GET", "/api/v1/usage", key))
			return u.MonthCalls > 0
		})
		open := wsCalls(u)
		if u.MonthCalls != 1 || len(open) != 1 {
			t.Fatalf("header %v, connection open: month_calls %d, /ws calls %+v; want one call", header, u.MonthCalls, open)
		}
		if open[0].Method != "GET" || open[0].Status != http.StatusSwitchingProtocols || open[0].RequestID == "" {
			t.Errorf("header %v: the connection is metered as %+v; want GET with status 101 and a request id", header, open[0])
		}

		for i := range 5 {
			c.send(fmt.Sprintf(`{"type":"ping","id":%d}`, i))
			c.expect("pong")
		}
		c.send(`{"type":"subscribe","channel":"prices","coins":["btc"]}`)
		c.expect("subscribed")
		c.c.Close(websocket.StatusNormalClosure, "bye")

		// Its end adds nothing and changes nothing: the call keeps the
		// duration of its upgrade, not the connection's length.
		pollUntil(t, "the connection's call to end", func() bool { return env.srv.running.Load() == 0 })
		time.Sleep(30 * time.Millisecond) // three meter intervals: nothing more comes
		u = decode[usage](t, do(t, env.srv, "GET", "/api/v1/usage", key))
		ended := wsCalls(u)
		if u.MonthCalls != 1 || len(ended) != 1 || ended[0] != open[0] {
			t.Errorf("header %v, connection closed: month_calls %d, /ws calls %+v; want the one call metered while it was open, %+v", header, u.MonthCalls, ended, open[0])
		}
	}
}

// Revoking a key closes its open connections (an INVALID_API_KEY error,
// then 1008 "api key revoked"), and only those; so does a change to a
// plan without streams.
func TestWSClosedOnRevocation(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	url := wsServer(t, env)
	ann := env.user(coinpulse.TierPro)
	doomed, rec, err := coinpulse.NewAPIKey(ann.ID, "doomed", coinpulse.ModeLive, rw)
	if err != nil || env.store.CreateKey(env.ctx, rec) != nil {
		t.Fatal(err)
	}
	kept := env.key(ann, coinpulse.ModeLive, rw)
	bob := env.user(coinpulse.TierPro)
	bobKey := env.key(bob, coinpulse.ModeLive, rw)
	byHeader := mustDialWS(t, url, doomed)
	byMessage := mustDialWS(t, url, "")
	byMessage.send(`{"type":"auth","api_key":"` + doomed + `"}`)
	other := mustDialWS(t, url, kept)
	bobs := mustDialWS(t, url, bobKey)
	for _, c := range []*wsClient{byHeader, byMessage, other, bobs} {
		c.expect("welcome")
	}
	if err := env.store.RevokeKey(env.ctx, ann.ID, rec.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*wsClient{byHeader, byMessage} {
		c.closedFor("after revocation", coinpulse.CodeInvalidAPIKey, "api key revoked")
	}
	other.quiet("another key of the same account")
	bobs.quiet("another account")
	// A downgrade to a plan without streams closes the account's sockets.
	if err := env.store.SetUserTier(env.ctx, bob.ID, coinpulse.TierFree, nil); err != nil {
		t.Fatal(err)
	}
	bobs.closedFor("after the downgrade (the key is still good)", coinpulse.CodePermissionDenied, "plan excludes streams")
	other.quiet("after another account's downgrade")
}

// New plans (SetPlans, serve's SIGHUP) that take streams from a tier close
// its accounts' WebSockets, and only those.
func TestSetPlansClosesStreams(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	url := wsServer(t, env)
	pro := mustDialWS(t, url, env.key(env.user(coinpulse.TierPro), coinpulse.ModeLive, rw))
	ent := mustDialWS(t, url, env.key(env.user(coinpulse.TierEnterprise), coinpulse.ModeLive, rw))
	pro.expect("welcome")
	ent.expect("welcome")
	env.srv.SetPlans(env.ctx, plansWith(coinpulse.TierPro, func(p *coinpulse.Plan) { p.Webhooks = false }))
	pro.closedFor("after the plans changed", coinpulse.CodePermissionDenied, "plan excludes streams")
	ent.quiet("a tier the new plans leave its streams")
}

// A stream whose subscription lapses while the database is out of reach
// stays open meanwhile (the recheck fails), and is closed once a recheck,
// tried again every second, gets through.
func TestWSLapseRecheckedAfterAStoreFailure(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := &probedUsers{}
	env := newAlertEnv(t, alertEnvOptions{clock: clock, wrapStore: func(s coinpulse.Store) coinpulse.Store {
		store.Store = s
		return store
	}})
	url := wsServer(t, env)
	inAnHour := clock.Now().Add(time.Hour)
	u := env.user(coinpulse.TierPro)
	if err := env.store.SetUserTier(env.ctx, u.ID, coinpulse.TierPro, &inAnHour); err != nil {
		t.Fatal(err)
	}
	c := mustDialWS(t, url, env.key(u, coinpulse.ModeLive, rw))
	c.expect("welcome")

	store.fail.Store(true)
	clock.Advance(time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	for store.failed.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no recheck in 10 s after the subscription lapsed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Two more of watchStreams' ticks: its recheck at the lapse has failed
	// (the first failed read may have been another recheck's, after the
	// tier change).
	time.Sleep(2500 * time.Millisecond)
	c.quiet("while the database is out of reach")
	store.fail.Store(false)
	c.closedFor("once the database answers again", coinpulse.CodeExpiredSubscription, "subscription expired")
}

// A stream ends when its subscription or its key expires, within about a
// second, saying which; one whose subscription was renewed goes on.
func TestWSClosedWhenItLapses(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	env := newAlertEnv(t, alertEnvOptions{clock: clock})
	url := wsServer(t, env)
	now := clock.Now()
	inAnHour, inTwo := now.Add(time.Hour), now.Add(2*time.Hour)
	lapsing := env.user(coinpulse.TierPro)
	renewed := env.user(coinpulse.TierPro)
	for _, u := range []*coinpulse.User{lapsing, renewed} {
		if err := env.store.SetUserTier(env.ctx, u.ID, coinpulse.TierPro, &inAnHour); err != nil {
			t.Fatal(err)
		}
	}
	keyed := env.user(coinpulse.TierPro)
	expiring, rec, err := coinpulse.NewAPIKey(keyed.ID, "expiring", coinpulse.ModeLive, rw)
	rec.ExpiresAt = &inTwo
	if err != nil || env.store.CreateKey(env.ctx, rec) != nil {
		t.Fatal(err)
	}
	sub := mustDialWS(t, url, env.key(lapsing, coinpulse.ModeLive, rw))
	kept := mustDialWS(t, url, env.key(renewed, coinpulse.ModeLive, rw))
	key := mustDialWS(t, url, expiring)
	for _, c := range []*wsClient{sub, kept, key} {
		c.expect("welcome")
	}
	later := now.Add(30 * 24 * time.Hour)
	if err := env.store.SetUserTier(env.ctx, renewed.ID, coinpulse.TierPro, &later); err != nil {
		t.Fatal(err)
	}

	clock.Advance(time.Hour)
	sub.closedFor("after the subscription's expiry", coinpulse.CodeExpiredSubscription, "subscription expired")
	kept.quiet("a renewed subscription")
	key.quiet("a key that expires later")

	clock.Advance(time.Hour)
	if e := key.closedFor("after the key's expiry", coinpulse.CodeInvalidAPIKey, "api key expired"); e["message"] != keyExpired {
		t.Errorf("after the key's expiry: message %q, want %q", e["message"], keyExpired)
	}
	kept.quiet("a renewed subscription, later")
}

func TestStreamSlots(t *testing.T) {
	ctx := context.Background()
	slots := &streamSlots{held: map[int64]int{}}
	take := func(account int64, max int) func() {
		t.Helper()
		release, ok, err := slots.Take(ctx, account, max)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return nil
		}
		return release
	}
	a, b := take(1, 2), take(1, 2)
	if a == nil || b == nil || take(1, 2) != nil {
		t.Fatal("a cap of 2: want two slots, then none")
	}
	other := take(2, 2)
	if other == nil {
		t.Fatal("another account is held back by the first's slots")
	}
	a()
	a() // a second release gives nothing back
	c := take(1, 2)
	if c == nil || take(1, 2) != nil {
		t.Error("one slot given back (twice): want it taken again, and no more")
	}
	b()
	c()
	other()
	if len(slots.held) != 0 {
		t.Errorf("every slot given back, yet %v is held", slots.held)
	}
	for i := range 1000 {
		if take(1, -1) == nil {
			t.Fatalf("no cap: slot %d refused", i+1)
		}
	}
}
