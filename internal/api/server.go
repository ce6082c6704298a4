// Package api serves the Coinpulse HTTP interface: routing, the response
// envelope, authentication and the handlers of each resource.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"coinpulse"
	"coinpulse/internal/market"
	"coinpulse/internal/stream"
)

// Config is what a Server needs.
type Config struct {
	Store  coinpulse.Store
	Market *market.Engine
	Clock  coinpulse.Clock
	Log    *slog.Logger
	Plans  map[coinpulse.Tier]coinpulse.Plan
	// MaxBody is the largest request body accepted (default 64 KiB).
	MaxBody int64
	// BodyTimeout is the longest a client may take to send a request's
	// body, from the start of the request (default DefaultBodyTimeout).
	BodyTimeout time.Duration
	// WriteTimeout is the longest a client may take to take in the next
	// part of an answer (default DefaultWriteTimeout): an answer has
	// WriteTimeout from its request's headers, renewed when it begins a
	// second or more after the request did (a quarter of WriteTimeout, if
	// that is less) or before the request's body was read (see
	// deadlineBody), and again for every 64 KiB (writeStep) past its
	// first, so that a client that stops reading is cut off while a slow
	// but steady one gets a large answer whole. The http.Server serving
	// Handler must set the same WriteTimeout: it sets the deadline as each
	// request's headers are read, the one an answer shorter than 64 KiB
	// has. (net/http clears the deadline after each answer, and on a
	// hijack: a WebSocket's upgrade.)
	WriteTimeout time.Duration
	// Limiter holds keyed calls to their plan's limits; nil turns rate
	// limiting off.
	Limiter coinpulse.Limiter
	// SandboxLimits is the abuse limit of sandbox calls and /usage
	// (default DefaultSandboxLimits).
	SandboxLimits *coinpulse.Limits
	// Meter records admitted calls; nil turns metering off.
	Meter Meter
	// AlertIndex is this node's alert evaluator, told of armings and
	// disarmings at once (nil: it finds them by polling the store).
	AlertIndex AlertIndex
	// Deliveries is woken when a webhook test event is queued (nil: the
	// dispatcher finds it at its next poll).
	Deliveries Waker
	// WebhookAllowPrivate lets webhook URLs reach loopback, private and
	// link-local addresses (--webhook-allow-private; tests).
	WebhookAllowPrivate bool
	// Resolver resolves webhook hosts at registration (nil: the default).
	Resolver *net.Resolver
	// Stream configures the WebSocket hub of /ws (its Authenticate and
	// Resolve are the server's own).
	Stream stream.Config
	// MaxStreamsPerAccount caps the WebSocket connections one account
	// (both modes together) holds open (0: the default,
	// DefaultMaxStreamsPerAccount; negative: no cap).
	MaxStreamsPerAccount int
	// StreamSlots counts the connections against that cap on every node
	// that shares it (ratelimit.RedisSlots); nil counts this node's.
	StreamSlots coinpulse.Slots
	// KeyCacheTTL bounds how long a verified key is trusted without asking
	// the store again (default 30 s); revocations cut it short everywhere
	// through the store's auth epoch.
	KeyCacheTTL time.Duration
	// AuthEpochPoll is how often the store's auth epoch is read (default
	// 25 ms); a test sets it long to see what RefreshAuth alone does.
	AuthEpochPoll time.Duration
	// Dashboard serves /user/api and every path under it (nil: those
	// paths are 404 like any unknown path).
	Dashboard http.Handler
	// MetricsToken, when set, is what GET /metrics must be sent as
	// "Authorization: Bearer <token>" (none: /metrics is public).
	MetricsToken string
}

// Server is the HTTP interface. Create it with New, serve Handler, and run
// Run alongside for its background work.
type Server struct {
	store  coinpulse.Store
	market *market.Engine
	clock  coinpulse.Clock
	log    *slog.Logger
	// limiterFails counts the failed limiter checks not yet logged;
	// limiterLogged is when a line last told of them (sinceStart; 0:
	// never).
	limiterFails, limiterLogged atomic.Int64
	// plans are the plans in force: SetPlans replaces them.
	plans   atomic.Pointer[map[coinpulse.Tier]coinpulse.Plan]
	maxBody int64
	// bodyTimeout is Config.BodyTimeout.
	bodyTimeout time.Duration
	// writeTimeout is Config.WriteTimeout.
	writeTimeout time.Duration
	keys         *keyCache
	// entitlements caches Entitlement's answers.
	entitlements entitlementCache
	// unchecked holds the keys whose streams' last recheck the store
	// failed; watchStreams tries them again.
	unchecked keySet
	recheckMu sync.Mutex // see recheck
	// portfolios keeps encoded portfolios by version and snapshot.
	portfolios *portfolioCache
	metrics    *metrics
	// unmatched and dashboardObs count the requests no route took (404,
	// 405, a redirect to the clean path) and the dashboard's.
	unmatched, dashboardObs *routeMetrics

	limiter       coinpulse.Limiter
	sandboxLimits coinpulse.Limits
	// keyLease is how long a request holds its Idempotency-Key before a
	// request sent again may take it over, and the longest a keyed
	// request runs (idempotencyLease; tests shorten it).
	keyLease time.Duration
	meterer  Meter
	mux      *http.ServeMux
	routes   []Route
	// literalAllow is the Allow of each literal path: for a method it does
	// not serve, net/http's would also list a wildcard sibling's methods.
	literalAllow map[string]string
	// running counts the routes' calls still running when calls are
	// metered; see Drain.
	running atomic.Int64
	// stopping is closed by BeginShutdown: calls that only wait (a
	// simulated timeout) end at once.
	stopping     chan struct{}
	stoppingOnce sync.Once

	alertIndex          AlertIndex
	deliveries          Waker
	webhookAllowPrivate bool
	resolver            *net.Resolver
	hub                 *stream.Hub
	wsRoute             Route
	dashboard           http.Handler
	// slots caps each account's WebSocket connections at maxStreams
	// (negative: no cap); sharedSlots: on every node (Config.StreamSlots).
	slots       coinpulse.Slots
	sharedSlots bool
	maxStreams  int
	// metricsToken is Config.MetricsToken.
	metricsToken string
}

