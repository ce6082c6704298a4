package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"coinpulse"
)

// SecretPrefix starts every webhook signing secret.
const SecretPrefix = "whsec_"

// The Standard Webhooks headers, as Headers sets them (HTTP header names
// are case-insensitive; Go writes them as Webhook-Id and so on).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// secretLen is the number of random bytes of a new secret; the Standard
// Webhooks specification asks for 24 to 64.
const (
	secretLen    = 32
	minSecretLen = 24
	maxSecretLen = 64
)

// NewSecret returns a new signing secret: "whsec_" followed by the
// standard base64 encoding (with padding) of 32 random bytes.
func NewSecret() (string, error) {
	b := make([]byte, secretLen)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("notify: cannot make a secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// secretKey returns the HMAC key of a "whsec_<base64>" secret. Its errors
// never contain the secret.
func secretKey(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, errors.New("the signing secret does not start with " + SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, errors.New("the signing secret is not valid base64 after " + SecretPrefix)
	}
	if len(key) < minSecretLen || len(key) > maxSecretLen {
		return nil, fmt.Errorf("the signing secret has %d bytes, not %d to %d", len(key), minSecretLen, maxSecretLen)
	}
	return key, nil
}

// Sign returns the Standard Webhooks signature of a message,
// "v1,<base64 signature>": the HMAC-SHA256, keyed with the bytes that
// secret ("whsec_<base64>", 24 to 64 bytes once decoded) encodes, of
// msgID + "." + ts in Unix seconds + "." + body. It fails on a malformed
// secret or an empty msgID; the error does not reveal the secret.
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	if msgID == "" {
		return "", errors.New("the message id is empty")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, ts.Unix(), 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// Headers returns the Standard Webhooks headers of a message: webhook-id
// (msgID), webhook-timestamp (ts in Unix seconds) and webhook-signature
// (Sign's). It fails when Sign does.
func Headers(secret, msgID string, ts time.Time, body []byte) (http.Header, error) {
	sig, err := Sign(secret, msgID, ts, body)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, 3)
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return h, nil
}

// The Sender's defaults.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultUserAgent = "Coinpulse-Webhooks/1"
)

// maxBody is how much of a response body a Sender reads (and discards).
const maxBody = 64 << 10

// maxErrorLen bounds the error strings of Outcome, which subscribers read
// in their delivery log.
const maxErrorLen = 300

// SenderOptions configures NewSender. The zero value is the production
// configuration.
type SenderOptions struct {
	// AllowPrivate lets the Sender connect to any address, loopback and
	// private ones included (for development and tests; see
	// ForbiddenReason for what is refused otherwise).
	AllowPrivate bool
	// Timeout bounds each attempt, from dialing to reading the response
	// (DefaultTimeout when zero or negative).
	Timeout time.Duration
	// UserAgent is the User-Agent header (DefaultUserAgent when empty).
	UserAgent string
	// Resolver resolves endpoint host names (net.DefaultResolver when
	// nil). Whatever it answers, the dialed address is checked.
	Resolver *net.Resolver
	// Rand returns a number in [0, 1) for the retry jitter of Outcome
	// (math/rand/v2's Float64 when nil).
	Rand func() float64
}

// Sender posts webhook deliveries. Its HTTP client connects only to
// addresses that ForbiddenReason allows (unless AllowPrivate), checked on
// the IP being dialed; it never uses a proxy (the environment's
// HTTP_PROXY and the like are ignored, since a proxy would dial on its
// own), never follows a redirect, gives each attempt Timeout in all, and
// reads at most 64 KiB of a response body, which it discards. A Sender is
// safe for concurrent use and reuses connections.
type Sender struct {
	client    *http.Client
	timeout   time.Duration
	userAgent string
	rnd       func() float64
}

// NewSender returns a Sender configured by opts.
func NewSender(opts SenderOptions) *Sender {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.UserAgent == "" {
		opts.UserAgent = DefaultUserAgent
	}
	if opts.Rand == nil {
		opts.Rand = mrand.Float64
	}
	dialer := &net.Dialer{
		Timeout:   opts.Timeout,
		KeepAlive: 30 * time.Second,
		Resolver:  opts.Resolver,
		Control:   DialControl(opts.AllowPrivate),
	}
	transport := &http.Transport{
		Proxy:                  nil, // never: see Sender
		DialContext:            dialer.DialContext,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    opts.Timeout,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxBody,
		DisableCompression:     true, // bodies are discarded
	}
	return &Sender{
		client: &http.Client{
			Transport: transport,
			Timeout:   opts.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		timeout:   opts.Timeout,
		userAgent: opts.UserAgent,
		rnd:       opts.Rand,
	}
}

// Result is the outcome of one attempt of Send. Exactly one case holds:
//   - delivered: Err is nil (the endpoint answered 2xx);
//   - Gone: the endpoint answered 410 Gone, the delivery fails and the
//     endpoint should be disabled;
//   - Retry: the attempt failed in a way that may pass later: a timeout,
//     a refused or failed connection (a forbidden address included), a
//     TLS error, a redirect (3xx), any other 4xx or a 5xx;
//   - otherwise the delivery cannot be sent as stored (a malformed secret
//     or URL, an empty event id): it fails at once, not retried.
type Result struct {
	// StatusCode is the HTTP status of the response (0 when there was
	// none).
	StatusCode int
	// Err says why the attempt failed, in a short message meant for the
	// subscriber's delivery log (it wraps the underlying error, e.g. an
	// *AddrError). When the ctx given to Send ended first, Err wraps
	// ctx.Err(): such an attempt says nothing about the endpoint.
	Err error
	// Duration is how long the attempt took.
	Duration time.Duration
	// Gone reports a 410 Gone.
	Gone bool
	// Retry reports a failure worth retrying.
	Retry bool
}

// Delivered reports whether the endpoint accepted the delivery.
func (r Result) Delivered() bool { return r.Err == nil }

// attemptError is a short message wrapping the error it describes.
type attemptError struct {
	msg string
	err error
}

func (e *attemptError) Error() string { return e.msg }
func (e *attemptError) Unwrap() error { return e.err }

// Send makes one attempt of d: it POSTs d.Payload to endpoint (the
// webhook's URL) with Content-Type application/json, the Sender's
// User-Agent and the Standard Webhooks headers signed with secret, with
// d.EventID as webhook-id (the same in every attempt, so that the receiver
// can drop duplicates) and now as webhook-timestamp. See Result for how
// the attempt is judged.
func (s *Sender) Send(ctx context.Context, endpoint, secret string, d coinpulse.Delivery, now time.Time) Result {
	start := time.Now()
	res := s.send(ctx, endpoint, secret, d, now)
	res.Duration = time.Since(start)
	return res
}

func (s *Sender) send(ctx context.Context, rawURL, secret string, d coinpulse.Delivery, now time.Time) Result {
	h, err := Headers(secret, d.EventID, now, d.Payload)
	if err != nil {
		return Result{Err: &attemptError{"cannot sign the delivery: " + err.Error(), err}}
	}
	if u, err := url.Parse(rawURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Result{Err: errors.New("the endpoint URL is not a valid http or https URL")}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(d.Payload))
	if err != nil {
		return Result{Err: &attemptError{"the endpoint URL is not valid", err}}
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.userAgent)

	resp, err := s.client.Do(req)
	if err != nil {
		return Result{Err: s.describe(ctx, err), Retry: true}
	}
	// Read a little of the body so that the connection can be reused,
	// and never more.
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()

	code := resp.StatusCode
	res := Result{StatusCode: code}
	switch {
	case code >= 200 && code <= 299:
	case code == http.StatusGone:
		res.Gone = true
		res.Err = errors.New("the endpoint answered 410 Gone")
	case code >= 300 && code <= 399:
		loc := resp.Header.Get("Location")
		if loc == "" {
			loc = "none"
		}
		res.Retry = true
		res.Err = fmt.Errorf("the endpoint answered %s; redirects are not followed (Location: %s)", statusText(code), truncate(loc, 200))
	default:
		res.Retry = true
		res.Err = fmt.Errorf("the endpoint answered %s", statusText(code))
	}
	return res
}

// describe turns an error of http.Client.Do into a short message for the
// delivery log.
func (s *Sender) describe(ctx context.Context, err error) error {
	var ae *AddrError
	if errors.As(err, &ae) {
		return &attemptError{ae.Error(), err}
	}
	if ctx.Err() != nil {
		return &attemptError{"the attempt was interrupted: " + ctx.Err().Error(), errors.Join(ctx.Err(), err)}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &attemptError{fmt.Sprintf("no response within %s", s.timeout), err}
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		msg := "the host could not be resolved"
		if de.IsNotFound {
			msg = "the host was not found in DNS"
		}
		return &attemptError{msg, err}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// Drop the `Post "<url>": ` prefix.
		return &attemptError{ue.Err.Error(), err}
	}
	return &attemptError{err.Error(), err}
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return strconv.Itoa(code) + " " + t
	}
	return strconv.Itoa(code)
}

// truncate cuts s to at most n bytes of valid UTF-8, marking a cut with …
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Outcome returns the coinpulse.Attempt to record for r, the result of a
// delivery's attempts-th attempt (attempts counts this one), made at now:
//   - delivered: DeliveryDelivered;
//   - Gone: DeliveryFailed, and the endpoint is disabled with the reason
//     "the endpoint answered 410 Gone";
//   - Retry: DeliveryPending with NextAttemptAt from NextAttempt, or, when
//     the retries have run out, DeliveryFailed and the endpoint disabled
//     with a reason such as "a delivery failed 11 times over about 32
//     hours; last error: the endpoint answered 503 Service Unavailable";
//   - otherwise DeliveryFailed (the endpoint stays enabled).
//
// Error is r.Err's message, cut to 300 bytes (empty when delivered), and
// StatusCode is r.StatusCode.
func (s *Sender) Outcome(r Result, attempts int, now time.Time) coinpulse.Attempt {
	a := coinpulse.Attempt{At: now, StatusCode: r.StatusCode}
	if r.Err == nil {
		a.Status = coinpulse.DeliveryDelivered
		return a
	}
	a.Error = truncate(r.Err.Error(), maxErrorLen)
	switch {
	case r.Gone:
		a.Status = coinpulse.DeliveryFailed
		a.DisableEndpoint = "the endpoint answered 410 Gone"
	case r.Retry:
		next, giveUp := NextAttempt(attempts, now, s.rnd)
		if !giveUp {
			a.Status = coinpulse.DeliveryPending
			a.NextAttemptAt = next
			return a
		}
		a.Status = coinpulse.DeliveryFailed
		a.DisableEndpoint = truncate(fmt.Sprintf("a delivery failed %d times over about %s; last error: %s",
			attempts, approx(nominalSpan(attempts)), r.Err.Error()), maxErrorLen)
	default:
		a.Status = coinpulse.DeliveryFailed
	}
	return a
}

// approx writes d roughly, in one unit: "35 seconds", "43 minutes", "32
// hours", "3 days".
func approx(d time.Duration) string {
	unit, name := time.Second, "second"
	switch {
	case d >= 72*time.Hour:
		unit, name = 24*time.Hour, "day"
	case d >= 2*time.Hour:
		unit, name = time.Hour, "hour"
	case d >= 2*time.Minute:
		unit, name = time.Minute, "minute"
	}
	n := int64(math.Round(float64(d) / float64(unit)))
	if n == 1 {
		return "1 " + name
	}
	return strconv.FormatInt(n, 10) + " " + name + "s"
}
