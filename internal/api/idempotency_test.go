package api

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"coinpulse"
)

// sendKeyed sends a request with a JSON body and headers (name, value
// pairs) through the server's handler.
func sendKeyed(t *testing.T, srv *Server, method, target, key, body string, headers ...string) *response {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return serve(t, srv, req)
}

// countTransactions returns how many transactions the portfolio holds.
func countTransactions(t *testing.T, srv *Server, key string, portfolio int64) int {
	t.Helper()
	res := do(t, srv, "GET", fmt.Sprintf("/api/v1/portfolio/%d/transactions?per_page=250", portfolio), key)
	return len(want[[]jsonTransaction](t, res, http.StatusOK))
}

func wantReplay(t *testing.T, res, first *response) {
	t.Helper()
	if res.Status != first.Status || string(res.Data) != string(first.Data) {
		t.Fatalf("replay: %d %s; want the first answer, %d %s", res.Status, res.Data, first.Status, first.Data)
	}
	if res.Header.Get("Idempotent-Replayed") != "true" || res.Header.Get("Original-Request") != first.Header.Get("X-Request-Id") {
		t.Errorf("replay headers: Idempotent-Replayed %q, Original-Request %q; want true and %q",
			res.Header.Get("Idempotent-Replayed"), res.Header.Get("Original-Request"), first.Header.Get("X-Request-Id"))
	}
	if res.Meta["timestamp"] != first.Meta["timestamp"] {
		t.Errorf("replay's meta.timestamp %v, want the first answer's %v", res.Meta["timestamp"], first.Meta["timestamp"])
	}
}

// A trade sent twice with one Idempotency-Key is applied once; the second
// gets the first answer back, under either prefix, whatever request id.
func TestIdempotencyKeyReplays(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	u, key := proUser(t)
	p := newPortfolio(t, srv, key, "Idempotent")
	buy := `{"coin_id":"bitcoin","quantity":0.5,"buy_price":100}`
	target := fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID)

	first := sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "buy-1")
	want[jsonHolding](t, first, http.StatusCreated)
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a first answer says Idempotent-Replayed: %q", first.Header.Get("Idempotent-Replayed"))
	}
	again := sendKeyed(t, srv, "POST", strings.TrimPrefix(target, "/api"), key, buy, "Idempotency-Key", "buy-1", "X-Request-Id", "my-retry-1")
	wantReplay(t, again, first)
	if again.Header.Get("X-Request-Id") != "my-retry-1" {
		t.Errorf("replay's X-Request-Id %q, want this request's", again.Header.Get("X-Request-Id"))
	}
	if n := countTransactions(t, srv, key, p.ID); n != 1 {
		t.Fatalf("%d transactions after a buy sent twice with one key; want 1", n)
	}

	// Without a key, or with a new one, the same buy is applied again.
	want[jsonHolding](t, send(t, srv, "POST", target, key, buy), http.StatusCreated)
	want[jsonHolding](t, sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "buy-2"), http.StatusCreated)
	if n := countTransactions(t, srv, key, p.ID); n != 3 {
		t.Fatalf("%d transactions; want 3", n)
	}

	// The same key with another body, path or method: refused, and nothing
	// is applied.
	for _, c := range []struct{ method, target, body string }{
		{"POST", target, `{"coin_id":"bitcoin","quantity":0.6,"buy_price":100}`},
		{"POST", target, buy + " "},
		{"POST", fmt.Sprintf("/api/v1/portfolio/%d/sync", p.ID), ""},
		{"PATCH", fmt.Sprintf("/api/v1/portfolio/%d", p.ID), `{"name":"x"}`},
	} {
		res := sendKeyed(t, srv, c.method, c.target, key, c.body, "Idempotency-Key", "buy-1")
		wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
		if d := res.Error.Details; len(d) != 1 || d[0].Field != "Idempotency-Key" || !strings.Contains(d[0].Message, first.Header.Get("X-Request-Id")) {
			t.Errorf("%s %s with a used key: details %+v; want Idempotency-Key naming the first request", c.method, c.target, d)
		}
	}
	if got := want[jsonPortfolio](t, do(t, srv, "GET", fmt.Sprintf("/api/v1/portfolio/%d", p.ID), key), http.StatusOK); got.Name != "Idempotent" || got.SyncedAt != nil {
		t.Errorf("a refused PATCH or sync changed the portfolio: %+v", got)
	}

	// Keys are the account's: another key of the same account replays,
	// a sandbox key of the account does not, nor does another account.
	sameAccount, _ := newKey(t, u, coinpulse.ModeLive, rw, nil)
	wantReplay(t, sendKeyed(t, srv, "POST", target, sameAccount, buy, "Idempotency-Key", "buy-1"), first)
	sandbox, _ := newKey(t, u, coinpulse.ModeTest, rw, nil)
	res := sendKeyed(t, srv, "POST", "/api/v1/portfolio", sandbox, `{"name":"Idempotent"}`, "Idempotency-Key", "buy-1")
	if res.Status != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a sandbox key's use of a live key's Idempotency-Key: %d %s", res.Status, res.Raw)
	}
	res = sendKeyed(t, srv, "POST", "/api/v1/portfolio", proKey(t), `{"name":"Idempotent"}`, "Idempotency-Key", "buy-1")
	if res.Status != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("another account's use of an Idempotency-Key: %d %s", res.Status, res.Raw)
	}

	// A PATCH takes a key too.
	patch := fmt.Sprintf("/api/v1/portfolio/%d", p.ID)
	pf := sendKeyed(t, srv, "PATCH", patch, key, `{"name":"Renamed"}`, "Idempotency-Key", "rename-1")
	want[jsonPortfolio](t, pf, http.StatusOK)
	wantReplay(t, sendKeyed(t, srv, "PATCH", patch, key, `{"name":"Renamed"}`, "Idempotency-Key", "rename-1"), pf)
}

