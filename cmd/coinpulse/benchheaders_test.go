//go:build benchheaders

package main

import (
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The build bench/limits.sh makes for its "headers" configuration: with
// limits off, a market answer carries the same header keys as with limits
// on, and nothing is limited. .ci/run runs it with -tags benchheaders.
func TestBenchHeadersBuild(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "coinpulse.db")
	key := premiumKey(t, db)
	// answer starts serve with args, makes n calls of the market route,
	// and returns the header keys of the first (Date aside) and the
	// statuses of all.
	answer := func(n int, args ...string) (keys []string, statuses []int, log string) {
		s := startServe(t, append([]string{"--db", db, "--demo=false"}, args...)...)
		defer s.stop(t)
		for i := range n {
			req, _ := http.NewRequest("GET", s.base+"/api/v1/markets/global", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			statuses = append(statuses, res.StatusCode)
			if i == 0 {
				for k := range res.Header {
					if k != "Date" {
						keys = append(keys, k)
					}
				}
				slices.Sort(keys)
			}
		}
		return keys, statuses, s.stderr.String()
	}
	on, _, _ := answer(1, "--limits", "on")
	off, statuses, log := answer(30, "--limits", "off")
	if !slices.Equal(on, off) {
		t.Errorf("header keys with limits on %q, headers-only build %q", on, off)
	}
	if !slices.Contains(off, "Ratelimit-Policy") {
		t.Errorf("no rate-limit headers in %q", off)
	}
	if slices.ContainsFunc(statuses, func(s int) bool { return s != 200 }) {
		t.Errorf("30 calls in a row with limits off (more than the premium plan allows a second): %v", statuses)
	}
	if !strings.Contains(log, "bench build (-tags benchheaders)") {
		t.Errorf("serve did not say it is a bench build:\n%s", log)
	}
}
