-- E-mail addresses are compared by coinpulse.EmailKey (Unicode NFC, then
-- Unicode lower case), kept in email_key: the index on lower(email) folded
-- by the database's locale (ASCII only under C), where the dashboard's
-- throttle and SQLite folded otherwise. ASCII addresses are keyed here
-- (translate, not lower: a Turkish locale's lower('I') is not 'i'); the
-- others, left NULL, by keyEmails, which runs after this file in the same
-- transaction. Every insert sets email_key.
ALTER TABLE users ADD COLUMN email_key TEXT;
UPDATE users SET email_key = translate(email, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
    WHERE octet_length(email) = char_length(email);
DROP INDEX users_email_lower_key;
CREATE UNIQUE INDEX users_email_key ON users (email_key);
