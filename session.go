package coinpulse

import (
	"context"
	"time"
)

// Session is a dashboard login. The browser holds a random token; the
// store keeps only ID, the token's hex SHA-256, so a leaked database does
// not yield usable sessions.
type Session struct {
	// ID is the hex SHA-256 of the session token.
	ID     string
	UserID int64
	// CSRF is the token every state-changing request of the session must
	// carry (form field csrf or header X-CSRF-Token).
	CSRF      string
	CreatedAt time.Time
	// ExpiresAt is when the session ends unless it is extended; it never
	// passes CreatedAt plus the absolute lifetime the dashboard allows.
	ExpiresAt time.Time
}

// Throttle is the count kept under one key in a fixed window starting at
// WindowStart: failed log-ins under "email:<digest of the address's
// EmailKey>" and "ip:<address>", sign-ups under "signup:<address>".
type Throttle struct {
	Key         string
	Failures    int
	WindowStart time.Time
}

// SessionStore keeps dashboard sessions and login throttling state, in
// the database so that every node agrees.
type SessionStore interface {
	// CreateSession inserts s (its ID chosen by the caller). An ID already
	// in use is a CONFLICT error.
	CreateSession(ctx context.Context, s *Session) error
	// SessionByID returns the session with that id that has not expired at
	// now, or RESOURCE_NOT_FOUND.
	SessionByID(ctx context.Context, id string, now time.Time) (*Session, error)
	// ExtendSession sets the session's expiry; an unknown id is ignored.
	ExtendSession(ctx context.Context, id string, expiresAt time.Time) error
	// DeleteSession removes the session; an unknown id is ignored.
	DeleteSession(ctx context.Context, id string) error
	// DeleteExpiredSessions removes the sessions expired at now and the
	// throttles whose window started before windowStart, and returns how
	// many sessions it removed.
	DeleteExpiredSessions(ctx context.Context, now, windowStart time.Time) (int64, error)
	// RecordLoginFailure counts a failure under key at now, atomically: a
	// window that started at or before now minus window restarts at now
	// with one failure. It returns the updated state.
	RecordLoginFailure(ctx context.Context, key string, now time.Time, window time.Duration) (*Throttle, error)
	// LoginThrottle returns the state under key: zero Failures when there
	// is none.
	LoginThrottle(ctx context.Context, key string) (*Throttle, error)
	// ForgiveLoginFailure takes back one failure under key, if its window
	// still starts at windowStart (as RecordLoginFailure returned it) and
	// counts any: the dashboard counts each attempt before checking the
	// password, and takes the count back when the attempt succeeds.
	ForgiveLoginFailure(ctx context.Context, key string, windowStart time.Time) error
	// ClearLoginThrottle forgets the failures under key.
	ClearLoginThrottle(ctx context.Context, key string) error
}