// Access says who may call a route.
type Access int

// The access levels of routes.
const (
	Public Access = iota // no key
	Read                 // a key with read permission
	Write                // a key with write permission
	AnyKey               // a key of either permission (/usage: where its own account stands)
)

// Route is one endpoint. API routes are served under both /api/v1 and /v1.
type Route struct {
	Method string
	Path   string // e.g. "/markets/{id}", without the version prefix
	Access Access
	// Basic routes are open to plans with basic endpoints (the free tier).
	Basic bool
	// Free routes answer every plan, even one without API access, and
	// neither count against nor are limited by its allowance (/usage).
	Free bool
	// Webhooks routes need a plan with webhooks and WebSocket streams.
	Webhooks bool
	// KeyOptional routes (the WebSocket) also take a request without a
	// key: the handler then authenticates, limits and meters it itself,
	// with the wsCall that wrap puts in the request's context.
	KeyOptional bool
	// Ops routes live at the root, not under a version prefix.
	Ops     bool
	Handler func(w http.ResponseWriter, r *http.Request) error
}

// planMap returns the plans in force, which callers must not change.
func (s *Server) planMap() map[coinpulse.Tier]coinpulse.Plan { return *s.plans.Load() }

// RefreshAuth reads the auth epoch now rather than at the next poll, so
// that a change this node just made (the dashboard's revocation of a key)
// holds from this node's next request on; other nodes see it at their
// next poll (25 ms). A failed read is logged; the poll catches up.
func (s *Server) RefreshAuth(ctx context.Context) {
	changed, err := s.keys.refresh(ctx)
	if err != nil {
		s.log.Warn("read the auth epoch after a change; the next poll will", "err", err)
		return
	}
	if changed { // the streams' recheck runs in the poll's goroutine, not in this request
		select {
		case s.keys.changed <- struct{}{}:
		default:
		}
	}
}

// Entitlement says what the plan in force and the subscription of the
// account userID allow of its alerts now: that they fire and send e-mail
// (a plan with every endpoint and active alerts, a subscription not
// expired), and that they also go to its webhooks (a plan with webhooks).
// An account that is gone is entitled to nothing. The alert evaluator and
// the delivery dispatcher ask it, so that a downgrade, an expiry or a plan
// reload stops firings and deliveries as it stops the API's alert and
// webhook calls. An answer is kept while the auth epoch (which every tier
// change moves) and the plans in force are those it was read under, and
// until the subscription's expiry; so the evaluator's look-ups at each
// refresh read an account once, not at every refresh.
func (s *Server) Entitlement(ctx context.Context, userID int64) (coinpulse.Entitlement, error) {
	now := s.clock()
	epoch := s.keys.currentEpoch() // before the read: a change after it makes the entry stale
	plans := s.plans.Load()
	if en, ok := s.entitlements.get(userID, epoch, plans, now); ok {
		return en, nil
	}
	u, err := s.store.UserByID(ctx, userID)
	if err != nil && !coinpulse.IsNotFound(err) {
		return coinpulse.Entitlement{}, err
	}
	var en coinpulse.Entitlement
	var until time.Time
	if err == nil {
		if plan, ok := (*plans)[u.Tier]; ok && !u.SubscriptionExpired(now) && planAllows(plan, Route{}) && plan.MaxActiveAlerts != 0 {
			en = coinpulse.Entitlement{Alerts: true, Webhooks: plan.Webhooks}
		}
		if u.TierExpiresAt != nil && u.TierExpiresAt.After(now) {
			until = *u.TierExpiresAt
		}
	}
	s.entitlements.put(userID, entitlement{en: en, epoch: epoch, plans: plans, until: until})
	return en, nil
}

// entitlementCache holds Entitlement's answers by account.
type entitlementCache struct {
	mu sync.Mutex
	m  map[int64]entitlement
}

type entitlement struct {
	en    coinpulse.Entitlement
	epoch int64
	plans *map[coinpulse.Tier]coinpulse.Plan
	until time.Time // the subscription's expiry; zero: none
}

