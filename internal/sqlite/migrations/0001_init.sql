-- Accounts, keys, the auth epoch, price history chunks and the key-value
-- store.
--
-- Times are INTEGER microseconds since the Unix epoch (UTC); booleans are
-- INTEGER 0 or 1. Every row a subscriber owns carries its mode.

CREATE TABLE users (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    email           TEXT    NOT NULL,
    password_hash   TEXT    NOT NULL DEFAULT '',
    tier            TEXT    NOT NULL DEFAULT 'free',
    tier_expires_at INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

-- E-mail addresses are unique regardless of case.
CREATE UNIQUE INDEX users_email_lower_key ON users (lower(email));

CREATE TABLE api_keys (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT    NOT NULL,
    mode         TEXT    NOT NULL CHECK (mode IN ('live', 'test')),
    hash         TEXT    NOT NULL UNIQUE,
    prefix       TEXT    NOT NULL,
    last4        TEXT    NOT NULL,
    perm_read    INTEGER NOT NULL CHECK (perm_read IN (0, 1)),
    perm_write   INTEGER NOT NULL CHECK (perm_write IN (0, 1)),
    expires_at   INTEGER,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
);

CREATE INDEX api_keys_user_id_idx ON api_keys (user_id);

-- A single-row counter bumped by every change that could make a cached
-- authentication wrong.
CREATE TABLE auth_epoch (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL
);

INSERT INTO auth_epoch (id, epoch) VALUES (1, 0);

-- Price history in chunks; see internal/histchunk for the blob format.
-- bucket_start is in Unix seconds. A rowid table, not WITHOUT ROWID: the
-- blobs (0.6 to 1.5 KiB) are far above the row size WITHOUT ROWID suits,
-- and with it the file came out twice as large and slower to write.
CREATE TABLE price_history (
    coin_id      TEXT    NOT NULL,
    interval     TEXT    NOT NULL CHECK (interval IN ('hourly', 'daily')),
    bucket_start INTEGER NOT NULL,
    data         BLOB    NOT NULL,
    UNIQUE (coin_id, interval, bucket_start)
);

CREATE TABLE kv (
    key        TEXT    PRIMARY KEY,
    value      BLOB    NOT NULL,
    updated_at INTEGER NOT NULL
);
