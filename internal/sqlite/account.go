package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"coinpulse"
)

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

const userColumns = `id, email, password_hash, tier, tier_expires_at, created_at, updated_at`

func scanUser(s scanner) (*coinpulse.User, error) {
	var (
		u                    coinpulse.User
		expires              sql.NullInt64
		createdAt, updatedAt int64
	)
	if err := s.Scan(&u.ID, &u.Email, &u.PasswordHash, &u.Tier, &expires, &createdAt, &updatedAt); err != nil {
		return nil, err
	}
	u.TierExpiresAt = fromNullMicros(expires)
	u.CreatedAt = fromMicros(createdAt)
	u.UpdatedAt = fromMicros(updatedAt)
	return &u, nil
}

// CreateUser inserts u and sets its ID, CreatedAt (kept when set, else
// now) and UpdatedAt (= CreatedAt); an empty Tier becomes free, and times
// are truncated to microseconds in UTC. An e-mail already in use, compared
// by coinpulse.EmailKey, is a CONFLICT error; an unknown tier a
// VALIDATION_ERROR.
func (db *DB) CreateUser(ctx context.Context, u *coinpulse.User) error {
	if u.Tier == "" {
		u.Tier = coinpulse.TierFree
	}
	if _, err := coinpulse.ParseTier(string(u.Tier)); err != nil {
		return err
	}
	if strings.ContainsRune(u.Email, 0) || !utf8.ValidString(u.Email) { // as PostgreSQL's text
		return coinpulse.ValidationError("email", "must be UTF-8 text without NUL")
	}
	if u.CreatedAt.IsZero() {
		u.CreatedAt = db.now()
	}
	u.CreatedAt = truncate(u.CreatedAt)
	u.UpdatedAt = u.CreatedAt
	u.TierExpiresAt = truncatePtr(u.TierExpiresAt)
	err := db.db.QueryRowContext(ctx, `
		INSERT INTO users (email, email_key, password_hash, tier, tier_expires_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		RETURNING id`,
		u.Email, coinpulse.EmailKey(u.Email), u.PasswordHash, u.Tier, nullMicros(u.TierExpiresAt), micros(u.CreatedAt), micros(u.UpdatedAt),
	).Scan(&u.ID)
	if isUniqueViolation(err) {
		return coinpulse.ErrEmailTaken(err)
	}
	if err != nil {
		return fmt.Errorf("sqlite: create user: %w", err)
	}
	return nil
}

// UserByID returns the user with that id, or a RESOURCE_NOT_FOUND error.
func (db *DB) UserByID(ctx context.Context, id int64) (*coinpulse.User, error) {
	u, err := scanUser(db.db.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, coinpulse.ErrUserNotFound()
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: user by id: %w", err)
	}
	return u, nil
}

// UserByEmail returns the user with that e-mail address, compared by
// coinpulse.EmailKey, or a RESOURCE_NOT_FOUND error.
func (db *DB) UserByEmail(ctx context.Context, email string) (*coinpulse.User, error) {
	u, err := scanUser(db.db.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE email_key = ?`, coinpulse.EmailKey(email)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, coinpulse.ErrUserNotFound()
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: user by e-mail: %w", err)
	}
	return u, nil
}

// HasUsers reports whether the store holds any user.
func (db *DB) HasUsers(ctx context.Context) (bool, error) {
	var n int
	if err := db.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM users LIMIT 1) AS u`).Scan(&n); err != nil {
		return false, fmt.Errorf("sqlite: has users: %w", err)
	}
	return n > 0, nil
}

