-- Metering: each account's recent calls are the newest by the call's time,
-- id (the order batches were written in) breaking ties. Nodes flush their
-- batches up to a second apart, so a batch written later can hold older
-- calls: RecordCalls prunes, and Usage reads, in (at DESC, id DESC) order,
-- which this index serves instead of the one in id order.
CREATE INDEX api_calls_user_id_at_idx ON api_calls (user_id, at DESC, id DESC);
DROP INDEX api_calls_user_id_idx;
