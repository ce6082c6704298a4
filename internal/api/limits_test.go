package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/meter"
	"coinpulse/internal/ratelimit"
	"coinpulse/internal/testlog"
)

// limitedServer is a server over the shared store and market with plans
// of its own, the in-process limiter on a settable clock, and a meter.
type limitedServer struct {
	*Server
	mu    sync.Mutex
	now   time.Time
	meter *meter.Meter
}

func (l *limitedServer) clock() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.now
}

func (l *limitedServer) advance(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = l.now.Add(d)
}

// flush waits until the calls metered so far are written (the meter
// writes every 10 ms here).
func (l *limitedServer) flush(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.meter.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d metered calls still pending after 10 s", l.meter.Pending())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newLimitedServer(t *testing.T, plans map[coinpulse.Tier]coinpulse.Plan) *limitedServer {
	t.Helper()
	return newSkewedServer(t, plans, 0)
}

// newSkewedServer is newLimitedServer with the server's clock skew ahead
// of the limiter's, as a node's clock can be of Redis's.
func newSkewedServer(t *testing.T, plans map[coinpulse.Tier]coinpulse.Plan, skew time.Duration) *limitedServer {
	t.Helper()
	return newLimitedServerOn(t, plans, skew, nil)
}

// newLimitedServerOn is newSkewedServer over store (nil: the shared one);
// the meter writes to the shared store.
func newLimitedServerOn(t *testing.T, plans map[coinpulse.Tier]coinpulse.Plan, skew time.Duration, store coinpulse.Store) *limitedServer {
	t.Helper()
	base := testServer(t)
	if store == nil {
		store = shared.store
	}
	l := &limitedServer{now: time.Now().UTC()}
	seed := func(ctx context.Context, account string, month time.Time) (int64, error) { return 0, nil }
	l.meter = meter.New(shared.store, quiet, meter.Options{Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	go l.meter.Run(ctx)
	t.Cleanup(func() {
		l.meter.Close(context.Background())
		cancel()
	})
	l.Server = New(Config{
		Store: store, Market: base.market, Log: quiet, Plans: plans,
		Clock:   func() time.Time { return l.clock().Add(skew) },
		Limiter: ratelimit.NewMemory(l.clock, seed), Meter: l.meter,
	})
	return l
}

// plansWith returns the default plans with tier's changed by change.
func plansWith(tier coinpulse.Tier, change func(*coinpulse.Plan)) map[coinpulse.Tier]coinpulse.Plan {
	plans := coinpulse.DefaultPlans()
	p := plans[tier]
	change(&p)
	plans[tier] = p
	return plans
}

func TestRateLimitHeadersAndWindows(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	key, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeLive, rw, nil)
	now := srv.clock()
	for i := 1; i <= 5; i++ {
		res := do(t, srv.Server, "GET", "/api/v1/markets/global", key)
		if res.Status != 200 {
			t.Fatalf("call %d: %d %s", i, res.Status, res.Raw)
		}
		h := res.Header
		// The second is closest to exhaustion: 5 a second against 60 a
		// minute and 1,000 a month.
		if h.Get("X-RateLimit-Limit") != "5" || h.Get("X-RateLimit-Remaining") != fmt.Sprint(5-i) {
			t.Errorf("call %d: X-RateLimit-Limit %q Remaining %q, want 5 and %d", i, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), 5-i)
		}
		if reset := h.Get("X-RateLimit-Reset"); reset != fmt.Sprint(now.Add(time.Duration(i)*200*time.Millisecond).Unix()) && reset != fmt.Sprint(now.Add(time.Duration(i)*200*time.Millisecond).Unix()+1) {
			t.Errorf("call %d: X-RateLimit-Reset %s, now %d", i, reset, now.Unix())
		}
		if !strings.HasPrefix(h.Get("RateLimit"), `"second";r=`) || !strings.Contains(h.Get("RateLimit-Policy"), `"second";q=5;w=1, "minute";q=60;w=60, "month";q=1000;w=`) {
			t.Errorf("call %d: RateLimit %q, RateLimit-Policy %q", i, h.Get("RateLimit"), h.Get("RateLimit-Policy"))
		}
	}
	res := do(t, srv.Server, "GET", "/api/v1/markets/global", key)
	wantError(t, res, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded)
	if res.Header.Get("Retry-After") != "1" || !strings.Contains(res.Error.Message, "5 calls per second") {
		t.Errorf("429: Retry-After %q, message %q", res.Header.Get("Retry-After"), res.Error.Message)
	}
	// The window rolls: one call's worth later, one more is admitted.
	srv.advance(200 * time.Millisecond)
	if res := do(t, srv.Server, "GET", "/api/v1/markets/global", key); res.Status != 200 {
		t.Errorf("after 200 ms: %d", res.Status)
	}
}

// The headers count from the instant the limiter decided at, by its clock
// (Redis's when nodes share it), not by the node's: on a node 90 s ahead,
// the second's window still resets within the second.
func TestRateLimitHeadersUseTheLimitersClock(t *testing.T) {
	t.Parallel()
	srv := newSkewedServer(t, nil, 90*time.Second)
	key, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeLive, rw, nil)
	now := srv.clock()
	res := do(t, srv.Server, "GET", "/api/v1/markets/global", key)
	if res.Status != 200 {
		t.Fatalf("%d %s", res.Status, res.Raw)
	}
	resetAt := now.Add(200 * time.Millisecond)
	if reset := res.Header.Get("X-RateLimit-Reset"); reset != fmt.Sprint(resetAt.Unix()) && reset != fmt.Sprint(resetAt.Unix()+1) {
		t.Errorf("X-RateLimit-Reset %s, want %d by the limiter's clock (the node's says %d)", reset, resetAt.Unix(), now.Add(90*time.Second).Unix())
	}
	if got, want := res.Header.Get("RateLimit"), `"second";r=4;t=1, "minute";r=59;t=1, "month";r=999;t=`; !strings.HasPrefix(got, want) {
		t.Errorf(`RateLimit %q, want it to start %s`, got, want)
	}
}

// Five keys do not multiply the allowance.
func TestRateLimitPerAccount(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	u := newUser(t, coinpulse.TierFree, nil)
	var keys []string
	for range 5 {
		k, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
		keys = append(keys, k)
	}
	ok := 0
	for i := range 10 {
		if res := do(t, srv.Server, "GET", "/api/v1/markets/global", keys[i%5]); res.Status == 200 {
			ok++
		}
	}
	if ok != 5 {
		t.Errorf("10 calls over 5 keys within a second: %d admitted, want the account's 5", ok)
	}
}

// With K calls left this month, 4K concurrent calls admit exactly K, and
// every admitted call is metered and counted.
func TestMonthlyAllowanceExact(t *testing.T) {
	t.Parallel()
	const k = 25
	srv := newLimitedServer(t, plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) {
		p.MonthlyCalls, p.PerSecond, p.PerMinute = k, 1_000_000, 1_000_000
	}))
	u := newUser(t, coinpulse.TierPremium, nil)
	key, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	var wg sync.WaitGroup
	statuses := make(chan int, 4*k)
	for range 4 * k {
		wg.Go(func() {
			req := httptest.NewRequest("GET", "/api/v1/markets/global", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, req)
			statuses <- rec.Code
		})
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[200] != k || count[429] != 3*k {
		t.Fatalf("statuses %v, want %d×200 and %d×429", count, k, 3*k)
	}
	res := do(t, srv.Server, "GET", "/api/v1/markets", key)
	wantError(t, res, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded)
	if !strings.Contains(res.Error.Message, "monthly allowance of 25") {
		t.Errorf("message %q does not name the monthly window", res.Error.Message)
	}
	srv.flush(t)
	n, err := shared.store.MonthCalls(context.Background(), u.ID, coinpulse.MonthStart(srv.clock()))
	if err != nil || n != k {
		t.Errorf("MonthCalls = %d, %v; want %d", n, err, k)
	}
	// /usage is free of charge, even with nothing left.
	if res := do(t, srv.Server, "GET", "/api/v1/usage", key); res.Status != 200 {
		t.Errorf("/usage with the allowance used up: %d %s", res.Status, res.Raw)
	}
}

