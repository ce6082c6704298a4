package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"coinpulse"
)

// Idempotency keys, as Stripe has them: a POST or PATCH sent with an
// Idempotency-Key header is applied once. The first request with a key
// claims it in the store (so every node sees it), runs, and, if it
// succeeds (2xx), leaves its answer under the key for 24 hours; a request
// sent again with the key gets that answer back, marked
// Idempotent-Replayed: true, instead of being applied again. A request
// that fails changes nothing (every write is one transaction), so its key
// is released and may be sent again. The key is the account's in one
// mode: every key of the account shares it, live and sandbox apart.
//
// While the first request runs, the same key is a 409 CONFLICT (retry in a
// second); with another method, path, query or body, a 422.
//
// A request whose node stopped before it was answered (a crash: a
// graceful stop answers every request first) leaves its key in progress.
// Every write a POST or PATCH makes marks the key applied in the write's
// own transaction, and commits only while the request holds the key
// (coinpulse.WithIdempotencyClaim). So once the lease has passed, a key
// still unmarked was certainly not applied: a request sent again with it
// takes it over and runs (the first, should it still be running, can
// then no longer commit). A key marked applied whose answer was never
// stored (the node stopped, or the request failed after its commit) is
// a 409 saying so, until the key expires.
const (
	idempotencyHeader = "Idempotency-Key"
	// IdempotencyKeep is how long a key, and the answer under it, is kept.
	IdempotencyKeep = 24 * time.Hour
	// idempotencyLease is how long a request holds its key in progress
	// with nothing applied before a request sent again with the key may
	// take it over (and how long, from its write, it has to keep its
	// answer): well past what a handler's writes take; the body is read
	// before the key is claimed.
	idempotencyLease = time.Minute
	// maxIdempotencyKey is the longest key, in bytes.
	maxIdempotencyKey = 255
	// settleTimeout bounds the store's work on a key, which goes on after
	// the client hung up: that is when a key matters most.
	settleTimeout = 10 * time.Second
	// claimReleaseTimeout is the part of settleTimeout kept, when a claim
	// fails, to let go of what it may have claimed: the 503 comes within
	// settleTimeout in all.
	claimReleaseTimeout = 2 * time.Second
	// idempotencySweep is how often a node deletes the keys older than
	// IdempotencyKeep (every node does; all but the first find none).
	idempotencySweep = 10 * time.Minute
)

// takesIdempotencyKey reports whether rt applies a request's
// Idempotency-Key: the routes that create or change something. A DELETE
// is idempotent already (a second one is a 404), and a GET changes
// nothing; on them the header is ignored.
func takesIdempotencyKey(rt Route) bool {
	return rt.Method == http.MethodPost || rt.Method == http.MethodPatch
}

// claimIdempotencyKey claims the request's Idempotency-Key, if it has one,
// before the handler runs, and returns the claim, to be settled with the
// answer. A key already answered is answered again here: replayed is
// true, and the handler must not run.
func (s *Server) claimIdempotencyKey(e *exchange, r *http.Request) (claim *coinpulse.IdempotencyKey, replayed bool, err error) {
	vals, ok := r.Header[idempotencyHeader]
	if !ok || e.principal == nil {
		return nil, false, nil
	}
	if len(vals) > 1 {
		return nil, false, coinpulse.ValidationError(idempotencyHeader, "is given more than once; send one key")
	}
	key := vals[0]
	if msg := idempotencyKeyProblem(key); msg != "" {
		return nil, false, coinpulse.ValidationError(idempotencyHeader, msg)
	}
	raw, err := readRaw(r)
	if err != nil {
		return nil, false, err
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	request, digest := requestDigest(r, raw)
	now := s.clock()
	k := &coinpulse.IdempotencyKey{
		UserID: e.principal.user.ID, Mode: e.principal.key.Mode, Key: key,
		Request: request, Digest: digest,
		RequestID: e.id, Claim: rand.Text(), CreatedAt: now, LeaseUntil: now.Add(s.keyLease),
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), settleTimeout-claimReleaseTimeout)
	defer cancel()
	held, claimed, err := s.store.ClaimIdempotencyKey(ctx, k, now.Add(-IdempotencyKeep))
	outcome := s.metrics.idempotency.WithLabelValues
	switch {
	case err != nil:
		if coinpulse.ErrorCode(err) == coinpulse.CodeConflict {
			e.Header().Set("Retry-After", "1")
		} else {
			// The claim may have been made, its acknowledgement lost: a
			// claim that ran nothing is let go, so that the request sent
			// again is not told it is still being answered.
			release, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), claimReleaseTimeout)
			s.store.ReleaseIdempotencyKey(release, k)
			cancel()
		}
		return nil, false, err
	case claimed:
		outcome("claimed").Inc()
		e.capturing = true
		return k, false, nil
	case held.Digest != k.Digest:
		outcome("mismatch").Inc()
		what := "another request"
		if held.Request == k.Request {
			what = "another body or query"
		}
		return nil, false, coinpulse.ValidationError(idempotencyHeader, fmt.Sprintf(
			"was used at %s with %s (%s, request %s); a key stands for one request, so send a new request with a new key",
			held.CreatedAt.Format(time.RFC3339), what, held.Request, held.RequestID))
	case !held.Answered() && (held.Busy || now.Before(held.LeaseUntil)):
		outcome("in_progress").Inc()
		e.Header().Set("Retry-After", "1")
		first := "The request first sent with this Idempotency-Key"
		if held.RequestID != "" {
			first += " (request " + held.RequestID + ")"
		}
		return nil, false, coinpulse.Errorf(coinpulse.CodeConflict, "%s is still being answered; send it again in a second.", first)
	case !held.Answered():
		outcome("applied_unanswered").Inc()
		// Applied (a key in progress with nothing applied is claimed anew
		// once its lease has passed), its answer lost.
		return nil, false, coinpulse.Errorf(coinpulse.CodeConflict,
			"The request first sent with this Idempotency-Key (request %s, at %s) was applied, but its answer was not kept (its server stopped or failed before keeping it), so there is none to give again: look up its result. It is not applied twice.",
			held.RequestID, held.CreatedAt.Format(time.RFC3339))
	}
	outcome("replayed").Inc()
	replay(e, held)
	return nil, true, nil
}