// SetUserTier sets a user's tier and its expiry (nil: none) and bumps the
// auth epoch, in one transaction. An unknown user is a RESOURCE_NOT_FOUND
// error, an unknown tier a VALIDATION_ERROR.
func (db *DB) SetUserTier(ctx context.Context, userID int64, tier coinpulse.Tier, expiresAt *time.Time) error {
	if _, err := coinpulse.ParseTier(string(tier)); err != nil {
		return err
	}
	return db.Transact(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET tier = ?, tier_expires_at = ?, updated_at = ? WHERE id = ?`,
			tier, nullMicros(truncatePtr(expiresAt)), micros(truncate(db.now())), userID)
		if err != nil {
			return fmt.Errorf("sqlite: set user tier: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("sqlite: set user tier: %w", err)
		} else if n == 0 {
			return coinpulse.ErrUserNotFound()
		}
		return bumpAuthEpoch(ctx, tx)
	})
}

const keyColumns = `id, user_id, name, mode, hash, prefix, last4, perm_read, perm_write,
	expires_at, created_at, last_used_at, revoked_at`

func scanKey(s scanner) (*coinpulse.APIKey, error) {
	var (
		k                            coinpulse.APIKey
		expires, lastUsed, revokedAt sql.NullInt64
		createdAt                    int64
	)
	err := s.Scan(&k.ID, &k.UserID, &k.Name, &k.Mode, &k.Hash, &k.Prefix, &k.Last4,
		&k.Permissions.Read, &k.Permissions.Write, &expires, &createdAt, &lastUsed, &revokedAt)
	if err != nil {
		return nil, err
	}
	k.ExpiresAt = fromNullMicros(expires)
	k.CreatedAt = fromMicros(createdAt)
	k.LastUsedAt = fromNullMicros(lastUsed)
	k.RevokedAt = fromNullMicros(revokedAt)
	return &k, nil
}

// CreateKey inserts k and sets its ID and CreatedAt (kept when set, else
// now; truncated to microseconds in UTC). Inside one immediate transaction
// it counts the user's keys active at k.CreatedAt and, when there are
// already coinpulse.MaxActiveKeys, fails with KEY_LIMIT_REACHED and inserts
// nothing. An unknown user is a RESOURCE_NOT_FOUND error, an unknown mode a
// VALIDATION_ERROR, a hash already stored a CONFLICT.
func (db *DB) CreateKey(ctx context.Context, k *coinpulse.APIKey) error {
	if !k.Mode.Valid() {
		return coinpulse.ValidationError("mode", "must be live or test")
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = db.now()
	}
	k.CreatedAt = truncate(k.CreatedAt)
	k.ExpiresAt = truncatePtr(k.ExpiresAt)
	k.LastUsedAt = truncatePtr(k.LastUsedAt)
	k.RevokedAt = truncatePtr(k.RevokedAt)
	return db.Transact(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM users WHERE id = ?`, k.UserID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return coinpulse.ErrUserNotFound()
		}
		if err != nil {
			return fmt.Errorf("sqlite: create key: %w", err)
		}
		var active int
		err = tx.QueryRowContext(ctx, `
			SELECT count(*) FROM api_keys
			WHERE user_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)`,
			k.UserID, micros(k.CreatedAt)).Scan(&active)
		if err != nil {
			return fmt.Errorf("sqlite: create key: count active keys: %w", err)
		}
		if active >= coinpulse.MaxActiveKeys {
			return coinpulse.ErrKeyLimit()
		}
		err = tx.QueryRowContext(ctx, `
			INSERT INTO api_keys (user_id, name, mode, hash, prefix, last4, perm_read, perm_write,
				expires_at, created_at, last_used_at, revoked_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			RETURNING id`,
			k.UserID, k.Name, k.Mode, k.Hash, k.Prefix, k.Last4, k.Permissions.Read, k.Permissions.Write,
			nullMicros(k.ExpiresAt), micros(k.CreatedAt), nullMicros(k.LastUsedAt), nullMicros(k.RevokedAt),
		).Scan(&k.ID)
		if isUniqueViolation(err) {
			return coinpulse.ErrKeyExists(err)
		}
		if err != nil {
			return fmt.Errorf("sqlite: create key: %w", err)
		}
		return nil
	})
}

// KeyByHash returns the key whose hash is hash, revoked or expired ones
// too, or a RESOURCE_NOT_FOUND error.
func (db *DB) KeyByHash(ctx context.Context, hash string) (*coinpulse.APIKey, error) {
	k, err := scanKey(db.keyByHash.QueryRowContext(ctx, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, coinpulse.ErrKeyNotFound()
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: key by hash: %w", err)
	}
	return k, nil
}

// KeysByUser lists a user's keys, revoked ones included, oldest first; an
// unknown user has none (an empty slice, no error).
func (db *DB) KeysByUser(ctx context.Context, userID int64) ([]*coinpulse.APIKey, error) {
	rows, err := db.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE user_id = ? ORDER BY created_at, id`, userID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: keys by user: %w", err)
	}
	defer rows.Close()
	keys := []*coinpulse.APIKey{}
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: keys by user: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: keys by user: %w", err)
	}
	return keys, nil
}

// RevokeKey marks the user's key revoked at now and bumps the auth epoch,
// in one transaction. A key of another user, or none, is a
// RESOURCE_NOT_FOUND error; revoking a revoked key changes nothing.
func (db *DB) RevokeKey(ctx context.Context, userID, keyID int64, now time.Time) error {
	return db.Transact(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND user_id = ? AND revoked_at IS NULL`,
			micros(truncate(now)), keyID, userID)
		if err != nil {
			return fmt.Errorf("sqlite: revoke key: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("sqlite: revoke key: %w", err)
		}
		if n > 0 {
			return bumpAuthEpoch(ctx, tx)
		}
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM api_keys WHERE id = ? AND user_id = ?`, keyID, userID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return coinpulse.ErrKeyNotFound()
		}
		if err != nil {
			return fmt.Errorf("sqlite: revoke key: %w", err)
		}
		return nil // already revoked
	})
}

// TouchKeys sets the last-used time of each key in lastUsed (by ID) unless
// the stored one is later; keys that do not exist are skipped. It returns
// the database's error, if any.
func (db *DB) TouchKeys(ctx context.Context, lastUsed map[int64]time.Time) error {
	if len(lastUsed) == 0 {
		return nil
	}
	return db.Transact(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `
			UPDATE api_keys SET last_used_at = ?1
			WHERE id = ?2 AND (last_used_at IS NULL OR last_used_at < ?1)`)
		if err != nil {
			return fmt.Errorf("sqlite: touch keys: %w", err)
		}
		defer stmt.Close()
		for id, t := range lastUsed {
			if _, err := stmt.ExecContext(ctx, micros(truncate(t)), id); err != nil {
				return fmt.Errorf("sqlite: touch key %d: %w", id, err)
			}
		}
		return nil
	})
}

// AuthEpoch returns the counter that RevokeKey and SetUserTier bump. It
// returns the database's error, if any.
func (db *DB) AuthEpoch(ctx context.Context) (int64, error) {
	var epoch int64
	if err := db.authEpoch.QueryRowContext(ctx).Scan(&epoch); err != nil {
		return 0, fmt.Errorf("sqlite: auth epoch: %w", err)
	}
	return epoch, nil
}

func bumpAuthEpoch(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `UPDATE auth_epoch SET epoch = epoch + 1 WHERE id = 1`); err != nil {
		return fmt.Errorf("sqlite: bump auth epoch: %w", err)
	}
	return nil
}
