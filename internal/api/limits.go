package api

import (
	"context"
	"errors"
	"io"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"coinpulse"
)

// Meter takes admitted calls off the request path (internal/meter).
type Meter interface {
	// Record meters a call once it is answered.
	Record(coinpulse.Call)
	// Admitted counts a call admitted to a user's plan in the month
	// starting at month (delta 1) when it is admitted, or gives it back
	// (−1) when the limiter does, so that the store knows of it before it
	// is answered (see internal/meter).
	Admitted(userID int64, month time.Time, delta int64)
}

// DefaultSandboxLimits is the abuse limit sandbox calls (and /usage) are
// held to: generous, separate from the account's allowance, never monthly.
var DefaultSandboxLimits = coinpulse.Limits{PerSecond: 50, PerMinute: 3000, Monthly: coinpulse.Unlimited}

// windowSeconds is each window's length in the RateLimit-Policy header; the
// month's is its current length.
func windowSeconds(w coinpulse.Window, now time.Time) int64 {
	switch w {
	case coinpulse.WindowSecond:
		return 1
	case coinpulse.WindowMinute:
		return 60
	}
	return monthSeconds(now)
}

// monthSpan is a calendar month in Unix seconds, and its length.
type monthSpan struct{ start, end int64 }

// lastMonth caches the month monthSeconds last computed: every keyed call
// asks, and the calendar arithmetic was a third of setRateHeaders in a
// CPU profile under load.
var lastMonth atomic.Pointer[monthSpan]

// monthOf returns now's calendar month (UTC).
func monthOf(now time.Time) *monthSpan {
	u := now.Unix()
	if m := lastMonth.Load(); m != nil && u >= m.start && u < m.end {
		return m
	}
	start := coinpulse.MonthStart(now)
	m := &monthSpan{start: start.Unix(), end: start.AddDate(0, 1, 0).Unix()}
	lastMonth.Store(m)
	return m
}

// monthSeconds is the length in seconds of now's calendar month (UTC).
func monthSeconds(now time.Time) int64 {
	m := monthOf(now)
	return m.end - m.start
}

// admittedToPlan counts with the meter a call of p admitted at at to its
// plan (delta 1), or given back (−1).
func (s *Server) admittedToPlan(p *principal, at time.Time, delta int64) {
	if s.meterer != nil {
		s.meterer.Admitted(p.user.ID, time.Unix(monthOf(at).start, 0), delta)
	}
}

// limiterLogEvery is how often at most a node logs about its limiter's
// failures.
const limiterLogEvery = 10 * time.Second

// processStart is when the process started.
var processStart = time.Now()

// sinceStart is the time since processStart, in ns, by the monotonic
// clock (a wall clock stepped back would silence limiterFailed), plus one:
// never 0, which limiterLogged keeps for "never".
func sinceStart() int64 { return int64(time.Since(processStart)) + 1 }

// limiterFailed logs a failed limiter check at WARN, at most once every
// limiterLogEvery, with the failures since the last such line: while
// Redis stalls or refuses, every keyed call is a 503, which is not the
// server's error and was not logged at all, and one line a call would
// flood the log. limiterBack reports the failures after the last line
// once a check succeeds again.
func (s *Server) limiterFailed(err error) {
	s.limiterFails.Add(1)
	if s.limiterLogTurn() {
		s.log.Warn("rate limits cannot be checked: keyed calls answer 503 SERVICE_UNAVAILABLE", "err", err, "failures", s.limiterFails.Swap(0))
	}
}

// limiterBack logs, after a successful check, the failures no line has
// told of yet (an outage's last seconds), at INFO and at most once every
// limiterLogEvery as well.
func (s *Server) limiterBack() {
	if s.limiterLogTurn() {
		if n := s.limiterFails.Swap(0); n > 0 {
			s.log.Info("rate limits are checked again", "failures", n)
		}
	}
}

// limiterLogTurn reports whether the caller may log about the limiter
// now, and if so takes the turn.
func (s *Server) limiterLogTurn() bool {
	now := sinceStart()
	last := s.limiterLogged.Load()
	if last != 0 && now-last < int64(limiterLogEvery) {
		return false
	}
	return s.limiterLogged.CompareAndSwap(last, now)
}

