// Package dashboard serves the account holders' web app at /user/api:
// sign-up, log-in and log-out with e-mail and password, the subscription,
// API keys (create, show once, revoke) and usage, as server-rendered HTML
// (html/template, embedded assets, no inline script), and the JSON
// endpoints behind the pages under /user/api/data.
//
// Sessions live in the store (coinpulse.SessionStore): the browser holds a
// random 32-byte token in an HttpOnly, SameSite=Lax cookie, the store its
// SHA-256. A session ends after IdleTimeout without use, and at the latest
// AbsoluteTimeout after log-in; its id is new at every log-in. Every form
// carries a CSRF token: the session's once logged in, before that a random
// token the form must repeat from an HttpOnly cookie (double submit).
//
// Sign-ups, log-ins, lockouts, log-outs, key creations and revocations
// and refused CSRF tokens are logged as security events (events.go).
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"coinpulse"
)

// Session lifetimes and login throttling figures.
const (
	// IdleTimeout ends a session not used for this long.
	IdleTimeout = 7 * 24 * time.Hour
	// AbsoluteTimeout ends a session this long after log-in, used or not.
	AbsoluteTimeout = 30 * 24 * time.Hour
	// ThrottleWindow is the fixed window failed log-ins are counted in.
	ThrottleWindow = 15 * time.Minute
	// MaxAccountFailures failed log-ins to one e-mail address within
	// ThrottleWindow refuse further log-ins to it until the window ends.
	MaxAccountFailures = 5
	// MaxIPFailures failed log-ins (and refused sign-ups) from one address
	// within ThrottleWindow refuse further attempts from it.
	MaxIPFailures = 20
	// SignupWindow is the fixed window sign-ups are counted in.
	SignupWindow = time.Hour
	// MaxSignups accounts created from one address within SignupWindow
	// refuse further sign-ups from it until the window ends.
	MaxSignups = 10
	// MinPasswordLen is the shortest password a sign-up accepts, in
	// characters.
	MinPasswordLen = 10
	// maxPasswordLen bounds the work argon2id is given.
	maxPasswordLen = 1024
	// maxBody bounds form and JSON bodies.
	maxBody = 64 << 10
)

// Cookie names; both are scoped to /user/api.
const (
	sessionCookie = "coinpulse_session"
	preCookie     = "coinpulse_csrf"
	basePath      = "/user/api"
)

// Config is what a Dashboard needs.
type Config struct {
	// Store keeps accounts, keys, usage and sessions.
	Store coinpulse.Store
	// Plans is the plan table (nil: coinpulse.DefaultPlans()).
	Plans map[coinpulse.Tier]coinpulse.Plan
	// Clock tells the time (nil: time.Now).
	Clock coinpulse.Clock
	// Log receives errors and the security events (events.go; nil:
	// slog.Default()).
	Log *slog.Logger
	// BillingURL is where the free tier's upgrade prompt links; empty
	// links to the documentation instead.
	BillingURL string
	// Secure says the dashboard is reached over HTTPS only (serve
	// --https): cookies are always marked Secure and every page sends
	// Strict-Transport-Security. Without it cookies are marked so on
	// requests that came over TLS or through a proxy that says so
	// (X-Forwarded-Proto: https), and only answers over TLS send HSTS.
	Secure bool
	// Limiter, when set, tells what is left of the month, as the API's
	// headers and /usage do; without it, the plan less the metered calls.
	Limiter coinpulse.Limiter
	// TrustedProxies are the proxies whose X-Forwarded-For names the
	// client, for the log-in throttle's per-address count and the security
	// events' client_ip; from any other address the header is ignored.
	TrustedProxies []netip.Prefix
}

