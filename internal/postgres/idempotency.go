package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"coinpulse"
)

// ClaimIdempotencyKey records k in progress unless a key holds its place:
// then it returns that one. A key made before notBefore, or in progress
// with nothing applied past its lease, is replaced; a request still
// writing under it has its row locked, which the delete waits for (and
// then finds applied). The insert waits
// for a concurrent claim of the same key to commit or roll back, so two
// claims never both win; a key released between the insert and the read
// is claimed again.
func (db *DB) ClaimIdempotencyKey(ctx context.Context, k *coinpulse.IdempotencyKey, notBefore time.Time) (*coinpulse.IdempotencyKey, bool, error) {
	k.CreatedAt, k.LeaseUntil = truncate(k.CreatedAt), truncate(k.LeaseUntil)
	for range 3 {
		var held *coinpulse.IdempotencyKey
		err := db.Transact(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `
				DELETE FROM idempotency_keys WHERE user_id = $1 AND mode = $2 AND key = $3
				AND (created_at < $4 OR status = 0 AND lease_until <= $5)`,
				k.UserID, string(k.Mode), k.Key, notBefore, k.CreatedAt); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `
				INSERT INTO idempotency_keys (user_id, mode, key, request, digest, request_id, claim, created_at, lease_until)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
				k.UserID, string(k.Mode), k.Key, k.Request, k.Digest, k.RequestID, k.Claim, k.CreatedAt, k.LeaseUntil)
			if err != nil || tag.RowsAffected() == 1 {
				return err
			}
			h := coinpulse.IdempotencyKey{UserID: k.UserID, Mode: k.Mode, Key: k.Key}
			err = tx.QueryRow(ctx, `
				SELECT request, digest, request_id, claim, created_at, lease_until, status, body
				FROM idempotency_keys WHERE user_id = $1 AND mode = $2 AND key = $3`,
				k.UserID, string(k.Mode), k.Key).Scan(&h.Request, &h.Digest, &h.RequestID, &h.Claim, &h.CreatedAt, &h.LeaseUntil, &h.Status, &h.Body)
			if err != nil {
				return err
			}
			h.CreatedAt, h.LeaseUntil = h.CreatedAt.UTC(), h.LeaseUntil.UTC()
			held = &h
			return nil
		})
		if errors.Is(err, pgx.ErrNoRows) {
			continue // released since the insert: claim it again
		}
		if err != nil {
			return nil, false, fmt.Errorf("postgres: claim idempotency key: %w", err)
		}
		return held, held == nil, nil
	}
	return nil, false, errors.New("postgres: claim idempotency key: claimed and released by others three times over")
}

// FinishIdempotencyKey stores k's answer if k's claim still holds the key.
func (db *DB) FinishIdempotencyKey(ctx context.Context, k *coinpulse.IdempotencyKey) error {
	body := k.Body
	if body == nil {
		body = []byte{}
	}
	_, err := db.pool.Exec(ctx, `
		UPDATE idempotency_keys SET status = $1, body = $2
		WHERE user_id = $3 AND mode = $4 AND key = $5 AND claim = $6 AND status IN (0, -1)`,
		k.Status, body, k.UserID, string(k.Mode), k.Key, k.Claim)
	if err != nil {
		return fmt.Errorf("postgres: finish idempotency key: %w", err)
	}
	return nil
}

// ReleaseIdempotencyKey removes the key if k's claim holds it in progress
// with nothing applied.
func (db *DB) ReleaseIdempotencyKey(ctx context.Context, k *coinpulse.IdempotencyKey) (bool, error) {
	tag, err := db.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE user_id = $1 AND mode = $2 AND key = $3 AND claim = $4 AND status = 0`,
		k.UserID, string(k.Mode), k.Key, k.Claim)
	if err != nil {
		return false, fmt.Errorf("postgres: release idempotency key: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// EndIdempotencyLease ends the lease of k's claim at at, if it still holds
// the key in progress.
func (db *DB) EndIdempotencyLease(ctx context.Context, k *coinpulse.IdempotencyKey, at time.Time) error {
	_, err := db.pool.Exec(ctx, `
		UPDATE idempotency_keys SET lease_until = $1
		WHERE user_id = $2 AND mode = $3 AND key = $4 AND claim = $5 AND status IN (0, -1)`,
		truncate(at), k.UserID, string(k.Mode), k.Key, k.Claim)
	if err != nil {
		return fmt.Errorf("postgres: end idempotency lease: %w", err)
	}
	return nil
}

// markApplied records, in tx, that the request whose Idempotency-Key ctx
// carries (if any) has applied its write, and fails with
// ErrIdempotencyClaimLost if the request no longer holds the key: every
// write a POST or PATCH makes calls it in its transaction, so that the
// write and the mark commit together, or neither.
func markApplied(ctx context.Context, tx pgx.Tx) error {
	k := coinpulse.IdempotencyClaim(ctx)
	if k == nil {
		return nil
	}
	tag, err := tx.Exec(ctx, `
		UPDATE idempotency_keys SET status = -1
		WHERE user_id = $1 AND mode = $2 AND key = $3 AND claim = $4 AND status IN (0, -1)`,
		k.UserID, string(k.Mode), k.Key, k.Claim)
	if err != nil {
		return fmt.Errorf("postgres: mark idempotency key applied: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return coinpulse.ErrIdempotencyClaimLost()
	}
	return nil
}

// DeleteIdempotencyKeys removes the keys made before before.
func (db *DB) DeleteIdempotencyKeys(ctx context.Context, before time.Time) (int64, error) {
	tag, err := db.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}
