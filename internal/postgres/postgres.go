// Package postgres is the PostgreSQL implementation of coinpulse.Store,
// through github.com/jackc/pgx/v5: the store of a deployment with many
// nodes.
//
// Times are TIMESTAMPTZ, truncated to microseconds on write and returned in
// UTC, so that they read back as the SQLite store returns them. Migrations
// are embedded and run at Open, each in a transaction that holds an
// advisory lock, so nodes starting together migrate once.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"coinpulse"
	"coinpulse/internal/migrate"
)

// DB is a PostgreSQL database holding Coinpulse's state. It is safe for
// concurrent use.
type DB struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

var _ coinpulse.Store = (*DB)(nil)

// Keys of the transaction-level advisory locks the store takes. They are
// per database, shared by every schema in it.
const (
	// migrateLock serializes migrations of nodes starting together.
	migrateLock int64 = 0x636f696e_0001 // "coin" 1
	// historyLock serializes writers of price history, whose chunks are
	// read, merged and written back.
	historyLock int64 = 0x636f696e_0002
)

// Open connects to the PostgreSQL server at url (a postgres:// URL or a
// key=value connection string, which may carry pgxpool settings such as
// pool_max_conns) and brings the schema up to date. It
// returns an error when url does not parse, the server cannot be reached,
// or a migration fails.
func Open(ctx context.Context, url string) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse URL: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 { // the URL's connect_timeout, else ours
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	return OpenConfig(ctx, cfg)
}

// DefaultConnectTimeout bounds each connection attempt (the dial and the
// start-up exchange) unless the URL sets connect_timeout: a server that
// accepts connections and never answers fails the start with a clear
// error instead of hanging it.
const DefaultConnectTimeout = 10 * time.Second

// connectTimeout is DefaultConnectTimeout, shorter in tests.
var connectTimeout = DefaultConnectTimeout

// OpenConfig is Open with a pool configuration, for callers that set
// runtime parameters such as search_path. It returns the errors of Open.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config) (*DB, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	db := &DB{pool: pool, now: time.Now}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if err := db.checkEncoding(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	return db, nil
}

// checkEncoding refuses a database whose encoding is not UTF8 (or
// SQL_ASCII, which stores bytes as sent): in another one, text a
// subscriber sends (a portfolio's name, an address) that the encoding
// cannot hold fails as it is written, and a multibyte one (EUC_JP) can
// read UTF-8 bytes as other characters.
func (db *DB) checkEncoding(ctx context.Context) error {
	var enc string
	if err := db.pool.QueryRow(ctx, `SHOW server_encoding`).Scan(&enc); err != nil {
		return fmt.Errorf("read server_encoding: %w", err)
	}
	if enc != "UTF8" && enc != "SQL_ASCII" {
		return fmt.Errorf("the database's encoding is %s; Coinpulse needs UTF8 (CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0)", enc)
	}
	return nil
}

// Close closes the pool's connections, waiting for those in use to be
// released. It returns no error.
func (db *DB) Close() error {
	db.pool.Close()
	return nil
}

// Ping reports whether the server answers; it returns the driver's error
// when it does not.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Transact runs fn inside a transaction (READ COMMITTED). It commits when
// fn returns nil and rolls back otherwise (a panic in fn rolls back and is
// re-raised). It returns fn's error unchanged, or the error of beginning
// or committing.
func (db *DB) Transact(ctx context.Context, fn func(pgx.Tx) error) (err error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback(ctx)
			panic(p)
		}
		if err != nil {
			tx.Rollback(ctx)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: commit: %w", err)
	}
	return nil
}

// lock takes the transaction-level advisory lock key, waiting for it.
func lock(ctx context.Context, tx pgx.Tx, key int64) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, key); err != nil {
		return fmt.Errorf("advisory lock: %w", err)
	}
	return nil
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrate applies the migrations not yet recorded in schema_migrations,
// each in its own transaction together with its record, under an advisory
// lock so that concurrent nodes apply each once.
func (db *DB) migrate(ctx context.Context) error {
	ms, err := migrate.Read(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	for _, m := range ms {
		err := db.Transact(ctx, func(tx pgx.Tx) error {
			if err := lock(ctx, tx, migrateLock); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version    BIGINT      PRIMARY KEY,
				applied_at TIMESTAMPTZ NOT NULL
			)`)
			if err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
			var applied bool
			err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, m.Version).Scan(&applied)
			if err != nil || applied {
				return err
			}
			exec := func(ctx context.Context, tx pgx.Tx, q string) error {
				_, err := tx.Exec(ctx, q)
				return err
			}
			if err := migrate.Apply(ctx, m, tx, exec, migrationSteps); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`,
				m.Version, truncate(db.now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	// Once all of this binary's migrations are in (a newer schema has
	// them all already, so the loop above changed nothing), one look for
	// a version it does not know.
	var newest int64
	if err := db.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	return migrate.CheckNotNewer(newest, ms)
}

// migrationSteps are the Go steps migrations name ("-- go: NAME").
var migrationSteps = map[string]func(context.Context, pgx.Tx) error{
	"keyEmails": keyEmails,
}

// keyEmails sets every account's email_key (0012_email_key.sql), as
// migrate.KeyEmails says, in updates of up to 10,000 accounts.
func keyEmails(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT id, email FROM users ORDER BY id`)
	if err != nil {
		return err
	}
	var ids []int64
	var emails []string
	var id int64
	var email string
	_, err = pgx.ForEachRow(rows, []any{&id, &email}, func() error {
		ids, emails = append(ids, id), append(emails, email)
		return nil
	})
	if err != nil {
		return err
	}
	keys := migrate.KeyEmails(ids, emails)
	const batch = 10000
	for lo := 0; lo < len(ids); lo += batch {
		hi := min(lo+batch, len(ids))
		_, err := tx.Exec(ctx, `UPDATE users SET email_key = v.key
			FROM unnest($1::bigint[], $2::text[]) AS v(id, key) WHERE users.id = v.id`, ids[lo:hi], keys[lo:hi])
		if err != nil {
			return err
		}
	}
	return nil
}

// truncate returns t as it reads back from the database: UTC, whole
// microseconds.
func truncate(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// truncatePtr is truncate for an optional time.
func truncatePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := truncate(*t)
	return &v
}

// utcPtr returns a scanned optional time in UTC.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.UTC()
	return &v
}

// isUniqueViolation reports whether err is a unique_violation.
func isUniqueViolation(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == "23505"
}