// Dashboard is the web app. Create it with New and serve Handler.
type Dashboard struct {
	store coinpulse.Store
	// plans are the plans in force: SetPlans replaces them.
	plans      atomic.Pointer[map[coinpulse.Tier]coinpulse.Plan]
	clock      coinpulse.Clock
	log        *slog.Logger
	billingURL string
	secure     bool
	limiter    coinpulse.Limiter
	// trustedProxies: see Config.TrustedProxies.
	trustedProxies []netip.Prefix
	revoked        func(ctx context.Context) // SetOnRevoke's
	pages          map[string]*template.Template
	mux            *http.ServeMux

	dummyOnce sync.Once
	dummyHash string
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// SetPlans shows plans from the next page on (serve does so on SIGHUP).
// plans must have every tier, as coinpulse.LoadPlans makes sure; the
// caller must not change it afterwards.
func (d *Dashboard) SetPlans(plans map[coinpulse.Tier]coinpulse.Plan) { d.plans.Store(&plans) }

// SetOnRevoke sets what runs after the dashboard revokes a key (serve:
// the API's RefreshAuth, so that the key fails from the next request on);
// call it before serving.
func (d *Dashboard) SetOnRevoke(f func(ctx context.Context)) { d.revoked = f }

// keyRevoked runs SetOnRevoke's function.
func (d *Dashboard) keyRevoked(ctx context.Context) {
	if d.revoked != nil {
		d.revoked(ctx)
	}
}

// plan returns tier's plan in force.
func (d *Dashboard) plan(t coinpulse.Tier) coinpulse.Plan { return (*d.plans.Load())[t] }

// New returns a Dashboard over cfg. It panics if the embedded templates do
// not parse, which a test catches.
func New(cfg Config) *Dashboard {
	d := &Dashboard{store: cfg.Store, clock: cfg.Clock, log: cfg.Log, billingURL: cfg.BillingURL, secure: cfg.Secure, limiter: cfg.Limiter, trustedProxies: cfg.TrustedProxies}
	plans := cfg.Plans
	if plans == nil {
		plans = coinpulse.DefaultPlans()
	}
	d.plans.Store(&plans)
	if d.clock == nil {
		d.clock = time.Now
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.pages = parsePages()
	d.mux = http.NewServeMux()
	m := d.mux
	m.HandleFunc("GET "+basePath, d.dashboardPage)
	m.HandleFunc("GET "+basePath+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, basePath, http.StatusSeeOther)
	})
	m.HandleFunc("GET "+basePath+"/signup", d.signupForm)
	m.HandleFunc("POST "+basePath+"/signup", d.signup)
	m.HandleFunc("GET "+basePath+"/login", d.loginForm)
	m.HandleFunc("POST "+basePath+"/login", d.login)
	m.HandleFunc("POST "+basePath+"/logout", d.logout)
	m.HandleFunc("POST "+basePath+"/keys", d.createKey)
	m.HandleFunc("GET "+basePath+"/keys/{id}/revoke", d.revokeForm)
	m.HandleFunc("POST "+basePath+"/keys/{id}/revoke", d.revoke)
	static, _ := fs.Sub(staticFiles, "static")
	m.Handle("GET "+basePath+"/static/", http.StripPrefix(basePath+"/static/", staticHandler(static, d.notFound)))
	m.HandleFunc("GET "+basePath+"/data/account", d.dataAccount)
	m.HandleFunc("GET "+basePath+"/data/keys", d.dataKeys)
	m.HandleFunc("POST "+basePath+"/data/keys", d.dataCreateKey)
	m.HandleFunc("POST "+basePath+"/data/keys/{id}/revoke", d.dataRevoke)
	m.HandleFunc("GET "+basePath+"/data/usage", d.dataUsage)
	m.HandleFunc(dataFallback, d.dataNotServed)
	m.HandleFunc(dataRoot, d.dataNotServed) // not the subtree's redirect to dataFallback
	m.HandleFunc(basePath, d.pageNotServed) // not the subtree's redirect to basePath/
	m.HandleFunc(pageFallback, d.pageNotServed)
	return d
}

// pageFallback is the pattern of the page paths no page serves.
const pageFallback = basePath + "/"

// pageNotServed answers a page request no page serves: 405 with Allow
// when its path is served with other methods, else the 404 page.
func (d *Dashboard) pageNotServed(w http.ResponseWriter, r *http.Request) {
	allow := d.allowed(r, basePath, pageFallback)
	if len(allow) == 0 {
		d.notFound(w, r)
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	p := &page{Title: "Not allowed", Error: r.Method + " is not allowed here; this page takes " + strings.Join(allow, ", ") + "."}
	if a, err := d.authenticate(r); err == nil {
		p.User, p.CSRF = a.user, a.session.CSRF
	}
	d.render(w, r, http.StatusMethodNotAllowed, "error", p)
}

// allowed lists the methods some pattern other than fallbacks serves r's
// path with.
func (d *Dashboard) allowed(r *http.Request, fallbacks ...string) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.WithContext(r.Context())
		probe.Method = m
		if _, pattern := d.mux.Handler(probe); !slices.Contains(fallbacks, pattern) {
			allow = append(allow, m)
		}
	}
	return allow
}