// requestDigest names r for messages ("POST /api/v1/portfolio", under
// either prefix) and digests what makes it the request it is: its method,
// path, query and body (raw).
func requestDigest(r *http.Request, raw []byte) (request, digest string) {
	path := r.URL.EscapedPath()
	if strings.HasPrefix(path, "/v1/") {
		path = "/api" + path
	}
	d := sha256.New()
	fmt.Fprintf(d, "%s %s?%s\n", r.Method, path, r.URL.RawQuery)
	d.Write(raw)
	return r.Method + " " + path, hex.EncodeToString(d.Sum(nil))
}

// idempotencyKeyProblem says what is wrong with key, or "".
func idempotencyKeyProblem(key string) string {
	if key == "" {
		return "is empty; send 1 to 255 characters, such as a UUID"
	}
	if len(key) > maxIdempotencyKey {
		return fmt.Sprintf("is %d characters long; the most is %d", len(key), maxIdempotencyKey)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return "may hold only printable ASCII characters, such as a UUID's"
		}
	}
	return ""
}

// replay answers with k's stored answer: its status and body, but for
// meta.request_id, which is this request's (the first one's is in
// Original-Request).
func replay(e *exchange, k *coinpulse.IdempotencyKey) {
	body := k.Body
	old := `"request_id":"` + k.RequestID + `"`
	if i := bytes.LastIndex(body, []byte(old)); i >= 0 {
		body = bytes.Join([][]byte{body[:i], []byte(`"request_id":"` + e.id + `"`), body[i+len(old):]}, nil)
	}
	h := e.Header()
	h["Content-Type"] = hdrJSON
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["Idempotent-Replayed"] = []string{"true"}
	h["Original-Request"] = []string{k.RequestID}
	writeBody(e, k.Status, body) // in the coding this request takes: the key keeps the identity bytes
}

// settleIdempotencyKey keeps the answer under the key claim holds, if the
// request succeeded; otherwise it releases the key, or, if the request
// applied its write, ends the key's lease. It goes on if the client hung
// up: a client that lost the answer is who sends the key again.
func (s *Server) settleIdempotencyKey(e *exchange, r *http.Request, claim *coinpulse.IdempotencyKey) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), settleTimeout)
	defer cancel()
	ok := e.wrote && e.status >= 200 && e.status < 300
	claim.Status, claim.Body = e.status, e.captured
	e.capturing, e.captured = false, nil
	settle := func() error {
		if ok {
			return s.store.FinishIdempotencyKey(ctx, claim)
		}
		// A failure that applied nothing frees the key. One that did (its
		// write committed, then the commit's acknowledgement was lost, or
		// the handler failed or panicked) has no answer worth giving
		// again: its lease ends now, so that the key reads as applied and
		// unanswered (a 409) rather than in progress.
		released, err := s.store.ReleaseIdempotencyKey(ctx, claim)
		if err == nil && !released {
			err = s.store.EndIdempotencyLease(ctx, claim, s.clock())
		}
		return err
	}
	// A database that dropped a connection is often back a moment later,
	// and a key left unsettled is refused for a minute, or for a day.
	err := retrying(ctx, []time.Duration{100 * time.Millisecond, time.Second}, settle)
	if err != nil {
		// The key stays in progress: applied, a request sent again with
		// it is refused; not applied, it is claimed anew after the lease.
		s.log.Error("idempotency key not settled", "err", err, "status", e.status, "request_id", e.id)
	}
}

// sweepIdempotencyKeys deletes the keys older than IdempotencyKeep, at
// once and every idempotencySweep, until ctx ends.
func (s *Server) sweepIdempotencyKeys(ctx context.Context) {
	t := time.NewTicker(idempotencySweep)
	defer t.Stop()
	for {
		n, err := s.store.DeleteIdempotencyKeys(ctx, s.clock().Add(-IdempotencyKeep))
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("expired idempotency keys not deleted; the next sweep tries again", "err", err)
		case n > 0:
			s.log.Debug("expired idempotency keys deleted", "keys", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// retrying calls fn until it succeeds, once more after each of waits,
// unless ctx ends first; it returns fn's last error.
func retrying(ctx context.Context, waits []time.Duration, fn func() error) error {
	err := fn()
	for _, wait := range waits {
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = fn()
	}
	return err
}

// errKeyedTooLong is the cause of a keyed request's end when it ran
// longer than its lease: by then a request sent again with the key may
// claim it, and the database has kept this one waiting far too long.
var errKeyedTooLong = coinpulse.Errorf(coinpulse.CodeUnavailable,
	"The request did not finish within a minute: the database kept it waiting. Send it again with the same Idempotency-Key, which gives its answer if it was applied, and applies it if it was not.")
