-- Compacts the closed level-0 range [$1, $2) into level 1 (queen.sidecar_compact,
-- migration 0011); the hashes compacted, or -1 when the range was not level
-- 0 any more. Run under a short lock_timeout (sidecar_lock_timeout).
SELECT queen.sidecar_compact($1::timestamptz, $2::timestamptz)
