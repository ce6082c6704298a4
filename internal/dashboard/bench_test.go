package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/password"
)

// BenchmarkDashboardPage renders GET /user/api for an account with 30 days
// of metering at 10,000 calls a day over five keys (the goal: < 50 ms).
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
	c := e.clientB(b)
	c.loginB(b, "bench@example.com")
	h := e.srv.Config.Handler
	req := httptest.NewRequest("GET", "/user/api", nil)
	for _, ck := range c.c.Jar.Cookies(mustURL(e.srv.URL + "/user/api")) {
		req.AddCookie(ck)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `id="month-calls">`) || strings.Contains(rec.Body.String(), `id="month-calls">0<`) {
		b.Fatalf("GET /user/api: %d, no usage shown", rec.Code)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("GET /user/api: %d", rec.Code)
		}
		io.Discard.Write(rec.Body.Bytes())
	}
}
