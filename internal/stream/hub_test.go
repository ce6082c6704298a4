package stream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"coinpulse"
)

func TestWelcome(t *testing.T) {
	e := newEnv(t, Config{Heartbeat: 2 * time.Second, MaxSubscriptions: 50})
	c := e.dial(t, "sk_user1_test")
	m := c.expect("welcome")
	want := map[string]any{"type": "welcome", "sequence": 1.0, "mode": "test",
		"heartbeat_interval_seconds": 2.0, "max_subscriptions": 50.0, "max_message_bytes": 16384.0}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Fatalf("welcome %v, want %v", m, want)
	}
	if n := e.hub.Len(); n != 1 {
		t.Fatalf("Len = %d", n)
	}
}

func TestPricesBySymbolAndID(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.dialWelcome(t, "sk_user1_live")
	c.send(`{"type":"subscribe","channel":"prices","coins":["BTC","ethereum","eth","sol"],"id":"s1"}`)
	m := c.expect("subscribed")
	if m["id"] != "s1" || m["channel"] != "prices" || fmt.Sprint(m["coins"]) != "[bitcoin ethereum solana]" || m["subscription_count"] != 3.0 {
		t.Fatalf("subscribed: %v", m)
	}
	asOf := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	var last float64
	for n := range 3 {
		e.hub.PublishPrices(asOf.Add(time.Duration(n)*time.Minute), fmt.Sprint("snap", n), tick(n))
		m := c.expect("prices")
		if seq := m["sequence"].(float64); seq <= last {
			t.Fatalf("sequence %v after %v", seq, last)
		} else {
			last = seq
		}
		if got := coinsOf(t, m); fmt.Sprint(got) != "[bitcoin ethereum solana]" {
			t.Fatalf("updates of %v", got)
		}
		if m["as_of"] != fmt.Sprintf("2025-01-01T12:0%d:00.000Z", n) || m["snapshot"] != fmt.Sprint("snap", n) {
			t.Fatalf("prices %v", m)
		}
		us := m["updates"].([]any)
		btc := us[0].(map[string]any)
		want := map[string]any{"coin_id": "bitcoin", "symbol": "btc", "price": 100.0 + float64(n),
			"price_change_percentage_24h": -1.5, "market_cap": 1e9, "total_volume": 5e6,
			"last_updated": fmt.Sprintf("2025-01-01T12:00:0%dZ", n)}
		if fmt.Sprint(btc) != fmt.Sprint(want) {
			t.Fatalf("update %v, want %v", btc, want)
		}
		if sol := us[2].(map[string]any); sol["price_change_percentage_24h"] != nil {
			t.Fatalf("solana's change should be null: %v", sol)
		}
	}
	// A tick without any followed coin sends nothing.
	e.hub.PublishPrices(asOf, "x", []PriceUpdate{{CoinID: "cardano", Symbol: "ada", Price: 1}})
	c.quiet()
}

func TestUnsubscribeStopsPrices(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.dialWelcome(t, "sk_user1_live")
	c.send(`{"type":"subscribe","channel":"prices","coins":["btc","eth","ada"]}`)
	c.expect("subscribed")

	c.send(`{"type":"unsubscribe","channel":"prices","coins":["ETH"],"id":2}`)
	m := c.expect("unsubscribed")
	if m["id"] != 2.0 || fmt.Sprint(m["coins"]) != "[ethereum]" || m["subscription_count"] != 2.0 {
		t.Fatalf("unsubscribed: %v", m)
	}
	e.hub.PublishPrices(time.Now(), "a", tick(1))
	if got := coinsOf(t, c.expect("prices")); fmt.Sprint(got) != "[bitcoin cardano]" {
		t.Fatalf("updates of %v", got)
	}

	// Without coins: every coin.
	c.send(`{"type":"unsubscribe","channel":"prices"}`)
	m = c.expect("unsubscribed")
	if fmt.Sprint(m["coins"]) != "[bitcoin cardano]" || m["subscription_count"] != 0.0 {
		t.Fatalf("unsubscribed: %v", m)
	}
	e.hub.PublishPrices(time.Now(), "b", tick(2))
	c.quiet()
	// Unsubscribing again is harmless.
	c.send(`{"type":"unsubscribe","channel":"prices","coins":["btc"]}`)
	c.expect("unsubscribed")
	e.hub.mu.RLock()
	n := len(e.hub.coins)
	e.hub.mu.RUnlock()
	if n != 0 {
		t.Fatalf("%d coins still indexed", n)
	}
}

