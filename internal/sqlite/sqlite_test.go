package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/histchunk"
	"coinpulse/internal/migrate"
	"coinpulse/internal/storetest"
)

// openTest opens a database in a new file under t.TempDir and closes it
// when t ends.
func openTest(t *testing.T) *DB {
	t.Helper()
	db, err := Open(t.Context(), filepath.Join(t.TempDir(), "coinpulse.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) coinpulse.Store { return openTest(t) })
}

func TestOpenCreatesDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "coinpulse.db")
	db, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer db.Close()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database file: %v", err)
	}
}

// A new database, and its -wal and -shm files, are readable by their
// owner alone, whatever the umask (an audit: they followed it, 0644, and
// hold webhook signing secrets); an existing file keeps its mode.
func TestOpenNewFileIsPrivate(t *testing.T) {
	// A umask that would leave the files readable by others.
	defer syscall.Umask(syscall.Umask(0o022))
	dir := t.TempDir()
	path := filepath.Join(dir, "coinpulse.db")
	db, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer db.Close()
	if err := db.CreateUser(t.Context(), &coinpulse.User{Email: "ann@example.com"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s: mode %v, want -rw-------", filepath.Base(name), perm)
		}
	}

	shared := filepath.Join(dir, "shared.db")
	if err := os.WriteFile(shared, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o640)
	db2, err := Open(t.Context(), shared)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	db2.Close()
	if fi, err := os.Stat(shared); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("an existing file's mode: %v, %v; want it kept (-rw-r-----)", fi.Mode().Perm(), err)
	}
}

func TestOpenRejectsBadPaths(t *testing.T) {
	for _, path := range []string{"", "db?mode=memory"} {
		if db, err := Open(t.Context(), path); err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded, want an error", path)
		}
	}
	// A file that is not a database.
	path := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if db, err := Open(t.Context(), path); err == nil {
		db.Close()
		t.Errorf("Open of a junk file succeeded, want an error")
	}
}

func TestPragmas(t *testing.T) {
	db := openTest(t)
	tests := []struct {
		pragma, want string
	}{
		{"journal_mode", "wal"},
		{"foreign_keys", "1"},
		{"synchronous", "1"}, // NORMAL
		{"busy_timeout", "10000"},
	}
	// Every connection of the pool is configured, so ask several at once.
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		c, err := db.db.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	for i, c := range conns {
		for _, tt := range tests {
			var got string
			if err := c.QueryRowContext(t.Context(), "PRAGMA "+tt.pragma).Scan(&got); err != nil {
				t.Fatalf("PRAGMA %s: %v", tt.pragma, err)
			}
			if got != tt.want {
				t.Errorf("connection %d: PRAGMA %s = %s, want %s", i, tt.pragma, got, tt.want)
			}
		}
	}
}

func TestReopenKeepsDataAndMigrationsOnce(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "coinpulse.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	u := &coinpulse.User{Email: "reopen@example.com"}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatalf("CreateUser: %v", err)
	}
	if err := db.PutKV(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("PutKV: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	for range 2 {
		db, err = Open(ctx, path)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		if _, err := db.UserByID(ctx, u.ID); err != nil {
			t.Errorf("UserByID after reopening: %v", err)
		}
		if v, err := db.GetKV(ctx, "k"); err != nil || string(v) != "v" {
			t.Errorf("GetKV after reopening = %q, %v; want v", v, err)
		}
		ms, err := migrate.Read(migrationFiles, "migrations")
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.db.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != len(ms) {
			t.Errorf("schema_migrations holds %d rows, want %d", n, len(ms))
		}
		db.Close()
	}
}

func TestConcurrentOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coinpulse.db")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			db, err := Open(t.Context(), path)
			if err == nil {
				err = db.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
}

