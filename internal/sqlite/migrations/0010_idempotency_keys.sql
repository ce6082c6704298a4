-- Idempotency keys: a POST or PATCH sent with an Idempotency-Key header,
-- by user, mode and key. request names the request the key was first used
-- with, digest is the hex SHA-256 of its method, path, query and body, and
-- claim a random token of the request that holds the key. status is 0
-- while that request is in progress (until lease_until) and has applied
-- nothing, -1 once its write is committed (in the write's transaction),
-- then its answer's status, with the answer's body. Keys are kept 24
-- hours.
-- Times are INTEGER microseconds since the Unix epoch (UTC).
CREATE TABLE idempotency_keys (
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    mode        TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    request     TEXT    NOT NULL,
    digest      TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    claim       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    lease_until INTEGER NOT NULL,
    status      INTEGER NOT NULL DEFAULT 0,
    body        BLOB,
    PRIMARY KEY (user_id, mode, key)
);

CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);
