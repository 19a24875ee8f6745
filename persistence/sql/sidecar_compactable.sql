-- The level-0 sidecar ranges (migration 0011) the retention leader works on,
-- oldest first: those closed at least $1 seconds ago on PostgreSQL's clock
-- (to compact into level 1) and those a crash emptied (lost: no
-- sidecar_alive row), closed or not. closed and lost say which.
SELECT r.lo, r.hi,
       r.hi <= clock_timestamp() - make_interval(secs => $1::float8) AS closed,
       NOT EXISTS (SELECT 1 FROM queen.sidecar_alive a WHERE a.lo = r.lo) AS lost
  FROM queen.sidecar_ranges r
 WHERE r.bits IS NULL
   AND (r.hi <= clock_timestamp() - make_interval(secs => $1::float8)
        OR NOT EXISTS (SELECT 1 FROM queen.sidecar_alive a WHERE a.lo = r.lo))
 ORDER BY r.lo