// A request that fails changes nothing and leaves its key free: sent
// again once it can succeed, it is applied.
func TestIdempotencyKeyFailureReleases(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	key := proKey(t)
	p := newPortfolio(t, srv, key, "Release")
	h := newHolding(t, srv, key, p.ID, `{"coin_id":"bitcoin","quantity":1,"buy_price":100}`)
	sell := fmt.Sprintf("/api/v1/holdings/%d/sell", h.ID)
	body := `{"quantity":2,"sell_price":150}`

	wantError(t, sendKeyed(t, srv, "POST", sell, key, body, "Idempotency-Key", "sell-1"), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	newHolding(t, srv, key, p.ID, `{"coin_id":"bitcoin","quantity":1,"buy_price":100}`)
	res := sendKeyed(t, srv, "POST", sell, key, body, "Idempotency-Key", "sell-1")
	want[jsonTrade](t, res, http.StatusCreated)
	if res.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the failed request's answer was replayed")
	}
	wantReplay(t, sendKeyed(t, srv, "POST", sell, key, body, "Idempotency-Key", "sell-1"), res)
	if n := countTransactions(t, srv, key, p.ID); n != 3 {
		t.Errorf("%d transactions; want 2 buys and 1 sell", n)
	}
}

// A bad key is a 422 that applies nothing; on a GET or DELETE the header
// is ignored.
func TestIdempotencyKeyInvalid(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	key := proKey(t)
	for _, c := range []struct {
		name    string
		headers []string
		msg     string
	}{
		{"empty", []string{"Idempotency-Key", ""}, "is empty"},
		{"too long", []string{"Idempotency-Key", strings.Repeat("k", 256)}, "256 characters"},
		{"not ASCII", []string{"Idempotency-Key", "clé"}, "printable ASCII"},
		{"control", []string{"Idempotency-Key", "a\x01b"}, "printable ASCII"},
		{"twice", []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}, "more than once"},
	} {
		res := sendKeyed(t, srv, "POST", "/api/v1/portfolio", key, `{"name":"bad key"}`, c.headers...)
		wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
		if d := res.Error.Details; len(d) != 1 || d[0].Field != "Idempotency-Key" || !strings.Contains(d[0].Message, c.msg) {
			t.Errorf("%s: details %+v; want Idempotency-Key: %s", c.name, d, c.msg)
		}
	}
	want[jsonPortfolio](t, sendKeyed(t, srv, "POST", "/api/v1/portfolio", key, `{"name":"long key"}`, "Idempotency-Key", strings.Repeat("k", 255)), http.StatusCreated)
	if ps := want[[]jsonPortfolio](t, do(t, srv, "GET", "/api/v1/portfolio", key), http.StatusOK); len(ps) != 1 {
		t.Errorf("%d portfolios; want only the one with a good key", len(ps))
	}
	want[[]jsonPortfolio](t, do(t, srv, "GET", "/api/v1/portfolio", key, "Idempotency-Key", ""), http.StatusOK)
	p := newPortfolio(t, srv, key, "deleted")
	for range 2 {
		res := do(t, srv, "DELETE", fmt.Sprintf("/api/v1/portfolio/%d", p.ID), key, "Idempotency-Key", "del-1")
		if res.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("a DELETE was replayed")
		}
	}
}

