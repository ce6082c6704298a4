package api

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"coinpulse"
)

// downStore fails every key look-up with err, as a store whose database
// does not answer.
type downStore struct {
	coinpulse.Store
	err error
}

func (s downStore) KeyByHash(context.Context, string) (*coinpulse.APIKey, error) { return nil, s.err }

// A database that does not answer is 503 SERVICE_UNAVAILABLE with
// Retry-After, as /readyz says it, not a 500: the caller may try again.
func TestUnreachableDatabaseIs503(t *testing.T) {
	t.Parallel()
	// pgx's own error for a server that refuses the connection: a port
	// nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, pgErr := pgx.Connect(t.Context(), "postgres://coinpulse@"+addr+"/coinpulse?connect_timeout=5")
	if pgErr == nil {
		t.Fatal("pgx connected to a closed port")
	}
	// pgx's own error for a server that takes the connection and refuses
	// the session: a database not accepting connections (55000, ALTER
	// DATABASE … ALLOW_CONNECTIONS false), told by a stand-in server.
	notAccepting := refusingServer(t, "55000", `database "coinpulse" is not currently accepting connections`)
	_, closedErr := pgx.Connect(t.Context(), "postgres://coinpulse@"+notAccepting+"/coinpulse?sslmode=disable&connect_timeout=5")
	if closedErr == nil {
		t.Fatal("pgx connected to a server that refused the session")
	}
	// SQLite's own error for a file another connection holds locked past
	// the busy timeout (0 here).
	lite, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "busy.db")+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	holder, err := lite.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer holder.ExecContext(context.Background(), "ROLLBACK")
	_, busyErr := lite.ExecContext(t.Context(), "CREATE TABLE t (x)")
	if busyErr == nil {
		t.Fatal("SQLite wrote past another connection's write lock")
	}
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"connection refused", fmt.Errorf("postgres: key by hash: %w", pgErr), 503},
		{"a failover", fmt.Errorf("postgres: key by hash: %w", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}), 503},
		{"too many connections", fmt.Errorf("postgres: key by hash: %w", &pgconn.PgError{Code: "53300"}), 503},
		{"a database not accepting connections", fmt.Errorf("postgres: key by hash: %w", closedErr), 503},
		{"SQLite busy", fmt.Errorf("sqlite: key by hash: %w", busyErr), 503},
		{"no answer in time", fmt.Errorf("sqlite: claim idempotency key: sqlite: begin: %w", context.DeadlineExceeded), 503},
		{"another failure", fmt.Errorf("postgres: key by hash: %w", pgx.ErrTxClosed), 500},
		{"a query's own error", fmt.Errorf("postgres: key by hash: %w", &pgconn.PgError{Code: "42P01"}), 500},
	} {
		env := newAlertEnv(t, alertEnvOptions{wrapStore: func(s coinpulse.Store) coinpulse.Store { return downStore{s, c.err} }})
		res := do(t, env.srv, "GET", "/api/v1/markets/global", env.newKey(coinpulse.TierPro))
		if res.Status != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, res.Status, res.Raw, c.want)
			continue
		}
		if c.want != 503 {
			continue
		}
		if res.Error.Code != "SERVICE_UNAVAILABLE" || res.Header.Get("Retry-After") != "1" ||
			!strings.Contains(res.Error.Message, "database does not answer") || res.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: %s %q, Retry-After %q", c.name, res.Error.Code, res.Error.Message, res.Header.Get("Retry-After"))
		}
	}
}

// refusingServer is a stand-in PostgreSQL server that answers every
// session's start with a FATAL error of code and message, as a server does
// to a login it refuses. It returns its address.
func refusingServer(t *testing.T, code, message string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				be := pgproto3.NewBackend(conn, conn)
				for {
					msg, err := be.ReceiveStartupMessage()
					if err != nil {
						return
					}
					if _, ok := msg.(*pgproto3.SSLRequest); ok {
						conn.Write([]byte{'N'}) // no TLS; the startup follows
						continue
					}
					be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: code, Message: message})
					be.Flush()
					return
				}
			}()
		}
	}()
	return ln.Addr().String()
}
