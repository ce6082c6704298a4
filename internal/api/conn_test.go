package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"coinpulse"
)

// envelopeServer returns a server like serve's: the API's handler on a
// listener from Server.Listener.
func envelopeServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := testServer(t)
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Listener = srv.Listener(hs.Listener)
	hs.Start()
	t.Cleanup(hs.Close)
	return hs
}

// plain returns net/http's plain-text form of an answer of its own: status
// line, the fixed header fields, body.
func plain(line, body string) string {
	return "HTTP/1.1 " + line + "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" + body
}

// rawExchange sends raw bytes on a new connection and reads one answer,
// which must be the last: the connection then ends, nothing after it.
func rawExchange(t *testing.T, hs *httptest.Server, method, raw string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(c, raw) // a 431 is answered before all of it is read
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%.60q: no answer: %v", raw, err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%.60q: reading the body: %v", raw, err)
	}
	if more, err := io.ReadAll(br); len(more) > 0 || err != nil {
		t.Fatalf("%.60q: after the answer: %q (%v)", raw, more, err)
	}
	return res, body
}

// The answers net/http gives before any handler sees the request are in the
// error envelope, with the code of their status, a request id in the header
// and in meta, and Connection: close.
func TestHTTPServerErrorsInTheEnvelope(t *testing.T) {
	hs := envelopeServer(t)
	big := strings.Repeat("a", 1<<20+8192)
	for _, tc := range []struct {
		name, method, raw string
		code              coinpulse.Code
		message           string
	}{
		{"a header field without a colon", "GET", "GET /api/v1/markets HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n", coinpulse.CodeMalformedRequest, "its request line or a header field cannot be read"},
		{"a request line that is not one", "GET", "GARBAGE\r\n\r\n", coinpulse.CodeMalformedRequest, "cannot be read"},
		{"no Host", "GET", "GET /api/v1/markets HTTP/1.1\r\n\r\n", coinpulse.CodeMalformedRequest, "missing required Host header."},
		{"a malformed Host", "GET", "GET /api/v1/markets HTTP/1.1\r\nHost: a b\r\n\r\n", coinpulse.CodeMalformedRequest, "malformed Host header."},
		{"two Content-Lengths", "POST", "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", coinpulse.CodeMalformedRequest, "cannot be read"},
		{"headers over 1 MB", "GET", "GET /api/v1/markets HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", coinpulse.CodeHeadersTooLarge, "too large"},
		{"an unsupported transfer coding", "POST", "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", coinpulse.CodeNotImplemented, "Transfer-Encoding"},
		{"HTTP/3.0", "GET", "GET /api/v1/markets HTTP/3.0\r\nHost: x\r\n\r\n", coinpulse.CodeHTTPVersion, "HTTP/1.x"},
		{"an Expect other than 100-continue", "GET", "GET /api/v1/markets HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n", coinpulse.CodeExpectationFailed, "100-continue"},
		{"the same, by HEAD", "HEAD", "HEAD /api/v1/markets HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n", coinpulse.CodeExpectationFailed, ""},
		{"the same, in HTTP/1.0", "GET", "GET /api/v1/markets HTTP/1.0\r\nExpect: teapot\r\n\r\n", coinpulse.CodeExpectationFailed, "100-continue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := rawExchange(t, hs, tc.method, tc.raw)
			if res.StatusCode != tc.code.Status() {
				t.Fatalf("status %d, want %d; body %q", res.StatusCode, tc.code.Status(), body)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			if !res.Close {
				t.Error("the answer does not close the connection")
			}
			want := "HTTP/1.1" // net/http's plain answers always are; its 417 follows the request
			if tc.code == coinpulse.CodeExpectationFailed && strings.Contains(tc.raw, " HTTP/1.0\r\n") {
				want = "HTTP/1.0"
			}
			if res.Proto != want {
				t.Errorf("answered in %s, want %s", res.Proto, want)
			}
			id := res.Header.Get("X-Request-Id")
			if !strings.HasPrefix(id, "req_") {
				t.Errorf("X-Request-Id %q", id)
			}
			if res.Header.Get("Date") == "" {
				t.Error("no Date")
			}
			if tc.method == "HEAD" {
				if len(body) != 0 {
					t.Errorf("a HEAD's answer has a body: %q", body)
				}
				if res.ContentLength <= 0 {
					t.Errorf("a HEAD's answer has Content-Length %d, want the GET's", res.ContentLength)
				}
				return
			}
			var env struct {
				Success *bool `json:"success"`
				Error   struct{ Code, Message string }
				Meta    struct {
					Timestamp string `json:"timestamp"`
					RequestID string `json:"request_id"`
				}
			}
			if err := json.Unmarshal(body, &env); err != nil {
				t.Fatalf("not JSON: %q", body)
			}
			if env.Success == nil || *env.Success || env.Error.Code != string(tc.code) || !strings.Contains(env.Error.Message, tc.message) {
				t.Errorf("body %s: want code %s and a message with %q", body, tc.code, tc.message)
			}
			if env.Meta.RequestID != id {
				t.Errorf("meta.request_id %q, header %q", env.Meta.RequestID, id)
			}
			if _, err := time.Parse("2006-01-02T15:04:05.000Z", env.Meta.Timestamp); err != nil {
				t.Errorf("meta.timestamp %q", env.Meta.Timestamp)
			}
			if res.ContentLength != int64(len(body)) {
				t.Errorf("Content-Length %d for %d bytes", res.ContentLength, len(body))
			}
		})
	}
}

