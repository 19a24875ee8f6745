-- The ranges of log_txn_hashes a broker keeps ready (SPEC.md §7): [lo, hi)
-- with lo a multiple of $1 seconds since the epoch, covering PostgreSQL's
-- clock now through now + 2 spans (three ranges), oldest first.
SELECT to_timestamp((b + k) * $1::bigint) AS lo,
       to_timestamp((b + k + 1) * $1::bigint) AS hi
  FROM (SELECT floor(extract(epoch FROM clock_timestamp()) / $1::bigint)::bigint AS b) n,
       generate_series(0, 2) AS k
 ORDER BY k
