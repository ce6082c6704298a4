package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/testlog"
)

// logged reads the server's JSON log as a test goes.
type logged struct {
	t    *testing.T
	buf  *testlog.Buffer
	seen int // lines read so far
}

// records returns the records logged since the last call.
func (l *logged) records() []map[string]any {
	l.t.Helper()
	lines := strings.Split(strings.TrimSuffix(l.buf.String(), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	var recs []map[string]any
	for _, line := range lines[l.seen:] {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			l.t.Fatalf("not a JSON record: %q", line)
		}
		recs = append(recs, rec)
	}
	l.seen = len(lines)
	return recs
}

// want checks that the requests since the last call logged the events
// names, in order, each with the client's address ip and the request id
// of res, and returns them.
func (l *logged) want(res *resp, ip string, names ...string) []map[string]any {
	l.t.Helper()
	var evs []map[string]any
	var got []string
	for _, rec := range l.records() {
		if name, ok := rec["event"].(string); ok {
			evs = append(evs, rec)
			got = append(got, name)
		}
	}
	if !slices.Equal(got, names) {
		l.t.Fatalf("events %q, want %q: %v", got, names, evs)
	}
	id := res.header.Get("X-Request-Id")
	for _, ev := range evs {
		if ev["client_ip"] != ip || id == "" || ev["request_id"] != id {
			l.t.Errorf("%s: client_ip %v request_id %v; want %s and %s", ev["event"], ev["client_ip"], ev["request_id"], ip, id)
		}
	}
	return evs
}

// wantAttrs checks rec's attributes: a nil value must be absent.
func wantAttrs(t *testing.T, rec map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := rec[k]
		if v == nil && ok || v != nil && got != v {
			t.Errorf("%s: %s=%v (%T), want %v (%T)", rec["event"], k, got, got, v, v)
		}
	}
}

// wantUntil checks that rec's lock ends at end.
func wantUntil(t *testing.T, rec map[string]any, end time.Time) {
	t.Helper()
	s, _ := rec["until"].(string)
	got, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || math.Abs(float64(got.Sub(end))) > float64(time.Millisecond) {
		t.Errorf("%s: until %q, want %s", rec["event"], s, end)
	}
}

// forwarded sends every request as from a proxy for addr.
type forwarded struct{ addr string }

func (f forwarded) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", f.addr)
	return http.DefaultTransport.RoundTrip(r)
}

// clientFrom is a browser at addr, behind the test's trusted proxy.
func (e *env) clientFrom(addr string) *client {
	c := e.client()
	c.c.Transport = forwarded{addr}
	return c
}

// jsonPost posts body to a JSON endpoint with the session's CSRF token.
func (c *client) jsonPost(path, token, body string) *resp {
	c.t.Helper()
	return c.doBody("POST", path, body, "Content-Type", "application/json", "X-CSRF-Token", token)
}

