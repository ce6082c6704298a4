// Command coinpulse runs the Coinpulse API server and its operator CLI.
//
//	coinpulse serve [flags]           run the server
//	coinpulse users create|set-tier   manage accounts
//	coinpulse keys create|list|revoke manage API keys
//	coinpulse migrate                 apply database migrations and exit
//
// Every flag can also be set with an environment variable COINPULSE_<NAME>
// (upper case, dashes as underscores), or read from a file named by
// COINPULSE_<NAME>_FILE; a flag on the command line wins.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"coinpulse"
	"coinpulse/internal/postgres"
	"coinpulse/internal/sqlite"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		var u usageError
		var ce *coinpulse.Error
		switch {
		case errors.As(err, &u):
		case errors.As(err, &ce) && ce.Code.Status() < 500:
			fmt.Fprintln(os.Stderr, "coinpulse:", ce.Message) // the operator's mistake: no internals
		default:
			fmt.Fprintln(os.Stderr, "coinpulse:", err)
		}
		os.Exit(2)
	}
}

// usageError is a command-line mistake whose message was already printed.
type usageError struct{ error }

const usage = `Usage: coinpulse <command> [flags]

Commands:
  serve           run the API server (SQLite and the simulated feed by default)
  users create    create an account: --email E [--tier T (default free)] [--expires RFC3339|now] [--password P]
  users set-tier  change an account's tier: --email E --tier T [--expires RFC3339|now]
  keys create     create an API key and print it alone on stdout:
                  --email E [--name N] [--permissions read,write] [--test] [--expires RFC3339]
  keys list       list an account's keys: --email E
  keys revoke     revoke a key: --email E (--id N | --key sk_...)
  migrate         apply database migrations and exit

Every command that touches data takes --db (sqlite:PATH, a bare path, or
postgres://...). Run "coinpulse <command> -h" for its flags.
`

// run is the whole program, with its environment passed in for tests.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := runCommand(ctx, args, getenv, stdout, stderr)
	var help helpError
	if errors.As(err, &help) {
		fmt.Fprint(stdout, help.text) // "coinpulse CMD -h": its flags, as asked
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil // "coinpulse -h": the commands were printed
	}
	return fromEnv(err, args, getenv)
}

// helpError is a command's -h: the flags' help, for stdout.
type helpError struct{ text string }

func (helpError) Error() string { return flag.ErrHelp.Error() }
func (helpError) Unwrap() error { return flag.ErrHelp }

// fromEnv names the environment variable behind a flag that err, a
// check of a flag's value ("--name ..."), refuses, when the variable and
// not the command line set it: the operator then knows where to look.
func fromEnv(err error, args []string, getenv func(string) string) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok { // several refusals at once
		errs := j.Unwrap()
		named := make([]error, len(errs))
		for i, e := range errs {
			named[i] = fromEnv(e, args, getenv)
		}
		return errors.Join(named...)
	}
	var u usageError
	if err == nil || errors.As(err, &u) {
		return err
	}
	text := err.Error()
	var ce *coinpulse.Error // an operator's mistake, printed as its message
	if errors.As(err, &ce) {
		text = ce.Message
	}
	if !strings.HasPrefix(text, "--") {
		return err
	}
	name := strings.TrimPrefix(text, "--")
	if i := strings.IndexFunc(name, func(r rune) bool { return r != '-' && (r < 'a' || r > 'z') && (r < '0' || r > '9') }); i >= 0 {
		name = name[:i]
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if f := strings.TrimLeft(a, "-"); a != f && (f == name || strings.HasPrefix(f, name+"=")) {
			return err // given on the command line
		}
	}
	v := envName(name)
	switch {
	case getenv(v) != "":
	case getenv(v+"_FILE") != "":
		v += "_FILE"
	default:
		return err
	}
	if ce != nil {
		named := *ce
		named.Message += " (set by " + v + ")"
		return &named
	}
	return fmt.Errorf("%w (set by %s)", err, v)
}

func runCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{errors.New("no command")}
	}
	cmd, rest := args[0], args[1:]
	if (cmd == "users" || cmd == "keys") && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		cmd, rest = cmd+" "+rest[0], rest[1:]
	}
	switch cmd {
	case "serve":
		return runServe(ctx, rest, getenv, stdout, stderr)
	case "users create":
		return runUsersCreate(ctx, rest, getenv, stdout, stderr)
	case "users set-tier":
		return runUsersSetTier(ctx, rest, getenv, stdout, stderr)
	case "keys create":
		return runKeysCreate(ctx, rest, getenv, stdout, stderr)
	case "keys list":
		return runKeysList(ctx, rest, getenv, stdout, stderr)
	case "keys revoke":
		return runKeysRevoke(ctx, rest, getenv, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "users", "keys":
		// A group without its subcommand: its lines of the usage, and a
		// usage error unless help was asked for.
		w := stderr
		if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
			w = stdout
		}
		fmt.Fprintf(w, "coinpulse %s <subcommand> [flags]:\n", cmd)
		in := false // within the group's lines, continuations included
		for _, line := range strings.Split(usage, "\n") {
			if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
				in = strings.HasPrefix(line, "  "+cmd+" ")
			} else if !strings.HasPrefix(line, "   ") {
				in = false
			}
			if in {
				fmt.Fprintln(w, line)
			}
		}
		fmt.Fprintf(w, "Run \"coinpulse %s <subcommand> -h\" for its flags.\n", cmd)
		if w == stdout {
			return nil
		}
		return usageError{fmt.Errorf("%s: a subcommand is required", cmd)}
	}
	fmt.Fprintf(stderr, "coinpulse: unknown command %q\n\n%s", cmd, usage)
	return usageError{fmt.Errorf("unknown command %q", cmd)}
}

// parseFlags parses args into fs, then sets each flag the command line
// left unset from its COINPULSE_* environment variable (or the file its
// _FILE variant names).
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	out := fs.Output()
	var printed bytes.Buffer
	fs.SetOutput(&printed)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		return helpError{printed.String()} // -h: run prints the flags on stdout, a success
	}
	if m := invalidValue.FindStringSubmatch(fmt.Sprint(err)); m != nil && fs.Lookup(m[2]) != nil {
		// A value that does not parse: say what the flag wants rather
		// than list every flag.
		err = fmt.Errorf("--%s %q: want %s (%s -h lists the flags)", m[2], m[1], flagKind(fs.Lookup(m[2])), fs.Name())
		fmt.Fprintln(out, err)
		return usageError{err}
	}
	out.Write(printed.Bytes())
	if err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	// The environment fills in the flags the command line left unset: a
	// flag given wins, even over a variable that would not parse.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || envErr != nil {
			return
		}
		name := envName(f.Name)
		v := getenv(name)
		file := getenv(name + "_FILE")
		if file != "" && v == "" {
			b, err := os.ReadFile(file)
			if err != nil {
				envErr = fmt.Errorf("%s_FILE: %w", name, err)
				return
			}
			v = strings.TrimSpace(string(b))
			if v == "" {
				// A secret mount that failed leaves an empty file: refuse
				// it rather than start on the flag's default (a node
				// meant for PostgreSQL on a new SQLite file).
				envErr = fmt.Errorf("%s_FILE=%q: the file is empty; give --%s a value in it, or unset %s_FILE", name, file, f.Name, name)
				return
			}
		} else {
			file = ""
		}
		if v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				err = fmt.Errorf("want %s for --%s: %w", flagKind(f), f.Name, err)
				if file != "" {
					// The file may hold a secret: name it, not what it holds.
					envErr = fmt.Errorf("%s_FILE=%q: the file's content: %w", name, file, err)
				} else {
					envErr = fmt.Errorf("%s=%q: %w", name, v, err)
				}
			}
		}
	})
	return envErr
}

