package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"coinpulse"
	"coinpulse/internal/histchunk"
	"coinpulse/internal/migrate"
	"coinpulse/internal/storetest"
)

// newSchema creates a schema with a random name on the server of
// COINPULSE_TEST_POSTGRES (skipping t when it is unset) and drops it, with
// everything in it, when t ends. It returns the server URL and the schema.
func newSchema(t testing.TB) (url, schema string) {
	t.Helper()
	url = storetest.PostgresURL(t)
	schema = "test_" + strings.ToLower(rand.Text()[:16])
	exec := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	ident := pgx.Identifier{schema}.Sanitize()
	if err := exec(t.Context(), "CREATE SCHEMA "+ident); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := exec(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	return url, schema
}

// openSchema opens the database with schema as its search_path, and closes
// it when t ends.
func openSchema(t testing.TB, url, schema string) (*DB, error) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	db, err := OpenConfig(t.Context(), cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { db.Close() })
	return db, nil
}

// openTest opens a database in a fresh schema, dropped when t ends.
func openTest(t testing.TB) *DB {
	t.Helper()
	url, schema := newSchema(t)
	db, err := openSchema(t, url, schema)
	if err != nil {
		t.Fatalf("OpenConfig: %v", err)
	}
	return db
}

func TestStore(t *testing.T) {
	storetest.PostgresURL(t) // skip once, not in every subtest
	storetest.Run(t, func(t *testing.T) coinpulse.Store { return openTest(t) })
}

func TestOpenErrors(t *testing.T) {
	storetest.PostgresURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, url := range []string{"postgres://%zz", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"} {
		if db, err := Open(ctx, url); err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded, want an error", url)
		}
	}
}