// Many sends of one request with one key at once: it is applied once,
// and every answer is the first one's, replayed, or a 409 to retry.
func TestIdempotencyKeyConcurrent(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	key := proKey(t)
	p := newPortfolio(t, srv, key, "Concurrent")
	target := fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID)
	buy := `{"coin_id":"ethereum","quantity":"0.25","buy_price":"2000"}`
	const n = 16
	results := make([]*response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "race")
		})
	}
	close(start)
	wg.Wait()
	var firsts, replays, conflicts int
	for _, res := range results {
		switch {
		case res.Status == http.StatusCreated && res.Header.Get("Idempotent-Replayed") == "":
			firsts++
		case res.Status == http.StatusCreated:
			replays++
		case res.Status == http.StatusConflict && res.Error.Code == string(coinpulse.CodeConflict) && res.Header.Get("Retry-After") == "1":
			conflicts++
		default:
			t.Errorf("unexpected answer %d %s", res.Status, res.Raw)
		}
	}
	if firsts != 1 {
		t.Errorf("%d first answers (%d replays, %d conflicts); want 1", firsts, replays, conflicts)
	}
	if c := countTransactions(t, srv, key, p.ID); c != 1 {
		t.Fatalf("%d transactions after %d sends with one key; want 1", c, n)
	}
	res := sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "race")
	if res.Status != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("after the race: %d %s; want the replay", res.Status, res.Raw)
	}
	wantError(t, sendKeyed(t, srv, "POST", target, key, `{}`, "Idempotency-Key", "race"), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	// The outcomes are counted.
	wantMetrics(t, srv.Handler(),
		`coinpulse_idempotency_keys_total{outcome="claimed"}`,
		`coinpulse_idempotency_keys_total{outcome="replayed"}`,
		`coinpulse_idempotency_keys_total{outcome="mismatch"}`,
	)
}

