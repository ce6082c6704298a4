package coinpulse

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// Owner is whose a portfolio is: an account in one mode. Live and sandbox
// portfolios of the same account never see each other.
type Owner struct {
	UserID int64
	Mode   Mode
}

// Portfolio is a named set of holdings. Holdings is filled by the reads
// that return a portfolio.
type Portfolio struct {
	ID          int64
	Owner       Owner
	Name        string
	Description string
	// RealizedPL is the sum of the realised profit and loss of every sell
	// ever made in the portfolio, deleted holdings included.
	RealizedPL decimal.Decimal
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// SyncedAt is the time of the last sync, nil before the first.
	SyncedAt *time.Time
	// Version grows with every change to the portfolio or its holdings
	// (a trade, a deleted holding, a rename, a sync).
	Version  int64
	Holdings []Holding
}

// Holding is a portfolio's position in one coin, on the average-cost
// basis: TotalCost is the cost of the quantity still held.
type Holding struct {
	ID          int64
	PortfolioID int64
	CoinID      string
	CoinSymbol  string
	CoinName    string
	Quantity    decimal.Decimal
	TotalCost   decimal.Decimal
	Notes       string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// TxType is a transaction's kind.
type TxType string

// The transaction kinds.
const (
	Buy  TxType = "buy"
	Sell TxType = "sell"
)

// Transaction records one buy or sell.
type Transaction struct {
	ID          int64
	PortfolioID int64
	HoldingID   int64
	CoinID      string
	CoinSymbol  string
	Type        TxType
	Quantity    decimal.Decimal
	Price       decimal.Decimal
	Total       decimal.Decimal
	// RealizedPL is set on sells only.
	RealizedPL decimal.NullDecimal
	Notes      string
	ExecutedAt time.Time
	CreatedAt  time.Time
}

// ValuePoint is a portfolio's value as a sync recorded it.
type ValuePoint struct {
	At         time.Time
	TotalValue decimal.Decimal
	TotalCost  decimal.Decimal
}

// PortfolioPatch changes the fields that are not nil.
type PortfolioPatch struct {
	Name        *string
	Description *string
}

// Trade names the holding a buy or a sell acts on: HoldingID, or else the
// portfolio's holding of CoinID (which a buy creates when there is none,
// with the coin's symbol and name).
type Trade struct {
	HoldingID   int64
	PortfolioID int64
	CoinID      string
	CoinSymbol  string
	CoinName    string
	// Now is the trade's time. When zero it is read from Clock (nil: the
	// store's clock) once the trade holds its portfolio's lock, so that
	// the trades of a portfolio get times in the order they are applied,
	// however long each waited for the lock.
	Now   time.Time
	Clock func() time.Time
}

// At returns the trade's time: Now, or else Clock's (else fallback's)
// time of the call.
func (t Trade) At(fallback func() time.Time) time.Time {
	switch {
	case !t.Now.IsZero():
		return t.Now
	case t.Clock != nil:
		return t.Clock()
	}
	return fallback()
}

// TradeFunc computes a trade from the holding as stored (a Holding with
// ID 0 and zero quantity when the portfolio does not hold the coin yet) and
// returns the holding after it and the transaction that records it. An
// error leaves everything as it was.
type TradeFunc func(h Holding) (Holding, Transaction, error)

// PortfolioStore keeps portfolios, holdings, transactions and value
// history. Every method is scoped to an Owner: another owner's rows are
// RESOURCE_NOT_FOUND, never revealed.
type PortfolioStore interface {
	// CreatePortfolio stores p (ID, RealizedPL, SyncedAt ignored) and sets
	// its ID. With max >= 0 it fails with ErrPortfolioLimit when the owner
	// already has max portfolios, atomically.
	CreatePortfolio(ctx context.Context, p *Portfolio, max int) error
	// Portfolios returns the owner's portfolios pg selects, oldest (by
	// CreatedAt, then ID) first, each with its holdings (oldest first),
	// and how many portfolios the owner has in all.
	Portfolios(ctx context.Context, o Owner, pg PortfolioPage) ([]Portfolio, int, error)
	// Portfolio returns one portfolio with its holdings.
	Portfolio(ctx context.Context, o Owner, id int64) (*Portfolio, error)
	// PortfolioVersion returns a portfolio's Version, by one indexed
	// look-up: readers keep priced portfolios under it.
	PortfolioVersion(ctx context.Context, o Owner, id int64) (int64, error)
	// UpdatePortfolio applies patch and returns the portfolio with its
	// holdings.
	UpdatePortfolio(ctx context.Context, o Owner, id int64, patch PortfolioPatch, now time.Time) (*Portfolio, error)
	// DeletePortfolio deletes a portfolio with its holdings, transactions
	// and value history.
	DeletePortfolio(ctx context.Context, o Owner, id int64) error
	// Trade runs apply on the holding t names, under a lock that serialises
	// trades on it, and stores the holding and the transaction it returns,
	// adding the transaction's realised P/L to the portfolio's. It returns
	// them with their ids and times set.
	Trade(ctx context.Context, o Owner, t Trade, apply TradeFunc) (Holding, Transaction, error)
	// DeleteHolding deletes a holding; its transactions stay.
	DeleteHolding(ctx context.Context, o Owner, id int64) error
	// Transactions returns the page pg of a portfolio's transactions,
	// newest (by ExecutedAt, then ID) first, and their total count.
	Transactions(ctx context.Context, o Owner, portfolioID int64, pg TxPage) ([]Transaction, int, error)
	// RecordValue appends a value point and sets the portfolio's SyncedAt
	// to v.At. With version > 0 it does so only while the portfolio's
	// Version is still version, waiting for a change in progress, and else
	// fails with ErrPortfolioChanged: the point then describes the
	// portfolio as it is.
	RecordValue(ctx context.Context, o Owner, portfolioID int64, version int64, v ValuePoint) error
	// ValueHistory returns a portfolio's value points at or after from,
	// oldest first.
	ValueHistory(ctx context.Context, o Owner, portfolioID int64, from time.Time) ([]ValuePoint, error)
}

// PortfolioPage selects from an owner's portfolios: from the one after
// StartingAfter's place in the list when it is set (one of the owner's
// portfolios, else ErrPortfolioCursor), at most Limit of them (negative:
// no limit).
type PortfolioPage struct {
	StartingAfter int64
	Limit         int
}

// AllPortfolios selects every portfolio of an owner.
var AllPortfolios = PortfolioPage{Limit: -1}

// ErrPortfolioCursor is the VALIDATION_ERROR of a
// PortfolioPage.StartingAfter that names none of the owner's portfolios.
func ErrPortfolioCursor(id int64) error {
	return ValidationError("starting_after", fmt.Sprintf("you have no portfolio %d", id))
}

// TxPage selects transactions from a portfolio's list: at most Limit
// (negative: no limit), from the one after StartingAfter's place in the
// list when it is set (a transaction of the portfolio, else
// ErrTxCursor), else after skipping Offset. A cursor is not moved by the
// transactions recorded since it was read, as an offset is.
type TxPage struct {
	Offset, Limit int
	StartingAfter int64
}

// ErrTxCursor is the VALIDATION_ERROR of a TxPage.StartingAfter that names
// no transaction of the portfolio.
func ErrTxCursor(id int64) error {
	return ValidationError("starting_after", fmt.Sprintf("the portfolio has no transaction %d", id))
}

// ErrPortfolioNotFound is RESOURCE_NOT_FOUND for a portfolio.
func ErrPortfolioNotFound(id int64) error {
	return Errorf(CodeNotFound, "No portfolio %d.", id)
}

// ErrPortfolioChanged is RecordValue's error when the portfolio changed
// since the version the point was computed from.
var ErrPortfolioChanged = errors.New("the portfolio changed")

// ErrHoldingNotFound is RESOURCE_NOT_FOUND for a holding.
func ErrHoldingNotFound(id int64) error {
	return Errorf(CodeNotFound, "No holding %d.", id)
}

// ErrTradeBeforeLatest is the VALIDATION_ERROR of a trade dated at that
// would have to apply before a trade of its holding dated later, at
// latest: for a sell, any later trade (it sells what the holding held at
// its date); for a buy, a later sell (whose realised profit left it out).
// A holding's trades apply in the order they arrive, so refusing these
// keeps its cost and each sell's profit those of its trades in date
// order. Buys dated before later buys only are taken: the order of buys
// does not change an average cost. A trade without a date is dated now,
// or at its holding's latest trade if that is later (a date up to 5
// minutes ahead, or another node's clock), so that it comes after it.
func ErrTradeBeforeLatest(typ TxType, at, latest time.Time) error {
	why := "before this holding's latest trade at " + latest.UTC().Format(time.RFC3339Nano) + ": a sell sells what the holding held at its date"
	if typ == Buy {
		why = "before this holding's sell at " + latest.UTC().Format(time.RFC3339Nano) + ", whose realised profit was computed without it"
	}
	return ValidationError("executed_at", "is "+at.UTC().Format(time.RFC3339Nano)+", "+why+
		"; record a holding's trades in the order of their dates (or delete the holding and record them again, oldest first)")
}

// ErrPortfolioLimit is PORTFOLIO_LIMIT_REACHED: the owner holds max
// portfolios or more (a plan may have been lowered since).
func ErrPortfolioLimit(max int) error {
	return Errorf(CodePortfolioLimitReached, "Your plan allows %s, and you have reached that; delete one or upgrade at /user/api.", Count(max, "portfolio", "portfolios"))
}