// The dashboard logs its security events, one line each, with a stable
// event attribute, the account, the client's address as the throttle
// counts it (behind a trusted proxy, from X-Forwarded-For) and the
// request id; never a password, a session cookie, a CSRF token, a full
// key, or an e-mail address without an account (an audit: it logged
// none of them).
func TestSecurityEvents(t *testing.T) {
	var buf testlog.Buffer
	e := newEnvLog(t, "", slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	e.dash.trustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	l := &logged{t: t, buf: &buf}
	ctx := context.Background()
	var secrets []string // what no line may hold
	keep := func(s ...string) {
		for _, x := range s {
			if x == "" {
				t.Fatal("an empty secret")
			}
			secrets = append(secrets, x)
		}
	}

	// Sign-up, and the dashboard's request line at debug.
	const ip = "203.0.113.9"
	c := e.clientFrom(ip)
	p := c.signup("ann@example.com", pw)
	wantRedirect(t, p, "/user/api")
	u, err := e.store.UserByEmail(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	uid := float64(u.ID)
	keep(pw, c.cookie(sessionCookie), c.cookie(preCookie))
	recs := l.records()
	var reqLine bool
	for _, rec := range recs {
		reqLine = reqLine || rec["msg"] == "request" && rec["route"] == "/user/api" && rec["method"] == "POST" && rec["status"] == float64(http.StatusSeeOther) &&
			rec["request_id"] == p.header.Get("X-Request-Id")
	}
	if !reqLine {
		t.Errorf("no debug request line for the sign-up: %v", recs)
	}
	l.seen -= len(recs) // read them again for their events
	ev := l.want(p, ip, evSignup)[0]
	wantAttrs(t, ev, map[string]any{"level": "INFO", "msg": "dashboard: account created", "user_id": uid, "email": "ann@example.com", "tier": "free", "account": nil})

	// A key from the page, one from JSON.
	dash := c.get("/user/api")
	tok := regexp.MustCompile(`<meta name="csrf-token" content="([0-9a-f]+)">`).FindStringSubmatch(dash.body)[1]
	keep(tok)
	p = c.post("/user/api/keys", url.Values{"name": {"bot"}, "mode": {"test"}, "permissions": {"read", "write"}}, "/user/api")
	m := regexp.MustCompile(`id="new-key"[^>]*value="(sk_test_[0-9A-Za-z]+)"`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("new-key page: %d", p.status)
	}
	pageKey := m[1]
	keep(pageKey[len("sk_test_"):])
	keys, _ := e.store.KeysByUser(ctx, u.ID)
	ev = l.want(p, ip, evKeyCreated)[0]
	wantAttrs(t, ev, map[string]any{"level": "INFO", "user_id": uid, "email": "ann@example.com", "key_id": float64(keys[0].ID),
		"key_prefix": pageKey[:12], "key_name": "bot", "mode": "test", "permissions": "read,write"})

	p = c.jsonPost("/user/api/data/keys", tok, `{"name":"ci","mode":"live","permissions":["read"]}`)
	var created struct {
		Data struct {
			ID     int64
			APIKey string `json:"api_key"`
		}
	}
	if err := json.Unmarshal([]byte(p.body), &created); err != nil || p.status != http.StatusCreated {
		t.Fatalf("JSON key: %d %s", p.status, p.body)
	}
	jsonKey := created.Data.APIKey
	keep(jsonKey[len("sk_live_"):])
	ev = l.want(p, ip, evKeyCreated)[0]
	wantAttrs(t, ev, map[string]any{"user_id": uid, "key_id": float64(created.Data.ID), "key_prefix": jsonKey[:12], "key_name": "ci", "mode": "live", "permissions": "read"})

	// Posts without their CSRF token: refused, and logged.
	p = c.do("POST", "/user/api/keys", url.Values{"name": {"evil"}, "mode": {"live"}, "permissions": {"read"}, "csrf": {strings.Repeat("0", 64)}})
	ev = l.want(p, ip, evCSRFRejected)[0]
	wantAttrs(t, ev, map[string]any{"level": "INFO", "user_id": uid, "method": "POST", "path": "/user/api/keys"})
	p = c.jsonPost(fmt.Sprintf("/user/api/data/keys/%d/revoke", created.Data.ID), "wrong", "")
	ev = l.want(p, ip, evCSRFRejected)[0]
	wantAttrs(t, ev, map[string]any{"user_id": uid, "path": fmt.Sprintf("/user/api/data/keys/%d/revoke", created.Data.ID)})

	// Revocation from the page and from JSON.
	p = c.post(fmt.Sprintf("/user/api/keys/%d/revoke", keys[0].ID), url.Values{}, "/user/api")
	wantRedirect(t, p, fmt.Sprintf("/user/api?revoked=%d", keys[0].ID))
	ev = l.want(p, ip, evKeyRevoked)[0]
	wantAttrs(t, ev, map[string]any{"level": "INFO", "user_id": uid, "key_id": float64(keys[0].ID), "key_prefix": pageKey[:12], "key_name": "bot"})
	p = c.jsonPost(fmt.Sprintf("/user/api/data/keys/%d/revoke", created.Data.ID), tok, "")
	if p.status != http.StatusOK {
		t.Fatalf("JSON revoke: %d %s", p.status, p.body)
	}
	ev = l.want(p, ip, evKeyRevoked)[0]
	wantAttrs(t, ev, map[string]any{"user_id": uid, "key_id": float64(created.Data.ID), "key_prefix": jsonKey[:12], "key_name": "ci"})

	// Log-out.
	p = c.post("/user/api/logout", url.Values{}, "/user/api")
	wantRedirect(t, p, "/user/api/login")
	ev = l.want(p, ip, evLogout)[0]
	wantAttrs(t, ev, map[string]any{"level": "INFO", "user_id": uid, "email": "ann@example.com"})

	// Failed log-ins: the account's, then an address without one (not
	// logged: what was typed may be a password).
	p = c.login("ann@example.com", "wrong password 0")
	keep("wrong password 0")
	ev = l.want(p, ip, evLoginFailed)[0]
	wantAttrs(t, ev, map[string]any{"level": "WARN", "user_id": uid, "email": "ann@example.com", "account_failures": float64(1), "address_failures": float64(1)})
	const ghost = "Tr0ub4dor-ghost@example.com"
	p = c.login(ghost, pw)
	keep("Tr0ub4dor", "ghost@example.com")
	ev = l.want(p, ip, evLoginFailed)[0]
	wantAttrs(t, ev, map[string]any{"level": "WARN", "account": "unknown", "user_id": nil, "email": nil, "account_failures": float64(1), "address_failures": float64(2)})

	// A log-in, with the request id the client sent.
	p = c.do("POST", "/user/api/login", url.Values{"email": {"ann@example.com"}, "password": {pw}, "csrf": {c.cookie(preCookie)}}, "X-Request-Id", "audit-login-1")
	wantRedirect(t, p, "/user/api")
	keep(c.cookie(sessionCookie))
	ev = l.want(p, ip, evLoginSucceeded)[0]
	wantAttrs(t, ev, map[string]any{"level": "INFO", "user_id": uid, "email": "ann@example.com", "request_id": "audit-login-1"})
	keep(c.csrf(c.get("/user/api")))

	// The account's lock: the fifth failure begins it, then even the
	// right password is refused unchecked.
	c = e.clientFrom(ip)
	for i := 1; i <= MaxAccountFailures; i++ {
		wrong := fmt.Sprintf("wrong password %d", i)
		keep(wrong)
		p = c.login("ann@example.com", wrong)
		want := []string{evLoginFailed}
		if i == MaxAccountFailures {
			want = append(want, evLoginLocked)
		}
		evs := l.want(p, ip, want...)
		wantAttrs(t, evs[0], map[string]any{"user_id": uid, "account_failures": float64(i), "address_failures": float64(2 + i)})
		if i == MaxAccountFailures {
			if p.status != http.StatusTooManyRequests {
				t.Errorf("the failure that locks: %d", p.status)
			}
			wantAttrs(t, evs[1], map[string]any{"level": "WARN", "msg": "dashboard: log-ins locked: too many failures", "user_id": uid, "email": "ann@example.com", "limit": "account"})
			wantUntil(t, evs[1], e.clock().Add(ThrottleWindow))
		}
	}
	p = c.login("ann@example.com", pw)
	if p.status != http.StatusTooManyRequests {
		t.Fatalf("the right password while locked: %d", p.status)
	}
	ev = l.want(p, ip, evLoginThrottled)[0]
	wantAttrs(t, ev, map[string]any{"level": "INFO", "user_id": uid, "email": "ann@example.com", "limit": "account"})
	wantUntil(t, ev, e.clock().Add(ThrottleWindow))

	// An address's lock: failures over many addresses without accounts.
	const ip2 = "198.51.100.23"
	c2 := e.clientFrom(ip2)
	for i := 1; i <= MaxIPFailures; i++ {
		p = c2.login(fmt.Sprintf("guess%d@example.com", i), "wrong password")
		want := []string{evLoginFailed}
		if i == MaxIPFailures {
			want = append(want, evLoginLocked)
		}
		evs := l.want(p, ip2, want...)
		wantAttrs(t, evs[0], map[string]any{"account": "unknown", "address_failures": float64(i)})
		if i == MaxIPFailures {
			wantAttrs(t, evs[1], map[string]any{"level": "WARN", "limit": "address", "account": "unknown", "email": nil})
		}
	}
	keep("guess1@", "wrong password")
	p = c2.login("ann@example.com", pw)
	ev = l.want(p, ip2, evLoginThrottled)[0]
	wantAttrs(t, ev, map[string]any{"user_id": uid, "limit": "address"})
	p = c2.login("guess1@example.com", pw)
	ev = l.want(p, ip2, evLoginThrottled)[0]
	wantAttrs(t, ev, map[string]any{"account": "unknown", "email": nil, "limit": "address"})

	// A sign-up with a taken address.
	const ip3 = "198.51.100.31"
	p = e.clientFrom(ip3).signup("ann@example.com", "another password 9")
	keep("another password 9")
	ev = l.want(p, ip3, evSignupFailed)[0]
	wantAttrs(t, ev, map[string]any{"level": "WARN", "user_id": uid, "email": "ann@example.com", "reason": "email_taken", "address_failures": float64(1), "address_signups": float64(1)})

	// Mass sign-ups: the tenth from an address locks its sign-ups.
	const ip4 = "198.51.100.44"
	for i := 1; i <= MaxSignups; i++ {
		c4 := e.clientFrom(ip4)
		email := fmt.Sprintf("new%d@example.com", i)
		p = c4.signup(email, pw)
		keep(c4.cookie(sessionCookie))
		want := []string{evSignup}
		if i == MaxSignups {
			want = append(want, evSignupLocked)
		}
		evs := l.want(p, ip4, want...)
		wantAttrs(t, evs[0], map[string]any{"email": email, "address_signups": float64(i)})
		if i == MaxSignups {
			wantAttrs(t, evs[1], map[string]any{"level": "WARN", "limit": "signups", "email": email})
			wantUntil(t, evs[1], e.clock().Add(SignupWindow))
		}
	}
	p = e.clientFrom(ip4).signup("late@example.com", pw)
	if p.status != http.StatusTooManyRequests {
		t.Fatalf("a sign-up over the limit: %d", p.status)
	}
	ev = l.want(p, ip4, evSignupThrottled)[0]
	wantAttrs(t, ev, map[string]any{"level": "INFO", "limit": "signups", "email": nil, "user_id": nil})
	keep("late@example.com")

	// A forged pre-login form.
	p = e.clientFrom(ip).do("POST", "/user/api/login", url.Values{"email": {"ann@example.com"}, "password": {"forged password"}, "csrf": {strings.Repeat("1", 64)}})
	keep("forged password")
	ev = l.want(p, ip, evCSRFRejected)[0]
	wantAttrs(t, ev, map[string]any{"path": "/user/api/login", "user_id": nil, "email": nil})

	all := buf.String()
	for _, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("the log holds %q", s)
		}
	}
}