// A key whose request was cut off (its node crashed) before it applied
// anything is claimed anew once its lease has passed, and the request
// runs; one whose request was applied but not answered is a 409, never a
// second application; a key older than 24 hours is free.
func TestIdempotencyKeyInterruptedAndExpired(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	u, key := proUser(t)
	body := `{"name":"Cut off"}`
	req := httptest.NewRequest("POST", "/v1/portfolio", nil)
	request, digest := requestDigest(req, []byte(body))
	if request != "POST /api/v1/portfolio" {
		t.Errorf("request named %q", request)
	}
	claim := func(k string, created time.Time, status int) {
		t.Helper()
		rec := &coinpulse.IdempotencyKey{UserID: u.ID, Mode: coinpulse.ModeLive, Key: k, Request: request, Digest: digest,
			RequestID: "req_crashed", Claim: "c-" + k, CreatedAt: created, LeaseUntil: created.Add(idempotencyLease)}
		ctx := context.Background()
		if _, ok, err := shared.store.ClaimIdempotencyKey(ctx, rec, created.Add(-IdempotencyKeep)); err != nil || !ok {
			t.Fatalf("claim %s: %v, %v", k, ok, err)
		}
		switch {
		case status == coinpulse.IdempotencyApplied:
			// As a write under the claim leaves it: applied, unanswered.
			p := &coinpulse.Portfolio{Owner: coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}, Name: "applied " + k, CreatedAt: created}
			if err := shared.store.CreatePortfolio(coinpulse.WithIdempotencyClaim(ctx, rec), p, coinpulse.Unlimited); err != nil {
				t.Fatal(err)
			}
			// The write renewed the lease from now; as if it had been
			// made at created, and its node had stopped then.
			if err := shared.store.EndIdempotencyLease(ctx, rec, rec.LeaseUntil); err != nil {
				t.Fatal(err)
			}
		case status != 0:
			rec.Status, rec.Body = status, []byte(`{"success":true,"data":{"stale":true},"meta":{"timestamp":"2026-01-01T00:00:00.000Z","request_id":"req_crashed"}}`)
			if err := shared.store.FinishIdempotencyKey(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Now()
	claim("cut", now.Add(-2*idempotencyLease), 0)
	claim("lost", now.Add(-2*idempotencyLease), coinpulse.IdempotencyApplied)
	claim("running", now, 0)
	claim("storing", now, coinpulse.IdempotencyApplied)
	claim("old", now.Add(-IdempotencyKeep-time.Minute), http.StatusCreated)
	portfolios := func() int {
		return len(want[[]jsonPortfolio](t, do(t, srv, "GET", "/api/v1/portfolio", key), http.StatusOK))
	}
	before := portfolios() // the two applied ones

	res := sendKeyed(t, srv, "POST", "/api/v1/portfolio", key, body, "Idempotency-Key", "cut")
	want[jsonPortfolio](t, res, http.StatusCreated)
	if res.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a cut-off key was replayed: %s", res.Raw)
	}
	wantReplay(t, sendKeyed(t, srv, "POST", "/api/v1/portfolio", key, body, "Idempotency-Key", "cut"), res)

	res = sendKeyed(t, srv, "POST", "/api/v1/portfolio", key, body, "Idempotency-Key", "lost")
	wantError(t, res, http.StatusConflict, coinpulse.CodeConflict)
	if !strings.Contains(res.Error.Message, "was applied") || !strings.Contains(res.Error.Message, "req_crashed") {
		t.Errorf("applied key whose answer was lost: %s", res.Error.Message)
	}
	for _, k := range []string{"running", "storing"} {
		res = sendKeyed(t, srv, "POST", "/api/v1/portfolio", key, body, "Idempotency-Key", k)
		wantError(t, res, http.StatusConflict, coinpulse.CodeConflict)
		if res.Header.Get("Retry-After") != "1" || !strings.Contains(res.Error.Message, "still being answered") {
			t.Errorf("key %s in progress: Retry-After %q, %s", k, res.Header.Get("Retry-After"), res.Error.Message)
		}
	}
	res = sendKeyed(t, srv, "POST", "/api/v1/portfolio", key, body, "Idempotency-Key", "old")
	want[jsonPortfolio](t, res, http.StatusCreated)
	if res.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a key older than a day was replayed: %s", res.Raw)
	}
	if n := portfolios(); n != before+2 {
		t.Errorf("%d portfolios; want %d: the cut-off key's and the expired key's", n, before+2)
	}
}