// dataFallback is the pattern of the JSON paths no data endpoint serves;
// dataRoot, the path above them, is served by nothing either.
const (
	dataFallback = basePath + "/data/"
	dataRoot     = basePath + "/data"
)

// isData reports whether r asks for a JSON path, which answers in JSON.
func isData(r *http.Request) bool {
	return r.URL.Path == dataRoot || strings.HasPrefix(r.URL.Path, dataFallback)
}

// dataNotServed answers a JSON request no data endpoint serves: 405
// METHOD_NOT_ALLOWED with Allow when its path is served with other
// methods, as the API answers, else 404 RESOURCE_NOT_FOUND.
func (d *Dashboard) dataNotServed(w http.ResponseWriter, r *http.Request) {
	allow := d.allowed(r, dataFallback, dataRoot)
	path := truncate(r.URL.Path, 200)
	if len(allow) == 0 {
		d.jsonError(w, coinpulse.Errorf(coinpulse.CodeNotFound, "No dashboard endpoint %s %s.", r.Method, path))
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	d.jsonError(w, coinpulse.Errorf(coinpulse.CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s.", r.Method, path, strings.Join(allow, ", ")))
}

// Handler returns the handler of every path under /user/api (the path
// itself included): security headers on every answer, then the pages.
func (d *Dashboard) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if d.secure || r.TLS != nil {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		if r.ContentLength > maxBody {
			if isData(r) {
				d.jsonError(w, coinpulse.Errorf(coinpulse.CodePayloadTooLarge, "The request body is over %d bytes.", maxBody))
			} else {
				d.render(w, r, http.StatusRequestEntityTooLarge, "error", &page{Title: "Too large", Error: "What was sent is too large."})
			}
			return
		}
		r.Body = http.MaxBytesReader(innermost(w), r.Body, maxBody)
		if r.Method == http.MethodPost && !isData(r) && !d.readForm(w, r) {
			return
		}
		d.mux.ServeHTTP(w, r)
	})
}

// readForm reads a page's form post, and answers one that is too large
// (413), too slow (408, after the API's body timeout), unreadable or
// giving a one-value field twice (400) with an error page, reporting
// false: its handler would otherwise find no CSRF token in it and answer
// 403, or read the field's first value.
func (d *Dashboard) readForm(w http.ResponseWriter, r *http.Request) bool {
	err := r.ParseForm()
	if err == nil {
		// As the API refuses a JSON field given twice: a form field that
		// takes one value, sent twice, would be read as its first.
		for _, name := range singleFields {
			if len(r.PostForm[name]) > 1 {
				d.render(w, r, http.StatusBadRequest, "error", &page{Title: http.StatusText(http.StatusBadRequest), Error: "What was sent gives the field " + name + " more than once."})
				return false
			}
		}
		return true
	}
	status, msg := http.StatusBadRequest, "What was sent could not be read."
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		status, msg = http.StatusRequestEntityTooLarge, "What was sent is too large."
	case errors.Is(err, os.ErrDeadlineExceeded):
		status, msg = http.StatusRequestTimeout, "What was sent did not arrive in time."
	}
	d.render(w, r, status, "error", &page{Title: http.StatusText(status), Error: msg})
	return false
}

// singleFields are the form fields that take one value (permissions,
// the key form's checkboxes, take several).
var singleFields = []string{"csrf", "email", "password", "name", "mode"}

