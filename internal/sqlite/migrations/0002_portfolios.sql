-- Portfolios, their holdings, transactions and value history.
--
-- Times are INTEGER microseconds since the Unix epoch (UTC). Amounts are
-- exact decimals kept as TEXT, each the decimal's canonical string (plain
-- digits, no exponent, no trailing fractional zeros): quantities carry up
-- to 18 decimal places and products of two amounts exceed what INTEGER or
-- REAL hold. The store does all arithmetic on them in Go.

-- A portfolio belongs to an account in one mode; realized_pl is the sum of
-- the realised P/L of every sell made in it, deleted holdings included.
CREATE TABLE portfolios (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    mode        TEXT    NOT NULL CHECK (mode IN ('live', 'test')),
    name        TEXT    NOT NULL,
    description TEXT    NOT NULL DEFAULT '',
    realized_pl TEXT    NOT NULL DEFAULT '0',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    synced_at   INTEGER,
    -- Bumped by every change to the portfolio or its holdings: readers
    -- cache a priced portfolio under it.
    version     INTEGER NOT NULL DEFAULT 1
);

CREATE INDEX portfolios_user_id_mode_idx ON portfolios (user_id, mode);

-- A position in one coin, on the average-cost basis: total_cost is the
-- cost of the quantity still held.
CREATE TABLE holdings (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    portfolio_id INTEGER NOT NULL REFERENCES portfolios (id) ON DELETE CASCADE,
    coin_id      TEXT    NOT NULL,
    coin_symbol  TEXT    NOT NULL,
    coin_name    TEXT    NOT NULL,
    quantity     TEXT    NOT NULL,
    total_cost   TEXT    NOT NULL,
    notes        TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    UNIQUE (portfolio_id, coin_id)
);

-- Every buy and sell. holding_id is not a foreign key: transactions outlive
-- a deleted holding (and go with their portfolio). realized_pl is set on
-- sells only.
CREATE TABLE portfolio_transactions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    portfolio_id INTEGER NOT NULL REFERENCES portfolios (id) ON DELETE CASCADE,
    holding_id   INTEGER NOT NULL,
    coin_id      TEXT    NOT NULL,
    coin_symbol  TEXT    NOT NULL,
    type         TEXT    NOT NULL CHECK (type IN ('buy', 'sell')),
    quantity     TEXT    NOT NULL,
    price        TEXT    NOT NULL,
    total        TEXT    NOT NULL,
    realized_pl  TEXT,
    notes        TEXT    NOT NULL DEFAULT '',
    executed_at  INTEGER NOT NULL,
    created_at   INTEGER NOT NULL
);

-- Pages of a portfolio's transactions, newest first.
CREATE INDEX portfolio_transactions_portfolio_idx
    ON portfolio_transactions (portfolio_id, executed_at DESC, id DESC);

-- A portfolio's value as each sync recorded it, one point per time.
CREATE TABLE portfolio_values (
    portfolio_id INTEGER NOT NULL REFERENCES portfolios (id) ON DELETE CASCADE,
    at           INTEGER NOT NULL,
    total_value  TEXT    NOT NULL,
    total_cost   TEXT    NOT NULL,
    PRIMARY KEY (portfolio_id, at)
) WITHOUT ROWID;
