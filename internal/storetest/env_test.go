package storetest

import (
	"fmt"
	"testing"
)

// recorder is a testing.TB that records Fatal and Skip instead of stopping.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()           {}
func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...) }
func (r *recorder) Skip(args ...any)  { r.skip = fmt.Sprint(args...) }

func TestPostgresURL(t *testing.T) {
	const url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	tests := []struct {
		name, url, require string
		want               string
		fatal, skip        bool
	}{
		{name: "set", url: url, want: url},
		{name: "set and required", url: url, require: "1", want: url},
		{name: "unset", skip: true},
		{name: "unset but required", require: "1", fatal: true},
		{name: "unset, required is not 1", require: "yes", skip: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(PostgresEnv, tt.url)
			t.Setenv(RequireServicesEnv, tt.require)
			r := &recorder{TB: t}
			if got := PostgresURL(r); got != tt.want {
				t.Errorf("PostgresURL = %q, want %q", got, tt.want)
			}
			if (r.fatal != "") != tt.fatal {
				t.Errorf("Fatal called: %q, want called: %v", r.fatal, tt.fatal)
			}
			if (r.skip != "") != tt.skip {
				t.Errorf("Skip called: %q, want called: %v", r.skip, tt.skip)
			}
			if tt.fatal && r.fatal != "COINPULSE_TEST_POSTGRES is not set but COINPULSE_REQUIRE_SERVICES=1" {
				t.Errorf("Fatal message = %q", r.fatal)
			}
		})
	}
}
