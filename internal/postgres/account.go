package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"coinpulse"
)

const userColumns = `id, email, password_hash, tier, tier_expires_at, created_at, updated_at`

func scanUser(row pgx.Row) (*coinpulse.User, error) {
	var u coinpulse.User
	if err := row.Scan(&u.ID, &u.Email, &u.PasswordHash, &u.Tier, &u.TierExpiresAt, &u.CreatedAt, &u.UpdatedAt); err != nil {
		return nil, err
	}
	u.TierExpiresAt = utcPtr(u.TierExpiresAt)
	u.CreatedAt = u.CreatedAt.UTC()
	u.UpdatedAt = u.UpdatedAt.UTC()
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
	if strings.ContainsRune(u.Email, 0) || !utf8.ValidString(u.Email) {
		return coinpulse.ValidationError("email", "must be UTF-8 text without NUL")
	}
	if u.CreatedAt.IsZero() {
		u.CreatedAt = db.now()
	}
	u.CreatedAt = truncate(u.CreatedAt)
	u.UpdatedAt = u.CreatedAt
	u.TierExpiresAt = truncatePtr(u.TierExpiresAt)
	err := db.pool.QueryRow(ctx, `
		INSERT INTO users (email, email_key, password_hash, tier, tier_expires_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		RETURNING id`,
		u.Email, coinpulse.EmailKey(u.Email), u.PasswordHash, u.Tier, u.TierExpiresAt, u.CreatedAt, u.UpdatedAt,
	).Scan(&u.ID)
	if isUniqueViolation(err) {
		return coinpulse.ErrEmailTaken(err)
	}
	if err != nil {
		return fmt.Errorf("postgres: create user: %w", err)
	}
	return nil
}

// UserByID returns the user with that id, or a RESOURCE_NOT_FOUND error.
func (db *DB) UserByID(ctx context.Context, id int64) (*coinpulse.User, error) {
	u, err := scanUser(db.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coinpulse.ErrUserNotFound()
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: user by id: %w", err)
	}
	return u, nil
}

// UserByEmail returns the user with that e-mail address, compared by
// coinpulse.EmailKey, or a RESOURCE_NOT_FOUND error.
func (db *DB) UserByEmail(ctx context.Context, email string) (*coinpulse.User, error) {
	if strings.ContainsRune(email, 0) { // PostgreSQL's text cannot hold one, so no address has one
		return nil, coinpulse.ErrUserNotFound()
	}
	u, err := scanUser(db.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE email_key = $1`, coinpulse.EmailKey(email)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coinpulse.ErrUserNotFound()
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: user by e-mail: %w", err)
	}
	return u, nil
}

// HasUsers reports whether the store holds any user.
func (db *DB) HasUsers(ctx context.Context) (bool, error) {
	var n int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM users LIMIT 1) AS u`).Scan(&n); err != nil {
		return false, fmt.Errorf("postgres: has users: %w", err)
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
	return db.Transact(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE users SET tier = $1, tier_expires_at = $2, updated_at = $3 WHERE id = $4`,
			tier, truncatePtr(expiresAt), truncate(db.now()), userID)
		if err != nil {
			return fmt.Errorf("postgres: set user tier: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return coinpulse.ErrUserNotFound()
		}
		return bumpAuthEpoch(ctx, tx)
	})
}

const keyColumns = `id, user_id, name, mode, hash, prefix, last4, perm_read, perm_write,
	expires_at, created_at, last_used_at, revoked_at`

func scanKey(row pgx.Row) (*coinpulse.APIKey, error) {
	var k coinpulse.APIKey
	err := row.Scan(&k.ID, &k.UserID, &k.Name, &k.Mode, &k.Hash, &k.Prefix, &k.Last4,
		&k.Permissions.Read, &k.Permissions.Write, &k.ExpiresAt, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt)
	if err != nil {
		return nil, err
	}
	k.ExpiresAt = utcPtr(k.ExpiresAt)
	k.CreatedAt = k.CreatedAt.UTC()
	k.LastUsedAt = utcPtr(k.LastUsedAt)
	k.RevokedAt = utcPtr(k.RevokedAt)
	return &k, nil
}

// CreateKey inserts k and sets its ID and CreatedAt (kept when set, else
// now; truncated to microseconds in UTC). In one transaction it locks the
// user's row, counts the user's keys active at k.CreatedAt and, when there
// are already coinpulse.MaxActiveKeys, fails with KEY_LIMIT_REACHED and
// inserts nothing. An unknown user is a RESOURCE_NOT_FOUND error, an
// unknown mode a VALIDATION_ERROR, a hash already stored a CONFLICT.
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
	return db.Transact(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM users WHERE id = $1 FOR UPDATE`, k.UserID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return coinpulse.ErrUserNotFound()
		}
		if err != nil {
			return fmt.Errorf("postgres: create key: %w", err)
		}
		var active int
		err = tx.QueryRow(ctx, `
			SELECT count(*) FROM api_keys
			WHERE user_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)`,
			k.UserID, k.CreatedAt).Scan(&active)
		if err != nil {
			return fmt.Errorf("postgres: create key: count active keys: %w", err)
		}
		if active >= coinpulse.MaxActiveKeys {
			return coinpulse.ErrKeyLimit()
		}
		err = tx.QueryRow(ctx, `
			INSERT INTO api_keys (user_id, name, mode, hash, prefix, last4, perm_read, perm_write,
				expires_at, created_at, last_used_at, revoked_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
			RETURNING id`,
			k.UserID, k.Name, k.Mode, k.Hash, k.Prefix, k.Last4, k.Permissions.Read, k.Permissions.Write,
			k.ExpiresAt, k.CreatedAt, k.LastUsedAt, k.RevokedAt,
		).Scan(&k.ID)
		if isUniqueViolation(err) {
			return coinpulse.ErrKeyExists(err)
		}
		if err != nil {
			return fmt.Errorf("postgres: create key: %w", err)
		}
		return nil
	})
}

