-- Metering: each account's recent calls, per-key totals and daily usage.
--
-- Times are INTEGER microseconds since the Unix epoch (UTC); booleans are
-- INTEGER 0 or 1. See internal/meter/rollup for how calls aggregate into
-- these rows.

-- Each account's most recent calls: RecordCalls keeps the 50 newest (by
-- id) of every account it writes to. key_id is not a foreign key: usage
-- outlives its key.
CREATE TABLE api_calls (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key_id      INTEGER NOT NULL,
    mode        TEXT    NOT NULL CHECK (mode IN ('live', 'test')),
    at          INTEGER NOT NULL,
    method      TEXT    NOT NULL,
    route       TEXT    NOT NULL,
    status      INTEGER NOT NULL,
    duration_us INTEGER NOT NULL,
    request_id  TEXT    NOT NULL,
    counted     INTEGER NOT NULL CHECK (counted IN (0, 1))
);

CREATE INDEX api_calls_user_id_idx ON api_calls (user_id, id DESC);

-- Every metered call of each key, counted or not.
CREATE TABLE key_usage (
    key_id    INTEGER PRIMARY KEY,
    user_id   INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    calls     INTEGER NOT NULL,
    last_call INTEGER NOT NULL
);

CREATE INDEX key_usage_user_id_idx ON key_usage (user_id, key_id);

-- Each account's usage per UTC day (day is the day's start), kept for 400
-- days: calls counts the calls counted against the allowance, h00 to h39
-- the durations of all calls in the 40 latency buckets of
-- internal/meter/rollup (bucket i up to 50 us x 2^(i/2), h39 the rest).
-- Counts are columns so that an upsert adds them in SQL.
CREATE TABLE usage_daily (
    user_id   INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    day       INTEGER NOT NULL,
    calls     INTEGER NOT NULL,
    h00       INTEGER NOT NULL DEFAULT 0,
    h01       INTEGER NOT NULL DEFAULT 0,
    h02       INTEGER NOT NULL DEFAULT 0,
    h03       INTEGER NOT NULL DEFAULT 0,
    h04       INTEGER NOT NULL DEFAULT 0,
    h05       INTEGER NOT NULL DEFAULT 0,
    h06       INTEGER NOT NULL DEFAULT 0,
    h07       INTEGER NOT NULL DEFAULT 0,
    h08       INTEGER NOT NULL DEFAULT 0,
    h09       INTEGER NOT NULL DEFAULT 0,
    h10       INTEGER NOT NULL DEFAULT 0,
    h11       INTEGER NOT NULL DEFAULT 0,
    h12       INTEGER NOT NULL DEFAULT 0,
    h13       INTEGER NOT NULL DEFAULT 0,
    h14       INTEGER NOT NULL DEFAULT 0,
    h15       INTEGER NOT NULL DEFAULT 0,
    h16       INTEGER NOT NULL DEFAULT 0,
    h17       INTEGER NOT NULL DEFAULT 0,
    h18       INTEGER NOT NULL DEFAULT 0,
    h19       INTEGER NOT NULL DEFAULT 0,
    h20       INTEGER NOT NULL DEFAULT 0,
    h21       INTEGER NOT NULL DEFAULT 0,
    h22       INTEGER NOT NULL DEFAULT 0,
    h23       INTEGER NOT NULL DEFAULT 0,
    h24       INTEGER NOT NULL DEFAULT 0,
    h25       INTEGER NOT NULL DEFAULT 0,
    h26       INTEGER NOT NULL DEFAULT 0,
    h27       INTEGER NOT NULL DEFAULT 0,
    h28       INTEGER NOT NULL DEFAULT 0,
    h29       INTEGER NOT NULL DEFAULT 0,
    h30       INTEGER NOT NULL DEFAULT 0,
    h31       INTEGER NOT NULL DEFAULT 0,
    h32       INTEGER NOT NULL DEFAULT 0,
    h33       INTEGER NOT NULL DEFAULT 0,
    h34       INTEGER NOT NULL DEFAULT 0,
    h35       INTEGER NOT NULL DEFAULT 0,
    h36       INTEGER NOT NULL DEFAULT 0,
    h37       INTEGER NOT NULL DEFAULT 0,
    h38       INTEGER NOT NULL DEFAULT 0,
    h39       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, day)
) WITHOUT ROWID;