func (c *entitlementCache) get(userID, epoch int64, plans *map[coinpulse.Tier]coinpulse.Plan, now time.Time) (coinpulse.Entitlement, bool) {
	c.mu.Lock()
	e, ok := c.m[userID]
	c.mu.Unlock()
	if !ok || e.epoch != epoch || e.plans != plans || (!e.until.IsZero() && !now.Before(e.until)) {
		return coinpulse.Entitlement{}, false
	}
	return e.en, true
}

func (c *entitlementCache) put(userID int64, e entitlement) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCached {
		c.m = map[int64]entitlement{}
	}
	c.m[userID] = e
}

// SetPlans puts plans in force from the next call on (serve does so on
// SIGHUP): the rate limits, endpoints, webhooks and portfolio and alert
// allowances of every call that follows are the new plans', and the
// WebSocket streams of accounts whose plan no longer includes them are
// closed. plans must have every tier, as coinpulse.LoadPlans makes sure;
// the caller must not change it afterwards. It returns once the streams
// are checked; a failed check of one is logged and leaves it open.
func (s *Server) SetPlans(ctx context.Context, plans map[coinpulse.Tier]coinpulse.Plan) {
	s.plans.Store(&plans)
	s.recheckStreams(ctx)
}

// Prefixes are the version prefixes every API route is served under.
var Prefixes = []string{"/api/v1", "/v1"}

// New returns a Server over cfg.
func New(cfg Config) *Server {
	s := &Server{
		store: cfg.Store, market: cfg.Market, clock: cfg.Clock, log: cfg.Log,
		maxBody: cfg.MaxBody, bodyTimeout: cfg.BodyTimeout, writeTimeout: cfg.WriteTimeout, mux: http.NewServeMux(),
		limiter: cfg.Limiter, sandboxLimits: DefaultSandboxLimits, keyLease: idempotencyLease, meterer: cfg.Meter,
		alertIndex: cfg.AlertIndex, deliveries: cfg.Deliveries, webhookAllowPrivate: cfg.WebhookAllowPrivate,
		resolver: cfg.Resolver, dashboard: cfg.Dashboard, metricsToken: cfg.MetricsToken, stopping: make(chan struct{}),
	}
	if cfg.SandboxLimits != nil {
		s.sandboxLimits = *cfg.SandboxLimits
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	plans := cfg.Plans
	if plans == nil {
		plans = coinpulse.DefaultPlans()
	}
	s.plans.Store(&plans)
	if s.maxBody <= 0 {
		s.maxBody = 64 << 10
	}
	if s.bodyTimeout <= 0 {
		s.bodyTimeout = DefaultBodyTimeout
	}
	if s.writeTimeout <= 0 {
		s.writeTimeout = DefaultWriteTimeout
	}
	ttl := cfg.KeyCacheTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	s.keys = newKeyCache(cfg.Store, s.clock, ttl)
	if cfg.AuthEpochPoll > 0 {
		s.keys.poll = cfg.AuthEpochPoll
	}
	s.portfolios = newPortfolioCache(32 << 20)
	s.metrics = newMetrics()
	s.metrics.watch(s)
	s.unmatched, s.dashboardObs = s.metrics.route("unmatched"), s.metrics.route("/user/api")
	s.routes = s.routeTable()
	for _, rt := range s.routes {
		if rt.Path == "/ws" {
			s.wsRoute = rt
		}
	}
	s.slots, s.sharedSlots, s.maxStreams = cfg.StreamSlots, cfg.StreamSlots != nil, cfg.MaxStreamsPerAccount
	if s.slots == nil {
		s.slots = &streamSlots{held: map[int64]int{}}
	}
	if s.maxStreams == 0 {
		s.maxStreams = DefaultMaxStreamsPerAccount
	}
	sc := cfg.Stream
	sc.Authenticate, sc.Resolve, sc.Upgraded = s.streamAuth, s.streamResolve, s.streamUpgraded
	if sc.Log == nil {
		sc.Log = s.log
	}
	s.hub = stream.NewHub(sc)
	s.keys.onChange = s.recheckStreams
	for _, rt := range s.routes {
		prefixes := Prefixes
		if rt.Ops {
			prefixes = []string{""}
		}
		for _, p := range prefixes {
			s.mux.Handle(rt.Method+" "+p+rt.Path, s.wrap(rt))
		}
	}
	s.unshadow()
	return s
}

// unshadow makes a literal path answer 405 for the methods it does not
// serve, where a wildcard route would otherwise take them: GET
// /portfolio/transactions (POST only) would reach GET /portfolio/{id}
// and be a 404 for portfolio "transactions", counted as a call.
func (s *Server) unshadow() {
	served := map[string][]string{} // literal path: its methods
	for _, rt := range s.routes {
		if strings.Contains(rt.Path, "{") {
			continue
		}
		prefixes := Prefixes
		if rt.Ops {
			prefixes = []string{""}
		}
		for _, p := range prefixes {
			served[p+rt.Path] = append(served[p+rt.Path], rt.Method)
		}
	}
	s.literalAllow = make(map[string]string, len(served))
	for path, methods := range served {
		allow := slices.Clone(methods)
		if slices.Contains(allow, http.MethodGet) {
			allow = append(allow, http.MethodHead)
		}
		slices.Sort(allow)
		s.literalAllow[path] = strings.Join(allow, ", ")
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if slices.Contains(allow, m) {
				continue
			}
			probe := &http.Request{Method: m, Host: "x", URL: &url.URL{Path: path}}
			if _, pattern := s.mux.Handler(probe); strings.Contains(pattern, "{") {
				s.mux.HandleFunc(m+" "+path, func(w http.ResponseWriter, r *http.Request) {
					s.notAllowed(exchangeOf(w), r, strings.Join(allow, ", "))
				})
			}
		}
	}
}