// The API's own answers pass through the listener untouched, on one
// keep-alive connection: a 200, a 405, a POST that waits for its 100
// Continue, and the 430 KB OpenAPI document, byte for byte.
func TestListenerLeavesTheAPIAlone(t *testing.T) {
	hs := envelopeServer(t)
	key := proKey(t)
	rec := httptest.NewRecorder()
	testServer(t).Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/openapi.json", nil))
	spec := rec.Body.Bytes()
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	read := func(what string) (*http.Response, []byte) {
		t.Helper()
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return res, body
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/api/v1/markets/global", 200},
		{"DELETE", "/api/v1/markets/global", 405},
		{"GET", "/api/v1/openapi.json", 200},
	} {
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", tc.method, tc.path, key)
		res, body := read(tc.method + " " + tc.path)
		if res.StatusCode != tc.status || res.Close || !json.Valid(body) {
			t.Fatalf("%s %s: %d (close %v) %.200s", tc.method, tc.path, res.StatusCode, res.Close, body)
		}
		if tc.path == "/api/v1/openapi.json" && !bytes.Equal(body, spec) {
			t.Fatalf("the OpenAPI document through the listener: %d bytes, want the handler's %d", len(body), len(spec))
		}
	}
	// 100 Continue, then the body, then the answer.
	fmt.Fprintf(c, "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 15\r\nExpect: 100-continue\r\n\r\n", key)
	if res, _ := read("the interim answer"); res.StatusCode != http.StatusContinue {
		t.Fatalf("interim answer %d, want 100", res.StatusCode)
	}
	io.WriteString(c, `{"name":"cont"}`)
	if res, body := read("POST /portfolio"); res.StatusCode != 201 || !json.Valid(body) {
		t.Fatalf("POST after 100 Continue: %d %s", res.StatusCode, body)
	}
}

// After a 101 Switching Protocols, what the connection carries is not
// HTTP: bytes of net/http's plain-text form, written alone after the 101,
// pass as they are (a WebSocket message could hold them).
func TestListenerLeavesAnUpgradedConnectionAlone(t *testing.T) {
	after := plain("400 Bad Request", "400 Bad Request")
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "test")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		bw.WriteString(after)
		bw.Flush()
	}))
	hs.Listener = testServer(t).Listener(hs.Listener)
	hs.Start()
	defer hs.Close()
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	if got, _ := io.ReadAll(br); string(got) != after {
		t.Fatalf("after the upgrade: %q, want %q", got, after)
	}
}

