package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"coinpulse"
)

// The authentication states of a connection.
const (
	stateAwaiting int32 = iota // no key yet: the first message must be auth
	stateAuthed
	stateFailed // authentication failed or timed out; closing
)

// Errors Serve returns for connections the server dropped.
var (
	errTooSlow      = errors.New("stream: client dropped: too slow (send queue full)")
	errWriteTimeout = errors.New("stream: client dropped: write timed out")
	errAbusive      = errors.New("stream: client dropped: too many invalid messages")
)

// outMsg is a queued server message: its kind and its body (see kind),
// or for prices the updates to write.
type outMsg struct {
	kind   kind
	body   []byte
	prices *pricesMsg
}

// tickData is one PublishPrices call's encoding: the head of the prices
// body (`,"as_of":…,"updates":[`) and every update, encoded once.
type tickData struct {
	head  []byte
	frags []byte
	offs  []int // update i is frags[offs[i]:offs[i+1]]
}

// pricesMsg is one connection's prices message of a tick (shared by the
// connections with the same updated coins): the indexes of its updates.
// The writer assembles it from the tick's encoded updates.
type pricesMsg struct {
	tick *tickData
	idx  []int32
	size int // of the body
}

// appendBody appends the body of the prices message.
func (p *pricesMsg) appendBody(b []byte) []byte {
	b = slices.Grow(b, p.size)
	t := p.tick
	b = append(b, t.head...)
	for k, i := range p.idx {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, t.frags[t.offs[i]:t.offs[i+1]]...)
	}
	return append(b, "]}"...)
}

// ending is why the server ends a connection: the close status and
// reason sent, and what Serve returns.
type ending struct {
	code   websocket.StatusCode
	reason string
	err    error
}

// conn is one WebSocket connection. It has two goroutines: Serve's, which
// reads and handles client messages, and writeLoop, the only one that
// writes to the socket.
type conn struct {
	hub    *Hub
	ws     *websocket.Conn
	ctx    context.Context // for Authenticate; ends with the connection
	cancel context.CancelFunc

	send       chan outMsg
	room       chan struct{} // writeLoop took a message off send (see waitForRoom)
	done       chan struct{} // closed by kill: close now, skip the queue
	killOnce   sync.Once
	end        atomic.Pointer[ending] // the first reason wins
	dead       atomic.Bool            // queue nothing more
	state      atomic.Int32
	uid        atomic.Int64 // principal.UserID, for logs
	writerDone chan struct{}
	finished   chan struct{} // Serve's clean-up is complete

	// Guarded by hub.mu.
	authed    bool
	principal Principal
	coins     map[string]int // coin id → index in hub.coins[id].conns
	alerts    bool

	// Guarded by hub.pubMu: the indexes of this tick's updates.
	pending []int32

	// Serve's goroutine only.
	invalidCount int
	invalidSince time.Time
	// budget is how many messages the client may send now (see pace),
	// as of budgetAt; read by the reader alone.
	budget   float64
	budgetAt time.Time

	// writeLoop only.
	seq uint64
}

func newConn(h *Hub, ws *websocket.Conn, ctx context.Context, cancel context.CancelFunc) *conn {
	return &conn{
		hub:        h,
		ws:         ws,
		ctx:        ctx,
		cancel:     cancel,
		send:       make(chan outMsg, h.cfg.SendQueue),
		room:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		writerDone: make(chan struct{}),
		finished:   make(chan struct{}),
		coins:      make(map[string]int),
	}
}

// setEnd records why the connection ends, unless a reason is already
// recorded; it reports whether this one was.
func (c *conn) setEnd(code websocket.StatusCode, reason string, err error) bool {
	return c.end.CompareAndSwap(nil, &ending{code: code, reason: reason, err: err})
}

// enqueue queues a message without blocking. A full queue drops the
// client (status 1008, "too slow").
func (c *conn) enqueue(k kind, body []byte) bool {
	return c.enqueueMsg(outMsg{kind: k, body: body})
}

