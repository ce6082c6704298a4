package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"coinpulse"
)

// Amounts are NUMERIC. They are sent as the decimal's String() (pgx sends
// Go strings in text format) and read back as text (::text in the SELECT),
// never through a float.

// dec returns d as sent.
func dec(d decimal.Decimal) string { return d.String() }

// nullDec returns d as sent, or nil for NULL.
func nullDec(d decimal.NullDecimal) any {
	if !d.Valid {
		return nil
	}
	return d.Decimal.String()
}

// parseDec returns an amount read as text.
func parseDec(s string) (decimal.Decimal, error) {
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("stored amount %q: %w", s, err)
	}
	return d, nil
}

// parseNullDec returns a nullable amount read as text.
func parseNullDec(s *string) (decimal.NullDecimal, error) {
	if s == nil {
		return decimal.NullDecimal{}, nil
	}
	d, err := parseDec(*s)
	return decimal.NewNullDecimal(d), err
}

// ceilMicro is t rounded up to whole microseconds: the first stored time at
// or after t.
func ceilMicro(t time.Time) time.Time {
	c := truncate(t)
	if c.Before(t) {
		c = c.Add(time.Microsecond)
	}
	return c
}

// querier is the pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// CreatePortfolio inserts p for p.Owner and sets its ID, CreatedAt (kept
// when set, else now) and UpdatedAt (= CreatedAt), truncated to
// microseconds in UTC; RealizedPL becomes 0, SyncedAt nil and Holdings
// empty. With max >= 0 it locks the user's row (FOR NO KEY UPDATE, which
// leaves foreign-key checks alone), counts the owner's portfolios and,
// when there are already max, fails with PORTFOLIO_LIMIT_REACHED and
// inserts nothing. An unknown mode is a VALIDATION_ERROR, an unknown user a
// RESOURCE_NOT_FOUND error.
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
	return db.writeTx(ctx, func(tx pgx.Tx) error {
		q := `SELECT 1 FROM users WHERE id = $1`
		if max >= 0 {
			q += ` FOR NO KEY UPDATE`
		}
		var one int
		err := tx.QueryRow(ctx, q, p.Owner.UserID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return coinpulse.ErrUserNotFound()
		}
		if err != nil {
			return fmt.Errorf("postgres: create portfolio: %w", err)
		}
		if max >= 0 {
			var n int
			err := tx.QueryRow(ctx, `SELECT count(*) FROM portfolios WHERE user_id = $1 AND mode = $2`,
				p.Owner.UserID, p.Owner.Mode).Scan(&n)
			if err != nil {
				return fmt.Errorf("postgres: create portfolio: count portfolios: %w", err)
			}
			if n >= max {
				return coinpulse.ErrPortfolioLimit(max)
			}
		}
		err = tx.QueryRow(ctx, `
			INSERT INTO portfolios (user_id, mode, name, description, realized_pl, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			RETURNING id, version`,
			p.Owner.UserID, p.Owner.Mode, p.Name, p.Description, dec(p.RealizedPL), p.CreatedAt, p.UpdatedAt,
		).Scan(&p.ID, &p.Version)
		if err != nil {
			return fmt.Errorf("postgres: create portfolio: %w", err)
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
	err := db.pool.QueryRow(ctx, `
		SELECT count(*), EXISTS (SELECT 1 FROM portfolios WHERE id = $1 AND user_id = $2 AND mode = $3)
		FROM portfolios WHERE user_id = $2 AND mode = $3`,
		pg.StartingAfter, o.UserID, o.Mode).Scan(&total, &cursor)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: portfolios: %w", err)
	}
	if pg.StartingAfter != 0 && !cursor {
		return nil, 0, coinpulse.ErrPortfolioCursor(pg.StartingAfter)
	}
	if pg.Limit == 0 {
		return []coinpulse.Portfolio{}, total, nil
	}
	ps, err := readPortfolios(ctx, db.pool, o, 0, pg)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: portfolios: %w", err)
	}
	return ps, total, nil
}

// Portfolio returns the owner's portfolio id with its holdings, oldest
// first, or a RESOURCE_NOT_FOUND error when the owner has no such
// portfolio.
func (db *DB) Portfolio(ctx context.Context, o coinpulse.Owner, id int64) (*coinpulse.Portfolio, error) {
	return portfolioByID(ctx, db.pool, o, id)
}

