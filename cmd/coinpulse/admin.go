package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"coinpulse"
	"coinpulse/internal/dashboard"
	"coinpulse/internal/password"
)

// adminFlags are the flags every account command shares.
type adminFlags struct {
	fs      *flag.FlagSet
	db      *string
	dataDir *string
	email   *string
}

func newAdminFlags(name string, stderr io.Writer) adminFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return adminFlags{fs: fs, db: dbFlag(fs), dataDir: fs.String("data-dir", defaultDataDir, "directory of the default SQLite database"), email: fs.String("email", "", "the account's e-mail address (required)")}
}

func (a adminFlags) parse(args []string, getenv func(string) string) error {
	if err := parseFlags(a.fs, args, getenv); err != nil {
		return err
	}
	*a.email = strings.TrimSpace(*a.email) // as users create stores it
	if *a.email == "" {
		fmt.Fprintln(a.fs.Output(), "--email is required")
		return usageError{fmt.Errorf("--email is required")}
	}
	return nil
}

// user is the account of --email; not found, an error naming it.
func (a adminFlags) user(ctx context.Context, store coinpulse.Store) (*coinpulse.User, error) {
	u, err := store.UserByEmail(ctx, *a.email)
	if coinpulse.IsNotFound(err) {
		return nil, coinpulse.Errorf(coinpulse.CodeNotFound, "No account has the e-mail address %q.", *a.email)
	}
	return u, err
}

// open opens the database of the flags; only create (users create) may
// create a SQLite file that does not exist yet.
func (a adminFlags) open(ctx context.Context, create bool) (coinpulse.Store, error) {
	return openStore(ctx, *a.db, *a.dataDir, create)
}

// flagError words the refusal of a flag's value as the command's other
// refusals are, "--name "value": why", so that run names the environment
// variable that set it.
func flagError(name, value string, err error) error {
	var e *coinpulse.Error
	if errors.As(err, &e) && len(e.Details) == 1 {
		return &coinpulse.Error{Code: e.Code, Message: fmt.Sprintf("--%s %q: %s", name, value, e.Details[0].Message), Details: e.Details}
	}
	return err
}

// pastExpiry refuses an --expires in the past, saying why.
func pastExpiry(exp time.Time, why string) error {
	msg := fmt.Sprintf("--expires %s is past: %s", exp.Format(time.RFC3339), why)
	return &coinpulse.Error{Code: coinpulse.CodeValidation, Message: msg, Details: []coinpulse.FieldError{{Field: "expires", Message: msg}}}
}

// parseExpiry reads an optional RFC 3339 time.
func parseExpiry(s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	t, err := coinpulse.ParseTimestamp(s)
	if err != nil {
		return nil, fmt.Errorf("--expires %q: not an RFC 3339 time such as 2027-01-31T00:00:00Z", s)
	}
	t = t.UTC()
	return &t, nil
}

func runUsersCreate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	a := newAdminFlags("users create", stderr)
	tier := a.fs.String("tier", "free", "tier: free, premium, pro, enterprise or business")
	expires := a.fs.String("expires", "", "paid tier expiry (RFC 3339, in the future, or now); none by default")
	pw := a.fs.String("password", "", "password for the dashboard (optional)")
	if err := a.parse(args, getenv); err != nil {
		return err
	}
	t, exp, err := tierAndExpiry(*tier, *expires)
	if err != nil {
		return err
	}
	u := &coinpulse.User{Email: strings.TrimSpace(*a.email), Tier: t, TierExpiresAt: exp}
	if !dashboard.ValidEmail(u.Email) {
		return fmt.Errorf("--email %q: not an e-mail address such as name@example.com", u.Email)
	}
	if *pw != "" {
		if msg := dashboard.PasswordProblem(*pw, u.Email); msg != "" {
			return fmt.Errorf("--password: %s", msg)
		}
		if u.PasswordHash, err = password.Hash(*pw); err != nil {
			return err
		}
	}
	store, err := a.open(ctx, true)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.CreateUser(ctx, u); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created user %d %s (tier %s)\n", u.ID, u.Email, u.Tier)
	return nil
}

// tierAndExpiry parses --tier and --expires; only a paid tier expires.
func tierAndExpiry(tier, expires string) (coinpulse.Tier, *time.Time, error) {
	t, err := coinpulse.ParseTier(tier)
	if err != nil {
		return "", nil, flagError("tier", tier, err)
	}
	var exp *time.Time
	if expires == "now" {
		now := time.Now().UTC()
		exp = &now
	} else if exp, err = parseExpiry(expires); err != nil {
		return "", nil, err
	} else if exp != nil && !exp.After(time.Now()) {
		// A mistyped year would lock a paying account out at once.
		return "", nil, pastExpiry(*exp, "the account would be locked out at once; to end its subscription now, give --expires now")
	}
	if exp != nil && t == coinpulse.TierFree {
		return "", nil, errors.New("--expires: the free tier does not expire; give a paid --tier, or no --expires")
	}
	return t, exp, nil
}

func runUsersSetTier(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	a := newAdminFlags("users set-tier", stderr)
	tier := a.fs.String("tier", "", "tier: free, premium, pro, enterprise or business (required)")
	expires := a.fs.String("expires", "", "paid tier expiry (RFC 3339, in the future, or now to end the subscription at once); empty for none")
	if err := a.parse(args, getenv); err != nil {
		return err
	}
	if *tier == "" {
		return errors.New("--tier is required: free, premium, pro, enterprise or business")
	}
	t, exp, err := tierAndExpiry(*tier, *expires)
	if err != nil {
		return err
	}
	store, err := a.open(ctx, false)
	if err != nil {
		return err
	}
	defer store.Close()
	u, err := a.user(ctx, store)
	if err != nil {
		return err
	}
	if err := store.SetUserTier(ctx, u.ID, t, exp); err != nil {
		return err
	}
	switch {
	case exp == nil:
		fmt.Fprintf(stdout, "user %s is now on tier %s\n", u.Email, t)
	case exp.After(time.Now()):
		fmt.Fprintf(stdout, "user %s is now on tier %s until %s\n", u.Email, t, exp.UTC().Format(time.RFC3339))
	default:
		fmt.Fprintf(stdout, "user %s is now on tier %s, whose subscription ended at %s: calls are refused until a set-tier with a later --expires\n", u.Email, t, exp.UTC().Format(time.RFC3339))
	}
	return nil
}