// In the default text format an event is one line of key=value pairs, the
// account's and the key's attributes at the top level.
func TestEventTextLine(t *testing.T) {
	var buf strings.Builder
	d := &Dashboard{log: slog.New(slog.NewTextHandler(&buf, nil))}
	r := httptest.NewRequest("POST", "/user/api/keys", nil)
	r.RemoteAddr = "192.0.2.1:4000"
	w := httptest.NewRecorder()
	w.Header().Set("X-Request-Id", "req_1")
	a := &auth{user: &coinpulse.User{ID: 7, Email: "ann@example.com"}}
	d.logKeyCreated(w, r, a, &coinpulse.APIKey{ID: 3, Name: "my bot", Prefix: "sk_live_Ab3x", Mode: coinpulse.ModeLive, Permissions: coinpulse.Permissions{Read: true}})
	d.event(w, r, slog.LevelWarn, evLoginFailed, "dashboard: log-in failed", account(nil))
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []string{
		`level=INFO msg="dashboard: key created" event=key.created user_id=7 email=ann@example.com key_id=3 key_prefix=sk_live_Ab3x key_name="my bot" mode=live permissions=read client_ip=192.0.2.1 request_id=req_1`,
		`level=WARN msg="dashboard: log-in failed" event=login.failed account=unknown client_ip=192.0.2.1 request_id=req_1`,
	}
	if len(got) != len(want) {
		t.Fatalf("lines:\n%s", buf.String())
	}
	for i := range want {
		if _, line, _ := strings.Cut(got[i], " "); line != want[i] { // past time=
			t.Errorf("line %d:\n%s\nwant\n%s", i, line, want[i])
		}
	}
}
