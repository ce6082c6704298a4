package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	"coinpulse"
)

// Listener wraps ln so that the answers net/http gives on its own, before
// any handler sees the request, go out in the error envelope like every
// other answer, with an X-Request-Id, instead of in plain text: 400 for a
// request it cannot parse (a malformed request line or header field, a
// missing or malformed Host), 431 for header fields over
// http.Server.MaxHeaderBytes, 501 for a Transfer-Encoding other than
// chunked, 505 for an HTTP version other than 1.x, and 417 for an Expect
// other than 100-continue (a HEAD gets the headers alone).
//
// net/http writes these answers in one Write to the connection, in a fixed
// form (net/http's conn.serve and sendExpectationFailed); the connection
// recognises that form exactly and writes the envelope in its place. An
// answer in any other form, which a later Go release could bring, passes
// unchanged: TestHTTPServerErrorsInTheEnvelope fails then. From a 101
// Switching Protocols on, the connection carries another protocol (the
// WebSocket stream, hijacked) and its writes pass untouched. The listener
// must see the plain connection: under TLS it would see only ciphertext.
func (s *Server) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, s: s} }

type listener struct {
	net.Listener
	s *Server
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &envelopeConn{Conn: c, s: l.s}, nil
}

// envelopeConn is a connection of Listener.
type envelopeConn struct {
	net.Conn
	s *Server
	// upgraded is set by a 101 answer: what follows is not HTTP.
	upgraded atomic.Bool
}

func (c *envelopeConn) Write(p []byte) (int, error) {
	if !c.upgraded.Load() {
		if switchingProtocols(p) {
			c.upgraded.Store(true)
		} else if b := c.s.serverError(p); b != nil {
			if _, err := c.Conn.Write(b); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}

// switchingProtocols reports whether the write p begins a 101 answer.
func switchingProtocols(p []byte) bool {
	return len(p) > len("HTTP/1.1 101 ") && p[9] == '1' && bytes.HasPrefix(p, []byte("HTTP/1.1 101 "))
}

// CloseWrite half-closes the connection, as net/http does after a 431, when
// the connection under it can.
func (c *envelopeConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the connection's own ReadFrom (sendfile on TCP) for the
// bodies net/http copies with it.
func (c *envelopeConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// The form of net/http's own plain-text answers: the status line, then
// these header fields, then a body that repeats the status line's text
// (or, for the 501, says plainBadTE).
const (
	plainErrorHeaders = "Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
	plainBadTE        = "Unsupported transfer encoding"
	expectationFailed = "417 Expectation Failed\r\nConnection: close\r\nDate: "
)

// serverError returns the envelope that replaces the write p, when p is one
// of net/http's own error answers, else nil.
func (s *Server) serverError(p []byte) []byte {
	// Every answer begins "HTTP/1.1 ddd "; only 4xx and 5xx are looked at
	// further (the first test is all a 200 costs).
	if len(p) <= len("HTTP/1.1 400 ") || p[9] != '4' && p[9] != '5' || p[8] != ' ' || !bytes.HasPrefix(p, []byte("HTTP/1.")) {
		return nil
	}
	proto, rest := p[:len("HTTP/1.1")], p[len("HTTP/1.1 "):]
	fields, is417 := bytes.CutPrefix(rest, []byte(expectationFailed))
	// Only the 417 follows the request's version: an HTTP/1.0 request
	// gets "HTTP/1.0 417"; the plain answers are always HTTP/1.1.
	if string(proto) != "HTTP/1.1" && (string(proto) != "HTTP/1.0" || !is417) {
		return nil
	}
	if is417 {
		// The date, then Content-Length: 0, except for a HEAD, and the
		// end of the header.
		date, ok := bytes.CutSuffix(fields, []byte("\r\n\r\n"))
		if !ok {
			return nil
		}
		date, get := bytes.CutSuffix(date, []byte("\r\nContent-Length: 0"))
		if bytes.Contains(date, []byte("\r\n")) {
			return nil
		}
		head := !get
		return s.envelope(proto, coinpulse.CodeExpectationFailed, "The Expect header asks for something the server does not do: only Expect: 100-continue is supported.", head)
	}
	line, after, ok := bytes.Cut(rest, []byte("\r\n"))
	if !ok {
		return nil
	}
	return s.plainError(line, after)
}

// plainError returns the envelope for a status line and what follows it,
// when they are net/http's plain-text answer, else nil.
func (s *Server) plainError(line, after []byte) []byte {
	body, ok := bytes.CutPrefix(after, []byte(plainErrorHeaders))
	if !ok {
		return nil
	}
	status, text, _ := bytes.Cut(line, []byte(" "))
	var code coinpulse.Code
	var msg, detail string
	switch string(status) {
	case "400":
		code, msg = coinpulse.CodeMalformedRequest, "The request is not valid HTTP: its request line or a header field cannot be read."
		if detail, ok = cutStatus(line, body, "400 Bad Request"); detail != "" {
			msg = "The request is not valid HTTP: " + detail + "."
		}
	case "431":
		code, msg = coinpulse.CodeHeadersTooLarge, "The request's header fields are too large (over 1 MB in all)."
		_, ok = cutStatus(line, body, "431 Request Header Fields Too Large")
	case "505":
		code, msg = coinpulse.CodeHTTPVersion, "The request's HTTP version is not served: only HTTP/1.x is."
		_, ok = cutStatus(line, body, "505 HTTP Version Not Supported")
	case "501":
		code, msg = coinpulse.CodeNotImplemented, "The request's Transfer-Encoding is not supported: send the body with Content-Length or Transfer-Encoding: chunked."
		ok = string(text) == "Not Implemented" && string(body) == plainBadTE
	default:
		return nil
	}
	if !ok {
		return nil
	}
	return s.envelope([]byte("HTTP/1.1"), code, msg, false)
}

// cutStatus reports whether line and body are status's plain-text answer,
// "status" or "status: detail" both, and returns the detail.
func cutStatus(line, body []byte, status string) (string, bool) {
	if !bytes.Equal(line, body) {
		return "", false
	}
	rest, ok := bytes.CutPrefix(line, []byte(status))
	if !ok {
		return "", false
	}
	if len(rest) == 0 {
		return "", true
	}
	detail, ok := bytes.CutPrefix(rest, []byte(": "))
	return string(detail), ok && len(detail) > 0
}

// envelope returns a whole answer in proto: code's status, the error
// envelope with msg, a generated request id, and Connection: close
// (net/http closes the connection after each of these answers). A HEAD's
// answer has no body.
func (s *Server) envelope(proto []byte, code coinpulse.Code, msg string, head bool) []byte {
	id := newRequestID()
	now := s.clock()
	body, _ := json.Marshal(errorBody{Error: errorInfo{Code: code, Message: msg}, Meta: &Meta{Timestamp: timestamp(now), RequestID: id}})
	body = append(body, '\n')
	status := code.Status()
	b := make([]byte, 0, 256+len(body))
	b = append(b, proto...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\nConnection: close\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\nContent-Type: application/json; charset=utf-8\r\nDate: "...)
	b = now.UTC().AppendFormat(b, http.TimeFormat)
	b = append(b, "\r\nX-Request-Id: "...)
	b = append(b, id...)
	b = append(b, "\r\n\r\n"...)
	if !head {
		b = append(b, body...)
	}
	return b
}
