package dashboard

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"coinpulse"
)

// Security events: what an operator alerts on (brute force, lockouts,
// mass sign-ups, who made or revoked a key). Each is one log line on the
// server's logger with a stable "event" attribute, its account (user_id
// and email, or account=unknown), what it is about, and last the client's
// address (client_ip, after --trusted-proxies; the per-address limits
// count an IPv6 one by its /64, see throttled) and the request id
// (request_id, as the API's lines).
//
// A line never carries a password, a session or CSRF token, or a full API
// key (only its id and prefix), and never an e-mail address that has no
// account: what was typed there may be a password, and an address nobody
// holds has no account to protect.
//
// Levels: WARN for what a brute force or a probe produces at a bounded
// rate (a failed log-in, a lock beginning, a sign-up with a taken
// address: at most the throttle's figures per window), INFO for the rest,
// the refused attempts of a locked account or address included (those
// come as fast as a client sends them, and the lock was logged already).
const (
	evSignup          = "signup"           // INFO: an account created (and logged in)
	evSignupFailed    = "signup.failed"    // WARN: the e-mail address has an account (a probe)
	evSignupLocked    = "signup.locked"    // WARN: the address's last sign-up this window
	evSignupThrottled = "signup.throttled" // INFO: a sign-up refused by a lock (429)
	evLoginSucceeded  = "login.succeeded"  // INFO
	evLoginFailed     = "login.failed"     // WARN: wrong password or no such account
	evLoginLocked     = "login.locked"     // WARN: a failure filled a limit: log-ins refused until the window ends
	evLoginThrottled  = "login.throttled"  // INFO: a log-in refused by a lock (429), its password not checked
	evLogout          = "logout"           // INFO
	evKeyCreated      = "key.created"      // INFO
	evKeyRevoked      = "key.revoked"      // INFO
	evCSRFRejected    = "csrf.rejected"    // INFO: a form or JSON post without its CSRF token (403)
)

// event logs the security event name at level with attrs, then client_ip
// and request_id.
func (d *Dashboard) event(w http.ResponseWriter, r *http.Request, level slog.Level, name, msg string, attrs ...slog.Attr) {
	all := make([]slog.Attr, 0, len(attrs)+3)
	all = append(all, slog.String("event", name))
	all = append(all, attrs...)
	all = append(all, slog.String("client_ip", d.clientIP(r)), slog.String("request_id", w.Header().Get("X-Request-Id")))
	d.log.LogAttrs(context.WithoutCancel(r.Context()), level, msg, all...)
}

// account is an event's account: user_id and email, or account=unknown
// when u is nil (the e-mail address has none).
func account(u *coinpulse.User) slog.Attr {
	if u == nil {
		return slog.String("account", "unknown")
	}
	return slog.Group("", slog.Int64("user_id", u.ID), slog.String("email", u.Email))
}

// accountOf looks the account of an e-mail address up for an event that
// has not: account=unchecked when the store fails.
func (d *Dashboard) accountOf(ctx context.Context, email string) slog.Attr {
	u, err := d.store.UserByEmail(ctx, email)
	switch {
	case coinpulse.IsNotFound(err):
		return account(nil)
	case err != nil:
		return slog.String("account", "unchecked")
	}
	return account(u)
}

// keyAttrs names a key in an event: never the key itself.
func keyAttrs(k *coinpulse.APIKey) slog.Attr {
	return slog.Group("", slog.Int64("key_id", k.ID), slog.String("key_prefix", k.Prefix), slog.String("key_name", k.Name),
		slog.String("mode", string(k.Mode)), slog.String("permissions", k.Permissions.String()))
}

// lockAttrs are a lock's limit and the end of its window.
func lockAttrs(l limit, windowStart time.Time) slog.Attr {
	return slog.Group("", slog.String("limit", l.name), slog.Time("until", windowStart.Add(l.window).UTC()))
}

// logKeyCreated logs k's creation by a.
func (d *Dashboard) logKeyCreated(w http.ResponseWriter, r *http.Request, a *auth, k *coinpulse.APIKey) {
	d.event(w, r, slog.LevelInfo, evKeyCreated, "dashboard: key created", account(a.user), keyAttrs(k))
}

// logKeyRevoked logs the revocation of a's key id; k is the key, when
// known.
func (d *Dashboard) logKeyRevoked(w http.ResponseWriter, r *http.Request, a *auth, id int64, k *coinpulse.APIKey) {
	attr := slog.Int64("key_id", id)
	if k != nil {
		attr = keyAttrs(k)
	}
	d.event(w, r, slog.LevelInfo, evKeyRevoked, "dashboard: key revoked", account(a.user), attr)
}

// csrfRejected logs a post refused for its CSRF token; a is its session,
// nil before log-in.
func (d *Dashboard) csrfRejected(w http.ResponseWriter, r *http.Request, a *auth) {
	attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", truncate(r.URL.Path, 200))}
	if a != nil {
		attrs = append(attrs, account(a.user))
	}
	d.event(w, r, slog.LevelInfo, evCSRFRejected, "dashboard: form refused: missing or wrong CSRF token", attrs...)
}
