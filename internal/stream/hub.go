package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"coinpulse"
)

// Principal is who a connection acts for: the owner of the API key it was
// authenticated with.
type Principal struct {
	UserID int64
	// Mode is "live" or "test" (the key's kind): alerts are delivered
	// only to connections of the alert's owner in the alert's mode.
	Mode  string
	KeyID int64
	// Until is when the connection's authorization lapses, zero for
	// never: the subscription's or the key's expiry, whichever comes
	// first. The hub keeps it for its caller (Principals, SetUntil); it
	// does not act on it.
	Until time.Time
}

// Defaults of Config.
const (
	DefaultHeartbeat          = 15 * time.Second
	DefaultSendQueue          = 256
	DefaultMaxSubscriptions   = 1000
	DefaultAuthTimeout        = 10 * time.Second
	DefaultWriteTimeout       = 10 * time.Second
	DefaultMaxInvalidMessages = 60
	DefaultMessageRate        = 10
	DefaultMessageBurst       = 20
)

// Config configures a Hub. Zero fields take the defaults.
type Config struct {
	// Authenticate checks a key sent in the first message of a connection
	// that carried no key in its headers. Its error is sent to the client
	// (code and message, as a *coinpulse.Error renders them) before the
	// connection is closed. Nil: first-message authentication is refused.
	Authenticate func(ctx context.Context, apiKey string) (Principal, error)
	// Upgraded, when not nil, is called once the handshake of a
	// connection is answered (101) and the connection taken over, before
	// any message is read or sent, with the request's context (for its
	// values: after the upgrade its cancellation is not to be relied on).
	Upgraded func(ctx context.Context)
	// Resolve maps a coin id or symbol to a coin id using the current
	// market. Its error, a *coinpulse.Error (normally RESOURCE_NOT_FOUND),
	// is sent to the client; any other error is reported as
	// RESOURCE_NOT_FOUND. Nil: coins are taken as ids, verbatim.
	Resolve func(idOrSymbol string) (coinID string, err error)
	// Heartbeat is the interval of heartbeat messages, sent from the
	// welcome on (default 15 s; negative: none).
	Heartbeat time.Duration
	// SendQueue is how many outgoing messages may wait for one connection
	// (default 256). A connection whose queue is full when a message is
	// due is dropped with close status 1008 and reason "too slow".
	SendQueue int
	// MaxSubscriptions is how many coins one connection may follow
	// (default 1000).
	MaxSubscriptions int
	// AuthTimeout is how long a connection without a key in its headers
	// has to send its auth message (default 10 s).
	AuthTimeout time.Duration
	// WriteTimeout bounds the write of one message to the socket (default
	// 10 s); a connection that exceeds it is dropped.
	WriteTimeout time.Duration
	// MaxInvalidMessages is how many error replies a connection may earn
	// within a minute (default 60); one more closes it with status 1008
	// and reason "too many invalid messages".
	MaxInvalidMessages int
	// MessageRate and MessageBurst pace what a client sends (defaults 10
	// a second, 20 at once): past the burst, its next message is read
	// only once the rate allows, so that one connection cannot take the
	// server's CPU with a stream of subscriptions of 1,000 coins.
	MessageRate  float64
	MessageBurst float64
	// OriginPatterns, when not empty, restricts the browser origins
	// allowed to connect (host patterns as in
	// websocket.AcceptOptions.OriginPatterns). Empty: any origin, which is
	// safe because connections authenticate with API keys, never cookies.
	OriginPatterns []string
	// Log receives connection events (nil: discarded).
	Log *slog.Logger
}

// PriceUpdate is one coin's new figures in a tick.
type PriceUpdate struct {
	CoinID                   string
	Symbol                   string
	Price                    float64
	PriceChangePercentage24h *float64 // nil: unknown (null)
	MarketCap                *float64 // nil: unknown (null)
	TotalVolume              *float64 // nil: unknown (null)
	LastUpdated              time.Time
}

type ownerKey struct {
	userID int64
	mode   string
}

// coinSubs are the connections following one coin; each connection keeps
// its index here in conn.coins so that removal is O(1).
type coinSubs struct {
	conns []*conn
}