func TestSandboxLimitsAndSimulation(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	u := newUser(t, coinpulse.TierFree, nil)
	live, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	sandbox, _ := newKey(t, u, coinpulse.ModeTest, rw, nil)
	// Sandbox calls leave the account's allowance alone.
	for i := range 20 {
		if res := do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox); res.Status != 200 {
			t.Fatalf("sandbox call %d: %d", i, res.Status)
		}
	}
	if res := do(t, srv.Server, "GET", "/api/v1/markets/global", live); res.Status != 200 || res.Header.Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("live call after 20 sandbox calls: %d, remaining %q; want 200 and 4", res.Status, res.Header.Get("X-RateLimit-Remaining"))
	}
	res := do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "rate_limit")
	wantError(t, res, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded)
	if res.Header.Get("Retry-After") == "" || !strings.Contains(res.Error.Message, "Simulated") {
		t.Errorf("simulated 429: %v %q", res.Header, res.Error.Message)
	}
	// Its headers are those of a real refusal by the second window: every
	// window of the abuse limit, in RateLimit as in RateLimit-Policy (an
	// audit: RateLimit listed the second alone).
	windows := regexp.MustCompile(`"([a-z]+)"`)
	names := func(v string) (n []string) {
		for _, m := range windows.FindAllStringSubmatch(v, -1) {
			n = append(n, m[1])
		}
		return n
	}
	if rl, policy := res.Header.Get("RateLimit"), res.Header.Get("RateLimit-Policy"); len(names(policy)) < 2 || !slices.Equal(names(rl), names(policy)) ||
		!strings.HasPrefix(rl, `"second";r=0;t=1,`) || res.Header.Get("X-RateLimit-Remaining") != "0" || res.Header.Get("X-RateLimit-Reset") == "" {
		t.Errorf("simulated 429: RateLimit %q, RateLimit-Policy %q, X-RateLimit-Remaining %q", rl, policy, res.Header.Get("X-RateLimit-Remaining"))
	}
	// With limits off no answer carries rate-limit headers, a simulated
	// refusal neither.
	res = do(t, testServer(t), "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "rate_limit")
	wantError(t, res, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded)
	for _, h := range rateLimitKeys {
		if res.Header.Get("Retry-After") != "1" || res.Header[h] != nil {
			t.Errorf("simulated 429 with limits off: Retry-After %q, %s %q", res.Header.Get("Retry-After"), h, res.Header[h])
		}
	}
	before := do(t, srv.Server, "GET", "/api/v1/usage", sandbox).Header.Get("X-RateLimit-Remaining")
	res = do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "server_error")
	wantError(t, res, http.StatusInternalServerError, coinpulse.CodeServerError)
	if !strings.Contains(res.Error.Message, "Simulated") {
		t.Errorf("simulated 500: %q", res.Error.Message)
	}
	// The abuse limit counts a 5xx too (and the /usage call): only the
	// plan's windows give failures back.
	if after := do(t, srv.Server, "GET", "/api/v1/usage", sandbox).Header.Get("X-RateLimit-Remaining"); before == "" || after != fmt.Sprint(atoi(t, before)-2) {
		t.Errorf("sandbox remaining %s before a simulated 500, %s after it and a /usage call; want two less", before, after)
	}
	wantError(t, do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "meteor"), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	wantError(t, do(t, srv.Server, "GET", "/api/v1/markets/global", live, "X-Sandbox-Simulate", "rate_limit"), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	// Two failures at once, in two headers or one list, are one too many.
	twice := httptest.NewRequest("GET", "/api/v1/markets/global", nil)
	twice.Header.Set("Authorization", "Bearer "+sandbox)
	twice.Header.Add("X-Sandbox-Simulate", "rate_limit")
	twice.Header.Add("X-Sandbox-Simulate", "server_error")
	wantField(t, serve(t, srv.Server, twice), "X-Sandbox-Simulate", "more than once")
	wantField(t, do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "rate_limit, timeout"), "X-Sandbox-Simulate", "more than once")
	// A stream whose key comes in its first message cannot simulate: the
	// header is refused before the upgrade.
	res = do(t, srv.Server, "GET", "/api/v1/ws", "", "X-Sandbox-Simulate", "rate_limit", "Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	if len(res.Error.Details) != 1 || res.Error.Details[0].Field != "X-Sandbox-Simulate" {
		t.Errorf("/ws without a key header, with X-Sandbox-Simulate: details %+v", res.Error.Details)
	}
	// The simulations are counted apart from real answers in /metrics.
	metrics := wantMetrics(t, srv.Handler(),
		`coinpulse_sandbox_simulations_total{route="/api/v1/markets/global",simulation="rate_limit"} 1`,
		`coinpulse_sandbox_simulations_total{route="/api/v1/markets/global",simulation="server_error"} 1`,
	)
	for _, unwanted := range []string{`status="500"`, `status="429"`} {
		if strings.Contains(metrics, unwanted) {
			t.Errorf("/metrics counts a simulated answer as a request with %s", unwanted)
		}
	}
}

// Failing sandbox calls stay held to the abuse limit: simulated 500s,
// which cost the server nothing to fail, must not come for free.
func TestSandboxFailuresStayLimited(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil) // its clock stands still
	sandbox, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeTest, rw, nil)
	for i := range DefaultSandboxLimits.PerSecond {
		if res := do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "server_error"); res.Status != 500 {
			t.Fatalf("simulated failure %d: %d %s", i+1, res.Status, res.Raw)
		}
	}
	res := do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "server_error")
	wantError(t, res, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded)
}

// failingStore is the shared store whose Portfolios fails: with an
// error, or with a panic.
type failingStore struct {
	coinpulse.Store
	panics bool
}

func (f failingStore) Portfolios(ctx context.Context, o coinpulse.Owner, pg coinpulse.PortfolioPage) ([]coinpulse.Portfolio, int, error) {
	if f.panics {
		panic("failingStore: Portfolios")
	}
	return nil, 0, errors.New("failingStore: Portfolios")
}

// A live call that fails on our side, with an error or a panic, is given
// back to the plan's windows, and metered as a 500 that does not count.
func TestServerFailuresAreGivenBack(t *testing.T) {
	t.Parallel()
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprint("panics=", panics), func(t *testing.T) {
			t.Parallel()
			srv := newLimitedServerOn(t, nil, 0, failingStore{Store: testServer(t).store, panics: panics})
			u := newUser(t, coinpulse.TierPremium, nil)
			key, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
			res := do(t, srv.Server, "GET", "/api/v1/portfolio", key)
			wantError(t, res, http.StatusInternalServerError, coinpulse.CodeServerError)
			// The 500's own headers show the call given back: every
			// window whole, the second (the fewest calls) described, and
			// the month whole in RateLimit.
			if h := res.Header; h.Get("X-RateLimit-Limit") != "5" || h.Get("X-RateLimit-Remaining") != "5" || !strings.Contains(h.Get("RateLimit"), `"month";r=10000;`) {
				t.Errorf("500: X-RateLimit-Limit %q, -Remaining %q, RateLimit %q; want 5, 5 and a whole month", h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("RateLimit"))
			}
			res = do(t, srv.Server, "GET", "/api/v1/markets/global", key)
			if got := res.Header.Get("X-RateLimit-Remaining"); got != "4" {
				t.Errorf("X-RateLimit-Remaining %q after a 500 and a call in the same instant, want 4 of 5 a second", got)
			}
			srv.flush(t)
			usage := decode[struct {
				MonthCalls int64 `json:"month_calls"`
				Recent     []struct {
					Route  string `json:"route"`
					Status int    `json:"status"`
				} `json:"recent"`
			}](t, do(t, srv.Server, "GET", "/api/v1/usage", key))
			if usage.MonthCalls != 1 {
				t.Errorf("month_calls %d, want 1: the 500 does not count", usage.MonthCalls)
			}
			if len(usage.Recent) != 2 || usage.Recent[1].Route != "/api/v1/portfolio" || usage.Recent[1].Status != 500 {
				t.Errorf("recent %+v, want the global call after the portfolio 500", usage.Recent)
			}
			// The meter counted both calls admitted, and the 500 given
			// back; /usage, a free call, is not the plan's.
			waitAdmitted(t, u, srv.clock(), 1)
		})
	}
}

// brokenWriter fails every write, as a connection whose client hung up.
type brokenWriter struct{ *httptest.ResponseRecorder }

func (b brokenWriter) Write([]byte) (int, error) { return 0, errors.New("write: broken pipe") }