// portfolioByID is Portfolio on q.
func portfolioByID(ctx context.Context, q querier, o coinpulse.Owner, id int64) (*coinpulse.Portfolio, error) {
	ps, err := readPortfolios(ctx, q, o, id, coinpulse.AllPortfolios)
	if err != nil {
		return nil, fmt.Errorf("postgres: portfolio %d: %w", id, err)
	}
	if len(ps) == 0 {
		return nil, coinpulse.ErrPortfolioNotFound(id)
	}
	return &ps[0], nil
}

// readPortfolios returns the owner's portfolios pg selects (only portfolio
// id when id is not 0) with their holdings, by one query that joins the
// two; pg.StartingAfter names one of the owner's portfolios.
func readPortfolios(ctx context.Context, q querier, o coinpulse.Owner, id int64, pg coinpulse.PortfolioPage) ([]coinpulse.Portfolio, error) {
	var lim *int // NULL: no limit
	if pg.Limit >= 0 {
		lim = &pg.Limit
	}
	rows, err := q.Query(ctx, `
		SELECT p.id, p.name, p.description, p.realized_pl::text, p.created_at, p.updated_at, p.synced_at, p.version,
			h.id, h.coin_id, h.coin_symbol, h.coin_name, h.quantity::text, h.total_cost::text, h.notes,
			h.created_at, h.updated_at
		FROM (
			SELECT * FROM portfolios
			WHERE user_id = $1 AND mode = $2 AND ($3::bigint = 0 OR id = $3)
				AND ($4::bigint = 0 OR (created_at, id) > (SELECT created_at, id FROM portfolios WHERE id = $4))
			ORDER BY created_at, id
			LIMIT $5
		) p
		LEFT JOIN holdings h ON h.portfolio_id = p.id
		ORDER BY p.created_at, p.id, h.id`,
		o.UserID, o.Mode, id, pg.StartingAfter, lim)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ps := []coinpulse.Portfolio{}
	for rows.Next() {
		var (
			p                  = coinpulse.Portfolio{Owner: o}
			realized           string
			hID                *int64
			coinID, sym, name  *string
			qty, cost, notes   *string
			hCreated, hUpdated *time.Time
		)
		err := rows.Scan(&p.ID, &p.Name, &p.Description, &realized, &p.CreatedAt, &p.UpdatedAt, &p.SyncedAt, &p.Version,
			&hID, &coinID, &sym, &name, &qty, &cost, &notes, &hCreated, &hUpdated)
		if err != nil {
			return nil, err
		}
		if len(ps) == 0 || ps[len(ps)-1].ID != p.ID {
			if p.RealizedPL, err = parseDec(realized); err != nil {
				return nil, err
			}
			p.CreatedAt = p.CreatedAt.UTC()
			p.UpdatedAt = p.UpdatedAt.UTC()
			p.SyncedAt = utcPtr(p.SyncedAt)
			p.Holdings = []coinpulse.Holding{}
			ps = append(ps, p)
		}
		if hID == nil {
			continue
		}
		h := coinpulse.Holding{
			ID: *hID, PortfolioID: p.ID, CoinID: *coinID, CoinSymbol: *sym, CoinName: *name,
			Notes: *notes, CreatedAt: hCreated.UTC(), UpdatedAt: hUpdated.UTC(),
		}
		if h.Quantity, err = parseDec(*qty); err != nil {
			return nil, err
		}
		if h.TotalCost, err = parseDec(*cost); err != nil {
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

const holdingColumns = `id, portfolio_id, coin_id, coin_symbol, coin_name, quantity::text, total_cost::text, notes,
	created_at, updated_at`

func scanHolding(row pgx.Row) (coinpulse.Holding, error) {
	var (
		h         coinpulse.Holding
		qty, cost string
	)
	err := row.Scan(&h.ID, &h.PortfolioID, &h.CoinID, &h.CoinSymbol, &h.CoinName, &qty, &cost, &h.Notes, &h.CreatedAt, &h.UpdatedAt)
	if err != nil {
		return h, err
	}
	if h.Quantity, err = parseDec(qty); err != nil {
		return h, err
	}
	if h.TotalCost, err = parseDec(cost); err != nil {
		return h, err
	}
	h.CreatedAt = h.CreatedAt.UTC()
	h.UpdatedAt = h.UpdatedAt.UTC()
	return h, nil
}

// UpdatePortfolio sets the fields of patch that are not nil and UpdatedAt
// (now, truncated to microseconds in UTC) on the owner's portfolio id, and
// returns it with its holdings. A portfolio the owner does not have is a
// RESOURCE_NOT_FOUND error.
func (db *DB) UpdatePortfolio(ctx context.Context, o coinpulse.Owner, id int64, patch coinpulse.PortfolioPatch, now time.Time) (*coinpulse.Portfolio, error) {
	var p *coinpulse.Portfolio
	err := db.writeTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE portfolios SET name = coalesce($1, name), description = coalesce($2, description), updated_at = $3, version = version + 1
			WHERE id = $4 AND user_id = $5 AND mode = $6`,
			patch.Name, patch.Description, truncate(now), id, o.UserID, o.Mode)
		if err != nil {
			return fmt.Errorf("postgres: update portfolio: %w", err)
		}
		if tag.RowsAffected() == 0 {
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
	tag, err := db.pool.Exec(ctx, `DELETE FROM portfolios WHERE id = $1 AND user_id = $2 AND mode = $3`, id, o.UserID, o.Mode)
	if err != nil {
		return fmt.Errorf("postgres: delete portfolio: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return coinpulse.ErrPortfolioNotFound(id)
	}
	return nil
}

// Trade runs apply on the holding t names and stores what it returns, in
// one transaction that locks the portfolio's row and then the holding's
// (FOR UPDATE, always in that order), so trades on a portfolio serialise
// and two first buys of a coin cannot both insert it. The holding is
// t.HoldingID (which must be in t.PortfolioID when that is set), or else
// the holding of t.CoinID in t.PortfolioID; when the portfolio holds no
// such coin apply gets a Holding with ID 0 and zero amounts, and the
// holding it returns is inserted. The transaction gets the holding's id,
// CreatedAt the trade's time (t.At, read once the portfolio is locked)
// and, when apply left it zero, ExecutedAt that time; its
// realised P/L, if any, is added to the portfolio's, whose UpdatedAt
// becomes that time (times truncated to microseconds in UTC).
//
// A holding or portfolio the owner does not have is a RESOURCE_NOT_FOUND
// error; an error from apply is returned unchanged, and nothing is stored.
func (db *DB) Trade(ctx context.Context, o coinpulse.Owner, t coinpulse.Trade, apply coinpulse.TradeFunc) (coinpulse.Holding, coinpulse.Transaction, error) {
	var (
		held coinpulse.Holding
		rec  coinpulse.Transaction
	)
	err := db.writeTx(ctx, func(tx pgx.Tx) error {
		cur, err := lockHolding(ctx, tx, o, t)
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
			var latest *time.Time
			err := tx.QueryRow(ctx, `SELECT max(executed_at) FROM portfolio_transactions WHERE holding_id = $1 AND ($2 OR type = 'sell')`,
				cur.ID, txn.Type == coinpulse.Sell || !dated).Scan(&latest)
			if err != nil {
				return fmt.Errorf("postgres: trade: read the holding's latest trade: %w", err)
			}
			switch {
			case latest == nil:
			case dated && truncate(txn.ExecutedAt).Before(*latest):
				return coinpulse.ErrTradeBeforeLatest(txn.Type, truncate(txn.ExecutedAt), *latest)
			case !dated && now.Before(*latest):
				txn.ExecutedAt = latest.UTC() // now is before a trade dated ahead: see ErrTradeBeforeLatest
			}
		}
		// What apply may not change.
		h.ID, h.PortfolioID, h.CoinID = cur.ID, cur.PortfolioID, cur.CoinID
		h.CreatedAt, h.UpdatedAt = cur.CreatedAt, now
		if h.ID == 0 {
			h.CreatedAt = now
			err = tx.QueryRow(ctx, `
				INSERT INTO holdings (portfolio_id, coin_id, coin_symbol, coin_name, quantity, total_cost, notes, created_at, updated_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
				RETURNING id`,
				h.PortfolioID, h.CoinID, h.CoinSymbol, h.CoinName, dec(h.Quantity), dec(h.TotalCost), h.Notes,
				h.CreatedAt, h.UpdatedAt,
			).Scan(&h.ID)
		} else {
			_, err = tx.Exec(ctx, `
				UPDATE holdings SET coin_symbol = $1, coin_name = $2, quantity = $3, total_cost = $4, notes = $5, updated_at = $6
				WHERE id = $7`,
				h.CoinSymbol, h.CoinName, dec(h.Quantity), dec(h.TotalCost), h.Notes, h.UpdatedAt, h.ID)
		}
		if err != nil {
			return fmt.Errorf("postgres: trade: store holding: %w", err)
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
		err = tx.QueryRow(ctx, `
			INSERT INTO portfolio_transactions (portfolio_id, holding_id, coin_id, coin_symbol, type, quantity, price,
				total, realized_pl, notes, executed_at, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
			RETURNING id`,
			txn.PortfolioID, txn.HoldingID, txn.CoinID, txn.CoinSymbol, txn.Type, dec(txn.Quantity), dec(txn.Price),
			dec(txn.Total), nullDec(txn.RealizedPL), txn.Notes, txn.ExecutedAt, txn.CreatedAt,
		).Scan(&txn.ID)
		if err != nil {
			return fmt.Errorf("postgres: trade: store transaction: %w", err)
		}

		_, err = tx.Exec(ctx, `
			UPDATE portfolios SET realized_pl = realized_pl + coalesce($1::numeric, 0), updated_at = $2, version = version + 1
			WHERE id = $3`,
			nullDec(txn.RealizedPL), now, h.PortfolioID)
		if err != nil {
			return fmt.Errorf("postgres: trade: update portfolio: %w", err)
		}
		held, rec = h, txn
		return nil
	})
	if err != nil {
		return coinpulse.Holding{}, coinpulse.Transaction{}, err
	}
	return held, rec, nil
}

// lockHolding locks the row of the portfolio t names and then that of the
// holding, and returns the holding as stored, or the empty holding a buy
// starts from.
func lockHolding(ctx context.Context, tx pgx.Tx, o coinpulse.Owner, t coinpulse.Trade) (coinpulse.Holding, error) {
	var (
		h   coinpulse.Holding
		err error
	)
	if t.HoldingID != 0 {
		var portfolioID int64
		err = tx.QueryRow(ctx, `
			SELECT p.id FROM portfolios p JOIN holdings h ON h.portfolio_id = p.id
			WHERE h.id = $1 AND p.user_id = $2 AND p.mode = $3 AND ($4::bigint = 0 OR p.id = $4)
			FOR UPDATE OF p`,
			t.HoldingID, o.UserID, o.Mode, t.PortfolioID).Scan(&portfolioID)
		if err == nil {
			h, err = scanHolding(tx.QueryRow(ctx, `SELECT `+holdingColumns+` FROM holdings WHERE id = $1 AND portfolio_id = $2 FOR UPDATE`,
				t.HoldingID, portfolioID))
		}
		if errors.Is(err, pgx.ErrNoRows) { // none, or deleted while we waited
			return h, coinpulse.ErrHoldingNotFound(t.HoldingID)
		}
		if err != nil {
			return h, fmt.Errorf("postgres: trade: lock holding: %w", err)
		}
		return h, nil
	}
	var one int
	err = tx.QueryRow(ctx, `SELECT 1 FROM portfolios WHERE id = $1 AND user_id = $2 AND mode = $3 FOR UPDATE`,
		t.PortfolioID, o.UserID, o.Mode).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, coinpulse.ErrPortfolioNotFound(t.PortfolioID)
	}
	if err != nil {
		return h, fmt.Errorf("postgres: trade: lock portfolio: %w", err)
	}
	h, err = scanHolding(tx.QueryRow(ctx, `SELECT `+holdingColumns+` FROM holdings WHERE portfolio_id = $1 AND coin_id = $2 FOR UPDATE`,
		t.PortfolioID, t.CoinID))
	if errors.Is(err, pgx.ErrNoRows) {
		return coinpulse.Holding{PortfolioID: t.PortfolioID, CoinID: t.CoinID, CoinSymbol: t.CoinSymbol, CoinName: t.CoinName}, nil
	}
	if err != nil {
		return h, fmt.Errorf("postgres: trade: lock holding: %w", err)
	}
	return h, nil
}

// DeleteHolding deletes the owner's holding id; its transactions stay. A
// holding the owner does not have is a RESOURCE_NOT_FOUND error.
func (db *DB) DeleteHolding(ctx context.Context, o coinpulse.Owner, id int64) error {
	// The portfolio's row first, then the holding's, as Trade locks
	// them: the other order deadlocks against a trade on the holding.
	return db.Transact(ctx, func(tx pgx.Tx) error {
		var portfolioID int64
		err := tx.QueryRow(ctx, `
			SELECT p.id FROM portfolios p JOIN holdings h ON h.portfolio_id = p.id
			WHERE h.id = $1 AND p.user_id = $2 AND p.mode = $3
			FOR UPDATE OF p`,
			id, o.UserID, o.Mode).Scan(&portfolioID)
		if errors.Is(err, pgx.ErrNoRows) {
			return coinpulse.ErrHoldingNotFound(id)
		}
		if err != nil {
			return fmt.Errorf("postgres: delete holding: lock portfolio: %w", err)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM holdings WHERE id = $1 AND portfolio_id = $2`, id, portfolioID)
		if err != nil {
			return fmt.Errorf("postgres: delete holding: %w", err)
		}
		if tag.RowsAffected() == 0 { // deleted while we waited
			return coinpulse.ErrHoldingNotFound(id)
		}
		_, err = tx.Exec(ctx, `UPDATE portfolios SET version = version + 1, updated_at = $2 WHERE id = $1`, portfolioID, truncate(db.now()))
		if err != nil {
			return fmt.Errorf("postgres: delete holding: %w", err)
		}
		return nil
	})
}

const txColumns = `id, portfolio_id, holding_id, coin_id, coin_symbol, type, quantity::text, price::text, total::text,
	realized_pl::text, notes, executed_at, created_at`

func scanTransaction(row pgx.Row) (coinpulse.Transaction, error) {
	var (
		t                 coinpulse.Transaction
		qty, price, total string
		realized          *string
	)
	err := row.Scan(&t.ID, &t.PortfolioID, &t.HoldingID, &t.CoinID, &t.CoinSymbol, &t.Type, &qty, &price, &total,
		&realized, &t.Notes, &t.ExecutedAt, &t.CreatedAt)
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
	t.ExecutedAt = t.ExecutedAt.UTC()
	t.CreatedAt = t.CreatedAt.UTC()
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
	err := db.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM portfolio_transactions WHERE portfolio_id = p.id),
			EXISTS (SELECT 1 FROM portfolio_transactions WHERE id = $1 AND portfolio_id = p.id)
		FROM portfolios p WHERE p.id = $2 AND p.user_id = $3 AND p.mode = $4`,
		pg.StartingAfter, portfolioID, o.UserID, o.Mode).Scan(&total, &cursor)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, coinpulse.ErrPortfolioNotFound(portfolioID)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: transactions: %w", err)
	}
	if pg.StartingAfter != 0 && !cursor {
		return nil, 0, coinpulse.ErrTxCursor(pg.StartingAfter)
	}
	offset := max(pg.Offset, 0)
	var lim *int // NULL: no limit
	if pg.Limit >= 0 {
		lim = &pg.Limit
	}
	txns := []coinpulse.Transaction{}
	if pg.Limit == 0 || pg.StartingAfter == 0 && offset >= total {
		return txns, total, nil
	}
	var rows pgx.Rows
	if pg.StartingAfter != 0 {
		// After the cursor's (executed_at, id) in the list's order: the
		// index on (portfolio_id, executed_at DESC, id DESC) serves it.
		rows, err = db.pool.Query(ctx, `
			SELECT `+txColumns+` FROM portfolio_transactions
			WHERE portfolio_id = $1 AND (executed_at, id) <
				(SELECT executed_at, id FROM portfolio_transactions WHERE id = $2 AND portfolio_id = $1)
			ORDER BY executed_at DESC, id DESC
			LIMIT $3`,
			portfolioID, pg.StartingAfter, lim)
	} else {
		rows, err = db.pool.Query(ctx, `
			SELECT `+txColumns+` FROM portfolio_transactions
			WHERE portfolio_id = $1
			ORDER BY executed_at DESC, id DESC
			LIMIT $2 OFFSET $3`,
			portfolioID, lim, offset)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: transactions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		t, err := scanTransaction(rows)
		if err != nil {
			return nil, 0, fmt.Errorf("postgres: transactions: %w", err)
		}
		txns = append(txns, t)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("postgres: transactions: %w", err)
	}
	return txns, total, nil
}

// RecordValue stores v (its time truncated to microseconds) as a point of
// the owner's portfolio's value history, replacing a point at the same
// time, and sets the portfolio's SyncedAt to v.At (not its UpdatedAt). A
// portfolio the owner does not have is a RESOURCE_NOT_FOUND error. With
// version > 0, a portfolio whose version is no longer version (the UPDATE
// waits for a trade holding its row, then sees its version) is
// ErrPortfolioChanged.
func (db *DB) RecordValue(ctx context.Context, o coinpulse.Owner, portfolioID, version int64, v coinpulse.ValuePoint) error {
	at := truncate(v.At)
	return db.writeTx(ctx, func(tx pgx.Tx) error {
		var now int64 // the version after this update, of the row as last committed
		err := tx.QueryRow(ctx, `UPDATE portfolios SET synced_at = $1, version = version + 1 WHERE id = $2 AND user_id = $3 AND mode = $4 RETURNING version`,
			at, portfolioID, o.UserID, o.Mode).Scan(&now)
		if errors.Is(err, pgx.ErrNoRows) {
			return coinpulse.ErrPortfolioNotFound(portfolioID)
		}
		if err != nil {
			return fmt.Errorf("postgres: record value: %w", err)
		}
		if version > 0 && now-1 != version {
			return coinpulse.ErrPortfolioChanged // the transaction rolls back
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO portfolio_values (portfolio_id, at, total_value, total_cost) VALUES ($1, $2, $3, $4)
			ON CONFLICT (portfolio_id, at) DO UPDATE SET total_value = excluded.total_value, total_cost = excluded.total_cost`,
			portfolioID, at, dec(v.TotalValue), dec(v.TotalCost))
		if err != nil {
			return fmt.Errorf("postgres: record value: %w", err)
		}
		return nil
	})
}

