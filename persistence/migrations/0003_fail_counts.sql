-- Failure counts per message (SPEC.md §4): a consumer row counts the failed
-- acks of every message above its cursor, not only of the lowest one, so a
-- batch whose every message fails (a batch nack) brings each of them to the
-- DLQ after retryLimit + 1 deliveries. fail_counts maps an offset (as text)
-- to its failures so far; offsets at or below the cursor are dropped.
ALTER TABLE queen.consumers ADD COLUMN fail_counts jsonb NOT NULL DEFAULT '{}';
UPDATE queen.consumers
   SET fail_counts = jsonb_build_object(retry_offset::text, retry_count)
 WHERE retry_offset IS NOT NULL AND retry_count > 0;
ALTER TABLE queen.consumers DROP COLUMN retry_offset, DROP COLUMN retry_count;
