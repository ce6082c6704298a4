package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// discard is a ResponseWriter that keeps nothing, so the benchmark measures
// the handler rather than a recorder's buffer.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func benchmarkGet(b *testing.B, target string, auth bool) {
	t := &testing.T{}
	srv := testServer(t)
	h := srv.Handler()
	req := httptest.NewRequest("GET", target, nil)
	if auth {
		req.Header.Set("Authorization", "Bearer "+proKey(t))
	}
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, req) // warm the key cache and the page memo
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

// The hot path: an authenticated page of 100 coins.
func BenchmarkMarketsPage100(b *testing.B) { benchmarkGet(b, "/api/v1/markets?per_page=100", true) }

func BenchmarkGlobal(b *testing.B) { benchmarkGet(b, "/api/v1/markets/global", true) }

func BenchmarkCoinDetail(b *testing.B) { benchmarkGet(b, "/api/v1/coins/btc", true) }

func BenchmarkSearch(b *testing.B) { benchmarkGet(b, "/api/v1/markets/search?q=bit&limit=20", true) }

func BenchmarkHistory30d(b *testing.B) {
	benchmarkGet(b, "/api/v1/coins/bitcoin/history?days=30", true)
}

func BenchmarkHealthz(b *testing.B) { benchmarkGet(b, "/healthz", false) }
