// Package migrate reads a store's embedded, versioned SQL migrations. Each
// engine applies them with its own SQL (internal/sqlite, internal/postgres);
// this is the part they share.
package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"coinpulse"
)

// Migration is one file NNNN_name.sql, applied in order of NNNN.
type Migration struct {
	Version int64
	Name    string // the file's name
	SQL     string
}

// Read returns the migrations in dir of fsys, by version. A file whose name
// does not start with a positive version and '_', or whose version is not
// above the previous one, is an error, as is a file that cannot be read.
func Read(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range names { // Glob sorts by name
		base := path.Base(name)
		prefix, _, ok := strings.Cut(base, "_")
		version, err := strconv.ParseInt(prefix, 10, 64)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version and '_'", base)
		}
		if len(ms) > 0 && version <= ms[len(ms)-1].Version {
			return nil, fmt.Errorf("migration %s: version %d is not above the previous one", base, version)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: version, Name: base, SQL: string(b)})
	}
	return ms, nil
}

// CheckNotNewer returns an error when the database's newest applied
// version, newest, is above the last of ms: the database was migrated by
// a newer Coinpulse, whose schema this binary does not know, and must not
// serve it (it would write what the newer one does not expect). newest
// is 0 for a database without migrations.
func CheckNotNewer(newest int64, ms []Migration) error {
	var last int64
	if len(ms) > 0 {
		last = ms[len(ms)-1].Version
	}
	if newest > last {
		return fmt.Errorf("the database's schema is at version %d, newer than this binary's %d: it was migrated by a newer Coinpulse; run that one (or a database of this version)", newest, last)
	}
	return nil
}

// Part is a run of a migration's SQL and the Go step after it ("" for
// none): what SQL cannot do, such as keying rows by a Go function.
type Part struct {
	SQL  string
	Step string
}

// stepMarker starts a line of a migration naming a Go step.
const stepMarker = "-- go: "

// Parts splits m's SQL at its lines "-- go: NAME": each part is the SQL up
// to such a line and the step it names; the last part has no step. An
// engine runs them in order, in the migration's transaction.
func (m Migration) Parts() []Part {
	var parts []Part
	var sql strings.Builder
	for line := range strings.Lines(m.SQL) {
		if name, ok := strings.CutPrefix(line, stepMarker); ok {
			parts = append(parts, Part{SQL: sql.String(), Step: strings.TrimSpace(name)})
			sql.Reset()
			continue
		}
		sql.WriteString(line)
	}
	return append(parts, Part{SQL: sql.String()})
}

// Apply runs m's parts in order inside tx, the migration's transaction:
// exec runs each part's SQL, and the Go step a part names is looked up in
// steps (a name steps lacks is an error, so that a migration cannot be
// recorded with its step skipped).
func Apply[Tx any](ctx context.Context, m Migration, tx Tx, exec func(context.Context, Tx, string) error, steps map[string]func(context.Context, Tx) error) error {
	for _, part := range m.Parts() {
		if err := exec(ctx, tx, part.SQL); err != nil {
			return err
		}
		if part.Step == "" {
			continue
		}
		step, ok := steps[part.Step]
		if !ok {
			return fmt.Errorf("no Go step %q", part.Step)
		}
		if err := step(ctx, tx); err != nil {
			return fmt.Errorf("step %s: %w", part.Step, err)
		}
	}
	return nil
}

// KeyEmails returns the email_key of each of the users ids (ascending)
// with the addresses emails, for the migration that added it: each
// address's coinpulse.EmailKey, except that where two accounts' addresses
// have one key (the schema before let them apart), the first account
// (the lowest id) keeps it and a later one gets "#ID KEY" ("#42
// ärger@example.com"). No valid address has that form, so sign-ups
// cannot take it, and a log-in or the CLI's --email reaches the account
// by it.
func KeyEmails(ids []int64, emails []string) []string {
	keys := make([]string, len(ids))
	taken := make(map[string]bool, len(ids))
	for i, email := range emails {
		key := coinpulse.EmailKey(email)
		for taken[key] {
			key = "#" + strconv.FormatInt(ids[i], 10) + " " + key
		}
		taken[key] = true
		keys[i] = key
	}
	return keys
}
