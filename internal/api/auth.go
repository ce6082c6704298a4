package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"coinpulse"
)

// principal is the authenticated caller of a request.
type principal struct {
	key  *coinpulse.APIKey
	user *coinpulse.User
	// live, sandbox and free name the account to the limiter: its
	// allowance, the abuse limit its sandbox calls are held to, and the
	// abuse limit of its live keys' free calls (/usage).
	live, sandbox, free string
}

func newPrincipal(k *coinpulse.APIKey, u *coinpulse.User) *principal {
	id := strconv.FormatInt(u.ID, 10)
	return &principal{key: k, user: u, live: coinpulse.LiveAccount(u.ID), sandbox: "t" + id, free: "f" + id}
}

// carriesKey reports whether r sends a key, valid or not.
func carriesKey(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" || r.Header.Get("X-API-Key") != ""
}

// keyFromRequest reads the key from Authorization: Bearer or X-API-Key.
// Both present with different keys is an error.
func keyFromRequest(r *http.Request) (string, error) {
	// One key a request: a header sent twice is as ambiguous as the two
	// headers with different keys, whichever copy a proxy would keep.
	if len(r.Header["Authorization"]) > 1 || len(r.Header["X-Api-Key"]) > 1 {
		return "", coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "The key header is sent more than once; send one key, once.")
	}
	bearer := ""
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, rest, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "The Authorization header must be \"Bearer <key>\".")
		}
		bearer = strings.TrimSpace(rest)
	}
	header := strings.TrimSpace(r.Header.Get("X-API-Key"))
	switch {
	case bearer != "" && header != "" && bearer != header:
		return "", coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "Authorization and X-API-Key carry different keys; send one.")
	case bearer != "":
		return bearer, nil
	case header != "":
		return header, nil
	}
	return "", coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "An API key is required: send \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\". Get one at /user/api.")
}

// authenticate resolves the request's key to a principal: the form and
// checksum first (no database), then the key cache.
func (s *Server) authenticate(r *http.Request) (*principal, error) {
	key, err := keyFromRequest(r)
	if err != nil {
		return nil, err
	}
	return s.authenticateKey(r.Context(), key)
}

// authenticateKey resolves a key to a principal.
func (s *Server) authenticateKey(ctx context.Context, key string) (*principal, error) {
	if _, err := coinpulse.ParseKey(key); err != nil {
		return nil, err
	}
	var buf [coinpulse.KeyLen]byte // ParseKey checked the length
	p, err := s.keys.lookup(ctx, sha256.Sum256(buf[:copy(buf[:], key)]))
	if err != nil {
		return nil, err
	}
	now := s.clock()
	switch {
	case p == nil:
		return nil, coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "The API key is not valid.")
	case p.key.RevokedAt != nil:
		return nil, coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "The API key has been revoked.")
	case !p.key.Active(now):
		return nil, coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "The API key expired at %s.", p.key.ExpiresAt.UTC().Format(time.RFC3339))
	}
	s.keys.touch(p.key.ID, now)
	return p, nil
}

// authorize applies the subscription expiry, the key's permissions and the
// tier's endpoint rules, now.
func (s *Server) authorize(p *principal, r *http.Request, rt Route) error {
	return s.authorizeAt(p, r, rt, s.clock())
}

// authorizeAt is authorize as of now: for a check of records read after
// now, which a later clock would judge by what may have changed since.
func (s *Server) authorizeAt(p *principal, r *http.Request, rt Route, now time.Time) error {
	u := p.user
	if u.SubscriptionExpired(now) {
		return coinpulse.Errorf(coinpulse.CodeExpiredSubscription, "Your %s subscription expired at %s. Renew it at /user/api.", u.Tier, u.TierExpiresAt.UTC().Format(time.RFC3339))
	}
	need := coinpulse.PermRead
	if rt.Access == Write {
		need = coinpulse.PermWrite
	}
	if rt.Access != AnyKey && !p.key.Permissions.Has(need) {
		return coinpulse.Errorf(coinpulse.CodePermissionDenied, "This key lacks the %s permission that %s needs. Create a key with it at /user/api.", need, routeLabel(rt))
	}
	plan, ok := s.planMap()[u.Tier]
	if !ok {
		return coinpulse.Errorf(coinpulse.CodePermissionDenied, "Your account's tier %q has no plan; contact support.", u.Tier)
	}
	if planAllows(plan, rt) {
		return nil
	}
	why := "does not include webhooks and WebSocket streams"
	switch {
	case plan.Endpoints == coinpulse.EndpointsNone:
		why = "has no API access (only /usage answers)"
	case !rt.Basic && plan.Endpoints != coinpulse.EndpointsAll:
		why = "includes only the basic endpoints (/markets, /markets/search, /markets/global, /markets/{id}, /coins/{id}, /usage)"
	}
	return coinpulse.Errorf(coinpulse.CodePermissionDenied, "The %s plan %s. %s", u.Tier, why, s.upgradeTo(u.Tier, rt))
}