// Routes returns the route table (for the OpenAPI comparison test).
func (s *Server) Routes() []Route { return s.routes }

func (s *Server) routeTable() []Route {
	return []Route{
		{Method: "GET", Path: "/healthz", Ops: true, Handler: s.healthz},
		{Method: "GET", Path: "/readyz", Ops: true, Handler: s.readyz},
		{Method: "GET", Path: "/metrics", Ops: true, Handler: s.serveMetrics},
		{Method: "GET", Path: "/docs", Ops: true, Handler: s.docs},
		{Method: "GET", Path: "/docs/docs.js", Ops: true, Handler: s.docsJS},
		{Method: "GET", Path: "/favicon.ico", Ops: true, Handler: s.favicon},
		{Method: "GET", Path: "/openapi.json", Handler: s.openapi},

		{Method: "GET", Path: "/usage", Access: AnyKey, Basic: true, Free: true, Handler: s.usage},

		{Method: "GET", Path: "/markets", Access: Read, Basic: true, Handler: s.listMarkets},
		{Method: "GET", Path: "/markets/search", Access: Read, Basic: true, Handler: s.searchMarkets},
		{Method: "GET", Path: "/markets/global", Access: Read, Basic: true, Handler: s.globalStats},
		{Method: "GET", Path: "/markets/top-movers", Access: Read, Handler: s.topMovers},
		{Method: "GET", Path: "/markets/{id}", Access: Read, Basic: true, Handler: s.coinDetail},
		{Method: "GET", Path: "/markets/{id}/history", Access: Read, Handler: s.coinHistory},
		{Method: "GET", Path: "/coins/{idOrSymbol}", Access: Read, Basic: true, Handler: s.coinDetail},
		{Method: "GET", Path: "/coins/{idOrSymbol}/history", Access: Read, Handler: s.coinHistory},

		{Method: "GET", Path: "/portfolio", Access: Read, Handler: s.listPortfolios},
		{Method: "POST", Path: "/portfolio", Access: Write, Handler: s.createPortfolio},
		{Method: "GET", Path: "/portfolio/{id}", Access: Read, Handler: s.getPortfolio},
		{Method: "PATCH", Path: "/portfolio/{id}", Access: Write, Handler: s.patchPortfolio},
		{Method: "DELETE", Path: "/portfolio/{id}", Access: Write, Handler: s.deletePortfolio},
		{Method: "POST", Path: "/portfolio/{id}/holdings", Access: Write, Handler: s.addHolding},
		{Method: "GET", Path: "/portfolio/{id}/transactions", Access: Read, Handler: s.listTransactions},
		{Method: "POST", Path: "/portfolio/{id}/sync", Access: Write, Handler: s.syncPortfolio},
		{Method: "GET", Path: "/portfolio/{id}/history", Access: Read, Handler: s.portfolioHistory},
		{Method: "POST", Path: "/portfolio/transactions", Access: Write, Handler: s.postTransaction},
		{Method: "POST", Path: "/holdings/{id}/sell", Access: Write, Handler: s.sellHolding},
		{Method: "DELETE", Path: "/holdings/{id}", Access: Write, Handler: s.deleteHolding},

		{Method: "GET", Path: "/alerts", Access: Read, Handler: s.listAlerts},
		{Method: "POST", Path: "/alerts", Access: Write, Handler: s.createAlert},
		{Method: "GET", Path: "/alerts/{id}", Access: Read, Handler: s.getAlert},
		{Method: "DELETE", Path: "/alerts/{id}", Access: Write, Handler: s.deleteAlert},
		{Method: "POST", Path: "/alerts/{id}/toggle", Access: Write, Handler: s.toggleAlert},

		{Method: "GET", Path: "/webhooks", Access: Read, Webhooks: true, Handler: s.listWebhooks},
		{Method: "POST", Path: "/webhooks", Access: Write, Webhooks: true, Handler: s.createWebhook},
		{Method: "DELETE", Path: "/webhooks/{id}", Access: Write, Webhooks: true, Handler: s.deleteWebhook},
		{Method: "POST", Path: "/webhooks/{id}/test", Access: Write, Webhooks: true, Handler: s.testWebhook},
		{Method: "GET", Path: "/webhooks/{id}/deliveries", Access: Read, Webhooks: true, Handler: s.listDeliveries},

		{Method: "GET", Path: "/ws", Access: Read, Webhooks: true, KeyOptional: true, Handler: s.serveWS},
	}
}

// Run does the server's background work until ctx ends: polling the auth
// epoch so revocations reach the key cache, flushing last-used times,
// closing the WebSocket streams whose subscription or key expires, and
// sweeping expired idempotency keys.
func (s *Server) Run(ctx context.Context) {
	go s.watchStreams(ctx)
	go s.sweepIdempotencyKeys(ctx)
	s.keys.run(ctx, s.log)
}