// invalidValue matches the flag package's error for a value that does not
// parse.
var invalidValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): `)

// flagKind says what kind of value f takes: "a duration", "an int",
// "true or false".
func flagKind(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "true or false"
	}
	kind, _ := flag.UnquoteUsage(f)
	switch {
	case kind == "":
		return "a value"
	case strings.ContainsRune("aeiou", rune(kind[0])):
		return "an " + kind
	}
	return "a " + kind
}

// envName is the environment variable of the flag named flag.
func envName(flag string) string {
	return "COINPULSE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// defaultDataDir is where the SQLite file lives unless --db says otherwise.
const defaultDataDir = "coinpulse-data"

// postgresURL reports whether dsn is a postgres:// or postgresql:// URL,
// and returns it with its scheme in lower case: a URL's scheme is
// case-insensitive (RFC 3986), pgx's parser is not.
func postgresURL(dsn string) (string, bool) {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok || !strings.EqualFold(scheme, "postgres") && !strings.EqualFold(scheme, "postgresql") {
		return "", false
	}
	return strings.ToLower(scheme) + "://" + rest, true
}

// isPostgres reports whether store is a PostgreSQL database, which
// several nodes may share.
func isPostgres(store coinpulse.Store) bool {
	_, ok := store.(*postgres.DB)
	return ok
}

func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", "", "database: sqlite:PATH, a bare path, or postgres://... (default sqlite:<data-dir>/coinpulse.db)")
}

// openStore opens the store a --db value names. A SQLite file that does
// not exist is created only when create is set (serve, migrate, users
// create): the other commands refuse it, so that a mistyped path is told
// so rather than answered from a new, empty database.
func openStore(ctx context.Context, dsn, dataDir string, create bool) (coinpulse.Store, error) {
	path := strings.TrimPrefix(dsn, "sqlite:")
	pgURL, isPG := postgresURL(dsn)
	switch {
	case isPG:
		return postgres.Open(ctx, pgURL)
	case dsn != "" && (path == "" || path == ":memory:" || strings.HasPrefix(path, "file:")):
		// SQLite's in-memory and URI names: a database in memory would
		// vanish with the process, and each of the pool's connections
		// would see its own.
		return nil, fmt.Errorf("--db %q: give a SQLite file's path (sqlite:PATH, a bare path), or postgres://…", describeDB(dsn, dataDir))
	case strings.Contains(dsn, "://"):
		return nil, fmt.Errorf("--db %s: not a database this version opens: sqlite:PATH, a bare path, or postgres://…", describeDB(dsn, dataDir))
	case libpqKeywords(dsn):
		// Not shown: it may hold a password.
		return nil, errors.New("--db (a PostgreSQL keyword/value string, not shown): give it as a URL instead, postgres://USER:PASSWORD@HOST:PORT/DBNAME?sslmode=…, or as sqlite:PATH for a SQLite file of that name")
	case dsn == "":
		if dataDir == "" {
			dataDir = defaultDataDir
		}
		path = filepath.Join(dataDir, "coinpulse.db")
	}
	if !create {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no database at %s: check --db or --data-dir (serve, migrate or users create makes one)", path)
		}
	}
	return sqlite.Open(ctx, path)
}

// libpqKeywords reports whether dsn looks like a libpq keyword/value
// connection string ("host=db user=app password=…", spaces around "="
// allowed): a word of letters and underscores, then "=". Taken as a bare
// path, it would make a SQLite file of that name, and show its password in
// the log; a SQLite file named so can still be given as sqlite:PATH.
func libpqKeywords(dsn string) bool {
	rest := strings.TrimLeft(dsn, " \t")
	n := 0
	for n < len(rest) && (rest[n] == '_' || rest[n] >= 'a' && rest[n] <= 'z' || rest[n] >= 'A' && rest[n] <= 'Z') {
		n++
	}
	return n > 0 && strings.HasPrefix(strings.TrimLeft(rest[n:], " \t"), "=")
}

// describeDB renders a --db value for messages, without any password.
func describeDB(dsn, dataDir string) string {
	if dsn == "" {
		if dataDir == "" {
			dataDir = defaultDataDir
		}
		return "sqlite:" + filepath.Join(dataDir, "coinpulse.db")
	}
	if libpqKeywords(dsn) {
		return "(a keyword/value string, not shown)"
	}
	if !strings.Contains(dsn, "://") {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil { // not a URL: hide everything between the scheme and the host
		if at := strings.LastIndex(dsn, "@"); at >= 0 {
			return dsn[:strings.Index(dsn, "://")+3] + "…" + dsn[at:]
		}
		return dsn
	}
	// A password may be in the user part or in the query (password=,
	// sslpassword=): both are shown as xxxxx, the user name as it is.
	if q := u.Query(); len(q) > 0 {
		redacted := false
		for k := range q {
			if strings.Contains(strings.ToLower(k), "password") {
				q.Set(k, "xxxxx")
				redacted = true
			}
		}
		if redacted {
			u.RawQuery = q.Encode()
		}
	}
	return u.Redacted()
}
