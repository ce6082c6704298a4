package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"coinpulse"
)

// ClaimIdempotencyKey records k in progress unless a key holds its place:
// then it returns that one. A key made before notBefore, or in progress
// with nothing applied past its lease, is claimed anew. The key's row is
// locked (FOR UPDATE NOWAIT) to judge it: a row locked already belongs to
// a request writing under the key at this moment (markApplied), and is
// returned as it was last committed, marked Busy, without waiting for
// that write. A key inserted by a concurrent claim is read again, so two
// claims never both win.
func (db *DB) ClaimIdempotencyKey(ctx context.Context, k *coinpulse.IdempotencyKey, notBefore time.Time) (*coinpulse.IdempotencyKey, bool, error) {
	k.CreatedAt, k.LeaseUntil = truncate(k.CreatedAt), truncate(k.LeaseUntil)
	const columns = `request, digest, request_id, claim, created_at, lease_until, status, body`
	read := func(row pgx.Row) (*coinpulse.IdempotencyKey, error) {
		h := coinpulse.IdempotencyKey{UserID: k.UserID, Mode: k.Mode, Key: k.Key}
		if err := row.Scan(&h.Request, &h.Digest, &h.RequestID, &h.Claim, &h.CreatedAt, &h.LeaseUntil, &h.Status, &h.Body); err != nil {
			return nil, err
		}
		h.CreatedAt, h.LeaseUntil = h.CreatedAt.UTC(), h.LeaseUntil.UTC()
		return &h, nil
	}
	for range 5 {
		var held *coinpulse.IdempotencyKey
		claimed, busy := false, false
		err := db.Transact(ctx, func(tx pgx.Tx) error {
			h, err := read(tx.QueryRow(ctx, `SELECT `+columns+` FROM idempotency_keys
				WHERE user_id = $1 AND mode = $2 AND key = $3 FOR UPDATE NOWAIT`, k.UserID, string(k.Mode), k.Key))
			switch {
			case isLockNotAvailable(err):
				busy = true
				return err // rolls back; the row is read below, unlocked
			case errors.Is(err, pgx.ErrNoRows):
				tag, err := tx.Exec(ctx, `
					INSERT INTO idempotency_keys (user_id, mode, key, request, digest, request_id, claim, created_at, lease_until)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
					k.UserID, string(k.Mode), k.Key, k.Request, k.Digest, k.RequestID, k.Claim, k.CreatedAt, k.LeaseUntil)
				claimed = err == nil && tag.RowsAffected() == 1
				return err // not claimed: a concurrent claim inserted it; read it again
			case err != nil:
				return err
			case h.CreatedAt.Before(notBefore) || h.Status == 0 && !h.LeaseUntil.After(k.CreatedAt):
				_, err := tx.Exec(ctx, `
					UPDATE idempotency_keys SET request = $4, digest = $5, request_id = $6, claim = $7, created_at = $8,
						lease_until = $9, status = 0, body = NULL
					WHERE user_id = $1 AND mode = $2 AND key = $3`,
					k.UserID, string(k.Mode), k.Key, k.Request, k.Digest, k.RequestID, k.Claim, k.CreatedAt, k.LeaseUntil)
				claimed = err == nil
				return err
			}
			held = h
			return nil
		})
		if busy {
			held, err = read(db.pool.QueryRow(ctx, `SELECT `+columns+` FROM idempotency_keys
				WHERE user_id = $1 AND mode = $2 AND key = $3`, k.UserID, string(k.Mode), k.Key))
			if errors.Is(err, pgx.ErrNoRows) {
				continue // released since: claim it again
			}
			if held != nil {
				held.Busy = true
				if held.CreatedAt.Before(notBefore) {
					// Being claimed anew, for a request not known yet:
					// what the row held is past, and says nothing of it.
					*held = coinpulse.IdempotencyKey{UserID: k.UserID, Mode: k.Mode, Key: k.Key, Request: k.Request, Digest: k.Digest, Busy: true}
				}
			}
		}
		switch {
		case err != nil:
			return nil, false, fmt.Errorf("postgres: claim idempotency key: %w", err)
		case claimed:
			return nil, true, nil
		case held != nil:
			return held, false, nil
		}
	}
	return nil, false, coinpulse.Errorf(coinpulse.CodeConflict, "This Idempotency-Key is being claimed and released by other requests at this moment; send the request again in a second.")
}

// isLockNotAvailable reports whether err is PostgreSQL's refusal of a
// NOWAIT lock that another transaction holds.
func isLockNotAvailable(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == "55P03"
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

// writeTx runs fn in a transaction, as Transact does, for each write a
// POST or PATCH makes. Under an Idempotency-Key (the claim ctx carries),
// the transaction marks the key applied first (markApplied), so that it
// commits only while its request holds the key, and again last, which
// renews the key's lease from the commit: the request then has a whole
// lease to keep its answer, however long the write waited on locks.
func (db *DB) writeTx(ctx context.Context, fn func(pgx.Tx) error) error {
	if coinpulse.IdempotencyClaim(ctx) == nil {
		return db.Transact(ctx, fn)
	}
	return db.Transact(ctx, func(tx pgx.Tx) error {
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
func markApplied(ctx context.Context, tx pgx.Tx) error {
	k := coinpulse.IdempotencyClaim(ctx)
	if k == nil {
		return nil
	}
	tag, err := tx.Exec(ctx, `
		UPDATE idempotency_keys SET status = -1, lease_until = greatest(lease_until, $5)
		WHERE user_id = $1 AND mode = $2 AND key = $3 AND claim = $4 AND status IN (0, -1)`,
		k.UserID, string(k.Mode), k.Key, k.Claim, truncate(coinpulse.RenewedLease(k)))
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
