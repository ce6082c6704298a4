// Package storetest is the contract suite every coinpulse.Store passes:
// internal/sqlite and internal/postgres run it against a real database, so
// both engines behave alike. It also holds the helpers their tests share.
package storetest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"coinpulse"
)

// Run runs the contract suite. open must return a new, empty store each
// time it is called, and close it when t ends (t.Cleanup); subtests call it
// in parallel. Run returns nothing: failures are reported through t.
func Run(t *testing.T, open func(t *testing.T) coinpulse.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s coinpulse.Store)
	}{
		{"Ping", testPing},
		{"Users/CreateAndGet", testCreateUser},
		{"Users/Defaults", testCreateUserDefaults},
		{"Users/DuplicateEmail", testDuplicateEmail},
		{"Users/NotFound", testUserNotFound},
		{"Users/HasUsers", testHasUsers},
		{"Users/SetTier", testSetUserTier},
		{"Keys/CreateAndByHash", testCreateKey},
		{"Keys/ByHashNotFound", testKeyNotFound},
		{"Keys/Invalid", testCreateKeyInvalid},
		{"Keys/ListOldestFirst", testKeysByUser},
		{"Keys/Revoke", testRevokeKey},
		{"Keys/Limit", testKeyLimit},
		{"Keys/LimitIgnoresExpired", testKeyLimitExpired},
		{"Keys/LimitConcurrent", testKeyLimitConcurrent},
		{"Keys/Touch", testTouchKeys},
		{"History/PutAndRange", testHistoryRange},
		{"History/Replace", testHistoryReplace},
		{"History/BothIntervals", testHistoryIntervals},
		{"History/Prune", testPruneHistory},
		{"History/Empty", testHistoryEmpty},
		{"History/LongSeries", testHistoryLong},
		{"History/Invalid", testHistoryInvalid},
		{"KV", testKV},
		{"Portfolios/CreateAndGet", testCreatePortfolio},
		{"Portfolios/Paging", testPortfoliosPaging},
		{"Portfolios/CreateInvalid", testCreatePortfolioInvalid},
		{"Portfolios/Version", testPortfolioVersion},
		{"Portfolios/OwnerScoping", testPortfolioOwnerScoping},
		{"Portfolios/Limit", testPortfolioLimit},
		{"Portfolios/LimitConcurrent", testPortfolioLimitConcurrent},
		{"Portfolios/Update", testUpdatePortfolio},
		{"Portfolios/DeleteCascades", testDeletePortfolio},
		{"Portfolios/TradeBuy", testTradeBuy},
		{"Portfolios/TradeSell", testTradeSell},
		{"Portfolios/TradeFailureChangesNothing", testTradeFailure},
		{"Portfolios/TradeWrongHolding", testTradeWrongHolding},
		{"Portfolios/TradeBeforeLatest", testTradeBeforeLatest},
		{"Portfolios/RealizedPLSurvivesDeleteHolding", testRealizedPL},
		{"Portfolios/TransactionsNewestFirst", testTransactionsPaging},
		{"Portfolios/ValueHistory", testValueHistory},
		{"Portfolios/DecimalsExact", testPortfolioDecimals},
		{"Portfolios/TimesUTC", testPortfolioTimes},
		{"Portfolios/ConcurrentSells", testConcurrentSells},
		{"Portfolios/ConcurrentFirstBuys", testConcurrentBuys},
		{"Portfolios/ConcurrentTradeTimes", testConcurrentTradeTimes},
		{"Portfolios/DeleteHoldingWhileTrading", testDeleteHoldingWhileTrading},
		{"Usage/RoundTrip", testUsageRoundTrip},
		{"Usage/RecentNewestFirst", testUsageRecent},
		{"Usage/RecentByTime", testUsageRecentByTime},
		{"Usage/RecentTies", testUsageRecentTies},
		{"Usage/CountedOnly", testUsageCounted},
		{"Usage/MonthBoundary", testUsageMonthBoundary},
		{"Usage/MarkMonth", testUsageMarkMonth},
		{"Usage/Admitted", testUsageAdmitted},
		{"Usage/Daily", testUsageDaily},
		{"Usage/Percentiles", testUsagePercentiles},
		{"Usage/Keys", testUsageKeys},
		{"Usage/KeyDaily", testUsageKeyDaily},
		{"Usage/UsersIsolated", testUsageIsolated},
		{"Usage/Empty", testUsageEmpty},
		{"Usage/UnknownUser", testUsageUnknownUser},
		{"Usage/InvalidMode", testUsageInvalid},
		{"Usage/Retention", testUsageRetention},
		{"Usage/Concurrent", testUsageConcurrent},
		{"Usage/Snapshot", testUsageSnapshot},
		{"Alerts/CreateAndGet", testCreateAlert},
		{"Alerts/CreateInvalid", testCreateAlertInvalid},
		{"Alerts/OwnerScoping", testAlertOwnerScoping},
		{"Alerts/Paging", testAlertsPaging},
		{"Alerts/Limit", testAlertLimit},
		{"Alerts/LimitConcurrent", testAlertLimitConcurrent},
		{"Alerts/ToggleRearms", testToggleRearms},
		{"Alerts/Armed", testArmedAlerts},
		{"Alerts/Fired", testFiredAlerts},
		{"Alerts/FireOnce", testFireOnce},
		{"Alerts/FireBeforeArming", testFireBeforeArming},
		{"Alerts/FireConcurrent", testFireConcurrent},
		{"Alerts/FireDisabledOrRearmed", testFireStale},
		{"Alerts/FireEnqueues", testFireEnqueues},
		{"Alerts/FireMany", testFireMany},
		{"Webhooks/CRUD", testCreateWebhook},
		{"Webhooks/OwnerScoping", testWebhookOwnerScoping},
		{"Webhooks/Limit", testWebhookLimit},
		{"Deliveries/Enqueue", testEnqueueDelivery},
		{"Deliveries/ClaimLease", testClaimLease},
		{"Deliveries/ClaimConcurrent", testClaimConcurrent},
		{"Deliveries/RecordAttempt", testRecordAttempt},
		{"Deliveries/Log", testDeliveryLog},
		{"Sessions/Lifecycle", testSessions},
		{"Sessions/LoginThrottle", testLoginThrottle},
		{"Idempotency/Keys", testIdempotencyKeys},
		{"Idempotency/Concurrent", testIdempotencyConcurrent},
		{"Idempotency/Applied", testIdempotencyApplied},
		{"Idempotency/Fenced", testIdempotencyFenced},
		{"Idempotency/RenewedAtCommit", testIdempotencyRenewedAtCommit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, open(t))
		})
	}
}

