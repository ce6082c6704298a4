package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"coinpulse"
	"coinpulse/internal/sqlite"
	"coinpulse/internal/storetest"
	"coinpulse/internal/testlog"
)

// cli runs the program with args and an environment, returning stdout and
// stderr.
func cli(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
	return out.String(), errb.String(), err
}

func mustCLI(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	out, errOut, err := cli(t, env, args...)
	if err != nil {
		t.Fatalf("coinpulse %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

var keyLine = regexp.MustCompile(`^sk_(live|test)_[0-9A-Za-z]{38}\n$`)

func TestOperatorCLI(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "cp.db")
	env := map[string]string{"COINPULSE_DB": db}
	mustCLI(t, env, "users", "create", "--email", "Ann@Example.com", "--tier", "premium", "--expires", "2099-01-01T00:00:00Z", "--password", "hunter2222")
	if _, _, err := cli(t, env, "users", "create", "--email", "ann@example.com"); coinpulse.ErrorCode(err) != coinpulse.CodeConflict {
		t.Errorf("duplicate e-mail in another case: %v, want CONFLICT", err)
	}
	if _, _, err := cli(t, env, "users", "create", "--email", "bob@example.com", "--tier", "gold"); coinpulse.ErrorCode(err) != coinpulse.CodeValidation {
		t.Errorf("unknown tier: %v", err)
	}
	if _, _, err := cli(t, env, "users", "create"); err == nil {
		t.Error("users create without --email succeeded")
	}
	// The sign-up's rules, and only a paid tier expires.
	for _, args := range [][]string{
		{"users", "create", "--email", "carl@example.com", "--password", "short"},
		{"users", "create", "--email", "carl@example.com", "--password", "password1234"},
		{"users", "create", "--email", "not-an-address"},
		{"users", "create", "--email", "dora@example.com", "--tier", "free", "--expires", "2099-01-01T00:00:00Z"},
		{"users", "set-tier", "--email", "ann@example.com", "--tier", "free", "--expires", "2099-01-01T00:00:00Z"},
		{"users", "set-tier", "--email", "ann@example.com"},
	} {
		if _, _, err := cli(t, env, args...); err == nil {
			t.Errorf("%s: accepted", strings.Join(args, " "))
		}
	}

	key := mustCLI(t, env, "keys", "create", "--email", "ann@example.com", "--name", "ci", "--permissions", "read")
	if !keyLine.MatchString(key) {
		t.Fatalf("keys create printed %q, want the key alone on a line", key)
	}
	test := mustCLI(t, env, "keys", "create", "--email", "ann@example.com", "--test")
	if !strings.HasPrefix(test, "sk_test_") {
		t.Errorf("--test made %q", test)
	}
	list := mustCLI(t, env, "keys", "list", "--email", "ann@example.com")
	if !strings.Contains(list, key[:12]+"…"+key[len(key)-5:len(key)-1]) || !strings.Contains(list, "read ") || strings.Contains(list, key[12:30]) {
		t.Errorf("keys list shows:\n%s", list)
	}
	// The 5-key limit.
	for range 3 {
		mustCLI(t, env, "keys", "create", "--email", "ann@example.com")
	}
	if _, _, err := cli(t, env, "keys", "create", "--email", "ann@example.com"); coinpulse.ErrorCode(err) != coinpulse.CodeKeyLimitReached {
		t.Errorf("sixth key: %v, want KEY_LIMIT_REACHED", err)
	}
	if out := mustCLI(t, env, "keys", "revoke", "--email", "ann@example.com", "--key", strings.TrimSpace(key)); !strings.HasPrefix(out, "revoked key ") {
		t.Errorf("keys revoke said %q", out)
	}
	if list := mustCLI(t, env, "keys", "list", "--email", "ann@example.com"); !strings.Contains(list, "revoked") {
		t.Errorf("revoked key not shown as revoked:\n%s", list)
	}
	if out := mustCLI(t, env, "keys", "revoke", "--email", "ann@example.com", "--key", strings.TrimSpace(key)); !strings.Contains(out, "was already revoked at") {
		t.Errorf("revoking a revoked key said %q", out)
	}
	mustCLI(t, env, "keys", "create", "--email", "ann@example.com") // a slot is free again
	if _, _, err := cli(t, env, "keys", "revoke", "--email", "ann@example.com", "--id", "9999"); !coinpulse.IsNotFound(err) {
		t.Errorf("revoking an unknown id: %v", err)
	}
	if out := mustCLI(t, env, "users", "set-tier", "--email", "ann@example.com", "--tier", "pro", "--expires", "now"); !strings.Contains(out, "subscription ended at") {
		t.Errorf("set-tier --expires now said %q", out)
	}
	if out := mustCLI(t, env, "users", "set-tier", "--email", "ann@example.com", "--tier", "pro", "--expires", "2099-01-01T00:00:00Z"); !strings.Contains(out, "until 2099-01-01T00:00:00Z") {
		t.Errorf("set-tier --expires 2099 said %q", out)
	}
	mustCLI(t, env, "users", "set-tier", "--email", "ann@example.com", "--tier", "free")
	if _, _, err := cli(t, env, "users", "set-tier", "--email", "nobody@example.com", "--tier", "pro"); !coinpulse.IsNotFound(err) {
		t.Errorf("set-tier of an unknown user: %v", err)
	}
	if _, _, err := cli(t, env, "keys", "create", "--email", "ann@example.com", "--expires", "tomorrow"); err == nil {
		t.Error("a malformed --expires was accepted")
	}
	if _, _, err := cli(t, nil, "frobnicate"); err == nil {
		t.Error("an unknown command succeeded")
	}
	// A group's help lists its subcommands; the group alone is a usage error.
	if out, _, err := cli(t, nil, "keys", "--help"); err != nil || !strings.Contains(out, "keys revoke") || !strings.Contains(out, "--permissions") || strings.Contains(out, "users create") {
		t.Errorf("keys --help: %v\n%s", err, out)
	}
	if _, errOut, err := cli(t, nil, "users"); err == nil || !strings.Contains(errOut, "users set-tier") {
		t.Errorf("users alone: %v\n%s", err, errOut)
	}
	mustCLI(t, env, "migrate")

	// A flag's _FILE variant is read, and a flag on the command line wins
	// over the environment.
	f := filepath.Join(t.TempDir(), "db-url")
	os.WriteFile(f, []byte(db+"\n"), 0o600)
	mustCLI(t, map[string]string{"COINPULSE_DB_FILE": f}, "keys", "list", "--email", "ann@example.com")
	mustCLI(t, map[string]string{"COINPULSE_DB": "sqlite:/nonexistent/dir/x.db"}, "keys", "list", "--email", "ann@example.com", "--db", db)
	// Even over a variable that would not do: a _FILE that does not exist.
	mustCLI(t, map[string]string{"COINPULSE_DB_FILE": "/nonexistent/db-url"}, "keys", "list", "--email", "ann@example.com", "--db", db)
	if _, _, err := cli(t, map[string]string{"COINPULSE_DB_FILE": "/nonexistent/db-url"}, "keys", "list", "--email", "ann@example.com"); err == nil ||
		!strings.Contains(err.Error(), "COINPULSE_DB_FILE") {
		t.Errorf("an unreadable COINPULSE_DB_FILE with no --db: %v, want an error naming it", err)
	}
	// An empty one (a secret mount that failed) is refused, not taken for
	// the default database (an audit: serve started on a new SQLite file).
	empty := filepath.Join(t.TempDir(), "db-url")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	for _, args := range [][]string{{"keys", "list", "--email", "ann@example.com"}, {"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}} {
		if _, _, err := cli(t, map[string]string{"COINPULSE_DB_FILE": empty}, args...); err == nil ||
			!strings.Contains(err.Error(), fmt.Sprintf("COINPULSE_DB_FILE=%q: the file is empty", empty)) {
			t.Errorf("%s with an empty COINPULSE_DB_FILE: %v, want it refused", args[0], err)
		}
	}
}

// A postgres:// URL's scheme is case-insensitive (an audit: POSTGRES://
// was refused as "not a database this version opens: … postgres://…").
func TestPostgresSchemeAnyCase(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u@h/db":    "postgres://u@h/db",
		"POSTGRES://u@h/db":    "postgres://u@h/db",
		"PostgreSQL://u@h/db":  "postgresql://u@h/db",
		"postgresx://u@h/db":   "",
		"sqlite:postgres://x":  "",
		"/var/lib/postgres.db": "",
	} {
		got, ok := postgresURL(dsn)
		if got != want || ok != (want != "") {
			t.Errorf("postgresURL(%q) = %q, %v; want %q", dsn, got, ok, want)
		}
	}
	db := postgresSchema(t)
	mustCLI(t, nil, "migrate", "--db", "POSTGRES"+strings.TrimPrefix(db, "postgres"))
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// server is a running `coinpulse serve`.
type server struct {
	base   string
	stdout *testlog.Buffer
	stderr *testlog.Buffer
	cancel context.CancelFunc
	done   chan error
}

func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	addr := freeAddr(t)
	s := &server{base: "http://" + addr, stdout: &testlog.Buffer{}, stderr: &testlog.Buffer{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		s.done <- run(ctx, append([]string{"serve", "--addr", addr, "--refresh", "1s"}, args...), func(string) string { return "" }, s.stdout, s.stderr)
	}()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		res, err := http.Get(s.base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-s.done:
			t.Fatalf("serve exited: %v\n%s", err, s.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 3 minutes\n%s", s.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// waitHistory waits until /readyz says the history is whole: a live
// feed's first start serves quotes while its history comes in.
func (s *server) waitHistory(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, body := s.get(t, "/readyz", "")
		if data, _ := body["data"].(map[string]any); data["history"] == "complete" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("history not complete after 2 minutes: %v", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop shuts the server down gracefully and checks that it exits cleanly.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("serve returned %v\n%s", err, s.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Error("serve did not stop within 30 s")
	}
}

func (s *server) get(t *testing.T, path, key string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return res.StatusCode, body
}

// send sends a JSON body; numbers in the answer stay json.Number.
func (s *server) send(t *testing.T, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	dec := json.NewDecoder(res.Body)
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return res.StatusCode, out
}

// portfolioFlow buys 0.1 and 0.2 bitcoin and sells 0.1 at a profit through
// the running server, checking the exact figures, and returns the
// portfolio's path.
func portfolioFlow(t *testing.T, s *server, key string) string {
	t.Helper()
	status, body := s.send(t, "POST", "/api/v1/portfolio", key, `{"name":"e2e"}`)
	if status != 201 {
		t.Fatalf("create portfolio: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(json.Number).String()
	path := "/api/v1/portfolio/" + id
	for _, q := range []string{"0.1", "0.2"} {
		if status, body := s.send(t, "POST", path+"/holdings", key, `{"coin_id":"bitcoin","quantity":`+q+`,"buy_price":100}`); status != 201 {
			t.Fatalf("add holding: %d %v", status, body)
		}
	}
	status, body = s.send(t, "POST", "/v1/portfolio/transactions", key, `{"portfolio_id":`+id+`,"coin_id":"btc","type":"sell","quantity":"0.1","price":"150.5"}`)
	if status != 201 {
		t.Fatalf("sell: %d %v", status, body)
	}
	status, body = s.send(t, "GET", path, key, "")
	p := body["data"].(map[string]any)
	h := p["holdings"].([]any)[0].(map[string]any)
	if status != 200 || h["quantity"] != json.Number("0.2") || h["total_cost"] != json.Number("20") || p["realized_profit_loss"] != json.Number("5.05") {
		t.Fatalf("portfolio after 0.1 + 0.2 - 0.1: %d %v", status, p)
	}
	return path
}

var demoKey = regexp.MustCompile(`(live|sandbox) key: +(sk_\w+)`)

// testServeEndToEnd starts serve on db, uses the demo keys, revokes one
// with the CLI, restarts and checks the warm start.
func testServeEndToEnd(t *testing.T, db string, extra ...string) {
	// The flow makes calls faster than the pro plan's 5 a second.
	args := append([]string{"--db", db, "--plans", generousPlans(t)}, extra...)
	s := startServe(t, args...)
	keys := map[string]string{}
	for _, m := range demoKey.FindAllStringSubmatch(s.stdout.String(), -1) {
		keys[m[1]] = m[2]
	}
	if keys["live"] == "" || keys["sandbox"] == "" || !strings.Contains(s.stdout.String(), "curl -H \"Authorization: Bearer sk_") {
		t.Fatalf("serve did not print demo keys and a curl line:\n%s", s.stdout)
	}
	for _, k := range keys {
		if status, body := s.get(t, "/api/v1/markets?per_page=5", k); status != 200 || len(body["data"].([]any)) != 5 {
			t.Fatalf("markets with a demo key: %d %v", status, body)
		}
	}
	// OPTIONS * reaches the API (its JSON 404), not net/http's bare 200;
	// net/http's own answers to requests it cannot read are in the
	// envelope too (serve's listener).
	for _, c := range []struct {
		raw    string
		status int
	}{
		{"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404},
		{"GET /api/v1/markets HTTP/1.1\r\n\r\n", 400},
		{"GET /api/v1/markets HTTP/1.1\r\nHost: x\r\nExpect: tea\r\n\r\n", 417},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(conn, c.raw)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		conn.Close()
		if res.StatusCode != c.status || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || res.Header.Get("X-Request-Id") == "" || !strings.Contains(string(body), `"success":false`) {
			t.Errorf("%.40q: %d, Content-Type %q, %s", c.raw, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
	}
	if status, body := s.get(t, "/v1/coins/btc/history?days=90&interval=hourly", keys["live"]); status != 200 || len(body["data"].(map[string]any)["points"].([]any)) < 90*24 {
		t.Fatalf("hourly history: %d", status)
	}
	// Portfolios, exact on this store; the sandbox sees only its own.
	portfolioFlow(t, s, keys["live"])
	sandboxPortfolio := portfolioFlow(t, s, keys["sandbox"])
	if status, body := s.get(t, "/api/v1/portfolio", keys["sandbox"]); status != 200 || len(body["data"].([]any)) != 1 {
		t.Fatalf("sandbox portfolios: %d %v", status, body)
	}

	// Revoking with the CLI (another process's connection to the same
	// database) fails the key on the server within the epoch poll.
	env := map[string]string{"COINPULSE_DB": db}
	mustCLI(t, env, "keys", "revoke", "--email", DemoEmail, "--key", keys["live"])
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, body := s.get(t, "/api/v1/markets/global", keys["live"])
		if status == 401 {
			if body["error"].(map[string]any)["code"] != "INVALID_API_KEY" {
				t.Errorf("revoked key: %v", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("revoked key still works after 5 s: %d", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Tier changes reach the server the same way.
	mustCLI(t, env, "users", "set-tier", "--email", DemoEmail, "--tier", "free")
	deadline = time.Now().Add(5 * time.Second)
	for {
		status, _ := s.get(t, "/api/v1/markets/top-movers", keys["sandbox"])
		if status == 403 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tier change not seen after 5 s: %d", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop(t)
	t.Logf("first server:\n%s", s.stderr)

	// A warm start reuses the data: no backfill, the same account.
	s2 := startServe(t, args...)
	if strings.Contains(s2.stderr.String(), "backfilling history") {
		t.Errorf("warm start backfilled again:\n%s", s2.stderr)
	}
	if !strings.Contains(s2.stdout.String(), "keys create --email "+DemoEmail) {
		t.Errorf("second start does not say how to get a key:\n%s", s2.stdout)
	}
	if status, _ := s2.get(t, "/api/v1/markets", keys["sandbox"]); status != 200 {
		t.Errorf("sandbox key after restart: %d", status)
	}
	// The portfolio outlived the restart (back on a paid tier).
	mustCLI(t, env, "users", "set-tier", "--email", DemoEmail, "--tier", "pro")
	deadline = time.Now().Add(5 * time.Second)
	for {
		status, body := s2.send(t, "GET", sandboxPortfolio, keys["sandbox"], "")
		if status == 200 {
			if p := body["data"].(map[string]any); p["realized_profit_loss"] != json.Number("5.05") || p["holdings_count"] != json.Number("1") {
				t.Errorf("portfolio after restart: %v", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("portfolio after restart: %d %v", status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServeSQLite(t *testing.T) {
	testServeEndToEnd(t, "sqlite:"+filepath.Join(t.TempDir(), "coinpulse.db"))
}

func TestServePostgres(t *testing.T) {
	testServeEndToEnd(t, postgresSchema(t))
}

// postgresSchema creates a fresh schema on the test server and returns a
// URL whose connections use it.
func postgresSchema(t *testing.T) string {
	t.Helper()
	base := storetest.PostgresURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect %s: %v", base, err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "cmd_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestValidBillingURL(t *testing.T) {
	for u, want := range map[string]bool{
		"https://billing.example.com/upgrade?plan=pro": true,
		"http://localhost:9000/billing":                true,
		"/billing":                                     true,
		"javascript:alert(1)":                          false,
		"mailto:sales@example.com":                     false,
		"billing.example.com":                          false,
		"//billing.example.com":                        false,
		"https://":                                     false,
		"https://a b.example.com":                      false,
		"https://user:pw@billing.example.com":          false,
	} {
		if got := validBillingURL(u); got != want {
			t.Errorf("validBillingURL(%q) = %v, want %v", u, got, want)
		}
	}
}

func TestServeRejectsBadConfig(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--refresh", "1ms"},
		{"serve", "--feed", "nope"},
		{"serve", "--log-level", "loud"},
		{"serve", "--sim-coins", "1000000"},
		{"serve", "extra"},
		{"serve", "--sandbox-per-second", "0"},
		{"serve", "--sandbox-per-minute", "-1"},
		{"serve", "--sandbox-per-minute", "1000000001"},
		{"serve", "--sandbox-per-second", "3000", "--sandbox-per-minute", "50"}, // swapped
		{"serve", "--billing-url", "javascript:alert(1)"},
		{"serve", "--billing-url", "billing.example.com/upgrade"},
		{"serve", "--billing-url", "//billing.example.com"},
		{"serve", "--billing-url", "https://"},
		{"serve", "--billing-url", "https://user:pw@billing.example.com"},
		{"serve", "--shutdown-timeout", "0s"},
		{"serve", "--sim-coins", "5"},
		{"serve", "--sim-coins", "-5"},
		{"serve", "--ws-max-per-account", "-1"},
		{"serve", "--min-mover-volume", "-5"},
		{"serve", "--min-mover-volume", "NaN"},
		{"serve", "--shutdown-timeout", "-5s"},
		{"serve", "--write-timeout", "500ms"},
		{"serve", "--db", "mysql://localhost/x"},
		// An audit's: a database in memory, a refresh past a day, STARTTLS
		// with implicit TLS.
		{"serve", "--db", "sqlite::memory:"},
		{"serve", "--db", "sqlite:file:x.db"},
		{"serve", "--trusted-proxies", "10.0.0.0/8,proxy.internal"},
		{"serve", "--refresh", "25h"},
		{"serve", "--smtp-host", "mail.example.com", "--smtp-from", "a@example.com", "--smtp-tls", "--smtp-starttls", "opportunistic"},
		{"users", "create", "--email", "m@example.com", "--db", "sqlite::memory:"},
	} {
		if _, _, err := cli(t, nil, args...); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	if _, _, err := cli(t, map[string]string{"COINPULSE_REFRESH": "soon"}, "serve"); err == nil || !strings.Contains(err.Error(), "COINPULSE_REFRESH") {
		t.Errorf("a bad COINPULSE_REFRESH: %v", err)
	}
	// A value that parses but that serve refuses names its variable too,
	// unless the command line gave the flag.
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"COINPULSE_LIMITS": "sometimes"}, nil, `--limits "sometimes": on or off (set by COINPULSE_LIMITS)`},
		{map[string]string{"COINPULSE_SANDBOX_PER_SECOND": "0"}, nil, "(set by COINPULSE_SANDBOX_PER_SECOND)"},
		{map[string]string{"COINPULSE_LIMITS": "on"}, []string{"--limits=sometimes"}, `--limits "sometimes": on or off`},
		{map[string]string{"COINPULSE_REFRESH": "1s"}, []string{"-refresh", "1ms"}, "--refresh 1ms: must be at least 100ms"},
		{map[string]string{"COINPULSE_ADDR": "nonsense"}, nil, `--addr "nonsense": HOST:PORT or :PORT to listen on, such as 127.0.0.1:8080 or :8080 (set by COINPULSE_ADDR)`},
		{nil, []string{"--addr", "127.0.0.1:70000"}, `--addr "127.0.0.1:70000": HOST:PORT or :PORT to listen on, such as 127.0.0.1:8080 or :8080`},
		{map[string]string{"COINPULSE_REDIS": "http://127.0.0.1:6379/0"}, nil, "--redis: not a URL of the form redis://[user:password@]host[:port][/db][?option=value] (or rediss://), with the password percent-encoded; it is not quoted here, as it may hold a password (set by COINPULSE_REDIS)"},
		// Several SMTP problems at once: each names its own source.
		{map[string]string{"COINPULSE_SMTP_HOST": "mail.example.com", "COINPULSE_SMTP_PORT": "70000"}, []string{"--smtp-from", "nope"},
			"--smtp-port 70000 is not a TCP port (1-65535) (set by COINPULSE_SMTP_PORT)\n--smtp-from \"nope\" is not an e-mail address: mail: missing '@' or angle-addr"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		_, _, err := cli(t, tt.env, append([]string{"serve", "--data-dir", dir}, tt.args...)...)
		if err == nil || !strings.HasSuffix(err.Error(), tt.want) {
			t.Errorf("%v %v: %v, want it to end with %q", tt.env, tt.args, err, tt.want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%v %v: refused after creating the data directory", tt.env, tt.args)
		}
		if err != nil && len(tt.args) > 0 && strings.Count(err.Error(), "set by") != strings.Count(tt.want, "set by") {
			t.Errorf("%v %v: %v names the variable, but the command line set the flag", tt.env, tt.args, err)
		}
	}
}

// serve's --write-timeout reaches its connections: a client that sends
// many requests, pipelined, and reads nothing for 3 s (10 MB and more of
// answers, more than the kernel's buffers hold) finds the connection cut
// once it reads, rather than every answer waiting for it. Answers under
// 64 KiB (the documentation's script) have the http.Server's
// WriteTimeout; larger ones (the OpenAPI document) the API's pace too.
func TestServeCutsOffAStalledReader(t *testing.T) {
	s := startServe(t, "--db", "sqlite:"+filepath.Join(t.TempDir(), "coinpulse.db"), "--demo=false", "--write-timeout", "1s")
	// --demo=false on a fresh database says how to start (it printed nothing).
	if out := s.stdout.String(); !strings.Contains(out, "with no accounts (--demo=false)") || !strings.Contains(out, " users create --email <e-mail>") {
		t.Errorf("serve --demo=false printed:\n%s", out)
	}
	for _, c := range []struct {
		path string
		n    int
	}{{"/docs/docs.js", 400}, {"/api/v1/openapi.json", 30}} {
		t.Run(c.path, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprint(conn, strings.Repeat("GET "+c.path+" HTTP/1.1\r\nHost: x\r\n\r\n", c.n))
			time.Sleep(3 * time.Second)
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(conn)
			whole := 0
			for ; whole < c.n; whole++ {
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err != nil {
					break
				}
			}
			if whole == c.n {
				t.Fatalf("all %d answers arrived after the client read nothing for 3 s, with --write-timeout 1s", c.n)
			}
		})
	}
}

// describeDB never shows a password, in the user part or in the query,
// and shows the rest as it is.
func TestDescribeDB(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "sqlite:data/coinpulse.db",
		"sqlite:/tmp/x.db": "sqlite:/tmp/x.db",
		"/tmp/x.db":        "/tmp/x.db",
		"postgres://postgres@127.0.0.1:5432/test":                        "postgres://postgres@127.0.0.1:5432/test",
		"postgres://ann:secret@db:5432/cp":                               "postgres://ann:xxxxx@db:5432/cp",
		"postgres://db/cp?user=ann&password=secret&sslmode=disable":      "postgres://db/cp?password=xxxxx&sslmode=disable&user=ann",
		"postgres://db/cp?sslpassword=secret":                            "postgres://db/cp?sslpassword=xxxxx",
		"postgresql://ann:s%40cret@db/cp?password=also&search_path=cp_1": "postgresql://ann:xxxxx@db/cp?password=xxxxx&search_path=cp_1",
		"host=db user=ann password=secret dbname=cp":                     "(a keyword/value string, not shown)",
		" host = db password = secret":                                   "(a keyword/value string, not shown)",
		"sslkey=/k password=secret":                                      "(a keyword/value string, not shown)",
		"data/x=1.db":                                                    "data/x=1.db",
	} {
		got := describeDB(in, "data")
		if got != want || strings.Contains(got, "secret") || strings.Contains(got, "also") {
			t.Errorf("describeDB(%q) = %q, want %q", in, got, want)
		}
	}
}

// A libpq keyword/value string is refused, not taken for a SQLite path
// (which made a file of that name and logged the password).
func TestKeywordValueDSNRefused(t *testing.T) {
	dir := t.TempDir()
	dsn := "host=127.0.0.1 user=postgres password=s3cret dbname=cp"
	t.Chdir(dir)
	for _, args := range [][]string{{"migrate", "--db", dsn}, {"keys", "list", "--email", "ann@example.com", "--db", dsn}} {
		_, _, err := cli(t, nil, args...)
		if err == nil || !strings.Contains(err.Error(), "postgres://") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: %v, want a refusal naming the URL form, without the password", args, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files made: %v", entries)
	}
}

// Only serve, migrate and users create make a SQLite database: the other
// commands, given a path where there is none, say so and create nothing.
func TestCommandsDoNotCreateADatabaseByMistake(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "nodir", "typo.db")
	for _, args := range [][]string{
		{"keys", "list", "--email", "ann@example.com"},
		{"keys", "create", "--email", "ann@example.com"},
		{"keys", "revoke", "--email", "ann@example.com", "--id", "1"},
		{"users", "set-tier", "--email", "ann@example.com", "--tier", "pro"},
	} {
		_, _, err := cli(t, nil, append(args, "--db", "sqlite:"+typo)...)
		if err == nil || !strings.Contains(err.Error(), "no database at "+typo) || !strings.Contains(err.Error(), "users create makes one") {
			t.Errorf("%v on a missing database: %v", args, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "nodir")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a command made %s: %v", filepath.Join(dir, "nodir"), err)
	}
	mustCLI(t, nil, "users", "create", "--email", " ann@example.com ", "--db", "sqlite:"+typo)
	mustCLI(t, nil, "keys", "list", "--email", " ann@example.com", "--db", "sqlite:"+typo) // trimmed, as users create trims
	if _, _, err := cli(t, nil, "keys", "list", "--email", "bob@example.com", "--db", "sqlite:"+typo); err == nil || !strings.Contains(err.Error(), `"bob@example.com"`) {
		t.Errorf("an unknown e-mail address: %v, want an error naming it", err)
	}
}

// lateStore is a store whose look-ups of users answer as they would have
// just before another node made the first user: none.
type lateStore struct{ coinpulse.Store }

func (lateStore) UserByEmail(context.Context, string) (*coinpulse.User, error) {
	return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "The user was not found.")
}

func (lateStore) HasUsers(context.Context) (bool, error) { return false, nil }

// Nodes starting together on a new database race to make the demo
// account: a node that finds it made by another between its look-up and
// its insert comes up all the same, and shows no keys.
func TestDemoAccountRace(t *testing.T) {
	store, err := openStore(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "cp.db"), "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var first, second bytes.Buffer
	if err := demoAccount(t.Context(), store, "http://node1", serveConfig{dataDir: defaultDataDir, demo: true}, &first); err != nil || !strings.Contains(first.String(), "sandbox key:") {
		t.Fatalf("the first node: %v\n%s", err, first.String())
	}
	if err := demoAccount(t.Context(), lateStore{store}, "http://node2", serveConfig{dataDir: defaultDataDir, demo: true}, &second); err != nil {
		t.Fatalf("the second node failed: %v", err)
	}
	if out := second.String(); strings.Contains(out, "sandbox key:") || !strings.Contains(out, "made by another node") {
		t.Errorf("the second node said:\n%s", out)
	}
}

// --demo makes the demo account on a fresh database only: a database
// that already has accounts (started with --demo=false) gets no pro
// account with live keys from a later start that left the flag out.
func TestDemoAccountOnlyOnAFreshDatabase(t *testing.T) {
	store, err := openStore(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "cp.db"), "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.CreateUser(t.Context(), &coinpulse.User{Email: "ops@example.com", Tier: coinpulse.TierFree}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := demoAccount(t.Context(), store, "http://node1", serveConfig{dataDir: defaultDataDir, demo: true}, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "sk_live_") || !strings.Contains(s, "no demo account") {
		t.Errorf("demoAccount said:\n%s", s)
	}
	if _, err := store.UserByEmail(t.Context(), DemoEmail); !coinpulse.IsNotFound(err) {
		t.Errorf("the demo account: %v, want none", err)
	}
}

// --demo=false on a fresh database makes no account, and says how to make
// one and a key for it.
func TestNoDemoAccountSaysHowToStart(t *testing.T) {
	store, err := openStore(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "cp.db"), "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var out bytes.Buffer
	if err := demoAccount(t.Context(), store, "http://node1", serveConfig{dataDir: defaultDataDir}, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "sk_") || !strings.Contains(s, "http://node1 with no accounts (--demo=false)") ||
		!strings.Contains(s, " users create --email <e-mail> --tier <tier>\n") || !strings.Contains(s, " keys create --email <e-mail>\n") {
		t.Errorf("demoAccount said:\n%s", s)
	}
	if has, err := store.HasUsers(t.Context()); err != nil || has {
		t.Errorf("HasUsers: %v %v, want no account", has, err)
	}
}

// The start-up message shows a wildcard listener as localhost.
func TestBaseURL(t *testing.T) {
	for _, c := range []struct {
		ip   net.IP
		want string
	}{
		{net.IPv6unspecified, "http://localhost:8080"},
		{net.IPv4zero, "http://localhost:8080"},
		{net.IPv4(127, 0, 0, 1), "http://127.0.0.1:8080"},
		{net.IPv6loopback, "http://[::1]:8080"},
		{net.IPv4(192, 0, 2, 7), "http://192.0.2.7:8080"},
	} {
		if got := baseURL(&net.TCPAddr{IP: c.ip, Port: 8080}); got != c.want {
			t.Errorf("baseURL(%v) = %s, want %s", c.ip, got, c.want)
		}
	}
}

// A tier's expiry in the past is refused (a mistyped year would lock a
// paying account out); "now" ends a subscription at once.
func TestUsersExpiryInThePast(t *testing.T) {
	env := map[string]string{"COINPULSE_DB": "sqlite:" + filepath.Join(t.TempDir(), "cp.db")}
	if _, _, err := cli(t, env, "users", "create", "--email", "ann@example.com", "--tier", "pro", "--expires", "2020-01-01T00:00:00Z"); coinpulse.ErrorCode(err) != coinpulse.CodeValidation {
		t.Errorf("users create with a past expiry: %v, want VALIDATION_ERROR", err)
	}
	mustCLI(t, env, "users", "create", "--email", "ann@example.com", "--tier", "pro", "--expires", "2100-01-01T00:00:00Z")
	if _, _, err := cli(t, env, "users", "set-tier", "--email", "ann@example.com", "--tier", "pro", "--expires", "2020-01-01T00:00:00Z"); coinpulse.ErrorCode(err) != coinpulse.CodeValidation || !strings.Contains(err.Error(), "--expires now") {
		t.Errorf("users set-tier with a past expiry: %v, want VALIDATION_ERROR naming --expires now", err)
	}
	// What time.Parse takes and RFC 3339 does not: +24:00 would have
	// meant a day earlier (a review).
	for _, exp := range []string{"2099-01-31T00:00:00+24:00", "2099-01-31T00:00:00+00:60", "2099-01-31T1:00:00Z"} {
		if _, _, err := cli(t, env, "users", "set-tier", "--email", "ann@example.com", "--tier", "pro", "--expires", exp); err == nil || !strings.Contains(err.Error(), "not an RFC 3339 time") {
			t.Errorf("--expires %s: %v, want it refused", exp, err)
		}
	}
	mustCLI(t, env, "users", "set-tier", "--email", "ann@example.com", "--tier", "pro", "--expires", "now")
	store, err := openStore(t.Context(), env["COINPULSE_DB"], "", false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	u, err := store.UserByEmail(t.Context(), "ann@example.com")
	if err != nil || !u.SubscriptionExpired(time.Now()) {
		t.Errorf("after --expires now: %+v, %v; want an expired subscription", u, err)
	}
}

// keys create holds names to the dashboard's rules.
func TestKeysCreateChecksTheName(t *testing.T) {
	env := map[string]string{"COINPULSE_DB": "sqlite:" + filepath.Join(t.TempDir(), "cp.db")}
	mustCLI(t, env, "users", "create", "--email", "ann@example.com")
	if _, _, err := cli(t, env, "keys", "create", "--email", "ann@example.com", "--expires", "2020-01-01T00:00:00Z"); coinpulse.ErrorCode(err) != coinpulse.CodeValidation {
		t.Errorf("a key expiring in the past: %v, want VALIDATION_ERROR", err)
	}
	// Control characters are refused at the ends too (a review: the trim
	// took them off).
	for _, name := range []string{"", "  ", "a\tb", "a\nb", strings.Repeat("n", coinpulse.MaxKeyName+1), "\r\vmy key\u0085\f"} {
		if _, _, err := cli(t, env, "keys", "create", "--email", "ann@example.com", "--name", name); coinpulse.ErrorCode(err) != coinpulse.CodeValidation {
			t.Errorf("--name %q: %v, want VALIDATION_ERROR", name, err)
		}
	}
	mustCLI(t, env, "keys", "create", "--email", "ann@example.com", "--name", " mobile app ")
	if out := mustCLI(t, env, "keys", "list", "--email", "ann@example.com"); !strings.Contains(out, "mobile app") {
		t.Errorf("keys list:\n%s", out)
	}
}

// TestEveryFailureIsTold: main prints nothing more for a usageError (its
// message is on stderr already), so a command that fails must either
// have said why on stderr or return an error main prints. "no database
// at PATH" and a --db of another kind were usageErrors nobody printed:
// the command exited 2 in silence.
func TestEveryFailureIsTold(t *testing.T) {
	typo := filepath.Join(t.TempDir(), "nodir", "typo.db")
	for _, args := range [][]string{
		{},
		{"nonsense"},
		{"users"},
		{"serve", "--no-such-flag"},
		{"serve", "--db", "mysql://u:p@h/db"},
		{"migrate", "--db", "mysql://u@h/db"},
		{"keys", "list", "--email", "ann@example.com", "--db", "sqlite:" + typo},
		{"keys", "create", "--email", "ann@example.com", "--db", "sqlite:" + typo},
		{"keys", "revoke", "--email", "ann@example.com", "--db", "sqlite:" + typo},
		{"users", "set-tier", "--email", "ann@example.com", "--tier", "pro", "--db", "sqlite:" + typo},
		{"users", "create", "--tier", "pro", "--db", "sqlite:" + typo},
	} {
		_, stderr, err := cli(t, nil, args...)
		var u usageError
		switch {
		case err == nil:
			t.Errorf("coinpulse %s succeeded", strings.Join(args, " "))
		case errors.As(err, &u) && strings.TrimSpace(stderr) == "":
			t.Errorf("coinpulse %s: %q is a usageError, which main does not print, and stderr is empty", strings.Join(args, " "), err)
		}
	}
}

// TestHelpIsNotAFailure: "coinpulse CMD -h" prints the command's flags
// on stdout, as "coinpulse --help" does, and exits 0 (an audit: they went
// to stderr, so "serve -h | grep redis" found nothing).
func TestHelpIsNotAFailure(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "-h"},
		{"serve", "--help"},
		{"users", "create", "-h"},
		{"keys", "list", "-help"},
		{"migrate", "-h"},
	} {
		stdout, stderr, err := cli(t, nil, args...)
		if err != nil || !strings.Contains(stdout, "-db") || stderr != "" {
			t.Errorf("coinpulse %s: %v, want the flags (with -db) on stdout, nothing on stderr, and no error; stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout, stderr)
		}
	}
	// A mistake still shows them, on stderr.
	if stdout, stderr, err := cli(t, nil, "serve", "--nope"); err == nil || stdout != "" || !strings.Contains(stderr, "-db") {
		t.Errorf("serve --nope: %v; stdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
}

// TestBadEnvironmentValueSaysWhatIsWanted: a variable that does not parse
// names the flag and the kind of value it wants, not only "parse error".
func TestBadEnvironmentValueSaysWhatIsWanted(t *testing.T) {
	for name, want := range map[string]string{
		"COINPULSE_REFRESH": "want a duration for --refresh",
		"COINPULSE_DEMO":    "want true or false for --demo",
		"COINPULSE_SEED":    "want an int for --seed",
	} {
		_, _, err := cli(t, map[string]string{name: "fast"}, "serve", "--data-dir", t.TempDir())
		if err == nil || !strings.Contains(err.Error(), name+`="fast"`) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=fast: %v, want %q", name, err, want)
		}
	}
	// From a _FILE variable, the error names that variable and its file,
	// not the content, which may be a secret (an audit: it named
	// COINPULSE_REFRESH, which was not set, and showed the content).
	file := filepath.Join(t.TempDir(), "refresh")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := cli(t, map[string]string{"COINPULSE_REFRESH_FILE": file}, "serve", "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("COINPULSE_REFRESH_FILE=%q", file)) || !strings.Contains(err.Error(), "want a duration for --refresh") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("COINPULSE_REFRESH_FILE holding s3cret: %v", err)
	}
	// Nor does a Redis URL that does not parse show its password (a
	// review: net/url's error quoted the whole URL).
	file = filepath.Join(t.TempDir(), "redis")
	if err := os.WriteFile(file, []byte("redis://user:s3cret@[::1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = cli(t, map[string]string{"COINPULSE_REDIS_FILE": file}, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "--redis: not a URL of the form redis://") || !strings.Contains(err.Error(), "(set by COINPULSE_REDIS_FILE)") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("COINPULSE_REDIS_FILE holding a malformed URL with a password: %v", err)
	}
	// On the command line too, without the list of every flag (an audit).
	for flag, want := range map[string]string{
		"--refresh": "want a duration",
		"--demo":    "want true or false",
		"--seed":    "want an int",
	} {
		_, stderr, err := cli(t, nil, "serve", "--data-dir", t.TempDir(), flag+"=fast")
		if err == nil || !strings.Contains(err.Error(), flag+` "fast": `+want) || strings.Contains(stderr, "Usage of") {
			t.Errorf("%s=fast: %v, stderr %.200q; want %q alone", flag, err, stderr, want)
		}
	}
}

// go-redis's own messages reach the service's log as records of its
// format (JSON here), at most one a second with a count of those left
// out, not as plain lines on stderr for every failed dial.
func TestRedisLogIsTheServicesLog(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	l := &redisLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), now: func() time.Time { return now }}
	for range 5 {
		l.Printf(context.Background(), "redis: %s:%d: dial tcp 127.0.0.1:6399: connect: connection refused\n", "pool.go", 770)
		now = now.Add(300 * time.Millisecond)
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON record: %q", line)
		}
		recs = append(recs, rec)
	}
	// At 0, 0.3, 0.6, 0.9, 1.2 s: the first and the fifth are logged.
	if len(recs) != 2 || recs[0]["level"] != "WARN" || recs[0]["msg"] != "redis client: redis: pool.go:770: dial tcp 127.0.0.1:6399: connect: connection refused" ||
		recs[1]["suppressed_since_last"] != float64(3) {
		t.Errorf("records %v", recs)
	}
}

// Nodes on one database with different limiters each admit an account's
// allowance (an audit: 200 calls on a 100-a-month plan from two nodes
// with different --redis-prefix). A node starting with another limiter
// than the one that last served the database says so.
func TestCheckLimiterWarnsOfAnotherLimiter(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	redisA := `redis 127.0.0.1:6379 db 0 prefix "cp:rl:"`
	redisB := `redis 127.0.0.1:6379 db 0 prefix "other:"`
	for i, c := range []struct {
		limiter string
		warns   bool
	}{
		{"in process", false}, // a new database
		{"in process", false},
		{redisA, true},
		{redisA, false},
		{redisB, true},
	} {
		buf.Reset()
		checkLimiter(ctx, store, c.limiter, log)
		warned := strings.Contains(buf.String(), "last served with another rate limiter")
		if warned != c.warns {
			t.Errorf("start %d with %s: warned %v, want %v; log %s", i, c.limiter, warned, c.warns, buf.String())
		}
		if got, err := store.GetKV(ctx, limiterKey); err != nil || string(got) != c.limiter {
			t.Errorf("start %d: recorded %q, %v; want %q", i, got, err, c.limiter)
		}
	}
}

// A port in use fails the start before the database is created.
func TestServePortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := filepath.Join(t.TempDir(), "data")
	_, _, err = cli(t, nil, "serve", "--addr", ln.Addr().String(), "--data-dir", dir)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve on a port in use: %v, want address already in use", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the data dir exists after the failed start (%v)", err)
	}
}

// A Redis that does not answer fails the start before the database is
// created or migrated, as a port in use does (an audit: the start failed
// at the limiter, after a new database was made and migrated).
func TestServeRedisDownCreatesNoDatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	dir := filepath.Join(t.TempDir(), "data")
	_, _, err = cli(t, nil, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--redis", "redis://"+down+"/0")
	if err == nil || !strings.Contains(err.Error(), "--redis "+down) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("serve with a Redis that is down: %v, want --redis %s: … connection refused", err, down)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the data dir exists after the failed start (%v)", err)
	}
}

// The operator CLI's refusals of a value name the environment variable
// that set it, as serve's do (an audit: "invalid tier: …" did not say
// COINPULSE_TIER gave "gold").
func TestCLIRefusalsNameTheirVariable(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "c.db")
	mustCLI(t, nil, "users", "create", "--email", "env@example.com", "--db", db)
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"COINPULSE_TIER": "gold"}, []string{"users", "set-tier"}, `--tier "gold": must be one of free, premium, pro, enterprise, business (set by COINPULSE_TIER)`},
		{nil, []string{"users", "set-tier", "--tier", "gold"}, `--tier "gold": must be one of free, premium, pro, enterprise, business`},
		{map[string]string{"COINPULSE_PERMISSIONS": "admin"}, []string{"keys", "create"}, `--permissions "admin": must be a comma-separated list of read and write (set by COINPULSE_PERMISSIONS)`},
		{map[string]string{"COINPULSE_EXPIRES": "2020-01-01T00:00:00Z"}, []string{"keys", "create"}, "--expires 2020-01-01T00:00:00Z is past: a key that expires then would never work (set by COINPULSE_EXPIRES)"},
		{map[string]string{"COINPULSE_KEY": "sk_live_x"}, []string{"keys", "revoke", "--id", "2"}, "give exactly one of --id or --key (set in the environment: COINPULSE_KEY)"},
	} {
		_, stderr, err := cli(t, tt.env, append(tt.args, "--email", "env@example.com", "--db", db)...)
		if got := strings.TrimSpace(stderr); err == nil || !strings.HasSuffix(err.Error(), tt.want) && !strings.HasSuffix(got, tt.want) {
			t.Errorf("%v %v: %v (stderr %q), want it to end with %q", tt.env, tt.args, err, got, tt.want)
		}
	}
}

// The key hints serve prints name the command the operator ran: go run's
// for a binary built by go run, else the binary as invoked (an audit: a
// released binary printed "go run ./cmd/coinpulse", which needs the
// source).
func TestCLICommand(t *testing.T) {
	for arg0, want := range map[string]string{
		"/tmp/go-build123/b001/exe/coinpulse": "go run ./cmd/coinpulse",
		"coinpulse":                           "coinpulse",
		"./coinpulse":                         "./coinpulse",
		"/opt/my apps/coinpulse":              "'/opt/my apps/coinpulse'",
		"/opt/it's/coinpulse":                 `'/opt/it'\''s/coinpulse'`,
	} {
		if got := cliCommand(arg0); got != want {
			t.Errorf("cliCommand(%q) = %q, want %q", arg0, got, want)
		}
	}
}

// --metrics-token-file: /metrics answers only with the file's token, and
// a file that holds no usable token is refused before serving.
func TestMetricsTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, bad := range []string{
		filepath.Join(dir, "missing"),
		write("short", "0123456789\n"),
		write("space", "0123456789 abcdef0123\n"),
		write("lines", "0123456789abcdef\n0123456789abcdef\n"),
	} {
		if _, _, err := cli(t, nil, "serve", "--metrics-token-file", bad); err == nil || !strings.Contains(err.Error(), "--metrics-token-file") {
			t.Errorf("%s: %v", filepath.Base(bad), err)
		}
	}
	const token = "5f0c2a9e81d34b7f9a6e0c1d2b3a4f59"
	s := startServe(t, "--db", "sqlite:"+filepath.Join(dir, "c.db"), "--metrics-token-file", write("token", token+"\r\n"))
	for auth, want := range map[string]int{"": 401, "Bearer nope-nope-nope-nope": 401, "Bearer " + token: 200} {
		req, _ := http.NewRequest("GET", s.base+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want || (want == 200) != strings.Contains(string(body), "coinpulse_market_coins ") {
			t.Errorf("Authorization %q: %d %.200s", auth, res.StatusCode, body)
		}
	}
}