// serverError replaces only net/http's exact forms: a body that is not the
// status line's, a status line net/http does not write with that body, a
// 417 with more header fields, or another version's plain answer, pass.
func TestServerErrorRecognisesOnlyNetHTTPsForms(t *testing.T) {
	s := &Server{clock: time.Now}
	for _, p := range []string{
		plain("400 Bad Request: x", "400 Bad Request: y"),
		plain("400 Bad Request", "400 Bad Request!"),
		plain("400 Bad Request:", "400 Bad Request:"),
		plain("400 Bad Request: ", "400 Bad Request: "),
		plain("400 Bad Requests", "400 Bad Requests"),
		plain("431 Request Header Fields Too Large", "400 Bad Request"),
		plain("501 Not Implemented", "501 Not Implemented"),
		plain("500 Internal Server Error", "500 Internal Server Error"),
		plain("404 Not Found", "404 Not Found"),
		"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request",
		"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: x\r\nContent-Length: 0\r\n\r\n{}",
		"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: x\r\n\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 417 Expectation Failed\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
		"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: x\r\nX: y\r\n\r\n",
		"HTTP/2.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request",
	} {
		if b := s.serverError([]byte(p)); b != nil {
			t.Errorf("replaced %q with %q", p, b)
		}
	}
}

// FuzzServerError feeds arbitrary writes to the recognition of net/http's
// own answers: it never panics, and what it replaces is a whole answer of
// net/http's form, replaced by a whole answer in the envelope.
func FuzzServerError(f *testing.F) {
	for _, seed := range []string{
		plain("400 Bad Request", "400 Bad Request"),
		plain("400 Bad Request: missing required Host header", "400 Bad Request: missing required Host header"),
		plain("400 Bad Request: x", "400 Bad Request: y"),
		plain("400 Bad Request:", "400 Bad Request:"),
		plain("431 Request Header Fields Too Large", "431 Request Header Fields Too Large"),
		plain("501 Not Implemented", "Unsupported transfer encoding"),
		plain("505 HTTP Version Not Supported: unsupported protocol version", "505 HTTP Version Not Supported: unsupported protocol version"),
		plain("500 Internal Server Error", "500 Internal Server Error"),
		"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: Thu, 26 Nov 2026 23:42:54 GMT\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: Thu, 26 Nov 2026 23:42:54 GMT\r\n\r\n",
		"HTTP/1.0 417 Expectation Failed\r\nConnection: close\r\nDate: Thu, 26 Nov 2026 23:42:54 GMT\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request",
		"HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\nX-Request-Id: r\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	s := &Server{clock: time.Now}
	f.Fuzz(func(t *testing.T, in []byte) {
		b := s.serverError(in)
		if b == nil {
			return
		}
		if !netHTTPForm(string(in)) {
			t.Fatalf("replaced a write not of net/http's form: %q", in)
		}
		method := "GET" // a HEAD's replacement ends with its header
		if strings.HasSuffix(string(b), "\r\n\r\n") {
			method = "HEAD"
		}
		res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(b))), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("the replacement of %q is not an HTTP answer: %v\n%q", in, err, b)
		}
		body, err := io.ReadAll(res.Body)
		if err != nil || method == "GET" && int64(len(body)) != res.ContentLength {
			t.Fatalf("the replacement of %q: body %q (Content-Length %d): %v", in, body, res.ContentLength, err)
		}
		if method == "GET" {
			var env struct {
				Success *bool
				Error   struct{ Code coinpulse.Code }
			}
			if json.Unmarshal(body, &env) != nil || env.Success == nil || *env.Success || env.Error.Code.Status() != res.StatusCode || res.StatusCode == 500 {
				t.Fatalf("the replacement of %q is not an error envelope of its status: %d %s", in, res.StatusCode, body)
			}
		}
	})
}