// A request that held its key past the lease, and lost it to a request
// sent again with the key, cannot apply its write: it is refused with a
// 409, and only the request that holds the key applies.
func TestIdempotencyKeyFencedOut(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	u, key := proUser(t)
	body := `{"name":"Fenced"}`
	request, digest := requestDigest(httptest.NewRequest("POST", "/api/v1/portfolio", nil), []byte(body))
	old := time.Now().Add(-2 * idempotencyLease)
	slow := &coinpulse.IdempotencyKey{UserID: u.ID, Mode: coinpulse.ModeLive, Key: "slow", Request: request, Digest: digest,
		RequestID: "req_slow", Claim: "c-slow", CreatedAt: old, LeaseUntil: old.Add(idempotencyLease)}
	if _, ok, err := shared.store.ClaimIdempotencyKey(context.Background(), slow, old.Add(-IdempotencyKeep)); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	res := sendKeyed(t, srv, "POST", "/api/v1/portfolio", key, body, "Idempotency-Key", "slow")
	want[jsonPortfolio](t, res, http.StatusCreated)
	// The slow request's write, at last: refused.
	p := &coinpulse.Portfolio{Owner: coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}, Name: "Fenced"}
	err := shared.store.CreatePortfolio(coinpulse.WithIdempotencyClaim(context.Background(), slow), p, coinpulse.Unlimited)
	if coinpulse.ErrorCode(err) != coinpulse.CodeConflict || !strings.Contains(coinpulse.ErrorMessage(err), "was not applied") {
		t.Errorf("the fenced-out write: %v; want CONFLICT saying it was not applied", err)
	}
	if n := len(want[[]jsonPortfolio](t, do(t, srv, "GET", "/api/v1/portfolio", key), http.StatusOK)); n != 1 {
		t.Errorf("%d portfolios; want 1", n)
	}
	wantReplay(t, sendKeyed(t, srv, "POST", "/api/v1/portfolio", key, body, "Idempotency-Key", "slow"), res)
}