// Handler returns the root handler: request ids, JSON 404/405, panics as
// SERVER_ERROR, then the routes.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// BeginShutdown tells the server it is shutting down (serve registers it
// with http.Server.RegisterOnShutdown): a call that is only waiting, a
// sandbox call's simulated timeout, is answered at once rather than
// holding the shutdown for up to 30 seconds. It may be called more than
// once.
func (s *Server) BeginShutdown() {
	s.stoppingOnce.Do(func() { close(s.stopping) })
}

// Drain waits until no call of a route is running (when calls are
// metered), for a graceful shutdown: after http.Server.Shutdown some
// handlers still run (WebSockets, which Shutdown does not wait for, and
// calls past its timeout), may yet be admitted, and meter their calls when
// they end; the meter must not close before. It returns nil, or ctx's
// error, saying how many calls were still running.
func (s *Server) Drain(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		n := s.running.Load()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("api: %d calls still running: %w", n, ctx.Err())
		case <-tick.C:
		}
	}
}

// exchange is one request's state, and the ResponseWriter handed down the
// chain: it records the status for metrics and carries the request id and
// the authenticated caller, so that nothing is copied into a context.
type exchange struct {
	http.ResponseWriter
	id        string
	principal *principal
	status    int
	wrote     bool
	// admitted is set once a keyed call passed its limits: it is metered.
	admitted bool
	// admission is the limiter's word on the admitted call, for its
	// refund and its time in the meter.
	admission coinpulse.Admission
	// refunded is set once a 5xx gave the call back (giveBack).
	refunded bool
	// metered is set once the meter has the call (a WebSocket's before
	// the call ends: see streamUpgraded).
	metered bool
	// standing is what the rate-limit headers describe when they say
	// where the key stands: a free call's check, or a look (peekHeaders).
	// Nil when they come from a counted call's check, or are not set.
	// GET /usage shows it rather than asking the limiter again.
	standing *coinpulse.Verdict
	// simulated is the X-Sandbox-Simulate failure the answer acts out,
	// or "": the request metrics count it apart from real answers.
	simulated string
	// lookedAt is when, by srv's clock, the rate-limit headers were set
	// for req (nil srv: they were not): an answer that begins a second or
	// more later sets them again (see fresh), so that a call held up by
	// a slow body (a 408 after 30 s) does not answer with where the key
	// stood then, a reset in the past.
	lookedAt time.Time
	srv      *Server
	req      *http.Request
	// start is when the request reached the server's handler.
	start time.Time
	// writeTimeout is the server's (0: none; see Config.WriteTimeout),
	// and unrenewed how many bytes of the answer were written since its
	// write deadline was last set.
	writeTimeout time.Duration
	unrenewed    int
	// writeFailed is set once a write of the answer failed: the client
	// hung up, or stopped reading past the write timeout.
	writeFailed bool
	// body is the request's body, when it has one (see deadlineBody).
	body *deadlineBody
	// capturing is set while the request holds an Idempotency-Key:
	// captured keeps the answer's body, to be kept under the key.
	capturing bool
	// gzip is what the request's Accept-Encoding says of gzip (gzipNo
	// for a request without one, and for a HEAD): see gzips. (Beside
	// capturing, it takes no room.)
	gzip     gzipAccept
	captured []byte
}

// looked records that s set the rate-limit headers for r, from a look at
// the limiter made at (or after) at.
func (e *exchange) looked(s *Server, r *http.Request, at time.Time) {
	e.srv, e.req, e.lookedAt = s, r, at
}

// fresh sets the rate-limit headers again, before the answer begins, if
// they were set a second or more ago; if the limiter cannot say now, the
// answer goes without them rather than with stale ones. The look outlives
// the request's context, which a timed-out body read has canceled.
func (e *exchange) fresh() {
	if e.srv == nil || e.srv.clock().Sub(e.lookedAt) < time.Second {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.req.Context()), 5*time.Second)
	defer cancel()
	if !e.srv.peekHeaders(e, e.req.WithContext(ctx)) {
		h := e.Header()
		for _, k := range rateLimitKeys {
			delete(h, k)
		}
	}
	e.srv = nil // once
}

// rateLimitKeys are the header keys the limits set, in canonical form.
var rateLimitKeys = [...]string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit", "Ratelimit-Policy"}

// exchangeOf returns the request state behind w (a bare one for writers
// that did not come through serveHTTP).
func exchangeOf(w http.ResponseWriter) *exchange {
	if e, ok := w.(*exchange); ok {
		return e
	}
	return &exchange{ResponseWriter: w}
}

func (e *exchange) WriteHeader(status int) {
	if !e.wrote && (status >= 200 || status == http.StatusSwitchingProtocols) { // not a 1xx before the answer
		e.begin()
		e.status, e.wrote = status, true
	}
	e.ResponseWriter.WriteHeader(status)
}

func (e *exchange) Write(b []byte) (int, error) {
	if e.capturing {
		e.captured = append(e.captured, b...)
	}
	return e.write(b)
}