// A call whose answer could not be sent is metered as answered and
// counts, as the limiter counted it: the limiter and the meter agree.
func TestCallWithAFailedWriteIsMetered(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	u := newUser(t, coinpulse.TierPremium, nil)
	key, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	req := httptest.NewRequest("GET", "/api/v1/markets/global", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	srv.Handler().ServeHTTP(brokenWriter{httptest.NewRecorder()}, req)
	srv.flush(t)
	n, err := shared.store.MonthCalls(context.Background(), u.ID, coinpulse.MonthStart(srv.clock()))
	if err != nil || n != 1 {
		t.Errorf("MonthCalls = %d, %v; want 1", n, err)
	}
	waitAdmitted(t, u, srv.clock(), 1)
}

// waitAdmitted waits until the store counts want calls admitted to u's
// plan in the month of now.
func waitAdmitted(t *testing.T, u *coinpulse.User, now time.Time, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := shared.store.MonthAdmitted(context.Background(), u.ID, coinpulse.MonthStart(now))
		if err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("MonthAdmitted = %d, %v after 10 s; want %d", n, err, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// blockedStore is the shared store whose Portfolios waits until open is
// closed, having said so on entered.
type blockedStore struct {
	coinpulse.Store
	entered chan struct{}
	open    chan struct{}
}

func (b blockedStore) Portfolios(ctx context.Context, o coinpulse.Owner, pg coinpulse.PortfolioPage) ([]coinpulse.Portfolio, int, error) {
	b.entered <- struct{}{}
	<-b.open
	return b.Store.Portfolios(ctx, o, pg)
}

// A call admitted to the plan is counted in the store while it is still
// being answered, before it is metered: a Redis limiter that lost its
// count seeds it from there (see internal/meter). Sandbox calls are not.
func TestAdmittedCountedBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	store := blockedStore{Store: testServer(t).store, entered: make(chan struct{}), open: make(chan struct{})}
	srv := newLimitedServerOn(t, nil, 0, store)
	u := newUser(t, coinpulse.TierPremium, nil)
	key, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	sandbox, _ := newKey(t, u, coinpulse.ModeTest, rw, nil)
	if res := do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox); res.Status != 200 {
		t.Fatalf("sandbox call: %d", res.Status)
	}
	done := make(chan int)
	go func() { done <- do(t, srv.Server, "GET", "/api/v1/portfolio", key).Status }()
	<-store.entered
	waitAdmitted(t, u, srv.clock(), 1)
	if n, err := shared.store.MonthCalls(context.Background(), u.ID, coinpulse.MonthStart(srv.clock())); err != nil || n != 0 {
		t.Errorf("MonthCalls = %d, %v while the call is answered; want 0", n, err)
	}
	close(store.open)
	if status := <-done; status != 200 {
		t.Fatalf("status %d", status)
	}
	srv.flush(t)
	if n, err := shared.store.MonthCalls(context.Background(), u.ID, coinpulse.MonthStart(srv.clock())); err != nil || n != 1 {
		t.Errorf("MonthCalls = %d, %v once answered; want 1", n, err)
	}
	waitAdmitted(t, u, srv.clock(), 1)
}

// A call is metered at the instant the limiter admitted it, by the
// limiter's clock: in the month and day the limiter counted it in, on a
// node whose clock is off too.
func TestCallsAreMeteredAtTheLimitersTime(t *testing.T) {
	t.Parallel()
	srv := newSkewedServer(t, nil, 90*time.Second)
	key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	admitted := srv.clock()
	do(t, srv.Server, "GET", "/api/v1/markets/global", key)
	srv.flush(t)
	usage := decode[struct {
		Recent []struct {
			Time time.Time `json:"time"`
		} `json:"recent"`
	}](t, do(t, srv.Server, "GET", "/api/v1/usage", key))
	if len(usage.Recent) != 1 || usage.Recent[0].Time.Sub(admitted).Abs() > time.Millisecond {
		t.Errorf("recent %+v, want one call at %s (the node's clock says %s)", usage.Recent, admitted, admitted.Add(90*time.Second))
	}
}

// GET /usage takes its month and day from the limiter's clock too: on a
// node 90 s ahead, just before the limiter's month ends, month_calls,
// daily and month_resets_at describe the month the windows count in, not
// the node's next one.
func TestUsageMonthIsTheLimiters(t *testing.T) {
	t.Parallel()
	srv := newSkewedServer(t, nil, 90*time.Second)
	srv.mu.Lock()
	srv.now = time.Date(2026, 11, 30, 23, 58, 0, 0, time.UTC)
	srv.mu.Unlock()
	key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	for range 3 {
		if res := do(t, srv.Server, "GET", "/api/v1/markets/global", key); res.Status != http.StatusOK {
			t.Fatalf("GET /markets/global: %d %s", res.Status, res.Raw)
		}
		srv.advance(time.Second)
	}
	srv.flush(t)
	srv.advance(75 * time.Second) // the limiter at 23:59:18, the node at 00:00:48 on December 1
	usage := decode[struct {
		MonthCalls    int64     `json:"month_calls"`
		MonthResetsAt time.Time `json:"month_resets_at"`
		Windows       []struct {
			Window   string     `json:"window"`
			ResetsAt *time.Time `json:"resets_at"`
		} `json:"windows"`
		Daily []struct {
			Date  string `json:"date"`
			Calls int64  `json:"calls"`
		} `json:"daily"`
	}](t, do(t, srv.Server, "GET", "/api/v1/usage", key))
	december := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if usage.MonthCalls != 3 || !usage.MonthResetsAt.Equal(december) {
		t.Errorf("month_calls %d, month_resets_at %s; want 3 and %s", usage.MonthCalls, usage.MonthResetsAt, december)
	}
	if n := len(usage.Daily); n == 0 || usage.Daily[n-1].Date != "2026-11-30" || usage.Daily[n-1].Calls != 3 {
		t.Errorf("daily ends %+v; want 2026-11-30 with 3 calls", usage.Daily[max(0, len(usage.Daily)-2):])
	}
	for _, w := range usage.Windows {
		if w.Window == "month" && (w.ResetsAt == nil || !w.ResetsAt.Equal(usage.MonthResetsAt)) {
			t.Errorf("the month window resets at %v, month_resets_at says %s", w.ResetsAt, usage.MonthResetsAt)
		}
	}
}

// gatedLimiter is a limiter whose Allow waits until open is closed.
type gatedLimiter struct {
	coinpulse.Limiter
	entered chan struct{}
	open    chan struct{}
}

func (g gatedLimiter) Allow(ctx context.Context, account string, l coinpulse.Limits) (coinpulse.Verdict, error) {
	g.entered <- struct{}{}
	<-g.open
	return g.Limiter.Allow(ctx, account, l)
}

// downLimiter is a limiter that cannot be reached.
type downLimiter struct{ coinpulse.Limiter }

var errLimiterDown = errors.New("downLimiter: connection refused")

func (downLimiter) Allow(context.Context, string, coinpulse.Limits) (coinpulse.Verdict, error) {
	return coinpulse.Verdict{}, errLimiterDown
}

func (downLimiter) Peek(context.Context, string, coinpulse.Limits) (coinpulse.Verdict, error) {
	return coinpulse.Verdict{}, errLimiterDown
}

// A limiter that cannot be reached fails keyed calls closed: 503 with
// Retry-After, no rate-limit header (there is nothing to tell), nothing
// metered; a plan refusal is still a 403, without the headers.
func TestLimiterUnreachable(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	base := testServer(t)
	rec := &recordingMeter{}
	var log testlog.Buffer
	srv := New(Config{Store: shared.store, Market: base.market, Log: slog.New(slog.NewTextHandler(&log, nil)), Limiter: downLimiter{}, Meter: rec})
	key, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeLive, rw, nil)
	res := do(t, srv, "GET", "/api/v1/markets/global", key)
	wantError(t, res, http.StatusServiceUnavailable, coinpulse.CodeUnavailable)
	// The operator hears of it: one WARN line, not one a call (an audit:
	// none was logged).
	for range 3 {
		do(t, srv, "GET", "/api/v1/markets/global", key)
	}
	if n := log.Count("rate limits cannot be checked"); n != 1 || !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), errLimiterDown.Error()) {
		t.Errorf("%d log lines for 4 failed checks, want 1 at WARN with the error:\n%s", n, log.String())
	}
	checkResponseOf(t, doc, "GET", "/markets/global", res, false)
	if h := res.Header; h.Get("Retry-After") != "1" || h.Get("X-RateLimit-Limit") != "" || h.Get("RateLimit") != "" {
		t.Errorf("503: Retry-After %q, X-RateLimit-Limit %q, RateLimit %q; want 1 and no rate-limit headers", h.Get("Retry-After"), h.Get("X-RateLimit-Limit"), h.Get("RateLimit"))
	}
	res = do(t, srv, "GET", "/api/v1/markets/top-movers", key)
	wantError(t, res, http.StatusForbidden, coinpulse.CodePermissionDenied)
	if v := res.Header.Get("X-RateLimit-Limit"); v != "" {
		t.Errorf("403 with the limiter down: X-RateLimit-Limit %q", v)
	}
	if n := rec.len(); n != 0 {
		t.Errorf("%d calls metered, want none", n)
	}
}