// planAllows reports whether plan reaches rt.
func planAllows(plan coinpulse.Plan, rt Route) bool {
	switch {
	case rt.Free:
		return true
	case plan.Endpoints == coinpulse.EndpointsNone:
		return false
	case !rt.Basic && plan.Endpoints != coinpulse.EndpointsAll:
		return false
	}
	return !rt.Webhooks || plan.Webhooks
}

// upgradeTo says, by the plans the server runs with, which tier reaches
// rt: the lowest above from ("or higher" when every tier above it does
// too), else the lowest of the others.
func (s *Server) upgradeTo(from coinpulse.Tier, rt Route) string {
	allows := func(t coinpulse.Tier) bool { return planAllows(s.planMap()[t], rt) }
	above := coinpulse.Tiers[slices.Index(coinpulse.Tiers, from)+1:]
	if i := slices.IndexFunc(above, allows); i >= 0 {
		higher := ""
		if i < len(above)-1 && !slices.ContainsFunc(above[i:], func(t coinpulse.Tier) bool { return !allows(t) }) {
			higher = " or higher"
		}
		return fmt.Sprintf("Upgrade to %s%s at /user/api to use %s.", above[i], higher, routeLabel(rt))
	}
	if i := slices.IndexFunc(coinpulse.Tiers, allows); i >= 0 {
		return fmt.Sprintf("The %s plan includes %s: change plans at /user/api.", coinpulse.Tiers[i], routeLabel(rt))
	}
	return fmt.Sprintf("No plan of this service includes %s.", routeLabel(rt))
}

// keyCache keeps verified keys with their users in memory. An entry is
// trusted for ttl; any change of the store's auth epoch (a revocation or a
// tier change, on any node or from the CLI) empties the cache. The epoch
// is polled every epochPoll (Config.AuthEpochPoll).
type keyCache struct {
	store coinpulse.AccountStore
	clock coinpulse.Clock
	ttl   time.Duration

	mu    sync.RWMutex
	epoch int64
	// entries holds the keys the store has, unknown those it has not
	// (both by the key's SHA-256), each up to its own bound: a client
	// sending made-up keys (a valid checksum is no secret) fills unknown
	// alone, and never pushes the real keys out.
	entries map[[sha256.Size]byte]cacheEntry
	unknown map[[sha256.Size]byte]time.Time // when the answer expires

	touchMu sync.Mutex
	touched map[int64]time.Time

	// onChange, when set, runs after each change of the auth epoch, in
	// run's goroutine.
	onChange func(ctx context.Context)
	// changed hands run a change that RefreshAuth saw.
	changed chan struct{}
	// poll is how often run reads the epoch (epochPoll).
	poll time.Duration
}

type cacheEntry struct {
	p       *principal
	expires time.Time
}

const (
	epochPoll     = 25 * time.Millisecond
	pollWarnEvery = 10 * time.Second
	touchInterval = 5 * time.Second
	maxCached     = 100_000 // keys the store has
	maxUnknown    = 10_000  // keys it has not
)

func newKeyCache(store coinpulse.AccountStore, clock coinpulse.Clock, ttl time.Duration) *keyCache {
	return &keyCache{store: store, clock: clock, ttl: ttl, entries: map[[sha256.Size]byte]cacheEntry{}, unknown: map[[sha256.Size]byte]time.Time{}, touched: map[int64]time.Time{},
		changed: make(chan struct{}, 1), poll: epochPoll}
}

