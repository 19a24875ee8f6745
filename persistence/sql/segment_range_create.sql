-- Creates the range [$1, $2) of segments_timed (migration 0010); true when
-- it created it, false when it existed. Run under a short lock_timeout.
SELECT queen.segment_create_range($1::timestamptz, $2::timestamptz)