// Hub serves WebSocket connections and fans prices and alert firings out
// to them. Its methods are safe for concurrent use.
type Hub struct {
	cfg    Config
	log    *slog.Logger
	accept websocket.AcceptOptions

	mu     sync.RWMutex
	closed bool
	// closeDone is closed once Close has seen every connection end.
	closeDone chan struct{}
	conns     map[*conn]struct{}
	coins     map[string]*coinSubs
	alerts    map[ownerKey]map[*conn]struct{}

	// pubMu serializes PublishPrices, which uses conn.pending and touched
	// as scratch space.
	pubMu   sync.Mutex
	touched []*conn
}

// NewHub returns a hub with cfg's settings, defaults filled in.
func NewHub(cfg Config) *Hub {
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.SendQueue <= 0 {
		cfg.SendQueue = DefaultSendQueue
	}
	if cfg.MaxSubscriptions <= 0 {
		cfg.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if cfg.AuthTimeout <= 0 {
		cfg.AuthTimeout = DefaultAuthTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.MaxInvalidMessages <= 0 {
		cfg.MaxInvalidMessages = DefaultMaxInvalidMessages
	}
	if cfg.MessageRate <= 0 {
		cfg.MessageRate = DefaultMessageRate
	}
	if cfg.MessageBurst < 1 {
		cfg.MessageBurst = DefaultMessageBurst
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hub{
		cfg: cfg,
		log: log,
		accept: websocket.AcceptOptions{
			OriginPatterns:     cfg.OriginPatterns,
			InsecureSkipVerify: len(cfg.OriginPatterns) == 0,
		},
		closeDone: make(chan struct{}),
		conns:     make(map[*conn]struct{}),
		coins:     make(map[string]*coinSubs),
		alerts:    make(map[ownerKey]map[*conn]struct{}),
	}
}

// Serve upgrades the request to a WebSocket and runs the connection until
// it ends; call it from the handler of /api/v1/ws after authenticating the
// request's headers. p is the principal of the key in the headers, or nil
// when the request carried none: then the first message must be an auth
// message (see Config.Authenticate and AuthTimeout).
//
// Serve returns nil when the client closed the connection normally (1000
// or 1001) or the hub closed it (Close, DisconnectKey), and otherwise why
// it ended: the upgrade's error (Accept has then written an HTTP error),
// a failed authentication, a drop for slowness or abuse, a network error.
// After Close, Serve upgrades and at once closes with 1001.
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, p *Principal) error {
	ws, err := websocket.Accept(w, r, &h.accept)
	if err != nil {
		return err
	}
	if h.cfg.Upgraded != nil {
		h.cfg.Upgraded(r.Context())
	}
	ws.SetReadLimit(HardMessageBytes)
	// After the hijack the request's context is not to be relied on (see
	// websocket.Accept); keep its values, end it with the connection.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	c := newConn(h, ws, ctx, cancel)
	if !h.register(c) {
		ws.Close(websocket.StatusGoingAway, "server shutting down")
		return nil
	}
	go c.writeLoop()

	var timer *time.Timer
	if p != nil {
		c.state.Store(stateAuthed)
		h.setPrincipal(c, *p)
		c.enqueue(kindWelcome, welcomeBody(nil, p.Mode, &h.cfg))
	} else {
		timer = time.AfterFunc(h.cfg.AuthTimeout, c.authTimeout)
	}

	readErr := c.readLoop()

	if timer != nil {
		timer.Stop()
	}
	h.unregister(c)
	end := c.end.Load()
	c.kill(readEndStatus(readErr), "", nil)
	<-c.writerDone
	ws.CloseNow()
	close(c.finished)

	if end != nil {
		return end.err
	}
	switch websocket.CloseStatus(readErr) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway:
		return nil
	}
	return readErr
}

// readEndStatus is the close status of a connection whose reads ended
// with err: 1002 when the client broke the protocol (an unmasked frame,
// say, which the library refuses without closing), else 1000 (the client
// closed, or the connection is gone).
func readEndStatus(err error) websocket.StatusCode {
	var ne net.Error
	if err == nil || websocket.CloseStatus(err) != -1 || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) || errors.As(err, &ne) {
		return websocket.StatusNormalClosure
	}
	return websocket.StatusProtocolError
}

