package postgres

import (
	"testing"

	"coinpulse"
	"coinpulse/internal/storetest"
)

// TestStoreNodes runs the checks of two nodes on one database: two pools
// on one schema.
func TestStoreNodes(t *testing.T) {
	storetest.PostgresURL(t) // skip once, not in every subtest
	storetest.RunNodes(t, func(t *testing.T) (coinpulse.Store, coinpulse.Store) {
		url, schema := newSchema(t)
		var dbs [2]*DB
		for i := range dbs {
			db, err := openSchema(t, url, schema)
			if err != nil {
				t.Fatalf("OpenConfig %d: %v", i, err)
			}
			dbs[i] = db
		}
		return dbs[0], dbs[1]
	})
}
