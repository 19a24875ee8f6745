-- Drops range $1 of segments_timed, whose upper bound is $2, when every row
-- in it is past its queue's retentionSeconds (migration 0010); true when it
-- dropped it. Run under a short lock_timeout.
SELECT queen.segment_drop_range($1::text, $2::timestamptz)
