-- E-mail addresses are compared by coinpulse.EmailKey (Unicode NFC, then
-- Unicode lower case), kept in email_key: the index on lower(email) folded
-- ASCII only, so "Ärger@example.com" and "ärger@example.com" were two
-- accounts. ASCII addresses are keyed here; the others, left NULL, by
-- keyEmails, which runs after this file in the same transaction. Every
-- insert sets email_key.
ALTER TABLE users ADD COLUMN email_key TEXT;
UPDATE users SET email_key = lower(email) WHERE length(email) = length(CAST(email AS BLOB));
DROP INDEX users_email_lower_key;
CREATE UNIQUE INDEX users_email_key ON users (email_key);