// enqueueMsg is enqueue of a prepared message.
func (c *conn) enqueueMsg(m outMsg) bool {
	if c.dead.Load() {
		return false
	}
	select {
	case c.send <- m:
		return true
	default:
		if c.kill(websocket.StatusPolicyViolation, "too slow", errTooSlow) {
			c.hub.log.Warn("stream: dropped a slow client", "user_id", c.userID(), "queue", cap(c.send))
		}
		return false
	}
}

// kill closes the connection now with code and reason: the writer stops
// after the message it is writing, if any, and sends the close frame. It
// reports whether this call set the reason.
func (c *conn) kill(code websocket.StatusCode, reason string, err error) bool {
	first := c.setEnd(code, reason, err)
	c.dead.Store(true)
	c.killOnce.Do(func() {
		close(c.done)
		c.cancel()
	})
	return first
}

// closeAfter closes the connection with code and reason once the
// messages already queued are written.
func (c *conn) closeAfter(code websocket.StatusCode, reason string, err error) {
	c.setEnd(code, reason, err)
	if c.dead.Swap(true) {
		return // already closing
	}
	select {
	case c.send <- outMsg{kind: kindClose}:
	default:
		c.kill(code, reason, err)
	}
}

// userID is the principal's user id, for logs (0: not authenticated).
func (c *conn) userID() int64 { return c.uid.Load() }

// writeBufs is a free list of the buffers messages are assembled in. Not
// a sync.Pool: garbage collections, which happen in the minute between
// ticks, would empty it and every tick would allocate afresh.
var writeBufs = make(chan []byte, 64)

// maxKeptBuffer is the largest buffer put back on writeBufs.
const maxKeptBuffer = 256 << 10

func getWriteBuf() []byte {
	select {
	case b := <-writeBufs:
		return b[:0]
	default:
		return make([]byte, 0, 4096)
	}
}

func putWriteBuf(b []byte) {
	if cap(b) > maxKeptBuffer {
		return
	}
	select {
	case writeBufs <- b:
	default:
	}
}

// writeLoop writes queued messages and heartbeats until the connection
// ends, then closes it.
func (c *conn) writeLoop() {
	defer close(c.writerDone)
	var ticker *time.Ticker
	var tick <-chan time.Time
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		select {
		case <-c.done:
			c.closeSocket()
			return
		default:
		}
		var err error
		select {
		case <-c.done:
			c.closeSocket()
			return
		case m := <-c.send:
			select {
			case c.room <- struct{}{}:
			default: // already signalled
			}
			if m.kind == kindClose {
				c.closeSocket()
				return
			}
			err = c.write(m, time.Time{})
			if m.kind == kindWelcome && ticker == nil && c.hub.cfg.Heartbeat > 0 {
				ticker = time.NewTicker(c.hub.cfg.Heartbeat)
				tick = ticker.C
			}
		case now := <-tick:
			err = c.write(outMsg{kind: kindHeartbeat}, now)
		}
		if err != nil {
			// The library has closed the socket; the reader ends too.
			if errors.Is(err, context.DeadlineExceeded) {
				c.setEnd(websocket.StatusPolicyViolation, "too slow", errWriteTimeout)
				c.hub.log.Warn("stream: dropped a client: write timed out", "user_id", c.userID())
			}
			c.dead.Store(true)
			return
		}
	}
}

