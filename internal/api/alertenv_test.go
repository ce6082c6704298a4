package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/alerting"
	"coinpulse/internal/market"
	"coinpulse/internal/meter"
	"coinpulse/internal/notify"
	"coinpulse/internal/ratelimit"
	"coinpulse/internal/sqlite"
	"coinpulse/internal/stream"
)

// The alert, webhook, delivery and WebSocket tests each run a server over
// a store of their own (so that a snapshot they make up fires only their
// alerts), wired as cmd/coinpulse's serve wires it: the API tells the
// evaluator of armings, each firing is announced to the WebSocket hub and
// wakes the dispatcher. Market data (coin ids and symbols) comes from the
// package's shared engine; prices that fire alerts come from snapshots the
// tests build and hand to the evaluator, as the engine would.

// fakeClock is a settable clock for the server and the dispatcher.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now().UTC().Truncate(time.Millisecond)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

type alertEnvOptions struct {
	plans map[coinpulse.Tier]coinpulse.Plan
	// allowPrivate lets webhook URLs (and the dispatcher's Sender) reach
	// loopback addresses, where the tests' receivers listen.
	allowPrivate bool
	// dispatch runs a notify.Dispatcher over the env's store.
	dispatch bool
	sender   notify.SenderOptions
	mailer   *notify.Mailer
	// clock, when set, is the clock of the server and the dispatcher.
	clock *fakeClock
	// metered adds the in-process limiter and a meter (writing every
	// 10 ms).
	metered bool
	// pumpPrices publishes every snapshot of the shared engine to the
	// hub, as serve's publishPrices does.
	pumpPrices bool
	// wrapStore, when set, wraps the store the server is given (not
	// env.store), e.g. to make some of its reads fail.
	wrapStore func(coinpulse.Store) coinpulse.Store
	// maxStreams is the server's MaxStreamsPerAccount; slots its
	// StreamSlots.
	maxStreams int
	slots      coinpulse.Slots
}

type alertEnv struct {
	tb    testing.TB
	ctx   context.Context
	store *sqlite.DB
	srv   *Server
	ev    *alerting.Evaluator
	hub   *stream.Hub
	clock *fakeClock
	disp  *notify.Dispatcher
	meter *meter.Meter

	snapSeq atomic.Int64
	mu      sync.Mutex
	fired   []coinpulse.Alert // every alert OnFire announced
}

func newAlertEnv(tb testing.TB, opts alertEnvOptions) *alertEnv {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		testServer(t) // loads the shared engine
	} else {
		testServer(&testing.T{})
	}
	if shared.err != nil {
		tb.Fatalf("test server: %v", shared.err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	store, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "alerts.db"))
	if err != nil {
		tb.Fatal(err)
	}
	e := &alertEnv{tb: tb, ctx: ctx, store: store, clock: opts.clock}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		if e.hub != nil {
			e.hub.Close()
		}
		if e.meter != nil {
			e.meter.Close(context.Background())
		}
		cancel()
		wg.Wait()
		store.Close()
	})
	var clock coinpulse.Clock
	if opts.clock != nil {
		clock = opts.clock.Now
	}
	e.ev = alerting.NewEvaluator(alerting.EvaluatorConfig{Store: store, Event: AlertEvent, Log: quiet})
	var srvStore coinpulse.Store = store
	if opts.wrapStore != nil {
		srvStore = opts.wrapStore(store)
	}
	cfg := Config{
		Store: srvStore, Market: shared.engine, Log: quiet, Plans: opts.plans, Clock: clock,
		AlertIndex: e.ev, WebhookAllowPrivate: opts.allowPrivate,
		Stream: stream.Config{Heartbeat: -1}, MaxStreamsPerAccount: opts.maxStreams, StreamSlots: opts.slots,
	}
	if opts.dispatch {
		so := opts.sender
		so.AllowPrivate = opts.allowPrivate
		sender := notify.NewSender(so)
		do := notify.DispatchOptions{Poll: 20 * time.Millisecond}
		if opts.clock != nil {
			do.Clock = opts.clock.Now
		}
		e.disp = notify.NewDispatcher(store, sender, opts.mailer, quiet, do)
		cfg.Deliveries = e.disp
	}
	if opts.metered {
		now := time.Now
		if clock != nil {
			now = clock
		}
		seed := func(context.Context, string, time.Time) (int64, error) { return 0, nil }
		cfg.Limiter = ratelimit.NewMemory(now, seed)
		e.meter = meter.New(store, quiet, meter.Options{Interval: 10 * time.Millisecond})
		cfg.Meter = e.meter
		wg.Go(func() { e.meter.Run(ctx) })
	}
	e.srv = New(cfg)
	e.hub = e.srv.Hub()
	e.ev.SetEntitled(e.srv.Entitlement)
	if e.disp != nil {
		e.disp.SetEntitled(e.srv.Entitlement)
		wg.Go(func() { e.disp.Run(ctx) })
	}
	wg.Go(func() { e.srv.Run(ctx) })
	// As serve's announceFirings.
	e.ev.SetOnFire(func(fired []coinpulse.Alert) {
		e.mu.Lock()
		e.fired = append(e.fired, fired...)
		e.mu.Unlock()
		if e.disp != nil {
			e.disp.Wake()
		}
		for i := range fired {
			a := &fired[i]
			e.hub.PublishAlert(a.Owner.UserID, string(a.Owner.Mode), a.ID, AlertJSON(a))
		}
	})
	if opts.pumpPrices {
		snaps := shared.engine.Subscribe()
		wg.Go(func() { pumpPrices(ctx, e.hub, snaps) })
	}
	return e
}