// write writes b without keeping it for an Idempotency-Key (see
// writeEncoded).
func (e *exchange) write(b []byte) (int, error) {
	if !e.wrote {
		e.begin() // the answer begins here: an implicit 200
	}
	e.wrote = true
	var n int
	var err error
	if e.writeTimeout <= 0 || e.unrenewed+len(b) <= writeStep {
		e.unrenewed += len(b)
		n, err = e.ResponseWriter.Write(b)
	} else {
		n, err = e.writePaced(b)
	}
	if err != nil {
		e.writeFailed = true
	}
	return n, err
}

// DefaultWriteTimeout is how long, by default, an answer may wait for its
// client to take in its next part (see Config.WriteTimeout).
const DefaultWriteTimeout = 30 * time.Second

// writeStep is how much of an answer one write deadline covers, past the
// first: a client must take in 64 KiB every WriteTimeout (30 s by
// default, some 2 KiB a second), as it must send a body.
const writeStep = 64 << 10

// begin is called as the answer begins: it sets the rate-limit headers
// again if they are old (fresh), and sees that the answer has its write
// timeout from now, or, if the request's body is still unread, from the
// body's deadline: net/http reads what is left of it (up to 256 KiB)
// before it writes the answer's head.
func (e *exchange) begin() {
	e.fresh()
	if e.writeTimeout <= 0 {
		return
	}
	if e.body != nil && !e.body.done {
		from := time.Now()
		if from.Before(e.body.deadline) {
			from = e.body.deadline
		}
		e.setWriteDeadline(from.Add(e.writeTimeout))
		return
	}
	e.renewIfLate()
}

// renewIfLate renews the write deadline if the request is a second or more
// old, or a quarter of the write timeout if that is less (a simulated
// timeout, a slow database or limiter), so that what is written next is
// not cut short for the time taken before it.
func (e *exchange) renewIfLate() {
	if e.writeTimeout > 0 && time.Since(e.start) >= min(time.Second, e.writeTimeout/4) {
		e.renewWriteDeadline()
	}
}

// renewWriteDeadline gives the answer's next writes writeTimeout from now.
func (e *exchange) renewWriteDeadline() {
	e.setWriteDeadline(time.Now().Add(e.writeTimeout))
}

func (e *exchange) setWriteDeadline(t time.Time) {
	http.NewResponseController(e.ResponseWriter).SetWriteDeadline(t)
	e.unrenewed = 0
}

// writePaced writes b in pieces that end where writeStep bytes have been
// written since the deadline was set, and renews it before each next one.
func (e *exchange) writePaced(b []byte) (n int, err error) {
	for len(b) > 0 {
		if e.unrenewed >= writeStep {
			e.renewWriteDeadline()
		}
		m := min(len(b), writeStep-e.unrenewed)
		m, err = e.ResponseWriter.Write(b[:m])
		n += m
		e.unrenewed += m
		if err != nil {
			return n, err
		}
		b = b[m:]
	}
	return n, nil
}

// Unwrap lets http.ResponseController reach the connection.
func (e *exchange) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// idPrefix tells apart the request ids of this process from another's.
var idPrefix = newIDPrefix()

func newIDPrefix() string {
	var b [6]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// newRequestID returns a generated request id: the process's prefix and
// 64 random bits (the runtime's ChaCha8 generator, a few nanoseconds; a
// counter in their place would tell every subscriber how many requests
// the server answers).
func newRequestID() string { return idPrefix + strconv.FormatUint(mrand.Uint64(), 36) }

// validRequestID reports whether an incoming X-Request-Id may be echoed:
// 1..128 characters of [A-Za-z0-9._-].
func validRequestID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	if !validRequestID(id) {
		id = newRequestID()
	}
	w.Header()["X-Request-Id"] = []string{id}
	e := &exchange{ResponseWriter: w, id: id, status: http.StatusOK, start: time.Now(), writeTimeout: s.writeTimeout}
	if ae, ok := r.Header["Accept-Encoding"]; ok && r.Method != http.MethodHead {
		e.gzip = parseAcceptEncoding(ae)
	}
	defer s.recoverPanic(e, r)
	if r.Body != nil && r.Body != http.NoBody {
		// The handlers get a copy of the request with the wrapped body:
		// net/http keeps its own, whose type tells it, as the answer
		// begins, whether to read what is left of the body or to close
		// the connection instead (a "100 Continue" it never sent, 256
		// KiB or more unread).
		r = r.WithContext(r.Context())
		r.Body = newDeadlineBody(w, e, r.Body, s.bodyTimeout)
		if b := e.body; b != nil && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
			defer b.refuseUnsent()
		}
	}
	if s.dashboard != nil && (r.URL.Path == "/user/api" || strings.HasPrefix(r.URL.Path, "/user/api/")) {
		s.dashboard.ServeHTTP(e, r)
		took := time.Since(e.start)
		s.dashboardObs.observe(e.status, took)
		if s.log.Enabled(r.Context(), slog.LevelDebug) { // as finish logs the API's calls
			s.log.Debug("request", "method", r.Method, "route", "/user/api", "status", e.status, "duration", took, "request_id", e.id)
		}
		return
	}
	// A path that is not clean ("//", "." or ".." segments) has a pattern
	// but gets ServeMux's redirect, in HTML: unrouted answers it in JSON.
	if _, pattern := s.mux.Handler(r); pattern == "" || r.Method != http.MethodConnect && !isCleanPath(r.URL.Path) {
		s.unrouted(e, r)
		s.unmatched.observe(e.status, time.Since(e.start))
		return
	}
	s.mux.ServeHTTP(e, r)
}