// A server's Run deletes the keys older than a day as it starts.
func TestIdempotencyKeySweep(t *testing.T) {
	t.Parallel()
	testServer(t)
	u := newUser(t, coinpulse.TierPro, nil)
	now := time.Now()
	held := func(k string, created time.Time) bool {
		t.Helper()
		rec := &coinpulse.IdempotencyKey{UserID: u.ID, Mode: coinpulse.ModeLive, Key: k, Request: "POST /api/v1/portfolio", Digest: "d",
			RequestID: "req_sweep", Claim: rand.Text(), CreatedAt: created, LeaseUntil: created.Add(3 * IdempotencyKeep)} // not claimed anew for its lease
		h, _, err := shared.store.ClaimIdempotencyKey(context.Background(), rec, now.Add(-3*IdempotencyKeep))
		if err != nil {
			t.Fatal(err)
		}
		return h != nil
	}
	held("old", now.Add(-IdempotencyKeep-time.Minute))
	held("new", now.Add(-IdempotencyKeep+time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go New(Config{Store: shared.store, Market: shared.engine, Log: quiet}).Run(ctx)
	for deadline := time.Now().Add(10 * time.Second); held("old", now); {
		if time.Now().After(deadline) {
			t.Fatal("a key older than a day is still there 10 s after Run began")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !held("new", now) {
		t.Error("the sweep deleted a key younger than a day")
	}
}

// faultyStore commits a trade and then, once, fails as a real failure
// would: "reset", the commit's acknowledgement lost (a PostgreSQL
// failover); "panic", a bug after the commit; "panic-before", a bug
// before it; "slow", the first trade held (a lock wait, a pool queue)
// until gate closes, after saying so on entered.
type faultyStore struct {
	coinpulse.Store
	mode          string
	fired         atomic.Bool
	gate, entered chan struct{}
}

// ClaimIdempotencyKey, in mode "claim-lost", makes the claim and then
// loses its acknowledgement, once.
func (f *faultyStore) ClaimIdempotencyKey(ctx context.Context, k *coinpulse.IdempotencyKey, notBefore time.Time) (*coinpulse.IdempotencyKey, bool, error) {
	held, ok, err := f.Store.ClaimIdempotencyKey(ctx, k, notBefore)
	if err == nil && f.mode == "claim-lost" && f.fired.CompareAndSwap(false, true) {
		return nil, false, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return held, ok, err
}

func (f *faultyStore) Trade(ctx context.Context, o coinpulse.Owner, t coinpulse.Trade, apply coinpulse.TradeFunc) (coinpulse.Holding, coinpulse.Transaction, error) {
	if f.fired.Load() {
		return f.Store.Trade(ctx, o, t, apply)
	}
	switch f.mode {
	case "slow":
		f.fired.Store(true)
		close(f.entered)
		select {
		case <-f.gate:
		case <-ctx.Done(): // as a lock wait ends
			return coinpulse.Holding{}, coinpulse.Transaction{}, fmt.Errorf("trade: lock portfolio: %w", ctx.Err())
		}
	case "panic-before":
		f.fired.Store(true)
		panic("boom before the commit")
	}
	h, tx, err := f.Store.Trade(ctx, o, t, apply)
	if err == nil && f.fired.CompareAndSwap(false, true) {
		switch f.mode {
		case "reset":
			return h, tx, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		case "panic":
			panic("boom after the commit")
		}
	}
	return h, tx, err
}

// A request that applied its write and then failed (a lost commit
// acknowledgement: 503; a panic: 500) leaves its key applied and
// unanswered: sent again, it is a 409 saying it was applied, never a
// second trade. One that failed before its write is run again.
func TestIdempotencyKeyFailureAfterTheWrite(t *testing.T) {
	t.Parallel()
	testServer(t)
	for _, c := range []struct {
		mode       string
		status     int
		appliedNow bool
	}{
		{"reset", http.StatusServiceUnavailable, true},
		{"panic", http.StatusInternalServerError, true},
		{"panic-before", http.StatusInternalServerError, false},
	} {
		t.Run(c.mode, func(t *testing.T) {
			srv := New(Config{Store: &faultyStore{Store: shared.store, mode: c.mode}, Market: shared.engine, Log: quiet})
			key := proKey(t)
			p := newPortfolio(t, srv, key, "Faulty")
			target := fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID)
			buy := `{"coin_id":"bitcoin","quantity":1,"buy_price":100}`
			first := sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "faulty")
			if first.Status != c.status {
				t.Fatalf("first: %d %s; want %d", first.Status, first.Raw, c.status)
			}
			again := sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "faulty")
			if c.appliedNow {
				wantError(t, again, http.StatusConflict, coinpulse.CodeConflict)
				if !strings.Contains(again.Error.Message, "was applied") || again.Header.Get("Retry-After") != "" {
					t.Errorf("sent again: %s (Retry-After %q); want a 409 saying it was applied", again.Error.Message, again.Header.Get("Retry-After"))
				}
			} else {
				want[jsonHolding](t, again, http.StatusCreated)
			}
			if n := countTransactions(t, srv, key, p.ID); n != 1 {
				t.Errorf("%d transactions; want 1", n)
			}
		})
	}
}

// A request still running past its lease (held up before its write)
// loses its key to a request sent again with it, which runs; the first
// can then no longer commit: one trade.
func TestIdempotencyKeyLeasePassesWhileRunning(t *testing.T) {
	t.Parallel()
	testServer(t)
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	fs := &faultyStore{Store: shared.store, mode: "slow", gate: make(chan struct{}), entered: make(chan struct{})}
	srv := New(Config{Store: fs, Market: shared.engine, Log: quiet, Clock: clock})
	key := proKey(t)
	p := newPortfolio(t, srv, key, "Slow")
	target := fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID)
	buy := `{"coin_id":"bitcoin","quantity":1,"buy_price":100}`

	done := make(chan *response)
	go func() { done <- sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "slow") }()
	<-fs.entered
	offset.Store(int64(2 * idempotencyLease)) // the first request has run two leases
	again := sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "slow")
	want[jsonHolding](t, again, http.StatusCreated)
	close(fs.gate)
	first := <-done
	wantError(t, first, http.StatusConflict, coinpulse.CodeConflict)
	if !strings.Contains(first.Error.Message, "was not applied") {
		t.Errorf("the fenced-out first request: %s", first.Error.Message)
	}
	if n := countTransactions(t, srv, key, p.ID); n != 1 {
		t.Errorf("%d transactions; want 1", n)
	}
	wantReplay(t, sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "slow"), again)
}

// A simulated failure (X-Sandbox-Simulate) is answered before the key is
// claimed: the key stays free, and the request sent again without the
// simulation runs.
func TestIdempotencyKeySimulatedFailure(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	u := newUser(t, coinpulse.TierPro, nil)
	sandbox, _ := newKey(t, u, coinpulse.ModeTest, rw, nil)
	body := `{"name":"Simulated"}`
	res := sendKeyed(t, srv, "POST", "/api/v1/portfolio", sandbox, body, "Idempotency-Key", "sim", "X-Sandbox-Simulate", "server_error")
	wantError(t, res, http.StatusInternalServerError, coinpulse.CodeServerError)
	res = sendKeyed(t, srv, "POST", "/api/v1/portfolio", sandbox, body, "Idempotency-Key", "sim")
	want[jsonPortfolio](t, res, http.StatusCreated)
	if res.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the request after a simulated failure was a replay: %s", res.Raw)
	}
	wantReplay(t, sendKeyed(t, srv, "POST", "/api/v1/portfolio", sandbox, body, "Idempotency-Key", "sim"), res)
}

