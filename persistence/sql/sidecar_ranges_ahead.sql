-- What the sidecar's range planner (persistence.planRanges, from
-- ensureSidecarRanges) starts from: PostgreSQL's clock now (SPEC.md §7),
-- then the ranges of log_txn_hashes listed in queen.sidecar_ranges that end
-- after it and whose table exists (lo and hi; one row of NULLs when there
-- are none), oldest first. A listed range whose table is gone is planned
-- again (queen.sidecar_create_range makes the table and keeps the listing).
SELECT c.now, r.lo, r.hi
  FROM (SELECT clock_timestamp() AS now) c
  LEFT JOIN queen.sidecar_ranges r
    ON r.hi > c.now
   AND to_regclass(format('queen.%I', queen.sidecar_range_name(r.lo))) IS NOT NULL
 ORDER BY r.lo
