package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