func TestSubscriptionsAreIndependentPerConnection(t *testing.T) {
	e := newEnv(t, Config{})
	a := e.dialWelcome(t, "sk_user1_live")
	b := e.dialWelcome(t, "sk_user1_live")
	d := e.dialWelcome(t, "sk_user2_live")
	a.send(`{"type":"subscribe","channel":"prices","coins":["btc","eth"]}`)
	a.expect("subscribed")
	b.send(`{"type":"subscribe","channel":"prices","coins":["eth","btc"]}`)
	b.expect("subscribed")
	d.send(`{"type":"subscribe","channel":"prices","coins":["sol"]}`)
	d.expect("subscribed")
	a.send(`{"type":"unsubscribe","channel":"prices","coins":["btc"]}`)
	a.expect("unsubscribed")
	e.hub.PublishPrices(time.Now(), "a", tick(1))
	for _, x := range []struct {
		c    *client
		want string
	}{{a, "[ethereum]"}, {b, "[bitcoin ethereum]"}, {d, "[solana]"}} {
		if got := coinsOf(t, x.c.expect("prices")); fmt.Sprint(got) != x.want {
			t.Fatalf("updates of %v, want %s", got, x.want)
		}
	}
	// Closing a connection leaves the others' subscriptions intact.
	b.ws.Close(websocket.StatusNormalClosure, "")
	if err := e.serveErr(t); err != nil {
		t.Fatalf("Serve after a normal close: %v", err)
	}
	e.hub.PublishPrices(time.Now(), "b", tick(2))
	if got := coinsOf(t, a.expect("prices")); fmt.Sprint(got) != "[ethereum]" {
		t.Fatalf("updates of %v", got)
	}
}

func TestAlertsOnlyToOwnerAndMode(t *testing.T) {
	e := newEnv(t, Config{})
	owner := e.dialWelcome(t, "sk_user1_live")
	owner2 := e.dialWelcome(t, "sk_user1_live")
	sandbox := e.dialWelcome(t, "sk_user1_test")
	other := e.dialWelcome(t, "sk_user2_live")
	unsubscribed := e.dialWelcome(t, "sk_user1_live")
	for _, c := range []*client{owner, owner2, sandbox, other} {
		c.send(`{"type":"subscribe","channel":"alerts","id":"al"}`)
		if m := c.expect("subscribed"); m["channel"] != "alerts" || m["id"] != "al" || m["coins"] != nil {
			t.Fatalf("subscribed: %v", m)
		}
	}
	alert := []byte("{\n  \"id\": 42,\n  \"coin_id\": \"bitcoin\",\n  \"target_price\": 100000\n}")
	e.hub.PublishAlert(1, "live", 42, alert)
	for _, c := range []*client{owner, owner2} {
		m := c.expect("alert.triggered")
		if m["alert_id"] != 42.0 || fmt.Sprint(m["alert"]) != "map[coin_id:bitcoin id:42 target_price:100000]" {
			t.Fatalf("alert message %v", m)
		}
	}
	for _, c := range []*client{sandbox, other, unsubscribed} {
		c.quiet()
	}
	e.hub.PublishAlert(1, "test", 43, []byte(`{"id":43}`))
	if m := sandbox.expect("alert.triggered"); m["alert_id"] != 43.0 {
		t.Fatalf("alert message %v", m)
	}
	owner.quiet()

	owner.send(`{"type":"unsubscribe","channel":"alerts"}`)
	owner.expect("unsubscribed")
	e.hub.PublishAlert(1, "live", 44, []byte(`{"id":44}`))
	owner.quiet()
	owner2.expect("alert.triggered")

	// Not a JSON object: not sent.
	e.hub.PublishAlert(1, "live", 45, []byte(`{"id":`))
	e.hub.PublishAlert(1, "live", 45, []byte(`null`))
	owner2.quiet()
}