// isCleanPath reports whether ServeMux serves p without redirecting to a
// cleaned path: p is rooted, and path.Clean leaves it as it is, but for a
// trailing slash.
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	return c == p || p[len(p)-1] == '/' && len(p) == len(c)+1 && p[:len(c)] == c
}

// cleanLocation is the clean form of u's path, as it was sent (escaped),
// with its query: where ServeMux redirects a path that is not clean.
// ServeMux's own Location escapes the escaped path again (a %20 becomes
// %2520), naming another resource.
func cleanLocation(u *url.URL) string {
	p := u.EscapedPath()
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	if u.RawQuery != "" {
		c += "?" + u.RawQuery
	}
	return c
}

func (s *Server) recoverPanic(w http.ResponseWriter, r *http.Request) {
	if v := recover(); v != nil {
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.log.Error("panic", "value", v, "stack", string(debug.Stack()), "request_id", exchangeOf(w).id)
		s.writeError(w, r, fmt.Errorf("panic: %v", v))
	}
}

// unrouted answers a request no route matched: 405 with Allow when the
// path exists under another method, else 404; both as JSON.
//
// A request with a valid key gets the rate-limit headers, as every answer
// to an authenticated request does; nothing is counted.
func (s *Server) unrouted(e *exchange, r *http.Request) {
	s.peekIfKeyed(e, r)
	h, _ := s.mux.Handler(r)
	rec := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch {
	case rec.status == http.StatusMethodNotAllowed:
		allow, literal := s.literalAllow[r.URL.Path]
		if !literal {
			allow = rec.header.Get("Allow")
		}
		s.methodNotAllowed(e, r, allow)
	// A redirect to the clean path; not for OPTIONS *, which has no path
	// to clean and gets the 404.
	case rec.status >= 300 && rec.status < 400 && rec.header.Get("Location") != "" && strings.HasPrefix(r.URL.Path, "/"):
		loc := cleanLocation(r.URL)
		e.Header().Set("Location", loc)
		m := s.newMeta(e)
		writeData(e, rec.status, map[string]string{"location": loc}, &m)
	default:
		s.writeError(e, r, coinpulse.Errorf(coinpulse.CodeNotFound, "No route %s %s. The API lives under /api/v1 (or /v1); see /docs.", r.Method, truncate(r.URL.EscapedPath(), 200)))
	}
}

// notAllowed answers, as unrouted does, a method a literal path does not
// serve that a wildcard route would have taken (see unshadow).
func (s *Server) notAllowed(e *exchange, r *http.Request, allow string) {
	s.peekIfKeyed(e, r)
	s.methodNotAllowed(e, r, allow)
	s.unmatched.observe(e.status, time.Since(e.start))
}

// peekIfKeyed gives an answer no route made the rate-limit headers when
// the request carries a valid key; nothing is counted.
func (s *Server) peekIfKeyed(e *exchange, r *http.Request) {
	if carriesKey(r) {
		if p, err := s.authenticate(r); err == nil {
			e.principal = p
			s.peekHeaders(e, r)
		}
	}
}

// methodNotAllowed writes the 405 with Allow.
func (s *Server) methodNotAllowed(e *exchange, r *http.Request, allow string) {
	e.Header().Set("Allow", allow)
	s.writeError(e, r, coinpulse.Errorf(coinpulse.CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s.", r.Method, r.URL.Path, allow))
}

type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }

// truncate cuts s to at most n bytes and a "…", at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // not in the middle of a character
	}
	return s[:n] + "…"
}

// wrap turns a route's handler into an http.Handler with the body limit,
// authentication, metrics and error envelope.
func (s *Server) wrap(rt Route) http.Handler {
	label := meterLabel(rt)
	obs := s.metrics.route(label)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := exchangeOf(w)
		if e.start.IsZero() {
			e.start = time.Now() // a writer that did not come through serveHTTP
		}
		start := e.start
		if rt.KeyOptional {
			r = withStreamCall(r, e) // the WebSocket (see serveWS)
		}
		if s.meterer != nil {
			s.running.Add(1) // until finish; see Drain
		}
		// Every call ends in finish, once: below, or here when the handler
		// panicked (serveHTTP's recoverPanic then answers 500, unless the
		// answer began), so that an admitted call is metered, and given
		// back to the limits as a 5xx, whichever way it ends.
		finished := false
		var claim *coinpulse.IdempotencyKey // the request's Idempotency-Key, once claimed
		defer func() {
			if !finished {
				if !e.wrote {
					e.status = http.StatusInternalServerError
				}
				if claim != nil {
					s.settleIdempotencyKey(e, r, claim)
				}
				s.finish(e, r, rt, label, obs, time.Since(start))
			}
		}()
		err := s.admit(e, r, rt)
		replayed := false
		if err == nil && takesIdempotencyKey(rt) {
			claim, replayed, err = s.claimIdempotencyKey(e, r)
			if claim != nil {
				// A client that hangs up is who sends the key again: the
				// request runs to its end, so that its answer is kept for
				// the retry, but for a lease at most.
				ctx, cancel := context.WithTimeoutCause(context.WithoutCancel(r.Context()), s.keyLease, errKeyedTooLong)
				defer cancel()
				r = r.WithContext(coinpulse.WithIdempotencyClaim(ctx, claim))
			}
		}
		if err == nil && !replayed {
			err = rt.Handler(e, r)
			if err != nil && claim != nil && context.Cause(r.Context()) == errKeyedTooLong {
				e.Header().Set("Retry-After", "1")
				err = errKeyedTooLong
			}
		}
		switch {
		case err == nil:
		case e.wrote:
			// The answer began (mostly: the client hung up, or stopped
			// reading, while it was sent). It stands, with its status,
			// for the meter too.
			if e.writeFailed {
				s.log.Debug("answer cut short: the client hung up or stopped reading", "err", err, "request_id", e.id)
			} else {
				s.log.Error("error after response started", "err", err, "request_id", e.id)
			}
		default:
			if coinpulse.ErrorCode(err).Status() >= 500 {
				s.giveBack(e, r, rt) // before the headers go out
			}
			s.writeError(e, r, err)
		}
		if claim != nil {
			s.settleIdempotencyKey(e, r, claim)
		}
		finished = true
		s.finish(e, r, rt, label, obs, time.Since(start))
	})
}

