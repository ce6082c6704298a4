package coingecko

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

// maxBody bounds an answer: a coin's daily chart since 2013 is about
// 0.5 MB, a page of 250 markets about as much.
const maxBody = 16 << 20

// client calls CoinGecko at no more than its rate, retrying what a retry
// can mend: a 429 after the wait CoinGecko asks for, a 5xx or a broken
// connection after a growing pause.
type client struct {
	base      string // without the trailing "/"
	key       string
	keyHeader string
	http      *http.Client
	interval  time.Duration // between two calls
	retryBase time.Duration
	attempts  int
	log       *slog.Logger

	mu   sync.Mutex
	next time.Time // the earliest the next call may start

	calls int64 // made, for the log; guarded by mu
}

// StatusError is an answer CoinGecko refused with; a retry would not
// mend it.
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
func (c *client) wait(ctx context.Context) error {
	c.mu.Lock()
	now := time.Now()
	at := c.next
	if at.Before(now) {
		at = now
	}
	c.next = at.Add(c.interval)
	c.calls++
	c.mu.Unlock()
	return sleep(ctx, at.Sub(now))
}

// holdOff keeps every call from starting before d from now.
func (c *client) holdOff(d time.Duration) {
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

// get calls path with query q and returns the answer's body.
func (c *client) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var last error
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
		case errors.As(err, &se) && se.Status == http.StatusTooManyRequests:
			c.log.Warn("coingecko: rate limited (429); waiting", "retry_after", retryAfter, "calls_a_minute", int(time.Minute/c.interval), "message", se.Message)
			c.holdOff(retryAfter)
		case errors.As(err, &se) && se.Status < 500:
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w (gave up after %d attempts)", last, c.attempts)
}

// do makes one call. retryAfter is what a 429 asks to wait (a minute when
// it does not say: CoinGecko's rate is per minute).
func (c *client) do(ctx context.Context, u string) (body []byte, retryAfter time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "coinpulse (self-hosted market data API)")
	if c.key != "" {
		req.Header.Set(c.keyHeader, c.key)
	}
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
	se := &StatusError{URL: u, Status: res.StatusCode, Message: upstreamError(body)}
	if res.StatusCode == http.StatusTooManyRequests {
		retryAfter = time.Minute
		if s, err := strconv.Atoi(strings.TrimSpace(res.Header.Get("Retry-After"))); err == nil && s >= 0 {
			retryAfter = time.Duration(min(s, 300)) * time.Second
		}
	}
	return nil, retryAfter, se
}
