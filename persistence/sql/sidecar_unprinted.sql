-- The compacted sidecar ranges whose fingerprints are not complete
-- (migration 0021: compacted by a release before 0.4.4, or emptied by a
-- crash or a failover), newest first (a hydration needs the ranges its
-- holes are in, the newest of the window first), at most $1.
SELECT r.lo
  FROM queen.sidecar_ranges r
 WHERE r.bits IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM queen.hash_prints_alive a WHERE a.lo = r.lo)
 ORDER BY r.lo DESC
 LIMIT $1
