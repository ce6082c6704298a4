package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
		return nil, coinpulse.ValidationError("snapshot", "unknown or expired snapshot (a snapshot is kept for 5 minutes after the refresh that replaced it); leave it out to read the latest data")
	}
	if snap := s.market.Current(); snap != nil {
		return snap, nil
	}
	return nil, errLoading
}

// errLoading is the 503 of a call that needs market data before the first
// refresh; writeError adds its Retry-After: 5.
var errLoading = coinpulse.Errorf(coinpulse.CodeUnavailable, "Market data is still loading; retry in a few seconds.")

func (s *Server) marketMeta(w http.ResponseWriter, snap *market.Snapshot) Meta {
	m := s.newMeta(w)
	m.AsOf = timestamp(snap.AsOf)
	m.Snapshot = snap.ID
	m.Feed = snap.Feed
	m.Simulated = &snap.Simulated
	return m
}

// cached is an encoded response body kept in a snapshot's memo with its
// ETag, so a hit costs neither encoding nor hashing.
type cached struct {
	body []byte
	etag []string // the ETag header's value
}

// MemoSize counts c against its snapshot's memo budget.
func (c *cached) MemoSize() int { return len(c.body) + len(c.etag[0]) + 64 }

// respond serves the body memoised under key in snap (building it with
// build on first use); see serveCached.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, snap *market.Snapshot, key string, meta *Meta, build func() (any, error)) error {
	c, err := market.Memo(snap, key, func() (*cached, error) {
		v, err := build()
		if err != nil {
			return nil, err
		}
		return encodeCached(snap, key, v)
	})
	if err != nil {
		return err
	}
	return s.serveCached(w, r, snap, key, c, meta)
}

// encodeCached encodes v, the response to key in snap, with its ETag: the
// body is a function of the snapshot and the key, and so is the tag.
func encodeCached(snap *market.Snapshot, key string, v any) (*cached, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	// Weak: the data is the same for every request with the key, but meta
	// (timestamp, request_id) is not, so the bytes are not.
	return &cached{body: body, etag: []string{`W/"` + snap.ID + "." + strconv.FormatUint(h.Sum64(), 36) + `"`}}, nil
}

