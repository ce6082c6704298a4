// Package migrate reads a store's embedded, versioned SQL migrations. Each
// engine applies them with its own SQL (internal/sqlite, internal/postgres);
// this is the part they share.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
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
