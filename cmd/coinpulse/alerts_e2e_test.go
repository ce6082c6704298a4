package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"coinpulse/internal/notify"
)

// Alerts and webhooks end to end: `coinpulse serve` processes on SQLite or
// PostgreSQL, stopped and restarted, delivering to a webhook receiver in
// the test process (serve runs with --webhook-allow-private to reach it).

// call sends a request to p; numbers in the answer stay json.Number.
func (p *proc) call(t *testing.T, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, p.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	dec := json.NewDecoder(res.Body)
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return res.StatusCode, out
}

// data calls p and returns the data of a response with status want.
func (p *proc) data(t *testing.T, want int, method, path, key, body string) map[string]any {
	t.Helper()
	status, out := p.call(t, method, path, key, body)
	data, _ := out["data"].(map[string]any)
	if status != want || data == nil {
		t.Fatalf("%s %s: %d %v, want %d", method, path, status, out, want)
	}
	return data
}

// list is data for a list response.
func (p *proc) list(t *testing.T, path, key string) []map[string]any {
	t.Helper()
	status, out := p.call(t, "GET", path, key, "")
	items, ok := out["data"].([]any)
	if status != 200 || !ok {
		t.Fatalf("GET %s: %d %v", path, status, out)
	}
	ms := make([]map[string]any, len(items))
	for i, it := range items {
		ms[i] = it.(map[string]any)
	}
	return ms
}

// alertKey creates a pro account on db with the CLI and returns its live
// key (pro's rolling windows are widened by generousPlans).
func alertKey(t *testing.T, db string) string {
	t.Helper()
	env := map[string]string{"COINPULSE_DB": db}
	mustCLI(t, env, "users", "create", "--email", "alerts@example.com", "--tier", "pro")
	return strings.TrimSpace(mustCLI(t, env, "keys", "create", "--email", "alerts@example.com"))
}

// e2eHit is a request the e2e receiver got.
type e2eHit struct {
	header http.Header
	body   []byte
	at     time.Time
}

// e2eReceiver is a webhook endpoint in the test process; hang, when set,
// decides whether to hold request n (from 0) until its client goes away.
type e2eReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	hits    []e2eHit
	hang    func(n int) bool
	arrived chan int // each request's number, as it arrives
}

func newE2EReceiver(t *testing.T, hang func(n int) bool) *e2eReceiver {
	t.Helper()
	rc := &e2eReceiver{hang: hang, arrived: make(chan int, 1000)}
	release := make(chan struct{})
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.hits)
		rc.hits = append(rc.hits, e2eHit{header: r.Header.Clone(), body: body, at: time.Now()})
		rc.mu.Unlock()
		rc.arrived <- n
		if rc.hang != nil && rc.hang(n) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rc.srv.Close)
	t.Cleanup(func() { close(release) })
	return rc
}

func (rc *e2eReceiver) got() []e2eHit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]e2eHit(nil), rc.hits...)
}

