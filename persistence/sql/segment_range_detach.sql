-- Detaches a range of segments_timed without blocking pushes or reads
-- (migration 0010): a SHARE UPDATE EXCLUSIVE lock on the parent, then a
-- wait for the transactions that may still read the range. Not in a
-- transaction block. Formatted with the range's quoted, schema-qualified
-- name, then CONCURRENTLY, or FINALIZE to complete an interrupted detach.
ALTER TABLE queen.segments_timed DETACH PARTITION %s %s