func TestHeartbeat(t *testing.T) {
	e := newEnv(t, Config{Heartbeat: 30 * time.Millisecond})
	c := e.dialWelcome(t, "sk_user1_live")
	var times []time.Time
	for len(times) < 3 {
		m, err := c.read(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m["type"] != "heartbeat" {
			t.Fatalf("got %v, want a heartbeat", m)
		}
		tm, err := time.Parse(time.RFC3339, m["time"].(string))
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, tm)
	}
	if !slices.IsSortedFunc(times, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Fatalf("heartbeat times %v", times)
	}
}

func TestNoHeartbeatBeforeAuth(t *testing.T) {
	e := newEnv(t, Config{Heartbeat: 10 * time.Millisecond})
	c := e.dial(t, "")
	time.Sleep(100 * time.Millisecond)
	c.send(`{"type":"auth","api_key":"sk_user1_live"}`)
	c.expect("welcome") // sequence 1: no heartbeat came first
}

func TestFirstMessageAuth(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.dial(t, "")
	c.send(`{"type":"auth","api_key":"sk_user2_live","id":"hello"}`)
	m := c.expect("welcome")
	if m["id"] != "hello" || m["mode"] != "live" || m["sequence"] != 1.0 {
		t.Fatalf("welcome %v", m)
	}
	c.send(`{"type":"subscribe","channel":"alerts"}`)
	c.expect("subscribed")
	e.hub.PublishAlert(2, "live", 7, []byte(`{"id":7}`))
	c.expect("alert.triggered")
	// A second auth is an error, not the end.
	c.send(`{"type":"auth","api_key":"sk_user1_live"}`)
	c.expectError("VALIDATION_ERROR")
	c.quiet()
}

func TestFirstMessageAuthFailures(t *testing.T) {
	cases := []struct {
		name, first, code string
		status            websocket.StatusCode
		reason            string
	}{
		{"bad key", `{"type":"auth","api_key":"sk_nope"}`, "INVALID_API_KEY", websocket.StatusPolicyViolation, "authentication failed"},
		{"not auth", `{"type":"subscribe","channel":"alerts"}`, "INVALID_API_KEY", websocket.StatusPolicyViolation, "authentication required"},
		{"bad JSON", `{"type":"auth",`, "VALIDATION_ERROR", websocket.StatusPolicyViolation, "authentication required"},
		{"empty key", `{"type":"auth","api_key":""}`, "VALIDATION_ERROR", websocket.StatusPolicyViolation, "authentication required"},
		{"server error", `{"type":"auth","api_key":"sk_broken"}`, "SERVER_ERROR", websocket.StatusInternalError, "internal error"},
		// A rate limit passes: 1013, not 1008, which tells a client not to retry.
		{"rate limited", `{"type":"auth","api_key":"sk_busy"}`, "RATE_LIMIT_EXCEEDED", websocket.StatusTryAgainLater, "rate limit exceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			c := e.dial(t, "")
			c.send(tc.first)
			m := c.expectError(tc.code)
			if tc.code == "SERVER_ERROR" && strings.Contains(fmt.Sprint(m), "database") {
				t.Fatalf("internals leak: %v", m)
			}
			c.expectClose(tc.status, tc.reason)
			if err := e.serveErr(t); err == nil {
				t.Fatal("Serve returned nil after a failed authentication")
			}
		})
	}
}

