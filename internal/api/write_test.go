package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/meter"
	"coinpulse/internal/ratelimit"
	"coinpulse/internal/testlog"
)

// The write timeout (Config.WriteTimeout, serve's --write-timeout), through
// a real HTTP server whose connections have small send buffers, so that
// an answer waits for its client after a few KiB, and real clients.

// writeServer serves a server with write timeout d, metered (so that
// Drain sees its calls), as serve does: the http.Server has the same
// WriteTimeout. opts change the server's Config.
func writeServer(t *testing.T, d time.Duration, opts ...func(*Config)) (*Server, *httptest.Server) {
	t.Helper()
	base := testServer(t)
	m := meter.New(shared.store, quiet, meter.Options{Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	go m.Run(ctx)
	cfg := Config{Store: shared.store, Market: base.market, Log: quiet, Meter: m, WriteTimeout: d}
	for _, o := range opts {
		o(&cfg)
	}
	srv := New(cfg)
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.WriteTimeout = d
	ts.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.(*net.TCPConn).SetWriteBuffer(8 << 10)
		}
	}
	ts.Start()
	t.Cleanup(func() {
		srv.hub.Close()
		ts.Close()
		m.Close(context.Background())
		cancel()
	})
	return srv, ts
}

// dialSmall connects to ts with a small receive buffer (when small), and
// a deadline that fails the test rather than hangs it.
func dialSmall(t *testing.T, ts *httptest.Server, small bool) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if small {
		c.(*net.TCPConn).SetReadBuffer(4 << 10)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReaderSize(c, 2<<10)
}

// wantWhole checks that res (read with err) is a whole answer with
// status, and the error code if code is not "".
func wantWhole(t *testing.T, res *http.Response, err error, status int, code coinpulse.Code) {
	t.Helper()
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != status || code != "" && !strings.Contains(string(raw), `"`+string(code)+`"`) {
		t.Fatalf("%d %s (%v), want %d %s", res.StatusCode, raw, err, status, code)
	}
}

// postAfterContinue creates a portfolio on c with key, sending the body
// only after the server's "100 Continue", and returns the answer.
func postAfterContinue(t *testing.T, c net.Conn, br *bufio.Reader, key string) (*http.Response, error) {
	t.Helper()
	const body = `{"name":"after 100 Continue"}`
	fmt.Fprintf(c, "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", key, len(body))
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusContinue {
		t.Fatalf("waiting for 100 Continue: %v %v", res, err)
	}
	fmt.Fprint(c, body)
	return http.ReadResponse(br, nil)
}

