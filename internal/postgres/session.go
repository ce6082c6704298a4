package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"coinpulse"
)

// CreateSession inserts s; times are truncated to microseconds in UTC. An
// id already in use is a CONFLICT error.
func (db *DB) CreateSession(ctx context.Context, s *coinpulse.Session) error {
	s.CreatedAt, s.ExpiresAt = truncate(s.CreatedAt), truncate(s.ExpiresAt)
	_, err := db.pool.Exec(ctx, `INSERT INTO sessions (id, user_id, csrf, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)`,
		s.ID, s.UserID, s.CSRF, s.CreatedAt, s.ExpiresAt)
	if isUniqueViolation(err) {
		return &coinpulse.Error{Code: coinpulse.CodeConflict, Message: "A session with this id already exists.", Err: err}
	}
	if err != nil {
		return fmt.Errorf("postgres: create session: %w", err)
	}
	return nil
}

// SessionByID returns the session with that id unless it has expired at
// now, or a RESOURCE_NOT_FOUND error.
func (db *DB) SessionByID(ctx context.Context, id string, now time.Time) (*coinpulse.Session, error) {
	s := coinpulse.Session{ID: id}
	err := db.pool.QueryRow(ctx, `SELECT user_id, csrf, created_at, expires_at FROM sessions WHERE id = $1 AND expires_at > $2`,
		id, now).Scan(&s.UserID, &s.CSRF, &s.CreatedAt, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "The session was not found.")
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: session by id: %w", err)
	}
	s.CreatedAt, s.ExpiresAt = s.CreatedAt.UTC(), s.ExpiresAt.UTC()
	return &s, nil
}

// ExtendSession sets the session's expiry; an unknown id is ignored. It
// returns the database's error, if any.
func (db *DB) ExtendSession(ctx context.Context, id string, expiresAt time.Time) error {
	if _, err := db.pool.Exec(ctx, `UPDATE sessions SET expires_at = $1 WHERE id = $2`, truncate(expiresAt), id); err != nil {
		return fmt.Errorf("postgres: extend session: %w", err)
	}
	return nil
}

// DeleteSession removes the session; an unknown id is ignored. It returns
// the database's error, if any.
func (db *DB) DeleteSession(ctx context.Context, id string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, id); err != nil {
		return fmt.Errorf("postgres: delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions removes the sessions expired at now and the
// throttles whose window started before windowStart, in one transaction,
// and returns how many sessions it removed.
func (db *DB) DeleteExpiredSessions(ctx context.Context, now, windowStart time.Time) (int64, error) {
	var n int64
	err := db.Transact(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM sessions WHERE expires_at <= $1`, now)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `DELETE FROM login_throttle WHERE window_start < $1`, windowStart)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: delete expired sessions: %w", err)
	}
	return n, nil
}

// RecordLoginFailure counts a failure under key at now in one statement,
// atomic across nodes: a window that started at or before now minus
// window restarts at now with one failure. It returns the updated state.
func (db *DB) RecordLoginFailure(ctx context.Context, key string, now time.Time, window time.Duration) (*coinpulse.Throttle, error) {
	th := coinpulse.Throttle{Key: key}
	now = truncate(now)
	err := db.pool.QueryRow(ctx, `
		INSERT INTO login_throttle AS t (key, failures, window_start) VALUES ($1, 1, $2)
		ON CONFLICT (key) DO UPDATE SET
			failures = CASE WHEN t.window_start <= $3 THEN 1 ELSE t.failures + 1 END,
			window_start = CASE WHEN t.window_start <= $3 THEN $2 ELSE t.window_start END
		RETURNING failures, window_start`,
		key, now, now.Add(-window)).Scan(&th.Failures, &th.WindowStart)
	if err != nil {
		return nil, fmt.Errorf("postgres: record login failure: %w", err)
	}
	th.WindowStart = th.WindowStart.UTC()
	return &th, nil
}

// LoginThrottle returns the state under key, zero Failures when there is
// none. It returns the database's error, if any.
func (db *DB) LoginThrottle(ctx context.Context, key string) (*coinpulse.Throttle, error) {
	th := coinpulse.Throttle{Key: key}
	err := db.pool.QueryRow(ctx, `SELECT failures, window_start FROM login_throttle WHERE key = $1`, key).Scan(&th.Failures, &th.WindowStart)
	if errors.Is(err, pgx.ErrNoRows) {
		return &th, nil
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: login throttle: %w", err)
	}
	th.WindowStart = th.WindowStart.UTC()
	return &th, nil
}

// ForgiveLoginFailure takes back one failure under key if its window
// still starts at windowStart and counts any. It returns the database's
// error, if any.
func (db *DB) ForgiveLoginFailure(ctx context.Context, key string, windowStart time.Time) error {
	_, err := db.pool.Exec(ctx, `UPDATE login_throttle SET failures = failures - 1 WHERE key = $1 AND window_start = $2 AND failures > 0`,
		key, truncate(windowStart))
	if err != nil {
		return fmt.Errorf("postgres: forgive login failure: %w", err)
	}
	return nil
}

// ClearLoginThrottle forgets the failures under key. It returns the
// database's error, if any.
func (db *DB) ClearLoginThrottle(ctx context.Context, key string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM login_throttle WHERE key = $1`, key); err != nil {
		return fmt.Errorf("postgres: clear login throttle: %w", err)
	}
	return nil
}
