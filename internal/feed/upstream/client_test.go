package upstream

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"coinpulse/internal/testlog"
)

// A Retry-After past any sense waits 5 minutes, not a negative time.
func TestRetryAfterBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "10000000000")
		w.WriteHeader(429)
	}))
	defer srv.Close()
	c := New(Config{HTTP: srv.Client()})
	if _, wait, err := c.do(context.Background(), srv.URL); err == nil || wait != 5*time.Minute {
		t.Errorf("%v %v", wait, err)
	}
}

// A 418 (banned) is not retried, and holds every call until it ends.
func TestBanHoldsCalls(t *testing.T) {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Retry-After", "7200")
		w.WriteHeader(418)
	}))
	defer srv.Close()
	c := New(Config{BaseURL: srv.URL, HTTP: srv.Client(), CallsPerMinute: 60000, RetryBase: time.Millisecond})
	if _, err := c.Get(context.Background(), "/x", nil); err == nil || calls != 1 {
		t.Fatalf("%v after %d calls", err, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, "/x", nil); err != context.DeadlineExceeded || calls != 1 {
		t.Errorf("a call during the ban: %v, %d calls", err, calls)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if wait := time.Until(c.next); wait < 119*time.Minute {
		t.Errorf("held for %s, want the 2 hours asked", wait)
	}
}

// A call that fails and is retried is logged once, at its first failure,
// with how long its retries may take (an audit: a wrong --coingecko-url
// was silent for the 62 s of a call's retries at start); a 429 says so
// in a line of its own.
func TestRetriedCallLoggedOnce(t *testing.T) {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(503)
	}))
	defer srv.Close()
	var logs testlog.Buffer
	c := New(Config{Name: "api", BaseURL: srv.URL, HTTP: srv.Client(), CallsPerMinute: 60000, RetryBase: time.Millisecond, Attempts: 4,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if _, err := c.Get(context.Background(), "/x", nil); err == nil || calls != 4 {
		t.Fatalf("%v after %d calls", err, calls)
	}
	if n := logs.Count("a call failed; retrying"); n != 1 || !strings.Contains(logs.String(), "path=/x") || !strings.Contains(logs.String(), "retries=3 pauses=7ms") {
		t.Errorf("%d lines, want one naming the path, the 3 retries and their 7 ms:\n%s", n, logs.String())
	}
	if got := (&Client{retryBase: 2 * time.Second, attempts: 6}).retrySpan(0); got != 62*time.Second {
		t.Errorf("the default retries take %s, want 62s", got)
	}
}