// limit holds a keyed call to its account's limits: the plan's allowance
// for live keys, the abuse limit for sandbox keys and free routes. It sets
// the rate-limit headers, and refuses with RATE_LIMIT_EXCEEDED.
func (s *Server) limit(e *exchange, r *http.Request, rt Route) error {
	if s.limiter == nil {
		return nil
	}
	account, limits := s.limitsOf(e.principal, rt)
	asked := s.clock() // the headers are as of then, or a little later
	v, err := s.limiter.Allow(r.Context(), account, limits)
	if err != nil {
		if r.Context().Err() == nil { // not a client that went away
			s.limiterFailed(err)
		}
		e.Header().Set("Retry-After", "1")
		return &coinpulse.Error{Code: coinpulse.CodeUnavailable, Message: "Rate limits cannot be checked right now; retry in a second.", Err: err}
	}
	if s.limiterFails.Load() != 0 {
		s.limiterBack()
	}
	now := s.decidedAt(&v)
	if v.Allowed && rt.Free && e.principal.key.Mode == coinpulse.ModeLive {
		// A live key's free call passed its abuse limit: its headers,
		// as every other answer's, say where the key stands in its plan
		// (see peekHeaders).
		s.peekHeaders(e, r)
	} else {
		setRateHeaders(e.Header(), &v, now)
		e.looked(s, r, asked)
		if v.Allowed && rt.Free {
			sv := v // its own variable: v stays on the stack of every other call
			e.standing = &sv
		}
	}
	if v.Allowed {
		e.admission = v.Admission()
		e.admission.At = now
		if account == e.principal.live {
			s.admittedToPlan(e.principal, now, 1)
		}
	} else {
		secs := int64((v.RetryAfter + time.Second - 1) / time.Second)
		e.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		when := "in " + v.RetryAfter.Round(time.Millisecond).String()
		if v.Exceeded == coinpulse.WindowMonth {
			when = "after " + now.Add(v.RetryAfter).UTC().Format(time.RFC3339)
		}
		return coinpulse.Errorf(coinpulse.CodeRateLimitExceeded, "%s; retry %s.", exceededMessage(v.Exceeded, limits, e.principal, account), when)
	}
	return nil
}

// limitsOf names the account and limits a call of p to rt is held to:
// the plan's allowance for live keys, the abuse limit for sandbox keys
// and free routes. A live key's free calls have their own abuse limit,
// so that a busy sandbox does not lock the account out of /usage.
func (s *Server) limitsOf(p *principal, rt Route) (string, coinpulse.Limits) {
	switch {
	case p.key.Mode == coinpulse.ModeTest:
		return p.sandbox, s.sandboxLimits
	case rt.Free:
		return p.free, s.sandboxLimits
	}
	return p.live, s.planMap()[p.user.Tier].Limits()
}

// peekHeaders sets the rate-limit headers that say where the key stands,
// without counting a call: the windows of its plan for a live key, even
// on a free route (whose own abuse limit shows only in the 429 it refuses
// with), of the sandbox for a sandbox key. For an authenticated call
// refused before its limits were checked, a free call, a refund.
func (s *Server) peekHeaders(e *exchange, r *http.Request) bool {
	if s.limiter == nil {
		return false
	}
	account, limits := s.limitsOf(e.principal, Route{})
	asked := s.clock()
	v, err := s.limiter.Peek(r.Context(), account, limits)
	if err != nil {
		return false
	}
	s.setStandingHeaders(e.Header(), e.principal, &v)
	e.standing = &v
	e.looked(s, r, asked)
	return true
}

// setStandingHeaders describes v, a Peek of p's standing account. A live
// key of a plan without API access has a month of no calls, which the
// limiter, never asked to count one, does not know of.
func (s *Server) setStandingHeaders(h http.Header, p *principal, v *coinpulse.Verdict) {
	now := s.decidedAt(v)
	if p.key.Mode == coinpulse.ModeLive && s.planMap()[p.user.Tier].Endpoints == coinpulse.EndpointsNone {
		setNoAccessHeaders(h, v, now)
		return
	}
	setRateHeaders(h, v, now)
}

