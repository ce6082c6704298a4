package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
)

// Amounts are stored as TEXT, the decimal's String(): exact, plain digits.

// dec returns d as stored.
func dec(d decimal.Decimal) string { return d.String() }

// nullDec returns d as stored, or nil for NULL.
func nullDec(d decimal.NullDecimal) any {
	if !d.Valid {
		return nil
	}
	return d.Decimal.String()
}

// parseDec returns a stored amount.
func parseDec(s string) (decimal.Decimal, error) {
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("stored amount %q: %w", s, err)
	}
	return d, nil
}

// parseNullDec returns a stored nullable amount.
func parseNullDec(s sql.NullString) (decimal.NullDecimal, error) {
	if !s.Valid {
		return decimal.NullDecimal{}, nil
	}
	d, err := parseDec(s.String)
	return decimal.NewNullDecimal(d), err
}

// ceilMicros is micros rounded up: the first stored time at or after t.
func ceilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if time.UnixMicro(us).Before(t) {
		us++
	}
	return us
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CreatePortfolio inserts p for p.Owner and sets its ID, CreatedAt (kept
// when set, else now) and UpdatedAt (= CreatedAt), truncated to
// microseconds in UTC; RealizedPL becomes 0, SyncedAt nil and Holdings
// empty. With max >= 0 it counts the owner's portfolios inside one
// immediate transaction and, when there are already max, fails with
// PORTFOLIO_LIMIT_REACHED and inserts nothing. An unknown mode is a
// VALIDATION_ERROR, an unknown user a RESOURCE_NOT_FOUND error.
func (db *DB) CreatePortfolio(ctx context.Context, p *coinpulse.Portfolio, max int) error {
	if !p.Owner.Mode.Valid() {
		return coinpulse.ValidationError("mode", "must be live or test")
	}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = db.now()
	}
	p.CreatedAt = truncate(p.CreatedAt)
	p.UpdatedAt = p.CreatedAt
	p.RealizedPL = decimal.Zero
	p.SyncedAt = nil
	p.Holdings = []coinpulse.Holding{}
	return db.writeTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM users WHERE id = ?`, p.Owner.UserID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return coinpulse.ErrUserNotFound()
		}
		if err != nil {
			return fmt.Errorf("sqlite: create portfolio: %w", err)
		}
		if max >= 0 {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT count(*) FROM portfolios WHERE user_id = ? AND mode = ?`,
				p.Owner.UserID, p.Owner.Mode).Scan(&n)
			if err != nil {
				return fmt.Errorf("sqlite: create portfolio: count portfolios: %w", err)
			}
			if n >= max {
				return coinpulse.ErrPortfolioLimit(max)
			}
		}
		err = tx.QueryRowContext(ctx, `
			INSERT INTO portfolios (user_id, mode, name, description, realized_pl, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			RETURNING id, version`,
			p.Owner.UserID, p.Owner.Mode, p.Name, p.Description, dec(p.RealizedPL), micros(p.CreatedAt), micros(p.UpdatedAt),
		).Scan(&p.ID, &p.Version)
		if err != nil {
			return fmt.Errorf("sqlite: create portfolio: %w", err)
		}
		return nil
	})
}

// Portfolios returns the owner's portfolios pg selects, oldest first,
// each with its holdings, oldest first (an empty slice when none), and how
// many the owner has in all: the count, then the page in one statement
// that joins portfolios and holdings. It returns the database's error, if
// any.
func (db *DB) Portfolios(ctx context.Context, o coinpulse.Owner, pg coinpulse.PortfolioPage) ([]coinpulse.Portfolio, int, error) {
	var (
		total  int
		cursor bool
	)
	err := db.db.QueryRowContext(ctx, `
		SELECT count(*), EXISTS (SELECT 1 FROM portfolios WHERE id = ?1 AND user_id = ?2 AND mode = ?3)
		FROM portfolios WHERE user_id = ?2 AND mode = ?3`,
		pg.StartingAfter, o.UserID, o.Mode).Scan(&total, &cursor)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: portfolios: %w", err)
	}
	if pg.StartingAfter != 0 && !cursor {
		return nil, 0, coinpulse.ErrPortfolioCursor(pg.StartingAfter)
	}
	if pg.Limit == 0 {
		return []coinpulse.Portfolio{}, total, nil
	}
	ps, err := readPortfolios(ctx, db.db, o, 0, pg)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: portfolios: %w", err)
	}
	return ps, total, nil
}

