-- A trade dated in the past must not come before a later trade of its
-- holding where the order matters (coinpulse.ErrTradeBeforeLatest): Trade
-- reads a holding's latest dates by holding.
CREATE INDEX portfolio_transactions_holding_idx
    ON portfolio_transactions (holding_id, executed_at);