// setNoAccessHeaders describes a month that allows no call, as the
// window closest to exhaustion, next to v's other windows in
// RateLimit-Policy.
func setNoAccessHeaders(h http.Header, v *coinpulse.Verdict, now time.Time) {
	month := coinpulse.WindowState{Window: coinpulse.WindowMonth, Reset: coinpulse.MonthStart(now.UTC()).AddDate(0, 1, 0)}
	var b strings.Builder
	all := make([]coinpulse.WindowState, 0, len(v.Windows))
	for _, x := range v.Windows {
		if x.Limit > 0 && x.Window != coinpulse.WindowMonth {
			writePolicy(&b, x.Window, x.Limit, now)
			all = append(all, x)
		}
	}
	writePolicy(&b, coinpulse.WindowMonth, 0, now)
	setWindowHeaders(h, &month, append(all, month), now)
	h["Ratelimit-Policy"] = []string{b.String()}
}

// decidedAt is when the limiter decided v, by its clock: the headers'
// seconds until a reset then count from the instant the windows were
// measured at, even on a node whose clock is off from Redis's. It is the
// server's clock for a limiter that does not say.
func (s *Server) decidedAt(v *coinpulse.Verdict) time.Time {
	if v.Now.IsZero() {
		return s.clock()
	}
	return v.Now
}

// exceededMessage names the window w of account that refused a call of p.
func exceededMessage(w coinpulse.Window, l coinpulse.Limits, p *principal, account string) string {
	if w == coinpulse.WindowMonth {
		return "Your plan's monthly allowance of " + strconv.FormatInt(l.Monthly, 10) + " calls is used up (it renews at 00:00 UTC on the 1st; upgrade at /user/api)"
	}
	n, per := l.PerSecond, "second"
	if w == coinpulse.WindowMinute {
		n, per = l.PerMinute, "minute"
	}
	switch account {
	case p.sandbox:
		return "The abuse limit of sandbox calls (" + strconv.Itoa(n) + " calls per " + per + ") is reached"
	case p.free:
		return "The abuse limit of /usage (" + strconv.Itoa(n) + " calls per " + per + ") is reached"
	}
	return "Your plan's limit of " + strconv.Itoa(n) + " calls per " + per + " is reached"
}

// closest returns the limited window nearest exhaustion, false when none
// limits: the one with the fewest calls left, since a call must pass
// every window, so that X-RateLimit-Remaining never promises a call
// another window would refuse. On a tie, the smaller share left, then the
// longer window: the one that is whole again last.
func closest(v *coinpulse.Verdict) (coinpulse.WindowState, bool) {
	var best coinpulse.WindowState
	found := false
	for _, w := range v.Windows {
		if w.Limit <= 0 {
			continue
		}
		if !found || w.Remaining < best.Remaining ||
			w.Remaining == best.Remaining && shareAtMost(w.Remaining, w.Limit, best.Remaining, best.Limit) {
			best, found = w, true
		}
	}
	return best, found
}

// shareAtMost reports whether a/b <= c/d, for a, c >= 0 and b, d > 0. It
// compares the cross products in 128 bits, which no plan's figures
// overflow.
func shareAtMost(a, b, c, d int64) bool {
	hi1, lo1 := bits.Mul64(uint64(max(a, 0)), uint64(d))
	hi2, lo2 := bits.Mul64(uint64(max(c, 0)), uint64(b))
	return hi1 < hi2 || hi1 == hi2 && lo1 <= lo2
}

// setRateHeaders describes v: X-RateLimit-* for the window closest to
// exhaustion, the IETF RateLimit and RateLimit-Policy for every window
// that limits. It runs on every keyed call, so the values that repeat come
// from caches.
func setRateHeaders(h http.Header, v *coinpulse.Verdict, now time.Time) {
	w, ok := closest(v)
	if !ok {
		return
	}
	var limited [3]coinpulse.WindowState
	n := 0
	for _, x := range v.Windows {
		if x.Limit > 0 {
			limited[n] = x
			n++
		}
	}
	setWindowHeaders(h, &w, limited[:n], now)
	h["Ratelimit-Policy"] = policyValue(v, now)
}