// write writes one message: its kind's prefix, the next sequence number
// and the body (for a heartbeat, the time t).
func (c *conn) write(m outMsg, t time.Time) error {
	b := append(getWriteBuf(), prefixes[m.kind]...)
	c.seq++
	b = strconv.AppendUint(b, c.seq, 10)
	switch {
	case m.kind == kindHeartbeat:
		b = append(b, `,"time":`...)
		b = appendStamp(b, t)
		b = append(b, '}')
	case m.prices != nil:
		b = m.prices.appendBody(b)
	default:
		b = append(b, m.body...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.hub.cfg.WriteTimeout)
	err := c.ws.Write(ctx, websocket.MessageText, b)
	cancel()
	putWriteBuf(b)
	return err
}

// closeSocket performs the close handshake with the recorded status
// (bounded by the library's timeouts: 5 s to write, 5 s to hear back).
func (c *conn) closeSocket() {
	code, reason := websocket.StatusNormalClosure, ""
	if e := c.end.Load(); e != nil {
		code, reason = e.code, e.reason
	}
	c.ws.Close(code, reason)
}

// errNotUTF8 ends a connection whose client sent a text message that is
// not UTF-8.
var errNotUTF8 = errors.New("stream: a text message is not valid UTF-8")

// readLoop reads and handles client messages until the socket fails or
// closes.
func (c *conn) readLoop() error {
	var buf bytes.Buffer
	for {
		typ, r, err := c.ws.Reader(context.Background())
		if err != nil {
			return err
		}
		buf.Reset()
		n, err := buf.ReadFrom(io.LimitReader(r, MaxMessageBytes+1))
		if err != nil {
			return err
		}
		if n > MaxMessageBytes {
			// Up to HardMessageBytes; beyond, the library closes with 1009.
			if _, err := io.Copy(io.Discard, r); err != nil {
				return err
			}
		}
		if c.dead.Load() {
			continue // closing: what the client still sends is ignored
		}
		if typ == websocket.MessageText && n <= MaxMessageBytes && !utf8.Valid(buf.Bytes()) {
			// RFC 6455 §8.1: a text message must be UTF-8, or the
			// connection fails with 1007.
			c.kill(websocket.StatusInvalidFramePayloadData, "invalid UTF-8", errNotUTF8)
			return errNotUTF8
		}
		c.waitForRoom()
		c.pace()
		var m ClientMessage
		switch {
		case n > MaxMessageBytes:
			err = errTooLarge()
		case typ != websocket.MessageText:
			err = invalid("message", "must be a text message holding JSON; binary messages are not supported")
		default:
			m, err = ParseClientMessage(buf.Bytes())
		}
		c.handle(m, err)
	}
}

// pace holds a client message until the connection's budget allows it:
// MessageBurst at once, then MessageRate a second. The messages wait
// unread; the client is not dropped for sending fast.
func (c *conn) pace() {
	now := time.Now()
	if c.budgetAt.IsZero() {
		c.budget, c.budgetAt = c.hub.cfg.MessageBurst, now
	}
	c.budget = min(c.hub.cfg.MessageBurst, c.budget+now.Sub(c.budgetAt).Seconds()*c.hub.cfg.MessageRate)
	c.budgetAt = now
	if c.budget < 1 {
		wait := time.Duration((1 - c.budget) / c.hub.cfg.MessageRate * float64(time.Second))
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.done:
			return
		}
		c.budget, c.budgetAt = 1, time.Now()
	}
	c.budget--
}

// waitForRoom holds the next client message while the send queue is more
// than half full. A client that sends messages faster than the writer
// delivers their replies (1,000 one-coin subscriptions in a row, say)
// then waits, its messages unread, instead of filling the queue with
// replies and being dropped as too slow while it reads promptly. The
// other half of the queue stays for what the hub pushes (prices,
// alerts), whose overflow is what "too slow" means. A client that reads
// nothing is ended by the writer's timeout meanwhile.
func (c *conn) waitForRoom() {
	for len(c.send) > cap(c.send)/2 {
		select {
		case <-c.room:
		case <-c.done:
			return
		case <-c.writerDone:
			return
		}
	}
}

// handle answers one client message (perr: why it is invalid).
func (c *conn) handle(m ClientMessage, perr error) {
	switch c.state.Load() {
	case stateAwaiting:
		c.authenticate(m, perr)
		return
	case stateFailed:
		return
	}
	if perr != nil {
		c.reject(m.ID, perr)
		return
	}
	switch m.Type {
	case TypeAuth:
		c.reject(m.ID, invalid("type", "auth is accepted only as the first message of a connection without a key; this connection is already authenticated"))
	case TypePing:
		c.enqueue(kindPong, pongBody(m.ID, time.Now()))
	case TypeSubscribe:
		if m.Channel == ChannelPrices {
			c.subscribePrices(m)
		} else {
			c.subscribeAlerts(m, true)
		}
	case TypeUnsubscribe:
		if m.Channel == ChannelPrices {
			c.unsubscribePrices(m)
		} else {
			c.subscribeAlerts(m, false)
		}
	}
}