// ValueHistory returns the points of the owner's portfolio's value history
// at or after from, oldest first (an empty slice when there are none). A
// portfolio the owner does not have is a RESOURCE_NOT_FOUND error.
func (db *DB) ValueHistory(ctx context.Context, o coinpulse.Owner, portfolioID int64, from time.Time) ([]coinpulse.ValuePoint, error) {
	// One statement: no row means no such portfolio, a NULL point none.
	rows, err := db.pool.Query(ctx, `
		SELECT v.at, v.total_value::text, v.total_cost::text
		FROM portfolios p
		LEFT JOIN portfolio_values v ON v.portfolio_id = p.id AND v.at >= $1
		WHERE p.id = $2 AND p.user_id = $3 AND p.mode = $4
		ORDER BY v.at`,
		ceilMicro(from), portfolioID, o.UserID, o.Mode)
	if err != nil {
		return nil, fmt.Errorf("postgres: value history: %w", err)
	}
	defer rows.Close()
	var (
		points []coinpulse.ValuePoint
		found  bool
	)
	for rows.Next() {
		found = true
		var (
			at          *time.Time
			value, cost *string
		)
		if err := rows.Scan(&at, &value, &cost); err != nil {
			return nil, fmt.Errorf("postgres: value history: %w", err)
		}
		if at == nil {
			continue
		}
		v := coinpulse.ValuePoint{At: at.UTC()}
		if v.TotalValue, err = parseDec(*value); err != nil {
			return nil, fmt.Errorf("postgres: value history: %w", err)
		}
		if v.TotalCost, err = parseDec(*cost); err != nil {
			return nil, fmt.Errorf("postgres: value history: %w", err)
		}
		points = append(points, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: value history: %w", err)
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
	err := db.pool.QueryRow(ctx, `SELECT version FROM portfolios WHERE id = $1 AND user_id = $2 AND mode = $3`,
		id, o.UserID, o.Mode).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, coinpulse.ErrPortfolioNotFound(id)
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: portfolio version: %w", err)
	}
	return v, nil
}
