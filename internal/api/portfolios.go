package api

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/ledger"
	"coinpulse/internal/market"
)

// Bounds of portfolio fields.
const (
	maxNameLen  = 100
	maxDescLen  = 1000
	maxNotesLen = 1000
)

// owner is whose rows a request acts on: the key's account, in the key's
// mode.
func owner(w http.ResponseWriter) coinpulse.Owner {
	p := exchangeOf(w).principal
	return coinpulse.Owner{UserID: p.user.ID, Mode: p.key.Mode}
}

// pathID reads the positive integer path value name; anything else is
// the not-found answer what would give.
func pathID(r *http.Request, name string, notFound func(string) error) (int64, error) {
	s := r.PathValue(name)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != s {
		return 0, notFound(s)
	}
	return n, nil
}

func portfolioNotFound(s string) error {
	return coinpulse.Errorf(coinpulse.CodeNotFound, "No portfolio %q.", truncate(s, 50))
}

func holdingNotFound(s string) error {
	return coinpulse.Errorf(coinpulse.CodeNotFound, "No holding %q.", truncate(s, 50))
}

// pricedMeta is the meta of a response priced at snap (nil: before the
// first market refresh, when prices are null).
func (s *Server) pricedMeta(w http.ResponseWriter, snap *market.Snapshot) Meta {
	if snap == nil {
		return s.newMeta(w)
	}
	m := s.marketMeta(w, snap)
	m.Snapshot = ""
	return m
}

// GET /portfolio
func (s *Server) listPortfolios(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "limit", "starting_after")
	if err != nil {
		return err
	}
	limit, after, ask, err := q.cursor(100)
	if err != nil {
		return err
	}
	pg := coinpulse.AllPortfolios
	pg.StartingAfter, pg.Limit = after, ask
	ps, total, err := s.store.Portfolios(r.Context(), owner(w), pg)
	if err != nil {
		return err
	}
	ps, more := trimPage(ps, limit)
	snap := s.market.Current()
	out := make([]portfolioView, len(ps))
	for i := range ps {
		out[i] = viewPortfolio(&ps[i], snap)
	}
	m := s.pricedMeta(w, snap)
	m.Total, m.HasMore = &total, &more
	return writeData(w, http.StatusOK, out, &m)
}

// GET /portfolio/{id}
func (s *Server) getPortfolio(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", portfolioNotFound)
	if err != nil {
		return err
	}
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		return err
	}
	o := owner(w)
	snap := s.market.Current()
	snapID := ""
	if snap != nil {
		snapID = snap.ID
	}
	m := s.pricedMeta(w, snap)
	version, err := s.store.PortfolioVersion(r.Context(), o, id)
	if err != nil {
		return err
	}
	p, body := s.portfolios.get(id, version, snapID)
	if body != nil {
		return writeRaw(w, http.StatusOK, body, &m)
	}
	if p == nil { // changed since it was kept, or never kept
		if p, err = s.store.Portfolio(r.Context(), o, id); err != nil {
			return err
		}
	}
	v := viewPortfolio(p, snap)
	body = v.appendJSON(nil)
	s.portfolios.put(p, snapID, body)
	return writeRaw(w, http.StatusOK, body, &m)
}

func (s *Server) writePortfolio(w http.ResponseWriter, status int, p *coinpulse.Portfolio) error {
	snap := s.market.Current()
	m := s.pricedMeta(w, snap)
	v := viewPortfolio(p, snap)
	return writeRaw(w, status, v.appendJSON(nil), &m)
}

