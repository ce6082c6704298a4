package dashboard

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"coinpulse"
)

// page is what every template gets.
type page struct {
	Title string
	// CSRF is the token of the page's forms (and its csrf-token meta).
	CSRF string
	// User is the logged-in user; nil on the log-in and sign-up pages.
	User *coinpulse.User
	// Error, when set, is shown in #form-error.
	Error string
	// Notice, when set, is shown in #notice.
	Notice string

	Auth   *authForm
	Dash   *dashView
	NewKey *newKeyView
	Key    *keyView
}

var funcs = template.FuncMap{
	"date": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"dateptr": func(t *time.Time, none string) string {
		if t == nil {
			return none
		}
		return t.UTC().Format("2006-01-02 15:04 UTC")
	},
	"num": formatInt,
}

// parsePages parses each page with the layout.
func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, name := range []string{"signup", "login", "dashboard", "newkey", "revoke", "error"} {
		pages[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html"))
	}
	return pages
}

// render writes the page named name with status. Pages are never cached:
// they carry tokens, and the new-key page a secret.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	var buf bytes.Buffer
	if err := d.pages[name].Execute(&buf, p); err != nil {
		d.log.Error("dashboard: render", "page", name, "err", err)
		http.Error(w, "Internal error.", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func (d *Dashboard) serverError(w http.ResponseWriter, r *http.Request, err error) {
	d.log.Error("dashboard", "method", r.Method, "path", r.URL.Path, "err", err, "request_id", w.Header().Get("X-Request-Id"))
	d.render(w, r, http.StatusInternalServerError, "error", &page{Title: "Error",
		Error: "Something went wrong on our side. Try again; if it keeps happening, quote request id " + w.Header().Get("X-Request-Id") + "."})
}

func (d *Dashboard) notFound(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Not found", Error: "There is no such page."}
	if a, err := d.authenticate(r); err == nil {
		p.User, p.CSRF = a.user, a.session.CSRF
	}
	d.render(w, r, http.StatusNotFound, "error", p)
}

// forbidden answers a's post whose CSRF token is missing or wrong.
func (d *Dashboard) forbidden(w http.ResponseWriter, r *http.Request, a *auth) {
	d.csrfRejected(w, r, a)
	d.render(w, r, http.StatusForbidden, "error", &page{Title: "Refused", User: a.user, CSRF: a.session.CSRF, Error: msgCSRF})
}

// requireLogin returns the request's auth, or redirects to the log-in page
// (or answers an error) and returns nil.
func (d *Dashboard) requireLogin(w http.ResponseWriter, r *http.Request) *auth {
	a, err := d.authenticate(r)
	if errors.Is(err, errNoSession) {
		http.Redirect(w, r, basePath+"/login", http.StatusSeeOther)
		return nil
	}
	if err != nil {
		d.serverError(w, r, err)
		return nil
	}
	return a
}

// requirePost is requireLogin for a form post: the form's csrf must be the
// session's, else 403 and nothing is done.
func (d *Dashboard) requirePost(w http.ResponseWriter, r *http.Request) *auth {
	a := d.requireLogin(w, r)
	if a != nil && !tokensEqual(r.PostFormValue("csrf"), a.session.CSRF) {
		d.forbidden(w, r, a)
		return nil
	}
	return a
}

func (d *Dashboard) dashboardPage(w http.ResponseWriter, r *http.Request) {
	a := d.requireLogin(w, r)
	if a == nil {
		return
	}
	notice := ""
	if id, err := strconv.ParseInt(r.URL.Query().Get("revoked"), 10, 64); err == nil && id > 0 {
		// Only a key of the account that is revoked: the address is
		// anyone's to type.
		keys, err := d.store.KeysByUser(r.Context(), a.user.ID)
		if err != nil {
			d.serverError(w, r, err)
			return
		}
		for _, k := range keys {
			if k.ID == id && k.RevokedAt != nil {
				notice = fmt.Sprintf("The key %q (%s) is revoked: every request made with it is refused from now on.", k.Name, k.Display())
			}
		}
	}
	d.showDashboardNotice(w, r, a, http.StatusOK, "", notice, keyForm{Read: true, Mode: "live"})
}

// showDashboard renders the dashboard with status, an error for #form-error
// and the key form's values.
func (d *Dashboard) showDashboard(w http.ResponseWriter, r *http.Request, a *auth, status int, msg string, form keyForm) {
	d.showDashboardNotice(w, r, a, status, msg, "", form)
}

// showDashboardNotice is showDashboard with a notice for #notice.
func (d *Dashboard) showDashboardNotice(w http.ResponseWriter, r *http.Request, a *auth, status int, msg, notice string, form keyForm) {
	v, err := d.dashboard(r.Context(), a.user, form)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	d.render(w, r, status, "dashboard", &page{Title: "Dashboard", User: a.user, CSRF: a.session.CSRF, Error: msg, Notice: notice, Dash: v})
}

// keyForm is the key-creation form's values, and what was wrong with
// them: Invalid names the field ("name", "mode" or "permissions") whose
// message the form shows beside it.
type keyForm struct {
	Name        string
	Mode        string
	Read, Write bool
	Invalid     string
	Problem     string
}

// newKeyRequest is a validated request for a key.
type newKeyRequest struct {
	name  string
	mode  coinpulse.Mode
	perms coinpulse.Permissions
}

// validateKey checks a key request: the name 1 to 64 printable
// characters, the mode live or test, at least one permission.
func validateKey(name, mode string, perms []string) (*newKeyRequest, error) {
	name, err := coinpulse.CheckKeyName(name)
	if err != nil {
		return nil, err
	}
	req := &newKeyRequest{name: name, mode: coinpulse.Mode(mode)}
	if mode == "" {
		return nil, coinpulse.ValidationError("mode", "is required: live or test.")
	}
	if !req.mode.Valid() {
		return nil, coinpulse.ValidationError("mode", "must be live or test.")
	}
	for _, p := range perms {
		switch p {
		case "read":
			req.perms.Read = true
		case "write":
			req.perms.Write = true
		default:
			return nil, coinpulse.ValidationError("permissions", "Permissions are read and write.")
		}
	}
	if !req.perms.Read && !req.perms.Write {
		return nil, coinpulse.ValidationError("permissions", "Choose at least one permission: read, write or both.")
	}
	return req, nil
}

// issueKey creates the key, returning its plaintext and record.
func (d *Dashboard) issueKey(r *http.Request, u *coinpulse.User, req *newKeyRequest) (string, *coinpulse.APIKey, error) {
	plain, k, err := coinpulse.NewAPIKey(u.ID, req.name, req.mode, req.perms)
	if err != nil {
		return "", nil, err
	}
	k.CreatedAt = d.now()
	if err := d.store.CreateKey(r.Context(), k); err != nil {
		return "", nil, err
	}
	return plain, k, nil
}

// newKeyView is the page showing a new key once.
type newKeyView struct {
	Secret string
	Key    keyView
}

func (d *Dashboard) createKey(w http.ResponseWriter, r *http.Request) {
	a := d.requirePost(w, r)
	if a == nil {
		return
	}
	form := keyForm{Name: r.PostFormValue("name"), Mode: r.PostFormValue("mode")}
	perms := r.PostForm["permissions"]
	for _, p := range perms {
		form.Read = form.Read || p == "read"
		form.Write = form.Write || p == "write"
	}
	req, err := validateKey(form.Name, form.Mode, perms)
	if err != nil {
		// Beside the field too, which takes the focus (an audit: on a
		// phone the message stood a screen above the form).
		var e *coinpulse.Error
		if errors.As(err, &e) && len(e.Details) > 0 {
			form.Invalid, form.Problem = e.Details[0].Field, fieldMessage(err)
		}
		d.showDashboard(w, r, a, http.StatusUnprocessableEntity, fieldMessage(err), form)
		return
	}
	plain, k, err := d.issueKey(r, a.user, req)
	switch coinpulse.ErrorCode(err) {
	case "":
	case coinpulse.CodeKeyLimitReached:
		d.showDashboard(w, r, a, http.StatusForbidden, fmt.Sprintf("You already have %d active keys, the most an account may hold. Revoke one you no longer use, then create the new one.", coinpulse.MaxActiveKeys), form)
		return
	default:
		if err != nil {
			d.serverError(w, r, err)
			return
		}
	}
	d.logKeyCreated(w, r, a, k)
	d.render(w, r, http.StatusOK, "newkey", &page{Title: "Your new key", User: a.user, CSRF: a.session.CSRF,
		NewKey: &newKeyView{Secret: plain, Key: d.keyView(k, d.now())}})
}

// fieldMessage is the message of a validation error for a page.
func fieldMessage(err error) string {
	var e *coinpulse.Error
	if errors.As(err, &e) && len(e.Details) > 0 {
		return e.Details[0].Message
	}
	return coinpulse.ErrorMessage(err)
}

// keyID is the key id of r's path, written as the API writes ids: digits
// without a sign or a leading zero ("007" and "+7" name no key, as in the
// API's paths).
func keyID(r *http.Request) (int64, bool) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0 && strconv.FormatInt(id, 10) == s
}

// ownKey returns the user's unrevoked key named by the path's id, or nil.
func (d *Dashboard) ownKey(r *http.Request, u *coinpulse.User) (*coinpulse.APIKey, error) {
	id, ok := keyID(r)
	if !ok {
		return nil, nil
	}
	keys, err := d.store.KeysByUser(r.Context(), u.ID)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if k.ID == id && k.RevokedAt == nil {
			return k, nil
		}
	}
	return nil, nil
}

