-- E-mail addresses are compared by coinpulse.EmailKey (Unicode NFC, then
-- Unicode lower case), kept in email_key: the index on lower(email) folded
-- by the database's locale (ASCII only under C, 'I' to 'ı' under a
-- Turkish one), where SQLite and the dashboard's throttle folded
-- otherwise. The Go step keyEmails keys every account (internal/postgres);
-- where two accounts' addresses now have one key, the first account keeps
-- it (migrate.KeyEmails). NOT NULL: a Coinpulse of before version 12 still
-- running cannot add an account without a key.
ALTER TABLE users ADD COLUMN email_key TEXT;
-- go: keyEmails
DROP INDEX users_email_lower_key;
CREATE UNIQUE INDEX users_email_key ON users (email_key);
ALTER TABLE users ALTER COLUMN email_key SET NOT NULL;