// pumpPrices is serve's publishPrices.
func pumpPrices(ctx context.Context, hub *stream.Hub, snaps <-chan *market.Snapshot) {
	var updates []stream.PriceUpdate
	for {
		select {
		case <-ctx.Done():
			return
		case snap := <-snaps:
			updates = updates[:0]
			for _, c := range snap.Coins() {
				updates = append(updates, stream.PriceUpdate{CoinID: c.ID, Symbol: c.Symbol, Price: c.CurrentPrice,
					PriceChangePercentage24h: c.PriceChangePercentage24h, MarketCap: c.MarketCap,
					TotalVolume: c.TotalVolume, LastUpdated: c.LastUpdated})
			}
			hub.PublishPrices(snap.AsOf, snap.ID, updates)
		}
	}
}

func (e *alertEnv) now() time.Time {
	if e.clock != nil {
		return e.clock.Now()
	}
	return time.Now().UTC()
}

var envUserSeq atomic.Int64

// user creates an account of tier in the env's store.
func (e *alertEnv) user(tier coinpulse.Tier) *coinpulse.User {
	e.tb.Helper()
	u := &coinpulse.User{Email: fmt.Sprintf("alerts-%d@example.com", envUserSeq.Add(1)), Tier: tier}
	if err := e.store.CreateUser(e.ctx, u); err != nil {
		e.tb.Fatalf("CreateUser: %v", err)
	}
	return u
}

// key creates a key for u and returns it.
func (e *alertEnv) key(u *coinpulse.User, mode coinpulse.Mode, perms coinpulse.Permissions) string {
	e.tb.Helper()
	key, rec, err := coinpulse.NewAPIKey(u.ID, "test", mode, perms)
	if err != nil {
		e.tb.Fatal(err)
	}
	if err := e.store.CreateKey(e.ctx, rec); err != nil {
		e.tb.Fatalf("CreateKey: %v", err)
	}
	return key
}

// newKey creates an account of tier and returns its live read/write key.
func (e *alertEnv) newKey(tier coinpulse.Tier) string {
	e.tb.Helper()
	return e.key(e.user(tier), coinpulse.ModeLive, rw)
}

// snapshot makes a market snapshot, as of the env's clock, holding the
// given coins (from the shared engine's market) at the given prices.
func (e *alertEnv) snapshot(prices map[string]float64) *market.Snapshot {
	e.tb.Helper()
	cur := shared.engine.Current()
	details := make([]coinpulse.CoinDetail, 0, len(prices))
	for id, p := range prices {
		c := cur.Coin(id)
		if c == nil {
			e.tb.Fatalf("no coin %q in the market", id)
		}
		d := *c
		d.CurrentPrice = p
		details = append(details, d)
	}
	return market.Build("test-"+strconv.FormatInt(e.snapSeq.Add(1), 10), e.now(), "test", true, details, nil, 0)
}

