package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"coinpulse"
)

// Sessions: created, found until they expire, extended, deleted, and
// swept when expired; they go with their user.
func testSessions(t *testing.T, s coinpulse.Store) {
	ctx := context.Background()
	u := newUser(t, s, "sessions@example.com")
	sess := &coinpulse.Session{ID: "a1", UserID: u.ID, CSRF: "tok", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if err := s.CreateSession(ctx, &coinpulse.Session{ID: "a1", UserID: u.ID, CSRF: "x", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); coinpulse.ErrorCode(err) != coinpulse.CodeConflict {
		t.Errorf("CreateSession with a used id: %v, want CONFLICT", err)
	}
	got, err := s.SessionByID(ctx, "a1", t0)
	if err != nil {
		t.Fatalf("SessionByID: %v", err)
	}
	want := coinpulse.Session{ID: "a1", UserID: u.ID, CSRF: "tok", CreatedAt: us(t0), ExpiresAt: us(t0.Add(time.Hour))}
	if *got != want {
		t.Errorf("SessionByID = %+v, want %+v", *got, want)
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt not in UTC: %v", got.CreatedAt)
	}
	if _, err := s.SessionByID(ctx, "a1", t0.Add(time.Hour)); !coinpulse.IsNotFound(err) {
		t.Errorf("SessionByID at expiry: %v, want RESOURCE_NOT_FOUND", err)
	}
	if _, err := s.SessionByID(ctx, "nope", t0); !coinpulse.IsNotFound(err) {
		t.Errorf("SessionByID of an unknown id: %v, want RESOURCE_NOT_FOUND", err)
	}
	if err := s.ExtendSession(ctx, "a1", t0.Add(2*time.Hour)); err != nil {
		t.Fatalf("ExtendSession: %v", err)
	}
	if _, err := s.SessionByID(ctx, "a1", t0.Add(90*time.Minute)); err != nil {
		t.Errorf("SessionByID after ExtendSession: %v", err)
	}
	if err := s.ExtendSession(ctx, "nope", t0); err != nil {
		t.Errorf("ExtendSession of an unknown id: %v", err)
	}
	// Sweeping: a1 lives to t0+2h, b2 to t0+1m.
	if err := s.CreateSession(ctx, &coinpulse.Session{ID: "b2", UserID: u.ID, CSRF: "t2", CreatedAt: t0, ExpiresAt: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpiredSessions(ctx, t0.Add(time.Hour), t0); err != nil || n != 1 {
		t.Errorf("DeleteExpiredSessions = %d, %v; want 1", n, err)
	}
	if _, err := s.SessionByID(ctx, "a1", t0); err != nil {
		t.Errorf("a1 swept too: %v", err)
	}
	if err := s.DeleteSession(ctx, "a1"); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if _, err := s.SessionByID(ctx, "a1", t0); !coinpulse.IsNotFound(err) {
		t.Errorf("SessionByID after DeleteSession: %v", err)
	}
	if err := s.DeleteSession(ctx, "a1"); err != nil {
		t.Errorf("DeleteSession twice: %v", err)
	}
}

// Login throttles count failures in a fixed window, restart once it has
// passed, are cleared, and count exactly under concurrency.
func testLoginThrottle(t *testing.T, s coinpulse.Store) {
	ctx := context.Background()
	const window = 15 * time.Minute
	th, err := s.LoginThrottle(ctx, "email:a@example.com")
	if err != nil || th.Failures != 0 {
		t.Fatalf("LoginThrottle of nothing = %+v, %v", th, err)
	}
	for i := 1; i <= 3; i++ {
		th, err := s.RecordLoginFailure(ctx, "email:a@example.com", t0.Add(time.Duration(i)*time.Minute), window)
		if err != nil {
			t.Fatalf("RecordLoginFailure: %v", err)
		}
		if th.Failures != i || !th.WindowStart.Equal(us(t0.Add(time.Minute))) {
			t.Errorf("failure %d: %+v", i, th)
		}
	}
	th, err = s.LoginThrottle(ctx, "email:a@example.com")
	if err != nil || th.Failures != 3 || !th.WindowStart.Equal(us(t0.Add(time.Minute))) || th.WindowStart.Location() != time.UTC {
		t.Errorf("LoginThrottle = %+v, %v; want 3 failures since t0+1m", th, err)
	}
	// Other keys are apart.
	if th, _ := s.LoginThrottle(ctx, "ip:192.0.2.1"); th.Failures != 0 {
		t.Errorf("another key: %+v", th)
	}
	// The window has passed: a new one starts.
	later := t0.Add(time.Minute + window)
	th, err = s.RecordLoginFailure(ctx, "email:a@example.com", later, window)
	if err != nil || th.Failures != 1 || !th.WindowStart.Equal(us(later)) {
		t.Errorf("after the window: %+v, %v; want 1 failure since %v", th, err, later)
	}
	// Forgiving takes back one failure of the window it names, never of
	// another one, and never below zero.
	if err := s.ForgiveLoginFailure(ctx, "email:a@example.com", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if th, _ := s.LoginThrottle(ctx, "email:a@example.com"); th.Failures != 1 {
		t.Errorf("forgiving an earlier window: %+v", th)
	}
	th, _ = s.RecordLoginFailure(ctx, "email:a@example.com", later.Add(time.Second), window)
	for range 3 {
		if err := s.ForgiveLoginFailure(ctx, "email:a@example.com", th.WindowStart); err != nil {
			t.Fatal(err)
		}
	}
	if th, _ := s.LoginThrottle(ctx, "email:a@example.com"); th.Failures != 0 || !th.WindowStart.Equal(us(later)) {
		t.Errorf("forgiving 3 of 2 failures: %+v", th)
	}
	if err := s.ForgiveLoginFailure(ctx, "email:nobody@example.com", later); err != nil {
		t.Errorf("forgiving an unknown key: %v", err)
	}
	if th, _ := s.RecordLoginFailure(ctx, "email:a@example.com", later.Add(2*time.Second), window); th.Failures != 1 {
		t.Errorf("a failure after forgiving all: %+v", th)
	}
	if err := s.ClearLoginThrottle(ctx, "email:a@example.com"); err != nil {
		t.Fatal(err)
	}
	if th, _ := s.LoginThrottle(ctx, "email:a@example.com"); th.Failures != 0 {
		t.Errorf("after ClearLoginThrottle: %+v", th)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.RecordLoginFailure(ctx, "ip:192.0.2.1", t0, window); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if th, _ := s.LoginThrottle(ctx, "ip:192.0.2.1"); th.Failures != 10 {
		t.Errorf("10 concurrent failures counted %d", th.Failures)
	}
	// Old windows are swept.
	if _, err := s.DeleteExpiredSessions(ctx, t0, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if th, _ := s.LoginThrottle(ctx, "ip:192.0.2.1"); th.Failures != 0 {
		t.Errorf("not swept: %+v", th)
	}
}