// innermost returns the ResponseWriter w wraps, at the bottom: net/http's,
// which http.MaxBytesReader must be given so that a body over the limit
// closes the connection rather than have net/http read the rest of it.
func innermost(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// staticHandler serves the files of fsys; a directory (no listing) is
// notFound's.
func staticHandler(fsys fs.FS, notFound func(http.ResponseWriter, *http.Request)) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := strings.TrimSuffix(r.URL.Path, "/"); name == "" || name == "." {
			notFound(w, r)
			return
		} else if st, err := fs.Stat(fsys, name); err == nil && st.IsDir() {
			notFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// secureRequest reports whether cookies are marked Secure: configured so,
// served over TLS, or behind a proxy that says it terminated TLS.
func (d *Dashboard) secureRequest(r *http.Request) bool {
	return d.secure || r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// now is the dashboard's time, in UTC.
func (d *Dashboard) now() time.Time { return d.clock().UTC() }

// randomToken returns 32 random bytes, hex.
func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// hashToken is the session id the store keeps for a cookie token.
func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// validToken reports whether s looks like a token randomToken made.
func validToken(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func tokensEqual(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

func (d *Dashboard) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: basePath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: d.secureRequest(r),
	})
}

// auth is a logged-in request's session and user.
type auth struct {
	session *coinpulse.Session
	user    *coinpulse.User
}

// errNoSession is a request without a live session.
var errNoSession = errors.New("no session")

// authenticate returns the request's live session and its user, extending
// the session's idle expiry when an hour or more of it has been used. It
// returns errNoSession when there is none.
func (d *Dashboard) authenticate(r *http.Request) (*auth, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !validToken(c.Value) {
		return nil, errNoSession
	}
	ctx := r.Context()
	now := d.now()
	s, err := d.store.SessionByID(ctx, hashToken(c.Value), now)
	if coinpulse.IsNotFound(err) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	u, err := d.store.UserByID(ctx, s.UserID)
	if coinpulse.IsNotFound(err) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	exp := now.Add(IdleTimeout)
	if limit := s.CreatedAt.Add(AbsoluteTimeout); exp.After(limit) {
		exp = limit
	}
	if exp.Sub(s.ExpiresAt) >= time.Hour {
		if err := d.store.ExtendSession(ctx, s.ID, exp); err != nil {
			d.log.Warn("dashboard: extend session", "err", err)
		} else {
			s.ExpiresAt = exp
		}
	}
	return &auth{session: s, user: u}, nil
}

// startSession logs u in: it ends the session the request carried, if
// any, creates a new one (a new id: a planted cookie never becomes a
// login) and sets its cookie.
func (d *Dashboard) startSession(ctx context.Context, w http.ResponseWriter, r *http.Request, u *coinpulse.User) error {
	if c, err := r.Cookie(sessionCookie); err == nil && validToken(c.Value) {
		if err := d.store.DeleteSession(ctx, hashToken(c.Value)); err != nil {
			return err
		}
	}
	now := d.now()
	if _, err := d.store.DeleteExpiredSessions(ctx, now, now.Add(-max(ThrottleWindow, SignupWindow))); err != nil {
		d.log.Warn("dashboard: sweep sessions", "err", err)
	}
	token := randomToken()
	s := &coinpulse.Session{ID: hashToken(token), UserID: u.ID, CSRF: randomToken(), CreatedAt: now, ExpiresAt: now.Add(IdleTimeout)}
	if err := d.store.CreateSession(ctx, s); err != nil {
		return err
	}
	d.setCookie(w, r, sessionCookie, token, int(AbsoluteTimeout/time.Second))
	return nil
}

// preToken returns the request's pre-login CSRF token, setting a new
// cookie when it has none.
func (d *Dashboard) preToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(preCookie); err == nil && validToken(c.Value) {
		return c.Value
	}
	t := randomToken()
	d.setCookie(w, r, preCookie, t, 0)
	return t
}

// checkPreToken reports whether a pre-login form repeats its cookie.
func checkPreToken(r *http.Request) bool {
	c, err := r.Cookie(preCookie)
	return err == nil && validToken(c.Value) && tokensEqual(r.PostFormValue("csrf"), c.Value)
}

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

// clientIP is the client's address, which failed log-ins and sign-ups are
// counted under (by its /64 for IPv6: throttled), and the security
// events' client_ip: the peer's, or behind a trusted proxy the client's
// from X-Forwarded-For.
func (d *Dashboard) clientIP(r *http.Request) string {
	addr := r.RemoteAddr
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && !strings.HasSuffix(addr, "]") {
		addr = addr[:i]
	}
	addr = strings.Trim(addr, "[]")
	if len(d.trustedProxies) == 0 || !d.trusted(addr) {
		return addr
	}
	// From a proxy of ours: the client is the nearest address in
	// X-Forwarded-For that is not one of our proxies (those before it
	// are the client's to write).
	var hops []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(h, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		ip, err := netip.ParseAddr(hop)
		if err != nil {
			return addr // not an address: the proxy is the best we know
		}
		if !d.trusted(hop) {
			return ip.Unmap().String()
		}
		addr = ip.Unmap().String()
	}
	return addr
}

// trusted reports whether addr is one of the trusted proxies.
func (d *Dashboard) trusted(addr string) bool {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range d.trustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
