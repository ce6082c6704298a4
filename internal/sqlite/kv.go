package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"coinpulse"
)

// GetKV returns the value stored under key (non-nil, possibly empty), or a
// RESOURCE_NOT_FOUND error when there is none.
func (db *DB) GetKV(ctx context.Context, key string) ([]byte, error) {
	var value []byte
	err := db.db.QueryRowContext(ctx, `SELECT value FROM kv WHERE key = ?`, key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "No value is stored under %q.", key)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get %q: %w", key, err)
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
	var res sql.Result
	var err error
	if old == nil {
		res, err = db.db.ExecContext(ctx, `INSERT INTO kv (key, value, updated_at) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING`,
			key, value, micros(db.now()))
	} else {
		res, err = db.db.ExecContext(ctx, `UPDATE kv SET value = ?, updated_at = ? WHERE key = ? AND value = ?`,
			value, micros(db.now()), key, old)
	}
	if err != nil {
		return false, fmt.Errorf("sqlite: swap %q: %w", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: swap %q: %w", key, err)
	}
	return n == 1, nil
}

// PutKV stores value under key, replacing any previous value. It returns
// the database's error, if any.
func (db *DB) PutKV(ctx context.Context, key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	_, err := db.db.ExecContext(ctx, `
		INSERT INTO kv (key, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		key, value, micros(db.now()))
	if err != nil {
		return fmt.Errorf("sqlite: put %q: %w", key, err)
	}
	return nil
}
