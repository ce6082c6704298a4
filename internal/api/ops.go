package api

import (
	"crypto/subtle"
	_ "embed"
	"net/http"
	"strconv"
	"strings"
	"time"

	"coinpulse"
)

var (
	//go:embed openapi.json
	openapiJSON []byte
	//go:embed docs.html
	docsHTML []byte
	//go:embed docs.js
	docsScript []byte
	//go:embed favicon.svg
	favicon []byte

	openapiAsset, docsAsset, docsScriptAsset, faviconAsset = newAsset(openapiJSON), newAsset(docsHTML), newAsset(docsScript), newAsset(favicon)
)

// OpenAPI returns the embedded OpenAPI document.
func OpenAPI() []byte { return openapiJSON }

// GET /healthz: the process is alive.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	m := s.newMeta(w)
	return writeData(w, http.StatusOK, map[string]string{"status": "ok"}, &m)
}

// GET /readyz: market data is loaded and the store answers.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	snap := s.market.Current()
	if snap == nil {
		w.Header().Set("Retry-After", "5")
		return coinpulse.Errorf(coinpulse.CodeUnavailable, "Market data is still loading.")
	}
	if err := s.store.Ping(r.Context()); err != nil {
		s.log.Warn("readiness: store unreachable", "err", err)
		return coinpulse.Errorf(coinpulse.CodeUnavailable, "The database does not answer.")
	}
	m := s.newMeta(w)
	history := "complete"
	if snap.Backfilling {
		history = "backfilling" // a live feed's first start: quotes are served, history is still coming
	}
	return writeData(w, http.StatusOK, map[string]any{
		"status": "ready", "feed": snap.Feed, "simulated": snap.Simulated,
		"coins": snap.Len(), "as_of": snap.AsOf.UTC().Format(time.RFC3339), "history": history,
	}, &m)
}

// GET /metrics: Prometheus exposition (text, not JSON), with the metrics
// token when the operator set one.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	if s.metricsToken != "" {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if len(r.Header["Authorization"]) != 1 || !strings.EqualFold(scheme, "Bearer") ||
			subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(s.metricsToken)) != 1 {
			return coinpulse.Errorf(coinpulse.CodeInvalidAPIKey, "GET /metrics needs this server's metrics token (--metrics-token-file): send \"Authorization: Bearer <token>\".")
		}
	}
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

// GET /api/v1/openapi.json: the one response served bare.
func (s *Server) openapi(w http.ResponseWriter, r *http.Request) error {
	return writeStatic(w, "application/json; charset=utf-8", openapiAsset)
}

// GET /docs
func (s *Server) docs(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "no-referrer")
	return writeStatic(w, "text/html; charset=utf-8", docsAsset)
}

// GET /docs/docs.js
func (s *Server) docsJS(w http.ResponseWriter, r *http.Request) error {
	return writeStatic(w, "text/javascript; charset=utf-8", docsScriptAsset)
}

// GET /favicon.ico: the icon a browser asks for on /docs (an SVG: every
// browser this page serves takes one; not a 404 in the metrics).
func (s *Server) favicon(w http.ResponseWriter, r *http.Request) error {
	return writeStatic(w, "image/svg+xml", faviconAsset)
}

// writeStatic writes an embedded document, gzip-encoded when the request
// takes it and it is large enough (see gzips).
func writeStatic(w http.ResponseWriter, contentType string, a *asset) error {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("X-Content-Type-Options", "nosniff")
	if e, ok := w.(*exchange); ok && e.gzip != gzipNo && e.gzips(http.StatusOK, len(a.body)) {
		return e.writeEncoded(http.StatusOK, nil, a.gz())
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	_, err := w.Write(a.body)
	return err
}