// BenchmarkServerErrorPass measures what the listener's look at each write
// costs the API's own answers: a 200 (one byte looked at) and a 404 in the
// envelope (its status line and the header that follows).
func BenchmarkServerErrorPass(b *testing.B) {
	s := &Server{clock: time.Now}
	for _, a := range []struct{ name, answer string }{
		{"200", "HTTP/1.1 200 OK\r\nCache-Control: private, max-age=30\r\nContent-Type: application/json; charset=utf-8\r\n\r\n{}"},
		{"404", "HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\nX-Request-Id: req_1\r\n\r\n{}"},
	} {
		p := []byte(a.answer)
		b.Run(a.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s.serverError(p) != nil {
					b.Fatal("replaced")
				}
			}
		})
	}
}

// netHTTPForm reports whether p is one of the answers net/http's server
// writes on its own, as its source writes them (server.go: conn.serve's
// fmt.Fprintf calls, sendExpectationFailed).
func netHTTPForm(p string) bool {
	const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
	if p == "HTTP/1.1 501 Not Implemented"+errorHeaders+"Unsupported transfer encoding" {
		return true
	}
	for _, status := range []string{"400 Bad Request", "431 Request Header Fields Too Large", "505 HTTP Version Not Supported"} {
		if p == "HTTP/1.1 "+status+errorHeaders+status {
			return true
		}
		if line, ok := strings.CutPrefix(p, "HTTP/1.1 "+status+": "); ok {
			text, body, ok := strings.Cut(line, errorHeaders)
			if ok && text != "" && !strings.Contains(text, "\r\n") && body == status+": "+text {
				return true
			}
		}
	}
	for _, proto := range []string{"HTTP/1.0", "HTTP/1.1"} {
		if date, ok := strings.CutPrefix(p, proto+" 417 Expectation Failed\r\nConnection: close\r\nDate: "); ok {
			date = strings.TrimSuffix(strings.TrimSuffix(date, "\r\n\r\n"), "\r\nContent-Length: 0")
			if !strings.Contains(date, "\r\n") && strings.HasSuffix(p, "\r\n\r\n") {
				return true
			}
		}
	}
	return false
}

// A request that asks "Expect: 100-continue" and is refused before its
// body is asked for is answered and its connection ended at once: net/http
// would first wait for the body the client holds back, until the body's
// deadline (an audit: 30 s). One whose body is asked for gets it read.
func TestExpectContinueRefusedAtOnce(t *testing.T) {
	hs := envelopeServer(t)
	res, body := rawExchange(t, hs, "POST", "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_live_nope\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
	if res.StatusCode != http.StatusUnauthorized || !bytes.Contains(body, []byte(`"INVALID_API_KEY"`)) {
		t.Errorf("refused: %d %s", res.StatusCode, body)
	}
	// A client that sends its body without waiting gets the refusal and a
	// clean end of the connection, not a reset (rawExchange fails on one).
	res, _ = rawExchange(t, hs, "POST", "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_live_nope\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n"+strings.Repeat("x", 100000))
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("refused with the body sent at once: %d", res.StatusCode)
	}

	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	payload := `{"name":"expected"}`
	fmt.Fprintf(c, "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", proKey(t), len(payload))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 Continue") {
		t.Fatalf("before the body: %q, %v", line, err)
	}
	br.ReadString('\n') // the blank line ending the 100
	io.WriteString(c, payload)
	res2, err := http.ReadResponse(br, &http.Request{Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res2.Body)
	if res2.StatusCode != http.StatusCreated || !bytes.Contains(b, []byte(`"expected"`)) {
		t.Errorf("sent after 100 Continue: %d %s", res2.StatusCode, b)
	}
}