// setWindowHeaders sets X-RateLimit-* to describe the window w as of now,
// and the IETF RateLimit to describe each of all, in their order:
// "<window>";r=<remaining>;t=<seconds until it is whole again>.
func setWindowHeaders(h http.Header, w *coinpulse.WindowState, all []coinpulse.WindowState, now time.Time) {
	resetAt := w.Reset.Unix()
	switch {
	case !w.Reset.After(now):
		resetAt = now.Unix() // whole already
	case w.Reset.After(time.Unix(resetAt, 0)):
		resetAt++ // round up: a client that waits until then finds the window whole
	}
	// The four values that change from call to call share one string and
	// one backing array: two allocations a call.
	var buf [192]byte
	b := buf[:0]
	var ends [4]int
	for i, n := range [3]int64{w.Limit, w.Remaining, resetAt} {
		b = strconv.AppendInt(b, n, 10)
		ends[i] = len(b)
	}
	for i := range all {
		x := &all[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, x.Window...)
		b = append(b, `";r=`...)
		b = strconv.AppendInt(b, x.Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, max(0, int64(x.Reset.Sub(now)+time.Second-1)/int64(time.Second)), 10)
	}
	ends[3] = len(b)
	str, vals := string(b), new([4]string)
	vals[0], vals[1], vals[2], vals[3] = str[:ends[0]], str[ends[0]:ends[1]], str[ends[1]:ends[2]], str[ends[2]:]
	h["X-Ratelimit-Limit"] = vals[0:1:1]
	h["X-Ratelimit-Remaining"] = vals[1:2:2]
	h["X-Ratelimit-Reset"] = vals[2:3:3]
	h["Ratelimit"] = vals[3:4:4]
}

// policyKey is what a RateLimit-Policy value depends on.
type policyKey struct {
	limits [3]int64
	month  int64
}

// policies caches RateLimit-Policy values: there are a few per plan.
var policies sync.Map // policyKey → []string

func policyValue(v *coinpulse.Verdict, now time.Time) []string {
	k := policyKey{month: windowSeconds(coinpulse.WindowMonth, now)}
	for i, x := range v.Windows {
		k.limits[i] = x.Limit
	}
	if p, ok := policies.Load(k); ok {
		return p.([]string)
	}
	var b strings.Builder
	for _, x := range v.Windows {
		if x.Limit > 0 {
			writePolicy(&b, x.Window, x.Limit, now)
		}
	}
	p := []string{b.String()}
	policies.Store(k, p)
	return p
}

// writePolicy appends window w with allowance q to a RateLimit-Policy
// value: "<window>";q=<allowance>;w=<seconds>, comma-separated.
func writePolicy(b *strings.Builder, w coinpulse.Window, q int64, now time.Time) {
	if b.Len() > 0 {
		b.WriteString(", ")
	}
	b.WriteString(`"` + string(w) + `";q=` + strconv.FormatInt(q, 10) + ";w=" + strconv.FormatInt(windowSeconds(w, now), 10))
}

// The failures a sandbox key may ask for with X-Sandbox-Simulate.
const (
	simulateRateLimit   = "rate_limit"
	simulateServerError = "server_error"
	simulateTimeout     = "timeout"
)

// errSimulated marks a simulated SERVER_ERROR, which is not logged as a
// failure.
var errSimulated = errors.New("simulated server error (X-Sandbox-Simulate)")

// simulateTimeoutFor is how long a simulated timeout holds the request
// before answering 503 (unless the client gives up first).
var simulateTimeoutFor = 30 * time.Second

