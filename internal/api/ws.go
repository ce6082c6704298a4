package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"coinpulse"
	"coinpulse/internal/stream"
)

// wsCallKey carries a WebSocket request to the hub's first-message
// authentication.
type wsCallKey struct{}

type wsCall struct {
	e *exchange
	r *http.Request
	// start is when the call began; upgrade, how long it took to be
	// answered 101: its duration in the meter.
	start   time.Time
	upgrade time.Duration
	// release gives back the connection slot this call holds (see
	// takeStreamSlot); nil for none yet.
	release func()
}

// withStreamCall gives a request to the WebSocket route the state its
// upgrade and its first-message authentication need (wrap calls it).
func withStreamCall(r *http.Request, e *exchange) *http.Request {
	call := &wsCall{e: e, start: e.start}
	r = r.WithContext(context.WithValue(r.Context(), wsCallKey{}, call))
	call.r = r
	return r
}

// GET /ws: the WebSocket stream (see internal/stream for the protocol).
// A key in the headers was checked, limited and counted by admit; without
// one the first message must carry it, and streamAuth does the same
// checks then. Either way the connection is one call, metered as soon as
// it is admitted (streamUpgraded, streamAuth), with the time its upgrade
// took: a connection's length is not a response time, and a call
// metered only at its end would be missing from the database (and from
// a Redis limiter's seed) for as long as it lasts, and lost in a crash.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		return err
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return partError("Upgrade", "GET "+r.URL.Path+" is a WebSocket endpoint: connect with a WebSocket client (Upgrade: websocket).")
	}
	if err := checkHandshake(r); err != nil {
		return err
	}
	e := exchangeOf(w)
	var p *stream.Principal
	if e.principal != nil {
		sp := streamPrincipal(e.principal)
		p = &sp
	}
	err := s.hub.Serve(e, r, p) // r carries its wsCall (wrap, withStreamCall)
	if e.status == http.StatusOK && !e.wrote {
		return err // the upgrade failed before anything was written
	}
	if err != nil {
		s.log.Debug("websocket ended", "err", err, "request_id", e.id)
	}
	return nil
}

// checkHandshake refuses, as VALIDATION_ERROR, an upgrade request the
// WebSocket library would refuse with a plain-text 400 or 426 (RFC 6455
// section 4.2.1): the answer stays in the error envelope.
func checkHandshake(r *http.Request) error {
	invalid := func(header, msg string) error {
		return &coinpulse.Error{Code: coinpulse.CodeValidation, Message: "Not a valid WebSocket handshake: " + msg,
			Details: []coinpulse.FieldError{{Field: header, Message: msg}}}
	}
	upgrade := false
	for _, v := range r.Header.Values("Connection") {
		for t := range strings.SplitSeq(v, ",") {
			upgrade = upgrade || strings.EqualFold(strings.TrimSpace(t), "upgrade")
		}
	}
	if !upgrade {
		return invalid("Connection", "the Connection header must include Upgrade.")
	}
	if v := r.Header.Get("Sec-WebSocket-Version"); v != "13" {
		return invalid("Sec-WebSocket-Version", fmt.Sprintf("Sec-WebSocket-Version must be 13, not %q.", truncate(v, 20)))
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return invalid("Sec-WebSocket-Key", "send one Sec-WebSocket-Key header.")
	}
	if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(k) != 16 {
		return invalid("Sec-WebSocket-Key", "Sec-WebSocket-Key must be 16 bytes in base64.")
	}
	return nil
}

func streamPrincipal(p *principal) stream.Principal {
	return stream.Principal{UserID: p.user.ID, Mode: string(p.key.Mode), KeyID: p.key.ID, Until: lapse(p.user, p.key)}
}

// streamAuth authenticates a key sent in a WebSocket's first message with
// the checks admit makes of a key in the headers: the key, the plan, the
// limits (the connection counts as one call).
func (s *Server) streamAuth(ctx context.Context, key string) (stream.Principal, error) {
	call, _ := ctx.Value(wsCallKey{}).(*wsCall)
	if call == nil {
		return stream.Principal{}, coinpulse.Errorf(coinpulse.CodeServerError, "no request")
	}
	e, r := call.e, call.r
	p, err := s.authenticateKey(ctx, strings.TrimSpace(key))
	if err != nil {
		return stream.Principal{}, err
	}
	if err := s.authorize(p, r, s.wsRoute); err != nil {
		return stream.Principal{}, err
	}
	e.principal = p
	if err := s.takeStreamSlot(e, r); err != nil {
		e.principal = nil
		return stream.Principal{}, err
	}
	if err := s.limit(e, r, s.wsRoute); err != nil {
		e.principal = nil
		return stream.Principal{}, err
	}
	e.admitted = true
	s.meterStream(call)
	return streamPrincipal(p), nil
}

