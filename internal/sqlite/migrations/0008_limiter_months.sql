-- The months the rate limiter has seeded, by user: a seed of a month
-- already marked is a seed again (Redis lost its count), which waits for
-- the meters even when no call of the month is written yet. A user keeps
-- the marks of the last two months only.
CREATE TABLE limiter_months (
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    month   INTEGER NOT NULL,
    PRIMARY KEY (user_id, month)
);