// A client that asks for a large answer and stops reading it is cut off
// once the write timeout passes without progress: its call ends (and is
// metered), rather than hold its handler for as long as the connection
// lives. Before the write timeout, Drain waited for it without end.
func TestWriteTimeoutCutsOffAStalledReader(t *testing.T) {
	const d = 300 * time.Millisecond
	var log testlog.Buffer
	srv, ts := writeServer(t, d, func(c *Config) {
		c.Log = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	c, br := dialSmall(t, ts, true)
	fmt.Fprintf(c, "GET /api/v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n") // 425 KB

	for wait := time.Now(); srv.running.Load() == 0; time.Sleep(time.Millisecond) { // the call has started
		if time.Since(wait) > 10*time.Second {
			t.Fatal("the call did not start")
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Drain(ctx); err != nil {
		t.Fatalf("a client that stopped reading still holds its call: %v", err)
	}
	if took := time.Since(start); took < d/2 {
		t.Errorf("the call ended %v after it started, before the client could be slow", took)
	}
	// A client that stopped reading is no server error.
	if l := log.String(); !strings.Contains(l, "level=DEBUG msg=\"answer cut short") || strings.Contains(l, "level=ERROR") {
		t.Errorf("the cut-off call's log:\n%s", l)
	}

	// What was sent before the cut-off is there to read, then the
	// connection ends short of the answer.
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the answer's head: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	if n, err := io.Copy(io.Discard, res.Body); err == nil {
		t.Errorf("the whole answer (%d bytes) arrived after the cut-off", n)
	}
}

// A client that reads a large answer slowly but steadily, here 2 KiB
// every 10 ms, gets it whole, though it takes some 2 s with a write
// timeout of 1 s: every 64 KiB renews the deadline.
func TestWriteTimeoutLetsASteadyReaderFinish(t *testing.T) {
	const d = time.Second
	_, ts := writeServer(t, d)
	c, br := dialSmall(t, ts, false)
	fmt.Fprintf(c, "GET /api/v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
	start := time.Now()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got int
	buf := make([]byte, 2<<10)
	for {
		n, err := io.ReadFull(res.Body, buf)
		got += n
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes in %v: %v", got, time.Since(start), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got != len(openapiJSON) {
		t.Fatalf("got %d of %d bytes in %v", got, len(openapiJSON), time.Since(start))
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("read in %v: the test means to read for longer than twice the write timeout", took)
	}
}

// An answer that begins long after its request, here a simulated timeout
// that holds the call for three times the write timeout, is not cut short
// for it: the deadline is renewed as the answer begins.
func TestWriteTimeoutStartsAgainWithALateAnswer(t *testing.T) {
	const d = 300 * time.Millisecond
	old := simulateTimeoutFor
	simulateTimeoutFor = 3 * d
	t.Cleanup(func() { simulateTimeoutFor = old })
	_, ts := writeServer(t, d)
	sandbox, _ := newKey(t, newUser(t, coinpulse.TierPro, nil), coinpulse.ModeTest, rw, nil)
	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/markets?per_page=250", nil)
	req.Header.Set("Authorization", "Bearer "+sandbox)
	req.Header.Set("X-Sandbox-Simulate", "timeout")
	res, err := ts.Client().Do(req)
	wantWhole(t, res, err, http.StatusServiceUnavailable, coinpulse.CodeUnavailable)
}

// A keep-alive connection idle for longer than the write timeout serves
// its next request, one that waits for 100 Continue among them: the
// deadline the answer before renewed does not carry over. (net/http
// clears it after each answer: this guards what the server relies on.)
func TestWriteTimeoutDoesNotOutliveTheAnswer(t *testing.T) {
	const d = 300 * time.Millisecond
	_, ts := writeServer(t, d)
	key := proKey(t)
	c, br := dialSmall(t, ts, false)
	fmt.Fprintf(c, "GET /api/v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n") // its deadline renewed on the way
	res, err := http.ReadResponse(br, nil)
	wantWhole(t, res, err, http.StatusOK, "")

	time.Sleep(3 * d)
	res, err = postAfterContinue(t, c, br, key)
	wantWhole(t, res, err, http.StatusCreated, "")
}

// A WebSocket outlives the write timeout of its upgrade request. (net/http
// hands a hijacked connection over without a deadline, and the stream
// bounds its own writes: this guards what the server relies on.)
func TestWriteTimeoutLeavesAWebSocketAlone(t *testing.T) {
	const d = 300 * time.Millisecond
	_, ts := writeServer(t, d)
	key, _ := newKey(t, newUser(t, coinpulse.TierPremium, nil), coinpulse.ModeLive, rw, nil)
	c := mustDialWS(t, "ws"+strings.TrimPrefix(ts.URL, "http")+"/api/v1/ws", key)
	c.expect("welcome")
	time.Sleep(3 * d)
	c.send(`{"type":"ping","id":"late"}`)
	for {
		m, err := c.read()
		if err != nil {
			t.Fatalf("the stream ended after the write timeout: %v", err)
		}
		if m["type"] == "pong" {
			break
		}
	}
}

// An answer given before the request's body has arrived (here a 401 for
// a bad key) reaches a client that sends its body slowly: net/http reads
// what is left of the body before it writes the answer's head, so the
// answer's write timeout counts from the body's deadline. (The answer was
// lost when it counted from the answer's start; found by a review.)
func TestWriteTimeoutWaitsForTheBodyOfAnEarlyAnswer(t *testing.T) {
	const d = 500 * time.Millisecond
	_, ts := writeServer(t, d, func(c *Config) { c.BodyTimeout = 10 * time.Second })
	c, br := dialSmall(t, ts, false)
	const body = `{"name":"slowly..."}`
	fmt.Fprintf(c, "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_live_nope\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	go func() {
		for i := range len(body) { // 2 s, four times the write timeout
			time.Sleep(100 * time.Millisecond)
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	res, err := http.ReadResponse(br, nil)
	wantWhole(t, res, err, http.StatusUnauthorized, coinpulse.CodeInvalidAPIKey)
}

// slowLimiter takes delay to admit each call, as a limiter on a slow
// network might.
type slowLimiter struct {
	coinpulse.Limiter
	delay time.Duration
}

func (l slowLimiter) Allow(ctx context.Context, account string, lim coinpulse.Limits) (coinpulse.Verdict, error) {
	time.Sleep(l.delay)
	return l.Limiter.Allow(ctx, account, lim)
}

// A client that waits for "100 Continue" before it sends its body gets it
// after an admission that took longer than the write timeout: the first
// read of the body renews the deadline that net/http writes it under.
// (The connection failed, and the call with it; found by a review.)
func TestWriteTimeoutLetsA100ContinueFollowASlowAdmission(t *testing.T) {
	const d = 500 * time.Millisecond
	_, ts := writeServer(t, d, func(c *Config) {
		c.Limiter = slowLimiter{Limiter: ratelimit.NewMemory(time.Now, nil), delay: 3 * d}
	})
	key := proKey(t)
	c, br := dialSmall(t, ts, false)
	res, err := postAfterContinue(t, c, br, key)
	wantWhole(t, res, err, http.StatusCreated, "")
}

// An early refusal of a request whose body has not come (a bad key, a
// declared body over the limit, a body that runs over it as it comes)
// is answered at once, not when the body's deadline has passed: net/http
// sees the request's own body, and closes the connection rather than
// wait for what it never asked for (a "100 Continue" not sent) or what
// is too much. (Each took the whole body timeout; found by a review.)
func TestEarlyRefusalsDoNotWaitForTheBody(t *testing.T) {
	_, ts := writeServer(t, DefaultWriteTimeout, func(c *Config) { c.BodyTimeout = time.Minute })
	key := proKey(t)
	for _, c := range []struct {
		name, head string
		status     int
		code       coinpulse.Code
	}{
		{"bad key, 100-continue", "Authorization: Bearer sk_live_nope\r\nContent-Length: 20\r\nExpect: 100-continue\r\n",
			http.StatusUnauthorized, coinpulse.CodeInvalidAPIKey},
		{"declared too large", "Authorization: Bearer " + key + "\r\nContent-Length: 10000000\r\n",
			http.StatusRequestEntityTooLarge, coinpulse.CodePayloadTooLarge},
		{"declared too large, 100-continue", "Authorization: Bearer " + key + "\r\nContent-Length: 10000000\r\nExpect: 100-continue\r\n",
			http.StatusRequestEntityTooLarge, coinpulse.CodePayloadTooLarge},
		{"too large as it comes", "Authorization: Bearer " + key + "\r\nTransfer-Encoding: chunked\r\n\r\n11800\r\n" + strings.Repeat("x", 70<<10) + "\r\n",
			http.StatusRequestEntityTooLarge, coinpulse.CodePayloadTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, br := dialSmall(t, ts, false)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // the body's deadline is a minute away
			head := "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + c.head
			if !strings.Contains(c.head, "chunked") {
				head += "\r\n"
			}
			fmt.Fprint(conn, head) // and no more
			res, err := http.ReadResponse(br, nil)
			wantWhole(t, res, err, c.status, c.code)
		})
	}
}

// An informational status before the answer (103 Early Hints) does not
// begin it: the answer's own status is the one recorded, and the write
// deadline's renewal waits for it.
func TestInformationalStatusDoesNotBeginTheAnswer(t *testing.T) {
	rec := httptest.NewRecorder()
	e := &exchange{ResponseWriter: rec, status: http.StatusOK}
	e.WriteHeader(http.StatusEarlyHints)
	if e.wrote {
		t.Fatal("a 103 began the answer")
	}
	e.WriteHeader(http.StatusCreated)
	if !e.wrote || e.status != http.StatusCreated {
		t.Fatalf("after 103 then 201: wrote %v, status %d", e.wrote, e.status)
	}
}
