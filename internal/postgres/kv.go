package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"coinpulse"
)

// GetKV returns the value stored under key (non-nil, possibly empty), or a
// RESOURCE_NOT_FOUND error when there is none.
func (db *DB) GetKV(ctx context.Context, key string) ([]byte, error) {
	var value []byte
	err := db.pool.QueryRow(ctx, `SELECT value FROM kv WHERE key = $1`, key).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "No value is stored under %q.", key)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get %q: %w", key, err)
	}
	if value == nil {
		value = []byte{}
	}
	return value, nil
}

// SwapKV stores value under key if the stored value is old, or, with a
// nil old, if none is stored (coinpulse.KVStore). It returns the
// database's error, if any.
func (db *DB) SwapKV(ctx context.Context, key string, old, value []byte) (bool, error) {
	if value == nil {
		value = []byte{}
	}
	var tag pgconn.CommandTag
	var err error
	if old == nil {
		tag, err = db.pool.Exec(ctx, `INSERT INTO kv (key, value, updated_at) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING`,
			key, value, truncate(db.now()))
	} else {
		tag, err = db.pool.Exec(ctx, `UPDATE kv SET value = $2, updated_at = $3 WHERE key = $1 AND value = $4`,
			key, value, truncate(db.now()), old)
	}
	if err != nil {
		return false, fmt.Errorf("postgres: swap %q: %w", key, err)
	}
	return tag.RowsAffected() == 1, nil
}

// PutKV stores value under key, replacing any previous value. It returns
// the database's error, if any.
func (db *DB) PutKV(ctx context.Context, key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	_, err := db.pool.Exec(ctx, `
		INSERT INTO kv (key, value, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		key, value, truncate(db.now()))
	if err != nil {
		return fmt.Errorf("postgres: put %q: %w", key, err)
	}
	return nil
}