func TestAuthTimeout(t *testing.T) {
	e := newEnv(t, Config{AuthTimeout: 50 * time.Millisecond})
	c := e.dial(t, "")
	c.expectError("INVALID_API_KEY")
	c.expectClose(websocket.StatusPolicyViolation, "authentication timeout")
}

func TestFirstMessageAuthDisabled(t *testing.T) {
	e := newEnv(t, Config{})
	e.hub.cfg.Authenticate = nil
	c := e.dial(t, "")
	c.send(`{"type":"auth","api_key":"sk_user1_live"}`)
	c.expectError("INVALID_API_KEY")
	c.expectClose(websocket.StatusPolicyViolation, "authentication failed")
}

func TestMalformedMessages(t *testing.T) {
	e := newEnv(t, Config{MaxSubscriptions: 3})
	c := e.dialWelcome(t, "sk_user1_live")
	cases := []struct {
		msg, code, field string
	}{
		{`nonsense`, "VALIDATION_ERROR", "message"},
		{`{"type":"ping"`, "VALIDATION_ERROR", "message"},
		{`[1,2]`, "VALIDATION_ERROR", "message"},
		{`{"type":"dance","id":"x"}`, "VALIDATION_ERROR", "type"},
		{`{"type":7}`, "VALIDATION_ERROR", "type"},
		{`{"Type":"ping"}`, "VALIDATION_ERROR", "Type"},
		{`{"type":"ping","extra":1}`, "VALIDATION_ERROR", "extra"},
		{`{"type":"ping","type":"ping"}`, "VALIDATION_ERROR", "type"},
		{`{"type":"subscribe","channel":"news"}`, "VALIDATION_ERROR", "channel"},
		{`{"type":"subscribe","channel":"prices"}`, "VALIDATION_ERROR", "coins"},
		{`{"type":"subscribe","channel":"prices","coins":"btc"}`, "VALIDATION_ERROR", "coins"},
		{`{"type":"subscribe","channel":"prices","coins":[1]}`, "VALIDATION_ERROR", "coins[0]"},
		{`{"type":"subscribe","channel":"prices","coins":[]}`, "VALIDATION_ERROR", "coins"},
		{`{"type":"subscribe","channel":"alerts","coins":["btc"]}`, "VALIDATION_ERROR", "coins"},
		{`{"type":"subscribe","channel":"prices","coins":["btc","nope"]}`, "RESOURCE_NOT_FOUND", "coins[1]"},
		{`{"type":"subscribe","channel":"prices","coins":["btc","eth","sol","ada"]}`, "VALIDATION_ERROR", "coins"},
		{`{"type":"ping","id":{"a":1}}`, "VALIDATION_ERROR", "id"},
		{`{"type":"subscribe","channel":"prices","coins":["` + strings.Repeat("x", 17000) + `"]}`, "PAYLOAD_TOO_LARGE", ""},
	}
	for _, tc := range cases {
		c.send(tc.msg)
		m := c.expectError(tc.code)
		if tc.field != "" {
			ds, _ := m["details"].([]any)
			if len(ds) == 0 || ds[0].(map[string]any)["field"] != tc.field {
				t.Errorf("%.60s: details %v, want field %s", tc.msg, m["details"], tc.field)
			}
		}
	}
	// The id is echoed when it could be read.
	c.send(`{"id":"q","type":"pong"}`)
	if m := c.expectError("VALIDATION_ERROR"); m["id"] != "q" {
		t.Fatalf("error without the id: %v", m)
	}
	// Binary frames are refused.
	if err := c.ws.Write(context.Background(), websocket.MessageBinary, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	c.expectError("VALIDATION_ERROR")

	// Nothing was subscribed by the failures, and the connection works.
	c.send(`{"type":"subscribe","channel":"prices","coins":["btc","eth","sol"]}`)
	if m := c.expect("subscribed"); m["subscription_count"] != 3.0 {
		t.Fatalf("subscribed %v", m)
	}
	c.send(`{"type":"subscribe","channel":"prices","coins":["ada"]}`)
	c.expectError("VALIDATION_ERROR")
	e.hub.PublishPrices(time.Now(), "s", tick(0))
	if got := coinsOf(t, c.expect("prices")); fmt.Sprint(got) != "[bitcoin ethereum solana]" {
		t.Fatalf("updates of %v", got)
	}
	c.send(`{"type":"ping","id":1.5e3}`)
	if m := c.expect("pong"); m["id"] != 1500.0 {
		t.Fatalf("pong %v", m)
	}
}

func TestHugeMessageCloses(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.dialWelcome(t, "sk_user1_live")
	c.send(`{"type":"ping","id":"` + strings.Repeat("x", HardMessageBytes) + `"}`)
	c.expectClose(websocket.StatusMessageTooBig, "")
}

func TestAbusiveClientClosed(t *testing.T) {
	e := newEnv(t, Config{MaxInvalidMessages: 5})
	c := e.dialWelcome(t, "sk_user1_live")
	for range 6 {
		c.send(`{"type":"nope"}`)
	}
	for range 6 {
		c.expectError("VALIDATION_ERROR")
	}
	c.expectClose(websocket.StatusPolicyViolation, "too many invalid messages")
	if err := e.serveErr(t); !errors.Is(err, errAbusive) {
		t.Fatalf("Serve returned %v", err)
	}
}

func TestSlowClientDropped(t *testing.T) {
	e := newEnv(t, Config{SendQueue: 4, WriteTimeout: time.Second, Heartbeat: -1})
	coins := make([]string, 0, 500)
	for i := range 500 {
		coins = append(coins, fmt.Sprintf("coin-%03d", i))
	}
	e.hub.cfg.Resolve = nil // any coin
	sub := `{"type":"subscribe","channel":"prices","coins":["` + strings.Join(coins, `","`) + `"]}`

	slow := e.dial(t, "sk_user1_live") // never reads
	slow.send(sub)
	fast := e.dialWelcome(t, "sk_user2_live")
	fast.send(sub)
	fast.expect("subscribed")
	time.Sleep(50 * time.Millisecond) // let the slow one's subscription land

	updates := make([]PriceUpdate, len(coins))
	for i, id := range coins {
		updates[i] = PriceUpdate{CoinID: id, Symbol: id, Price: float64(i), LastUpdated: time.Now()}
	}
	// Each tick is published once the fast client has read the previous
	// one; the slow client's socket buffers and queue fill up meanwhile.
	var worst time.Duration
	ticks := 0
	for ; ticks < 3000; ticks++ {
		start := time.Now()
		e.hub.PublishPrices(start, fmt.Sprint(ticks), updates)
		m, err := fast.read(5 * time.Second)
		if err != nil {
			t.Fatalf("fast client, tick %d: %v", ticks, err)
		}
		if m["type"] != "prices" || m["snapshot"] != fmt.Sprint(ticks) {
			t.Fatalf("fast client got %v %v for tick %d", m["type"], m["snapshot"], ticks)
		}
		worst = max(worst, time.Since(start))
		if e.hub.Len() == 1 {
			break // dropped
		}
	}
	t.Logf("slow client dropped after %d ticks; the fast client waited at most %v for a tick", ticks, worst)
	if worst > time.Second {
		t.Errorf("the fast client waited %v for a tick", worst)
	}
	if err := e.serveErr(t); !errors.Is(err, errTooSlow) {
		t.Fatalf("Serve returned %v, want errTooSlow", err)
	}
	e.waitLen(t, 1)
	// The slow client finds its connection closed once it reads.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		if _, _, err := slow.ws.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatal("the slow client's connection is still open")
			}
			break
		}
	}
}

