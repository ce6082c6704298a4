-- E-mail addresses are compared by coinpulse.EmailKey (Unicode NFC, then
-- Unicode lower case), kept in email_key: the index on lower(email) folded
-- ASCII only, so "Ärger@example.com" and "ärger@example.com" were two
-- accounts. The Go step keyEmails keys every account (internal/sqlite);
-- where two accounts' addresses now have one key, the first account keeps
-- it (migrate.KeyEmails).
ALTER TABLE users ADD COLUMN email_key TEXT;
-- go: keyEmails
DROP INDEX users_email_lower_key;
CREATE UNIQUE INDEX users_email_key ON users (email_key);
-- SQLite cannot make an added column NOT NULL; this does the same for
-- inserts, such as a Coinpulse of before version 12 still running.
CREATE TRIGGER users_email_key_required BEFORE INSERT ON users WHEN NEW.email_key IS NULL
BEGIN
    SELECT RAISE(ABORT, 'users.email_key is required (schema version 12): stop Coinpulse processes older than this database');
END;