// migrationCount returns how many migrations schema_migrations records.
func migrationCount(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	if err := db.pool.QueryRow(t.Context(), `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConcurrentMigration(t *testing.T) {
	url, schema := newSchema(t)
	ms, err := migrate.Read(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 4
	dbs := make([]*DB, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range nodes {
		wg.Go(func() {
			<-start
			dbs[i], errs[i] = openSchema(t, url, schema)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: OpenConfig: %v", i, err)
		}
	}
	if n := migrationCount(t, dbs[0]); n != len(ms) {
		t.Errorf("schema_migrations holds %d rows, want %d", n, len(ms))
	}
	if e, err := dbs[0].AuthEpoch(t.Context()); err != nil || e != 0 {
		t.Errorf("AuthEpoch = %d, %v; want 0 (the seed row inserted once)", e, err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	url, schema := newSchema(t)
	ctx := t.Context()
	db, err := openSchema(t, url, schema)
	if err != nil {
		t.Fatal(err)
	}
	u := &coinpulse.User{Email: "reopen@example.com"}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatalf("CreateUser: %v", err)
	}
	db.Close()

	db, err = openSchema(t, url, schema)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if _, err := db.UserByID(ctx, u.ID); err != nil {
		t.Errorf("UserByID after reopening: %v", err)
	}
	ms, err := migrate.Read(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if n := migrationCount(t, db); n != len(ms) {
		t.Errorf("schema_migrations holds %d rows, want %d", n, len(ms))
	}
}

func TestTransact(t *testing.T) {
	db := openTest(t)
	ctx := t.Context()
	count := func() int {
		t.Helper()
		var n int
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM kv`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert := func(tx pgx.Tx, key string) error {
		_, err := tx.Exec(ctx, `INSERT INTO kv (key, value, updated_at) VALUES ($1, '\x00', now())`, key)
		return err
	}

	if err := db.Transact(ctx, func(tx pgx.Tx) error { return insert(tx, "a") }); err != nil {
		t.Fatalf("Transact: %v", err)
	}
	if got := count(); got != 1 {
		t.Errorf("after a committed Transact kv holds %d rows, want 1", got)
	}

	errBoom := errors.New("boom")
	err := db.Transact(ctx, func(tx pgx.Tx) error {
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
		db.Transact(ctx, func(tx pgx.Tx) error {
			insert(tx, "c")
			panic("boom")
		})
	}()
	if got := count(); got != 1 {
		t.Errorf("after a panicking Transact kv holds %d rows, want 1", got)
	}
}

// TestPutHistoryBatches writes more chunks than one statement carries.
func TestPutHistoryBatches(t *testing.T) {
	db := openTest(t)
	ctx := t.Context()
	start := histchunk.Bucket(coinpulse.Hourly, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	const coins, chunks = 150, 40 // 6,000 chunks
	const hours = chunks * histchunk.HourlySlots
	var series []coinpulse.Series
	for c := range coins {
		s := coinpulse.Series{CoinID: fmt.Sprintf("coin-%03d", c)}
		for h := range hours {
			s.Points = append(s.Points, coinpulse.HistoryPoint{Timestamp: start.Add(time.Duration(h) * time.Hour), Price: float64(c*hours + h)})
		}
		series = append(series, s)
	}
	if err := db.PutHistory(ctx, coinpulse.Hourly, series); err != nil {
		t.Fatalf("PutHistory: %v", err)
	}
	var n int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM price_history`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != coins*chunks {
		t.Errorf("price_history holds %d rows, want %d", n, coins*chunks)
	}
	for _, c := range []int{0, 77, coins - 1} {
		got, err := db.History(ctx, series[c].CoinID, coinpulse.Hourly, start, start.Add(hours*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != hours || got[0].Price != float64(c*hours) || got[hours-1].Price != float64(c*hours+hours-1) {
			t.Errorf("History(%s) = %d points, want %d from %d", series[c].CoinID, len(got), hours, c*hours)
		}
	}
}

// A server that accepts the connection and never answers fails Open once
// the connect timeout has passed, rather than hanging it; the URL's
// connect_timeout wins over the default. No PostgreSQL server needed.
func TestOpenTimesOutOnASilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	defer func(d time.Duration) { connectTimeout = d }(connectTimeout)
	connectTimeout = 200 * time.Millisecond
	base := "postgres://postgres@" + ln.Addr().String() + "/x?sslmode=disable"
	// (A hang fails the test by go test's own timeout; the lower bounds
	// show which timeout applied.)
	for _, c := range []struct {
		url     string
		atLeast time.Duration
	}{
		{base, 200 * time.Millisecond},
		{base + "&connect_timeout=1", time.Second},
	} {
		start := time.Now()
		_, err := Open(context.Background(), c.url)
		took := time.Since(start)
		if err == nil || took < c.atLeast {
			t.Errorf("Open(%s) = %v after %v, want an error after %v", c.url, err, took, c.atLeast)
		}
	}
}

// A database a newer Coinpulse migrated is refused, not served.
func TestOpenRefusesANewerSchema(t *testing.T) {
	url, schema := newSchema(t)
	db, err := openSchema(t, url, schema)
	if err != nil {
		t.Fatalf("OpenConfig: %v", err)
	}
	if _, err := db.pool.Exec(t.Context(), `INSERT INTO schema_migrations (version, applied_at) VALUES (9999, now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := openSchema(t, url, schema); err == nil || !strings.Contains(err.Error(), "version 9999, newer than this binary's") {
		t.Errorf("opening a schema at version 9999: %v", err)
	}
}

// Migration 12 keys the addresses of a version-11 database by
// coinpulse.EmailKey: ASCII ones in SQL, the others in Go; of two accounts
// the old index let apart that EmailKey folds together, the older keeps
// the address.
func TestMigrationKeysEmails(t *testing.T) {
	url, schema := newSchema(t)
	db, err := openSchema(t, url, schema)
	if err != nil {
		t.Fatalf("OpenConfig: %v", err)
	}
	// Back to version 11. Its index on lower(email) folded by the
	// database's locale, which a test cannot choose: a unique index on
	// email stands in for it, letting in accounts a C locale would have.
	for _, q := range []string{
		`DROP INDEX users_email_key`,
		`ALTER TABLE users DROP COLUMN email_key`,
		`CREATE UNIQUE INDEX users_email_lower_key ON users (email)`,
		`DELETE FROM schema_migrations WHERE version = 12`,
		`INSERT INTO users (email, created_at, updated_at) VALUES ('` + strings.Join(storetest.V11Emails, "', now(), now()), ('") + `', now(), now())`,
	} {
		if _, err := db.pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	db, err = openSchema(t, url, schema)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.pool.Query(t.Context(), `SELECT email_key FROM users ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckEmailKeys(t, db, keys)
	// A Coinpulse of before version 12, still running, inserts no key:
	// refused, not an account the unique index would not see.
	if _, err := db.pool.Exec(t.Context(), `INSERT INTO users (email, created_at, updated_at) VALUES ('kate@example.com', now(), now())`); err == nil || !strings.Contains(err.Error(), "email_key") {
		t.Errorf("an insert without email_key: %v, want it refused", err)
	}
}

// A database in another encoding than UTF8 is refused with what to do,
// before anything is migrated.
func TestOpenRefusesANonUTF8Database(t *testing.T) {
	url := storetest.PostgresURL(t)
	name := "coinpulse_latin1_" + strings.ToLower(rand.Text()[:8])
	exec := func(ctx context.Context, sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(t.Context(), "CREATE DATABASE "+name+" ENCODING 'LATIN1' LOCALE 'C' TEMPLATE template0")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		exec(ctx, "DROP DATABASE "+name)
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = name
	db, err := OpenConfig(t.Context(), cfg)
	if err == nil {
		db.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "the database's encoding is LATIN1; Coinpulse needs UTF8") {
		t.Errorf("Open of a LATIN1 database: %v", err)
	}
}