// A client that reads promptly is not dropped as too slow however fast it
// sends: its messages wait, unread, while the queue is half full of
// replies, rather than overflowing it.
func TestPipelinedMessagesAreNotTooSlow(t *testing.T) {
	e := newEnv(t, Config{SendQueue: 8, Heartbeat: -1})
	c := e.dialWelcome(t, "sk_user1_live")
	const n = 2000
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := range n {
			_, data, err := c.ws.Read(ctx)
			if err != nil {
				got <- fmt.Errorf("reply %d: %w", i+1, err)
				return
			}
			if !strings.Contains(string(data), `"type":"pong"`) && !strings.Contains(string(data), `"type":"subscribed"`) {
				got <- fmt.Errorf("reply %d: %s", i+1, data)
				return
			}
		}
		got <- nil
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		msg := fmt.Sprintf(`{"type":"ping","id":%d}`, i)
		if i%2 == 1 {
			msg = `{"type":"subscribe","channel":"prices","coins":["bitcoin"]}`
		}
		if err := c.ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("send %d: %v", i+1, err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if e.hub.Len() != 1 {
		t.Fatalf("%d connections, want the client's", e.hub.Len())
	}
}

func TestCloseClosesEveryone(t *testing.T) {
	e := newEnv(t, Config{})
	var cs []*client
	for range 5 {
		cs = append(cs, e.dialWelcome(t, "sk_user1_live"))
	}
	cs = append(cs, e.dial(t, "")) // not authenticated yet
	// The client's handshake ends before the server registers the
	// connection, so the sixth may take a moment to count.
	e.waitLen(t, 6)
	// Two callers: neither returns before every connection has ended,
	// which takes the clients' answers to the close.
	done, again := make(chan struct{}), make(chan struct{})
	go func() { e.hub.Close(); close(done) }()
	go func() { e.hub.Close(); close(again) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("Close returned before the clients answered the close")
	case <-again:
		t.Fatal("the second Close returned before the clients answered the close")
	default:
	}
	for _, c := range cs {
		c.expectClose(websocket.StatusGoingAway, "server shutting down")
	}
	<-done
	<-again
	if n := e.hub.Len(); n != 0 {
		t.Fatalf("Len = %d after Close", n)
	}
	for range 6 {
		if err := e.serveErr(t); err != nil {
			t.Fatalf("Serve returned %v after Close", err)
		}
	}
	// Later connections are turned away.
	late := e.dial(t, "sk_user1_live")
	late.expectClose(websocket.StatusGoingAway, "server shutting down")
	e.hub.Close() // idempotent
}

func TestDisconnectKey(t *testing.T) {
	e := newEnv(t, Config{})
	a := e.dialWelcome(t, "sk_user1_live")
	b := e.dialWelcome(t, "sk_user1_test")
	if n := e.hub.DisconnectKey(11, coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "The API key was revoked."), "api key revoked"); n != 1 {
		t.Fatalf("DisconnectKey = %d", n)
	}
	a.expectError("INVALID_API_KEY")
	a.expectClose(websocket.StatusPolicyViolation, "api key revoked")
	b.quiet()
}

