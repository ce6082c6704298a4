-- Metering: each key's usage per UTC day, for the per-key figures of
-- today and this month (calls, error rate, p50 and p95). See
-- internal/meter/rollup for how calls aggregate into these rows.

-- Each key's calls per UTC day (day is the day's start), written by
-- RecordCalls in the transaction that writes key_usage and usage_daily,
-- and kept for 400 days as usage_daily is: a batch drops the rows of its
-- users older than 400 days before its newest day. calls counts every
-- metered call of the key that day, counted or not (as key_usage does);
-- errors those answered with a status of 400 or above (4xx and 5xx); h00
-- to h39 the durations of the calls in the 40 latency buckets of
-- internal/meter/rollup. Counts are columns so that an upsert adds them in
-- SQL, atomically across nodes. key_id is not a foreign key: usage
-- outlives its key. Calls metered before this migration have no rows
-- here.
CREATE TABLE key_usage_daily (
    key_id    BIGINT      NOT NULL,
    day       TIMESTAMPTZ NOT NULL,
    user_id   BIGINT      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    calls     BIGINT      NOT NULL,
    errors    BIGINT      NOT NULL,
    h00       INTEGER     NOT NULL DEFAULT 0,
    h01       INTEGER     NOT NULL DEFAULT 0,
    h02       INTEGER     NOT NULL DEFAULT 0,
    h03       INTEGER     NOT NULL DEFAULT 0,
    h04       INTEGER     NOT NULL DEFAULT 0,
    h05       INTEGER     NOT NULL DEFAULT 0,
    h06       INTEGER     NOT NULL DEFAULT 0,
    h07       INTEGER     NOT NULL DEFAULT 0,
    h08       INTEGER     NOT NULL DEFAULT 0,
    h09       INTEGER     NOT NULL DEFAULT 0,
    h10       INTEGER     NOT NULL DEFAULT 0,
    h11       INTEGER     NOT NULL DEFAULT 0,
    h12       INTEGER     NOT NULL DEFAULT 0,
    h13       INTEGER     NOT NULL DEFAULT 0,
    h14       INTEGER     NOT NULL DEFAULT 0,
    h15       INTEGER     NOT NULL DEFAULT 0,
    h16       INTEGER     NOT NULL DEFAULT 0,
    h17       INTEGER     NOT NULL DEFAULT 0,
    h18       INTEGER     NOT NULL DEFAULT 0,
    h19       INTEGER     NOT NULL DEFAULT 0,
    h20       INTEGER     NOT NULL DEFAULT 0,
    h21       INTEGER     NOT NULL DEFAULT 0,
    h22       INTEGER     NOT NULL DEFAULT 0,
    h23       INTEGER     NOT NULL DEFAULT 0,
    h24       INTEGER     NOT NULL DEFAULT 0,
    h25       INTEGER     NOT NULL DEFAULT 0,
    h26       INTEGER     NOT NULL DEFAULT 0,
    h27       INTEGER     NOT NULL DEFAULT 0,
    h28       INTEGER     NOT NULL DEFAULT 0,
    h29       INTEGER     NOT NULL DEFAULT 0,
    h30       INTEGER     NOT NULL DEFAULT 0,
    h31       INTEGER     NOT NULL DEFAULT 0,
    h32       INTEGER     NOT NULL DEFAULT 0,
    h33       INTEGER     NOT NULL DEFAULT 0,
    h34       INTEGER     NOT NULL DEFAULT 0,
    h35       INTEGER     NOT NULL DEFAULT 0,
    h36       INTEGER     NOT NULL DEFAULT 0,
    h37       INTEGER     NOT NULL DEFAULT 0,
    h38       INTEGER     NOT NULL DEFAULT 0,
    h39       INTEGER     NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
);

-- Usage reads a user's month, RecordCalls prunes a user's old days.
CREATE INDEX key_usage_daily_user_id_idx ON key_usage_daily (user_id, day);