func (d *Dashboard) revokeForm(w http.ResponseWriter, r *http.Request) {
	a := d.requireLogin(w, r)
	if a == nil {
		return
	}
	k, err := d.ownKey(r, a.user)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	if k == nil {
		d.notFound(w, r)
		return
	}
	v := d.keyView(k, d.now())
	d.render(w, r, http.StatusOK, "revoke", &page{Title: "Revoke " + k.Name, User: a.user, CSRF: a.session.CSRF, Key: &v})
}

func (d *Dashboard) revoke(w http.ResponseWriter, r *http.Request) {
	a := d.requirePost(w, r)
	if a == nil {
		return
	}
	id, ok := keyID(r)
	if !ok {
		d.notFound(w, r)
		return
	}
	err := d.store.RevokeKey(r.Context(), a.user.ID, id, d.now())
	if coinpulse.IsNotFound(err) {
		d.notFound(w, r)
		return
	}
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	d.keyRevoked(r.Context())
	var revoked *coinpulse.APIKey // for the log: its prefix and name
	if keys, err := d.store.KeysByUser(r.Context(), a.user.ID); err == nil {
		for _, k := range keys {
			if k.ID == id {
				revoked = k
			}
		}
	}
	d.logKeyRevoked(w, r, a, id, revoked)
	http.Redirect(w, r, basePath+"?revoked="+strconv.FormatInt(id, 10), http.StatusSeeOther)
}
