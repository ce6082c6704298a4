package storetest

import (
	"os"
	"testing"
)

// The environment variables that point tests at real services.
const (
	// PostgresEnv names the variable holding the URL of a PostgreSQL
	// server that tests may create schemas in.
	PostgresEnv = "COINPULSE_TEST_POSTGRES"
	// RequireServicesEnv, set to 1, turns a missing service address from a
	// skip into a failure (CI sets it).
	RequireServicesEnv = "COINPULSE_REQUIRE_SERVICES"
)

// PostgresURL returns the URL in COINPULSE_TEST_POSTGRES. When it is unset
// the calling test is skipped, or fails if COINPULSE_REQUIRE_SERVICES=1;
// it returns no error.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	if url := os.Getenv(PostgresEnv); url != "" {
		return url
	}
	if os.Getenv(RequireServicesEnv) == "1" {
		tb.Fatal(PostgresEnv + " is not set but " + RequireServicesEnv + "=1")
		return ""
	}
	tb.Skip("skipping PostgreSQL tests: set " + PostgresEnv + " to run them, e.g. " +
		PostgresEnv + "='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go test ./...")
	return ""
}
