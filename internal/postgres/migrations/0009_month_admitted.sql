-- The calls the rate limiter admitted to each user's plan, by calendar
-- month (the month's first instant, UTC), less those given back (5xx
-- answers). The meters add to it when a call is admitted, before its
-- answer, so a month seeded again after Redis lost its count also counts
-- the calls still being answered, which the metered calls (usage_daily)
-- do not yet. A user keeps the last two months only.
CREATE TABLE month_admitted (
    user_id BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    month   TIMESTAMPTZ NOT NULL,
    calls   BIGINT      NOT NULL,
    PRIMARY KEY (user_id, month)
);