// KeyByHash returns the key whose hash is hash, revoked or expired ones
// too, or a RESOURCE_NOT_FOUND error.
func (db *DB) KeyByHash(ctx context.Context, hash string) (*coinpulse.APIKey, error) {
	k, err := scanKey(db.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coinpulse.ErrKeyNotFound()
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: key by hash: %w", err)
	}
	return k, nil
}

// KeysByUser lists a user's keys, revoked ones included, oldest first; an
// unknown user has none (an empty slice, no error).
func (db *DB) KeysByUser(ctx context.Context, userID int64) ([]*coinpulse.APIKey, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE user_id = $1 ORDER BY created_at, id`, userID)
	if err != nil {
		return nil, fmt.Errorf("postgres: keys by user: %w", err)
	}
	defer rows.Close()
	keys := []*coinpulse.APIKey{}
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: keys by user: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: keys by user: %w", err)
	}
	return keys, nil
}

// RevokeKey marks the user's key revoked at now and bumps the auth epoch,
// in one transaction. A key of another user, or none, is a
// RESOURCE_NOT_FOUND error; revoking a revoked key changes nothing.
func (db *DB) RevokeKey(ctx context.Context, userID, keyID int64, now time.Time) error {
	return db.Transact(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL`,
			truncate(now), keyID, userID)
		if err != nil {
			return fmt.Errorf("postgres: revoke key: %w", err)
		}
		if tag.RowsAffected() > 0 {
			return bumpAuthEpoch(ctx, tx)
		}
		var one int
		err = tx.QueryRow(ctx, `SELECT 1 FROM api_keys WHERE id = $1 AND user_id = $2`, keyID, userID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return coinpulse.ErrKeyNotFound()
		}
		if err != nil {
			return fmt.Errorf("postgres: revoke key: %w", err)
		}
		return nil // already revoked
	})
}

// TouchKeys sets the last-used time of each key in lastUsed (by ID) unless
// the stored one is later; keys that do not exist are skipped. The rows
// are locked in ID order, so concurrent calls cannot deadlock. It returns
// the database's error, if any.
func (db *DB) TouchKeys(ctx context.Context, lastUsed map[int64]time.Time) error {
	if len(lastUsed) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(lastUsed))
	for id := range lastUsed {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	times := make([]time.Time, len(ids))
	for i, id := range ids {
		times[i] = truncate(lastUsed[id])
	}
	return db.Transact(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT id FROM api_keys WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
		if err != nil {
			return fmt.Errorf("postgres: touch keys: %w", err)
		}
		_, err = tx.Exec(ctx, `
			UPDATE api_keys AS k SET last_used_at = v.t
			FROM unnest($1::bigint[], $2::timestamptz[]) AS v (id, t)
			WHERE k.id = v.id AND (k.last_used_at IS NULL OR k.last_used_at < v.t)`,
			ids, times)
		if err != nil {
			return fmt.Errorf("postgres: touch keys: %w", err)
		}
		return nil
	})
}

// AuthEpoch returns the counter that RevokeKey and SetUserTier bump. It
// returns the database's error, if any.
func (db *DB) AuthEpoch(ctx context.Context) (int64, error) {
	var epoch int64
	if err := db.pool.QueryRow(ctx, `SELECT epoch FROM auth_epoch WHERE id = 1`).Scan(&epoch); err != nil {
		return 0, fmt.Errorf("postgres: auth epoch: %w", err)
	}
	return epoch, nil
}

func bumpAuthEpoch(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `UPDATE auth_epoch SET epoch = epoch + 1 WHERE id = 1`); err != nil {
		return fmt.Errorf("postgres: bump auth epoch: %w", err)
	}
	return nil
}