func runKeysCreate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	a := newAdminFlags("keys create", stderr)
	name := a.fs.String("name", "default", "a name for the key")
	perms := a.fs.String("permissions", "read,write", "comma-separated: read, write")
	test := a.fs.Bool("test", false, "create a sandbox key (sk_test_)")
	expires := a.fs.String("expires", "", "key expiry (RFC 3339); none by default")
	if err := a.parse(args, getenv); err != nil {
		return err
	}
	keyName, err := coinpulse.CheckKeyName(*name)
	if err != nil {
		return flagError("name", *name, err)
	}
	p, err := coinpulse.ParsePermissions(*perms)
	if err != nil {
		return flagError("permissions", *perms, err)
	}
	exp, err := parseExpiry(*expires)
	if err != nil {
		return err
	}
	if exp != nil && !exp.After(time.Now()) {
		return pastExpiry(*exp, "a key that expires then would never work")
	}
	store, err := a.open(ctx, false)
	if err != nil {
		return err
	}
	defer store.Close()
	u, err := a.user(ctx, store)
	if err != nil {
		return err
	}
	key, err := createKey(ctx, store, u.ID, keyName, *test, p, exp)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, key)
	return nil
}

// createKey makes a key for the user and returns its plaintext.
func createKey(ctx context.Context, store coinpulse.AccountStore, userID int64, name string, test bool, p coinpulse.Permissions, exp *time.Time) (string, error) {
	mode := coinpulse.ModeLive
	if test {
		mode = coinpulse.ModeTest
	}
	key, rec, err := coinpulse.NewAPIKey(userID, name, mode, p)
	if err != nil {
		return "", err
	}
	rec.ExpiresAt = exp
	if err := store.CreateKey(ctx, rec); err != nil {
		return "", err
	}
	return key, nil
}

func runKeysList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	a := newAdminFlags("keys list", stderr)
	if err := a.parse(args, getenv); err != nil {
		return err
	}
	store, err := a.open(ctx, false)
	if err != nil {
		return err
	}
	defer store.Close()
	u, err := a.user(ctx, store)
	if err != nil {
		return err
	}
	keys, err := store.KeysByUser(ctx, u.ID)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKEY\tMODE\tPERMISSIONS\tCREATED\tLAST USED\tEXPIRES\tSTATUS")
	now := time.Now()
	for _, k := range keys {
		status := "active"
		switch {
		case k.RevokedAt != nil:
			status = "revoked"
		case !k.Active(now):
			status = "expired"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Display(), k.Mode, k.Permissions, k.CreatedAt.UTC().Format(time.RFC3339), fmtTime(k.LastUsedAt), fmtTime(k.ExpiresAt), status)
	}
	return tw.Flush()
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func runKeysRevoke(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	a := newAdminFlags("keys revoke", stderr)
	id := a.fs.String("id", "", "the key's id (from keys list)")
	key := a.fs.String("key", "", "the full key")
	if err := a.parse(args, getenv); err != nil {
		return err
	}
	if (*id == "") == (*key == "") {
		msg := "give exactly one of --id or --key"
		var from []string // the variables that gave them
		for _, f := range []string{"id", "key"} {
			for _, v := range []string{envName(f), envName(f) + "_FILE"} {
				if getenv(v) != "" && !slices.ContainsFunc(args, func(a string) bool {
					return strings.TrimLeft(a, "-") == f || strings.HasPrefix(strings.TrimLeft(a, "-"), f+"=")
				}) {
					from = append(from, v)
				}
			}
		}
		if len(from) > 0 {
			msg += " (set in the environment: " + strings.Join(from, ", ") + ")"
		}
		fmt.Fprintln(stderr, msg)
		return usageError{errors.New(msg)}
	}
	store, err := a.open(ctx, false)
	if err != nil {
		return err
	}
	defer store.Close()
	u, err := a.user(ctx, store)
	if err != nil {
		return err
	}
	var keyID int64
	if *key != "" {
		k, err := store.KeyByHash(ctx, coinpulse.HashKey(strings.TrimSpace(*key)))
		if err != nil {
			return err
		}
		keyID = k.ID
	} else if keyID, err = strconv.ParseInt(*id, 10, 64); err != nil {
		return fmt.Errorf("--id must be a number: %w", err)
	}
	keys, err := store.KeysByUser(ctx, u.ID)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ID == keyID && k.RevokedAt != nil {
			fmt.Fprintf(stdout, "key %d of %s was already revoked at %s\n", keyID, u.Email, k.RevokedAt.UTC().Format(time.RFC3339))
			return nil
		}
	}
	if err := store.RevokeKey(ctx, u.ID, keyID, time.Now()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "revoked key %d of %s\n", keyID, u.Email)
	return nil
}

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := dbFlag(fs)
	dataDir := fs.String("data-dir", defaultDataDir, "directory of the default SQLite database")
	if err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	store, err := openStore(ctx, *db, *dataDir, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s is up to date\n", describeDB(*db, *dataDir))
	return store.Close()
}
