package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
)

// userDB opens a store in a schema of its own, closed when t ends, with
// one user.
func userDB(t *testing.T, email string) (*DB, *coinpulse.User) {
	t.Helper()
	url, schema := newSchema(t)
	db, err := openSchema(t, url, schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	u := &coinpulse.User{Email: email}
	if err := db.CreateUser(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	return db, u
}

// A claim of a key whose request is writing under it right now (its row
// locked by the write's transaction) does not wait for that write: it
// returns the key, Busy, at once.
func TestClaimDoesNotWaitForTheKeysWrite(t *testing.T) {
	db, u := userDB(t, "busy@example.com")
	ctx := t.Context()
	o := coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}
	p := &coinpulse.Portfolio{Owner: o, Name: "busy"}
	if err := db.CreatePortfolio(ctx, p, coinpulse.Unlimited); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k := &coinpulse.IdempotencyKey{UserID: u.ID, Mode: coinpulse.ModeLive, Key: "busy", Request: "POST /api/v1/portfolio/1/holdings",
		Digest: "d", RequestID: "req_busy", Claim: "c1", CreatedAt: now, LeaseUntil: now.Add(time.Minute)}
	if _, ok, err := db.ClaimIdempotencyKey(ctx, k, now.Add(-24*time.Hour)); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	// A trade under the claim, held inside its transaction, after the key
	// was marked applied.
	entered, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := db.Trade(coinpulse.WithIdempotencyClaim(ctx, k), o,
			coinpulse.Trade{PortfolioID: p.ID, CoinID: "bitcoin", CoinSymbol: "BTC", CoinName: "Bitcoin", Now: now},
			func(h coinpulse.Holding) (coinpulse.Holding, coinpulse.Transaction, error) {
				close(entered)
				<-gate
				h.Quantity, h.TotalCost = decimal.NewFromInt(1), decimal.NewFromInt(100)
				return h, coinpulse.Transaction{Type: "buy", Quantity: decimal.NewFromInt(1), Price: decimal.NewFromInt(100), Total: decimal.NewFromInt(100)}, nil
			})
		done <- err
	}()
	<-entered
	// Past the lease, as a retry a minute later would claim.
	late := *k
	late.Claim, late.CreatedAt, late.LeaseUntil = "c2", now.Add(2*time.Minute), now.Add(3*time.Minute)
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	held, ok, err := db.ClaimIdempotencyKey(quick, &late, now.Add(-24*time.Hour))
	cancel()
	if err != nil || ok || held == nil || !held.Busy || held.Claim != "c1" {
		t.Errorf("claim while the key's write runs = %+v, %v, %v; want c1's key, Busy, at once", held, ok, err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatalf("the trade under the claim: %v", err)
	}
	held, ok, err = db.ClaimIdempotencyKey(ctx, &late, now.Add(-24*time.Hour))
	if err != nil || ok || held.Busy || held.Status != coinpulse.IdempotencyApplied {
		t.Errorf("claim after the write = %+v, %v, %v; want c1's key, applied, not busy", held, ok, err)
	}
}

// A key older than a day whose row is locked (being claimed anew by
// another request) is in progress for a request not known yet: a claim
// sees it Busy, without the day-old answer or request.
func TestClaimBusyExpiredKey(t *testing.T) {
	db, u := userDB(t, "busy-old@example.com")
	ctx := t.Context()
	now := time.Now()
	old := &coinpulse.IdempotencyKey{UserID: u.ID, Mode: coinpulse.ModeLive, Key: "old", Request: "POST /api/v1/portfolio",
		Digest: "old", RequestID: "req_old", Claim: "c0", CreatedAt: now.Add(-25 * time.Hour), LeaseUntil: now.Add(-25*time.Hour + time.Minute)}
	if _, ok, err := db.ClaimIdempotencyKey(ctx, old, now.Add(-48*time.Hour)); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	old.Status, old.Body = 201, []byte(`{"success":true}`)
	if err := db.FinishIdempotencyKey(ctx, old); err != nil {
		t.Fatal(err)
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE key = 'old' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	k := &coinpulse.IdempotencyKey{UserID: u.ID, Mode: coinpulse.ModeLive, Key: "old", Request: "POST /api/v1/portfolio",
		Digest: "new", RequestID: "req_new", Claim: "c1", CreatedAt: now, LeaseUntil: now.Add(time.Minute)}
	held, ok, err := db.ClaimIdempotencyKey(ctx, k, now.Add(-24*time.Hour))
	if err != nil || ok || held == nil || !held.Busy || held.Answered() || held.RequestID != "" || held.Digest != "new" {
		t.Errorf("claim of a day-old key being claimed anew = %+v, %v, %v; want Busy, unanswered, no request id, this digest", held, ok, err)
	}
}
