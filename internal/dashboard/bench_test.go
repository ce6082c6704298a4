package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/password"
)

// BenchmarkDashboardPage renders each page and JSON answer of the
// dashboard, server-side (no network), for an account with 30 days of
// metering at 10,000 calls a day over five keys (the goal: < 50 ms each).
// bench/README.md has the figures.
func BenchmarkDashboardPage(b *testing.B) {
	e := newEnv(b, "")
	ctx := context.Background()
	hash, err := password.Hash(pw)
	if err != nil {
		b.Fatal(err)
	}
	u := &coinpulse.User{Email: "bench@example.com", PasswordHash: hash, Tier: coinpulse.TierPremium}
	if err := e.store.CreateUser(ctx, u); err != nil {
		b.Fatal(err)
	}
	var keys []*coinpulse.APIKey
	for i := range coinpulse.MaxActiveKeys {
		_, k, _ := coinpulse.NewAPIKey(u.ID, fmt.Sprintf("key %d", i), coinpulse.ModeLive, coinpulse.Permissions{Read: true})
		if err := e.store.CreateKey(ctx, k); err != nil {
			b.Fatal(err)
		}
		keys = append(keys, k)
	}
	now := e.clock()
	const perDay = 10_000
	calls := make([]coinpulse.Call, perDay)
	for day := 29; day >= 0; day-- {
		start := now.AddDate(0, 0, -day).Truncate(24 * time.Hour)
		for i := range calls {
			k := keys[i%len(keys)]
			status := 200
			if i%50 == 0 {
				status = 404
			}
			calls[i] = coinpulse.Call{UserID: u.ID, KeyID: k.ID, Mode: k.Mode, Time: start.Add(time.Duration(i) * 8 * time.Millisecond),
				Method: "GET", Route: "/api/v1/markets", Status: status, Duration: time.Duration(200+i%5000) * time.Microsecond,
				RequestID: fmt.Sprintf("req_%d_%d", day, i), Counted: true}
		}
		if err := e.store.RecordCalls(ctx, calls); err != nil {
			b.Fatal(err)
		}
	}
	c := e.client()
	c.loginB(b, "bench@example.com")
	cookies := c.c.Jar.Cookies(mustURL(e.srv.URL + "/user/api"))
	csrf := c.csrf(c.get("/user/api"))
	h := e.srv.Config.Handler

	// serve answers one request built by newReq, checks its status and
	// that its body holds want.
	serve := func(b *testing.B, newReq func() *http.Request, status int, want string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newReq())
		if rec.Code != status || !strings.Contains(rec.Body.String(), want) {
			b.Fatalf("%d, want %d with %q:\n%.2000s", rec.Code, status, want, rec.Body.String())
		}
	}
	get := func(path string, withSession bool) func() *http.Request {
		return func() *http.Request {
			r := httptest.NewRequest("GET", path, nil)
			if withSession {
				for _, ck := range cookies {
					r.AddCookie(ck)
				}
			}
			return r
		}
	}
	pages := []struct {
		name, path string
		session    bool
		want       string
	}{
		// The dashboard: subscription, keys, usage and both charts.
		{"dashboard", "/user/api", true, `req_0_9999`},
		{"login", "/user/api/login", false, `action="/user/api/login"`},
		{"signup", "/user/api/signup", false, `action="/user/api/signup"`},
		{"revoke-confirm", fmt.Sprintf("/user/api/keys/%d/revoke", keys[0].ID), true, `id="revoke-confirm"`},
		{"data-account", "/user/api/data/account", true, `"tier":"premium"`},
		{"data-keys", "/user/api/data/keys", true, `"key":"sk_live_`},
		{"data-usage", "/user/api/data/usage", true, `"month_calls"`},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			req := get(p.path, p.session)
			serve(b, req, http.StatusOK, p.want)
			b.ReportAllocs()
			for b.Loop() {
				serve(b, req, http.StatusOK, p.want)
			}
		})
	}
	// The new-key page: each round creates a key (the page that shows it
	// once), then revokes it outside the timing to stay under the limit.
	// The revoked keys pile up and are read with the account's keys, so
	// the figure grows with the rounds: bench/README.md runs 200.
	if err := e.store.RevokeKey(ctx, u.ID, keys[4].ID, now); err != nil {
		b.Fatal(err)
	}
	b.Run("new-key", func(b *testing.B) {
		form := url.Values{"csrf": {csrf}, "name": {"bench"}, "mode": {"live"}, "permissions": {"read"}}.Encode()
		req := func() *http.Request {
			r := httptest.NewRequest("POST", "/user/api/keys", strings.NewReader(form))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("Origin", "http://example.com")
			for _, ck := range cookies {
				r.AddCookie(ck)
			}
			return r
		}
		b.ReportAllocs()
		for b.Loop() {
			serve(b, req, http.StatusOK, `id="new-key"`)
			b.StopTimer()
			ks, err := e.store.KeysByUser(ctx, u.ID)
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range ks {
				if k.Name == "bench" && k.RevokedAt == nil {
					if err := e.store.RevokeKey(ctx, u.ID, k.ID, now); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StartTimer()
		}
	})
}
