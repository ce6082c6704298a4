package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/jsontext"
	"coinpulse/internal/ledger"
)

// body is a request's JSON object, read field by field. Every problem is
// collected, so that one VALIDATION_ERROR names every bad field at once.
type body struct {
	fields map[string]json.RawMessage
	errs   []coinpulse.FieldError
	// unavailable, when set, is what err returns if the fields are
	// otherwise valid: the request cannot be judged now (market data still
	// loading).
	unavailable error
}

// readBody reads r's body as a JSON object with only the allowed fields.
// An empty body reads as {}. Over the size limit is PAYLOAD_TOO_LARGE;
// anything that is not a JSON object of UTF-8 text, names an unknown
// field, or gives a field twice (encoding/json would keep the last, so
// {"type":"buy",…,"type":"sell"} would sell) is a VALIDATION_ERROR.
func readBody(r *http.Request, allowed ...string) (*body, error) {
	raw, err := readRaw(r)
	if err != nil {
		return nil, err
	}
	b := &body{}
	raw = bytes.Trim(raw, " \t\r\n") // JSON's white space, not Unicode's (U+0085, U+00A0)
	if len(raw) == 0 {
		b.fields = map[string]json.RawMessage{}
		return b, nil
	}
	if raw[0] != '{' {
		return nil, bodyError("The request body must be a JSON object.")
	}
	if !utf8.Valid(raw) {
		return nil, bodyError("The request body is not valid UTF-8, which JSON text must be.")
	}
	if err := json.Unmarshal(raw, &b.fields); err != nil {
		return nil, bodyError(fmt.Sprintf("The request body is not valid JSON: %s.", strings.TrimPrefix(err.Error(), "json: ")))
	}
	takes := "this endpoint takes " + strings.Join(allowed, ", ")
	if len(allowed) == 0 {
		takes = "this endpoint takes no fields (send {} or no body)"
	}
	var unknown []string
	for name := range b.fields {
		if !slices.Contains(allowed, name) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	for _, name := range unknown {
		b.fail(fieldName(name), "unknown field; "+takes)
	}
	for _, name := range jsontext.RepeatedNames(raw) {
		if slices.Contains(allowed, name) {
			b.fail(fieldName(name), "given more than once")
		}
	}
	return b, nil
}

// fieldName is how a field a client named is shown in an error.
func fieldName(name string) string {
	if name == "" {
		return `""`
	}
	return truncate(name, 50)
}

func (b *body) fail(field, message string) {
	b.errs = append(b.errs, coinpulse.FieldError{Field: field, Message: message})
}

// err returns the collected problems as one VALIDATION_ERROR, or nil; or,
// when there are none, the request's unavailability: a body that can never
// succeed is told so at once, not after a retry.
func (b *body) err() error {
	if len(b.errs) == 0 {
		return b.unavailable
	}
	return coinpulse.ValidationErrors(b.errs...)
}

// raw returns a field's JSON, false when it is absent or null.
func (b *body) raw(name string, required bool) (json.RawMessage, bool) {
	v, ok := b.fields[name]
	if !ok || string(v) == "null" {
		if required {
			b.fail(name, "is required")
		}
		return nil, false
	}
	return v, true
}

// text reads a string field, trimmed of surrounding spaces, of min to max
// characters, without control characters (C0, DEL and C1) but tab and line
// feed. ok is false when the field is absent or invalid.
func (b *body) text(name string, required bool, min, max int) (s string, ok bool) {
	v, present := b.raw(name, required)
	if !present {
		return "", false
	}
	if err := json.Unmarshal(v, &s); err != nil {
		b.fail(name, "must be a string")
		return "", false
	}
	if jsontext.LoneSurrogate(v) {
		// encoding/json decodes a lone surrogate escape ("\ud800") to
		// U+FFFD: the text would be stored other than it was sent.
		b.fail(name, `must be valid Unicode: a \ud800-\udfff escape must be half of a surrogate pair`)
		return "", false
	}
	// Checked before the trim, which would take CR, VT, FF and NEL off the
	// ends: they are refused wherever they are.
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) { // C0, DEL and C1
		b.fail(name, "must not contain control characters")
		return "", false
	}
	s = strings.TrimSpace(s)
	n := utf8.RuneCountInString(s)
	if n < min || n > max {
		if min > 0 {
			b.fail(name, "must be "+strconv.Itoa(min)+" to "+strconv.Itoa(max)+" characters")
		} else {
			b.fail(name, "must be at most "+strconv.Itoa(max)+" characters")
		}
		return "", false
	}
	return s, true
}