// t0 is the suite's reference time: UTC, with nanoseconds that stores
// must truncate to microseconds.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// us returns t as stores return it: UTC, whole microseconds.
func us(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func ptr[T any](v T) *T { return &v }

// wantCode fails t unless err is a *coinpulse.Error of kind code.
func wantCode(t *testing.T, err error, code coinpulse.Code) {
	t.Helper()
	var e *coinpulse.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("error = %v, want a *coinpulse.Error with code %s", err, code)
	}
}

// wantUTC fails t unless every non-nil time is in UTC.
func wantUTC(t *testing.T, what string, times ...*time.Time) {
	t.Helper()
	for i, tm := range times {
		if tm != nil && tm.Location() != time.UTC {
			t.Errorf("%s: time %d (%v) is in %v, want UTC", what, i, tm, tm.Location())
		}
	}
}

func userTimes(u *coinpulse.User) []*time.Time {
	return []*time.Time{&u.CreatedAt, &u.UpdatedAt, u.TierExpiresAt}
}

func keyTimes(k *coinpulse.APIKey) []*time.Time {
	return []*time.Time{&k.CreatedAt, k.ExpiresAt, k.LastUsedAt, k.RevokedAt}
}

// newUser creates a free user with the given e-mail address.
func newUser(t *testing.T, s coinpulse.Store, email string) *coinpulse.User {
	t.Helper()
	u := &coinpulse.User{Email: email, PasswordHash: "$argon2id$v=19$m=65536,t=1,p=4$c2FsdA$aGFzaA", Tier: coinpulse.TierFree, CreatedAt: t0}
	if err := s.CreateUser(t.Context(), u); err != nil {
		t.Fatalf("CreateUser(%s): %v", email, err)
	}
	return u
}

// makeKey returns a new key record of the user, created at createdAt.
func makeKey(t *testing.T, userID int64, createdAt time.Time) *coinpulse.APIKey {
	t.Helper()
	_, k, err := coinpulse.NewAPIKey(userID, "key", coinpulse.ModeLive, coinpulse.Permissions{Read: true})
	if err != nil {
		t.Fatal(err)
	}
	k.CreatedAt = createdAt
	return k
}

// newKey creates a key of the user, created at createdAt.
func newKey(t *testing.T, s coinpulse.Store, userID int64, createdAt time.Time) *coinpulse.APIKey {
	t.Helper()
	k := makeKey(t, userID, createdAt)
	if err := s.CreateKey(t.Context(), k); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	return k
}

// keyByHash returns the stored key or fails t.
func keyByHash(t *testing.T, s coinpulse.Store, hash string) *coinpulse.APIKey {
	t.Helper()
	k, err := s.KeyByHash(t.Context(), hash)
	if err != nil {
		t.Fatalf("KeyByHash: %v", err)
	}
	return k
}

// epoch returns the store's auth epoch or fails t.
func epoch(t *testing.T, s coinpulse.Store) int64 {
	t.Helper()
	e, err := s.AuthEpoch(t.Context())
	if err != nil {
		t.Fatalf("AuthEpoch: %v", err)
	}
	return e
}

