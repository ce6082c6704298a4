-- The calls the rate limiter admitted to each user's plan, by calendar
-- month (the month's first instant, UTC), less those given back (5xx
-- answers). The meters add to calls when a call is admitted, before its
-- answer, so a month seeded again after Redis lost its count also counts
-- the calls still being answered, which the metered calls (usage_daily)
-- do not yet. metered is the month's counted calls already metered when
-- the row was made: the calls of a month begun before the meters counted
-- admissions (0 otherwise, since a call's admission is written before the
-- call). A user keeps the last two months only.
CREATE TABLE month_admitted (
    user_id BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    month   TIMESTAMPTZ NOT NULL,
    calls   BIGINT      NOT NULL,
    metered BIGINT      NOT NULL,
    PRIMARY KEY (user_id, month)
);