// serveCached writes c with ETag and Cache-Control, or 304 when the client
// already has it; meta is written around the body. c is memoised under
// key in snap, or key is "".
//
// The ETag is the same whether the answer is gzip-encoded or not: it is
// weak (see compress.go).
func (s *Server) serveCached(w http.ResponseWriter, r *http.Request, snap *market.Snapshot, key string, c *cached, meta *Meta) error {
	hdr := w.Header()
	hdr["Etag"] = c.etag
	hdr["Cache-Control"] = cacheControl(snap.AsOf.Add(s.market.Refresh()).Sub(s.clock()))
	hdr["Content-Type"] = hdrJSON // writeRaw's too; the gzip path sets none
	e, _ := w.(*exchange)
	// When the request may take gzip: the room of a stored block's
	// header, then meta and the envelope's end (see writeCachedGzip).
	var end *bytes.Buffer
	size := len(envelopeHead) + len(c.body) + len(envelopeMid)
	if e != nil && e.gzip != gzipNo {
		end = bufPool.Get().(*bytes.Buffer)
		defer bufPool.Put(end)
		end.Reset()
		end.Write(storedBlockRoom[:])
		end.Write(meta.appendJSON(end.AvailableBuffer()))
		end.WriteString(envelopeEnd)
		size += end.Len() - len(storedBlockRoom)
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatch(inm, c.etag[0]) {
		if end != nil && e.gzips(http.StatusOK, size) {
			addVary(hdr) // as the 200 would have (RFC 9110 §15.4.5)
		}
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	if end != nil && e.gzips(http.StatusOK, size) {
		return writeCachedGzip(e, snap, key, c, end)
	}
	return writeRaw(w, http.StatusOK, c.body, meta)
}

// etagMatch applies If-None-Match's weak comparison (RFC 9110 §13.1.2):
// the tags match whether either is weak.
func etagMatch(header, etag string) bool {
	etag = strings.TrimPrefix(etag, "W/")
	for _, tag := range strings.Split(header, ",") {
		if tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/"); tag == etag || tag == "*" {
			return true
		}
	}
	return false
}

// cacheControlValues holds the header values for ages up to an hour.
var cacheControlValues = func() [3601][]string {
	var v [3601][]string
	for i := range v {
		v[i] = []string{"private, max-age=" + strconv.Itoa(i)}
	}
	return v
}()

// cacheControl lets private caches keep a response until the next
// refresh: the whole seconds to it, rounded down, so that no cache keeps
// it past the refresh.
func cacheControl(untilRefresh time.Duration) []string {
	secs := int(math.Max(0, math.Floor(untilRefresh.Seconds())))
	if secs < len(cacheControlValues) {
		return cacheControlValues[secs]
	}
	return []string{"private, max-age=" + strconv.Itoa(secs)}
}

func items(coins []*coinpulse.CoinDetail) []*coinpulse.MarketItem {
	out := make([]*coinpulse.MarketItem, len(coins))
	for i, c := range coins {
		out[i] = &c.MarketItem
	}
	return out
}

var orderNames = func() []string {
	out := make([]string, len(market.Orders))
	for i, o := range market.Orders {
		out[i] = string(o)
	}
	return out
}()

// maxIDs is the most coin ids GET /markets?ids= takes: a page's worth.
const maxIDs = 250

// parseIDs reads GET /markets' ids: coin ids separated by commas (spaces
// around them dropped), each once; an id given twice counts once.
func parseIDs(text string) ([]string, error) {
	var ids []string
	seen := make(map[string]bool)
	for part := range strings.SplitSeq(text, ",") {
		id := strings.TrimSpace(part)
		switch {
		case id == "":
			return nil, coinpulse.ValidationError("ids", "an empty id: give coin ids separated by commas, such as bitcoin,ethereum")
		case utf8.RuneCountInString(id) > 128:
			return nil, coinpulse.ValidationError("ids", fmt.Sprintf("an id of %d characters: coin ids have at most 128", utf8.RuneCountInString(id)))
		case seen[id]:
			continue
		case len(ids) == maxIDs:
			return nil, coinpulse.ValidationError("ids", fmt.Sprintf("more than %d ids: ask for at most %d at once", maxIDs, maxIDs))
		}
		seen[id] = true
		ids = append(ids, id)
	}
	return ids, nil
}

// GET /markets
func (s *Server) listMarkets(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "page", "per_page", "order", "snapshot", "ids")
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
	order, err := q.enum("order", string(market.MarketCapDesc), orderNames...)
	if err != nil {
		return err
	}
	id, given := q.str("snapshot")
	if given && id == "" {
		return coinpulse.ValidationError("snapshot", "must not be empty: give a meta.snapshot of an earlier page, or leave it out to read the latest data")
	}
	var ids []string
	if text, given := q.str("ids"); given {
		if ids, err = parseIDs(text); err != nil {
			return err
		}
	}
	snap, err := s.currentSnapshot(w, id)
	if err != nil {
		return err
	}
	key := "markets|" + order + "|" + strconv.Itoa(page) + "|" + strconv.Itoa(perPage)
	total := snap.Len()
	var selected []*coinpulse.CoinDetail
	m := s.marketMeta(w, snap)
	if ids != nil {
		selected, m.UnknownIDs = snap.Select(market.Order(order), ids)
		total = len(selected)
		// The answer depends on the set of ids found, not on how they were
		// written, and on the unknown ones meta names, as given: every
		// spelling of the same answer shares one cached body and ETag.
		found := make([]string, len(selected))
		for i, c := range selected {
			found[i] = c.ID
		}
		slices.Sort(found)
		key = "selection|" + order + "|" + strconv.Itoa(page) + "|" + strconv.Itoa(perPage) +
			"|" + strings.Join(found, ",") + "|" + strings.Join(m.UnknownIDs, ",")
	}
	totalPages := (total + perPage - 1) / perPage
	m.CurrentPage, m.TotalPages, m.TotalResults = &page, &totalPages, &total
	m.Page, m.PerPage, m.Total = &page, &perPage, &total
	return s.respond(w, r, snap, key, &m, func() (any, error) {
		if ids == nil {
			coins, _ := snap.Page(market.Order(order), page, perPage)
			return items(coins), nil
		}
		start := min((page-1)*perPage, len(selected))
		return items(selected[start:min(start+perPage, len(selected))]), nil
	})
}

