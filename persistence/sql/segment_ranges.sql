-- The time ranges of segments_timed (migration 0010), oldest first: name,
-- lower and upper bound (read from the catalog's partition bounds). The
-- DEFAULT partition is not listed.
SELECT c.relname::text AS name,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS lo,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS hi
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'queen.segments_timed'::regclass
   AND c.relname <> 'segments_timed_default'
 ORDER BY 2