func TestManyConnectionsNoLeak(t *testing.T) {
	checkGoroutines(t)
	e := newEnv(t, Config{AuthTimeout: 100 * time.Millisecond, SendQueue: 2})
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			c := e.dial(t, "")
			switch i % 3 {
			case 0:
				c.send(`{"type":"auth","api_key":"sk_user1_live"}`)
				c.expect("welcome")
				c.send(`{"type":"subscribe","channel":"prices","coins":["btc"]}`)
				c.expect("subscribed")
				c.ws.Close(websocket.StatusNormalClosure, "")
			case 1:
				c.ws.CloseNow() // vanishes
			case 2:
				c.expectClose(websocket.StatusPolicyViolation, "authentication timeout")
			}
		})
	}
	wg.Wait()
	e.waitLen(t, 0)
}

// waitLen waits up to 10 seconds for the hub to hold n connections.
func (e *env) waitLen(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.hub.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("Len = %d, want %d", e.hub.Len(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChurnOrdering subscribes and unsubscribes at random while ticks
// flow, and checks that a client never gets prices of a coin outside its
// subscriptions as its replies describe them: no prices of a coin before
// its "subscribed" or after its "unsubscribed".
func TestChurnOrdering(t *testing.T) {
	e := newEnv(t, Config{Heartbeat: 5 * time.Millisecond})
	stop := make(chan struct{})
	var pub sync.WaitGroup
	pub.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			e.hub.PublishPrices(time.Now(), fmt.Sprint(n), tick(n%50))
			time.Sleep(200 * time.Microsecond)
		}
	})
	ids := []string{"bitcoin", "ethereum", "solana", "cardano", "ripple"}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			c := e.dialWelcome(t, "sk_user1_live")
			subs := map[string]bool{}
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for op := range 40 {
				coin := ids[r.IntN(len(ids))]
				typ := "subscribe"
				if r.IntN(2) == 0 {
					typ = "unsubscribe"
				}
				c.send(fmt.Sprintf(`{"type":%q,"channel":"prices","coins":[%q],"id":%d}`, typ, coin, op))
				for {
					m := c.next()
					switch m["type"] {
					case "prices":
						for _, id := range coinsOf(t, m) {
							if !subs[id] {
								t.Errorf("client %d: prices of %s, not subscribed (%v)", w, id, subs)
								return
							}
						}
						continue
					case "subscribed", "unsubscribed":
						if m["id"] != float64(op) {
							t.Errorf("reply %v to op %d", m, op)
							return
						}
						subs[coin] = m["type"] == "subscribed"
					default:
						t.Errorf("got %v", m)
						return
					}
					break
				}
			}
			if w%2 == 0 {
				c.ws.CloseNow() // leave abruptly while ticks flow
			}
		})
	}
	wg.Wait()
	close(stop)
	pub.Wait()
}