// Portfolio returns the owner's portfolio id with its holdings, oldest
// first, or a RESOURCE_NOT_FOUND error when the owner has no such
// portfolio.
func (db *DB) Portfolio(ctx context.Context, o coinpulse.Owner, id int64) (*coinpulse.Portfolio, error) {
	return portfolioByID(ctx, db.db, o, id)
}

// portfolioByID is Portfolio on q.
func portfolioByID(ctx context.Context, q querier, o coinpulse.Owner, id int64) (*coinpulse.Portfolio, error) {
	ps, err := readPortfolios(ctx, q, o, id, coinpulse.AllPortfolios)
	if err != nil {
		return nil, fmt.Errorf("sqlite: portfolio %d: %w", id, err)
	}
	if len(ps) == 0 {
		return nil, coinpulse.ErrPortfolioNotFound(id)
	}
	return &ps[0], nil
}

const holdingColumns = `id, portfolio_id, coin_id, coin_symbol, coin_name, quantity, total_cost, notes, created_at, updated_at`

// readPortfolios returns the owner's portfolios pg selects (only portfolio
// id when id is not 0) with their holdings, by one query that joins the
// two; pg.StartingAfter names one of the owner's portfolios.
func readPortfolios(ctx context.Context, q querier, o coinpulse.Owner, id int64, pg coinpulse.PortfolioPage) ([]coinpulse.Portfolio, error) {
	limit := pg.Limit
	if limit < 0 {
		limit = -1 // SQLite's no limit
	}
	rows, err := q.QueryContext(ctx, `
		SELECT p.id, p.name, p.description, p.realized_pl, p.created_at, p.updated_at, p.synced_at, p.version,
			h.id, h.coin_id, h.coin_symbol, h.coin_name, h.quantity, h.total_cost, h.notes, h.created_at, h.updated_at
		FROM (
			SELECT * FROM portfolios
			WHERE user_id = ?1 AND mode = ?2 AND (?3 = 0 OR id = ?3)
				AND (?4 = 0 OR (created_at, id) > (SELECT created_at, id FROM portfolios WHERE id = ?4))
			ORDER BY created_at, id
			LIMIT ?5
		) p
		LEFT JOIN holdings h ON h.portfolio_id = p.id
		ORDER BY p.created_at, p.id, h.id`,
		o.UserID, o.Mode, id, pg.StartingAfter, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ps := []coinpulse.Portfolio{}
	for rows.Next() {
		var (
			p                    = coinpulse.Portfolio{Owner: o}
			realized             string
			createdAt, updatedAt int64
			syncedAt             sql.NullInt64
			hID                  sql.NullInt64
			coinID, sym, name    sql.NullString
			qty, cost, notes     sql.NullString
			hCreated, hUpdated   sql.NullInt64
		)
		err := rows.Scan(&p.ID, &p.Name, &p.Description, &realized, &createdAt, &updatedAt, &syncedAt, &p.Version,
			&hID, &coinID, &sym, &name, &qty, &cost, &notes, &hCreated, &hUpdated)
		if err != nil {
			return nil, err
		}
		if len(ps) == 0 || ps[len(ps)-1].ID != p.ID {
			if p.RealizedPL, err = parseDec(realized); err != nil {
				return nil, err
			}
			p.CreatedAt = fromMicros(createdAt)
			p.UpdatedAt = fromMicros(updatedAt)
			p.SyncedAt = fromNullMicros(syncedAt)
			p.Holdings = []coinpulse.Holding{}
			ps = append(ps, p)
		}
		if !hID.Valid {
			continue
		}
		h := coinpulse.Holding{
			ID: hID.Int64, PortfolioID: p.ID, CoinID: coinID.String, CoinSymbol: sym.String, CoinName: name.String,
			Notes: notes.String, CreatedAt: fromMicros(hCreated.Int64), UpdatedAt: fromMicros(hUpdated.Int64),
		}
		if h.Quantity, err = parseDec(qty.String); err != nil {
			return nil, err
		}
		if h.TotalCost, err = parseDec(cost.String); err != nil {
			return nil, err
		}
		last := &ps[len(ps)-1]
		last.Holdings = append(last.Holdings, h)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return ps, nil
}

func scanHolding(s scanner) (coinpulse.Holding, error) {
	var (
		h                    coinpulse.Holding
		qty, cost            string
		createdAt, updatedAt int64
	)
	err := s.Scan(&h.ID, &h.PortfolioID, &h.CoinID, &h.CoinSymbol, &h.CoinName, &qty, &cost, &h.Notes, &createdAt, &updatedAt)
	if err != nil {
		return h, err
	}
	if h.Quantity, err = parseDec(qty); err != nil {
		return h, err
	}
	if h.TotalCost, err = parseDec(cost); err != nil {
		return h, err
	}
	h.CreatedAt = fromMicros(createdAt)
	h.UpdatedAt = fromMicros(updatedAt)
	return h, nil
}

// UpdatePortfolio sets the fields of patch that are not nil and UpdatedAt
// (now, truncated to microseconds in UTC) on the owner's portfolio id, and
// returns it with its holdings. A portfolio the owner does not have is a
// RESOURCE_NOT_FOUND error.
func (db *DB) UpdatePortfolio(ctx context.Context, o coinpulse.Owner, id int64, patch coinpulse.PortfolioPatch, now time.Time) (*coinpulse.Portfolio, error) {
	var p *coinpulse.Portfolio
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE portfolios SET name = coalesce(?, name), description = coalesce(?, description), updated_at = ?, version = version + 1
			WHERE id = ? AND user_id = ? AND mode = ?`,
			patch.Name, patch.Description, micros(truncate(now)), id, o.UserID, o.Mode)
		if err != nil {
			return fmt.Errorf("sqlite: update portfolio: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("sqlite: update portfolio: %w", err)
		} else if n == 0 {
			return coinpulse.ErrPortfolioNotFound(id)
		}
		p, err = portfolioByID(ctx, tx, o, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// DeletePortfolio deletes the owner's portfolio id with its holdings,
// transactions and value history. A portfolio the owner does not have is a
// RESOURCE_NOT_FOUND error.
func (db *DB) DeletePortfolio(ctx context.Context, o coinpulse.Owner, id int64) error {
	res, err := db.db.ExecContext(ctx, `DELETE FROM portfolios WHERE id = ? AND user_id = ? AND mode = ?`, id, o.UserID, o.Mode)
	if err != nil {
		return fmt.Errorf("sqlite: delete portfolio: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: delete portfolio: %w", err)
	} else if n == 0 {
		return coinpulse.ErrPortfolioNotFound(id)
	}
	return nil
}

// Trade runs apply on the holding t names and stores what it returns, in
// one immediate transaction, which serialises it with every other write.
// The holding is t.HoldingID (which must be in t.PortfolioID when that is
// set), or else the holding of t.CoinID in t.PortfolioID; when the
// portfolio holds no such coin apply gets a Holding with ID 0 and zero
// amounts, and the holding it returns is inserted. The transaction gets
// the holding's id, CreatedAt the trade's time (t.At, read once the
// portfolio is locked) and, when apply left it zero, ExecutedAt that time; its realised P/L, if any, is added to the portfolio's,
// whose UpdatedAt becomes that time (times truncated to microseconds in UTC).
//
// A holding or portfolio the owner does not have is a RESOURCE_NOT_FOUND
// error; an error from apply is returned unchanged, and nothing is stored.
func (db *DB) Trade(ctx context.Context, o coinpulse.Owner, t coinpulse.Trade, apply coinpulse.TradeFunc) (coinpulse.Holding, coinpulse.Transaction, error) {
	var (
		held coinpulse.Holding
		rec  coinpulse.Transaction
	)
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		cur, err := db.tradeHolding(ctx, tx, o, t)
		if err != nil {
			return err
		}
		now := truncate(t.At(db.now)) // once the portfolio is ours: in the order trades apply
		h, txn, err := apply(cur)
		if err != nil {
			return err
		}
		if cur.ID != 0 { // see ErrTradeBeforeLatest
			dated := !txn.ExecutedAt.IsZero() // a date the client gave
			var latest sql.NullInt64
			err := tx.QueryRowContext(ctx, `SELECT max(executed_at) FROM portfolio_transactions WHERE holding_id = ? AND (? OR type = 'sell')`,
				cur.ID, txn.Type == coinpulse.Sell || !dated).Scan(&latest)
			if err != nil {
				return fmt.Errorf("sqlite: trade: read the holding's latest trade: %w", err)
			}
			switch {
			case !latest.Valid:
			case dated && micros(truncate(txn.ExecutedAt)) < latest.Int64:
				return coinpulse.ErrTradeBeforeLatest(txn.Type, truncate(txn.ExecutedAt), fromMicros(latest.Int64))
			case !dated && micros(now) < latest.Int64:
				txn.ExecutedAt = fromMicros(latest.Int64) // now is before a trade dated ahead: see ErrTradeBeforeLatest
			}
		}
		// What apply may not change.
		h.ID, h.PortfolioID, h.CoinID = cur.ID, cur.PortfolioID, cur.CoinID
		h.CreatedAt, h.UpdatedAt = cur.CreatedAt, now
		if h.ID == 0 {
			h.CreatedAt = now
			err = tx.QueryRowContext(ctx, `
				INSERT INTO holdings (portfolio_id, coin_id, coin_symbol, coin_name, quantity, total_cost, notes, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
				RETURNING id`,
				h.PortfolioID, h.CoinID, h.CoinSymbol, h.CoinName, dec(h.Quantity), dec(h.TotalCost), h.Notes,
				micros(h.CreatedAt), micros(h.UpdatedAt),
			).Scan(&h.ID)
		} else {
			_, err = tx.ExecContext(ctx, `
				UPDATE holdings SET coin_symbol = ?, coin_name = ?, quantity = ?, total_cost = ?, notes = ?, updated_at = ?
				WHERE id = ?`,
				h.CoinSymbol, h.CoinName, dec(h.Quantity), dec(h.TotalCost), h.Notes, micros(h.UpdatedAt), h.ID)
		}
		if err != nil {
			return fmt.Errorf("sqlite: trade: store holding: %w", err)
		}

		txn.PortfolioID, txn.HoldingID, txn.CoinID = h.PortfolioID, h.ID, h.CoinID
		if txn.CoinSymbol == "" {
			txn.CoinSymbol = h.CoinSymbol
		}
		if txn.ExecutedAt.IsZero() {
			txn.ExecutedAt = now
		}
		txn.ExecutedAt = truncate(txn.ExecutedAt)
		txn.CreatedAt = now
		err = tx.QueryRowContext(ctx, `
			INSERT INTO portfolio_transactions (portfolio_id, holding_id, coin_id, coin_symbol, type, quantity, price,
				total, realized_pl, notes, executed_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			RETURNING id`,
			txn.PortfolioID, txn.HoldingID, txn.CoinID, txn.CoinSymbol, txn.Type, dec(txn.Quantity), dec(txn.Price),
			dec(txn.Total), nullDec(txn.RealizedPL), txn.Notes, micros(txn.ExecutedAt), micros(txn.CreatedAt),
		).Scan(&txn.ID)
		if err != nil {
			return fmt.Errorf("sqlite: trade: store transaction: %w", err)
		}

		if txn.RealizedPL.Valid {
			var s string
			if err := tx.QueryRowContext(ctx, `SELECT realized_pl FROM portfolios WHERE id = ?`, h.PortfolioID).Scan(&s); err != nil {
				return fmt.Errorf("sqlite: trade: read realised P/L: %w", err)
			}
			total, err := parseDec(s)
			if err != nil {
				return fmt.Errorf("sqlite: trade: %w", err)
			}
			_, err = tx.ExecContext(ctx, `UPDATE portfolios SET realized_pl = ?, updated_at = ?, version = version + 1 WHERE id = ?`,
				dec(total.Add(txn.RealizedPL.Decimal)), micros(now), h.PortfolioID)
			if err != nil {
				return fmt.Errorf("sqlite: trade: update portfolio: %w", err)
			}
		} else {
			_, err = tx.ExecContext(ctx, `UPDATE portfolios SET updated_at = ?, version = version + 1 WHERE id = ?`, micros(now), h.PortfolioID)
			if err != nil {
				return fmt.Errorf("sqlite: trade: update portfolio: %w", err)
			}
		}
		held, rec = h, txn
		return nil
	})
	if err != nil {
		return coinpulse.Holding{}, coinpulse.Transaction{}, err
	}
	return held, rec, nil
}

// tradeHolding returns the holding t names as stored, or the empty holding
// a buy starts from.
func (db *DB) tradeHolding(ctx context.Context, tx *sql.Tx, o coinpulse.Owner, t coinpulse.Trade) (coinpulse.Holding, error) {
	if t.HoldingID != 0 {
		h, err := scanHolding(tx.QueryRowContext(ctx, `
			SELECT h.id, h.portfolio_id, h.coin_id, h.coin_symbol, h.coin_name, h.quantity, h.total_cost, h.notes,
				h.created_at, h.updated_at
			FROM holdings h JOIN portfolios p ON p.id = h.portfolio_id
			WHERE h.id = ? AND p.user_id = ? AND p.mode = ? AND (? = 0 OR p.id = ?)`,
			t.HoldingID, o.UserID, o.Mode, t.PortfolioID, t.PortfolioID))
		if errors.Is(err, sql.ErrNoRows) {
			return h, coinpulse.ErrHoldingNotFound(t.HoldingID)
		}
		if err != nil {
			return h, fmt.Errorf("sqlite: trade: read holding: %w", err)
		}
		return h, nil
	}
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM portfolios WHERE id = ? AND user_id = ? AND mode = ?`,
		t.PortfolioID, o.UserID, o.Mode).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return coinpulse.Holding{}, coinpulse.ErrPortfolioNotFound(t.PortfolioID)
	}
	if err != nil {
		return coinpulse.Holding{}, fmt.Errorf("sqlite: trade: read portfolio: %w", err)
	}
	h, err := scanHolding(tx.QueryRowContext(ctx, `SELECT `+holdingColumns+` FROM holdings WHERE portfolio_id = ? AND coin_id = ?`,
		t.PortfolioID, t.CoinID))
	if errors.Is(err, sql.ErrNoRows) {
		return coinpulse.Holding{PortfolioID: t.PortfolioID, CoinID: t.CoinID, CoinSymbol: t.CoinSymbol, CoinName: t.CoinName}, nil
	}
	if err != nil {
		return h, fmt.Errorf("sqlite: trade: read holding: %w", err)
	}
	return h, nil
}

// DeleteHolding deletes the owner's holding id; its transactions stay. A
// holding the owner does not have is a RESOURCE_NOT_FOUND error.
func (db *DB) DeleteHolding(ctx context.Context, o coinpulse.Owner, id int64) error {
	return db.Transact(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE portfolios SET version = version + 1, updated_at = ?
			WHERE id = (SELECT portfolio_id FROM holdings WHERE id = ?) AND user_id = ? AND mode = ?`,
			micros(truncate(db.now())), id, o.UserID, o.Mode)
		if err != nil {
			return fmt.Errorf("sqlite: delete holding: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("sqlite: delete holding: %w", err)
		} else if n == 0 {
			return coinpulse.ErrHoldingNotFound(id)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM holdings WHERE id = ?`, id); err != nil {
			return fmt.Errorf("sqlite: delete holding: %w", err)
		}
		return nil
	})
}