// streamUpgraded is the hub's word that the connection of ctx was
// answered 101. One authenticated by its headers, admitted before the
// upgrade, is metered now.
func (s *Server) streamUpgraded(ctx context.Context) {
	call, _ := ctx.Value(wsCallKey{}).(*wsCall)
	if call == nil {
		return
	}
	call.upgrade = time.Since(call.start)
	s.meterStream(call)
}

// meterStream meters the WebSocket call of call once it is admitted:
// status 101, the upgrade's duration.
func (s *Server) meterStream(call *wsCall) {
	s.meter(call.e, call.r, s.wsRoute, meterLabel(s.wsRoute), call.upgrade)
}

// streamResolve maps a coin id or symbol to its id in the current market.
func (s *Server) streamResolve(idOrSymbol string) (string, error) {
	snap := s.market.Current()
	if snap == nil {
		return "", coinpulse.Errorf(coinpulse.CodeUnavailable, "Market data is still loading; subscribe again in a few seconds.")
	}
	if c := snap.Coin(idOrSymbol); c != nil {
		return c.ID, nil
	}
	d, ok := snap.Lookup(idOrSymbol)
	if !ok {
		return "", coinpulse.Errorf(coinpulse.CodeNotFound, "No coin %q; use an id from /api/v1/markets or /api/v1/markets/search.", truncate(idOrSymbol, 100))
	}
	return d.ID, nil
}

// DefaultMaxStreamsPerAccount is how many WebSocket connections an account
// may hold open by default (Config.MaxStreamsPerAccount).
const DefaultMaxStreamsPerAccount = 25

// streamSlots is the in-process coinpulse.Slots: it caps the WebSocket
// connections each account holds open on this node.
type streamSlots struct {
	mu   sync.Mutex
	held map[int64]int
}

// Take takes one of account's slots; see coinpulse.Slots.
func (t *streamSlots) Take(_ context.Context, account int64, max int) (func(), bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if max >= 0 && t.held[account] >= max {
		return nil, false, nil
	}
	t.held[account]++
	var once sync.Once
	return func() { once.Do(func() { t.give(account) }) }, true, nil
}

// give gives back one of account's slots.
func (t *streamSlots) give(account int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[account]--; t.held[account] <= 0 {
		delete(t.held, account)
	}
}

// takeStreamSlot takes a connection slot for the WebSocket call of r, of
// e's principal, so that one account cannot tie up the nodes' memory and
// sockets: the limits bound how fast connections open, not how many stay
// open. The slot is taken once the key is known, before the limits count
// the call: 429 RATE_LIMIT_EXCEEDED, counting nothing, when the account
// holds every slot (on this node, or on every node with shared slots);
// 503 when the shared slots cannot be reached. finish gives it back
// (giveStreamSlot).
func (s *Server) takeStreamSlot(e *exchange, r *http.Request) error {
	call, _ := r.Context().Value(wsCallKey{}).(*wsCall)
	if call == nil || call.release != nil {
		return nil
	}
	release, ok, err := s.slots.Take(r.Context(), e.principal.user.ID, s.maxStreams)
	switch {
	case err != nil:
		e.Header().Set("Retry-After", "1")
		return &coinpulse.Error{Code: coinpulse.CodeUnavailable, Message: "WebSocket connections cannot be counted right now; retry in a second.", Err: err}
	case !ok:
		where := "on this server"
		if s.sharedSlots {
			where = "across the service"
		}
		e.Header().Set("Retry-After", strconv.Itoa(streamSlotRetry))
		return coinpulse.Errorf(coinpulse.CodeRateLimitExceeded,
			"Your account has %d WebSocket connections open %s, the most it may hold; close one before opening another (retry in %d seconds).", s.maxStreams, where, streamSlotRetry)
	}
	call.release = release
	return nil
}

// streamSlotRetry is the Retry-After of a connection refused for want of
// a slot: a guess, as nothing says when one of the others will close.
const streamSlotRetry = 10

// giveStreamSlot gives back the slot the WebSocket call of r took, if any.
func (s *Server) giveStreamSlot(r *http.Request) {
	if call, _ := r.Context().Value(wsCallKey{}).(*wsCall); call != nil && call.release != nil {
		call.release()
		call.release = nil
	}
}

// Hub returns the server's WebSocket hub, to publish prices and alerts.
func (s *Server) Hub() *stream.Hub { return s.hub }

// recheckStreams closes the WebSockets whose key or account no longer
// passes: a revoked or expired key, an expired subscription, a plan
// without streams. The key cache runs it whenever the auth epoch changes
// (a revocation or a tier change, on any node or from the CLI), SetPlans
// after new plans, and watchStreams when a stream's Until passes.
func (s *Server) recheckStreams(ctx context.Context) { s.recheck(ctx, s.hub.Principals()) }

