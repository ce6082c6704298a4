// Package upstream holds what the feeds that read a market-data API share:
// a client that calls at no more than the API's rate and retries what a
// retry can mend, and the mapping of an API's points onto the grid the
// engine stores.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxBody bounds an answer: a coin's daily chart since 2013 on CoinGecko
// is about 0.5 MB, a page of 250 markets about as much, Binance's 24 h
// tickers of every pair about 1.5 MB.
const maxBody = 16 << 20

// Client calls an API at no more than its rate, retrying what a retry
// can mend: a 429 after the wait the API asks for, a 5xx or a broken
// connection after a growing pause. Its methods are safe for concurrent
// use.
type Client struct {
	name      string // the API's, for the log: "coingecko"
	base      string // without the trailing "/"
	header    http.Header
	http      *http.Client
	interval  time.Duration // between two calls
	retryBase time.Duration
	attempts  int
	log       *slog.Logger
	message   func(body []byte) string

	mu   sync.Mutex
	next time.Time // the earliest the next call may start
}

// Config configures a Client.
type Config struct {
	Name    string // the API's name, for the log
	BaseURL string
	// Header is sent with every call (an API key).
	Header http.Header
	// CallsPerMinute spaces the calls evenly.
	CallsPerMinute int
	// RetryBase is the first pause before a retry, doubled on each
	// further attempt (default 2 s).
	RetryBase time.Duration
	// Attempts is how many times a call is tried (default 6).
	Attempts int
	HTTP     *http.Client // default: one with a 30 s timeout
	Log      *slog.Logger // default slog.Default()
	// Message reads the API's message out of an error answer ("" when
	// there is none).
	Message func(body []byte) string
}

// New returns a client for cfg.
func New(cfg Config) *Client {
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = 2 * time.Second
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 6
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Message == nil {
		cfg.Message = func([]byte) string { return "" }
	}
	return &Client{
		name: cfg.Name, base: strings.TrimSuffix(cfg.BaseURL, "/"), header: cfg.Header, http: cfg.HTTP,
		interval: time.Minute / time.Duration(max(cfg.CallsPerMinute, 1)), retryBase: cfg.RetryBase,
		attempts: cfg.Attempts, log: cfg.Log, message: cfg.Message,
	}
}

// ConfigError is a feed's configuration refused: Field names the field
// of its Config ("BaseURL", "Coins", …), for the caller to name the flag.
type ConfigError struct {
	Field string
	Msg   string
}

func (e *ConfigError) Error() string { return e.Msg }

// Refuse returns a *ConfigError for field, its message formatted.
func Refuse(field, format string, args ...any) error {
	return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ValidURL reports whether raw can be an API's root: http(s), a host, no
// query or fragment.
func ValidURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.RawQuery == "" && u.Fragment == ""
}

// Base returns the API's root, without a trailing "/".
func (c *Client) Base() string { return c.base }

// Header returns a copy of the header sent with every call.
func (c *Client) Header() http.Header { return c.header.Clone() }

// StatusError is an answer the API refused with; a retry would not mend
// it (but a 429's or a 5xx's, which the client retries first).
type StatusError struct {
	URL     string // without the key, which travels in a header
	Status  int
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("GET %s: %d %s", e.URL, e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("GET %s: %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Message)
}

// wait blocks until the rate lets one more call start, and books it.
func (c *Client) wait(ctx context.Context) error {
	c.mu.Lock()
	now := time.Now()
	at := c.next
	if at.Before(now) {
		at = now
	}
	c.next = at.Add(c.interval)
	c.mu.Unlock()
	return sleep(ctx, at.Sub(now))
}

// holdOff keeps every call from starting before d from now.
func (c *Client) holdOff(d time.Duration) {
	c.mu.Lock()
	if t := time.Now().Add(d); t.After(c.next) {
		c.next = t
	}
	c.mu.Unlock()
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Get calls path with query q and returns the answer's body.
func (c *Client) Get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var last error
	told := false // the log has this call's failure
	for attempt := range c.attempts {
		if attempt > 0 {
			// 1, 2, 4, … retry bases, and at least what a 429 asked for
			// (holdOff), which wait then honours.
			if err := sleep(ctx, min(c.retryBase<<(attempt-1), 30*c.retryBase)); err != nil {
				return nil, err
			}
		}
		if err := c.wait(ctx); err != nil {
			return nil, err
		}
		body, retryAfter, err := c.do(ctx, u)
		if err == nil {
			return body, nil
		}
		last = err
		var se *StatusError
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &se) && se.Status == http.StatusTeapot:
			// Banned: no call until the ban ends, this one included.
			c.log.Error(c.name+": banned for calling on after rate limits (418); no call until it ends", "retry_after", retryAfter, "message", se.Message)
			c.holdOff(retryAfter)
			return nil, err
		case errors.As(err, &se) && se.Status == http.StatusTooManyRequests:
			c.log.Warn(c.name+": rate limited (429); waiting", "retry_after", retryAfter, "calls_a_minute", int(time.Minute/c.interval), "message", se.Message)
			c.holdOff(retryAfter)
		case errors.As(err, &se) && se.Status < 500:
			return nil, err
		case !told && attempt < c.attempts-1:
			// Said once a call, not once an attempt: the caller hears of
			// it only when the retries give up, minutes later. (pauses:
			// between the attempts, each of which may take the HTTP
			// client's timeout too.)
			told = true
			c.log.Warn(c.name+": a call failed; retrying", "path", path, "err", err, "retries", c.attempts-1-attempt, "pauses", c.retrySpan(attempt))
		}
	}
	return nil, fmt.Errorf("%w (gave up after %d attempts)", last, c.attempts)
}

// retrySpan is how long Get's pauses before the attempts after attempt
// add up to (a 429's waits aside).
func (c *Client) retrySpan(after int) time.Duration {
	var d time.Duration
	for attempt := after + 1; attempt < c.attempts; attempt++ {
		d += min(c.retryBase<<(attempt-1), 30*c.retryBase)
	}
	return d
}

// do makes one call. retryAfter is what a 429 asks to wait (a minute when
// it does not say: the APIs' rates are per minute; 5 minutes at most), or
// a 418 (Binance's ban of a client that went on after its 429s: up to 3
// days, as it says).
func (c *Client) do(ctx context.Context, u string) (body []byte, retryAfter time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "coinpulse (self-hosted market data API)")
	res, err := c.http.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", u, err)
	}
	defer res.Body.Close()
	body, err = io.ReadAll(io.LimitReader(res.Body, maxBody+1))
	switch {
	case err != nil:
		return nil, 0, fmt.Errorf("GET %s: reading the answer: %w", u, err)
	case len(body) > maxBody:
		return nil, 0, &StatusError{URL: u, Status: res.StatusCode, Message: fmt.Sprintf("answer larger than %d MiB", maxBody>>20)}
	case res.StatusCode == http.StatusOK:
		return body, 0, nil
	}
	se := &StatusError{URL: u, Status: res.StatusCode, Message: c.message(body)}
	if most := map[int]int{http.StatusTooManyRequests: 300, http.StatusTeapot: 3 * 86400}[res.StatusCode]; most > 0 {
		retryAfter = time.Minute
		if s, err := strconv.Atoi(strings.TrimSpace(res.Header.Get("Retry-After"))); err == nil && s >= 0 {
			retryAfter = time.Duration(min(s, most)) * time.Second
		}
	}
	return nil, retryAfter, se
}