// tick evaluates a snapshot with the given prices, as the engine's
// subscription would, and returns the alerts it fired.
func (e *alertEnv) tick(prices map[string]float64) []coinpulse.Alert {
	e.tb.Helper()
	fired, err := e.ev.Evaluate(e.ctx, e.snapshot(prices))
	if err != nil {
		e.tb.Fatalf("Evaluate: %v", err)
	}
	return fired
}

// firedIDs are the ids of the alerts OnFire announced so far.
func (e *alertEnv) firedIDs() []int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]int64, len(e.fired))
	for i, a := range e.fired {
		ids[i] = a.ID
	}
	return ids
}

// jsonAlert is an alert as the API returns it.
type jsonAlert struct {
	ID             int64        `json:"id"`
	CoinID         string       `json:"coin_id"`
	CoinSymbol     string       `json:"coin_symbol"`
	TargetPrice    json.Number  `json:"target_price"`
	Condition      string       `json:"condition"`
	NotifyEmail    bool         `json:"notify_email"`
	IsActive       bool         `json:"is_active"`
	TriggeredAt    *time.Time   `json:"triggered_at"`
	TriggeredPrice *json.Number `json:"triggered_price"`
	EmailStatus    *string      `json:"email_status"`
	EmailError     *string      `json:"email_error"`
	Mode           string       `json:"mode"`
	CreatedAt      time.Time    `json:"created_at"`
	UpdatedAt      time.Time    `json:"updated_at"`
}

// String renders the alert as JSON in failure messages.
func (a jsonAlert) String() string { b, _ := json.Marshal(a); return string(b) }

// createAlert creates an alert and checks the 201.
func (e *alertEnv) createAlert(key, body string) jsonAlert {
	e.tb.Helper()
	t := e.tb.(*testing.T)
	return want[jsonAlert](t, send(t, e.srv, "POST", "/api/v1/alerts", key, body), http.StatusCreated)
}

func (e *alertEnv) getAlert(key string, id int64) jsonAlert {
	e.tb.Helper()
	t := e.tb.(*testing.T)
	return want[jsonAlert](t, do(t, e.srv, "GET", fmt.Sprintf("/api/v1/alerts/%d", id), key), http.StatusOK)
}

func (e *alertEnv) toggle(key string, id int64) *response {
	e.tb.Helper()
	t := e.tb.(*testing.T)
	return send(t, e.srv, "POST", fmt.Sprintf("/api/v1/alerts/%d/toggle", id), key, "")
}

// jsonWebhook is an endpoint as the API returns it.
type jsonWebhook struct {
	ID             int64     `json:"id"`
	URL            string    `json:"url"`
	Events         []string  `json:"events"`
	Description    string    `json:"description"`
	Enabled        bool      `json:"enabled"`
	DisabledReason *string   `json:"disabled_reason"`
	Mode           string    `json:"mode"`
	Secret         string    `json:"secret"`
	CreatedAt      time.Time `json:"created_at"`
}

// jsonDelivery is an entry of a delivery log.
type jsonDelivery struct {
	ID             int64           `json:"id"`
	EventID        string          `json:"event_id"`
	EventType      string          `json:"event_type"`
	AlertID        *int64          `json:"alert_id"`
	Status         string          `json:"status"`
	Attempts       int             `json:"attempts"`
	NextAttemptAt  *time.Time      `json:"next_attempt_at"`
	LastAttemptAt  *time.Time      `json:"last_attempt_at"`
	LastStatusCode *int            `json:"last_status_code"`
	LastError      *string         `json:"last_error"`
	CreatedAt      time.Time       `json:"created_at"`
	DeliveredAt    *time.Time      `json:"delivered_at"`
	Payload        json.RawMessage `json:"payload"`
}

func (w jsonWebhook) String() string { b, _ := json.Marshal(w); return string(b) }