func testPing(t *testing.T, s coinpulse.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func testCreateUser(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := &coinpulse.User{
		Email:         "Alice.Liddell@Example.com",
		PasswordHash:  "$argon2id$v=19$m=65536,t=1,p=4$c2FsdA$aGFzaA",
		Tier:          coinpulse.TierPro,
		TierExpiresAt: ptr(t0.Add(30 * 24 * time.Hour).In(time.FixedZone("X", 7200))),
		CreatedAt:     t0,
	}
	if err := s.CreateUser(ctx, u); err != nil {
		t.Fatalf("CreateUser: %v", err)
	}
	if u.ID == 0 {
		t.Errorf("CreateUser left ID 0")
	}
	want := &coinpulse.User{
		ID:            u.ID,
		Email:         "Alice.Liddell@Example.com",
		PasswordHash:  "$argon2id$v=19$m=65536,t=1,p=4$c2FsdA$aGFzaA",
		Tier:          coinpulse.TierPro,
		TierExpiresAt: ptr(us(t0.Add(30 * 24 * time.Hour))),
		CreatedAt:     us(t0),
		UpdatedAt:     us(t0),
	}
	if diff := cmp.Diff(want, u); diff != "" {
		t.Errorf("user after CreateUser mismatch (-want +got):\n%s", diff)
	}

	got, err := s.UserByID(ctx, u.ID)
	if err != nil {
		t.Fatalf("UserByID: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UserByID mismatch (-want +got):\n%s", diff)
	}
	wantUTC(t, "UserByID", userTimes(got)...)

	for _, email := range []string{"Alice.Liddell@Example.com", "alice.liddell@example.com", "ALICE.LIDDELL@EXAMPLE.COM"} {
		got, err := s.UserByEmail(ctx, email)
		if err != nil {
			t.Fatalf("UserByEmail(%s): %v", email, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("UserByEmail(%s) mismatch (-want +got):\n%s", email, diff)
		}
		wantUTC(t, "UserByEmail", userTimes(got)...)
	}

	// A second user gets another ID.
	v := newUser(t, s, "bob@example.com")
	if v.ID == u.ID {
		t.Errorf("two users share ID %d", u.ID)
	}
}

func testCreateUserDefaults(t *testing.T, s coinpulse.Store) {
	before := time.Now().Truncate(time.Microsecond)
	u := &coinpulse.User{Email: "carol@example.com"}
	if err := s.CreateUser(t.Context(), u); err != nil {
		t.Fatalf("CreateUser: %v", err)
	}
	after := time.Now()
	if u.Tier != coinpulse.TierFree {
		t.Errorf("Tier = %q, want %q", u.Tier, coinpulse.TierFree)
	}
	if u.CreatedAt.Before(before) || u.CreatedAt.After(after) || !u.UpdatedAt.Equal(u.CreatedAt) {
		t.Errorf("CreatedAt, UpdatedAt = %v, %v; want equal, between %v and %v", u.CreatedAt, u.UpdatedAt, before, after)
	}
	got, err := s.UserByID(t.Context(), u.ID)
	if err != nil {
		t.Fatalf("UserByID: %v", err)
	}
	if diff := cmp.Diff(u, got); diff != "" {
		t.Errorf("UserByID mismatch (-want +got):\n%s", diff)
	}
}

func testDuplicateEmail(t *testing.T, s coinpulse.Store) {
	first := newUser(t, s, "dave@example.com")
	for _, email := range []string{"dave@example.com", "Dave@Example.COM"} {
		err := s.CreateUser(t.Context(), &coinpulse.User{Email: email, CreatedAt: t0})
		wantCode(t, err, coinpulse.CodeConflict)
	}
	got, err := s.UserByEmail(t.Context(), "DAVE@example.com")
	if err != nil {
		t.Fatalf("UserByEmail: %v", err)
	}
	if got.ID != first.ID {
		t.Errorf("UserByEmail found user %d, want the first, %d", got.ID, first.ID)
	}

	// Beyond ASCII, the same: Unicode lower case, and one letter however
	// it is composed (precomposed Ä, or A and a combining diaeresis).
	// Neither engine's lower() did this.
	umlaut := newUser(t, s, "Ärger@Bücher.example")
	for _, email := range []string{"ärger@bücher.example", "ÄRGER@BÜCHER.EXAMPLE", "A\u0308rger@Bu\u0308cher.example", "a\u0308rger@bu\u0308cher.example"} {
		wantCode(t, s.CreateUser(t.Context(), &coinpulse.User{Email: email, CreatedAt: t0}), coinpulse.CodeConflict)
		got, err := s.UserByEmail(t.Context(), email)
		if err != nil || got.ID != umlaut.ID || got.Email != "Ärger@Bücher.example" {
			t.Errorf("UserByEmail(%q) = %+v, %v; want user %d as typed at sign-up", email, got, err, umlaut.ID)
		}
	}
	// The Kelvin sign lowers to an ASCII k.
	newUser(t, s, "kate@example.com")
	wantCode(t, s.CreateUser(t.Context(), &coinpulse.User{Email: "\u212Aate@example.com", CreatedAt: t0}), coinpulse.CodeConflict)
	// Letters that only look alike stay apart.
	newUser(t, s, "arger@bucher.example")
	// What PostgreSQL's text cannot hold is refused on both engines, and
	// looked up as nobody (not an error).
	for _, email := range []string{"a\x00b@example.com", "a\xffb@example.com"} {
		wantCode(t, s.CreateUser(t.Context(), &coinpulse.User{Email: email, CreatedAt: t0}), coinpulse.CodeValidation)
	}
	if _, err := s.UserByEmail(t.Context(), "a\x00b@example.com"); !coinpulse.IsNotFound(err) {
		t.Errorf("UserByEmail with a NUL: %v, want RESOURCE_NOT_FOUND", err)
	}
}

func testUserNotFound(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "erin@example.com")
	_, err := s.UserByID(t.Context(), u.ID+1000)
	wantCode(t, err, coinpulse.CodeNotFound)
	_, err = s.UserByEmail(t.Context(), "nobody@example.com")
	wantCode(t, err, coinpulse.CodeNotFound)
	_, err = s.UserByEmail(t.Context(), "erin@example.co")
	wantCode(t, err, coinpulse.CodeNotFound)
}

func testHasUsers(t *testing.T, s coinpulse.Store) {
	if has, err := s.HasUsers(t.Context()); err != nil || has {
		t.Errorf("HasUsers on a new store = %v, %v; want false", has, err)
	}
	newUser(t, s, "fay@example.com")
	if has, err := s.HasUsers(t.Context()); err != nil || !has {
		t.Errorf("HasUsers after CreateUser = %v, %v; want true", has, err)
	}
}

func testSetUserTier(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "frank@example.com")
	e0 := epoch(t, s)

	expires := t0.Add(365*24*time.Hour + 999)
	if err := s.SetUserTier(ctx, u.ID, coinpulse.TierEnterprise, &expires); err != nil {
		t.Fatalf("SetUserTier: %v", err)
	}
	got, err := s.UserByID(ctx, u.ID)
	if err != nil {
		t.Fatalf("UserByID: %v", err)
	}
	if got.Tier != coinpulse.TierEnterprise || got.TierExpiresAt == nil || !got.TierExpiresAt.Equal(us(expires)) {
		t.Errorf("after SetUserTier: tier %q, expiry %v; want %q, %v", got.Tier, got.TierExpiresAt, coinpulse.TierEnterprise, us(expires))
	}
	if got.UpdatedAt.Before(got.CreatedAt) || !got.CreatedAt.Equal(u.CreatedAt) {
		t.Errorf("after SetUserTier: created %v, updated %v; want created unchanged (%v), updated not before it",
			got.CreatedAt, got.UpdatedAt, u.CreatedAt)
	}
	wantUTC(t, "after SetUserTier", userTimes(got)...)
	e1 := epoch(t, s)
	if e1 == e0 {
		t.Errorf("SetUserTier left the auth epoch at %d", e0)
	}

	if err := s.SetUserTier(ctx, u.ID, coinpulse.TierFree, nil); err != nil {
		t.Fatalf("SetUserTier(free): %v", err)
	}
	got, err = s.UserByID(ctx, u.ID)
	if err != nil {
		t.Fatalf("UserByID: %v", err)
	}
	if got.Tier != coinpulse.TierFree || got.TierExpiresAt != nil {
		t.Errorf("after SetUserTier(free, nil): tier %q, expiry %v; want free, nil", got.Tier, got.TierExpiresAt)
	}
	e2 := epoch(t, s)
	if e2 == e1 {
		t.Errorf("second SetUserTier left the auth epoch at %d", e1)
	}

	wantCode(t, s.SetUserTier(ctx, u.ID+1000, coinpulse.TierPro, nil), coinpulse.CodeNotFound)
	if e := epoch(t, s); e != e2 {
		t.Errorf("failed SetUserTier moved the auth epoch from %d to %d", e2, e)
	}
}