func TestUnknownCoins(t *testing.T) {
	e := newEnv(t, Config{Resolve: func(s string) (string, error) {
		if s == "ripple" { // delisted
			return "", errors.New("unknown")
		}
		return testResolve(s)
	}})
	c := e.dialWelcome(t, "sk_user1_live")
	c.send(`{"type":"subscribe","channel":"prices","coins":["btc","nope","eth","zilch"]}`)
	m := c.expectError("RESOURCE_NOT_FOUND")
	if m["message"] != `2 coins were not found: "nope", "zilch".` || len(m["details"].([]any)) != 2 {
		t.Fatalf("error %v", m)
	}
	c.send(`{"type":"subscribe","channel":"prices","coins":["btc","bitcoin","BTC"]}`)
	if m := c.expect("subscribed"); fmt.Sprint(m["coins"]) != "[bitcoin]" || m["subscription_count"] != 1.0 {
		t.Fatalf("subscribed %v", m)
	}
	// A coin the market no longer knows can still be left by its id.
	e.hub.mu.Lock()
	e.hub.addCoin(firstConn(e.hub), "ripple")
	e.hub.mu.Unlock()
	c.send(`{"type":"unsubscribe","channel":"prices","coins":["ripple"]}`)
	if m := c.expect("unsubscribed"); fmt.Sprint(m["coins"]) != "[ripple]" || m["subscription_count"] != 1.0 {
		t.Fatalf("unsubscribed %v", m)
	}
	c.send(`{"type":"unsubscribe","channel":"prices","coins":["ripple"]}`)
	c.expectError("RESOURCE_NOT_FOUND")
}

func firstConn(h *Hub) *conn {
	for c := range h.conns {
		return c
	}
	return nil
}

