package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

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

// throttled returns the message refusing a log-in while key has had max
// failures in the current window, or "".
func (d *Dashboard) throttled(r *http.Request, key string, max int) (string, error) {
	th, err := d.store.LoginThrottle(r.Context(), key)
	if err != nil {
		return "", err
	}
	return throttleMessage(th, max, d.now()), nil
}

func throttleMessage(th *coinpulse.Throttle, max int, now time.Time) string {
	end := th.WindowStart.Add(ThrottleWindow)
	if th.Failures < max || !now.Before(end) {
		return ""
	}
	mins := int((end.Sub(now) + time.Minute - 1) / time.Minute)
	unit := "minutes"
	if mins == 1 {
		unit = "minute"
	}
	return fmt.Sprintf("Too many failed log-in attempts. Wait %d %s, then try again.", mins, unit)
}

func emailKey(email string) string                { return "email:" + strings.ToLower(email) }
func (d *Dashboard) ipKey(r *http.Request) string { return "ip:" + d.clientIP(r) }

// ValidEmail reports whether s is a bare address with a domain, as a
// sign-up needs (the operator CLI applies it too).
func ValidEmail(s string) bool {
	if len(s) > 254 || strings.ContainsAny(s, " <>\"") {
		return false
	}
	a, err := mail.ParseAddress(s)
	return err == nil && a.Address == s && strings.Contains(s[strings.LastIndexByte(s, '@'):], ".")
}

// PasswordProblem says why a sign-up would refuse pw, "" when it would
// not (the operator CLI applies it too).
func PasswordProblem(pw string) string {
	switch {
	case utf8.RuneCountInString(pw) < MinPasswordLen:
		return fmt.Sprintf("Choose a password of at least %d characters.", MinPasswordLen)
	case len(pw) > maxPasswordLen:
		return fmt.Sprintf("Choose a password of at most %d bytes.", maxPasswordLen)
	}
	return ""
}

func (d *Dashboard) signup(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	email := strings.TrimSpace(r.PostFormValue("email"))
	pw := r.PostFormValue("password")
	fail := func(status int, msg string) {
		d.render(w, r, status, "signup", &page{Title: "Sign up", CSRF: d.preToken(w, r), Error: msg, Auth: &authForm{Email: email}})
	}
	if !checkPreToken(r) {
		fail(http.StatusForbidden, msgCSRF)
		return
	}
	if msg, err := d.throttled(r, d.ipKey(r), MaxIPFailures); err != nil {
		d.serverError(w, r, err)
		return
	} else if msg != "" {
		fail(http.StatusTooManyRequests, msg)
		return
	}
	if !ValidEmail(email) {
		fail(http.StatusUnprocessableEntity, "Enter an e-mail address such as name@example.com.")
		return
	}
	if msg := PasswordProblem(pw); msg != "" {
		fail(http.StatusUnprocessableEntity, msg)
		return
	}
	hash, err := password.Hash(pw)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	u := &coinpulse.User{Email: email, PasswordHash: hash, Tier: coinpulse.TierFree}
	if err := d.store.CreateUser(ctx, u); err != nil {
		if coinpulse.ErrorCode(err) == coinpulse.CodeConflict {
			// Probing addresses through sign-up counts against the address.
			if _, err := d.store.RecordLoginFailure(ctx, d.ipKey(r), d.now(), ThrottleWindow); err != nil {
				d.log.Warn("dashboard: record sign-up failure", "err", err)
			}
			fail(http.StatusUnprocessableEntity, msgBadSignup)
			return
		}
		d.serverError(w, r, err)
		return
	}
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
		fail(http.StatusForbidden, msgCSRF)
		return
	}
	for _, t := range []struct {
		key string
		max int
	}{{emailKey(email), MaxAccountFailures}, {d.ipKey(r), MaxIPFailures}} {
		msg, err := d.throttled(r, t.key, t.max)
		if err != nil {
			d.serverError(w, r, err)
			return
		}
		if msg != "" {
			fail(http.StatusTooManyRequests, msg)
			return
		}
	}
	u, err := d.store.UserByEmail(ctx, email)
	if err != nil && !coinpulse.IsNotFound(err) {
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
		now := d.now()
		var msg string
		for _, t := range []struct {
			key string
			max int
		}{{emailKey(email), MaxAccountFailures}, {d.ipKey(r), MaxIPFailures}} {
			th, err := d.store.RecordLoginFailure(ctx, t.key, now, ThrottleWindow)
			if err != nil {
				d.serverError(w, r, err)
				return
			}
			if m := throttleMessage(th, t.max, now); m != "" && msg == "" {
				msg = m
			}
		}
		if msg != "" {
			fail(http.StatusTooManyRequests, msgBadLogin+" "+msg)
			return
		}
		fail(http.StatusUnauthorized, msgBadLogin)
		return
	}
	if err := d.store.ClearLoginThrottle(ctx, emailKey(email)); err != nil {
		d.log.Warn("dashboard: clear throttle", "err", err)
	}
	if err := d.startSession(ctx, w, r, u); err != nil {
		d.serverError(w, r, err)
		return
	}
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
	http.Redirect(w, r, basePath+"/login", http.StatusSeeOther)
}
