package api

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"strings"

	"coinpulse"
	"coinpulse/internal/market"
)

// currentSnapshot returns the snapshot a market request reads: the one
// named by ?snapshot= or the latest. Before the first refresh it is 503.
func (s *Server) currentSnapshot(w http.ResponseWriter, id string) (*market.Snapshot, error) {
	if id != "" {
		if snap := s.market.Snapshot(id); snap != nil {
			return snap, nil
		}
		return nil, coinpulse.ValidationError("snapshot", "unknown or expired snapshot (snapshots are kept for at least 5 minutes); leave it out to read the latest data")
	}
	if snap := s.market.Current(); snap != nil {
		return snap, nil
	}
	w.Header().Set("Retry-After", "5")
	return nil, coinpulse.Errorf(coinpulse.CodeUnavailable, "Market data is still loading; retry in a few seconds.")
}

func (s *Server) marketMeta(r *http.Request, snap *market.Snapshot) *Meta {
	m := s.newMeta(r)
	m.AsOf = timestamp(snap.AsOf)
	m.Snapshot = snap.ID
	m.Feed = snap.Feed
	m.Simulated = &snap.Simulated
	return m
}

// cacheable sets ETag and Cache-Control for a response derived from snap
// and key, and answers 304 when the client already has it.
func (s *Server) cacheable(w http.ResponseWriter, r *http.Request, snap *market.Snapshot, key string) bool {
	h := fnv.New64a()
	h.Write([]byte(key))
	etag := `"` + snap.ID + "." + strconv.FormatUint(h.Sum64(), 36) + `"`
	age := snap.AsOf.Add(s.market.Refresh()).Sub(s.clock())
	maxAge := int(math.Max(0, math.Ceil(age.Seconds())))
	hdr := w.Header()
	hdr.Set("ETag", etag)
	hdr.Set("Cache-Control", "private, max-age="+strconv.Itoa(maxAge))
	for _, tag := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		if tag = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(tag), "W/")); tag == etag || tag == "*" {
			w.WriteHeader(http.StatusNotModified)
			return true
		}
	}
	return false
}

func items(coins []*coinpulse.CoinDetail) []*coinpulse.MarketItem {
	out := make([]*coinpulse.MarketItem, len(coins))
	for i, c := range coins {
		out[i] = &c.MarketItem
	}
	return out
}

func orderNames() []string {
	out := make([]string, len(market.Orders))
	for i, o := range market.Orders {
		out[i] = string(o)
	}
	return out
}

// GET /markets
func (s *Server) listMarkets(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "page", "per_page", "order", "snapshot")
	if err != nil {
		return err
	}
	page, err := q.int("page", 1, 1, 1_000_000)
	if err != nil {
		return err
	}
	perPage, err := q.int("per_page", 100, 1, 250)
	if err != nil {
		return err
	}
	order, err := q.enum("order", string(market.MarketCapDesc), orderNames()...)
	if err != nil {
		return err
	}
	id, _ := q.str("snapshot")
	snap, err := s.currentSnapshot(w, id)
	if err != nil {
		return err
	}
	key := "markets|" + order + "|" + strconv.Itoa(page) + "|" + strconv.Itoa(perPage)
	if s.cacheable(w, r, snap, key) {
		return nil
	}
	coins, totalPages := snap.Page(market.Order(order), page, perPage)
	data, err := snap.Memo(key, func() ([]byte, error) { return json.Marshal(items(coins)) })
	if err != nil {
		return err
	}
	total := snap.Len()
	m := s.marketMeta(r, snap)
	m.CurrentPage, m.TotalPages, m.TotalResults = &page, &totalPages, &total
	m.Page, m.PerPage, m.Total = &page, &perPage, &total
	return writeRaw(w, http.StatusOK, data, m)
}

// GET /markets/search
func (s *Server) searchMarkets(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "q", "limit")
	if err != nil {
		return err
	}
	text, ok := q.str("q")
	text = strings.TrimSpace(text)
	if !ok || len([]rune(text)) < 2 || len([]rune(text)) > 100 {
		return coinpulse.ValidationError("q", "is required: 2 to 100 characters after trimming spaces")
	}
	limit, err := q.int("limit", 20, 1, 100)
	if err != nil {
		return err
	}
	snap, err := s.currentSnapshot(w, "")
	if err != nil {
		return err
	}
	if s.cacheable(w, r, snap, "search|"+text+"|"+strconv.Itoa(limit)) {
		return nil
	}
	found := snap.Search(text, limit)
	m := s.marketMeta(r, snap)
	n := len(found)
	m.Query, m.Total, m.Snapshot = text, &n, ""
	return writeData(w, http.StatusOK, items(found), m)
}

