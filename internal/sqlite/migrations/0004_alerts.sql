-- Price alerts, webhook endpoints and the outbox of their deliveries.
--
-- Times are INTEGER microseconds since the Unix epoch (UTC); booleans are
-- INTEGER 0 or 1; amounts are exact decimals kept as TEXT, each the
-- decimal's canonical string (see 0002_portfolios.sql).

-- A single-row counter that numbers armings: every creation and re-enable
-- of an alert takes the next value inside its write transaction, so an
-- arming's number is never given again, even after its alert is deleted.
CREATE TABLE alert_arming (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);

INSERT INTO alert_arming (id, seq) VALUES (1, 0);

-- An alert belongs to an account in one mode. armed_seq names its current
-- arming; triggered_at and triggered_price are set by that arming's firing,
-- and email_status and email_error describe the firing's e-mail.
CREATE TABLE alerts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    mode            TEXT    NOT NULL CHECK (mode IN ('live', 'test')),
    coin_id         TEXT    NOT NULL,
    coin_symbol     TEXT    NOT NULL DEFAULT '',
    target_price    TEXT    NOT NULL,
    condition       TEXT    NOT NULL CHECK (condition IN ('above', 'below')),
    notify_email    INTEGER NOT NULL CHECK (notify_email IN (0, 1)),
    is_active       INTEGER NOT NULL CHECK (is_active IN (0, 1)),
    armed_seq       INTEGER NOT NULL UNIQUE,
    armed_at        INTEGER NOT NULL,
    triggered_at    INTEGER,
    triggered_price TEXT,
    email_status    TEXT    NOT NULL DEFAULT ''
        CHECK (email_status IN ('', 'pending', 'sent', 'undeliverable', 'failed')),
    email_error     TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

-- An owner's alerts, and the count of its active ones that the cap checks.
CREATE INDEX alerts_user_id_mode_idx ON alerts (user_id, mode, is_active);

-- The armings the evaluator follows: active alerts armed since a time. The
-- index is partial, so it holds only active alerts and costs nothing for
-- fired or disabled ones; the rowid (id) is in it implicitly. ArmedAlerts
-- from the beginning of time reads the table in id order instead.
CREATE INDEX alerts_armed_idx ON alerts (armed_at) WHERE is_active = 1;

-- FiredAlerts: the firings of the last moments, which every node reads
-- each tick to tell its own WebSocket clients of other nodes' firings.
CREATE INDEX alerts_triggered_idx ON alerts (triggered_at) WHERE triggered_at IS NOT NULL;

-- An owner's webhook endpoints. events is the subscribed event types,
-- comma-separated (event types hold no comma).
CREATE TABLE webhooks (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    mode            TEXT    NOT NULL CHECK (mode IN ('live', 'test')),
    url             TEXT    NOT NULL,
    events          TEXT    NOT NULL DEFAULT '',
    description     TEXT    NOT NULL DEFAULT '',
    secret          TEXT    NOT NULL,
    enabled         INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    disabled_reason TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE INDEX webhooks_user_id_mode_idx ON webhooks (user_id, mode);

-- The outbox, and the log of what became of each delivery: one event bound
-- for one webhook endpoint (endpoint_id) or one owner's inbox (e-mail,
-- endpoint_id NULL). alert_id is not a foreign key: the log outlives the
-- alert; armed_seq is the arming whose firing it is, so that a late e-mail
-- outcome does not touch a later arming's e-mail status. An endpoint's log
-- goes with it. lease_until is set while a worker holds the delivery.
CREATE TABLE deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT    NOT NULL CHECK (kind IN ('webhook', 'email')),
    user_id          INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    mode             TEXT    NOT NULL CHECK (mode IN ('live', 'test')),
    alert_id         INTEGER,
    armed_seq        INTEGER,
    endpoint_id      INTEGER REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id         TEXT    NOT NULL,
    event_type       TEXT    NOT NULL,
    payload          BLOB    NOT NULL,
    status           TEXT    NOT NULL
        CHECK (status IN ('pending', 'delivered', 'failed', 'undeliverable')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL,
    lease_until      INTEGER,
    last_attempt_at  INTEGER,
    last_status_code INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT    NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    delivered_at     INTEGER,
    CHECK ((kind = 'webhook') = (endpoint_id IS NOT NULL))
);

-- What ClaimDeliveries reads: pending deliveries of a kind, oldest due
-- first. Partial, so the delivered, failed and undeliverable rows of the
-- log cost it nothing.
CREATE INDEX deliveries_due_idx ON deliveries (kind, next_attempt_at, id) WHERE status = 'pending';

-- An endpoint's log, newest first; it also serves the cascade from webhooks
-- and RecordAttempt's failing of an endpoint's pending deliveries.
CREATE INDEX deliveries_endpoint_idx ON deliveries (endpoint_id, created_at DESC, id DESC);