// PublishPrices sends every connection that follows at least one of the
// updated coins one "prices" message with the updates of its coins, in
// the order of updates (each coin should appear at most once). Each
// update is encoded once per call; each connection's writer assembles its
// message from the encoded updates, and connections with the same set
// of updated coins share the assembly plan. It never blocks on a client:
// a connection whose queue is full is dropped. updates is not retained.
func (h *Hub) PublishPrices(asOf time.Time, snapshotID string, updates []PriceUpdate) {
	if len(updates) == 0 {
		return
	}
	// Encode each update once.
	t := &tickData{frags: make([]byte, 0, len(updates)*200), offs: make([]int, len(updates)+1)}
	for i := range updates {
		t.offs[i] = len(t.frags)
		t.frags = appendUpdate(t.frags, &updates[i])
	}
	t.offs[len(updates)] = len(t.frags)
	t.head = []byte(`,"as_of":`)
	t.head = appendStamp(t.head, asOf)
	t.head = append(t.head, `,"snapshot":`...)
	t.head = appendString(t.head, snapshotID)
	t.head = append(t.head, `,"updates":[`...)

	h.pubMu.Lock()
	defer h.pubMu.Unlock()
	// The read lock is held until every message is queued (queuing never
	// blocks), so that a subscription change and its reply are ordered
	// with the ticks: no prices of a coin after its "unsubscribed".
	h.mu.RLock()
	defer h.mu.RUnlock()

	touched := h.touched[:0]
	for i := range updates {
		s := h.coins[updates[i].CoinID]
		if s == nil {
			continue
		}
		for _, c := range s.conns {
			if len(c.pending) == 0 {
				touched = append(touched, c)
			}
			c.pending = append(c.pending, int32(i))
		}
	}

	// Each connection's message is the list of its updates, assembled by
	// its writer; connections with the same list share one.
	shared := make(map[uint64]*pricesMsg)
	for _, c := range touched {
		idx := c.pending
		c.pending = idx[:0]
		if c.dead.Load() {
			continue
		}
		key := hashIndexes(idx)
		p, ok := shared[key]
		if !ok || !slices.Equal(p.idx, idx) {
			p = &pricesMsg{tick: t, idx: slices.Clone(idx), size: len(t.head) + len(idx) + 1}
			for _, i := range idx {
				p.size += t.offs[i+1] - t.offs[i]
			}
			if !ok {
				shared[key] = p
			}
		}
		c.enqueueMsg(outMsg{kind: kindPrices, prices: p})
	}
	clear(touched)
	h.touched = touched[:0]
}

// hashIndexes hashes a list of update indexes (FNV-1a over the values).
func hashIndexes(idx []int32) uint64 {
	x := uint64(14695981039346656037)
	for _, i := range idx {
		x ^= uint64(uint32(i))
		x *= 1099511628211
	}
	return x
}

// PublishAlert sends an "alert.triggered" message to every connection of
// the alert's owner (userID in mode) subscribed to the alerts channel.
// alert is the alert as the REST API renders it (a JSON object); it is
// sent as the message's "alert" field, and alertID as "alert_id". It
// never blocks on a client.
func (h *Hub) PublishAlert(userID int64, mode string, alertID int64, alert json.RawMessage) {
	body := []byte(`,"alert_id":`)
	body = strconv.AppendInt(body, alertID, 10)
	body = append(body, `,"alert":`...)
	n := len(body)
	var err error
	body, err = appendCompact(body, alert)
	if err != nil || len(body) == n || body[n] != '{' {
		h.log.Error("stream: alert is not a JSON object; not sent", "alert_id", alertID, "err", err)
		return
	}
	body = append(body, '}')

	h.mu.RLock()
	defer h.mu.RUnlock()
	for c := range h.alerts[ownerKey{userID, mode}] {
		c.enqueue(kindAlert, body)
	}
}

// appendCompact appends src with insignificant space removed.
func appendCompact(b []byte, src []byte) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	err := json.Compact(buf, src)
	return buf.Bytes(), err
}

