package ratelimit

import "os"

// The environment variables that point tests at a Redis server.
const (
	// RedisEnv names the variable holding the URL of a Redis server that
	// tests may write keys to, e.g. redis://127.0.0.1:6379/0.
	RedisEnv = "COINPULSE_TEST_REDIS"
	// RequireServicesEnv, set to 1, turns a missing service address from a
	// skip into a failure (CI sets it).
	RequireServicesEnv = "COINPULSE_REQUIRE_SERVICES"
)

// TB is the part of testing.TB that RedisURL uses; a *testing.T or
// *testing.B will do. (It is an interface of its own so that this package
// does not import testing into the server.)
type TB interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}

// RedisURL returns the URL in COINPULSE_TEST_REDIS. When it is unset the
// calling test is skipped, or fails if COINPULSE_REQUIRE_SERVICES=1.
func RedisURL(tb TB) string {
	tb.Helper()
	if url := os.Getenv(RedisEnv); url != "" {
		return url
	}
	if os.Getenv(RequireServicesEnv) == "1" {
		tb.Fatal(RedisEnv + " is not set but " + RequireServicesEnv + "=1")
		return ""
	}
	tb.Skip("skipping Redis tests: set " + RedisEnv + " to run them, e.g. " +
		RedisEnv + "='redis://127.0.0.1:6379/0' go test ./...")
	return ""
}
