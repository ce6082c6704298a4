package api

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus collectors, in a registry of its own
// (no global state, so tests can make many servers).
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// simulations are X-Sandbox-Simulate answers, kept out of requests
	// and latency so that a subscriber testing its retries pages no one.
	simulations *prometheus.CounterVec
	// idempotency counts the requests sent with an Idempotency-Key, by
	// what became of the key.
	idempotency *prometheus.CounterVec
	handler     http.Handler
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coinpulse_http_requests_total",
		Help: "HTTP requests by route pattern and status.",
	}, []string{"route", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "coinpulse_http_request_duration_seconds",
		Help:    "HTTP request latency by route pattern.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"route"})
	m.simulations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coinpulse_sandbox_simulations_total",
		Help: "Sandbox calls answered with a failure they asked for (X-Sandbox-Simulate), by route pattern and failure; not in coinpulse_http_requests_total.",
	}, []string{"route", "simulation"})
	m.idempotency = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coinpulse_idempotency_keys_total",
		Help: "POSTs and PATCHes sent with an Idempotency-Key, by outcome: claimed (the request ran), replayed (the stored answer was sent again), in_progress and applied_unanswered (409), mismatch (422: the key was used with another request).",
	}, []string{"outcome"})
	m.reg.MustRegister(m.requests, m.latency, m.simulations, m.idempotency, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// watch registers gauges read at scrape time: how old the market data
// served is (alert when it exceeds a few refresh intervals: the feed is
// stuck), how many coins it holds, and how many keys the cache holds.
func (m *metrics) watch(s *Server) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "coinpulse_market_snapshot_age_seconds",
			Help: "Seconds since the market data being served was refreshed (NaN before the first refresh).",
		}, func() float64 {
			if snap := s.market.Current(); snap != nil {
				return s.clock().Sub(snap.AsOf).Seconds()
			}
			return math.NaN()
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "coinpulse_market_coins",
			Help: "Coins in the market data being served.",
		}, func() float64 {
			if snap := s.market.Current(); snap != nil {
				return float64(snap.Len())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "coinpulse_key_cache_entries",
			Help: "Verified API keys held in this node's cache.",
		}, func() float64 { known, _ := s.keys.size(); return float64(known) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "coinpulse_key_cache_unknown_entries",
			Help: "Well-formed API keys the store does not have, remembered in this node's cache (many: someone is trying made-up keys).",
		}, func() float64 { _, unknown := s.keys.size(); return float64(unknown) }),
	)
	if m, ok := s.meterer.(interface {
		Dropped() uint64
		Pending() int
	}); ok {
		m2 := m
		s.metrics.reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "coinpulse_meter_dropped_total",
				Help: "Admitted calls the metering queue had no room for (not metered; alert on any).",
			}, func() float64 { return float64(m2.Dropped()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "coinpulse_meter_pending",
				Help: "Metered calls waiting to be written to the database.",
			}, func() float64 { return float64(m2.Pending()) }),
		)
	}
}

// routeMetrics are one route's pre-resolved collectors.
type routeMetrics struct {
	m       *metrics
	route   string
	latency prometheus.Observer
	ok      prometheus.Counter
}

func (m *metrics) route(label string) *routeMetrics {
	return &routeMetrics{m: m, route: label, latency: m.latency.WithLabelValues(label), ok: m.requests.WithLabelValues(label, "200")}
}

func (r *routeMetrics) observe(status int, d time.Duration) {
	r.latency.Observe(d.Seconds())
	if status == http.StatusOK {
		r.ok.Inc()
		return
	}
	r.m.requests.WithLabelValues(r.route, strconv.Itoa(status)).Inc()
}

// simulation counts a sandbox call answered with the failure how that it
// asked for, instead of its status and latency.
func (r *routeMetrics) simulation(how string) {
	r.m.simulations.WithLabelValues(r.route, how).Inc()
}