// GET /markets/search
func (s *Server) searchMarkets(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "q", "limit")
	if err != nil {
		return err
	}
	text, ok := q.str("q")
	text = strings.TrimSpace(text)
	switch n := len([]rune(text)); {
	case !ok:
		return coinpulse.ValidationError("q", "is required: 2 to 100 characters after trimming spaces")
	case n < 2 || n > 100:
		return coinpulse.ValidationError("q", "must be 2 to 100 characters after trimming spaces; it has "+strconv.Itoa(n))
	}
	limit, err := q.int("limit", 20, 1, 100)
	if err != nil {
		return err
	}
	snap, err := s.currentSnapshot(w, "")
	if err != nil {
		return err
	}
	m := s.marketMeta(w, snap)
	m.Query, m.Snapshot = text, ""
	found, total := snap.Search(text, limit)
	m.Total = &total
	// Searches are not memoised: their keys are the clients' free text.
	c, err := encodeCached(snap, "search|"+text+"|"+strconv.Itoa(limit), items(found))
	if err != nil {
		return err
	}
	return s.serveCached(w, r, snap, "", c, &m)
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
	m := s.marketMeta(w, snap)
	m.Snapshot = ""
	return s.respond(w, r, snap, "global", &m, func() (any, error) { return snap.Global, nil })
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
	m := s.marketMeta(w, snap)
	m.Snapshot = ""
	m.MinMoverVolume = &snap.MinMoverVolume
	return s.respond(w, r, snap, "movers|"+kind+"|"+strconv.Itoa(limit), &m, func() (any, error) {
		out := map[string][]*coinpulse.MarketItem{}
		if kind != "losers" {
			out["gainers"] = items(snap.Gainers(limit))
		}
		if kind != "gainers" {
			out["losers"] = items(snap.Losers(limit))
		}
		return out, nil
	})
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
	m := s.marketMeta(w, snap)
	m.Snapshot = ""
	return s.respond(w, r, snap, "coin|"+coinParam(r), &m, func() (any, error) { return d, nil })
}

// historyData is the data of GET /coins/{idOrSymbol}/history.
type historyData struct {
	ID       string             `json:"id"`
	Symbol   string             `json:"symbol"`
	Days     any                `json:"days"`
	Interval coinpulse.Interval `json:"interval"`
	Points   []historyPoint     `json:"points"`
}

// historyPoint is a coinpulse.HistoryPoint as served: a market cap or a
// volume the feed does not know (0 in the store) is null.
type historyPoint struct {
	Timestamp   time.Time `json:"timestamp"`
	Price       float64   `json:"price"`
	MarketCap   *float64  `json:"market_cap"`
	TotalVolume *float64  `json:"total_volume"`
}

// historyPoints serves pts; the pointers point into pts.
func historyPoints(pts []coinpulse.HistoryPoint) []historyPoint {
	out := make([]historyPoint, len(pts))
	for i := range pts {
		p := &pts[i]
		out[i] = historyPoint{Timestamp: p.Timestamp, Price: p.Price}
		if p.MarketCap > 0 {
			out[i].MarketCap = &p.MarketCap
		}
		if p.TotalVolume > 0 {
			out[i].TotalVolume = &p.TotalVolume
		}
	}
	return out
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
	m := s.marketMeta(w, snap)
	m.Snapshot = ""
	return s.respond(w, r, snap, "history|"+d.ID+"|"+daysText+"|"+interval, &m, func() (any, error) {
		pts, err := s.market.History(r.Context(), snap, d.ID, days, coinpulse.Interval(interval))
		if err != nil {
			return nil, err
		}
		out := historyData{ID: d.ID, Symbol: d.Symbol, Days: days, Interval: coinpulse.Interval(interval), Points: historyPoints(pts)}
		if days == 0 {
			out.Days = "max"
		}
		return out, nil
	})
}