// POST /portfolio
func (s *Server) createPortfolio(w http.ResponseWriter, r *http.Request) error {
	b, err := readBody(r, "name", "description")
	if err != nil {
		return err
	}
	name, _ := b.text("name", true, 1, maxNameLen)
	desc, _ := b.text("description", false, 0, maxDescLen)
	if err := b.err(); err != nil {
		return err
	}
	p := exchangeOf(w).principal
	max := s.planMap()[p.user.Tier].MaxPortfolios
	now := s.clock().UTC()
	port := &coinpulse.Portfolio{Owner: owner(w), Name: name, Description: desc, CreatedAt: now, UpdatedAt: now}
	if err := s.store.CreatePortfolio(r.Context(), port, max); err != nil {
		if coinpulse.ErrorCode(err) == coinpulse.CodePortfolioLimitReached {
			return portfolioLimit(p, max)
		}
		return err
	}
	return s.writePortfolio(w, http.StatusCreated, port)
}

// portfolioLimit words PORTFOLIO_LIMIT_REACHED for p's plan. The mode
// may hold more than max: plans can be lowered after portfolios were made.
func portfolioLimit(p *principal, max int) error {
	if max == 0 {
		return coinpulse.Errorf(coinpulse.CodePortfolioLimitReached, "The %s plan includes no portfolios; upgrade at /user/api.", p.user.Tier)
	}
	return coinpulse.Errorf(coinpulse.CodePortfolioLimitReached,
		"The %s plan allows %s per mode (live and sandbox each), and this mode has reached that; delete one or upgrade at /user/api.", p.user.Tier, coinpulse.Count(max, "portfolio", "portfolios"))
}

// PATCH /portfolio/{id}
func (s *Server) patchPortfolio(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", portfolioNotFound)
	if err != nil {
		return err
	}
	b, err := readBody(r, "name", "description")
	if err != nil {
		return err
	}
	var patch coinpulse.PortfolioPatch
	if string(b.fields["name"]) == "null" {
		b.fail("name", "cannot be cleared: give 1 to 100 characters, or leave name out")
	}
	if name, ok := b.text("name", false, 1, maxNameLen); ok {
		patch.Name = &name
	}
	if _, present := b.fields["description"]; present {
		desc, ok := b.text("description", false, 0, maxDescLen)
		if ok || string(b.fields["description"]) == "null" {
			patch.Description = &desc
		}
	}
	if len(b.fields) == 0 {
		b.fail("name", "give name and/or description to change")
	}
	if err := b.err(); err != nil {
		return err
	}
	p, err := s.store.UpdatePortfolio(r.Context(), owner(w), id, patch, s.clock().UTC())
	if err != nil {
		return err
	}
	return s.writePortfolio(w, http.StatusOK, p)
}

// deleted is the data of a successful DELETE.
type deleted struct {
	ID      int64 `json:"id"`
	Deleted bool  `json:"deleted"`
}

// DELETE /portfolio/{id}
func (s *Server) deletePortfolio(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", portfolioNotFound)
	if err != nil {
		return err
	}
	if err := s.store.DeletePortfolio(r.Context(), owner(w), id); err != nil {
		return err
	}
	m := s.newMeta(w)
	return writeData(w, http.StatusOK, deleted{id, true}, &m)
}

// resolveCoin finds the coin a trade names: an exact id, or a symbol no
// other coin shares. Unknown or ambiguous is a VALIDATION_ERROR on field;
// while market data is still loading the request is 503, as the market
// endpoints are: a retry will do.
func (s *Server) resolveCoin(b *body, field string) (*coinpulse.CoinDetail, *market.Snapshot) {
	return s.resolveTraded(b, field, false)
}