// authenticate handles the first message of a connection without a key.
func (c *conn) authenticate(m ClientMessage, perr error) {
	h := c.hub
	fail := func(err error, code websocket.StatusCode, reason string) {
		if !c.state.CompareAndSwap(stateAwaiting, stateFailed) {
			return
		}
		c.enqueue(kindError, errorBody(m.ID, err))
		c.closeAfter(code, reason, fmt.Errorf("stream: authentication failed: %w", err))
	}
	switch {
	case perr != nil:
		fail(perr, websocket.StatusPolicyViolation, "authentication required")
		return
	case m.Type != TypeAuth:
		fail(errAuthFirst(), websocket.StatusPolicyViolation, "authentication required")
		return
	case h.cfg.Authenticate == nil:
		fail(coinpulse.Errorf(coinpulse.CodeInvalidAPIKey,
			"Send the API key in the Authorization or X-API-Key header of the connection request."),
			websocket.StatusPolicyViolation, "authentication failed")
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, h.cfg.AuthTimeout)
	p, err := h.cfg.Authenticate(ctx, m.APIKey)
	cancel()
	if err != nil {
		code, reason := websocket.StatusPolicyViolation, "authentication failed"
		switch coinpulse.ErrorCode(err) {
		case coinpulse.CodeServerError:
			code, reason = websocket.StatusInternalError, "internal error"
			h.log.Error("stream: authenticate", "err", err)
		case coinpulse.CodeUnavailable:
			code, reason = websocket.StatusTryAgainLater, "try again later"
		case coinpulse.CodeRateLimitExceeded: // temporary: 1008 would tell the client not to retry
			code, reason = websocket.StatusTryAgainLater, "rate limit exceeded"
		}
		fail(err, code, reason)
		return
	}
	if !c.state.CompareAndSwap(stateAwaiting, stateAuthed) {
		return // timed out meanwhile
	}
	h.setPrincipal(c, p)
	c.enqueue(kindWelcome, welcomeBody(m.ID, p.Mode, &h.cfg))
}

func errAuthFirst() error {
	return coinpulse.Errorf(coinpulse.CodeInvalidAPIKey,
		`Authenticate first: send {"type":"auth","api_key":"sk_..."} as the first message, or connect with an Authorization or X-API-Key header.`)
}

// authTimeout ends a connection that has not authenticated in time.
func (c *conn) authTimeout() {
	if !c.state.CompareAndSwap(stateAwaiting, stateFailed) {
		return
	}
	err := coinpulse.Errorf(coinpulse.CodeInvalidAPIKey,
		`No auth message within %s: send {"type":"auth","api_key":"sk_..."} as the first message, or connect with an Authorization or X-API-Key header.`,
		c.hub.cfg.AuthTimeout)
	c.enqueue(kindError, errorBody(nil, err))
	c.closeAfter(websocket.StatusPolicyViolation, "authentication timeout", fmt.Errorf("stream: %w", err))
	c.cancel() // a pending Authenticate is pointless now
}

// reject sends an error reply and closes the connection when it has
// earned more than MaxInvalidMessages of them within a minute.
func (c *conn) reject(id []byte, err error) {
	c.enqueue(kindError, errorBody(id, err))
	now := time.Now()
	if now.Sub(c.invalidSince) > time.Minute {
		c.invalidSince, c.invalidCount = now, 0
	}
	c.invalidCount++
	if c.invalidCount > c.hub.cfg.MaxInvalidMessages {
		c.hub.log.Warn("stream: closing an abusive client", "user_id", c.userID())
		c.closeAfter(websocket.StatusPolicyViolation, "too many invalid messages", errAbusive)
	}
}

