-- The closed level-1 tables (migration 0023: a newer one exists, so no
-- range joins them) of two ranges or more whose merged index (migration
-- 0027) is not listed complete: not merged yet, part-way, or emptied by a
-- crash or a failover. Newest first (the one lookups will read longest), at most $1.
SELECT t.wide
  FROM queen.sidecar_tables t
 WHERE t.ranges >= 2
   AND EXISTS (SELECT 1 FROM queen.sidecar_tables n WHERE n.wide > t.wide)
   AND NOT EXISTS (SELECT 1 FROM queen.hash_merged_alive a WHERE a.wide = t.wide AND a.complete)
 ORDER BY t.wide DESC
 LIMIT $1
