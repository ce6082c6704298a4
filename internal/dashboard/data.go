package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"time"
	"unicode/utf8"

	"coinpulse"
	"coinpulse/internal/jsontext"
)

// The JSON endpoints under /user/api/data answer in the API's envelope:
// {"success": true, "data": …, "meta": {…}} or {"success": false,
// "error": {"code", "message", "details"}, "meta": {…}}. They take the
// session cookie; POSTs also need the session's CSRF token in the
// X-CSRF-Token header (pages carry it in <meta name="csrf-token">).

type jsonMeta struct {
	Timestamp string `json:"timestamp"`
	RequestID string `json:"request_id,omitempty"`
}

type jsonError struct {
	Code    coinpulse.Code         `json:"code"`
	Message string                 `json:"message"`
	Details []coinpulse.FieldError `json:"details,omitempty"`
}

func (d *Dashboard) meta(w http.ResponseWriter) jsonMeta {
	return jsonMeta{Timestamp: d.now().Format("2006-01-02T15:04:05.000Z"), RequestID: w.Header().Get("X-Request-Id")}
}

func (d *Dashboard) writeJSON(w http.ResponseWriter, status int, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		d.log.Error("dashboard: encode", "err", err)
		status, b = http.StatusInternalServerError, []byte(`{"success":false,"error":{"code":"SERVER_ERROR","message":"An internal error occurred."}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func (d *Dashboard) jsonData(w http.ResponseWriter, status int, data any) {
	d.writeJSON(w, status, struct {
		Success bool     `json:"success"`
		Data    any      `json:"data"`
		Meta    jsonMeta `json:"meta"`
	}{true, data, d.meta(w)})
}

func (d *Dashboard) jsonError(w http.ResponseWriter, err error) {
	code := coinpulse.ErrorCode(err)
	e := jsonError{Code: code, Message: coinpulse.ErrorMessage(err)}
	var ce *coinpulse.Error
	if errors.As(err, &ce) {
		e.Details = ce.Details
	}
	if code == coinpulse.CodeValidation && len(e.Details) == 0 { // as the API: details on every VALIDATION_ERROR
		e.Details = []coinpulse.FieldError{{Field: "request", Message: e.Message}}
	}
	if code == coinpulse.CodeServerError {
		d.log.Error("dashboard", "err", err, "request_id", w.Header().Get("X-Request-Id"))
		e.Message = "An internal error occurred; quote request id " + w.Header().Get("X-Request-Id") + " if you contact support."
	}
	d.writeJSON(w, code.Status(), struct {
		Success bool      `json:"success"`
		Error   jsonError `json:"error"`
		Meta    jsonMeta  `json:"meta"`
	}{false, e, d.meta(w)})
}

// dataAuth authenticates a JSON request (and, for a POST, its
// X-CSRF-Token) and refuses a query string, answering the error itself
// when one of them fails.
func (d *Dashboard) dataAuth(w http.ResponseWriter, r *http.Request) *auth {
	a, err := d.authenticate(r)
	if errors.Is(err, errNoSession) {
		d.jsonError(w, coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "No valid session: log in at /user/api/login and send the session cookie."))
		return nil
	}
	if err != nil {
		d.jsonError(w, err)
		return nil
	}
	if r.Method == http.MethodPost && !tokensEqual(r.Header.Get("X-CSRF-Token"), a.session.CSRF) {
		d.csrfRejected(w, r, a)
		d.jsonError(w, coinpulse.Errorf(coinpulse.CodePermissionDenied, "Missing or wrong X-CSRF-Token header: send the csrf-token of a dashboard page."))
		return nil
	}
	if r.URL.RawQuery != "" {
		// As the API, after the session (401) and the token (403): a
		// parameter sent for nothing is a typo to hear of.
		d.jsonError(w, coinpulse.ValidationError("query", "the dashboard's JSON endpoints take no query parameters"))
		return nil
	}
	return a
}

// userJSON is the account holder.
type userJSON struct {
	ID            int64          `json:"id"`
	Email         string         `json:"email"`
	Tier          coinpulse.Tier `json:"tier"`
	TierExpiresAt *time.Time     `json:"tier_expires_at"`
	CreatedAt     time.Time      `json:"created_at"`
}

// planJSON is a plan; null figures are unlimited.
type planJSON struct {
	Tier            coinpulse.Tier      `json:"tier"`
	MonthlyCalls    *int64              `json:"monthly_calls"`
	PerMinute       int                 `json:"per_minute"`
	PerSecond       int                 `json:"per_second"`
	Endpoints       coinpulse.Endpoints `json:"endpoints"`
	Webhooks        bool                `json:"webhooks"`
	MaxPortfolios   *int64              `json:"max_portfolios"`
	MaxActiveAlerts *int64              `json:"max_active_alerts"`
}

func limited(n int64) *int64 {
	if n == coinpulse.Unlimited {
		return nil
	}
	return &n
}

func (d *Dashboard) dataAccount(w http.ResponseWriter, r *http.Request) {
	a := d.dataAuth(w, r)
	if a == nil {
		return
	}
	u, p := a.user, d.plan(a.user.Tier)
	var billing *string
	if d.billingURL != "" {
		billing = &d.billingURL
	}
	d.jsonData(w, http.StatusOK, map[string]any{
		"user": userJSON{ID: u.ID, Email: u.Email, Tier: u.Tier, TierExpiresAt: u.TierExpiresAt, CreatedAt: u.CreatedAt},
		"plan": planJSON{Tier: p.Tier, MonthlyCalls: limited(p.MonthlyCalls), PerMinute: p.PerMinute, PerSecond: p.PerSecond,
			Endpoints: p.Endpoints, Webhooks: p.Webhooks, MaxPortfolios: limited(int64(p.MaxPortfolios)), MaxActiveAlerts: limited(int64(p.MaxActiveAlerts))},
		"subscription_expired": u.SubscriptionExpired(d.now()),
		"billing_url":          billing,
	})
}

// keyJSON is a key as listed; APIKey is set only in the answer that
// creates it.
type keyJSON struct {
	ID          int64          `json:"id"`
	Name        string         `json:"name"`
	Key         string         `json:"key"`
	Mode        coinpulse.Mode `json:"mode"`
	Permissions []string       `json:"permissions"`
	Active      bool           `json:"active"`
	CreatedAt   time.Time      `json:"created_at"`
	LastUsedAt  *time.Time     `json:"last_used_at"`
	ExpiresAt   *time.Time     `json:"expires_at"`
	RevokedAt   *time.Time     `json:"revoked_at"`
	APIKey      string         `json:"api_key,omitempty"`
}

func keyOf(k *coinpulse.APIKey, now time.Time) keyJSON {
	return keyJSON{ID: k.ID, Name: k.Name, Key: k.Display(), Mode: k.Mode, Permissions: k.Permissions.List(), Active: k.Active(now),
		CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt}
}

func (d *Dashboard) dataKeys(w http.ResponseWriter, r *http.Request) {
	a := d.dataAuth(w, r)
	if a == nil {
		return
	}
	keys, err := d.store.KeysByUser(r.Context(), a.user.ID)
	if err != nil {
		d.jsonError(w, err)
		return
	}
	now := d.now()
	out := make([]keyJSON, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyOf(k, now))
	}
	d.jsonData(w, http.StatusOK, out)
}

func (d *Dashboard) dataCreateKey(w http.ResponseWriter, r *http.Request) {
	a := d.dataAuth(w, r)
	if a == nil {
		return
	}
	raw, ok := d.readBody(w, r)
	if !ok {
		return
	}
	name, mode, perms, err := keyBody(raw)
	if err != nil {
		d.jsonError(w, err)
		return
	}
	req, err := validateKey(name, mode, perms)
	if err != nil {
		d.jsonError(w, err)
		return
	}
	plain, k, err := d.issueKey(r, a.user, req)
	if err != nil {
		d.jsonError(w, err)
		return
	}
	d.logKeyCreated(w, r, a, k)
	out := keyOf(k, d.now())
	out.APIKey = plain
	d.jsonData(w, http.StatusCreated, out)
}

// readBody reads r's body; a body that cannot be read (over the limit,
// too slow, cut off) is answered here, and ok is false.
func (d *Dashboard) readBody(w http.ResponseWriter, r *http.Request) (raw []byte, ok bool) {
	raw, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return raw, true
	case errors.As(err, &tooBig):
		d.jsonError(w, coinpulse.Errorf(coinpulse.CodePayloadTooLarge, "The request body is over %d bytes.", maxBody))
	case errors.Is(err, os.ErrDeadlineExceeded):
		d.jsonError(w, coinpulse.Errorf(coinpulse.CodeRequestTimeout, "The request body did not arrive in time: send the whole body promptly after the headers."))
	default:
		d.jsonError(w, coinpulse.ValidationError("body", "the request body could not be read whole"))
	}
	return nil, false
}

// noBody checks the body of an endpoint that takes none, raw, as the API
// does: nothing, or {} (JSON white space around either); anything else is
// a VALIDATION_ERROR, so that a malformed request changes nothing.
func noBody(raw []byte) error {
	msg := "this endpoint takes no fields (send {} or no body)"
	if len(bytes.Trim(raw, " \t\r\n")) == 0 {
		return nil
	}
	var fields map[string]json.RawMessage
	if !utf8.Valid(raw) || json.Unmarshal(raw, &fields) != nil || fields == nil {
		return coinpulse.ValidationError("body", msg)
	}
	if len(fields) == 0 {
		return nil
	}
	// One detail a field, as the API gives them.
	var details []coinpulse.FieldError
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		field := truncate(name, 50)
		if field == "" {
			field = `""`
		}
		details = append(details, coinpulse.FieldError{Field: field, Message: "unknown field; " + msg})
	}
	return coinpulse.ValidationErrors(details...)
}

// keyBody reads a key's JSON body, raw, as the API
// reads one: a single object of UTF-8 text with only the fields name,
// mode and permissions, matched exactly (encoding/json matches names
// case-insensitively, so {"mode":"test","MODE":"live"} would make a live
// key), none given twice, strings without a lone surrogate escape (which
// encoding/json would store as U+FFFD), and nothing after the object.
func keyBody(raw []byte) (name, mode string, perms []string, err error) {
	bodyErr := func() error {
		msg := "The body must be one JSON object {\"name\", \"mode\", \"permissions\"}, in UTF-8."
		return &coinpulse.Error{Code: coinpulse.CodeValidation, Message: msg, Details: []coinpulse.FieldError{{Field: "body", Message: msg}}}
	}
	var fields map[string]json.RawMessage
	if !utf8.Valid(raw) || json.Unmarshal(raw, &fields) != nil || fields == nil {
		return "", "", nil, bodyErr()
	}
	var unknown []string
	for f := range fields {
		if f != "name" && f != "mode" && f != "permissions" {
			unknown = append(unknown, f)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		field := truncate(unknown[0], 50)
		if field == "" {
			field = `""` // as the API shows it
		}
		return "", "", nil, coinpulse.ValidationError(field, "unknown field; the body takes name, mode and permissions")
	}
	if names := jsontext.RepeatedNames(raw); len(names) > 0 {
		return "", "", nil, coinpulse.ValidationError(names[0], "given more than once")
	}
	read := func(field string, v any, want string) error {
		raw, ok := fields[field]
		if !ok {
			return nil
		}
		var typeErr *json.UnmarshalTypeError
		if err := json.Unmarshal(raw, v); errors.As(err, &typeErr) {
			return coinpulse.ValidationError(field, "must be "+want+", not a JSON "+typeErr.Value)
		} else if err != nil {
			return bodyErr()
		}
		if jsontext.LoneSurrogate(raw) {
			return coinpulse.ValidationError(field, `must be valid Unicode: a \ud800-\udfff escape must be half of a surrogate pair`)
		}
		return nil
	}
	if err := read("name", &name, "a string"); err != nil {
		return "", "", nil, err
	}
	if err := read("mode", &mode, "a string"); err != nil {
		return "", "", nil, err
	}
	if err := read("permissions", &perms, "an array of strings"); err != nil {
		return "", "", nil, err
	}
	return name, mode, perms, nil
}

func (d *Dashboard) dataRevoke(w http.ResponseWriter, r *http.Request) {
	a := d.dataAuth(w, r)
	if a == nil {
		return
	}
	raw, ok := d.readBody(w, r)
	if !ok {
		return
	}
	if err := noBody(raw); err != nil {
		d.jsonError(w, err)
		return
	}
	id, ok := keyID(r)
	if !ok {
		d.jsonError(w, coinpulse.ErrKeyNotFound())
		return
	}
	now := d.now()
	if err := d.store.RevokeKey(r.Context(), a.user.ID, id, now); err != nil {
		d.jsonError(w, err)
		return
	}
	d.keyRevoked(r.Context())
	keys, err := d.store.KeysByUser(r.Context(), a.user.ID)
	if err != nil {
		d.logKeyRevoked(w, r, a, id, nil)
		d.jsonError(w, err)
		return
	}
	for _, k := range keys {
		if k.ID == id {
			d.logKeyRevoked(w, r, a, id, k)
			d.jsonData(w, http.StatusOK, keyOf(k, now))
			return
		}
	}
	d.logKeyRevoked(w, r, a, id, nil)
	d.jsonError(w, coinpulse.ErrKeyNotFound())
}

type dayJSON struct {
	Date  string   `json:"date"`
	Calls int64    `json:"calls"`
	P50MS *float64 `json:"p50_ms"`
	P95MS *float64 `json:"p95_ms"`
}

// keyStatJSON is one key's figures: calls is its all-time total; today
// and the month are UTC; errors (status 400 and above), the error rate
// (null without calls this month) and the percentiles are over this
// month's calls.
type keyStatJSON struct {
	KeyID     int64          `json:"key_id"`
	Name      string         `json:"name"`
	Key       string         `json:"key"`
	Mode      coinpulse.Mode `json:"mode"`
	Revoked   bool           `json:"revoked"`
	Calls     int64          `json:"calls"`
	LastCall  *time.Time     `json:"last_call"`
	Today     int64          `json:"calls_today"`
	Month     int64          `json:"calls_month"`
	Errors    int64          `json:"month_errors"`
	ErrorRate *float64       `json:"month_error_rate"`
	P50MS     *float64       `json:"month_p50_ms"`
	P95MS     *float64       `json:"month_p95_ms"`
}

type callJSON struct {
	Time       time.Time      `json:"time"`
	KeyID      int64          `json:"key_id"`
	Mode       coinpulse.Mode `json:"mode"`
	Method     string         `json:"method"`
	Route      string         `json:"route"`
	Status     int            `json:"status"`
	DurationMS float64        `json:"duration_ms"`
	RequestID  string         `json:"request_id"`
}

func msPtr(d time.Duration) *float64 {
	if d <= 0 {
		return nil
	}
	v := float64(d.Microseconds()) / 1000
	return &v
}

func (d *Dashboard) dataUsage(w http.ResponseWriter, r *http.Request) {
	a := d.dataAuth(w, r)
	if a == nil {
		return
	}
	acc, err := d.load(r.Context(), a.user)
	if err != nil {
		d.jsonError(w, err)
		return
	}
	u := acc.usage
	var limit *int64
	if acc.plan.Endpoints == coinpulse.EndpointsNone {
		limit = new(int64)
	} else {
		limit = limited(acc.plan.MonthlyCalls)
	}
	days := make([]dayJSON, len(u.Daily))
	for i, dd := range u.Daily {
		days[i] = dayJSON{Date: dd.Day.Format("2006-01-02"), Calls: dd.Calls, P50MS: msPtr(dd.P50), P95MS: msPtr(dd.P95)}
	}
	stats := make([]keyStatJSON, 0, len(acc.stats))
	for _, s := range acc.stats {
		ku := s.usage
		ks := keyStatJSON{KeyID: s.id, Name: s.name, Key: s.display, Mode: s.mode, Revoked: s.state == "revoked", Calls: ku.Calls,
			LastCall: s.lastCallTime, Today: ku.CallsToday, Month: ku.CallsMonth, Errors: ku.ErrorsMonth, P50MS: msPtr(ku.P50), P95MS: msPtr(ku.P95)}
		if ku.CallsMonth > 0 {
			rate := ku.ErrorRate()
			ks.ErrorRate = &rate
		}
		stats = append(stats, ks)
	}
	recent := make([]callJSON, len(u.Recent))
	for i, c := range u.Recent {
		recent[i] = callJSON{Time: c.Time, KeyID: c.KeyID, Mode: c.Mode, Method: c.Method, Route: c.Route, Status: c.Status,
			DurationMS: float64(c.Duration.Microseconds()) / 1000, RequestID: c.RequestID}
	}
	d.jsonData(w, http.StatusOK, map[string]any{
		"month_calls":      u.MonthCalls,
		"monthly_limit":    limit,
		"remaining":        acc.left,
		"daily":            days,
		"response_time_ms": map[string]*float64{"p50": msPtr(u.P50), "p95": msPtr(u.P95), "p99": msPtr(u.P99)},
		"keys":             stats,
		"recent":           recent,
	})
}
