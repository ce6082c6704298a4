package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/feed/sim"
	"coinpulse/internal/market"
	"coinpulse/internal/sqlite"
)

// The package's tests share one store and one running market engine (a
// backfill of the 1,000-coin universe takes a few seconds); each test makes
// its own users and keys.
var shared struct {
	once   sync.Once
	err    error
	dir    string
	store  *sqlite.DB
	engine *market.Engine
	srv    *Server
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		shared.store.Close()
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testServer returns the shared server over a loaded, refreshing engine.
func testServer(t *testing.T) *Server {
	t.Helper()
	shared.once.Do(func() {
		ctx := context.Background()
		shared.dir, shared.err = os.MkdirTemp("", "coinpulse-api-test-")
		if shared.err != nil {
			return
		}
		shared.store, shared.err = sqlite.Open(ctx, filepath.Join(shared.dir, "coinpulse.db"))
		if shared.err != nil {
			return
		}
		feed, err := sim.New(1, 0)
		if err != nil {
			shared.err = err
			return
		}
		shared.engine = market.New(market.Config{Feed: feed, Store: shared.store, Log: quiet, Refresh: 200 * time.Millisecond, MinMoverVolume: 50_000})
		if shared.err = shared.engine.Load(ctx); shared.err != nil {
			return
		}
		go shared.engine.Run(ctx)
		shared.srv = New(Config{Store: shared.store, Market: shared.engine, Log: quiet})
		go shared.srv.Run(ctx)
	})
	if shared.err != nil {
		t.Fatalf("test server: %v", shared.err)
	}
	return shared.srv
}

var userSeq atomic.Int64

// newUser creates a user of tier with a fresh e-mail.
func newUser(t *testing.T, tier coinpulse.Tier, expires *time.Time) *coinpulse.User {
	t.Helper()
	testServer(t)
	u := &coinpulse.User{Email: fmt.Sprintf("%s-%d@example.com", strings.ToLower(t.Name()[:min(len(t.Name()), 30)]), userSeq.Add(1)), Tier: tier, TierExpiresAt: expires}
	u.Email = strings.NewReplacer("/", "-", " ", "-").Replace(u.Email)
	if err := shared.store.CreateUser(context.Background(), u); err != nil {
		t.Fatalf("CreateUser: %v", err)
	}
	return u
}

// newKey creates a key for u and returns its plaintext and record.
func newKey(t *testing.T, u *coinpulse.User, mode coinpulse.Mode, perms coinpulse.Permissions, expires *time.Time) (string, *coinpulse.APIKey) {
	t.Helper()
	key, rec, err := coinpulse.NewAPIKey(u.ID, "test", mode, perms)
	if err != nil {
		t.Fatal(err)
	}
	rec.ExpiresAt = expires
	if err := shared.store.CreateKey(context.Background(), rec); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	return key, rec
}

var rw = coinpulse.Permissions{Read: true, Write: true}

// proKey returns a live read/write key of a pro account.
func proKey(t *testing.T) string {
	t.Helper()
	_, key := proUser(t)
	return key
}

// proUser returns a pro account and a live read/write key of it.
func proUser(t *testing.T) (*coinpulse.User, string) {
	t.Helper()
	u := newUser(t, coinpulse.TierPro, nil)
	key, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	return u, key
}

// response is a decoded envelope.
type response struct {
	Status  int
	Header  http.Header
	Raw     []byte
	Success bool            `json:"success"`
	Data    json.RawMessage `json:"data"`
	Meta    map[string]any  `json:"meta"`
	Error   struct {
		Code    string                 `json:"code"`
		Message string                 `json:"message"`
		Details []coinpulse.FieldError `json:"details"`
	} `json:"error"`
}

// do sends a request through the server's handler; headers alternate
// name, value.
func do(t *testing.T, srv *Server, method, target, key string, headers ...string) *response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return serve(t, srv, req)
}

func serve(t *testing.T, srv *Server, req *http.Request) *response {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	res := &response{Status: rec.Code, Header: rec.Header(), Raw: rec.Body.Bytes()}
	if rec.Code == http.StatusNotModified {
		if rec.Body.Len() != 0 {
			t.Errorf("%s %s: 304 with a body", req.Method, req.URL)
		}
		return res
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q, want JSON; body %s", req.Method, req.URL, ct, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), res); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v\n%s", req.Method, req.URL, err, rec.Body)
	}
	if res.Meta["request_id"] != rec.Header().Get("X-Request-Id") || rec.Header().Get("X-Request-Id") == "" {
		t.Errorf("%s %s: meta.request_id %v != X-Request-Id %q", req.Method, req.URL, res.Meta["request_id"], rec.Header().Get("X-Request-Id"))
	}
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(res.Meta["timestamp"])); err != nil {
		t.Errorf("%s %s: meta.timestamp %v: %v", req.Method, req.URL, res.Meta["timestamp"], err)
	}
	if res.Success != (rec.Code < 400) {
		t.Errorf("%s %s: success=%v with status %d", req.Method, req.URL, res.Success, rec.Code)
	}
	return res
}

// wantError checks an error response's status and code.
func wantError(t *testing.T, res *response, status int, code coinpulse.Code) {
	t.Helper()
	if res.Status != status || res.Error.Code != string(code) {
		t.Fatalf("got %d %s (%s), want %d %s\n%s", res.Status, res.Error.Code, res.Error.Message, status, code, res.Raw)
	}
	if res.Error.Message == "" {
		t.Errorf("error %s has no message", code)
	}
}

// wantField checks a 422 VALIDATION_ERROR with one detail, on field,
// whose message says part.
func wantField(t *testing.T, res *response, field, part string) {
	t.Helper()
	wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	if len(res.Error.Details) != 1 || res.Error.Details[0].Field != field || !strings.Contains(res.Error.Details[0].Message, part) {
		t.Errorf("details %+v, want one on %s saying %q", res.Error.Details, field, part)
	}
}

// decode unmarshals a response's data.
func decode[T any](t *testing.T, res *response) T {
	t.Helper()
	var v T
	if res.Status != http.StatusOK {
		t.Fatalf("status %d: %s", res.Status, res.Raw)
	}
	if err := json.Unmarshal(res.Data, &v); err != nil {
		t.Fatalf("data: %v\n%s", err, res.Data)
	}
	return v
}

// wantMetrics scrapes h's /metrics, fails t for each line fragment it
// lacks, and returns the text for further checks.
func wantMetrics(t *testing.T, h http.Handler, want ...string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text := rec.Body.String()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	return text
}