// recheck closes the streams of ps whose key or account no longer passes,
// after an error saying why, and records for the others when they lapse
// (a subscription renewed since they connected lapses later). The keys
// it could not check (the store failed) it leaves to watchStreams.
func (s *Server) recheck(ctx context.Context, ps []stream.Principal) {
	// One recheck at a time (the auth epoch's and watchStreams'), each
	// judging the records it reads by a time taken before it reads them:
	// a recheck that read a subscription before its renewal can neither
	// close the stream by a later clock nor set the stream's lapse after
	// a later recheck set the renewed one.
	s.recheckMu.Lock()
	defer s.recheckMu.Unlock()
	now := s.clock()
	for _, p := range ps {
		until, err := s.streamStanding(ctx, p, now)
		var cause *coinpulse.Error
		refused := errors.As(err, &cause) && cause.Code.Status() < 500 // 401, 403: not a store failure
		s.unchecked.mark(p.KeyID, err != nil && !refused)
		switch {
		case refused:
			reason := closeReason(cause)
			n := s.hub.DisconnectKey(p.KeyID, cause, reason)
			s.log.Info("closed websockets no longer allowed", "key_id", p.KeyID, "reason", reason, "connections", n)
		case err != nil:
			s.log.Warn("recheck websocket; trying again in a second", "key_id", p.KeyID, "err", err)
		case !until.Equal(p.Until):
			s.hub.SetUntil(p.KeyID, until)
		}
	}
}

// keyExpired is the message of a stream closed because its key expired.
const keyExpired = "The API key expired."

// closeReason is the close reason of a stream refused by cause, one of
// streamStanding's errors.
func closeReason(cause *coinpulse.Error) string {
	switch {
	case cause.Code == coinpulse.CodeExpiredSubscription:
		return "subscription expired"
	case cause.Code == coinpulse.CodePermissionDenied:
		return "plan excludes streams"
	case cause.Message == keyExpired:
		return "api key expired"
	}
	return "api key revoked"
}

// streamStanding returns when the streams of p's key lapse (zero: never),
// or, as a *coinpulse.Error, why they may not go on: the checks a new
// connection passes.
func (s *Server) streamStanding(ctx context.Context, p stream.Principal, now time.Time) (time.Time, error) {
	u, err := s.store.UserByID(ctx, p.UserID)
	if coinpulse.IsNotFound(err) {
		return time.Time{}, coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "The API key was revoked.")
	}
	if err != nil {
		return time.Time{}, err
	}
	keys, err := s.store.KeysByUser(ctx, p.UserID)
	if err != nil {
		return time.Time{}, err
	}
	var key *coinpulse.APIKey
	for _, k := range keys {
		if k.ID == p.KeyID {
			key = k
		}
	}
	switch {
	case key == nil || key.RevokedAt != nil:
		return time.Time{}, coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "The API key was revoked.")
	case !key.Active(now):
		return time.Time{}, coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, keyExpired)
	}
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/api/v1/ws"}}
	if err := s.authorizeAt(newPrincipal(key, u), req, s.wsRoute, now); err != nil {
		return time.Time{}, err
	}
	return lapse(u, key), nil
}

// lapse is when a stream of key k of u stops passing by itself: at the
// subscription's expiry (a paid tier's) or the key's, whichever is first;
// zero for never.
func lapse(u *coinpulse.User, k *coinpulse.APIKey) time.Time {
	var t time.Time
	if u.Tier != coinpulse.TierFree && u.TierExpiresAt != nil {
		t = *u.TierExpiresAt
	}
	if k.ExpiresAt != nil && (t.IsZero() || k.ExpiresAt.Before(t)) {
		t = *k.ExpiresAt
	}
	return t
}

// keySet is a set of key ids, safe for concurrent use.
type keySet struct {
	mu  sync.Mutex
	ids map[int64]bool
}

// mark adds id to the set when in is true, else removes it.
func (k *keySet) mark(id int64, in bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !in {
		delete(k.ids, id)
		return
	}
	if k.ids == nil {
		k.ids = make(map[int64]bool)
	}
	k.ids[id] = true
}

// retain removes the ids that no principal of ps has, and returns the
// others.
func (k *keySet) retain(ps []stream.Principal) map[int64]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.ids) == 0 {
		return nil
	}
	live := make(map[int64]bool, len(ps))
	for _, p := range ps {
		live[p.KeyID] = true
	}
	maps.DeleteFunc(k.ids, func(id int64, _ bool) bool { return !live[id] })
	return maps.Clone(k.ids)
}

// watchStreams rechecks, every second until ctx ends, the streams whose
// Until has passed since the last look: an expiry closes them within a
// second, without a database query a stream a second. Streams whose last
// recheck the store failed (here, or after a revocation or new plans)
// are rechecked every second too, until one succeeds.
func (s *Server) watchStreams(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := s.clock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := s.clock()
		ps := s.hub.Principals()
		retry := s.unchecked.retain(ps)
		var lapsed []stream.Principal
		for _, p := range ps {
			if retry[p.KeyID] || p.Until.After(last) && !now.Before(p.Until) {
				lapsed = append(lapsed, p)
			}
		}
		last = now
		if len(lapsed) > 0 {
			s.recheck(ctx, lapsed)
		}
	}
}
