package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"coinpulse"
	"coinpulse/internal/ledger"
)

// idemKey returns a key of u in mode m, claimed by claim at t0.
func idemKey(u *coinpulse.User, m coinpulse.Mode, key, claim string) *coinpulse.IdempotencyKey {
	return &coinpulse.IdempotencyKey{
		UserID: u.ID, Mode: m, Key: key, Request: "POST /v1/portfolio", Digest: "d1",
		RequestID: "req_" + claim, Claim: claim, CreatedAt: t0, LeaseUntil: t0.Add(time.Minute),
	}
}

// Idempotency keys: a claim holds the key until it is finished (its
// answer is kept) or released; keys are apart by user and mode, and one
// made before notBefore is claimed anew.
func testIdempotencyKeys(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "idem@example.com")
	other := newUser(t, s, "idem-other@example.com")
	nb := t0.Add(-24 * time.Hour)

	claim := func(k *coinpulse.IdempotencyKey, notBefore time.Time) (*coinpulse.IdempotencyKey, bool) {
		t.Helper()
		held, ok, err := s.ClaimIdempotencyKey(ctx, k, notBefore)
		if err != nil {
			t.Fatalf("ClaimIdempotencyKey(%s, %s): %v", k.Key, k.Claim, err)
		}
		if ok != (held == nil) {
			t.Fatalf("ClaimIdempotencyKey(%s, %s) = %+v, %v: a key is either claimed or held", k.Key, k.Claim, held, ok)
		}
		return held, ok
	}

	a := idemKey(u, coinpulse.ModeLive, "k1", "c1")
	if _, ok := claim(a, nb); !ok {
		t.Fatal("first claim of k1 not won")
	}
	held, ok := claim(idemKey(u, coinpulse.ModeLive, "k1", "c2"), nb)
	if ok {
		t.Fatal("second claim of k1 won while the first is in progress")
	}
	want := coinpulse.IdempotencyKey{UserID: u.ID, Mode: coinpulse.ModeLive, Key: "k1", Request: "POST /v1/portfolio", Digest: "d1",
		RequestID: "req_c1", Claim: "c1", CreatedAt: us(t0), LeaseUntil: us(t0.Add(time.Minute))}
	if diff := cmp.Diff(want, *held); diff != "" {
		t.Errorf("the held key (-want +got):\n%s", diff)
	}
	// Apart by mode and by user.
	if _, ok := claim(idemKey(u, coinpulse.ModeTest, "k1", "c3"), nb); !ok {
		t.Error("k1 in sandbox mode is held by the live k1")
	}
	if _, ok := claim(idemKey(other, coinpulse.ModeLive, "k1", "c4"), nb); !ok {
		t.Error("another user's k1 is held by the first user's")
	}

	// Only the claim's holder finishes it.
	stranger := *a
	stranger.Claim, stranger.Status, stranger.Body = "c2", 500, []byte("no")
	if err := s.FinishIdempotencyKey(ctx, &stranger); err != nil {
		t.Fatal(err)
	}
	if released, err := s.ReleaseIdempotencyKey(ctx, &stranger); err != nil || released {
		t.Fatalf("another claim's release: %v, %v; want false", released, err)
	}
	if held, _ := claim(idemKey(u, coinpulse.ModeLive, "k1", "c5"), nb); held == nil || held.Status != 0 || held.Claim != "c1" {
		t.Fatalf("after another claim's finish and release, k1 = %+v; want c1's, in progress", held)
	}
	a.Status, a.Body = 201, []byte(`{"success":true}`)
	if err := s.FinishIdempotencyKey(ctx, a); err != nil {
		t.Fatal(err)
	}
	held, _ = claim(idemKey(u, coinpulse.ModeLive, "k1", "c6"), nb)
	if held == nil || held.Status != 201 || string(held.Body) != `{"success":true}` || held.RequestID != "req_c1" {
		t.Fatalf("finished k1 = %+v; want c1's 201 and its body", held)
	}
	// A finished key is neither finished again nor released.
	again := *a
	again.Status, again.Body = 200, []byte("x")
	if err := s.FinishIdempotencyKey(ctx, &again); err != nil {
		t.Fatal(err)
	}
	if released, err := s.ReleaseIdempotencyKey(ctx, a); err != nil || released {
		t.Fatalf("a finished key's release: %v, %v; want false", released, err)
	}
	if held, _ = claim(idemKey(u, coinpulse.ModeLive, "k1", "c7"), nb); held == nil || held.Status != 201 {
		t.Fatalf("k1 after a second finish and a release = %+v; want the first answer", held)
	}
	// An empty body is kept as empty.
	e := idemKey(u, coinpulse.ModeLive, "empty", "e1")
	claim(e, nb)
	e.Status = 204
	if err := s.FinishIdempotencyKey(ctx, e); err != nil {
		t.Fatal(err)
	}
	if held, _ = claim(idemKey(u, coinpulse.ModeLive, "empty", "e2"), nb); held == nil || held.Status != 204 || len(held.Body) != 0 {
		t.Fatalf("empty = %+v; want 204 with no body", held)
	}

	// A released key is free again.
	r := idemKey(u, coinpulse.ModeLive, "k2", "r1")
	claim(r, nb)
	if released, err := s.ReleaseIdempotencyKey(ctx, r); err != nil || !released {
		t.Fatalf("release: %v, %v; want true", released, err)
	}
	if _, ok := claim(idemKey(u, coinpulse.ModeLive, "k2", "r2"), nb); !ok {
		t.Error("a released key is still held")
	}

	// A key made before notBefore is claimed anew, finished or not.
	if _, ok := claim(idemKey(u, coinpulse.ModeLive, "k1", "c8"), t0.Add(time.Second)); !ok {
		t.Error("k1, made before notBefore, still holds")
	}
	if held, _ = claim(idemKey(u, coinpulse.ModeLive, "k1", "c9"), nb); held == nil || held.Claim != "c8" || held.Status != 0 {
		t.Errorf("k1 after its renewal = %+v; want c8's, in progress", held)
	}

	// A key in progress whose lease has passed is claimed anew: nothing
	// was applied under it.
	lapsed := idemKey(u, coinpulse.ModeLive, "lapsed", "p1")
	claim(lapsed, nb)
	late2 := idemKey(u, coinpulse.ModeLive, "lapsed", "p2")
	late2.CreatedAt = lapsed.LeaseUntil.Add(-time.Microsecond)
	if _, ok := claim(late2, nb); ok {
		t.Error("a key in progress was claimed anew before its lease passed")
	}
	late2.CreatedAt = lapsed.LeaseUntil
	if _, ok := claim(late2, nb); !ok {
		t.Error("a key in progress was not claimed anew once its lease passed")
	}

	// Sweeping.
	late := idemKey(u, coinpulse.ModeLive, "late", "l1")
	late.CreatedAt = t0.Add(time.Hour)
	claim(late, nb)
	n, err := s.DeleteIdempotencyKeys(ctx, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 { // k1 (renewed) live and sandbox, other's k1, empty, k2; not lapsed, renewed at t0+1m
		t.Errorf("DeleteIdempotencyKeys removed %d keys; want 5", n)
	}
	if _, ok := claim(idemKey(u, coinpulse.ModeLive, "late", "l2"), nb); ok {
		t.Error("a key made after the sweep's time was swept")
	}
	if _, ok := claim(idemKey(u, coinpulse.ModeLive, "k2", "r3"), nb); !ok {
		t.Error("a key made before the sweep's time was kept")
	}
}