// meterLabel names rt in metrics and in the meter: its path under
// /api/v1 (whichever prefix a call came by), an ops route's as it is.
func meterLabel(rt Route) string {
	if rt.Ops {
		return rt.Path
	}
	return "/api/v1" + rt.Path
}

// finish accounts for a call that took took: the metrics, the meter (and
// the limiter's refund) and the debug log all see the same duration.
func (s *Server) finish(e *exchange, r *http.Request, rt Route, label string, obs *routeMetrics, took time.Duration) {
	if e.simulated != "" {
		obs.simulation(e.simulated)
	} else {
		obs.observe(e.status, took)
	}
	s.meter(e, r, rt, label, took)
	if rt.KeyOptional {
		s.giveStreamSlot(r)
	}
	if s.meterer != nil {
		s.running.Add(-1)
	}
	if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.Debug("request", "method", r.Method, "route", label, "status", e.status, "duration", took, "request_id", e.id)
	}
}

// admit applies the body limit and, for keyed routes, authentication and
// the tier's endpoint rules.
//
// A declared body over the limit is refused before the limits are checked,
// but after the key (so that its answer, too, carries the rate-limit
// headers); one of unknown length is cut off at the limit as it is read.
func (s *Server) admit(e *exchange, r *http.Request, rt Route) error {
	tooLarge := r.ContentLength > s.maxBody
	if r.ContentLength != 0 && !tooLarge { // a body, or one of unknown length
		// Given net/http's own writer, a body over the limit has net/http
		// close the connection rather than read the rest of it.
		r.Body = http.MaxBytesReader(e.ResponseWriter, r.Body, s.maxBody)
	}
	if rt.Access == Public || rt.KeyOptional && !carriesKey(r) {
		if tooLarge {
			return s.bodyTooLarge(r)
		}
		if _, simulates := r.Header["X-Sandbox-Simulate"]; simulates && rt.KeyOptional {
			// The key comes in the stream's first message, after the
			// upgrade a simulation would have to answer instead of.
			return coinpulse.ValidationError("X-Sandbox-Simulate", "needs the key in the Authorization or X-API-Key header; a key sent in the stream's first message comes too late to simulate anything")
		}
		return nil
	}
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	e.principal = p
	if err := s.authorize(p, r, rt); err != nil {
		s.peekHeaders(e, r)
		return err
	}
	if tooLarge {
		s.peekHeaders(e, r)
		return s.bodyTooLarge(r)
	}
	if rt.KeyOptional { // the WebSocket: a connection slot first, uncounted if none is left
		if err := s.takeStreamSlot(e, r); err != nil {
			if coinpulse.ErrorCode(err) == coinpulse.CodeRateLimitExceeded {
				s.peekHeaders(e, r) // (not when Redis, which the limiter shares, failed)
			}
			return err
		}
	}
	if err := s.limit(e, r, rt); err != nil {
		return err
	}
	e.admitted = true
	if rt.Method != http.MethodGet {
		// No route that changes anything takes query parameters.
		if _, err := parseQuery(r.URL.RawQuery); err != nil {
			return err
		}
	}
	if rt.Method == http.MethodDelete {
		// Nor a body: none or {}, as POST /alerts/{id}/toggle; anything
		// else is a 422 that deletes nothing.
		b, err := readBody(r)
		if err != nil {
			return err
		}
		if err := b.err(); err != nil {
			return err
		}
	}
	return s.simulate(e, r)
}

// bodyTooLarge is the refusal of a declared body over the limit.
func (s *Server) bodyTooLarge(r *http.Request) error {
	return coinpulse.Errorf(coinpulse.CodePayloadTooLarge, "The request body is %d bytes; the limit is %d.", r.ContentLength, s.maxBody)
}

// routeLabel renders a route for messages: "GET /api/v1/markets/top-movers".
func routeLabel(rt Route) string {
	return rt.Method + " /api/v1" + strings.TrimSuffix(rt.Path, "/")
}