// plainDecimal is the error of an amount sent as a string that does not
// hold a plain decimal.
const plainDecimal = `must be a number, or a string of a plain decimal such as "0.1" (digits without leading zeros, optionally a point and more digits; no sign, no exponent)`

// amount reads a decimal amount given as a JSON number or a string holding
// one, within the ledger's bounds; positive demands > 0, else >= 0. A
// string holds a plain decimal, as the API documents: digits, optionally
// a point and more digits, no sign and no exponent ("0.1", not "1e-1").
func (b *body) amount(name string, positive bool) (decimal.Decimal, bool) {
	v, present := b.raw(name, true)
	if !present {
		return decimal.Decimal{}, false
	}
	s := string(v)
	if v[0] == '"' {
		if err := json.Unmarshal(v, &s); err != nil {
			b.fail(name, "must be a number")
			return decimal.Decimal{}, false
		}
		if strings.ContainsAny(s, "eE+-") {
			b.fail(name, plainDecimal)
			return decimal.Decimal{}, false
		}
	}
	d, err := ledger.Parse(s)
	if err != nil {
		msg := err.Error()
		if v[0] == '"' && msg == "must be a number" {
			msg = plainDecimal // "00012.50", "1.", ".5", " 5"
		}
		b.fail(name, msg)
		return decimal.Decimal{}, false
	}
	if positive && !d.IsPositive() {
		b.fail(name, "must be greater than 0")
		return decimal.Decimal{}, false
	}
	return d, true
}

// id reads a positive integer id field.
func (b *body) id(name string) (int64, bool) {
	v, present := b.raw(name, true)
	if !present {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n <= 0 {
		b.fail(name, "must be a positive integer id")
		return 0, false
	}
	return n, true
}

// boolean reads an optional true/false field, def when absent or null.
func (b *body) boolean(name string, def bool) (bool, bool) {
	v, present := b.raw(name, false)
	if !present {
		return def, true
	}
	switch string(v) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	b.fail(name, "must be true or false")
	return def, false
}

// enum reads a string field that must be one of allowed.
func (b *body) enum(name string, allowed ...string) (string, bool) {
	v, present := b.raw(name, true)
	if !present {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil || !slices.Contains(allowed, s) {
		b.fail(name, "must be one of "+strings.Join(allowed, ", "))
		return "", false
	}
	return s, true
}

// Bounds of executed_at: not before Bitcoin's first block, not more than
// a few minutes ahead of the server's clock.
var (
	earliestTrade = time.Date(2009, 1, 3, 0, 0, 0, 0, time.UTC)
	clockSkew     = 5 * time.Minute
)

// executedAt reads the optional executed_at timestamp (RFC 3339), no
// later than now plus the clock skew; the zero time when absent, for the
// store to take the trade's time (coinpulse.Trade.At).
func (b *body) executedAt(now time.Time) time.Time {
	v, present := b.raw("executed_at", false)
	if !present {
		return time.Time{}
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		b.fail("executed_at", "must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")
		return now
	}
	t, err := coinpulse.ParseTimestamp(s)
	if err != nil {
		b.fail("executed_at", "must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")
		return now
	}
	if t.Before(earliestTrade) || t.After(now.Add(clockSkew)) {
		b.fail("executed_at", "must be between 2009-01-03T00:00:00Z and now (5 minutes of clock skew allowed)")
		return now
	}
	return t.UTC()
}

// DefaultBodyTimeout is how long a client may take, by default, to send a
// request's body: a 64 KiB body at 2 KiB a second.
const DefaultBodyTimeout = 30 * time.Second

// readRaw reads r's body whole: a body over the limit is a 413, one that
// takes too long a 408.
func readRaw(r *http.Request) ([]byte, error) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, coinpulse.Errorf(coinpulse.CodePayloadTooLarge, "The request body is over the limit of %d bytes.", tooLarge.Limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, bodyTimeout()
		}
		return nil, bodyError("The request body could not be read.")
	}
	return raw, nil
}

