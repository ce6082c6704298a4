package sqlite

import (
	"path/filepath"
	"testing"

	"coinpulse"
	"coinpulse/internal/storetest"
)

// TestStoreNodes runs the checks of two stores on one database: two
// processes (a server and the CLI, say) with the same file open.
func TestStoreNodes(t *testing.T) {
	storetest.RunNodes(t, func(t *testing.T) (coinpulse.Store, coinpulse.Store) {
		path := filepath.Join(t.TempDir(), "coinpulse.db")
		var dbs [2]*DB
		for i := range dbs {
			db, err := Open(t.Context(), path)
			if err != nil {
				t.Fatalf("Open %d: %v", i, err)
			}
			t.Cleanup(func() {
				if err := db.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			dbs[i] = db
		}
		return dbs[0], dbs[1]
	})
}
