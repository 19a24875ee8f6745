-- How many queues still keep rows of range $1 (upper bound $2) now: those
-- without retentionSeconds, or whose retention reaches past $2 (migration
-- 0010, queen.segment_range_keepers).
SELECT queen.segment_range_keepers($1::text, $2::timestamptz, clock_timestamp())