func testCreateKey(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "grace@example.com")
	_, k, err := coinpulse.NewAPIKey(u.ID, "CI runner", coinpulse.ModeTest, coinpulse.Permissions{Read: true, Write: true})
	if err != nil {
		t.Fatal(err)
	}
	k.CreatedAt = t0
	k.ExpiresAt = ptr(t0.Add(90 * 24 * time.Hour))
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	if k.ID == 0 {
		t.Errorf("CreateKey left ID 0")
	}
	if !k.CreatedAt.Equal(us(t0)) {
		t.Errorf("CreatedAt = %v, want %v", k.CreatedAt, us(t0))
	}
	want := &coinpulse.APIKey{
		ID:          k.ID,
		UserID:      u.ID,
		Name:        "CI runner",
		Mode:        coinpulse.ModeTest,
		Hash:        k.Hash,
		Prefix:      k.Prefix,
		Last4:       k.Last4,
		Permissions: coinpulse.Permissions{Read: true, Write: true},
		ExpiresAt:   ptr(us(t0.Add(90 * 24 * time.Hour))),
		CreatedAt:   us(t0),
	}
	got := keyByHash(t, s, k.Hash)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("KeyByHash mismatch (-want +got):\n%s", diff)
	}
	wantUTC(t, "KeyByHash", keyTimes(got)...)

	// Read-only, live, no expiry; and defaults to now.
	before := time.Now().Truncate(time.Microsecond)
	k2 := makeKey(t, u.ID, time.Time{})
	if err := s.CreateKey(ctx, k2); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	if k2.CreatedAt.Before(before) || k2.CreatedAt.After(time.Now()) {
		t.Errorf("CreatedAt = %v, want about now", k2.CreatedAt)
	}
	if k2.ID == k.ID {
		t.Errorf("two keys share ID %d", k.ID)
	}
	if diff := cmp.Diff(k2, keyByHash(t, s, k2.Hash)); diff != "" {
		t.Errorf("KeyByHash mismatch (-want +got):\n%s", diff)
	}
}

func testKeyNotFound(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "heidi@example.com")
	newKey(t, s, u.ID, t0)
	_, err := s.KeyByHash(t.Context(), coinpulse.HashKey("sk_live_nothing"))
	wantCode(t, err, coinpulse.CodeNotFound)
}

func testCreateKeyInvalid(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "ivan@example.com")

	wantCode(t, s.CreateKey(t.Context(), makeKey(t, u.ID+1000, t0)), coinpulse.CodeNotFound)

	k := newKey(t, s, u.ID, t0)
	dup := makeKey(t, u.ID, t0)
	dup.Hash = k.Hash
	wantCode(t, s.CreateKey(t.Context(), dup), coinpulse.CodeConflict)

	bad := makeKey(t, u.ID, t0)
	bad.Mode = "prod"
	wantCode(t, s.CreateKey(t.Context(), bad), coinpulse.CodeValidation)

	keys, err := s.KeysByUser(t.Context(), u.ID)
	if err != nil {
		t.Fatalf("KeysByUser: %v", err)
	}
	if len(keys) != 1 {
		t.Errorf("user holds %d keys after failed creates, want 1", len(keys))
	}
}

func testKeysByUser(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	a := newUser(t, s, "judy@example.com")
	b := newUser(t, s, "mallory@example.com")
	k2 := newKey(t, s, a.ID, t0.Add(2*time.Hour))
	k0 := newKey(t, s, a.ID, t0)
	kb := newKey(t, s, b.ID, t0.Add(time.Hour))
	k1 := newKey(t, s, a.ID, t0.Add(time.Hour))
	if err := s.RevokeKey(ctx, a.ID, k1.ID, t0.Add(3*time.Hour)); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	k1.RevokedAt = ptr(us(t0.Add(3 * time.Hour)))

	got, err := s.KeysByUser(ctx, a.ID)
	if err != nil {
		t.Fatalf("KeysByUser: %v", err)
	}
	if diff := cmp.Diff([]*coinpulse.APIKey{k0, k1, k2}, got); diff != "" {
		t.Errorf("KeysByUser(a) mismatch (-want +got):\n%s", diff)
	}
	for _, k := range got {
		wantUTC(t, "KeysByUser", keyTimes(k)...)
	}

	got, err = s.KeysByUser(ctx, b.ID)
	if err != nil {
		t.Fatalf("KeysByUser: %v", err)
	}
	if diff := cmp.Diff([]*coinpulse.APIKey{kb}, got); diff != "" {
		t.Errorf("KeysByUser(b) mismatch (-want +got):\n%s", diff)
	}

	got, err = s.KeysByUser(ctx, b.ID+1000)
	if err != nil || len(got) != 0 {
		t.Errorf("KeysByUser(unknown) = %v, %v; want no keys, no error", got, err)
	}
}

func testRevokeKey(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "niaj@example.com")
	other := newUser(t, s, "olivia@example.com")
	k := newKey(t, s, u.ID, t0)
	theirs := newKey(t, s, other.ID, t0)
	e0 := epoch(t, s)

	revokedAt := t0.Add(time.Hour + 1)
	if err := s.RevokeKey(ctx, u.ID, k.ID, revokedAt); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	got := keyByHash(t, s, k.Hash)
	if got.RevokedAt == nil || !got.RevokedAt.Equal(us(revokedAt)) {
		t.Errorf("RevokedAt = %v, want %v", got.RevokedAt, us(revokedAt))
	}
	wantUTC(t, "revoked key", keyTimes(got)...)
	if got.Active(revokedAt) {
		t.Errorf("revoked key is active")
	}
	e1 := epoch(t, s)
	if e1 == e0 {
		t.Errorf("RevokeKey left the auth epoch at %d", e0)
	}

	// Revoking again changes nothing.
	if err := s.RevokeKey(ctx, u.ID, k.ID, revokedAt.Add(time.Hour)); err != nil {
		t.Fatalf("RevokeKey again: %v", err)
	}
	if got := keyByHash(t, s, k.Hash); got.RevokedAt == nil || !got.RevokedAt.Equal(us(revokedAt)) {
		t.Errorf("after a second RevokeKey RevokedAt = %v, want %v", got.RevokedAt, us(revokedAt))
	}
	if e := epoch(t, s); e != e1 {
		t.Errorf("a second RevokeKey moved the auth epoch from %d to %d", e1, e)
	}

	// Another user's key, and no key, are not found, and stay as they were.
	wantCode(t, s.RevokeKey(ctx, u.ID, theirs.ID, revokedAt), coinpulse.CodeNotFound)
	wantCode(t, s.RevokeKey(ctx, u.ID, theirs.ID+1000, revokedAt), coinpulse.CodeNotFound)
	if got := keyByHash(t, s, theirs.Hash); got.RevokedAt != nil {
		t.Errorf("another user's key was revoked at %v", got.RevokedAt)
	}
	if e := epoch(t, s); e != e1 {
		t.Errorf("a failed RevokeKey moved the auth epoch from %d to %d", e1, e)
	}
}