const txColumns = `id, portfolio_id, holding_id, coin_id, coin_symbol, type, quantity, price, total, realized_pl,
	notes, executed_at, created_at`

func scanTransaction(s scanner) (coinpulse.Transaction, error) {
	var (
		t                     coinpulse.Transaction
		qty, price, total     string
		realized              sql.NullString
		executedAt, createdAt int64
	)
	err := s.Scan(&t.ID, &t.PortfolioID, &t.HoldingID, &t.CoinID, &t.CoinSymbol, &t.Type, &qty, &price, &total,
		&realized, &t.Notes, &executedAt, &createdAt)
	if err != nil {
		return t, err
	}
	if t.Quantity, err = parseDec(qty); err != nil {
		return t, err
	}
	if t.Price, err = parseDec(price); err != nil {
		return t, err
	}
	if t.Total, err = parseDec(total); err != nil {
		return t, err
	}
	if t.RealizedPL, err = parseNullDec(realized); err != nil {
		return t, err
	}
	t.ExecutedAt = fromMicros(executedAt)
	t.CreatedAt = fromMicros(createdAt)
	return t, nil
}

// Transactions returns up to limit of the owner's portfolio's
// transactions, skipping offset, newest (by ExecutedAt, then ID) first,
// and how many it has in all. A negative offset counts as 0 and a negative
// limit as no limit. A portfolio the owner does not have is a
// RESOURCE_NOT_FOUND error.
func (db *DB) Transactions(ctx context.Context, o coinpulse.Owner, portfolioID int64, pg coinpulse.TxPage) ([]coinpulse.Transaction, int, error) {
	var (
		total  int
		cursor bool
	)
	err := db.db.QueryRowContext(ctx, `
		SELECT (SELECT count(*) FROM portfolio_transactions WHERE portfolio_id = p.id),
			EXISTS (SELECT 1 FROM portfolio_transactions WHERE id = ? AND portfolio_id = p.id)
		FROM portfolios p WHERE p.id = ? AND p.user_id = ? AND p.mode = ?`,
		pg.StartingAfter, portfolioID, o.UserID, o.Mode).Scan(&total, &cursor)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, coinpulse.ErrPortfolioNotFound(portfolioID)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: transactions: %w", err)
	}
	if pg.StartingAfter != 0 && !cursor {
		return nil, 0, coinpulse.ErrTxCursor(pg.StartingAfter)
	}
	offset, limit := max(pg.Offset, 0), pg.Limit
	if limit < 0 {
		limit = -1 // SQLite's no limit
	}
	txns := []coinpulse.Transaction{}
	if limit == 0 || pg.StartingAfter == 0 && offset >= total {
		return txns, total, nil
	}
	var rows *sql.Rows
	if pg.StartingAfter != 0 {
		// After the cursor's (executed_at, id) in the list's order: the
		// index on (portfolio_id, executed_at DESC, id DESC) serves it.
		rows, err = db.db.QueryContext(ctx, `
			SELECT `+txColumns+` FROM portfolio_transactions
			WHERE portfolio_id = ?1 AND (executed_at, id) <
				(SELECT executed_at, id FROM portfolio_transactions WHERE id = ?2 AND portfolio_id = ?1)
			ORDER BY executed_at DESC, id DESC
			LIMIT ?3`,
			portfolioID, pg.StartingAfter, limit)
	} else {
		rows, err = db.db.QueryContext(ctx, `
			SELECT `+txColumns+` FROM portfolio_transactions
			WHERE portfolio_id = ?
			ORDER BY executed_at DESC, id DESC
			LIMIT ? OFFSET ?`,
			portfolioID, limit, offset)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: transactions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		t, err := scanTransaction(rows)
		if err != nil {
			return nil, 0, fmt.Errorf("sqlite: transactions: %w", err)
		}
		txns = append(txns, t)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("sqlite: transactions: %w", err)
	}
	return txns, total, nil
}

