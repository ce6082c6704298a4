//go:build benchheaders

package main

import (
	"log/slog"
	"net/http"
)

// Built with -tags benchheaders, and only by bench/limits.sh for its
// "headers" configuration: a serve whose limits are off (--limits off)
// still sends the five rate-limit headers on every answer, with fixed
// values as long as a limited answer's. Its throughput against limits off
// is what those five header-map entries cost net/http alone (past eight
// entries Go's map leaves its small form, and net/http clones, iterates
// and sorts it on every answer); against limits on, what the limiter and
// the meter cost beyond them. A release build never has it.
func init() {
	withBenchHeaders = func(h http.Handler, log *slog.Logger) http.Handler {
		log.Warn("bench build (-tags benchheaders): fixed rate-limit headers on every answer, nothing limited or metered")
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hdr := w.Header()
			hdr["X-Ratelimit-Limit"] = benchLimit
			hdr["X-Ratelimit-Remaining"] = benchRemaining
			hdr["X-Ratelimit-Reset"] = benchReset
			hdr["Ratelimit"] = benchRateLimit
			hdr["Ratelimit-Policy"] = benchPolicy
			h.ServeHTTP(w, r)
		})
	}
}

// The values of bench/limits.sh's plan (100,000,000 calls a second and a
// minute, monthly unlimited), as a limited answer has them.
var (
	benchLimit     = []string{"100000000"}
	benchRemaining = []string{"99999999"}
	benchReset     = []string{"1764115200"}
	benchRateLimit = []string{`"second";r=99999999;t=1, "minute";r=99999999;t=1`}
	benchPolicy    = []string{`"second";q=100000000;w=1, "minute";q=100000000;w=60`}
)