func (d jsonDelivery) String() string {
	d.Payload = nil // long, and rarely the point
	b, _ := json.Marshal(d)
	return string(b)
}

func (e *alertEnv) createWebhook(key, url string) jsonWebhook {
	e.tb.Helper()
	t := e.tb.(*testing.T)
	return want[jsonWebhook](t, send(t, e.srv, "POST", "/api/v1/webhooks", key, `{"url":"`+url+`"}`), http.StatusCreated)
}

func (e *alertEnv) webhook(key string, id int64) jsonWebhook {
	e.tb.Helper()
	t := e.tb.(*testing.T)
	for _, w := range want[[]jsonWebhook](t, do(t, e.srv, "GET", "/api/v1/webhooks", key), http.StatusOK) {
		if w.ID == id {
			return w
		}
	}
	t.Fatalf("webhook %d is not listed", id)
	return jsonWebhook{}
}

func (e *alertEnv) deliveries(key string, webhookID int64) []jsonDelivery {
	e.tb.Helper()
	t := e.tb.(*testing.T)
	return want[[]jsonDelivery](t, do(t, e.srv, "GET", fmt.Sprintf("/api/v1/webhooks/%d/deliveries", webhookID), key), http.StatusOK)
}

// waitDelivery polls an endpoint's log until its only delivery satisfies
// ok, and returns it.
func (e *alertEnv) waitDelivery(key string, webhookID int64, what string, ok func(d jsonDelivery) bool) jsonDelivery {
	e.tb.Helper()
	var ds []jsonDelivery
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds = e.deliveries(key, webhookID)
		if len(ds) == 1 && ok(ds[0]) {
			return ds[0]
		}
		if len(ds) > 1 {
			e.tb.Fatalf("%d deliveries, want 1: %+v", len(ds), ds)
		}
		if time.Now().After(deadline) {
			e.tb.Fatalf("no delivery %s after 10 s: %+v", what, ds)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pollUntil polls cond until it holds, failing after 10 s.
func pollUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not after 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hookHit is one request a hookReceiver got.
type hookHit struct {
	Header http.Header
	Body   []byte
	At     time.Time
}

// hookReceiver is a webhook endpoint on loopback that records what it gets and
// answers with respond (200 when nil); n counts from 0.
type hookReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	hits    []hookHit
	respond func(n int, w http.ResponseWriter, r *http.Request)
}

func newHookReceiver(tb testing.TB, respond func(n int, w http.ResponseWriter, r *http.Request)) *hookReceiver {
	tb.Helper()
	rc := &hookReceiver{respond: respond}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.hits)
		rc.hits = append(rc.hits, hookHit{Header: r.Header.Clone(), Body: body, At: time.Now()})
		rc.mu.Unlock()
		if rc.respond != nil {
			rc.respond(n, w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	tb.Cleanup(rc.srv.Close)
	return rc
}

func (rc *hookReceiver) url() string { return rc.srv.URL + "/hook" }

func (rc *hookReceiver) got() []hookHit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hookHit(nil), rc.hits...)
}

// wait waits until the hookReceiver has had n requests and returns them.
func (rc *hookReceiver) wait(tb testing.TB, n int) []hookHit {
	tb.Helper()
	pollUntil(tb, fmt.Sprintf("%d requests at the hookReceiver", n), func() bool { return len(rc.got()) >= n })
	return rc.got()
}

// jsonObject decodes a JSON object with numbers kept exact.
func jsonObject(tb testing.TB, b []byte) map[string]any {
	tb.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		tb.Fatalf("not a JSON object: %v\n%s", err, b)
	}
	return m
}

// probedUsers is a store whose UserByID counts its reads, and fails while
// fail is set (the database out of reach), counting those failures.
type probedUsers struct {
	coinpulse.Store
	fail          atomic.Bool
	reads, failed atomic.Int64
}

func (p *probedUsers) UserByID(ctx context.Context, id int64) (*coinpulse.User, error) {
	p.reads.Add(1)
	if p.fail.Load() {
		p.failed.Add(1)
		return nil, errors.New("database unreachable (test)")
	}
	return p.Store.UserByID(ctx, id)
}