// resolveTraded is resolveCoin for a trade. A sell (sell set) may name by
// its id a coin the market does not list, or not yet (while market data
// loads): that of a holding whose coin left the feed, which is sold
// without a price as POST /holdings/{id}/sell does. The store then finds
// no holding of a coin that never was, and says so.
func (s *Server) resolveTraded(b *body, field string, sell bool) (*coinpulse.CoinDetail, *market.Snapshot) {
	name, ok := b.text(field, true, 1, 100)
	if !ok {
		return nil, nil
	}
	held := func() *coinpulse.CoinDetail {
		return &coinpulse.CoinDetail{MarketItem: coinpulse.MarketItem{ID: strings.ToLower(name)}}
	}
	snap := s.market.Current()
	if snap == nil {
		if sell {
			return held(), nil
		}
		b.unavailable = errLoading
		return nil, nil
	}
	if c := snap.Coin(name); c != nil {
		return c, snap
	}
	d, ok := snap.Lookup(name)
	switch {
	case !ok && sell:
		return held(), snap
	case !ok:
		b.fail(field, "unknown coin; use an id from /api/v1/markets or /api/v1/markets/search")
		return nil, nil
	case len(d.Alternatives) > 0 && d.ResolvedBy == "symbol":
		ids := []string{d.ID}
		for _, a := range d.Alternatives {
			ids = append(ids, a.ID)
		}
		b.fail(field, "the symbol "+strings.ToLower(name)+" is shared by "+strings.Join(ids, ", ")+"; give the coin's id")
		return nil, nil
	}
	return snap.Coin(d.ID), snap
}

// lot reads quantity, the price under priceField, notes and executed_at.
func (s *Server) lot(b *body, priceField string) ledger.Lot {
	q, _ := b.amount("quantity", true)
	p, _ := b.amount(priceField, false)
	notes, _ := b.text("notes", false, 0, maxNotesLen)
	// ExecutedAt is zero when the body has none: the store then gives the
	// trade its time once it holds the portfolio's lock (Trade.At).
	return ledger.Lot{Quantity: q, Price: p, Notes: notes, ExecutedAt: b.executedAt(s.clock().UTC())}
}

// POST /portfolio/{id}/holdings
func (s *Server) addHolding(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", portfolioNotFound)
	if err != nil {
		return err
	}
	b, err := readBody(r, "coin_id", "quantity", "buy_price", "notes", "executed_at")
	if err != nil {
		return err
	}
	coin, snap := s.resolveCoin(b, "coin_id")
	lot := s.lot(b, "buy_price")
	if err := b.err(); err != nil {
		return err
	}
	h, _, err := s.store.Trade(r.Context(), owner(w), coinTrade(id, coin, s.clock), ledger.BuyFunc(lot))
	if err != nil {
		return err
	}
	m := s.pricedMeta(w, snap)
	return writeData(w, http.StatusCreated, viewHolding(&h, snap), &m)
}

// onField reports whether err is a VALIDATION_ERROR on field alone.
func onField(err error, field string) bool {
	var e *coinpulse.Error
	return errors.As(err, &e) && e.Code == coinpulse.CodeValidation && len(e.Details) == 1 && e.Details[0].Field == field
}

// coinTrade names the holding of c in a portfolio. Its time is read from
// clock once the trade holds the portfolio's lock (coinpulse.Trade.At).
func coinTrade(portfolioID int64, c *coinpulse.CoinDetail, clock func() time.Time) coinpulse.Trade {
	return coinpulse.Trade{PortfolioID: portfolioID, CoinID: c.ID, CoinSymbol: c.Symbol, CoinName: c.Name, Clock: clock}
}

// tradeView is the data of a sell or a posted transaction: the
// transaction and the holding after it.
type tradeView struct {
	Transaction transactionView `json:"transaction"`
	Holding     holdingView     `json:"holding"`
}

// POST /holdings/{id}/sell
func (s *Server) sellHolding(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", holdingNotFound)
	if err != nil {
		return err
	}
	b, err := readBody(r, "quantity", "sell_price", "notes", "executed_at")
	if err != nil {
		return err
	}
	lot := s.lot(b, "sell_price")
	if err := b.err(); err != nil {
		return err
	}
	h, tx, err := s.store.Trade(r.Context(), owner(w), coinpulse.Trade{HoldingID: id, Clock: s.clock}, ledger.SellFunc(lot))
	if err != nil {
		return err
	}
	snap := s.market.Current()
	m := s.pricedMeta(w, snap)
	return writeData(w, http.StatusCreated, tradeView{viewTransaction(&tx), viewHolding(&h, snap)}, &m)
}

