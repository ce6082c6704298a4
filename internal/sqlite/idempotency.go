package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"coinpulse"
)

// ClaimIdempotencyKey records k in progress unless a key holds its place:
// then it returns that one. A key made before notBefore, or in progress
// with nothing applied past its lease, is replaced. One transaction
// (BEGIN IMMEDIATE) does both, so two claims of one key never both win.
func (db *DB) ClaimIdempotencyKey(ctx context.Context, k *coinpulse.IdempotencyKey, notBefore time.Time) (*coinpulse.IdempotencyKey, bool, error) {
	k.CreatedAt, k.LeaseUntil = truncate(k.CreatedAt), truncate(k.LeaseUntil)
	var held *coinpulse.IdempotencyKey
	err := db.Transact(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
			DELETE FROM idempotency_keys WHERE user_id = ? AND mode = ? AND key = ?
			AND (created_at < ? OR status = 0 AND lease_until <= ?)`,
			k.UserID, string(k.Mode), k.Key, micros(notBefore), micros(k.CreatedAt)); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `
			INSERT INTO idempotency_keys (user_id, mode, key, request, digest, request_id, claim, created_at, lease_until)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			k.UserID, string(k.Mode), k.Key, k.Request, k.Digest, k.RequestID, k.Claim, micros(k.CreatedAt), micros(k.LeaseUntil))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		h := coinpulse.IdempotencyKey{UserID: k.UserID, Mode: k.Mode, Key: k.Key}
		var created, lease int64
		err = tx.QueryRowContext(ctx, `
			SELECT request, digest, request_id, claim, created_at, lease_until, status, body
			FROM idempotency_keys WHERE user_id = ? AND mode = ? AND key = ?`,
			k.UserID, string(k.Mode), k.Key).Scan(&h.Request, &h.Digest, &h.RequestID, &h.Claim, &created, &lease, &h.Status, &h.Body)
		if err != nil {
			return err
		}
		h.CreatedAt, h.LeaseUntil = fromMicros(created), fromMicros(lease)
		held = &h
		return nil
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = errors.New("the key's row vanished within the transaction")
	}
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: claim idempotency key: %w", err)
	}
	return held, held == nil, nil
}

// FinishIdempotencyKey stores k's answer if k's claim still holds the key.
func (db *DB) FinishIdempotencyKey(ctx context.Context, k *coinpulse.IdempotencyKey) error {
	body := k.Body
	if body == nil {
		body = []byte{}
	}
	_, err := db.db.ExecContext(ctx, `
		UPDATE idempotency_keys SET status = ?, body = ?
		WHERE user_id = ? AND mode = ? AND key = ? AND claim = ? AND status IN (0, -1)`,
		k.Status, body, k.UserID, string(k.Mode), k.Key, k.Claim)
	if err != nil {
		return fmt.Errorf("sqlite: finish idempotency key: %w", err)
	}
	return nil
}

// ReleaseIdempotencyKey removes the key if k's claim holds it in progress
// with nothing applied.
func (db *DB) ReleaseIdempotencyKey(ctx context.Context, k *coinpulse.IdempotencyKey) (bool, error) {
	res, err := db.db.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE user_id = ? AND mode = ? AND key = ? AND claim = ? AND status = 0`,
		k.UserID, string(k.Mode), k.Key, k.Claim)
	if err != nil {
		return false, fmt.Errorf("sqlite: release idempotency key: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// EndIdempotencyLease ends the lease of k's claim at at, if it still holds
// the key in progress.
func (db *DB) EndIdempotencyLease(ctx context.Context, k *coinpulse.IdempotencyKey, at time.Time) error {
	_, err := db.db.ExecContext(ctx, `
		UPDATE idempotency_keys SET lease_until = ?
		WHERE user_id = ? AND mode = ? AND key = ? AND claim = ? AND status IN (0, -1)`,
		micros(truncate(at)), k.UserID, string(k.Mode), k.Key, k.Claim)
	if err != nil {
		return fmt.Errorf("sqlite: end idempotency lease: %w", err)
	}
	return nil
}

// writeTx runs fn in a transaction, as Transact does, for each write a
// POST or PATCH makes. Under an Idempotency-Key (the claim ctx carries),
// the transaction marks the key applied first (markApplied), so that it
// commits only while its request holds the key, and again last, which
// renews the key's lease from the commit: the request then has a whole
// lease to keep its answer, however long the write waited on locks.
func (db *DB) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	if coinpulse.IdempotencyClaim(ctx) == nil {
		return db.Transact(ctx, fn)
	}
	return db.Transact(ctx, func(tx *sql.Tx) error {
		if err := markApplied(ctx, tx); err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			return err
		}
		return markApplied(ctx, tx)
	})
}

// markApplied records, in tx, that the request whose Idempotency-Key ctx
// carries (if any) has applied its write, and fails with
// ErrIdempotencyClaimLost if the request no longer holds the key (see
// writeTx), so that the write and the mark commit together, or neither.
// The key's lease runs a whole lease again from now.
func markApplied(ctx context.Context, tx *sql.Tx) error {
	k := coinpulse.IdempotencyClaim(ctx)
	if k == nil {
		return nil
	}
	res, err := tx.ExecContext(ctx, `
		UPDATE idempotency_keys SET status = -1, lease_until = max(lease_until, ?)
		WHERE user_id = ? AND mode = ? AND key = ? AND claim = ? AND status IN (0, -1)`,
		micros(coinpulse.RenewedLease(k)), k.UserID, string(k.Mode), k.Key, k.Claim)
	if err != nil {
		return fmt.Errorf("sqlite: mark idempotency key applied: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return cmp.Or(err, coinpulse.ErrIdempotencyClaimLost())
	}
	return nil
}

// DeleteIdempotencyKeys removes the keys made before before.
func (db *DB) DeleteIdempotencyKeys(ctx context.Context, before time.Time) (int64, error) {
	res, err := db.db.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE created_at < ?`, micros(before))
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete idempotency keys: %w", err)
	}
	return res.RowsAffected()
}