// Upgraded is called once a connection is upgraded, once, with the
// request's context, before the welcome of a key in the headers and
// before the auth message of a key in the first message.
func TestUpgradedCalledOnce(t *testing.T) {
	var calls atomic.Int32
	withRequest := make(chan bool, 10)
	e := newEnv(t, Config{Upgraded: func(ctx context.Context) {
		calls.Add(1)
		withRequest <- ctx.Value(http.ServerContextKey) != nil
	}})
	for _, key := range []string{"sk_user1_live", ""} {
		calls.Store(0)
		c := e.dial(t, key)
		if key == "" {
			if !<-withRequest {
				t.Errorf("key %q: Upgraded got a context without the request's values", key)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("key %q: Upgraded called %d times before the auth message; want 1", key, n)
			}
			c.send(`{"type":"auth","api_key":"sk_user2_live"}`)
			c.expect("welcome")
		} else {
			c.expect("welcome")
			if n := calls.Load(); n != 1 {
				t.Errorf("key %q: Upgraded called %d times before the welcome; want 1", key, n)
			}
			if !<-withRequest {
				t.Errorf("key %q: Upgraded got a context without the request's values", key)
			}
		}
		c.quiet()
		c.ws.Close(websocket.StatusNormalClosure, "")
		if err := <-e.errs; err != nil {
			t.Errorf("key %q: Serve: %v", key, err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("key %q: Upgraded called %d times in all; want 1", key, n)
		}
	}
}

// A client that breaks RFC 6455 is failed with the status the RFC names:
// an unmasked frame 1002 (the library refuses it without closing), a text
// message that is not UTF-8 1007.
func TestProtocolViolationsClose(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frame  func(payload []byte) []byte
		status websocket.StatusCode
	}{
		{"unmasked", func(p []byte) []byte { return append([]byte{0x81, byte(len(p))}, p...) }, websocket.StatusProtocolError},
		{"not UTF-8", func(p []byte) []byte {
			p = append(p[:len(p):len(p)], 0xc3, 0x28)
			out := []byte{0x81, 0x80 | byte(len(p)), 1, 2, 3, 4}
			for i, b := range p {
				out = append(out, b^byte(i%4+1))
			}
			return out
		}, websocket.StatusInvalidFramePayloadData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-API-Key: sk_user1_live\r\n\r\n")
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("handshake: %v %v", res, err)
			}
			conn.Write(tc.frame([]byte(`{"type":"ping"}`)))
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			// Frames until the close: the welcome, perhaps a pong.
			for {
				var h [2]byte
				if _, err := io.ReadFull(br, h[:]); err != nil {
					t.Fatalf("no close frame: %v", err)
				}
				n := int(h[1] & 0x7f)
				if n == 126 {
					var l [2]byte
					io.ReadFull(br, l[:])
					n = int(l[0])<<8 | int(l[1])
				}
				body := make([]byte, n)
				if _, err := io.ReadFull(br, body); err != nil {
					t.Fatal(err)
				}
				if h[0]&0x0f == 0x8 { // close
					if len(body) < 2 || websocket.StatusCode(int(body[0])<<8|int(body[1])) != tc.status {
						t.Fatalf("close frame %q, want status %d", body, tc.status)
					}
					return
				}
			}
		})
	}
}

// A client's messages are paced: MessageBurst at once, then MessageRate
// a second, each waiting unread; none is refused or lost (a security
// audit: a stream of 1,000-coin subscriptions took the server's CPU).
func TestMessagesArePaced(t *testing.T) {
	e := newEnv(t, Config{Heartbeat: -1, MessageRate: 20, MessageBurst: 5})
	c := e.dialWelcome(t, "sk_user1_live")
	const n = 25
	start := time.Now()
	for i := range n {
		c.send(fmt.Sprintf(`{"type":"ping","id":%d}`, i))
	}
	for i := range n {
		if m := c.expect("pong"); m["id"] != float64(i) {
			t.Fatalf("pong %d: %v", i, m)
		}
	}
	// 5 at once, then 20 more at 20 a second: about a second.
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("%d messages answered in %s, want about 1 s at 20 a second past a burst of 5", n, took)
	}
}