// The limiter's failures are logged at most once every limiterLogEvery,
// each line counting the failures since the last; the failures after the
// last WARN are told at INFO once checks succeed again.
func TestLimiterFailureLog(t *testing.T) {
	var log testlog.Buffer
	srv := New(Config{Store: shared.store, Log: slog.New(slog.NewTextHandler(&log, nil))})
	later := func() { srv.limiterLogged.Add(-int64(limiterLogEvery)) } // as if the window had passed
	for range 3 {
		srv.limiterFailed(errLimiterDown)
	}
	later()
	for range 3 {
		srv.limiterFailed(errLimiterDown) // the first logs the two unlogged and itself
	}
	srv.limiterBack() // within the window: nothing yet
	later()
	srv.limiterBack()
	srv.limiterBack() // nothing left to tell
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		level := regexp.MustCompile(`level=(\w+)`).FindStringSubmatch(l)[1]
		failures := regexp.MustCompile(`failures=(\d+)`).FindStringSubmatch(l)[1]
		lines = append(lines, level+" "+failures)
	}
	if want := []string{"WARN 1", "WARN 3", "INFO 2"}; !slices.Equal(lines, want) {
		t.Errorf("log lines %q, want %q:\n%s", lines, want, log.String())
	}
}

// Drain waits for a call that is still running, admitted or not yet
// (here: still in the limiter), until it has been metered.
func TestDrainWaitsForRunningCalls(t *testing.T) {
	t.Parallel()
	base := testServer(t)
	rec := &recordingMeter{}
	gate := gatedLimiter{Limiter: ratelimit.NewMemory(time.Now, nil), entered: make(chan struct{}, 1), open: make(chan struct{})}
	srv := New(Config{Store: shared.store, Market: base.market, Log: quiet, Limiter: gate, Meter: rec})
	key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	if err := srv.Drain(context.Background()); err != nil {
		t.Fatalf("Drain with nothing running: %v", err)
	}
	done := make(chan int)
	go func() { done <- do(t, srv, "GET", "/api/v1/markets/global", key).Status }()
	<-gate.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := srv.Drain(ctx); err == nil {
		t.Fatal("Drain returned nil while a call was in the limiter")
	}
	drained := make(chan error)
	go func() { drained <- srv.Drain(context.Background()) }()
	close(gate.open)
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if n := rec.len(); n != 1 {
		t.Errorf("%d calls metered when Drain returned, want 1", n)
	}
	if status := <-done; status != 200 {
		t.Errorf("status %d", status)
	}
}

// recordingMeter keeps the calls it is given, and the sum of the
// admission counts.
type recordingMeter struct {
	mu       sync.Mutex
	calls    []coinpulse.Call
	admitted int64
}

func (m *recordingMeter) Admitted(_ int64, _ time.Time, delta int64) {
	m.mu.Lock()
	m.admitted += delta
	m.mu.Unlock()
}

func (m *recordingMeter) Record(c coinpulse.Call) {
	m.mu.Lock()
	m.calls = append(m.calls, c)
	m.mu.Unlock()
}

func (m *recordingMeter) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.calls)
}

func TestSimulatedTimeout(t *testing.T) {
	srv := newLimitedServer(t, nil)
	old := simulateTimeoutFor
	simulateTimeoutFor = 50 * time.Millisecond
	t.Cleanup(func() { simulateTimeoutFor = old })
	sandbox, _ := newKey(t, newUser(t, coinpulse.TierPro, nil), coinpulse.ModeTest, rw, nil)
	start := time.Now()
	res := do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "timeout")
	wantError(t, res, http.StatusServiceUnavailable, coinpulse.CodeUnavailable)
	if time.Since(start) < 50*time.Millisecond {
		t.Errorf("simulated timeout answered after %s", time.Since(start))
	}
}

// A simulated timeout's 503 tells where the key stands when it is
// answered, not 30 s earlier at its check: here the clock moves 2 s
// during the wait, and the abuse limit's windows are whole again.
func TestSimulatedTimeoutHeadersAreFresh(t *testing.T) {
	old := simulateTimeoutFor
	simulateTimeoutFor = 300 * time.Millisecond
	t.Cleanup(func() { simulateTimeoutFor = old })
	base := testServer(t)
	clock := &limitedServer{now: time.Now().UTC()} // its clock only
	lim := allowedLimiter{Limiter: ratelimit.NewMemory(clock.clock, nil), allowed: make(chan struct{}, 1)}
	srv := New(Config{Store: shared.store, Market: base.market, Log: quiet, Clock: clock.clock, Limiter: lim})
	sandbox, _ := newKey(t, newUser(t, coinpulse.TierPro, nil), coinpulse.ModeTest, rw, nil)
	go func() {
		<-lim.allowed // the call is admitted and waits
		clock.advance(2 * time.Second)
	}()
	res := do(t, srv, "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "timeout")
	wantError(t, res, http.StatusServiceUnavailable, coinpulse.CodeUnavailable)
	// At the check: the second window, 49 of 50 left. Two seconds later:
	// every window whole, the second (the fewest calls) described.
	want := fmt.Sprint(DefaultSandboxLimits.PerSecond)
	if l, r := res.Header.Get("X-RateLimit-Limit"), res.Header.Get("X-RateLimit-Remaining"); l != want || r != want {
		t.Errorf("503 after the wait: X-RateLimit-Limit %s, Remaining %s; want %s and %s", l, r, want, want)
	}
}

// An answer that begins long after its call was checked tells where the
// key stands then, not at the check: a body that never arrives is a 408
// after the body timeout, here 30 s later by the limiter's clock, when
// every window is whole again. (It answered with the check's headers, a
// reset 29 s in the past; found by a verification of the headers.) The
// look outlives the request's context, which the timed-out read cancels
// (a limiter that honours its context answered nothing, and the stale
// headers went out); if the limiter cannot answer, the 408 has none.
func TestLateAnswerHeadersAreFresh(t *testing.T) {
	for _, c := range []struct {
		name     string
		failPeek bool
	}{{"fresh", false}, {"limiter down by then", true}} {
		t.Run(c.name, func(t *testing.T) {
			base := testServer(t)
			clock := &limitedServer{now: time.Now().UTC()} // its clock only
			lim := &contextLimiter{allowedLimiter: allowedLimiter{Limiter: ratelimit.NewMemory(clock.clock, nil), allowed: make(chan struct{}, 1)}}
			srv := New(Config{Store: shared.store, Market: base.market, Log: quiet, Clock: clock.clock, Limiter: lim, BodyTimeout: 300 * time.Millisecond})
			key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			conn, err := net.Dial("tcp", ts.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":", key)
			<-lim.allowed // checked: 4 of 5 left in the second
			lim.failPeek.Store(c.failPeek)
			clock.advance(30 * time.Second)
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d, want 408", res.StatusCode)
			}
			if c.failPeek {
				for _, k := range rateLimitHeaders {
					if v := res.Header.Get(k); v != "" {
						t.Errorf("%s: %q, want none when the limiter cannot say where the key stands", k, v)
					}
				}
				return
			}
			now := clock.clock()
			if got, want := res.Header.Get("X-RateLimit-Reset"), strconv.FormatInt(now.Unix(), 10); got != want {
				t.Errorf("X-RateLimit-Reset %s, want %s: the window is whole now", got, want)
			}
			if got := res.Header.Get("X-RateLimit-Remaining"); got != "5" {
				t.Errorf("X-RateLimit-Remaining %s, want 5: the second window is whole 30 s after the call; RateLimit %q", got, res.Header.Get("RateLimit"))
			}
		})
	}
}

