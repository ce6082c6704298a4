package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/mail"
	"net/netip"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"coinpulse"
	"coinpulse/internal/password"
)

// Messages of the log-in and sign-up forms. They never say whether an
// e-mail address has an account.
const (
	msgBadLogin  = "E-mail or password is incorrect."
	msgBadSignup = "An account cannot be created with this e-mail address. If you already have one, log in instead."
	msgCSRF      = "This form has expired or did not come from this site. Reload the page and try again."
)

// authForm is what the log-in and sign-up pages show.
type authForm struct {
	Email string
}

func (d *Dashboard) signupForm(w http.ResponseWriter, r *http.Request) {
	if a, err := d.authenticate(r); err == nil && a != nil {
		http.Redirect(w, r, basePath, http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, "signup", &page{Title: "Sign up", CSRF: d.preToken(w, r), Auth: &authForm{}})
}

func (d *Dashboard) loginForm(w http.ResponseWriter, r *http.Request) {
	if a, err := d.authenticate(r); err == nil && a != nil {
		http.Redirect(w, r, basePath, http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, "login", &page{Title: "Log in", CSRF: d.preToken(w, r), Auth: &authForm{}})
}

// A limit bounds the attempts counted under key (in the store's throttle
// table, so that every node agrees) to max within a fixed window.
type limit struct {
	key    string
	max    int
	window time.Duration
	what   string // what the refusal says there were too many of
	name   string // the limit in the log: account, address or signups
}

// emailLimit counts an address's failures under a digest of its
// coinpulse.EmailKey: a log-in's address is whatever was typed (a NUL,
// kilobytes: PostgreSQL refuses both in a key), and need not sit in the
// table as typed.
func emailLimit(email string) limit {
	sum := sha256.Sum256([]byte(coinpulse.EmailKey(email)))
	return limit{"email:" + hex.EncodeToString(sum[:16]), MaxAccountFailures, ThrottleWindow, "failed log-in attempts", "account"}
}

func (d *Dashboard) ipLimit(r *http.Request) limit {
	return limit{"ip:" + throttled(d.clientIP(r)), MaxIPFailures, ThrottleWindow, "failed log-in attempts", "address"}
}

func (d *Dashboard) signupLimit(r *http.Request) limit {
	return limit{"signup:" + throttled(d.clientIP(r)), MaxSignups, SignupWindow, "sign-ups from this address", "signups"}
}

// throttled is the client address the per-address limits count: an IPv4
// address as it is, an IPv6 one by its /64. A subscriber's line or host
// gets a whole /64 and may pick any address in it, so counting addresses
// one by one would give a client 2^64 allowances (an audit: 12 sign-ups
// from 12 addresses of one /64 were all let through). IPv6 addresses that
// stand for an IPv4 client count as that client: the IPv4 address a
// NAT64 or SIIT prefix (64:ff9b::/96, RFC 6052) or an IPv4-translated
// one (::ffff:0:0:0/96) carries, a Teredo address whole (it holds its
// client's address and port), a 6to4 site by its /48 (its IPv4 address);
// else every IPv4 user behind such a translator would share one count
// (a review).
func throttled(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.WithZone("").Unmap()
	switch {
	case ip.Is4():
		return ip.String()
	case nat64.Contains(ip), translated.Contains(ip):
		b := ip.As16()
		return netip.AddrFrom4([4]byte(b[12:])).String()
	case nat64Local.Contains(ip), teredo.Contains(ip):
		return ip.String()
	case sixToFour.Contains(ip):
		p, _ := ip.Prefix(48)
		return p.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// The IPv6 prefixes whose addresses stand for an IPv4 client (throttled).
var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052, the IPv4 address last
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215, where it sits depends on the prefix
	translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	teredo     = netip.MustParsePrefix("2001::/32")
	sixToFour  = netip.MustParsePrefix("2002::/16")
)

// refusal is the message refusing an attempt under l, whose count th
// has reached l.max, or "" when th's window has ended.
func (l limit) refusal(th *coinpulse.Throttle, now time.Time) string {
	end := th.WindowStart.Add(l.window)
	if th.Failures < l.max || !now.Before(end) {
		return ""
	}
	mins := int((end.Sub(now) + time.Minute - 1) / time.Minute)
	unit := "minutes"
	if mins == 1 {
		unit = "minute"
	}
	return fmt.Sprintf("Too many %s. Wait %d %s, then try again.", l.what, mins, unit)
}

// refused is an attempt a limit refused.
type refused struct {
	limit       limit
	windowStart time.Time // of the limit's count
	msg         string    // the message refusing the attempt
}

// reserve counts one attempt under each limit, in order, before the
// attempt is made: attempts sent at once then cannot all pass a check
// made before any of them is counted. It returns the counts, or what
// refuses the attempt when it is one more than a limit allows (a refused
// attempt counts nothing: what reserve counted is given back).
func (d *Dashboard) reserve(ctx context.Context, now time.Time, limits ...limit) ([]*coinpulse.Throttle, *refused, error) {
	ths := make([]*coinpulse.Throttle, 0, len(limits))
	for _, l := range limits {
		th, err := d.store.RecordLoginFailure(ctx, l.key, now, l.window)
		if err != nil {
			d.release(ctx, limits, ths)
			return nil, nil, err
		}
		ths = append(ths, th)
		if th.Failures > l.max {
			d.release(ctx, limits, ths)
			return nil, &refused{limit: l, windowStart: th.WindowStart, msg: l.refusal(th, now)}, nil
		}
	}
	return ths, nil, nil
}

// admit reserves the attempt under limits and returns the counts, or
// what refuses it, for the caller to answer (429), or answers the store's
// error itself and returns false.
func (d *Dashboard) admit(w http.ResponseWriter, r *http.Request, now time.Time, limits []limit) ([]*coinpulse.Throttle, *refused, bool) {
	ths, ref, err := d.reserve(r.Context(), now, limits...)
	if err != nil {
		d.serverError(w, r, err)
		return nil, nil, false
	}
	return ths, ref, true
}

// logLocks logs lockEvent for each of the limits (ths[i] counted under
// limits[i]) whose count the attempt filled: the next attempt under it is
// refused until its window ends.
func (d *Dashboard) logLocks(w http.ResponseWriter, r *http.Request, now time.Time, lockEvent string, who slog.Attr, limits []limit, ths []*coinpulse.Throttle) {
	for i, th := range ths {
		if limits[i].refusal(th, now) != "" {
			msg := "dashboard: log-ins locked: too many failures"
			if lockEvent == evSignupLocked {
				msg = "dashboard: sign-ups locked: too many from the address"
			}
			d.event(w, r, slog.LevelWarn, lockEvent, msg, who, lockAttrs(limits[i], th.WindowStart))
		}
	}
}

// release gives back the counts reserve took under limits (ths[i] under
// limits[i]; ths may be shorter).
func (d *Dashboard) release(ctx context.Context, limits []limit, ths []*coinpulse.Throttle) {
	for i, th := range ths {
		if err := d.store.ForgiveLoginFailure(ctx, limits[i].key, th.WindowStart); err != nil {
			// The limit's name, not its key: an e-mail key holds what was
			// typed, which may be a password (see events.go).
			d.log.Warn("dashboard: release throttle count", "limit", limits[i].name, "err", err)
		}
	}
}

// ValidEmail reports whether s is a bare address with a domain, as a
// sign-up needs (the operator CLI applies it too). Beyond what net/mail
// reads as an address, it refuses control, format and separator
// characters (U+0085, a right-to-left mark, a no-break space): invisible
// or unprintable, they would let "demo\u200f@example.com" pass for
// another account's address.
func ValidEmail(s string) bool {
	if len(s) > 254 || strings.ContainsAny(s, " <>\"") || hasInvisible(s) {
		return false
	}
	a, err := mail.ParseAddress(s)
	return err == nil && a.Address == s && strings.Contains(s[strings.LastIndexByte(s, '@'):], ".")
}

// hasInvisible reports whether s holds a control, format, private-use or
// separator character, but for the zero-width non-joiner and joiner
// (U+200C, U+200D) where IDNA's CONTEXTJ rules allow them (RFC 5892,
// appendix A.1 and A.2, simplified): either after a virama, as Sinhala
// and other Indic scripts write them, or the non-joiner between two
// letters of a joining script (Arabic, as Persian writes it inside
// words). Anywhere else, after an ASCII letter say, a joiner changes
// nothing a reader sees and would make a look-alike address.
func hasInvisible(s string) bool {
	rs := []rune(s)
	for i, r := range rs {
		if unicode.In(r, unicode.C, unicode.Z) && !joinerInContext(rs, i) {
			return true
		}
	}
	return false
}

// joinerInContext reports whether rs[i] is a zero-width joiner or
// non-joiner in a context hasInvisible allows.
func joinerInContext(rs []rune, i int) bool {
	r := rs[i]
	if r != '\u200c' && r != '\u200d' || i == 0 {
		return false
	}
	if norm.NFC.PropertiesString(string(rs[i-1])).CCC() == 9 { // a virama
		return true
	}
	return r == '\u200c' && i+1 < len(rs) && joiningLetter(rs[i-1]) && joiningLetter(rs[i+1])
}

// joiningLetter reports whether r is a letter of a script whose letters
// join (cursive), where a non-joiner shows.
func joiningLetter(r rune) bool {
	return unicode.IsLetter(r) && unicode.In(r, unicode.Arabic, unicode.Syriac, unicode.Nko, unicode.Mongolian, unicode.Mandaic, unicode.Manichaean, unicode.Psalter_Pahlavi)
}

// PasswordProblem says why a sign-up of the account email would refuse
// pw, "" when it would not (the operator CLI applies it too): too short,
// too long, or among the first passwords an attacker would try.
func PasswordProblem(pw, email string) string {
	switch {
	case utf8.RuneCountInString(pw) < MinPasswordLen:
		return fmt.Sprintf("Choose a password of at least %d characters.", MinPasswordLen)
	case len(pw) > maxPasswordLen:
		return fmt.Sprintf("Choose a password of at most %d bytes.", maxPasswordLen)
	}
	return guessable(pw, email)
}

func (d *Dashboard) signup(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	email := strings.TrimSpace(r.PostFormValue("email"))
	pw := r.PostFormValue("password")
	fail := func(status int, msg string) {
		d.render(w, r, status, "signup", &page{Title: "Sign up", CSRF: d.preToken(w, r), Error: msg, Auth: &authForm{Email: email}})
	}
	if !checkPreToken(r) {
		d.csrfRejected(w, r, nil)
		fail(http.StatusForbidden, msgCSRF)
		return
	}
	if !ValidEmail(email) {
		fail(http.StatusUnprocessableEntity, "Enter an e-mail address such as name@example.com.")
		return
	}
	if msg := PasswordProblem(pw, email); msg != "" {
		fail(http.StatusUnprocessableEntity, msg)
		return
	}
	// A sign-up counts against the address's sign-ups, and until it
	// succeeds as a failure against its log-ins: a taken e-mail address
	// is a probe.
	now := d.now()
	limits := []limit{d.ipLimit(r), d.signupLimit(r)}
	ths, ref, ok := d.admit(w, r, now, limits)
	if !ok {
		return
	}
	if ref != nil {
		d.event(w, r, slog.LevelInfo, evSignupThrottled, "dashboard: sign-up refused: too many attempts from the address", lockAttrs(ref.limit, ref.windowStart))
		fail(http.StatusTooManyRequests, ref.msg)
		return
	}
	hash, err := password.Hash(pw)
	if err != nil {
		d.release(ctx, limits, ths)
		d.serverError(w, r, err)
		return
	}
	u := &coinpulse.User{Email: email, PasswordHash: hash, Tier: coinpulse.TierFree}
	if err := d.store.CreateUser(ctx, u); err != nil {
		if coinpulse.ErrorCode(err) == coinpulse.CodeConflict {
			// Both counts stand: a failed log-in from the address, and a
			// sign-up.
			who := d.accountOf(ctx, email)
			d.event(w, r, slog.LevelWarn, evSignupFailed, "dashboard: sign-up refused: the e-mail address has an account", who,
				slog.String("reason", "email_taken"), slog.Int("address_failures", ths[0].Failures), slog.Int("address_signups", ths[1].Failures))
			d.logLocks(w, r, now, evLoginLocked, who, limits[:1], ths[:1])
			d.logLocks(w, r, now, evSignupLocked, who, limits[1:], ths[1:])
			fail(http.StatusUnprocessableEntity, msgBadSignup)
			return
		}
		d.release(ctx, limits, ths)
		d.serverError(w, r, err)
		return
	}
	d.release(ctx, limits[:1], ths[:1])
	d.event(w, r, slog.LevelInfo, evSignup, "dashboard: account created", account(u), slog.String("tier", string(u.Tier)), slog.Int("address_signups", ths[1].Failures))
	d.logLocks(w, r, now, evSignupLocked, account(u), limits[1:], ths[1:])
	if err := d.startSession(ctx, w, r, u); err != nil {
		d.serverError(w, r, err)
		return
	}
	http.Redirect(w, r, basePath, http.StatusSeeOther)
}

// dummyPasswordHash is verified against when the e-mail has no account
// (or no password), so that a log-in takes as long either way.
func (d *Dashboard) dummyPasswordHash() string {
	d.dummyOnce.Do(func() {
		d.dummyHash, _ = password.Hash(randomToken())
	})
	return d.dummyHash
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	email := strings.TrimSpace(r.PostFormValue("email"))
	pw := r.PostFormValue("password")
	fail := func(status int, msg string) {
		d.render(w, r, status, "login", &page{Title: "Log in", CSRF: d.preToken(w, r), Error: msg, Auth: &authForm{Email: email}})
	}
	if !checkPreToken(r) {
		d.csrfRejected(w, r, nil)
		fail(http.StatusForbidden, msgCSRF)
		return
	}
	// The attempt counts as a failure from the start, and is given back
	// if the password is right.
	now := d.now()
	limits := []limit{d.ipLimit(r), emailLimit(email)}
	ths, ref, ok := d.admit(w, r, now, limits)
	if !ok {
		return
	}
	if ref != nil {
		d.event(w, r, slog.LevelInfo, evLoginThrottled, "dashboard: log-in refused: too many failures", d.accountOf(ctx, email), lockAttrs(ref.limit, ref.windowStart))
		fail(http.StatusTooManyRequests, ref.msg)
		return
	}
	u, err := d.store.UserByEmail(ctx, email)
	if err != nil && !coinpulse.IsNotFound(err) {
		d.release(ctx, limits, ths)
		d.serverError(w, r, err)
		return
	}
	hash := d.dummyPasswordHash()
	if u != nil && u.PasswordHash != "" {
		hash = u.PasswordHash
	}
	verr := errors.New("too long")
	if len(pw) <= maxPasswordLen {
		verr = password.Verify(pw, hash)
	}
	if u == nil || u.PasswordHash == "" || verr != nil {
		if verr != nil && !errors.Is(verr, password.ErrMismatch) && u != nil && u.PasswordHash != "" {
			d.log.Warn("dashboard: password hash unreadable", "user_id", u.ID, "err", verr)
		}
		status, msg := http.StatusUnauthorized, msgBadLogin
		for i, l := range limits {
			if m := l.refusal(ths[i], now); m != "" {
				status, msg = http.StatusTooManyRequests, msgBadLogin+" "+m
				break
			}
		}
		who := account(u)
		d.event(w, r, slog.LevelWarn, evLoginFailed, "dashboard: log-in failed", who,
			slog.Int("account_failures", ths[1].Failures), slog.Int("address_failures", ths[0].Failures))
		d.logLocks(w, r, now, evLoginLocked, who, limits, ths)
		fail(status, msg)
		return
	}
	if err := d.store.ClearLoginThrottle(ctx, limits[1].key); err != nil {
		d.log.Warn("dashboard: clear throttle", "err", err)
	}
	d.release(ctx, limits[:1], ths[:1])
	if err := d.startSession(ctx, w, r, u); err != nil {
		d.serverError(w, r, err)
		return
	}
	d.event(w, r, slog.LevelInfo, evLoginSucceeded, "dashboard: logged in", account(u))
	http.Redirect(w, r, basePath, http.StatusSeeOther)
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	a, err := d.authenticate(r)
	if errors.Is(err, errNoSession) {
		http.Redirect(w, r, basePath+"/login", http.StatusSeeOther)
		return
	}
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	if !tokensEqual(r.PostFormValue("csrf"), a.session.CSRF) {
		d.forbidden(w, r, a)
		return
	}
	if err := d.store.DeleteSession(r.Context(), a.session.ID); err != nil {
		d.serverError(w, r, err)
		return
	}
	d.setCookie(w, r, sessionCookie, "", -1)
	d.event(w, r, slog.LevelInfo, evLogout, "dashboard: logged out", account(a.user))
	http.Redirect(w, r, basePath+"/login", http.StatusSeeOther)
}
