-- The time ranges of segments_timed (migration 0010), oldest first: name,
-- lower and upper bound.
SELECT name, lo, hi FROM queen.segment_ranges ORDER BY lo