// lookup returns the principal for a key's SHA-256, nil when there is no
// such key.
func (c *keyCache) lookup(ctx context.Context, sum [sha256.Size]byte) (*principal, error) {
	now := time.Now()
	c.mu.RLock()
	e, ok := c.entries[sum]
	var unknownUntil time.Time
	if !ok {
		unknownUntil = c.unknown[sum]
	}
	epoch := c.epoch
	c.mu.RUnlock()
	if ok && now.Before(e.expires) {
		return e.p, nil
	}
	if now.Before(unknownUntil) {
		return nil, nil
	}
	var p *principal
	k, err := c.store.KeyByHash(ctx, hex.EncodeToString(sum[:]))
	switch {
	case coinpulse.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		u, err := c.store.UserByID(ctx, k.UserID)
		if err != nil {
			return nil, err
		}
		p = newPrincipal(k, u)
	}
	c.mu.Lock()
	switch {
	case c.epoch != epoch: // a revocation since we read would make p stale
	case p == nil:
		delete(c.entries, sum) // expired, and gone from the store since
		if len(c.unknown) >= maxUnknown {
			clear(c.unknown)
		}
		c.unknown[sum] = now.Add(c.ttl)
	default:
		if len(c.entries) >= maxCached {
			clear(c.entries)
		}
		c.entries[sum] = cacheEntry{p: p, expires: now.Add(c.ttl)}
	}
	c.mu.Unlock()
	return p, nil
}

// setEpoch drops every entry when epoch is new, and reports whether it
// was.
func (c *keyCache) setEpoch(epoch int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch == c.epoch {
		return false
	}
	c.epoch = epoch
	clear(c.entries)
	clear(c.unknown)
	return true
}

// size returns how many keys the cache holds, known and unknown.
func (c *keyCache) size() (known, unknown int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries), len(c.unknown)
}

// currentEpoch is the auth epoch last read.
func (c *keyCache) currentEpoch() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.epoch
}

// refresh reads the auth epoch and, when it is new, drops every entry and
// reports it.
func (c *keyCache) refresh(ctx context.Context) (changed bool, err error) {
	epoch, err := c.store.AuthEpoch(ctx)
	if err != nil {
		return false, err
	}
	return c.setEpoch(epoch), nil
}

func (c *keyCache) touch(keyID int64, t time.Time) {
	c.touchMu.Lock()
	c.touched[keyID] = t
	c.touchMu.Unlock()
}

func (c *keyCache) flushTouched(ctx context.Context) error {
	c.touchMu.Lock()
	batch := c.touched
	c.touched = map[int64]time.Time{}
	c.touchMu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	return c.store.TouchKeys(ctx, batch)
}

// run polls the auth epoch and flushes last-used times until ctx ends,
// then flushes once more.
func (c *keyCache) run(ctx context.Context, log *slog.Logger) {
	poll := time.NewTicker(c.poll)
	flush := time.NewTicker(touchInterval)
	var (
		down   bool      // the last poll failed
		failed int       // failures since the last warning
		warned time.Time // when the last warning was logged
	)
	defer poll.Stop()
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			done, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := c.flushTouched(done); err != nil {
				log.Warn("flush key last-used times", "err", err)
			}
			return
		case <-c.changed: // RefreshAuth saw a change: its onChange runs here
			if c.onChange != nil {
				c.onChange(ctx)
			}
		case <-poll.C:
			changed, err := c.refresh(ctx)
			if changed && c.onChange != nil {
				c.onChange(ctx)
			}
			switch {
			case err != nil && ctx.Err() == nil:
				// At most one warning every pollWarnEvery while the store
				// fails (the poll runs 40 times a second), then one line
				// when it answers again.
				failed++
				if now := time.Now(); now.Sub(warned) >= pollWarnEvery {
					log.Warn("poll auth epoch; cached keys stay in use until it answers", "err", err, "failures_since_last", failed)
					warned, failed = now, 0
				}
				down = true
			case err == nil && down:
				log.Info("auth epoch poll answers again")
				down, failed, warned = false, 0, time.Time{}
			}
		case <-flush.C:
			if err := c.flushTouched(ctx); err != nil && ctx.Err() == nil {
				log.Warn("flush key last-used times", "err", err)
			}
		}
	}
}