// POST /portfolio/transactions
func (s *Server) postTransaction(w http.ResponseWriter, r *http.Request) error {
	b, err := readBody(r, "portfolio_id", "coin_id", "type", "quantity", "price", "notes", "executed_at")
	if err != nil {
		return err
	}
	pid, _ := b.id("portfolio_id")
	typ, _ := b.enum("type", string(coinpulse.Buy), string(coinpulse.Sell))
	coin, snap := s.resolveTraded(b, "coin_id", coinpulse.TxType(typ) == coinpulse.Sell)
	lot := s.lot(b, "price")
	if err := b.err(); err != nil {
		return err
	}
	apply := ledger.BuyFunc(lot)
	if coinpulse.TxType(typ) == coinpulse.Sell {
		apply = ledger.SellFunc(lot)
	}
	h, tx, err := s.store.Trade(r.Context(), owner(w), coinTrade(pid, coin, s.clock), apply)
	if snap == nil && onField(err, "coin_id") {
		// A sell while market data loads names no holding by that id: it
		// may name one by a symbol, which only the market data resolves.
		return errLoading
	}
	if err != nil {
		return err
	}
	m := s.pricedMeta(w, snap)
	return writeData(w, http.StatusCreated, tradeView{viewTransaction(&tx), viewHolding(&h, snap)}, &m)
}

// DELETE /holdings/{id}
func (s *Server) deleteHolding(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", holdingNotFound)
	if err != nil {
		return err
	}
	if err := s.store.DeleteHolding(r.Context(), owner(w), id); err != nil {
		return err
	}
	m := s.newMeta(w)
	return writeData(w, http.StatusOK, deleted{id, true}, &m)
}

// GET /portfolio/{id}/transactions
func (s *Server) listTransactions(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", portfolioNotFound)
	if err != nil {
		return err
	}
	q, err := parseQuery(r.URL.RawQuery, "page", "per_page", "starting_after")
	if err != nil {
		return err
	}
	page, err := q.int("page", 1, 1, 1_000_000)
	if err != nil {
		return err
	}
	perPage, err := q.int("per_page", 50, 1, 250)
	if err != nil {
		return err
	}
	after, err := q.int("starting_after", 0, 1, math.MaxInt64)
	if err != nil {
		return err
	}
	if _, paged := q.lookup("page"); paged && after != 0 {
		return coinpulse.ValidationError("starting_after", "give page or starting_after, not both")
	}
	// One more than the page holds says whether more come after it.
	pg := coinpulse.TxPage{Offset: (page - 1) * perPage, Limit: perPage + 1, StartingAfter: int64(after)}
	if after != 0 {
		pg.Offset = 0
	}
	txs, total, err := s.store.Transactions(r.Context(), owner(w), id, pg)
	if err != nil {
		return err
	}
	more := len(txs) > perPage
	txs = txs[:min(len(txs), perPage)]
	out := make([]transactionView, len(txs))
	for i := range txs {
		out[i] = viewTransaction(&txs[i])
	}
	m := s.newMeta(w)
	m.PerPage, m.Total, m.TotalResults, m.HasMore = &perPage, &total, &total, &more
	if after == 0 { // a cursor's page has no number
		totalPages := (total + perPage - 1) / perPage
		m.CurrentPage, m.TotalPages, m.Page = &page, &totalPages, &page
	}
	return writeData(w, http.StatusOK, out, &m)
}

