-- Deletes up to $1 level-0 rows of the sidecar (log_txn_hashes) older than
-- the largest floor over all queues, GREATEST(dedupWindowSeconds,
-- completedRetentionSeconds, $2 seconds - the floor) (SPEC.md §7): the rows
-- of the DEFAULT partition (they land there only when their time range did
-- not exist yet) and of any range that starts before the cutoff (none in
-- production, where a range is compacted seconds after it closes; tests
-- age rows into the past). The ranges starting after the cutoff are pruned
-- when the scan starts (the cutoff is an InitPlan's value). A compacted
-- range's entries go with the range (sidecar_ranges_expired). Returns the
-- rows deleted (twice, as the other retention statements return rows and
-- messages). Rows are deleted by (tableoid, ctid): a ctid alone is not
-- unique across partitions. No partition row lock.
WITH pick AS MATERIALIZED (
    SELECT y.tableoid, y.ctid
      FROM queen.log_txn_hashes y
     WHERE y.created_at < (SELECT clock_timestamp() - make_interval(secs => GREATEST(queen.sidecar_floor(), $2::float8)))
     LIMIT $1::bigint
), d AS (
    DELETE FROM queen.log_txn_hashes x
     WHERE x.ctid = ANY (ARRAY(SELECT ctid FROM pick))
       AND (x.tableoid, x.ctid) IN (SELECT tableoid, ctid FROM pick)
    RETURNING 1
)
SELECT count(*), count(*) FROM d