// activeKeys returns how many of the user's keys are active at now.
func activeKeys(t *testing.T, s coinpulse.Store, userID int64, now time.Time) int {
	t.Helper()
	keys, err := s.KeysByUser(t.Context(), userID)
	if err != nil {
		t.Fatalf("KeysByUser: %v", err)
	}
	n := 0
	for _, k := range keys {
		if k.Active(now) {
			n++
		}
	}
	return n
}

func testKeyLimit(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "peggy@example.com")
	other := newUser(t, s, "rupert@example.com")
	var keys []*coinpulse.APIKey
	for i := range coinpulse.MaxActiveKeys {
		keys = append(keys, newKey(t, s, u.ID, t0.Add(time.Duration(i)*time.Minute)))
	}
	extra := makeKey(t, u.ID, t0.Add(time.Hour))
	err := s.CreateKey(ctx, extra)
	wantCode(t, err, coinpulse.CodeKeyLimitReached)
	if msg := coinpulse.ErrorMessage(err); !strings.Contains(msg, fmt.Sprint(coinpulse.MaxActiveKeys)) || !strings.Contains(msg, "revoke") {
		t.Errorf("message = %q, want it to name the limit and say to revoke a key", msg)
	}
	if _, err := s.KeyByHash(ctx, extra.Hash); !coinpulse.IsNotFound(err) {
		t.Errorf("KeyByHash of the refused key: %v, want RESOURCE_NOT_FOUND", err)
	}
	if n := activeKeys(t, s, u.ID, t0.Add(time.Hour)); n != coinpulse.MaxActiveKeys {
		t.Errorf("user holds %d active keys, want %d", n, coinpulse.MaxActiveKeys)
	}

	// The limit is per user.
	newKey(t, s, other.ID, t0.Add(time.Hour))

	// A revoked key does not count.
	if err := s.RevokeKey(ctx, u.ID, keys[2].ID, t0.Add(time.Hour)); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	newKey(t, s, u.ID, t0.Add(2*time.Hour))
	wantCode(t, s.CreateKey(ctx, makeKey(t, u.ID, t0.Add(3*time.Hour))), coinpulse.CodeKeyLimitReached)
}

func testKeyLimitExpired(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "sybil@example.com")
	// Two keys that expire: one at t0+1h, one at exactly t0+2h.
	for _, exp := range []time.Duration{time.Hour, 2 * time.Hour} {
		k := makeKey(t, u.ID, t0)
		k.ExpiresAt = ptr(t0.Add(exp))
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatalf("CreateKey: %v", err)
		}
	}
	// Three that do not, one of them expiring far ahead.
	for i := range 3 {
		k := makeKey(t, u.ID, t0)
		if i == 0 {
			k.ExpiresAt = ptr(t0.Add(1000 * time.Hour))
		}
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatalf("CreateKey: %v", err)
		}
	}
	// At t0+30m all five are active.
	wantCode(t, s.CreateKey(ctx, makeKey(t, u.ID, t0.Add(30*time.Minute))), coinpulse.CodeKeyLimitReached)
	// At t0+2h both expiring keys have expired (one at that very instant),
	// so two more fit, and no third.
	at := t0.Add(2 * time.Hour)
	newKey(t, s, u.ID, at)
	newKey(t, s, u.ID, at)
	wantCode(t, s.CreateKey(ctx, makeKey(t, u.ID, at)), coinpulse.CodeKeyLimitReached)
	if n := activeKeys(t, s, u.ID, at); n != coinpulse.MaxActiveKeys {
		t.Errorf("user holds %d active keys, want %d", n, coinpulse.MaxActiveKeys)
	}
}

func testKeyLimitConcurrent(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "trent@example.com")
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		k := makeKey(t, u.ID, t0)
		wg.Go(func() {
			<-start
			errs[i] = s.CreateKey(t.Context(), k)
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for _, err := range errs {
		switch coinpulse.ErrorCode(err) {
		case "":
			created++
		case coinpulse.CodeKeyLimitReached:
		default:
			t.Errorf("CreateKey: %v, want success or KEY_LIMIT_REACHED", err)
		}
	}
	if created != coinpulse.MaxActiveKeys {
		t.Errorf("%d of %d concurrent CreateKey calls succeeded, want %d", created, n, coinpulse.MaxActiveKeys)
	}
	if got := activeKeys(t, s, u.ID, t0); got != coinpulse.MaxActiveKeys {
		t.Errorf("user holds %d active keys, want %d", got, coinpulse.MaxActiveKeys)
	}
}

func testTouchKeys(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "victor@example.com")
	a := newKey(t, s, u.ID, t0)
	b := newKey(t, s, u.ID, t0)

	lastUsed := func(k *coinpulse.APIKey) *time.Time {
		t.Helper()
		got := keyByHash(t, s, k.Hash)
		wantUTC(t, "touched key", got.LastUsedAt)
		return got.LastUsedAt
	}
	if err := s.TouchKeys(ctx, nil); err != nil {
		t.Fatalf("TouchKeys(nil): %v", err)
	}
	if got := lastUsed(a); got != nil {
		t.Errorf("LastUsedAt of a new key = %v, want nil", got)
	}

	t1 := t0.Add(time.Hour + 1)
	if err := s.TouchKeys(ctx, map[int64]time.Time{a.ID: t1, b.ID: t1.Add(time.Minute), b.ID + 1000: t1}); err != nil {
		t.Fatalf("TouchKeys: %v", err)
	}
	if got := lastUsed(a); got == nil || !got.Equal(us(t1)) {
		t.Errorf("LastUsedAt = %v, want %v", got, us(t1))
	}
	if got := lastUsed(b); got == nil || !got.Equal(us(t1.Add(time.Minute))) {
		t.Errorf("LastUsedAt = %v, want %v", got, us(t1.Add(time.Minute)))
	}

	// Never backwards.
	if err := s.TouchKeys(ctx, map[int64]time.Time{a.ID: t1.Add(-time.Minute)}); err != nil {
		t.Fatalf("TouchKeys: %v", err)
	}
	if got := lastUsed(a); got == nil || !got.Equal(us(t1)) {
		t.Errorf("after an earlier touch LastUsedAt = %v, want %v", got, us(t1))
	}

	// Forwards.
	t2 := t1.Add(time.Hour)
	if err := s.TouchKeys(ctx, map[int64]time.Time{a.ID: t2}); err != nil {
		t.Fatalf("TouchKeys: %v", err)
	}
	if got := lastUsed(a); got == nil || !got.Equal(us(t2)) {
		t.Errorf("after a later touch LastUsedAt = %v, want %v", got, us(t2))
	}
}

