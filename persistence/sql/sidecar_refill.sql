-- Re-fills the level-0 range [$1, $2) that a crash emptied from the hashes of
-- its segments and lists it alive (queen.sidecar_refill, migration 0011); the rows
-- written.
SELECT queen.sidecar_refill($1::timestamptz, $2::timestamptz)
