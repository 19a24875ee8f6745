-- Detaches a range of segments_timed without blocking pushes or reads
-- (migration 0010): a SHARE UPDATE EXCLUSIVE lock on the parent, then a
-- wait for the transactions that may still read the range. Not in a
-- transaction block. {{range}} is replaced by the range's sanitized,
-- schema-qualified name (identifiers cannot be parameters, and a concurrent
-- detach cannot run in a function). segment_range_finalize completes an
-- interrupted detach.
ALTER TABLE queen.segments_timed DETACH PARTITION {{range}} CONCURRENTLY