// RecordValue stores v (its time truncated to microseconds) as a point of
// the owner's portfolio's value history, replacing a point at the same
// time, and sets the portfolio's SyncedAt to v.At (not its UpdatedAt). A
// portfolio the owner does not have is a RESOURCE_NOT_FOUND error. With
// version > 0, a portfolio whose version is no longer version is
// ErrPortfolioChanged (writers take turns: a trade in progress ends first).
func (db *DB) RecordValue(ctx context.Context, o coinpulse.Owner, portfolioID, version int64, v coinpulse.ValuePoint) error {
	at := micros(truncate(v.At))
	return db.writeTx(ctx, func(tx *sql.Tx) error {
		var now int64 // the version after this update
		err := tx.QueryRowContext(ctx, `UPDATE portfolios SET synced_at = ?, version = version + 1 WHERE id = ? AND user_id = ? AND mode = ? RETURNING version`,
			at, portfolioID, o.UserID, o.Mode).Scan(&now)
		if errors.Is(err, sql.ErrNoRows) {
			return coinpulse.ErrPortfolioNotFound(portfolioID)
		}
		if err != nil {
			return fmt.Errorf("sqlite: record value: %w", err)
		}
		if version > 0 && now-1 != version {
			return coinpulse.ErrPortfolioChanged // the transaction rolls back
		}
		_, err = tx.ExecContext(ctx, `
			INSERT INTO portfolio_values (portfolio_id, at, total_value, total_cost) VALUES (?, ?, ?, ?)
			ON CONFLICT (portfolio_id, at) DO UPDATE SET total_value = excluded.total_value, total_cost = excluded.total_cost`,
			portfolioID, at, dec(v.TotalValue), dec(v.TotalCost))
		if err != nil {
			return fmt.Errorf("sqlite: record value: %w", err)
		}
		return nil
	})
}

