package api

import (
	"bufio"
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

// rawExchange sends raw bytes on a new connection and reads one answer.
func rawExchange(t *testing.T, hs *httptest.Server, method, raw string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(c, raw) // a 431 is answered before all of it is read
	res, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%.60q: no answer: %v", raw, err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%.60q: reading the body: %v", raw, err)
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
		{"HTTP/3.0", "GET", "GET /api/v1/markets HTTP/3.0\r\nHost: x\r\n\r\n", coinpulse.CodeHTTPVersion, "HTTP/1.1"},
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
// keep-alive connection: a 200, a 404 whose message quotes a path that
// holds the plain-text form of net/http's 400, a 405, and a 200 again.
func TestListenerLeavesTheAPIAlone(t *testing.T) {
	hs := envelopeServer(t)
	key := proKey(t)
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	plain := "400 Bad Request" + "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" + "400 Bad Request"
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/api/v1/markets/global", 200},
		{"GET", "/api/v1/coins/" + strings.ReplaceAll(plain, "\r\n", "%0D%0A"), 404},
		{"DELETE", "/api/v1/markets/global", 405},
		{"GET", "/api/v1/markets/global", 200},
	} {
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", tc.method, strings.ReplaceAll(tc.path, " ", "%20"), key)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || res.Close {
			t.Fatalf("%s %.40s: %d (close %v) %.200s", tc.method, tc.path, res.StatusCode, res.Close, body)
		}
		if !json.Valid(body) {
			t.Errorf("%s %.40s: not JSON: %q", tc.method, tc.path, body)
		}
		if tc.status == 404 && !strings.Contains(string(body), `Connection: close\r\n\r\n400 Bad Request`) {
			t.Errorf("the 404 does not quote the path: %s", body)
		}
	}
}

// FuzzServerError feeds arbitrary writes to the recognition of net/http's
// own answers: it never panics, and what it replaces is a whole answer of
// net/http's form, replaced by a whole answer in the envelope.
func FuzzServerError(f *testing.F) {
	plain := func(line, body string) string {
		return "HTTP/1.1 " + line + "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" + body
	}
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
		if !strings.Contains(string(in), "Connection: close\r\n") || !strings.HasSuffix(string(in), "\r\n\r\n") && !strings.Contains(string(in), "text/plain") {
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