// contextLimiter honours its context in Peek, as the interface allows,
// and fails its Peeks while failPeek is set.
type contextLimiter struct {
	allowedLimiter
	failPeek atomic.Bool
}

func (c *contextLimiter) Peek(ctx context.Context, account string, l coinpulse.Limits) (coinpulse.Verdict, error) {
	if err := ctx.Err(); err != nil {
		return coinpulse.Verdict{}, err
	}
	if c.failPeek.Load() {
		return coinpulse.Verdict{}, errors.New("contextLimiter: down")
	}
	return c.allowedLimiter.Peek(ctx, account, l)
}

// allowedLimiter is a limiter that tells, once, when an Allow returned.
type allowedLimiter struct {
	coinpulse.Limiter
	allowed chan struct{}
}

func (a allowedLimiter) Allow(ctx context.Context, account string, l coinpulse.Limits) (coinpulse.Verdict, error) {
	v, err := a.Limiter.Allow(ctx, account, l)
	select {
	case a.allowed <- struct{}{}:
	default:
	}
	return v, err
}

// A client that gives up on a simulated timeout ends the call, a request
// with a body too (net/http notices a hang-up only once the body is read).
func TestSimulatedTimeoutEndsWhenTheClientHangsUp(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	sandbox, _ := newKey(t, newUser(t, coinpulse.TierPro, nil), coinpulse.ModeTest, rw, nil)
	for _, method := range []string{"GET", "POST"} {
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		body := ""
		if method == "POST" {
			body = `{"name":"hang"}`
		}
		fmt.Fprintf(conn, "%s /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Sandbox-Simulate: timeout\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, sandbox, len(body), body)
		for deadline := time.Now().Add(10 * time.Second); srv.running.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the simulated timeout never started", method)
			}
		}
		conn.Close()
		// simulateTimeoutFor is 30 s: the call must end long before.
		for deadline := time.Now().Add(10 * time.Second); srv.running.Load() != 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the call still runs 10 s after its client hung up", method)
			}
		}
	}
}

// A graceful shutdown does not wait out a simulated timeout: the call is
// answered at once, as the 503 it was going to be.
func TestSimulatedTimeoutEndsAtShutdown(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	sandbox, _ := newKey(t, newUser(t, coinpulse.TierPro, nil), coinpulse.ModeTest, rw, nil)
	done := make(chan *response, 1)
	go func() {
		done <- do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox, "X-Sandbox-Simulate", "timeout")
	}()
	// The call is admitted, then waits for its 30 seconds.
	for deadline := time.Now().Add(10 * time.Second); srv.running.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the simulated timeout never started")
		}
	}
	srv.BeginShutdown()
	srv.BeginShutdown() // twice is harmless
	select {
	case res := <-done:
		wantError(t, res, http.StatusServiceUnavailable, coinpulse.CodeUnavailable)
		if res.Header.Get("Retry-After") != "1" || !strings.Contains(res.Error.Message, "shutting down") {
			t.Errorf("503: Retry-After %q, message %q", res.Header.Get("Retry-After"), res.Error.Message)
		}
	case <-time.After(simulateTimeoutFor - 5*time.Second):
		t.Fatal("BeginShutdown did not end the simulated timeout")
	}
	if err := srv.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Answers refused before the limits are checked, a declared body over the
// limit and a path no route serves, still tell a valid key where its
// account stands; nothing is counted. Without a valid key they carry no
// rate-limit headers, and a keyed route's 413 is a 401 first.
func TestRateLimitHeadersBeforeTheLimits(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	u := newUser(t, coinpulse.TierFree, nil)
	key, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	big := func(key string) *http.Request {
		req := httptest.NewRequest("GET", "/api/v1/markets/global", bytes.NewReader(make([]byte, 65<<10)))
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		return req
	}
	for _, c := range []struct {
		name   string
		res    *response
		status int
		code   coinpulse.Code
	}{
		{"413", serve(t, srv.Server, big(key)), 413, coinpulse.CodePayloadTooLarge},
		{"404", do(t, srv.Server, "GET", "/api/v1/nosuch", key), 404, coinpulse.CodeNotFound},
		{"405", do(t, srv.Server, "PUT", "/api/v1/usage", key), 405, coinpulse.CodeMethodNotAllowed},
		{"307 to a clean path", do(t, srv.Server, "GET", "/api/v1//markets/global", key), http.StatusTemporaryRedirect, ""},
	} {
		if c.status/100 == 3 {
			if c.res.Status != c.status {
				t.Errorf("%s: %d, want %d", c.name, c.res.Status, c.status)
			}
		} else {
			wantError(t, c.res, c.status, c.code)
		}
		// Nothing counted: every window whole, the second (the fewest
		// calls) described, the month whole in RateLimit.
		if h := c.res.Header; h.Get("X-RateLimit-Limit") != "5" || h.Get("X-RateLimit-Remaining") != "5" || h.Get("RateLimit-Policy") == "" ||
			!strings.Contains(h.Get("RateLimit"), `"month";r=1000;`) {
			t.Errorf("%s: X-RateLimit-Limit %q, -Remaining %q, RateLimit %q, RateLimit-Policy %q; want 5, 5, a whole month and the policy",
				c.name, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("RateLimit"), h.Get("RateLimit-Policy"))
		}
	}
	bad := key[:len(key)-1] + "x" // a different last character
	if strings.HasSuffix(key, "x") {
		bad = key[:len(key)-1] + "y"
	}
	for _, c := range []struct {
		name   string
		res    *response
		status int
		code   coinpulse.Code
	}{
		{"413 without a key", serve(t, srv.Server, big("")), 401, coinpulse.CodeInvalidAPIKey},
		{"413 with a bad key", serve(t, srv.Server, big(bad)), 401, coinpulse.CodeInvalidAPIKey},
		{"404 with a bad key", do(t, srv.Server, "GET", "/api/v1/nosuch", bad), 404, coinpulse.CodeNotFound},
	} {
		wantError(t, c.res, c.status, c.code)
		if v := c.res.Header.Get("X-RateLimit-Limit"); v != "" {
			t.Errorf("%s: X-RateLimit-Limit %q, want none", c.name, v)
		}
	}
	// A public route's 413 stays a 413.
	req := httptest.NewRequest("GET", "/healthz", bytes.NewReader(make([]byte, 65<<10)))
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 413 {
		t.Errorf("GET /healthz with a large body: %d, want 413", rec.Code)
	}
	srv.flush(t)
	if n, err := shared.store.MonthCalls(context.Background(), u.ID, coinpulse.MonthStart(srv.clock())); err != nil || n != 0 {
		t.Errorf("MonthCalls = %d, %v; want 0", n, err)
	}
}

// A live key's /usage has an abuse limit of its own: a sandbox that used
// up its abuse limit does not lock the account out of /usage.
func TestUsageAbuseLimitIsApart(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil) // its clock stands still
	u := newUser(t, coinpulse.TierFree, nil)
	live, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	sandbox, _ := newKey(t, u, coinpulse.ModeTest, rw, nil)
	for i := range DefaultSandboxLimits.PerSecond {
		if res := do(t, srv.Server, "GET", "/api/v1/markets/global", sandbox); res.Status != 200 {
			t.Fatalf("sandbox call %d: %d", i+1, res.Status)
		}
	}
	res := do(t, srv.Server, "GET", "/api/v1/usage", sandbox)
	wantError(t, res, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded)
	if !strings.Contains(res.Error.Message, "abuse limit of sandbox calls (50 calls per second)") {
		t.Errorf("sandbox 429: %q", res.Error.Message)
	}
	for i := range DefaultSandboxLimits.PerSecond {
		if res := do(t, srv.Server, "GET", "/api/v1/usage", live); res.Status != 200 {
			t.Fatalf("live /usage %d after the sandbox's limit: %d %s", i+1, res.Status, res.Raw)
		}
	}
	res = do(t, srv.Server, "GET", "/api/v1/usage", live)
	wantError(t, res, http.StatusTooManyRequests, coinpulse.CodeRateLimitExceeded)
	if !strings.Contains(res.Error.Message, "abuse limit of /usage (50 calls per second)") || res.Header.Get("X-RateLimit-Limit") != "50" {
		t.Errorf("live /usage 429: %q, X-RateLimit-Limit %q", res.Error.Message, res.Header.Get("X-RateLimit-Limit"))
	}
}