// h0 is the first hour of the history tests' points: 2025-03-14T05:00Z.
var h0 = time.Date(2025, 3, 14, 5, 0, 0, 0, time.UTC)

// d0 is the first day of the history tests' daily points.
var d0 = time.Date(2024, 11, 30, 0, 0, 0, 0, time.UTC)

// series returns n points from start, step apart, with values derived
// from seed so that two series differ.
func series(start time.Time, step time.Duration, n int, seed float64) []coinpulse.HistoryPoint {
	points := make([]coinpulse.HistoryPoint, n)
	for i := range points {
		price := seed + float64(i)/7
		points[i] = coinpulse.HistoryPoint{
			Timestamp:   start.Add(time.Duration(i) * step),
			Price:       price,
			MarketCap:   price * 19_500_000.25,
			TotalVolume: price * 1_234_567.5,
		}
	}
	return points
}

// history returns the store's points or fails t; it checks that they are
// in UTC and that none is a nil slice.
func history(t *testing.T, s coinpulse.Store, coinID string, interval coinpulse.Interval, from, to time.Time) []coinpulse.HistoryPoint {
	t.Helper()
	points, err := s.History(t.Context(), coinID, interval, from, to)
	if err != nil {
		t.Fatalf("History(%s, %s, %v, %v): %v", coinID, interval, from, to, err)
	}
	if points == nil {
		t.Fatalf("History(%s, %s, %v, %v) = nil, want a non-nil slice", coinID, interval, from, to)
	}
	for i := range points {
		wantUTC(t, "History", &points[i].Timestamp)
	}
	return points
}

func putHistory(t *testing.T, s coinpulse.Store, interval coinpulse.Interval, series ...coinpulse.Series) {
	t.Helper()
	if err := s.PutHistory(t.Context(), interval, series); err != nil {
		t.Fatalf("PutHistory(%s): %v", interval, err)
	}
}

