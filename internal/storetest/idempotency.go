package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"coinpulse"
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
	if err := s.ReleaseIdempotencyKey(ctx, &stranger); err != nil {
		t.Fatal(err)
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
	if err := s.ReleaseIdempotencyKey(ctx, a); err != nil {
		t.Fatal(err)
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
	if err := s.ReleaseIdempotencyKey(ctx, r); err != nil {
		t.Fatal(err)
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

	// Sweeping.
	late := idemKey(u, coinpulse.ModeLive, "late", "l1")
	late.CreatedAt = t0.Add(time.Hour)
	claim(late, nb)
	n, err := s.DeleteIdempotencyKeys(ctx, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 { // k1 (renewed) live and sandbox, other's k1, empty, k2
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
