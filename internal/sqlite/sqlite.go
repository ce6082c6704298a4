// Package sqlite is the SQLite implementation of coinpulse.Store, through
// modernc.org/sqlite (no cgo). It is the default store: one file, one node.
//
// The database runs in WAL mode with foreign keys on and synchronous
// NORMAL; every transaction begins IMMEDIATE, so write transactions
// serialize and a read-check-write inside Transact is atomic. Times are
// stored as INTEGER microseconds since the Unix epoch and come back in UTC.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"coinpulse"
	"coinpulse/internal/migrate"
)

// DB is a SQLite database holding Coinpulse's state. It is safe for
// concurrent use.
type DB struct {
	db  *sql.DB
	now func() time.Time

	// Prepared once: every authentication that misses the key cache, and
	// every node's poll of the auth epoch (40 a second), runs one.
	keyByHash, authEpoch *sql.Stmt
}

var _ coinpulse.Store = (*DB)(nil)

// busyTimeout is how long a statement waits for another connection's lock
// before failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// Open opens (creating it, and its parent directory, when missing) the
// SQLite database at path and brings its schema up to date. It returns an
// error when the directory or file cannot be created, the file is not a
// SQLite database, or a migration fails; path must not contain '?'.
func Open(ctx context.Context, path string) (*DB, error) {
	if path == "" || strings.Contains(path, "?") {
		return nil, fmt.Errorf("sqlite: invalid database path %q", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("sqlite: create directory of %s: %w", path, err)
	}
	// A new file is its owner's alone, whatever the umask: it holds
	// webhook signing secrets and e-mail addresses (SQLite gives the -wal
	// and -shm files the database's mode). An existing file keeps its own.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	// The driver runs _pragma entries sorted by name, then the shorthand
	// keys; the page size must come before WAL is switched on, which fixes
	// it. 16 KiB pages: history chunks are 0.6 to 1.5 KiB, and SQLite
	// writes a page a syscall. Only a new file takes it.
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "page_size(16384)")
	q.Set("_journal_mode", "WAL")
	q.Set("_foreign_keys", "1")
	q.Set("_synchronous", "NORMAL")
	sqldb, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// Opening a connection runs the pragmas and reads the schema: keep a
	// few idle ones rather than database/sql's default of two.
	sqldb.SetMaxIdleConns(8)
	db := &DB{db: sqldb, now: time.Now}
	// Switching a fresh file to WAL takes an exclusive lock without
	// consulting the busy handler, so two processes opening one new file
	// at once (a server and the CLI) can see SQLITE_BUSY: retry then.
	deadline := time.Now().Add(busyTimeout)
	for {
		err = db.init(ctx)
		if err == nil {
			return db, nil
		}
		if !isBusy(err) || time.Now().After(deadline) {
			sqldb.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			sqldb.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// isBusy reports whether err is SQLite's "database is locked".
func isBusy(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY
}

func (db *DB) init(ctx context.Context) error {
	if err := db.db.PingContext(ctx); err != nil {
		return err
	}
	if err := db.migrate(ctx); err != nil {
		return err
	}
	var err error
	if db.keyByHash, err = db.db.PrepareContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE hash = ?`); err != nil {
		return err
	}
	db.authEpoch, err = db.db.PrepareContext(ctx, `SELECT epoch FROM auth_epoch WHERE id = 1`)
	return err
}

// Close closes the database's connections. It returns the first error
// closing them gave.
func (db *DB) Close() error {
	var errs []error
	for _, st := range []*sql.Stmt{db.keyByHash, db.authEpoch} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	errs = append(errs, db.db.Close())
	return errors.Join(errs...)
}

// Ping reports whether the database answers; it returns the driver's error
// when it does not.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.db.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// Transact runs fn inside a transaction, which begins IMMEDIATE and so
// holds the database's write lock throughout. It commits when fn returns
// nil and rolls back otherwise (a panic in fn rolls back and is re-raised).
// It returns fn's error unchanged, or the error of beginning or committing.
func (db *DB) Transact(ctx context.Context, fn func(*sql.Tx) error) (err error) {
	tx, err := db.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
		if err != nil {
			tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrate applies the migrations not yet recorded in schema_migrations,
// each in its own transaction together with its record.
func (db *DB) migrate(ctx context.Context) error {
	ms, err := migrate.Read(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	_, err = db.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`)
	if err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var newest int64
	if err := db.db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	if err := migrate.CheckNotNewer(newest, ms); err != nil {
		return err
	}
	for _, m := range ms {
		err := db.Transact(ctx, func(tx *sql.Tx) error {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n)
			if err != nil || n > 0 {
				return err
			}
			exec := func(ctx context.Context, tx *sql.Tx, q string) error {
				_, err := tx.ExecContext(ctx, q)
				return err
			}
			if err := migrate.Apply(ctx, m, tx, exec, migrationSteps); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
				m.Version, micros(db.now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// migrationSteps are the Go steps migrations name ("-- go: NAME").
var migrationSteps = map[string]func(context.Context, *sql.Tx) error{
	"keyEmails": keyEmails,
}

// keyEmails sets every account's email_key (0012_email_key.sql), as
// migrate.KeyEmails says.
func keyEmails(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, email FROM users ORDER BY id`)
	if err != nil {
		return err
	}
	var ids []int64
	var emails []string
	for rows.Next() {
		var id int64
		var email string
		if err := rows.Scan(&id, &email); err != nil {
			rows.Close()
			return err
		}
		ids, emails = append(ids, id), append(emails, email)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	update, err := tx.PrepareContext(ctx, `UPDATE users SET email_key = ? WHERE id = ?`)
	if err != nil {
		return err
	}
	defer update.Close()
	for i, key := range migrate.KeyEmails(ids, emails) {
		if _, err := update.ExecContext(ctx, key, ids[i]); err != nil {
			return err
		}
	}
	return nil
}

// Times are stored as microseconds since the Unix epoch; finer precision is
// truncated so that both engines return what they were given.

// micros returns t as stored.
func micros(t time.Time) int64 { return t.UnixMicro() }

// nullMicros returns t as stored, or nil for NULL.
func nullMicros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

// fromMicros returns a stored time, in UTC.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// fromNullMicros returns a stored nullable time, in UTC.
func fromNullMicros(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromMicros(n.Int64)
	return &t
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

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY
// constraint failure.
func isUniqueViolation(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) &&
		(e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}