func testIdempotencyConcurrent(t *testing.T, s coinpulse.Store) {
	idempotencyConcurrent(t, []coinpulse.Store{s})
}

// Many claims of one key at once, through nodes in turn: exactly one
// wins, the others see it.
func idempotencyConcurrent(t *testing.T, nodes []coinpulse.Store) {
	u := newUser(t, nodes[0], "idem-race@example.com")
	const n = 12
	for _, node := range nodes {
		warmUp(t, node, n)
	}
	for round := range 3 {
		key := fmt.Sprintf("race-%d", round)
		var won atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				held, ok, err := nodes[i%len(nodes)].ClaimIdempotencyKey(t.Context(), idemKey(u, coinpulse.ModeLive, key, fmt.Sprint(i)), t0.Add(-time.Hour))
				switch {
				case err != nil:
					t.Errorf("claim %d: %v", i, err)
				case ok:
					won.Add(1)
				case held == nil || held.Key != key:
					t.Errorf("claim %d lost to %+v", i, held)
				}
			})
		}
		close(start)
		wg.Wait()
		if got := won.Load(); got != 1 {
			t.Errorf("round %d: %d claims of one key won; want 1", round, got)
		}
	}
}

// A write under a claim (WithIdempotencyClaim) marks the key applied in
// its own transaction: a key so marked is never claimed anew, is not
// released, and keeps the answer it is finished with. A failed write
// marks nothing.
func testIdempotencyApplied(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "idem-applied@example.com")
	o := live(u)
	nb := t0.Add(-24 * time.Hour)
	k := idemKey(u, coinpulse.ModeLive, "applied", "a1")
	if _, ok, err := s.ClaimIdempotencyKey(ctx, k, nb); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	under := coinpulse.WithIdempotencyClaim(ctx, k)
	// A write that fails marks nothing: the key is released.
	full := &coinpulse.Portfolio{Owner: o, Name: "none", CreatedAt: t0}
	wantCode(t, s.CreatePortfolio(under, full, 0), coinpulse.CodePortfolioLimitReached)
	if released, err := s.ReleaseIdempotencyKey(ctx, k); err != nil || !released {
		t.Fatalf("release after a failed write: %v, %v; want true", released, err)
	}
	if _, ok, err := s.ClaimIdempotencyKey(ctx, k, nb); err != nil || !ok {
		t.Fatalf("claim again: %v, %v", ok, err)
	}
	p := &coinpulse.Portfolio{Owner: o, Name: "applied", CreatedAt: t0}
	if err := s.CreatePortfolio(under, p, coinpulse.Unlimited); err != nil {
		t.Fatalf("CreatePortfolio under the claim: %v", err)
	}
	after := idemKey(u, coinpulse.ModeLive, "applied", "a2")
	after.CreatedAt = k.LeaseUntil.Add(time.Hour)
	held, ok, err := s.ClaimIdempotencyKey(ctx, after, nb)
	if err != nil || ok || held.Status != coinpulse.IdempotencyApplied || held.Claim != "a1" {
		t.Fatalf("claim past the lease of an applied key = %+v, %v, %v; want a1's, applied", held, ok, err)
	}
	// The write renewed the lease: a whole lease from the write.
	renewed := held.LeaseUntil
	if !renewed.After(time.Now().Add(30 * time.Second)) {
		t.Errorf("lease after the write: until %v; want a minute from now", renewed)
	}
	if released, err := s.ReleaseIdempotencyKey(ctx, k); err != nil || released {
		t.Fatalf("release of an applied key: %v, %v; want false", released, err)
	}
	// Ending the lease: only by the claim's holder.
	stranger := *k
	stranger.Claim = "a9"
	if err := s.EndIdempotencyLease(ctx, &stranger, t0); err != nil {
		t.Fatal(err)
	}
	early := idemKey(u, coinpulse.ModeLive, "applied", "a3")
	early.CreatedAt = t0.Add(time.Second)
	if held, _, _ = s.ClaimIdempotencyKey(ctx, early, nb); held == nil || !held.LeaseUntil.Equal(renewed) {
		t.Fatalf("after another claim ended the lease: %+v; want the lease unchanged", held)
	}
	if err := s.EndIdempotencyLease(ctx, k, t0); err != nil {
		t.Fatal(err)
	}
	if held, _, _ = s.ClaimIdempotencyKey(ctx, early, nb); held == nil || held.Status != coinpulse.IdempotencyApplied || !held.LeaseUntil.Equal(us(t0)) {
		t.Fatalf("after its lease ended: %+v; want applied, lease until t0", held)
	}
	// A key in progress with nothing applied whose lease ended is claimed
	// anew.
	idle := idemKey(u, coinpulse.ModeLive, "idle", "i1")
	if _, ok, err := s.ClaimIdempotencyKey(ctx, idle, nb); err != nil || !ok {
		t.Fatalf("claim idle: %v, %v", ok, err)
	}
	if err := s.EndIdempotencyLease(ctx, idle, t0); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.ClaimIdempotencyKey(ctx, idemKey(u, coinpulse.ModeLive, "idle", "i2"), nb); err != nil || !ok {
		t.Fatalf("claim of a key whose lease ended with nothing applied: %v, %v; want it claimed", ok, err)
	}
	k.Status, k.Body = 422, []byte(`{"success":false}`)
	if err := s.FinishIdempotencyKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if held, _, _ = s.ClaimIdempotencyKey(ctx, after, nb); held == nil || held.Status != 422 {
		t.Fatalf("an applied key finished with a 422 = %+v", held)
	}
}

