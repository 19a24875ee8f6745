-- Drops the sidecar range [$1, $2) (its level-1 table, or its level-0
-- table when never compacted) when still unused; true when dropped. Run
-- under a short lock_timeout (sidecar_lock_timeout).
SELECT queen.sidecar_expire($1::timestamptz, $2::timestamptz)