func testHistoryRange(t *testing.T, s coinpulse.Store) {
	btc := series(h0, time.Hour, 72, 60_000)
	eth := series(h0, time.Hour, 72, 3_000)
	putHistory(t, s, coinpulse.Hourly, coinpulse.Series{CoinID: "bitcoin", Points: btc}, coinpulse.Series{CoinID: "ethereum", Points: eth})

	tests := []struct {
		name     string
		coin     string
		from, to time.Time
		want     []coinpulse.HistoryPoint
	}{
		{"all", "bitcoin", h0, h0.Add(71 * time.Hour), btc},
		{"wider", "bitcoin", h0.Add(-100 * time.Hour), h0.Add(100 * time.Hour), btc},
		{"inclusive ends", "bitcoin", h0.Add(10 * time.Hour), h0.Add(20 * time.Hour), btc[10:21]},
		{"between points", "bitcoin", h0.Add(9*time.Hour + 30*time.Minute), h0.Add(20*time.Hour + 59*time.Minute), btc[10:21]},
		{"one point", "ethereum", h0.Add(19 * time.Hour), h0.Add(19 * time.Hour), eth[19:20]},
		{"across a day", "ethereum", h0.Add(18 * time.Hour), h0.Add(20 * time.Hour), eth[18:21]},
		{"before all", "bitcoin", h0.Add(-48 * time.Hour), h0.Add(-time.Second), []coinpulse.HistoryPoint{}},
		{"after all", "bitcoin", h0.Add(72 * time.Hour), h0.Add(1000 * time.Hour), []coinpulse.HistoryPoint{}},
		{"from after to", "bitcoin", h0.Add(20 * time.Hour), h0.Add(10 * time.Hour), []coinpulse.HistoryPoint{}},
	}
	for _, tt := range tests {
		got := history(t, s, tt.coin, coinpulse.Hourly, tt.from, tt.to)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: History mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

func testHistoryReplace(t *testing.T, s coinpulse.Store) {
	old := series(h0, time.Hour, 48, 100)
	putHistory(t, s, coinpulse.Hourly, coinpulse.Series{CoinID: "solana", Points: old})

	// Replace hours 10..29, and within one call give hour 40 twice: the
	// later wins.
	repl := series(h0.Add(10*time.Hour), time.Hour, 20, 500)
	twice := []coinpulse.HistoryPoint{
		{Timestamp: h0.Add(40 * time.Hour), Price: 1},
		{Timestamp: h0.Add(40 * time.Hour), Price: 2, MarketCap: 3, TotalVolume: 4},
	}
	putHistory(t, s, coinpulse.Hourly,
		coinpulse.Series{CoinID: "solana", Points: repl},
		coinpulse.Series{CoinID: "solana", Points: twice[:1]},
		coinpulse.Series{CoinID: "solana", Points: twice[1:]},
	)
	want := append([]coinpulse.HistoryPoint{}, old[:10]...)
	want = append(want, repl...)
	want = append(want, old[30:40]...)
	want = append(want, twice[1])
	want = append(want, old[41:]...)
	got := history(t, s, "solana", coinpulse.Hourly, h0, h0.Add(48*time.Hour))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("History after replacing mismatch (-want +got):\n%s", diff)
	}

	// Points given in any order come back in order.
	shuffled := series(h0.Add(100*time.Hour), time.Hour, 30, 7)
	want = append(want, shuffled...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	putHistory(t, s, coinpulse.Hourly, coinpulse.Series{CoinID: "solana", Points: shuffled})
	got = history(t, s, "solana", coinpulse.Hourly, h0, h0.Add(200*time.Hour))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("History after a shuffled put mismatch (-want +got):\n%s", diff)
	}
}

func testHistoryIntervals(t *testing.T, s coinpulse.Store) {
	hourly := series(d0.Add(-24*time.Hour), time.Hour, 72, 10)
	daily := series(d0.Add(-10*24*time.Hour), 24*time.Hour, 20, 20)
	putHistory(t, s, coinpulse.Hourly, coinpulse.Series{CoinID: "cardano", Points: hourly})
	putHistory(t, s, coinpulse.Daily, coinpulse.Series{CoinID: "cardano", Points: daily})

	from, to := d0.Add(-30*24*time.Hour), d0.Add(30*24*time.Hour)
	if diff := cmp.Diff(hourly, history(t, s, "cardano", coinpulse.Hourly, from, to)); diff != "" {
		t.Errorf("hourly History mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(daily, history(t, s, "cardano", coinpulse.Daily, from, to)); diff != "" {
		t.Errorf("daily History mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(daily[10:12], history(t, s, "cardano", coinpulse.Daily, d0, d0.Add(36*time.Hour))); diff != "" {
		t.Errorf("daily History of two days mismatch (-want +got):\n%s", diff)
	}
}

func testPruneHistory(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	hourly := series(h0, time.Hour, 5*24, 1)            // five days
	daily := series(d0, 24*time.Hour, 200, 2)           // about four daily chunks
	other := series(h0.Add(time.Hour), time.Hour, 4, 3) // inside the first day only
	putHistory(t, s, coinpulse.Hourly, coinpulse.Series{CoinID: "a", Points: hourly}, coinpulse.Series{CoinID: "b", Points: other})
	putHistory(t, s, coinpulse.Daily, coinpulse.Series{CoinID: "a", Points: daily})
	all := func(coin string, interval coinpulse.Interval) []coinpulse.HistoryPoint {
		t.Helper()
		return history(t, s, coin, interval, time.Unix(0, 0), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
	}

	// Before every point: nothing goes.
	if err := s.PruneHistory(ctx, coinpulse.Hourly, h0); err != nil {
		t.Fatalf("PruneHistory: %v", err)
	}
	if diff := cmp.Diff(hourly, all("a", coinpulse.Hourly)); diff != "" {
		t.Errorf("after pruning nothing, hourly mismatch (-want +got):\n%s", diff)
	}

	// Inside a day: older points go, the one at before stays.
	cut := h0.Add(2*24*time.Hour + 7*time.Hour)
	if err := s.PruneHistory(ctx, coinpulse.Hourly, cut); err != nil {
		t.Fatalf("PruneHistory: %v", err)
	}
	if diff := cmp.Diff(hourly[2*24+7:], all("a", coinpulse.Hourly)); diff != "" {
		t.Errorf("after pruning inside a day, hourly mismatch (-want +got):\n%s", diff)
	}
	if got := all("b", coinpulse.Hourly); len(got) != 0 {
		t.Errorf("after pruning, coin b keeps %d hourly points, want 0", len(got))
	}
	if diff := cmp.Diff(daily, all("a", coinpulse.Daily)); diff != "" {
		t.Errorf("pruning hourly points changed daily ones (-want +got):\n%s", diff)
	}

	// On a day boundary, between points.
	cut = time.Date(2025, 3, 18, 0, 0, 0, 0, time.UTC)
	if err := s.PruneHistory(ctx, coinpulse.Hourly, cut.Add(-time.Minute)); err != nil {
		t.Fatalf("PruneHistory: %v", err)
	}
	if diff := cmp.Diff(hourly[int(cut.Sub(h0)/time.Hour):], all("a", coinpulse.Hourly)); diff != "" {
		t.Errorf("after pruning at a day boundary, hourly mismatch (-want +got):\n%s", diff)
	}

	// Daily, across chunks.
	cut = d0.Add(130 * 24 * time.Hour)
	if err := s.PruneHistory(ctx, coinpulse.Daily, cut); err != nil {
		t.Fatalf("PruneHistory: %v", err)
	}
	if diff := cmp.Diff(daily[130:], all("a", coinpulse.Daily)); diff != "" {
		t.Errorf("after pruning daily, mismatch (-want +got):\n%s", diff)
	}

	// After every point: all go.
	if err := s.PruneHistory(ctx, coinpulse.Daily, d0.Add(1000*24*time.Hour)); err != nil {
		t.Fatalf("PruneHistory: %v", err)
	}
	if got := all("a", coinpulse.Daily); len(got) != 0 {
		t.Errorf("after pruning everything, %d daily points remain", len(got))
	}
	// And new points can be written again.
	putHistory(t, s, coinpulse.Daily, coinpulse.Series{CoinID: "a", Points: daily[:3]})
	if diff := cmp.Diff(daily[:3], all("a", coinpulse.Daily)); diff != "" {
		t.Errorf("after writing pruned points again, mismatch (-want +got):\n%s", diff)
	}
}

func testHistoryEmpty(t *testing.T, s coinpulse.Store) {
	if got := history(t, s, "nothing", coinpulse.Hourly, h0, h0.Add(24*time.Hour)); len(got) != 0 {
		t.Errorf("History of an unknown coin = %v, want none", got)
	}
	putHistory(t, s, coinpulse.Hourly)
	putHistory(t, s, coinpulse.Hourly, coinpulse.Series{CoinID: "empty"})
	if got := history(t, s, "empty", coinpulse.Hourly, h0, h0.Add(24*time.Hour)); len(got) != 0 {
		t.Errorf("History of a coin stored without points = %v, want none", got)
	}
	if err := s.PruneHistory(t.Context(), coinpulse.Daily, d0); err != nil {
		t.Errorf("PruneHistory of an empty store: %v", err)
	}
}

// randomSeries returns n points from start, step apart, holding random
// finite values of every magnitude.
func randomSeries(r *rand.Rand, start time.Time, step time.Duration, n int) []coinpulse.HistoryPoint {
	value := func() float64 {
		for {
			v := math.Float64frombits(r.Uint64())
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				return v
			}
		}
	}
	points := make([]coinpulse.HistoryPoint, n)
	for i := range points {
		points[i] = coinpulse.HistoryPoint{
			Timestamp:   start.Add(time.Duration(i) * step),
			Price:       r.Float64() * 100_000,
			MarketCap:   value(),
			TotalVolume: value(),
		}
	}
	return points
}

func testHistoryLong(t *testing.T, s coinpulse.Store) {
	r := rand.New(rand.NewPCG(3, 4))
	hourly := randomSeries(r, h0, time.Hour, 3000) // 125 days, 126 chunks
	daily := randomSeries(r, d0.Add(-3000*24*time.Hour), 24*time.Hour, 3000)
	putHistory(t, s, coinpulse.Hourly, coinpulse.Series{CoinID: "long", Points: hourly})
	putHistory(t, s, coinpulse.Daily, coinpulse.Series{CoinID: "long", Points: daily})

	got := history(t, s, "long", coinpulse.Hourly, hourly[0].Timestamp, hourly[len(hourly)-1].Timestamp)
	if diff := cmp.Diff(hourly, got); diff != "" {
		t.Errorf("hourly History mismatch (-want +got):\n%s", diff)
	}
	got = history(t, s, "long", coinpulse.Daily, daily[0].Timestamp, daily[len(daily)-1].Timestamp)
	if diff := cmp.Diff(daily, got); diff != "" {
		t.Errorf("daily History mismatch (-want +got):\n%s", diff)
	}
	// A window in the middle.
	got = history(t, s, "long", coinpulse.Daily, daily[1000].Timestamp, daily[1999].Timestamp)
	if diff := cmp.Diff(daily[1000:2000], got); diff != "" {
		t.Errorf("daily History window mismatch (-want +got):\n%s", diff)
	}
}

func testHistoryInvalid(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	good := coinpulse.Series{CoinID: "good", Points: series(h0, time.Hour, 10, 1)}
	tests := []struct {
		name     string
		interval coinpulse.Interval
		bad      []coinpulse.HistoryPoint
	}{
		{"unknown interval", "weekly", series(h0, time.Hour, 1, 1)},
		{"off the hour", coinpulse.Hourly, series(h0.Add(time.Minute), time.Hour, 1, 1)},
		{"fraction of a second", coinpulse.Hourly, series(h0.Add(time.Millisecond), time.Hour, 1, 1)},
		{"daily off midnight", coinpulse.Daily, series(h0, 24*time.Hour, 1, 1)},
		{"NaN", coinpulse.Hourly, []coinpulse.HistoryPoint{{Timestamp: h0, Price: math.NaN()}}},
		{"infinite", coinpulse.Hourly, []coinpulse.HistoryPoint{{Timestamp: h0, MarketCap: math.Inf(-1)}}},
	}
	for _, tt := range tests {
		interval := tt.interval
		if interval != coinpulse.Daily {
			interval = coinpulse.Hourly
		}
		g := good
		if interval == coinpulse.Daily {
			g = coinpulse.Series{CoinID: "good", Points: series(d0, 24*time.Hour, 10, 1)}
		}
		err := s.PutHistory(ctx, tt.interval, []coinpulse.Series{g, {CoinID: "bad", Points: tt.bad}})
		wantCode(t, err, coinpulse.CodeValidation)
		// All or nothing: the good series was not stored either.
		if got := history(t, s, "good", interval, time.Unix(0, 0), h0.Add(100*time.Hour)); len(got) != 0 {
			t.Errorf("%s: a failed PutHistory stored %d points", tt.name, len(got))
		}
	}

	_, err := s.History(ctx, "good", "weekly", h0, h0)
	wantCode(t, err, coinpulse.CodeValidation)
	wantCode(t, s.PruneHistory(ctx, "", h0), coinpulse.CodeValidation)
}

func testKV(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	_, err := s.GetKV(ctx, "market.state")
	wantCode(t, err, coinpulse.CodeNotFound)

	put := func(key string, value []byte) {
		t.Helper()
		if err := s.PutKV(ctx, key, value); err != nil {
			t.Fatalf("PutKV(%s): %v", key, err)
		}
	}
	get := func(key string) []byte {
		t.Helper()
		v, err := s.GetKV(ctx, key)
		if err != nil {
			t.Fatalf("GetKV(%s): %v", key, err)
		}
		return v
	}

	state := []byte{0, 1, 2, 0xff, 0xfe, 'x', 0}
	put("market.state", state)
	put("sim.anchor", []byte("2025-03-14T00:00:00Z"))
	if diff := cmp.Diff(state, get("market.state")); diff != "" {
		t.Errorf("GetKV mismatch (-want +got):\n%s", diff)
	}
	put("market.state", []byte("v2"))
	if diff := cmp.Diff([]byte("v2"), get("market.state")); diff != "" {
		t.Errorf("GetKV after replacing mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]byte("2025-03-14T00:00:00Z"), get("sim.anchor")); diff != "" {
		t.Errorf("GetKV of another key mismatch (-want +got):\n%s", diff)
	}

	put("empty", nil)
	if got := get("empty"); len(got) != 0 {
		t.Errorf("GetKV(empty) = %q, want no bytes", got)
	}

	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	put("big", big)
	if got := get("big"); string(got) != string(big) {
		t.Errorf("GetKV(big) returned %d bytes that differ from the %d stored", len(got), len(big))
	}

	// SwapKV: from none, from the value stored, not from another.
	swap := func(key string, old, value []byte, want bool) {
		t.Helper()
		if ok, err := s.SwapKV(ctx, key, old, value); err != nil || ok != want {
			t.Fatalf("SwapKV(%s, %q, %q) = %v, %v; want %v", key, old, value, ok, err, want)
		}
	}
	swap("claim", nil, []byte("a"), true)
	swap("claim", nil, []byte("b"), false) // there is one
	swap("claim", []byte("b"), []byte("c"), false)
	swap("claim", []byte("a"), []byte("c"), true)
	swap("claim", []byte{}, []byte("d"), false) // empty is a value, not none
	swap("empty", []byte{}, []byte("e"), true)
	if got := get("claim"); string(got) != "c" {
		t.Errorf("after the swaps: %q, want c", got)
	}
	// Of many swapping from one value at once, one does.
	var wg sync.WaitGroup
	var won sync.Map
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.SwapKV(ctx, "claim", []byte("c"), []byte(fmt.Sprint("n", i)))
			if err != nil {
				t.Errorf("SwapKV: %v", err)
			}
			if ok {
				won.Store(i, true)
			}
		}()
	}
	wg.Wait()
	n := 0
	won.Range(func(k, _ any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d of 16 concurrent swaps from one value swapped, want 1", n)
	}
}