// A request that lost its key (its lease passed, and a request sent
// again with the key claimed it) can no longer write: every write a POST
// or PATCH makes refuses, and changes nothing.
func testIdempotencyFenced(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "idem-fenced@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "fenced")
	h, _ := trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(lot("1", "100")))
	a := newAlert(t, s, o, "bitcoin", "100", coinpulse.Above, false)
	w := newWebhook(t, s, o, "https://example.com/fenced")
	nb := t0.Add(-24 * time.Hour)

	first := idemKey(u, coinpulse.ModeLive, "fenced", "f1")
	if _, ok, err := s.ClaimIdempotencyKey(ctx, first, nb); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	retry := idemKey(u, coinpulse.ModeLive, "fenced", "f2")
	retry.CreatedAt = first.LeaseUntil
	if _, ok, err := s.ClaimIdempotencyKey(ctx, retry, nb); err != nil || !ok {
		t.Fatalf("the retry's claim past the lease: %v, %v", ok, err)
	}
	under := coinpulse.WithIdempotencyClaim(ctx, first)
	writes := map[string]error{
		"CreatePortfolio": s.CreatePortfolio(under, &coinpulse.Portfolio{Owner: o, Name: "late", CreatedAt: t0}, coinpulse.Unlimited),
		"RecordValue":     s.RecordValue(under, o, p.ID, 0, coinpulse.ValuePoint{At: t0, TotalValue: d("1"), TotalCost: d("1")}),
		"CreateAlert": s.CreateAlert(under, &coinpulse.Alert{Owner: o, CoinID: "bitcoin", CoinSymbol: "BTC", TargetPrice: d("1"),
			Condition: coinpulse.Below, CreatedAt: t0}, coinpulse.Unlimited),
		"CreateWebhook": s.CreateWebhook(under, &coinpulse.Webhook{Owner: o, URL: "https://example.com/late", Secret: "whsec_c2VjcmV0", CreatedAt: t0}, coinpulse.Unlimited),
		"EnqueueDelivery": s.EnqueueDelivery(under, &coinpulse.Delivery{Kind: coinpulse.KindWebhook, Owner: o, EndpointID: w.ID,
			EventID: "msg_fenced", EventType: coinpulse.EventWebhookTest, Payload: []byte(`{}`), CreatedAt: t0}),
	}
	_, err := s.UpdatePortfolio(under, o, p.ID, coinpulse.PortfolioPatch{Name: ptr("renamed")}, t0)
	writes["UpdatePortfolio"] = err
	_, _, err = s.Trade(under, o, coinTrade(p.ID, "ethereum", t0), ledger.BuyFunc(lot("1", "1")))
	writes["Trade (buy)"] = err
	_, _, err = s.Trade(under, o, coinpulse.Trade{HoldingID: h.ID, Now: t0}, ledger.SellFunc(lot("1", "1")))
	writes["Trade (sell)"] = err
	_, err = s.ToggleAlert(under, o, a.ID, coinpulse.Unlimited, t0.Add(time.Hour))
	writes["ToggleAlert"] = err
	for name, err := range writes {
		if coinpulse.ErrorCode(err) != coinpulse.CodeConflict {
			t.Errorf("%s by a request that lost its key: %v; want CONFLICT", name, err)
		}
	}
	// Nothing changed.
	got := getPortfolio(t, s, o, p.ID)
	if got.Name != "fenced" || got.SyncedAt != nil || len(got.Holdings) != 1 || !got.Holdings[0].Quantity.Equal(d("1")) {
		t.Errorf("the portfolio changed: %+v", got)
	}
	if ps, _, err := s.Portfolios(ctx, o, coinpulse.AllPortfolios); err != nil || len(ps) != 1 {
		t.Errorf("portfolios: %d, %v; want 1", len(ps), err)
	}
	if got := getAlert(t, s, o, a.ID); !got.IsActive {
		t.Errorf("the alert was toggled")
	}
	if as, _, err := s.Alerts(ctx, o, coinpulse.AllAlerts); err != nil || len(as) != 1 {
		t.Errorf("alerts: %d, %v; want 1", len(as), err)
	}
	if ws, err := s.Webhooks(ctx, o); err != nil || len(ws) != 1 {
		t.Errorf("webhooks: %d, %v; want 1", len(ws), err)
	}
	if ds, err := s.Deliveries(ctx, o, w.ID, 0, 10); err != nil || len(ds) != 0 {
		t.Errorf("deliveries: %d, %v; want none", len(ds), err)
	}
	// The retry, holding the key, writes.
	if err := s.CreatePortfolio(coinpulse.WithIdempotencyClaim(ctx, retry), &coinpulse.Portfolio{Owner: o, Name: "retry", CreatedAt: t0}, coinpulse.Unlimited); err != nil {
		t.Errorf("the retry's write: %v", err)
	}
}