// resolveCoins maps the coins of a message to distinct coin ids, in
// order. With unsubscribing, a coin the market no longer knows still
// names a subscription by its id. Failures are reported together, one
// detail per coin, and nothing is resolved.
func (c *conn) resolveCoins(coins []string, unsubscribing bool) ([]string, error) {
	h := c.hub
	ids := make([]string, 0, len(coins))
	seen := make(map[string]struct{}, len(coins))
	var details []coinpulse.FieldError
	var first error
	var names []string
	for i, s := range coins {
		id, err := h.resolve(s)
		if err != nil && unsubscribing {
			h.mu.RLock()
			_, ok := c.coins[s]
			h.mu.RUnlock()
			if ok {
				id, err = s, nil
			}
		}
		if err != nil {
			if first == nil {
				first = err
			}
			details = append(details, coinpulse.FieldError{
				Field: "coins[" + strconv.Itoa(i) + "]", Message: coinpulse.ErrorMessage(err)})
			names = append(names, strconv.Quote(s))
			continue
		}
		if _, dup := seen[id]; !dup {
			seen[id] = struct{}{}
			ids = append(ids, id)
		}
	}
	if first == nil {
		return ids, nil
	}
	msg := coinpulse.ErrorMessage(first)
	if len(details) > 1 {
		if len(names) > 5 {
			names = append(names[:5], "…")
		}
		msg = fmt.Sprintf("%d coins were not found: %s.", len(details), strings.Join(names, ", "))
	}
	return nil, &coinpulse.Error{Code: coinpulse.ErrorCode(first), Message: msg, Details: details}
}

// subscribePrices adds coins to the connection, all or none.
func (c *conn) subscribePrices(m ClientMessage) {
	ids, err := c.resolveCoins(m.Coins, false)
	if err != nil {
		c.reject(m.ID, err)
		return
	}
	h := c.hub
	max := h.cfg.MaxSubscriptions
	h.mu.Lock()
	added := 0
	for _, id := range ids {
		if _, ok := c.coins[id]; !ok {
			added++
		}
	}
	if have := len(c.coins); have+added > max {
		h.mu.Unlock()
		c.reject(m.ID, invalid("coins", fmt.Sprintf(
			"would make %d subscriptions; a connection may follow at most %d coins (this one follows %d)",
			have+added, max, have)))
		return
	}
	for _, id := range ids {
		if _, ok := c.coins[id]; !ok {
			h.addCoin(c, id)
		}
	}
	// Queued under the lock: no tick can put prices of these coins first.
	c.enqueue(kindSubscribed, subscriptionBody(m.ID, ChannelPrices, ids, len(c.coins)))
	h.mu.Unlock()
}

// unsubscribePrices removes coins (all of them when m has none).
func (c *conn) unsubscribePrices(m ClientMessage) {
	var ids []string
	if m.Coins != nil {
		var err error
		if ids, err = c.resolveCoins(m.Coins, true); err != nil {
			c.reject(m.ID, err)
			return
		}
	}
	h := c.hub
	h.mu.Lock()
	if m.Coins == nil {
		ids = slices.Sorted(maps.Keys(c.coins))
	}
	for _, id := range ids {
		if _, ok := c.coins[id]; ok {
			h.removeCoin(c, id)
		}
	}
	// Queued under the lock: no tick can put prices of these coins after.
	c.enqueue(kindUnsubscribed, subscriptionBody(m.ID, ChannelPrices, ids, len(c.coins)))
	h.mu.Unlock()
}

// subscribeAlerts (un)subscribes the connection to its owner's alert
// firings; both are idempotent.
func (c *conn) subscribeAlerts(m ClientMessage, on bool) {
	h := c.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	k := kindUnsubscribed
	if on {
		k = kindSubscribed
		if !c.alerts {
			h.addAlerts(c)
		}
	} else if c.alerts {
		h.removeAlerts(c)
	}
	c.enqueue(k, subscriptionBody(m.ID, ChannelAlerts, nil, 0))
}