// A client that hangs up while its keyed request runs does not cut the
// request short: it runs to its end, and its answer is kept for the
// request sent again.
func TestIdempotencyKeyClientHangsUp(t *testing.T) {
	t.Parallel()
	testServer(t)
	fs := &faultyStore{Store: shared.store, mode: "slow", gate: make(chan struct{}), entered: make(chan struct{})}
	srv := New(Config{Store: fs, Market: shared.engine, Log: quiet})
	key := proKey(t)
	p := newPortfolio(t, srv, key, "Hang-up")
	target := fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID)
	buy := `{"coin_id":"bitcoin","quantity":1,"buy_price":100}`

	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("POST", target, strings.NewReader(buy)).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", "hang-up")
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Handler().ServeHTTP(httptest.NewRecorder(), req)
	}()
	<-fs.entered
	cancel() // the client hangs up
	close(fs.gate)
	<-done
	res := sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "hang-up")
	if res.Status != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("sent again after hanging up: %d %s (replayed %q); want the first answer, replayed", res.Status, res.Raw, res.Header.Get("Idempotent-Replayed"))
	}
	if n := countTransactions(t, srv, key, p.ID); n != 1 {
		t.Errorf("%d transactions; want 1", n)
	}
}

// A keyed request runs for a lease at most: one the database keeps
// waiting longer is a 503 that applied nothing, and its key is free for
// the request sent again.
func TestIdempotencyKeyRunsALeaseAtMost(t *testing.T) {
	t.Parallel()
	testServer(t)
	fs := &faultyStore{Store: shared.store, mode: "slow", gate: make(chan struct{}), entered: make(chan struct{})}
	srv := New(Config{Store: fs, Market: shared.engine, Log: quiet})
	srv.keyLease = 300 * time.Millisecond
	key := proKey(t)
	p := newPortfolio(t, srv, key, "Too long")
	target := fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID)
	buy := `{"coin_id":"bitcoin","quantity":1,"buy_price":100}`
	res := sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "long")
	wantError(t, res, http.StatusServiceUnavailable, coinpulse.CodeUnavailable)
	if res.Header.Get("Retry-After") != "1" || !strings.Contains(res.Error.Message, "did not finish within a minute") {
		t.Errorf("a keyed request past its lease: Retry-After %q, %s", res.Header.Get("Retry-After"), res.Error.Message)
	}
	want[jsonHolding](t, sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "long"), http.StatusCreated)
	if n := countTransactions(t, srv, key, p.ID); n != 1 {
		t.Errorf("%d transactions; want 1", n)
	}
	close(fs.gate)
}

// A claim made but whose acknowledgement was lost (a 503) is let go: the
// request sent again runs, rather than being told for a minute that it is
// still being answered.
func TestIdempotencyKeyClaimLost(t *testing.T) {
	t.Parallel()
	testServer(t)
	srv := New(Config{Store: &faultyStore{Store: shared.store, mode: "claim-lost"}, Market: shared.engine, Log: quiet})
	key := proKey(t)
	p := newPortfolio(t, srv, key, "Claim lost")
	target := fmt.Sprintf("/api/v1/portfolio/%d/holdings", p.ID)
	buy := `{"coin_id":"bitcoin","quantity":1,"buy_price":100}`
	wantError(t, sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "lost"), http.StatusServiceUnavailable, coinpulse.CodeUnavailable)
	want[jsonHolding](t, sendKeyed(t, srv, "POST", target, key, buy, "Idempotency-Key", "lost"), http.StatusCreated)
	if n := countTransactions(t, srv, key, p.ID); n != 1 {
		t.Errorf("%d transactions; want 1", n)
	}
}