// DisconnectKey closes every connection authenticated with the key
// keyID, after an error message saying why (cause: a *coinpulse.Error
// with the code, INVALID_API_KEY for a revoked key), with status 1008 and
// reason; it returns how many there were. Call it when a key or its
// account no longer passes: revocation, an expiry, a plan without
// streams then takes effect on open connections too.
func (h *Hub) DisconnectKey(keyID int64, cause error, reason string) int {
	var cs []*conn
	h.mu.RLock()
	for c := range h.conns {
		if c.authed && c.principal.KeyID == keyID {
			cs = append(cs, c)
		}
	}
	h.mu.RUnlock()
	for _, c := range cs {
		c.enqueue(kindError, errorBody(nil, cause))
		c.closeAfter(websocket.StatusPolicyViolation, reason, nil)
	}
	return len(cs)
}

// SetUntil records a new lapse time for the connections of the key keyID
// (see Principal.Until), as after a renewed subscription.
func (h *Hub) SetUntil(keyID int64, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		if c.authed && c.principal.KeyID == keyID {
			c.principal.Until = until
		}
	}
}

// Principals returns the principals of the authenticated connections,
// one per key (for checking them again after a revocation).
func (h *Hub) Principals() []Principal {
	h.mu.RLock()
	defer h.mu.RUnlock()
	seen := map[int64]bool{}
	var ps []Principal
	for c := range h.conns {
		if c.authed && !seen[c.principal.KeyID] {
			seen[c.principal.KeyID] = true
			ps = append(ps, c.principal)
		}
	}
	return ps
}

// Close closes every connection with status 1001 (going away) and waits
// until they have ended; later connections are refused the same way.
// Close is idempotent: a second call, concurrent or later, also returns
// only once every connection has ended.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		<-h.closeDone
		return
	}
	h.closed = true
	cs := slices.Collect(maps.Keys(h.conns))
	h.mu.Unlock()
	for _, c := range cs {
		c.kill(websocket.StatusGoingAway, "server shutting down", nil)
	}
	for _, c := range cs {
		<-c.finished
	}
	close(h.closeDone)
}

// Len returns the number of open connections, authenticated or not.
func (h *Hub) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.conns)
}

func (h *Hub) register(c *conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.conns[c] = struct{}{}
	return true
}

func (h *Hub) unregister(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
	for id := range c.coins {
		h.removeCoin(c, id)
	}
	if c.alerts {
		h.removeAlerts(c)
	}
}

func (h *Hub) setPrincipal(c *conn, p Principal) {
	h.mu.Lock()
	c.principal = p
	c.authed = true
	h.mu.Unlock()
	c.uid.Store(p.UserID)
}

// addCoin subscribes c to coin id (h.mu held, c not subscribed yet).
func (h *Hub) addCoin(c *conn, id string) {
	s := h.coins[id]
	if s == nil {
		s = &coinSubs{}
		h.coins[id] = s
	}
	c.coins[id] = len(s.conns)
	s.conns = append(s.conns, c)
}

// removeCoin unsubscribes c from coin id (h.mu held, c subscribed).
func (h *Hub) removeCoin(c *conn, id string) {
	i := c.coins[id]
	s := h.coins[id]
	last := len(s.conns) - 1
	moved := s.conns[last]
	s.conns[i] = moved
	moved.coins[id] = i
	s.conns[last] = nil
	s.conns = s.conns[:last]
	delete(c.coins, id)
	if last == 0 {
		delete(h.coins, id)
	}
}

func (h *Hub) addAlerts(c *conn) {
	k := ownerKey{c.principal.UserID, c.principal.Mode}
	set := h.alerts[k]
	if set == nil {
		set = make(map[*conn]struct{})
		h.alerts[k] = set
	}
	set[c] = struct{}{}
	c.alerts = true
}

func (h *Hub) removeAlerts(c *conn) {
	k := ownerKey{c.principal.UserID, c.principal.Mode}
	delete(h.alerts[k], c)
	if len(h.alerts[k]) == 0 {
		delete(h.alerts, k)
	}
	c.alerts = false
}

// resolve maps one coin to its id, with a client-safe error.
func (h *Hub) resolve(s string) (string, error) {
	if h.cfg.Resolve == nil {
		return s, nil
	}
	id, err := h.cfg.Resolve(s)
	if err == nil && id != "" {
		return id, nil
	}
	var e *coinpulse.Error
	if errors.As(err, &e) {
		return "", e
	}
	return "", coinpulse.Errorf(coinpulse.CodeNotFound, "Coin %q was not found.", s)
}