// deadlineBody bounds the time a client may take to send a request's
// body. The connection's read deadline is set when the request starts and
// lifted as soon as the body has been read to its end, so that a client
// that declares a body and never finishes it holds neither the request,
// nor its goroutine, nor its connection past the deadline, while the
// handler, once it has the body, may take as long as it needs.
// A read past the deadline fails with os.ErrDeadlineExceeded, which the
// readers of bodies answer with REQUEST_TIMEOUT. A body left unread, or
// failed, keeps the deadline: net/http reads what is left of it before
// it answers (to reuse the connection), and the deadline bounds that too.
//
// The body also keeps the write deadline (see Config.WriteTimeout) in
// step: its first read renews it if the request is late by then, since
// net/http may answer "100 Continue" as it starts; and an answer that
// begins while the body is still unread has the write timeout from the
// body's deadline (exchange.begin), net/http reading what is left first.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	e        *exchange
	deadline time.Time
	read     bool
	done     bool
}

// newDeadlineBody sets w's connection's read deadline to timeout from now
// and returns body, which lifts it once read. Where the connection does
// not support deadlines, body is returned as it is. e is the request's.
func newDeadlineBody(w http.ResponseWriter, e *exchange, body io.ReadCloser, timeout time.Duration) io.ReadCloser {
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(timeout)
	if rc.SetReadDeadline(deadline) != nil {
		return body
	}
	b := &deadlineBody{ReadCloser: body, rc: rc, e: e, deadline: deadline}
	e.body = b
	return b
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if !b.read {
		b.read = true
		if !b.e.wrote {
			b.e.renewIfLate() // before a "100 Continue"
		}
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// refuseUnsent shortens, as its answer is done, the wait for a body the
// client was never asked for: net/http, which closes the connection after
// answering an "Expect: 100-continue" request without its "100 Continue",
// first reads up to 256 KiB of the body, until the deadline (an audit: a
// refused upload held its connection 30 s). unsentGrace is left for a
// client that sent its body without waiting, so that the connection
// closes cleanly rather than with a reset that may lose the answer. A
// body the handler read from is left to its deadline.
func (b *deadlineBody) refuseUnsent() {
	if !b.read {
		b.rc.SetReadDeadline(time.Now().Add(unsentGrace))
	}
}

// unsentGrace is how long a refused "Expect: 100-continue" request's body
// is still read for.
const unsentGrace = 500 * time.Millisecond

// bodyTimeout is the REQUEST_TIMEOUT of a request whose body did not
// arrive within its deadline.
func bodyTimeout() error {
	return coinpulse.Errorf(coinpulse.CodeRequestTimeout, "The request body did not arrive in time: send the whole body promptly after the headers.")
}

// bodyError is the VALIDATION_ERROR of a body that is not a JSON object
// at all: its one detail names the body.
func bodyError(msg string) error { return partError("body", msg) }

// partError is a VALIDATION_ERROR that no one field is at fault for: its
// one detail names the part of the request that is (the body, the query
// string), so that details is never empty on a VALIDATION_ERROR.
func partError(part, msg string) *coinpulse.Error {
	return &coinpulse.Error{Code: coinpulse.CodeValidation, Message: msg, Details: []coinpulse.FieldError{{Field: part, Message: msg}}}
}
