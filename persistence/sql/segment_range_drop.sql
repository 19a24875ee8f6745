-- Drops range $1 ([$2, $3)), detached from segments_timed by the caller,
-- when every row in it is past its queue's retentionSeconds, else attaches
-- it back (migration 0010); true when it dropped it. Run under a short
-- lock_timeout.
SELECT queen.segment_drop_detached($1::text, $2::timestamptz, $3::timestamptz)