// rateHeaders are the rate-limit headers of an answer.
func rateHeaders(res *response) [5]string {
	var out [5]string
	for i, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy"} {
		out[i] = res.Header.Get(k)
	}
	return out
}

// A live key's answers from /usage describe its plan, as its other
// answers do, whatever their status; only the 429 of /usage's own abuse
// limit describes that limit (TestUsageAbuseLimitIsApart).
func TestUsageAnswersDescribeThePlan(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil) // its clock stands still
	key, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeLive, rw, nil)
	counted := do(t, srv.Server, "GET", "/api/v1/markets/global", key)
	if counted.Status != 200 || counted.Header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("GET /markets/global: %d, X-RateLimit-Limit %q; want 200 and the plan's", counted.Status, counted.Header.Get("X-RateLimit-Limit"))
	}
	want := rateHeaders(counted)
	ok := do(t, srv.Server, "GET", "/api/v1/usage", key)
	bad := do(t, srv.Server, "GET", "/api/v1/usage?x=1", key)
	wantError(t, bad, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	for _, res := range []*response{ok, bad} {
		if got := rateHeaders(res); got != want {
			t.Errorf("/usage %d: rate-limit headers %q\nwant the plan's %q", res.Status, got, want)
		}
	}

	// An expired subscription: /usage and a market call are refused alike.
	expired := srv.clock().Add(-time.Hour)
	key, _ = newKey(t, newUser(t, coinpulse.TierPremium, &expired), coinpulse.ModeLive, rw, nil)
	market := do(t, srv.Server, "GET", "/api/v1/markets/global", key)
	usage := do(t, srv.Server, "GET", "/api/v1/usage", key)
	if market.Status != 403 || usage.Status != 403 {
		t.Fatalf("expired: /markets/global %d, /usage %d; want 403 and 403", market.Status, usage.Status)
	}
	if got, want := rateHeaders(usage), rateHeaders(market); got != want || want[0] == "" {
		t.Errorf("expired: /usage rate-limit headers %q\nwant those of /markets/global %q", got, want)
	}
}

// The second plan variant: without API access only /usage answers.
func TestPlanWithoutAPIAccess(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) { p.Endpoints = coinpulse.EndpointsNone }))
	key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	res := do(t, srv.Server, "GET", "/api/v1/markets", key)
	wantError(t, res, http.StatusForbidden, coinpulse.CodePermissionDenied)
	if want := "The premium plan has no API access (only /usage answers). Upgrade to pro or higher at /user/api to use GET /api/v1/markets."; res.Error.Message != want {
		t.Errorf("message %q\nwant %q", res.Error.Message, want)
	}
	// /usage answers, and its month allows no call (not: no limit).
	res = do(t, srv.Server, "GET", "/api/v1/usage", key)
	if res.Status != 200 {
		t.Fatalf("/usage without API access: %d %s", res.Status, res.Raw)
	}
	usage := decode[usageWindows](t, res)
	month := usage.Windows[len(usage.Windows)-1]
	if usage.MonthlyLimit == nil || *usage.MonthlyLimit != 0 || month.Window != "month" || month.Limit == nil || *month.Limit != 0 ||
		month.Remaining == nil || *month.Remaining != 0 || month.ResetsAt == nil || month.ResetsAt.Day() != 1 {
		t.Errorf("monthly_limit %v, month window %+v; want 0 and 0 left until the 1st", usage.MonthlyLimit, month)
	}
	// So do the headers of its answers, /usage's and the refusals'.
	now := srv.clock().UTC()
	next := coinpulse.MonthStart(now).AddDate(0, 1, 0)
	premium := srv.planMap()[coinpulse.TierPremium]
	wantHeaders := [5]string{"0", "0", strconv.FormatInt(next.Unix(), 10),
		fmt.Sprintf(`"second";r=%d;t=0, "minute";r=%d;t=0, "month";r=0;t=%d`, premium.PerSecond, premium.PerMinute, int64((next.Sub(now)+time.Second-1)/time.Second)),
		fmt.Sprintf(`"second";q=%d;w=1, "minute";q=%d;w=60, "month";q=0;w=%d`, srv.planMap()[coinpulse.TierPremium].PerSecond,
			srv.planMap()[coinpulse.TierPremium].PerMinute, int64(next.Sub(coinpulse.MonthStart(now)).Seconds()))}
	refused := do(t, srv.Server, "GET", "/api/v1/markets", key)
	for _, res := range []*response{res, refused} {
		if got := rateHeaders(res); got != wantHeaders {
			t.Errorf("%d answer without API access: rate-limit headers %q\nwant %q", res.Status, got, wantHeaders)
		}
	}
}

// proOnlyPlans loads the shipped plan file that gives API access to pro
// alone.
func proOnlyPlans(t *testing.T) map[coinpulse.Tier]coinpulse.Plan {
	t.Helper()
	plans, err := coinpulse.LoadPlansFile("../../plans/pro-only.json")
	if err != nil {
		t.Fatal(err)
	}
	return plans
}

// A refusal names the tier that reaches the endpoint under the plans the
// server runs with, not under the default ones.
func TestPermissionDeniedNamesTheTier(t *testing.T) {
	t.Parallel()
	proOnly := proOnlyPlans(t)
	noStreams := plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) { p.Webhooks = false })
	for _, c := range []struct {
		plans map[coinpulse.Tier]coinpulse.Plan
		tier  coinpulse.Tier
		path  string
		want  string
	}{
		{proOnly, coinpulse.TierFree, "/api/v1/markets", "The free plan has no API access (only /usage answers). Upgrade to pro at /user/api to use GET /api/v1/markets."},
		{proOnly, coinpulse.TierEnterprise, "/api/v1/markets", "The enterprise plan has no API access (only /usage answers). The pro plan includes GET /api/v1/markets: change plans at /user/api."},
		{nil, coinpulse.TierFree, "/api/v1/portfolio", "The free plan includes only the basic endpoints (/markets, /markets/search, /markets/global, /markets/{id}, /coins/{id}, /usage). Upgrade to premium or higher at /user/api to use GET /api/v1/portfolio."},
		{noStreams, coinpulse.TierPremium, "/api/v1/webhooks", "The premium plan does not include webhooks and WebSocket streams. Upgrade to pro or higher at /user/api to use GET /api/v1/webhooks."},
	} {
		srv := newLimitedServer(t, c.plans)
		key, _ := newKey(t, newUser(t, c.tier, nil), coinpulse.ModeLive, rw, nil)
		res := do(t, srv.Server, "GET", c.path, key)
		wantError(t, res, http.StatusForbidden, coinpulse.CodePermissionDenied)
		if res.Error.Message != c.want {
			t.Errorf("%s on %s: %q\nwant %q", c.tier, c.path, res.Error.Message, c.want)
		}
	}
}

