-- Dashboard sessions and login throttling.
--
-- Times are INTEGER microseconds since the Unix epoch (UTC).

-- A logged-in browser. id is the hex SHA-256 of the token the browser
-- holds in its cookie: the token itself is never stored. csrf is the token
-- every state-changing request of the session must carry.
CREATE TABLE sessions (
    id         TEXT    PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX sessions_expires_at_idx ON sessions (expires_at);
CREATE INDEX sessions_user_id_idx ON sessions (user_id);

-- Failed logins per key ("email:<lower e-mail>" or "ip:<address>") in a
-- fixed window that starts at window_start.
CREATE TABLE login_throttle (
    key          TEXT    PRIMARY KEY,
    failures     INTEGER NOT NULL,
    window_start INTEGER NOT NULL
) WITHOUT ROWID;
