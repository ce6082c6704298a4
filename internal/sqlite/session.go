package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"coinpulse"
)

// CreateSession inserts s; times are truncated to microseconds in UTC. An
// id already in use is a CONFLICT error.
func (db *DB) CreateSession(ctx context.Context, s *coinpulse.Session) error {
	s.CreatedAt, s.ExpiresAt = truncate(s.CreatedAt), truncate(s.ExpiresAt)
	_, err := db.db.ExecContext(ctx, `INSERT INTO sessions (id, user_id, csrf, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
		s.ID, s.UserID, s.CSRF, micros(s.CreatedAt), micros(s.ExpiresAt))
	if isUniqueViolation(err) {
		return &coinpulse.Error{Code: coinpulse.CodeConflict, Message: "A session with this id already exists.", Err: err}
	}
	if err != nil {
		return fmt.Errorf("sqlite: create session: %w", err)
	}
	return nil
}

// SessionByID returns the session with that id unless it has expired at
// now, or a RESOURCE_NOT_FOUND error.
func (db *DB) SessionByID(ctx context.Context, id string, now time.Time) (*coinpulse.Session, error) {
	s := coinpulse.Session{ID: id}
	var created, expires int64
	err := db.db.QueryRowContext(ctx, `SELECT user_id, csrf, created_at, expires_at FROM sessions WHERE id = ? AND expires_at > ?`,
		id, micros(now)).Scan(&s.UserID, &s.CSRF, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "The session was not found.")
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: session by id: %w", err)
	}
	s.CreatedAt, s.ExpiresAt = fromMicros(created), fromMicros(expires)
	return &s, nil
}

// ExtendSession sets the session's expiry; an unknown id is ignored. It
// returns the database's error, if any.
func (db *DB) ExtendSession(ctx context.Context, id string, expiresAt time.Time) error {
	if _, err := db.db.ExecContext(ctx, `UPDATE sessions SET expires_at = ? WHERE id = ?`, micros(expiresAt), id); err != nil {
		return fmt.Errorf("sqlite: extend session: %w", err)
	}
	return nil
}

// DeleteSession removes the session; an unknown id is ignored. It returns
// the database's error, if any.
func (db *DB) DeleteSession(ctx context.Context, id string) error {
	if _, err := db.db.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id); err != nil {
		return fmt.Errorf("sqlite: delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions removes the sessions expired at now and the
// throttles whose window started before windowStart, in one transaction,
// and returns how many sessions it removed.
func (db *DB) DeleteExpiredSessions(ctx context.Context, now, windowStart time.Time) (int64, error) {
	var n int64
	err := db.Transact(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE expires_at <= ?`, micros(now))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM login_throttle WHERE window_start < ?`, micros(windowStart))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired sessions: %w", err)
	}
	return n, nil
}

// RecordLoginFailure counts a failure under key at now in one statement:
// a window that started at or before now minus window restarts at now
// with one failure. It returns the updated state.
func (db *DB) RecordLoginFailure(ctx context.Context, key string, now time.Time, window time.Duration) (*coinpulse.Throttle, error) {
	th := coinpulse.Throttle{Key: key}
	var start int64
	err := db.db.QueryRowContext(ctx, `
		INSERT INTO login_throttle (key, failures, window_start) VALUES (?1, 1, ?2)
		ON CONFLICT (key) DO UPDATE SET
			failures = CASE WHEN window_start <= ?3 THEN 1 ELSE failures + 1 END,
			window_start = CASE WHEN window_start <= ?3 THEN ?2 ELSE window_start END
		RETURNING failures, window_start`,
		key, micros(now), micros(now.Add(-window))).Scan(&th.Failures, &start)
	if err != nil {
		return nil, fmt.Errorf("sqlite: record login failure: %w", err)
	}
	th.WindowStart = fromMicros(start)
	return &th, nil
}

// LoginThrottle returns the state under key, zero Failures when there is
// none. It returns the database's error, if any.
func (db *DB) LoginThrottle(ctx context.Context, key string) (*coinpulse.Throttle, error) {
	th := coinpulse.Throttle{Key: key}
	var start int64
	err := db.db.QueryRowContext(ctx, `SELECT failures, window_start FROM login_throttle WHERE key = ?`, key).Scan(&th.Failures, &start)
	if errors.Is(err, sql.ErrNoRows) {
		return &th, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: login throttle: %w", err)
	}
	th.WindowStart = fromMicros(start)
	return &th, nil
}

// ForgiveLoginFailure takes back one failure under key if its window
// still starts at windowStart and counts any. It returns the database's
// error, if any.
func (db *DB) ForgiveLoginFailure(ctx context.Context, key string, windowStart time.Time) error {
	_, err := db.db.ExecContext(ctx, `UPDATE login_throttle SET failures = failures - 1 WHERE key = ? AND window_start = ? AND failures > 0`,
		key, micros(windowStart))
	if err != nil {
		return fmt.Errorf("sqlite: forgive login failure: %w", err)
	}
	return nil
}

// ClearLoginThrottle forgets the failures under key. It returns the
// database's error, if any.
func (db *DB) ClearLoginThrottle(ctx context.Context, key string) error {
	if _, err := db.db.ExecContext(ctx, `DELETE FROM login_throttle WHERE key = ?`, key); err != nil {
		return fmt.Errorf("sqlite: clear login throttle: %w", err)
	}
	return nil
}