func TestTransact(t *testing.T) {
	db := openTest(t)
	ctx := t.Context()
	count := func() int {
		t.Helper()
		var n int
		if err := db.db.QueryRowContext(ctx, `SELECT count(*) FROM kv`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert := func(tx *sql.Tx, key string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO kv (key, value, updated_at) VALUES (?, x'00', 0)`, key)
		return err
	}

	if err := db.Transact(ctx, func(tx *sql.Tx) error { return insert(tx, "a") }); err != nil {
		t.Fatalf("Transact: %v", err)
	}
	if got := count(); got != 1 {
		t.Errorf("after a committed Transact kv holds %d rows, want 1", got)
	}

	errBoom := errors.New("boom")
	err := db.Transact(ctx, func(tx *sql.Tx) error {
		if err := insert(tx, "b"); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Errorf("Transact = %v, want fn's error", err)
	}
	if got := count(); got != 1 {
		t.Errorf("after a failed Transact kv holds %d rows, want 1", got)
	}

	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("Transact swallowed a panic")
			}
		}()
		db.Transact(ctx, func(tx *sql.Tx) error {
			insert(tx, "c")
			panic("boom")
		})
	}()
	if got := count(); got != 1 {
		t.Errorf("after a panicking Transact kv holds %d rows, want 1", got)
	}
}

// TestHistoryChunkRows checks the storage layout: one row per coin, interval
// and chunk.
func TestHistoryChunkRows(t *testing.T) {
	db := openTest(t)
	ctx := t.Context()
	start := histchunk.Bucket(coinpulse.Hourly, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	var points []coinpulse.HistoryPoint
	for i := range 3 * histchunk.HourlySlots {
		points = append(points, coinpulse.HistoryPoint{Timestamp: start.Add(time.Duration(i) * time.Hour), Price: float64(i)})
	}
	if err := db.PutHistory(ctx, coinpulse.Hourly, []coinpulse.Series{{CoinID: "bitcoin", Points: points}}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.db.QueryRowContext(ctx, `SELECT count(*) FROM price_history`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("three chunks' worth of hourly points from a chunk start take %d rows, want 3", n)
	}
}

// TestCorruptChunk checks that a damaged row is an error, not a panic or
// silently wrong data.
func TestCorruptChunk(t *testing.T) {
	db := openTest(t)
	ctx := t.Context()
	bucket := histchunk.Bucket(coinpulse.Hourly, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	_, err := db.db.ExecContext(ctx, `INSERT INTO price_history (coin_id, interval, bucket_start, data) VALUES ('x', 'hourly', ?, x'0100')`, bucket.Unix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.History(ctx, "x", coinpulse.Hourly, bucket, bucket.Add(time.Hour)); err == nil {
		t.Errorf("History of a corrupt chunk succeeded")
	} else if code := coinpulse.ErrorCode(err); code != coinpulse.CodeServerError {
		t.Errorf("History of a corrupt chunk: code %s, want %s", code, coinpulse.CodeServerError)
	}
	err = db.PutHistory(ctx, coinpulse.Hourly, []coinpulse.Series{{CoinID: "x", Points: []coinpulse.HistoryPoint{{Timestamp: bucket}}}})
	if err == nil {
		t.Errorf("PutHistory into a corrupt chunk succeeded")
	}
}

func TestCanceledContext(t *testing.T) {
	db := openTest(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := db.UserByID(ctx, 1); err == nil || coinpulse.IsNotFound(err) {
		t.Errorf("UserByID with a canceled context = %v, want the context's error", err)
	}
}

// A database a newer Coinpulse migrated is refused, not served.
func TestOpenRefusesANewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coinpulse.db")
	db, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.db.ExecContext(t.Context(), `INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err := Open(t.Context(), path); err == nil || !strings.Contains(err.Error(), "version 9999, newer than this binary's") {
		if db != nil {
			db.Close()
		}
		t.Errorf("opening a database at version 9999: %v", err)
	}
}

// Migration 12 keys the addresses of a version-11 database by
// coinpulse.EmailKey: ASCII ones in SQL, the others in Go; of two accounts
// the old index let apart that EmailKey folds together, the older keeps
// the address.
func TestMigrationKeysEmails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coinpulse.db")
	db, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	// Back to version 11: the index on lower(email), which folds ASCII
	// only, and the accounts it let in.
	for _, q := range []string{
		`DROP TRIGGER users_email_key_required`,
		`DROP INDEX users_email_key`,
		`ALTER TABLE users DROP COLUMN email_key`,
		`CREATE UNIQUE INDEX users_email_lower_key ON users (lower(email))`,
		`DELETE FROM schema_migrations WHERE version = 12`,
		`INSERT INTO users (email, created_at, updated_at) VALUES ('` + strings.Join(storetest.V11Emails, "', 0, 0), ('") + `', 0, 0)`,
	} {
		if _, err := db.db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	db, err = Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.db.QueryContext(t.Context(), `SELECT email_key FROM users ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	storetest.CheckEmailKeys(t, db, keys)
	// A Coinpulse of before version 12, still running, inserts no key:
	// refused, not an account the unique index would not see.
	if _, err := db.db.ExecContext(t.Context(), `INSERT INTO users (email, created_at, updated_at) VALUES ('kate@example.com', 0, 0)`); err == nil || !strings.Contains(err.Error(), "email_key is required") {
		t.Errorf("an insert without email_key: %v, want it refused", err)
	}
}