// GET /markets/global
func (s *Server) globalStats(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		return err
	}
	snap, err := s.currentSnapshot(w, "")
	if err != nil {
		return err
	}
	if s.cacheable(w, r, snap, "global") {
		return nil
	}
	data, err := snap.Memo("global", func() ([]byte, error) { return json.Marshal(snap.Global) })
	if err != nil {
		return err
	}
	m := s.marketMeta(r, snap)
	m.Snapshot = ""
	return writeRaw(w, http.StatusOK, data, m)
}

// GET /markets/top-movers
func (s *Server) topMovers(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "type", "limit")
	if err != nil {
		return err
	}
	kind, err := q.enum("type", "gainers", "gainers", "losers", "both")
	if err != nil {
		return err
	}
	limit, err := q.int("limit", 10, 1, 100)
	if err != nil {
		return err
	}
	snap, err := s.currentSnapshot(w, "")
	if err != nil {
		return err
	}
	key := "movers|" + kind + "|" + strconv.Itoa(limit)
	if s.cacheable(w, r, snap, key) {
		return nil
	}
	data, err := snap.Memo(key, func() ([]byte, error) {
		out := map[string][]*coinpulse.MarketItem{}
		if kind != "losers" {
			out["gainers"] = items(snap.Gainers(limit))
		}
		if kind != "gainers" {
			out["losers"] = items(snap.Losers(limit))
		}
		return json.Marshal(out)
	})
	if err != nil {
		return err
	}
	m := s.marketMeta(r, snap)
	m.Snapshot = ""
	m.MinMoverVolume = &snap.MinMoverVolume
	return writeRaw(w, http.StatusOK, data, m)
}

func coinParam(r *http.Request) string {
	if v := r.PathValue("idOrSymbol"); v != "" {
		return v
	}
	return r.PathValue("id")
}

func (s *Server) lookupCoin(w http.ResponseWriter, r *http.Request) (*market.Snapshot, coinpulse.CoinDetail, error) {
	snap, err := s.currentSnapshot(w, "")
	if err != nil {
		return nil, coinpulse.CoinDetail{}, err
	}
	name := coinParam(r)
	d, ok := snap.Lookup(name)
	if !ok {
		return nil, d, coinpulse.Errorf(coinpulse.CodeNotFound, "No coin has the id or symbol %q. Search with /api/v1/markets/search?q=…", truncate(name, 100))
	}
	return snap, d, nil
}

// GET /coins/{idOrSymbol}, GET /markets/{id}
func (s *Server) coinDetail(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		return err
	}
	snap, d, err := s.lookupCoin(w, r)
	if err != nil {
		return err
	}
	key := "coin|" + coinParam(r)
	if s.cacheable(w, r, snap, key) {
		return nil
	}
	data, err := snap.Memo(key, func() ([]byte, error) { return json.Marshal(d) })
	if err != nil {
		return err
	}
	m := s.marketMeta(r, snap)
	m.Snapshot = ""
	return writeRaw(w, http.StatusOK, data, m)
}

// historyData is the data of GET /coins/{idOrSymbol}/history.
type historyData struct {
	ID       string                   `json:"id"`
	Symbol   string                   `json:"symbol"`
	Days     any                      `json:"days"`
	Interval coinpulse.Interval       `json:"interval"`
	Points   []coinpulse.HistoryPoint `json:"points"`
}

// GET /coins/{idOrSymbol}/history, GET /markets/{id}/history
func (s *Server) coinHistory(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "days", "interval")
	if err != nil {
		return err
	}
	daysText, err := q.enum("days", "30", "1", "7", "30", "90", "365", "max")
	if err != nil {
		return err
	}
	interval, err := q.enum("interval", "daily", "hourly", "daily")
	if err != nil {
		return err
	}
	days, _ := strconv.Atoi(daysText) // "max" → 0
	if interval == "hourly" && (days == 0 || days > 90) {
		return coinpulse.ValidationError("interval", "hourly is available for days up to 90; use interval=daily for longer ranges")
	}
	snap, d, err := s.lookupCoin(w, r)
	if err != nil {
		return err
	}
	key := "history|" + d.ID + "|" + daysText + "|" + interval
	if s.cacheable(w, r, snap, key) {
		return nil
	}
	data, err := snap.Memo(key, func() ([]byte, error) {
		pts, err := s.market.History(r.Context(), snap, d.ID, days, coinpulse.Interval(interval))
		if err != nil {
			return nil, err
		}
		out := historyData{ID: d.ID, Symbol: d.Symbol, Days: days, Interval: coinpulse.Interval(interval), Points: pts}
		if days == 0 {
			out.Days = "max"
		}
		return json.Marshal(out)
	})
	if err != nil {
		return err
	}
	m := s.marketMeta(r, snap)
	m.Snapshot = ""
	return writeRaw(w, http.StatusOK, data, m)
}
