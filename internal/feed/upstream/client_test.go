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