// ValueHistory returns the points of the owner's portfolio's value history
// at or after from, oldest first (an empty slice when there are none). A
// portfolio the owner does not have is a RESOURCE_NOT_FOUND error.
func (db *DB) ValueHistory(ctx context.Context, o coinpulse.Owner, portfolioID int64, from time.Time) ([]coinpulse.ValuePoint, error) {
	// One statement: no row means no such portfolio, a NULL point none.
	rows, err := db.db.QueryContext(ctx, `
		SELECT v.at, v.total_value, v.total_cost
		FROM portfolios p
		LEFT JOIN portfolio_values v ON v.portfolio_id = p.id AND v.at >= ?
		WHERE p.id = ? AND p.user_id = ? AND p.mode = ?
		ORDER BY v.at`,
		ceilMicros(from), portfolioID, o.UserID, o.Mode)
	if err != nil {
		return nil, fmt.Errorf("sqlite: value history: %w", err)
	}
	defer rows.Close()
	var (
		points []coinpulse.ValuePoint
		found  bool
	)
	for rows.Next() {
		found = true
		var (
			at          sql.NullInt64
			value, cost sql.NullString
		)
		if err := rows.Scan(&at, &value, &cost); err != nil {
			return nil, fmt.Errorf("sqlite: value history: %w", err)
		}
		if !at.Valid {
			continue
		}
		v := coinpulse.ValuePoint{At: fromMicros(at.Int64)}
		if v.TotalValue, err = parseDec(value.String); err != nil {
			return nil, fmt.Errorf("sqlite: value history: %w", err)
		}
		if v.TotalCost, err = parseDec(cost.String); err != nil {
			return nil, fmt.Errorf("sqlite: value history: %w", err)
		}
		points = append(points, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: value history: %w", err)
	}
	if !found {
		return nil, coinpulse.ErrPortfolioNotFound(portfolioID)
	}
	if points == nil {
		points = []coinpulse.ValuePoint{}
	}
	return points, nil
}

// PortfolioVersion returns the owner's portfolio's version. A portfolio the
// owner does not have is a RESOURCE_NOT_FOUND error.
func (db *DB) PortfolioVersion(ctx context.Context, o coinpulse.Owner, id int64) (int64, error) {
	var v int64
	err := db.db.QueryRowContext(ctx, `SELECT version FROM portfolios WHERE id = ? AND user_id = ? AND mode = ?`,
		id, o.UserID, o.Mode).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, coinpulse.ErrPortfolioNotFound(id)
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: portfolio version: %w", err)
	}
	return v, nil
}