// wait waits up to d for the receiver to have n requests.
func (rc *e2eReceiver) wait(t *testing.T, n int, d time.Duration) []e2eHit {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(rc.got()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver got %d requests in %s, want %d", len(rc.got()), d, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rc.got()
}

// steady checks that the receiver gets no more than n requests while
// serve ticks (--refresh 1s) for d.
func (rc *e2eReceiver) steady(t *testing.T, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if got := len(rc.got()); got != n {
			t.Fatalf("the receiver got %d requests, want %d", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bitcoinPrice is the current price of bitcoin on p.
func bitcoinPrice(t *testing.T, p *proc, key string) float64 {
	t.Helper()
	c := p.data(t, 200, "GET", "/api/v1/coins/bitcoin", key, "")
	price, err := c["current_price"].(json.Number).Float64()
	if err != nil || price <= 0 {
		t.Fatalf("bitcoin price %v: %v", c["current_price"], err)
	}
	return price
}

// crossedAlert creates an alert above half the current price of bitcoin:
// the next tick fires it (the sim feed does not halve a price in a run).
func crossedAlert(t *testing.T, p *proc, key string) string {
	t.Helper()
	target := strconv.FormatFloat(bitcoinPrice(t, p, key)/2, 'f', 2, 64)
	a := p.data(t, 201, "POST", "/api/v1/alerts", key, `{"coin_id":"bitcoin","target_price":"`+target+`","condition":"above"}`)
	if a["is_active"] != true {
		t.Fatalf("created %v", a)
	}
	return a["id"].(json.Number).String()
}

// checkDelivery verifies a delivery's signature and that it is the
// firing of alert id; it returns its webhook-id.
func checkDelivery(t *testing.T, h e2eHit, secret, alertID string, timestamp bool) string {
	t.Helper()
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	verify := v.Verify
	if !timestamp {
		verify = v.VerifyIgnoringTimestamp
	}
	if err := verify(h.body, h.header); err != nil {
		t.Errorf("signature: %v", err)
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Alert struct {
				ID             json.Number  `json:"id"`
				IsActive       bool         `json:"is_active"`
				TriggeredPrice *json.Number `json:"triggered_price"`
			} `json:"alert"`
			Price json.Number `json:"price"`
		} `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(h.body))
	dec.UseNumber()
	if err := dec.Decode(&ev); err != nil || ev.Type != "alert.triggered" || ev.Data.Alert.ID.String() != alertID || ev.Data.Alert.IsActive ||
		ev.Data.Alert.TriggeredPrice == nil || *ev.Data.Alert.TriggeredPrice != ev.Data.Price {
		t.Errorf("payload %s (%v), want alert %s fired", h.body, err, alertID)
	}
	return h.header.Get("webhook-id")
}

// An alert armed before a stop fires, once, at the first tick after the
// restart, and its webhook arrives once.
func TestAlertFiresOnceAfterRestart(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "coinpulse.db")
	key := alertKey(t, db)
	args := []string{"--db", db, "--plans", generousPlans(t), "--webhook-allow-private"}
	// Quoting every hour (on the hour), the first server ticks once, at
	// its start: the alert it arms cannot fire before it stops.
	p := startProc(t, append(args, "--refresh", "1h")...)
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 90*time.Second {
		time.Sleep(left + 2*time.Second) // let the hour's tick pass first
	}
	// The evaluator takes the start's snapshot after the node is ready:
	// an alert armed before it has would be crossed by its prices (a CI
	// run under load saw it fire so). It logs loading the index as it
	// takes the snapshot, and ticks it at once.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.stderr.String(), "alert index loaded"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the evaluator took no snapshot in 30 s:\n%s", p.stderr)
		}
	}
	time.Sleep(100 * time.Millisecond)
	rc := newE2EReceiver(t, nil)
	hook := p.data(t, 201, "POST", "/api/v1/webhooks", key, `{"url":"`+rc.srv.URL+`/hook"}`)
	secret, hookID := hook["secret"].(string), hook["id"].(json.Number).String()
	id := crossedAlert(t, p, key)
	if a := p.data(t, 200, "GET", "/api/v1/alerts/"+id, key, ""); a["is_active"] != true || a["triggered_at"] != nil {
		t.Fatalf("before the stop: %v", a)
	}
	p.term(t)
	if n := len(rc.got()); n != 0 {
		t.Fatalf("the alert fired before the stop (%d deliveries)", n)
	}

	restart := time.Now().UTC()
	p2 := startProc(t, append(args, "--refresh", "1s")...)
	h := rc.wait(t, 1, 30*time.Second)[0]
	msgID := checkDelivery(t, h, secret, id, true)
	a := p2.data(t, 200, "GET", "/api/v1/alerts/"+id, key, "")
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(a["triggered_at"]))
	if a["is_active"] != false || err != nil || at.Before(restart.Add(-time.Second)) || a["triggered_price"] == nil {
		t.Fatalf("after the restart: %v (triggered_at %v, restarted at %s)", a, err, restart)
	}
	// More ticks fire nothing more.
	rc.steady(t, 1, 3*time.Second)
	if again := p2.data(t, 200, "GET", "/api/v1/alerts/"+id, key, ""); again["triggered_at"] != a["triggered_at"] {
		t.Errorf("triggered_at moved from %v to %v", a["triggered_at"], again["triggered_at"])
	}
	ds := p2.list(t, "/api/v1/webhooks/"+hookID+"/deliveries", key)
	if len(ds) != 1 || ds[0]["status"] != "delivered" || ds[0]["event_id"] != msgID || fmt.Sprint(ds[0]["alert_id"]) != id {
		t.Errorf("delivery log %v", ds)
	}
	p2.term(t)
}

// A delivery in flight when serve stops (SIGTERM) or dies (SIGKILL) is
// sent again after the restart, once its lease ends, with the same
// webhook-id.
func TestWebhookRetriedAfterRestartMidDelivery(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			db := "sqlite:" + filepath.Join(t.TempDir(), "coinpulse.db")
			key := alertKey(t, db)
			const lease = 15 * time.Second // the shortest --delivery-lease
			args := []string{"--db", db, "--plans", generousPlans(t), "--webhook-allow-private", "--delivery-lease", lease.String()}
			p := startProc(t, args...)
			rc := newE2EReceiver(t, func(n int) bool { return n == 0 }) // the first request hangs
			hook := p.data(t, 201, "POST", "/api/v1/webhooks", key, `{"url":"`+rc.srv.URL+`/hook"}`)
			secret, hookID := hook["secret"].(string), hook["id"].(json.Number).String()
			id := crossedAlert(t, p, key)
			select {
			case <-rc.arrived:
			case <-time.After(30 * time.Second):
				t.Fatal("no delivery within 30 s")
			}
			// Stop serve while the attempt hangs.
			stopped := time.Now()
			if sig == syscall.SIGTERM {
				p.term(t)
				if took := time.Since(stopped); took > 10*time.Second {
					t.Errorf("graceful shutdown took %s with a hung delivery", took)
				}
			} else {
				p.cmd.Process.Kill()
				<-p.exited
			}
			p2 := startProc(t, args...)
			hits := rc.wait(t, 2, lease+30*time.Second)
			first, second := hits[0], hits[1]
			if id1, id2 := checkDelivery(t, first, secret, id, true), checkDelivery(t, second, secret, id, true); id1 != id2 || id1 == "" {
				t.Errorf("webhook-id %s, then %s after the restart; want the same", id1, id2)
			}
			if !bytes.Equal(first.body, second.body) {
				t.Errorf("the body changed:\n%s\n%s", first.body, second.body)
			}
			// Not sent again before the lease ended (it was claimed just
			// before the first request arrived).
			if gap := second.at.Sub(first.at); gap < lease-time.Second {
				t.Errorf("sent again %s after the first attempt, within the %s lease", gap, lease)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				ds := p2.list(t, "/api/v1/webhooks/"+hookID+"/deliveries", key)
				if len(ds) != 1 {
					t.Fatalf("delivery log %v, want one delivery", ds)
				}
				if ds[0]["status"] == "delivered" {
					if ds[0]["event_id"] != first.header.Get("webhook-id") || fmt.Sprint(ds[0]["last_status_code"]) != "200" {
						t.Errorf("delivery %v", ds[0])
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("delivery still %v", ds[0])
				}
				time.Sleep(50 * time.Millisecond)
			}
			// The alert fired before the stop; the restart fires nothing.
			if a := p2.data(t, 200, "GET", "/api/v1/alerts/"+id, key, ""); a["is_active"] != false || a["triggered_at"] == nil {
				t.Errorf("alert after the restart: %v", a)
			}
			rc.steady(t, 2, 2*time.Second)
			p2.term(t)
		})
	}
}

// Two nodes on one PostgreSQL database both evaluate every alert: each
// fires once, with one triggered_at and one delivery.
func TestAlertFiresOnceAcrossTwoNodes(t *testing.T) {
	db := postgresSchema(t)
	key := alertKey(t, db)
	args := []string{"--db", db, "--plans", generousPlans(t), "--webhook-allow-private"}
	nodes := []*proc{startProc(t, args...), startProc(t, args...)}
	rc := newE2EReceiver(t, nil)
	hook := nodes[0].data(t, 201, "POST", "/api/v1/webhooks", key, `{"url":"`+rc.srv.URL+`/hook"}`)
	secret, hookID := hook["secret"].(string), hook["id"].(json.Number).String()
	const n = 12
	ids := map[string]bool{}
	for i := range n {
		ids[crossedAlert(t, nodes[i%2], key)] = true
	}
	hits := rc.wait(t, n, 30*time.Second)
	rc.steady(t, n, 3*time.Second)
	msgIDs, fired := map[string]bool{}, map[string]bool{}
	for _, h := range rc.got() {
		var ev struct {
			Data struct {
				Alert struct {
					ID json.Number `json:"id"`
				} `json:"alert"`
			} `json:"data"`
		}
		json.Unmarshal(h.body, &ev)
		id := ev.Data.Alert.ID.String()
		msgIDs[checkDelivery(t, h, secret, id, true)] = true
		fired[id] = true
	}
	if len(hits) != n || len(msgIDs) != n || len(fired) != n {
		t.Errorf("%d deliveries, %d webhook-ids, %d alerts; want %d of each", len(hits), len(msgIDs), len(fired), n)
	}
	for id := range ids {
		if !fired[id] {
			t.Errorf("alert %s was not delivered", id)
		}
		a0 := nodes[0].data(t, 200, "GET", "/api/v1/alerts/"+id, key, "")
		a1 := nodes[1].data(t, 200, "GET", "/api/v1/alerts/"+id, key, "")
		if a0["is_active"] != false || a0["triggered_at"] == nil || a0["triggered_at"] != a1["triggered_at"] || a0["triggered_price"] != a1["triggered_price"] {
			t.Errorf("alert %s: node 0 %v, node 1 %v", id, a0, a1)
		}
	}
	ds := nodes[1].list(t, "/api/v1/webhooks/"+hookID+"/deliveries", key)
	if len(ds) != n {
		t.Errorf("%d deliveries logged, want %d", len(ds), n)
	}
	for _, d := range ds {
		if d["status"] != "delivered" || fmt.Sprint(d["attempts"]) != "1" {
			t.Errorf("delivery %v", d)
		}
	}
	for _, p := range nodes {
		p.term(t)
	}
}

// --delivery-lease (COINPULSE_DELIVERY_LEASE) defaults to the dispatcher's
// 2 minutes and may not be shorter than a webhook attempt can take.
func TestWebhookDeliveryLeaseFlag(t *testing.T) {
	none := func(string) string { return "" }
	c, err := parseServe(nil, none, io.Discard)
	if err != nil || c.deliveryLease != 2*time.Minute {
		t.Errorf("default: %v, %v", c.deliveryLease, err)
	}
	c, err = parseServe([]string{"--delivery-lease", "15s"}, none, io.Discard)
	if err != nil || c.deliveryLease != 15*time.Second {
		t.Errorf("--delivery-lease 15s: %v, %v", c.deliveryLease, err)
	}
	for _, args := range [][]string{{"--delivery-lease", "1s"}, {"--delivery-lease", "10s"}, {"--delivery-lease", "-1m"}} {
		if _, err := parseServe(args, none, io.Discard); err == nil || !strings.Contains(err.Error(), "--delivery-lease") {
			t.Errorf("%v: %v", args, err)
		}
	}
	env := func(k string) string {
		if k == "COINPULSE_DELIVERY_LEASE" {
			return "5s"
		}
		return ""
	}
	if _, err := parseServe(nil, env, io.Discard); err == nil {
		t.Error("COINPULSE_DELIVERY_LEASE=5s accepted")
	}
}

// On a server without SMTP, the firing of an alert that asked for e-mail
// tells the e-mail as undeliverable, in its webhook payload and on the
// WebSocket, as the alert itself says once the dispatcher has recorded it
// (an audit: both said pending, though it never would be sent).
func TestAlertEmailUndeliverableWithoutSMTP(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "coinpulse.db")
	key := alertKey(t, db)
	p := startProc(t, "--db", db, "--plans", generousPlans(t), "--webhook-allow-private", "--refresh", "1s")
	rc := newE2EReceiver(t, nil)
	p.data(t, 201, "POST", "/api/v1/webhooks", key, `{"url":"`+rc.srv.URL+`/hook"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/api/v1/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatalf("websocket: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribe","channel":"alerts"}`)); err != nil {
		t.Fatal(err)
	}
	target := strconv.FormatFloat(bitcoinPrice(t, p, key)/2, 'f', 2, 64)
	id := p.data(t, 201, "POST", "/api/v1/alerts", key, `{"coin_id":"bitcoin","target_price":"`+target+`","condition":"above","notify_email":true}`)["id"]

	type email struct {
		Status string `json:"email_status"`
		Error  string `json:"email_error"`
	}
	want := email{"undeliverable", notify.NoSMTP}
	var payload struct {
		Data struct{ Alert email } `json:"data"`
	}
	h := rc.wait(t, 1, 30*time.Second)[0]
	if err := json.Unmarshal(h.body, &payload); err != nil || payload.Data.Alert != want {
		t.Errorf("webhook payload %s (%v), want e-mail %+v", h.body, err, want)
	}
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("no alert.triggered on the WebSocket: %v", err)
		}
		var m struct {
			Type  string
			Alert email
		}
		if json.Unmarshal(msg, &m) == nil && m.Type == "alert.triggered" {
			if m.Alert != want {
				t.Errorf("WebSocket %s, want e-mail %+v", msg, want)
			}
			break
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a := p.data(t, 200, "GET", fmt.Sprint("/api/v1/alerts/", id), key, "")
		if got := (email{fmt.Sprint(a["email_status"]), fmt.Sprint(a["email_error"])}); got == want {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the alert's e-mail is %+v, want %+v", got, want)
		}
	}
	p.term(t)
}
