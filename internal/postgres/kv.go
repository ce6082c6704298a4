package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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
