-- Writes the next step of the merged index of the closed level-1 table $1,
-- about $2 hashes (queen.sidecar_merge, migration 0027): the hashes indexed
-- and whether the index is complete; no row when there is nothing to do.
-- Run under a short lock_timeout (sidecar_lock_timeout).
SELECT m.hashes, m.complete FROM queen.sidecar_merge($1::timestamptz, $2::bigint) m