// simulate answers X-Sandbox-Simulate. Only sandbox keys may send it; the
// header names the failure to act out instead of the real answer.
func (s *Server) simulate(e *exchange, r *http.Request) error {
	what, ok := r.Header["X-Sandbox-Simulate"]
	if !ok {
		return nil
	}
	if e.principal.key.Mode != coinpulse.ModeTest {
		return coinpulse.ValidationError("X-Sandbox-Simulate", "only sandbox (sk_test_) keys may simulate failures")
	}
	if len(what) > 1 || strings.Contains(what[0], ",") {
		return coinpulse.ValidationError("X-Sandbox-Simulate", "is given more than once; send one failure to simulate")
	}
	switch how := strings.TrimSpace(what[0]); how {
	case simulateRateLimit:
		e.simulated = how
		s.simulatedRefusal(e, r)
		e.Header().Set("Retry-After", "1")
		return coinpulse.Errorf(coinpulse.CodeRateLimitExceeded, "Simulated: the limit of calls per second is reached (X-Sandbox-Simulate: rate_limit); retry in 1s.")
	case simulateServerError:
		e.simulated = how
		return &coinpulse.Error{Code: coinpulse.CodeServerError, Message: "Simulated.", Err: errSimulated}
	case simulateTimeout:
		e.simulated = how
		// net/http notices a client that hangs up only once the request's
		// body is read (it is capped at --max-body and given 30 s).
		_, _ = io.Copy(io.Discard, r.Body)
		t := time.NewTimer(simulateTimeoutFor)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return coinpulse.Errorf(coinpulse.CodeUnavailable, "Simulated: the request timed out (X-Sandbox-Simulate: timeout); the client hung up first.")
		case <-s.stopping:
			// A graceful shutdown does not wait out the simulation.
			s.peekHeaders(e, r) // where the key stands now, not at its check
			e.Header().Set("Retry-After", "1")
			return coinpulse.Errorf(coinpulse.CodeUnavailable, "Simulated: the request timed out (X-Sandbox-Simulate: timeout), cut short because the server is shutting down.")
		}
		s.peekHeaders(e, r)
		e.Header().Set("Retry-After", "1")
		return coinpulse.Errorf(coinpulse.CodeUnavailable, "Simulated: the request timed out after %s (X-Sandbox-Simulate: timeout).", simulateTimeoutFor)
	}
	return coinpulse.ValidationError("X-Sandbox-Simulate", "must be one of rate_limit, server_error, timeout")
}

// simulatedRefusal sets the rate-limit headers a real refusal by the
// sandbox's second window would carry: its windows as they stand, the
// second with nothing left and whole again in a second. With limits off
// there are none, as on every other answer.
func (s *Server) simulatedRefusal(e *exchange, r *http.Request) {
	if s.limiter == nil {
		return
	}
	v, err := s.limiter.Peek(r.Context(), e.principal.sandbox, s.sandboxLimits)
	if err != nil {
		// No headers rather than the check's, which show calls left.
		for _, k := range rateLimitKeys {
			delete(e.Header(), k)
		}
		return
	}
	now := s.decidedAt(&v)
	for i := range v.Windows {
		if v.Windows[i].Window == coinpulse.WindowSecond {
			v.Windows[i].Remaining, v.Windows[i].Reset = 0, now.Add(time.Second)
		}
	}
	setRateHeaders(e.Header(), &v, now)
}

// giveBack gives a live call that failed on our side (5xx) back to the
// plan's windows: it does not count. It runs once a call, before the
// answer is written when it can, so that the answer's headers show the
// call given back. The sandbox abuse limit gets nothing back, so that
// failing calls, simulated or not, stay limited.
func (s *Server) giveBack(e *exchange, r *http.Request, rt Route) {
	p := e.principal
	if p == nil || !e.admitted || e.refunded || s.limiter == nil || p.key.Mode != coinpulse.ModeLive || rt.Free {
		return
	}
	e.refunded = true
	_, limits := s.limitsOf(p, rt)
	if err := s.limiter.Refund(context.WithoutCancel(r.Context()), p.live, limits, e.admission); err != nil {
		s.log.Warn("rate limit refund failed", "err", err, "request_id", e.id)
		return
	}
	s.admittedToPlan(p, e.admission.At, -1)
	if !e.wrote {
		s.peekHeaders(e, r)
	}
}

// meter records an admitted call at the instant it was admitted, on the
// limiter's clock (so a call is in the month and day the limiter counted
// it in), and gives a live call that failed on our side (5xx) back to the
// plan's windows if the answer did not already. It records a call once:
// a WebSocket's is recorded when the connection is admitted, and its end
// records nothing more.
func (s *Server) meter(e *exchange, r *http.Request, rt Route, label string, took time.Duration) {
	if e.principal == nil || !e.admitted || e.metered {
		return
	}
	e.metered = true
	p := e.principal
	plan := p.key.Mode == coinpulse.ModeLive && !rt.Free
	if e.status >= 500 {
		s.giveBack(e, r, rt)
	}
	if s.meterer == nil {
		return
	}
	at := e.admission.At
	if at.IsZero() {
		at = s.clock()
	}
	s.meterer.Record(coinpulse.Call{
		UserID: p.user.ID, KeyID: p.key.ID, Mode: p.key.Mode, Time: at,
		Method: r.Method, Route: label, Status: e.status, Duration: took, RequestID: e.id,
		Counted: plan && e.status < 500,
	})
}