// /usage reports what metering kept: counted calls, recent calls by route
// pattern, per-key counts, daily counts and percentiles.
func TestUsageReport(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	u := newUser(t, coinpulse.TierPremium, nil)
	key, rec := newKey(t, u, coinpulse.ModeLive, rw, nil)
	// Before any call is metered, the percentiles are not known: null, not 0.
	type percentiles struct {
		ResponseTimeMS map[string]*float64 `json:"response_time_ms"`
	}
	if p := decode[percentiles](t, do(t, srv.Server, "GET", "/api/v1/usage", key)).ResponseTimeMS; len(p) != 3 || p["p50"] != nil || p["p95"] != nil || p["p99"] != nil {
		t.Errorf("a new account's response_time_ms %v, want p50, p95 and p99 null", p)
	}
	do(t, srv.Server, "GET", "/api/v1/markets/global", key)
	do(t, srv.Server, "GET", "/api/v1/coins/bitcoin", key)
	do(t, srv.Server, "GET", "/api/v1/coins/no-such-coin", key) // a 404 counts
	do(t, srv.Server, "GET", "/api/v1/usage", key)              // /usage does not
	srv.flush(t)
	res := do(t, srv.Server, "GET", "/api/v1/usage", key)
	v := decode[struct {
		Tier         string `json:"tier"`
		MonthCalls   int64  `json:"month_calls"`
		MonthlyLimit *int64 `json:"monthly_limit"`
		Windows      []struct {
			Window    string `json:"window"`
			Limit     *int64 `json:"limit"`
			Remaining *int64 `json:"remaining"`
			ResetsAt  string `json:"resets_at"`
		} `json:"windows"`
		Daily []struct {
			Date  string `json:"date"`
			Calls int64  `json:"calls"`
		} `json:"daily"`
		Keys []struct {
			ID    int64 `json:"id"`
			Calls int64 `json:"calls"`
		} `json:"keys"`
		Recent []struct {
			Route  string `json:"route"`
			Status int    `json:"status"`
		} `json:"recent"`
	}](t, res)
	if v.Tier != "premium" || v.MonthCalls != 3 || v.MonthlyLimit == nil || *v.MonthlyLimit != 10000 {
		t.Errorf("tier %s, month calls %d, limit %v; want premium, 3, 10000", v.Tier, v.MonthCalls, v.MonthlyLimit)
	}
	if len(v.Windows) != 3 || *v.Windows[2].Remaining != 10000-3 {
		t.Errorf("windows %+v", v.Windows)
	}
	for _, w := range v.Windows {
		if _, frac, _ := strings.Cut(strings.TrimSuffix(w.ResetsAt, "Z"), "."); len(frac) > 6 {
			t.Errorf("%s window resets at %s: finer than the microsecond", w.Window, w.ResetsAt)
		}
	}
	if len(v.Daily) != 30 || v.Daily[29].Calls != 3 || v.Daily[29].Date != srv.clock().Format(time.DateOnly) {
		t.Errorf("daily: %d entries, last %+v", len(v.Daily), v.Daily[len(v.Daily)-1])
	}
	if len(v.Keys) != 1 || v.Keys[0].ID != rec.ID || v.Keys[0].Calls != 5 {
		t.Errorf("keys %+v, want key %d with 5 calls (the /usage calls too)", v.Keys, rec.ID)
	}
	if p := decode[percentiles](t, res).ResponseTimeMS; p["p50"] == nil || p["p99"] == nil || *p["p50"] <= 0 {
		t.Errorf("response_time_ms %v after calls, want numbers", p)
	}
	if len(v.Recent) != 5 || v.Recent[0].Route != "/api/v1/usage" || v.Recent[1].Route != "/api/v1/coins/{idOrSymbol}" || v.Recent[1].Status != 404 {
		t.Errorf("recent %+v", v.Recent)
	}
}

// A call refused by its plan still says where the account stands, and
// costs nothing.
func TestRateLimitHeadersOnPlanRefusal(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	key, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeLive, rw, nil)
	for range 3 {
		res := do(t, srv.Server, "GET", "/api/v1/markets/top-movers", key)
		wantError(t, res, http.StatusForbidden, coinpulse.CodePermissionDenied)
		// Every window whole: the second, which has the fewest calls, is
		// described; the month shows whole in RateLimit.
		if res.Header.Get("X-RateLimit-Remaining") != "5" || res.Header.Get("RateLimit-Policy") == "" || !strings.Contains(res.Header.Get("RateLimit"), `"month";r=1000;`) {
			t.Errorf("403: X-RateLimit-Remaining %q, RateLimit %q, RateLimit-Policy %q; want 5, a whole month and the policy",
				res.Header.Get("X-RateLimit-Remaining"), res.Header.Get("RateLimit"), res.Header.Get("RateLimit-Policy"))
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// TestMonthSeconds checks the cached month length against the calendar,
// in an order that leaves and re-enters months (an injected clock may go
// back) and crosses a leap February.
func TestMonthSeconds(t *testing.T) {
	for _, at := range []string{
		"2024-02-10T00:00:00Z", "2024-02-29T23:59:59Z", "2024-03-01T00:00:00Z",
		"2024-02-01T00:00:00Z", "2023-02-15T12:00:00Z", "2026-12-31T23:59:59Z",
		"2027-01-01T00:00:00Z", "2026-11-30T23:59:59Z", "2026-11-30T23:59:59Z",
	} {
		now, err := time.Parse(time.RFC3339, at)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		want := int64(start.AddDate(0, 1, 0).Sub(start) / time.Second)
		if got := monthSeconds(now); got != want {
			t.Errorf("monthSeconds(%s) = %d, want %d (%d days)", at, got, want, want/86400)
		}
	}
}

// TestClosestWindow: the window X-RateLimit-* describe is the one with the
// fewest calls left, since a call must pass every window: Remaining never
// promises a call that another window would refuse (the audit's case: 2
// left of 3 a second, 6 of 10 a minute; the share rule described the
// minute, and the third of those 6 calls was refused). On a tie, the
// smaller share left, then the longer window.
func TestClosestWindow(t *testing.T) {
	const huge = coinpulse.MaxMonthlyCalls
	for _, c := range []struct {
		name    string
		windows [3]coinpulse.WindowState
		want    coinpulse.Window
	}{
		{"fewer calls left in the second, a smaller share in the minute", [3]coinpulse.WindowState{
			{Window: coinpulse.WindowSecond, Limit: 3, Remaining: 2},
			{Window: coinpulse.WindowMinute, Limit: 10, Remaining: 6},
			{Window: coinpulse.WindowMonth, Limit: 20, Remaining: 16},
		}, coinpulse.WindowSecond},
		{"a month nearly spent, but the second has fewer", [3]coinpulse.WindowState{
			{Window: coinpulse.WindowSecond, Limit: 5, Remaining: 4},
			{Window: coinpulse.WindowMinute, Limit: 60, Remaining: 59},
			{Window: coinpulse.WindowMonth, Limit: 1000, Remaining: 9},
		}, coinpulse.WindowSecond},
		{"the month with the fewest, huge windows", [3]coinpulse.WindowState{
			{Window: coinpulse.WindowSecond, Limit: 1_000_000_000, Remaining: 999_999_999},
			{Window: coinpulse.WindowMinute, Limit: 1_000_000_000, Remaining: 999_999_998},
			{Window: coinpulse.WindowMonth, Limit: huge, Remaining: 3},
		}, coinpulse.WindowMonth},
		{"idle: the second", [3]coinpulse.WindowState{
			{Window: coinpulse.WindowSecond, Limit: 5, Remaining: 5},
			{Window: coinpulse.WindowMinute, Limit: 60, Remaining: 60},
			{Window: coinpulse.WindowMonth, Limit: huge, Remaining: huge},
		}, coinpulse.WindowSecond},
		{"as many left: the smaller share", [3]coinpulse.WindowState{
			{Window: coinpulse.WindowSecond, Limit: 5, Remaining: 5},
			{Window: coinpulse.WindowMinute, Limit: 60, Remaining: 5},
			{Window: coinpulse.WindowMonth, Limit: 1000, Remaining: 900},
		}, coinpulse.WindowMinute},
		{"none left in two: the longer", [3]coinpulse.WindowState{
			{Window: coinpulse.WindowSecond, Limit: 5, Remaining: 0},
			{Window: coinpulse.WindowMinute, Limit: 60, Remaining: 0},
			{Window: coinpulse.WindowMonth, Limit: 1000, Remaining: 900},
		}, coinpulse.WindowMinute},
		{"an unlimited month is left out", [3]coinpulse.WindowState{
			{Window: coinpulse.WindowSecond, Limit: 5, Remaining: 4},
			{Window: coinpulse.WindowMinute, Limit: 60, Remaining: 1},
			{Window: coinpulse.WindowMonth, Limit: coinpulse.Unlimited, Remaining: coinpulse.Unlimited},
		}, coinpulse.WindowMinute},
	} {
		w, ok := closest(&coinpulse.Verdict{Windows: c.windows})
		if !ok || w.Window != c.want {
			t.Errorf("%s: closest is %q (%v), want %q", c.name, w.Window, ok, c.want)
		}
	}
}

// TestRemainingIsWhatIsAdmitted: after X-RateLimit-Remaining says R,
// exactly R more calls in the same instant pass, whichever window binds
// (after a burst and a pause, the second; near the month's end, the
// month). From the audit that found the share rule promising more.
func TestRemainingIsWhatIsAdmitted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		calls int           // spaced a second apart
		pause time.Duration // then this, then one call
	}{
		{"a burst, a pause, a call", 0, 1050 * time.Millisecond},
		{"near the month's end", 16, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newLimitedServer(t, plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) {
				p.PerSecond, p.PerMinute, p.MonthlyCalls = 3, 10, 20
			}))
			key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
			call := func() *response { return do(t, srv.Server, "GET", "/api/v1/markets/global", key) }
			if c.calls == 0 {
				for i := range 3 {
					if res := call(); res.Status != 200 {
						t.Fatalf("burst call %d: %d", i, res.Status)
					}
				}
			}
			for i := range c.calls {
				srv.advance(6 * time.Second) // the minute's pace: 10 a minute
				if res := call(); res.Status != 200 {
					t.Fatalf("call %d: %d %s", i, res.Status, res.Raw)
				}
			}
			srv.advance(c.pause)
			res := call()
			if res.Status != 200 {
				t.Fatalf("the call after the pause: %d", res.Status)
			}
			n, err := strconv.Atoi(res.Header.Get("X-RateLimit-Remaining"))
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= n; i++ {
				if r := call(); r.Status != 200 {
					t.Fatalf("X-RateLimit-Remaining said %d (RateLimit %q), but call %d of them got %d: %s", n, res.Header.Get("RateLimit"), i, r.Status, r.Raw)
				}
			}
			if r := call(); r.Status != http.StatusTooManyRequests {
				t.Errorf("X-RateLimit-Remaining said %d, and call %d got %d, want 429", n, n+1, r.Status)
			}
		})
	}
}