// A write under a claim renews the key's lease from its commit, however
// long it took: its request then has a whole lease to keep its answer.
func testIdempotencyRenewedAtCommit(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "idem-renewed@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "renewed")
	now := time.Now()
	k := idemKey(u, coinpulse.ModeLive, "renewed", "r1")
	k.CreatedAt, k.LeaseUntil = now, now.Add(300*time.Millisecond)
	if _, ok, err := s.ClaimIdempotencyKey(ctx, k, now.Add(-time.Hour)); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	slow := func(h coinpulse.Holding) (coinpulse.Holding, coinpulse.Transaction, error) {
		time.Sleep(500 * time.Millisecond) // longer than the lease
		return ledger.BuyFunc(lot("1", "1"))(h)
	}
	if _, _, err := s.Trade(coinpulse.WithIdempotencyClaim(ctx, k), o, coinTrade(p.ID, "bitcoin", now), slow); err != nil {
		t.Fatalf("Trade under the claim: %v", err)
	}
	committed := time.Now()
	late := idemKey(u, coinpulse.ModeLive, "renewed", "r2")
	late.CreatedAt = committed
	held, ok, err := s.ClaimIdempotencyKey(ctx, late, now.Add(-time.Hour))
	if err != nil || ok || held.Status != coinpulse.IdempotencyApplied {
		t.Fatalf("after the write = %+v, %v, %v; want r1's key, applied", held, ok, err)
	}
	if !held.LeaseUntil.After(committed.Add(100 * time.Millisecond)) {
		t.Errorf("lease until %v, the write committed at %v: want about a lease (300 ms) after the commit", held.LeaseUntil, committed)
	}
}