// POST /portfolio/{id}/sync
func (s *Server) syncPortfolio(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", portfolioNotFound)
	if err != nil {
		return err
	}
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if err := b.err(); err != nil {
		return err
	}
	snap, err := s.currentSnapshot(w, "")
	if err != nil {
		return err
	}
	o := owner(w)
	p, err := s.store.Portfolio(r.Context(), o, id)
	if err != nil {
		return err
	}
	// The point describes the portfolio as it is when recorded: a trade
	// that changed it meanwhile (its version) has it valued again. Another
	// sync or a rename changes the version but not the holdings, and is
	// not counted against the tries.
	for attempt, loops := 1, 0; ; loops++ {
		v := viewPortfolio(p, snap)
		if h := v.unpriced(); h != nil {
			return coinpulse.Errorf(coinpulse.CodeConflict,
				"Holding %d (%s) has no market price now, so the portfolio's value cannot be recorded; sync again once the coin is priced, or sell the holding first.", h.ID, h.CoinID)
		}
		now := s.clock().UTC().Truncate(time.Microsecond)
		point := coinpulse.ValuePoint{At: now, TotalValue: decimal.Decimal(*v.TotalValue), TotalCost: decimal.Decimal(v.TotalCost)}
		err = s.store.RecordValue(r.Context(), o, id, p.Version, point)
		if errors.Is(err, coinpulse.ErrPortfolioChanged) {
			cur, err := s.store.Portfolio(r.Context(), o, id)
			if err != nil {
				return err
			}
			if !sameHoldings(p, cur) {
				attempt++
			}
			if attempt > syncAttempts || loops >= 50*syncAttempts {
				return coinpulse.Errorf(coinpulse.CodeConflict, "The portfolio's trades changed it %d times while its value was being recorded; sync again once they have settled.", attempt-1)
			}
			p = cur
			continue
		}
		if err != nil {
			return err
		}
		v.SyncedAt = &now
		m := s.pricedMeta(w, snap)
		return writeData(w, http.StatusOK, v, &m)
	}
}

// syncAttempts is how many times a sync values a portfolio before giving
// up on one that trades keep changing.
const syncAttempts = 20

// sameHoldings reports whether a and b hold the same: a point of one is
// a point of the other.
func sameHoldings(a, b *coinpulse.Portfolio) bool {
	if len(a.Holdings) != len(b.Holdings) {
		return false
	}
	for i, h := range a.Holdings {
		g := b.Holdings[i]
		if h.ID != g.ID || h.CoinID != g.CoinID || !h.Quantity.Equal(g.Quantity) || !h.TotalCost.Equal(g.TotalCost) {
			return false
		}
	}
	return true
}

// valuePointView is one point of GET /portfolio/{id}/history.
type valuePointView struct {
	Timestamp  time.Time `json:"timestamp"`
	TotalValue num       `json:"total_value"`
	TotalCost  num       `json:"total_cost"`
	ProfitLoss num       `json:"profit_loss"`
}

type valueHistoryView struct {
	ID     int64            `json:"id"`
	Days   any              `json:"days"` // a number, or "max
	Points []valuePointView `json:"points"`
}

// GET /portfolio/{id}/history
func (s *Server) portfolioHistory(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", portfolioNotFound)
	if err != nil {
		return err
	}
	q, err := parseQuery(r.URL.RawQuery, "days")
	if err != nil {
		return err
	}
	days, err := q.enum("days", "30", "1", "7", "30", "90", "365", "max")
	if err != nil {
		return err
	}
	var from time.Time
	var daysOut any = days
	if days != "max" {
		n, _ := strconv.Atoi(days)
		from, daysOut = s.clock().UTC().AddDate(0, 0, -n), n
	}
	pts, err := s.store.ValueHistory(r.Context(), owner(w), id, from)
	if err != nil {
		return err
	}
	out := valueHistoryView{ID: id, Days: daysOut, Points: make([]valuePointView, len(pts))}
	for i, p := range pts {
		out.Points[i] = valuePointView{p.At.UTC(), num(p.TotalValue), num(p.TotalCost), num(p.TotalValue.Sub(p.TotalCost))}
	}
	m := s.newMeta(w)
	return writeData(w, http.StatusOK, out, &m)
}