// SetPlans (serve's SIGHUP) puts new plans in force from the next call:
// the windows and the endpoints a tier reaches follow them at once.
func TestSetPlans(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	limit := func(want, remaining string) {
		t.Helper()
		res := do(t, srv.Server, "GET", "/api/v1/markets/global", key)
		if res.Status != 200 || res.Header.Get("X-RateLimit-Limit") != want || res.Header.Get("X-RateLimit-Remaining") != remaining {
			t.Fatalf("status %d, X-RateLimit-Limit %q, Remaining %q; want 200, %s and %s", res.Status,
				res.Header.Get("X-RateLimit-Limit"), res.Header.Get("X-RateLimit-Remaining"), want, remaining)
		}
	}
	limit("5", "4") // the second window, premium's 5 a second, is the closest
	srv.SetPlans(t.Context(), plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) { p.PerSecond, p.PerMinute = 50, 600 }))
	// The call before counts as one call of the new plan (the clock
	// stands still): 48 of 50 left after this one.
	limit("50", "48")
	srv.SetPlans(t.Context(), proOnlyPlans(t))
	res := do(t, srv.Server, "GET", "/api/v1/markets/global", key)
	wantError(t, res, http.StatusForbidden, coinpulse.CodePermissionDenied)
	if !strings.Contains(res.Error.Message, "Upgrade to pro") {
		t.Errorf("message %q does not name pro", res.Error.Message)
	}
}

// countingLimiter counts the calls a limiter is asked; failPeeks makes
// that many Peeks fail first.
type countingLimiter struct {
	coinpulse.Limiter
	mu           sync.Mutex
	allow, peeks int
	failPeeks    int
}

func (c *countingLimiter) Allow(ctx context.Context, account string, l coinpulse.Limits) (coinpulse.Verdict, error) {
	c.mu.Lock()
	c.allow++
	c.mu.Unlock()
	return c.Limiter.Allow(ctx, account, l)
}

func (c *countingLimiter) Peek(ctx context.Context, account string, l coinpulse.Limits) (coinpulse.Verdict, error) {
	c.mu.Lock()
	c.peeks++
	fail := c.failPeeks > 0
	if fail {
		c.failPeeks--
	}
	c.mu.Unlock()
	if fail {
		return coinpulse.Verdict{}, errLimiterDown
	}
	return c.Limiter.Peek(ctx, account, l)
}

func (c *countingLimiter) counts() (allow, peeks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.allow, c.peeks
}

// GET /usage asks the limiter once for where the key stands (a Redis
// round trip with the Redis limiter): its body shows the windows its
// headers describe. Only when that look fails does it look again.
func TestUsageAsksTheLimiterOnce(t *testing.T) {
	t.Parallel()
	base := testServer(t)
	lim := &countingLimiter{Limiter: ratelimit.NewMemory(time.Now, nil)}
	srv := New(Config{Store: shared.store, Market: base.market, Log: quiet, Limiter: lim, Meter: &recordingMeter{}})
	u := newUser(t, coinpulse.TierFree, nil)
	live, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	sandbox, _ := newKey(t, u, coinpulse.ModeTest, rw, nil)
	type windows struct {
		Windows []struct {
			Window    string `json:"window"`
			Limit     *int64 `json:"limit"`
			Remaining *int64 `json:"remaining"`
		} `json:"windows"`
	}
	// remaining is the body's figure for the window the headers describe
	// (the windows' limits differ).
	remaining := func(res *response) string {
		t.Helper()
		for _, w := range decode[windows](t, res).Windows {
			if w.Limit != nil && fmt.Sprint(*w.Limit) == res.Header.Get("X-RateLimit-Limit") && w.Remaining != nil {
				return fmt.Sprint(*w.Remaining)
			}
		}
		return ""
	}
	for _, tc := range []struct {
		name                 string
		key                  string
		failPeeks            int
		wantAllow, wantPeeks int
	}{
		{"live key", live, 0, 1, 1},       // the /usage abuse limit, then the plan's windows
		{"sandbox key", sandbox, 0, 1, 0}, // the sandbox's windows are those its check counted in
		{"live key, first look failed", live, 1, 1, 2},
	} {
		lim.mu.Lock()
		lim.allow, lim.peeks, lim.failPeeks = 0, 0, tc.failPeeks
		lim.mu.Unlock()
		res := do(t, srv, "GET", "/api/v1/usage", tc.key)
		if res.Status != 200 {
			t.Fatalf("%s: %d %s", tc.name, res.Status, res.Raw)
		}
		if allow, peeks := lim.counts(); allow != tc.wantAllow || peeks != tc.wantPeeks {
			t.Errorf("%s: limiter asked %d Allow and %d Peek, want %d and %d", tc.name, allow, peeks, tc.wantAllow, tc.wantPeeks)
		}
		if got, want := remaining(res), res.Header.Get("X-RateLimit-Remaining"); got != want || want == "" {
			t.Errorf("%s: body's remaining %q for the headers' window, X-RateLimit-Remaining %q", tc.name, got, want)
		}
	}
}

// A HEAD is a GET without its body: authenticated, limited and counted.
func TestHeadIsCountedLikeGet(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	key, _ := newKey(t, newUser(t, coinpulse.TierFree, nil), coinpulse.ModeLive, rw, nil)
	for i, method := range []string{"GET", "HEAD", "GET"} {
		res := do(t, srv.Server, method, "/api/v1/markets/global", key)
		if res.Status != http.StatusOK || res.Header.Get("X-RateLimit-Remaining") != fmt.Sprint(4-i) {
			t.Errorf("%s, call %d: %d, X-RateLimit-Remaining %q, want 200 and %d", method, i+1, res.Status, res.Header.Get("X-RateLimit-Remaining"), 4-i)
		}
	}
	if res := do(t, srv.Server, "HEAD", "/api/v1/markets/global", ""); res.Status != http.StatusUnauthorized {
		t.Errorf("HEAD without a key: %d, want 401", res.Status)
	}
}

// A method a literal path does not serve is not a call, even where a
// wildcard route of that method would match the path.
func TestShadowedMethodIsNotACall(t *testing.T) {
	t.Parallel()
	srv := newLimitedServer(t, nil)
	key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	month := func(res *response) string {
		t.Helper()
		_, m, _ := strings.Cut(res.Header.Get("RateLimit"), `"month";`)
		if m == "" {
			t.Fatalf("no month in RateLimit %q", res.Header.Get("RateLimit"))
		}
		return strings.Split(m, ";")[0]
	}
	before := month(do(t, srv.Server, "GET", "/api/v1/markets/global", key))
	res := do(t, srv.Server, "GET", "/api/v1/portfolio/transactions", key)
	wantError(t, res, 405, coinpulse.CodeMethodNotAllowed)
	if got := month(res); got != before {
		t.Errorf("the month after the 405: %s, before %s", got, before)
	}
}
